apiVersion: v1
kind: ServiceAccount
metadata:
  name: controller-manager
  namespace: system
