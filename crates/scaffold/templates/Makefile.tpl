# {{name}}: build, test, run and deploy the operator.
# `make help` lists the targets.

# The kubeforge command (scaffolding, `manifests`).
KUBEFORGE ?= kubeforge
KUBECTL ?= kubectl
# The image docker-build makes and deploy runs.
IMG ?= {{name}}:latest

.PHONY: help
help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: manifests
manifests: ## Write config/ from the code: CRDs from the types, RBAC from the controllers, webhooks
	$(KUBEFORGE) manifests

.PHONY: build
build: ## Build the manager
	cargo build --release

.PHONY: test
test: ## Run the tests (an embedded API server; nothing to install)
	cargo test

.PHONY: install
install: manifests ## Install the CRDs into the cluster of KUBECONFIG
	$(KUBECTL) apply -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs (and every custom resource) from the cluster
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: run
run: install ## Run the manager here against the cluster of KUBECONFIG (webhooks with development certificates)
	cargo run -- run --dev-webhooks

.PHONY: docker-build
docker-build: ## Build the image IMG (needs Docker)
	@command -v docker >/dev/null 2>&1 || { echo "docker-build needs Docker, which is not installed here (docker is not on PATH). Install Docker, or build the Dockerfile with another builder, e.g.: podman build -t $(IMG) ." >&2; exit 2; }
	docker build -t $(IMG) .

.PHONY: deploy
deploy: manifests ## Deploy the manager (config/default) to the cluster of KUBECONFIG
	$(KUBECTL) apply -k config/default

.PHONY: undeploy
undeploy: ## Remove what deploy created
	$(KUBECTL) delete --ignore-not-found -k config/default
