//! Writing a project's generated manifests from its code: CRDs from the
//! Rust types (`CustomResourceExt::crd()`), the manager's ClusterRole from
//! [`Manager::permissions`](crate::Manager::permissions), the leader
//! election Role, and the webhook configurations — the `config/` files a
//! kubebuilder-style kustomize layout expects, each headed by a
//! do-not-edit line. `kubeforge manifests` (and `make manifests`) run a
//! project's own binary, which calls [`write()`].
//!
//! A file whose content is unchanged is not rewritten, so timestamps (and
//! `make`) see only real changes.

use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;

/// Why the manifests could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// An object did not render as YAML.
    #[error("rendering {what} as YAML: {message}")]
    Yaml {
        /// What was being rendered.
        what: String,
        /// The serializer's message.
        message: String,
    },
}

/// The first line of every generated file.
pub const HEADER: &str = "# Generated from the code by `make manifests`; do not edit.";

/// What a project generates under `config/`.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    /// The CRDs (`config/crd/bases/<group>_<plural>.yaml`, listed in
    /// `config/crd/kustomization.yaml`).
    pub crds: Vec<CustomResourceDefinition>,
    /// The manager's ClusterRole (`config/rbac/role.yaml`).
    pub role: Option<ClusterRole>,
    /// The leader election Role (`config/rbac/leader_election_role.yaml`).
    pub leader_election_role: Option<Role>,
    /// The mutating webhooks (`config/webhook/manifests.yaml`).
    pub mutating: Vec<MutatingWebhookConfiguration>,
    /// The validating webhooks (`config/webhook/manifests.yaml`).
    pub validating: Vec<ValidatingWebhookConfiguration>,
}

/// `objects` as one YAML stream under [`HEADER`].
pub fn yaml_stream<T: Serialize>(what: &str, objects: &[T]) -> Result<String, ManifestError> {
    let mut out = String::from(HEADER);
    out.push('\n');
    for o in objects {
        let body = serde_saphyr::to_string(o).map_err(|e| ManifestError::Yaml {
            what: what.to_string(),
            message: e.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&body);
        if !body.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Write `text` to `path` unless it already holds exactly that; returns
/// whether it wrote.
pub fn write_if_changed(path: &Path, text: &str) -> Result<bool, ManifestError> {
    let io = |source| ManifestError::Io {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::read_to_string(path).is_ok_and(|have| have == text) {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    // Through a temporary file: an interrupted run leaves the old file.
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(true)
}

/// The file name kubebuilder gives a CRD: `<group>_<plural>.yaml`.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The files `m` makes under `config` (a project's `config/` directory),
/// each with its text, in a fixed order.
pub fn render(config: &Path, m: &Manifests) -> Result<Vec<(PathBuf, String)>, ManifestError> {
    let mut files = Vec::new();
    let mut names = Vec::new();
    for crd in &m.crds {
        let name = crd_file_name(crd);
        files.push((
            config.join("crd/bases").join(&name),
            yaml_stream("a CRD", std::slice::from_ref(crd))?,
        ));
        names.push(name);
    }
    names.sort();
    let mut kustomization = format!(
        "{HEADER}\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
    );
    for n in &names {
        kustomization.push_str(&format!("- bases/{n}\n"));
    }
    if names.is_empty() {
        kustomization = kustomization.replace("resources:\n", "resources: []\n");
    }
    files.push((config.join("crd/kustomization.yaml"), kustomization));
    if let Some(role) = &m.role {
        files.push((
            config.join("rbac/role.yaml"),
            yaml_stream("the ClusterRole", std::slice::from_ref(role))?,
        ));
    }
    if let Some(role) = &m.leader_election_role {
        files.push((
            config.join("rbac/leader_election_role.yaml"),
            yaml_stream("the leader election Role", std::slice::from_ref(role))?,
        ));
    }
    if !m.mutating.is_empty() || !m.validating.is_empty() {
        let mut text = yaml_stream("the mutating webhooks", &m.mutating)?;
        let validating = yaml_stream("the validating webhooks", &m.validating)?;
        text.push_str(
            validating
                .strip_prefix(HEADER)
                .unwrap_or(&validating)
                .trim_start(),
        );
        files.push((config.join("webhook/manifests.yaml"), text));
    }
    Ok(files)
}

/// Write `m` under `config` (a project's `config/` directory); returns the
/// files that changed.
pub fn write(config: &Path, m: &Manifests) -> Result<Vec<PathBuf>, ManifestError> {
    let mut changed = Vec::new();
    for (path, text) in render(config, m)? {
        if write_if_changed(&path, &text)? {
            changed.push(path);
        }
    }
    Ok(changed)
}

/// The files under `config` that do not hold what `m` renders (missing or
/// different): what a test asserts is empty so that `config/` cannot
/// drift from the code between two `make manifests`.
pub fn stale(config: &Path, m: &Manifests) -> Result<Vec<PathBuf>, ManifestError> {
    Ok(render(config, m)?
        .into_iter()
        .filter(|(path, text)| std::fs::read_to_string(path).ok().as_deref() != Some(text.as_str()))
        .map(|(path, _)| path)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::{self, Permissions};

    #[test]
    fn writes_once_and_skips_unchanged_files() {
        let dir = std::env::temp_dir().join(format!("kf-manifests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut p = Permissions::new();
        p.allow("", "pods", permissions::READ);
        let m = Manifests {
            role: Some(p.cluster_role("manager-role")),
            leader_election_role: Some(permissions::leader_election().role("leader", "system")),
            ..Manifests::default()
        };
        let first = write(&dir, &m).expect("write");
        assert_eq!(first.len(), 3, "{first:?}");
        let role = std::fs::read_to_string(dir.join("rbac/role.yaml")).expect("role");
        assert!(role.starts_with(HEADER), "{role}");
        assert!(
            role.contains("kind: ClusterRole") && role.contains("- pods"),
            "{role}"
        );
        let crds = std::fs::read_to_string(dir.join("crd/kustomization.yaml")).expect("kust");
        assert!(crds.contains("resources: []"), "{crds}");
        assert!(write(&dir, &m).expect("again").is_empty());
        assert!(stale(&dir, &m).expect("compare").is_empty());
        std::fs::write(dir.join("rbac/role.yaml"), "edited\n").expect("edit");
        assert_eq!(
            stale(&dir, &m).expect("compare"),
            vec![dir.join("rbac/role.yaml")]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
