//! The `PROJECT` file: what was scaffolded (domain, repository, name and
//! each resource with its API, controller and webhooks), read by every
//! later command so that the generated files are a function of it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ScaffoldError;

/// The file's name at the project's root.
pub const FILE: &str = "PROJECT";
/// The layout this scaffold writes.
pub const LAYOUT: &str = "kubeforge.rs/v1";

/// A scaffolded project.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// The scaffold's layout version.
    pub layout: String,
    /// The API groups' suffix.
    pub domain: String,
    /// The repository path.
    pub repo: String,
    /// The project (and crate) name.
    pub project_name: String,
    /// Where the kubeforge crates come from.
    pub kubeforge: Source,
    /// The resources, in the order they were created.
    #[serde(default)]
    pub resources: Vec<Resource>,
}

/// Where the generated project gets `kubeforge-runtime` and
/// `kubeforge-testenv`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// A checkout of the kubeforge repository.
    Path(String),
    /// A git repository (and optional revision).
    Git {
        /// The URL.
        url: String,
        /// A branch, tag or commit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rev: Option<String>,
    },
}

/// One group/version/kind of the project.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    /// The group's first label (`cache`).
    pub group: String,
    /// The version (`v1alpha1`).
    pub version: String,
    /// The kind (`Memcached`).
    pub kind: String,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Whether the Rust type was scaffolded.
    pub api: bool,
    /// Whether a controller was scaffolded (one per kind).
    pub controller: bool,
    /// Whether this version is the kind's storage version (the first
    /// version scaffolded for the kind).
    pub storage: bool,
    /// The webhooks scaffolded for it.
    #[serde(default)]
    pub webhooks: Webhooks,
}

/// A resource's webhooks.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Webhooks {
    /// A defaulting (mutating) webhook.
    #[serde(default)]
    pub defaulting: bool,
    /// A validating webhook.
    #[serde(default)]
    pub validation: bool,
}

impl Project {
    /// Read `dir/PROJECT`.
    pub fn load(dir: &Path) -> Result<Project, ScaffoldError> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ScaffoldError::NotAProject(dir.to_path_buf())
            } else {
                ScaffoldError::Io {
                    path: path.clone(),
                    source: e,
                }
            }
        })?;
        let body: String = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let p: Project = serde_saphyr::from_str(&body).map_err(|e| ScaffoldError::BadProject {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if p.layout != LAYOUT {
            return Err(ScaffoldError::BadProject {
                path,
                message: format!(
                    "layout {:?} is not {LAYOUT:?}, the one this kubeforge writes",
                    p.layout
                ),
            });
        }
        Ok(p)
    }

    /// The file's text.
    pub fn render(&self) -> Result<String, ScaffoldError> {
        let body = serde_saphyr::to_string(self).map_err(|e| ScaffoldError::BadProject {
            path: FILE.into(),
            message: e.to_string(),
        })?;
        Ok(format!(
            "# Written by kubeforge: what was scaffolded. Later `kubeforge create` commands read it.\n{body}"
        ))
    }

    /// The crate name (`memcached_operator`).
    pub fn crate_name(&self) -> String {
        self.project_name.replace('-', "_")
    }

    /// `<group>.<domain>` of `r`.
    pub fn api_group(&self, r: &Resource) -> String {
        format!("{}.{}", r.group, self.domain)
    }

    /// The resources of kind `kind` in group `group`.
    pub fn versions_of<'a>(
        &'a self,
        group: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a Resource> + 'a {
        self.resources
            .iter()
            .filter(move |r| r.group == group && r.kind == kind)
    }
}
