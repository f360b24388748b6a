# A self-signed issuer and the webhook's serving certificate, in the Secret
# the manager's Deployment mounts (config/manager/manager.yaml).
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: {{name}}-selfsigned-issuer
  namespace: system
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{name}}-serving-cert
  namespace: system
spec:
  dnsNames:
  - {{name}}-webhook-service.{{namespace}}.svc
  - {{name}}-webhook-service.{{namespace}}.svc.cluster.local
  issuerRef:
    kind: Issuer
    name: {{name}}-selfsigned-issuer
  secretName: webhook-server-cert
