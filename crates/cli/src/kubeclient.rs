//! The kube-rs client of the commands that run against any cluster
//! (`kubeforge scheduler`, `kubeforge operator`, `kubeforge webhook`): from `--kubeconfig` when
//! given, else kube-rs's usual inference ($KUBECONFIG, ~/.kube/config,
//! in-cluster service account).

use std::path::Path;

use anyhow::{Context, Result};

/// A client for the cluster `kubeconfig` names, or the inferred one.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no cluster configuration found: pass --kubeconfig, set KUBECONFIG, or run `kubeforge up`",
        )?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}
