# Written by `make manifests` from the Rust types; do not edit.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: []
