# config/default with cert-manager making the webhook certificate and
# injecting its CA into the webhook configurations (for clusters that run
# cert-manager): kubectl apply -k config/overlays/cert-manager
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {{namespace}}
resources:
- ../../default
- certificate.yaml
patches:
- target:
    group: admissionregistration.k8s.io
    kind: MutatingWebhookConfiguration
  patch: |-
    - op: add
      path: /metadata/annotations
      value:
        cert-manager.io/inject-ca-from: {{namespace}}/{{name}}-serving-cert
- target:
    group: admissionregistration.k8s.io
    kind: ValidatingWebhookConfiguration
  patch: |-
    - op: add
      path: /metadata/annotations
      value:
        cert-manager.io/inject-ca-from: {{namespace}}/{{name}}-serving-cert
