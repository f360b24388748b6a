[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

# A project of its own (also when created inside another Cargo workspace).
[workspace]

[dependencies]
anyhow = "{{v:anyhow}}"
k8s-openapi = { version = "{{v:k8s-openapi}}", features = ["v1_33", "schemars"] }
kube = { version = "{{v:kube}}", default-features = false, features = ["client", "config", "runtime", "derive", "admission", "rustls-tls", "ring"] }
kubeforge-runtime = {{dep:kubeforge-runtime}}
schemars = "{{v:schemars}}"
serde = { version = "{{v:serde}}", features = ["derive"] }
serde_json = "{{v:serde_json}}"
tokio = { version = "{{v:tokio}}", features = ["rt-multi-thread", "macros", "signal", "time", "sync"] }
tracing = "{{v:tracing}}"
tracing-subscriber = { version = "{{v:tracing-subscriber}}", default-features = false, features = ["fmt", "env-filter", "ansi"] }

[dev-dependencies]
kubeforge-testenv = {{dep:kubeforge-testenv}}

# Quicker builds and smaller test binaries: line tables only for this
# crate, no debug info for dependencies (every test binary links them all).
[profile.dev]
debug = "line-tables-only"

[profile.dev.package."*"]
debug = false
