# Written by `make manifests` from src/webhooks; do not edit.
