//! kubeforge-scaffold writes operator projects on `kubeforge-runtime`: what
//! `kubebuilder init`, `create api` and `create webhook` write for Go.
//!
//! Every command reads the project's `PROJECT` file ([`project`]), checks
//! what it is asked for ([`names`]) and computes every file it would write
//! before writing any: bad input writes nothing. Files are of two sorts:
//! **yours**, written once when missing and never touched again (types,
//! controllers, webhooks, tests, `main.rs`, most of `config/`), and
//! **generated**, rewritten by every command from `PROJECT` (the `mod.rs`
//! files listing modules, the default kustomization, the samples'
//! kustomization). What comes from the code — CRDs, RBAC, webhook
//! configurations — is written by the project's own binary
//! (`make manifests`, `kubeforge_runtime::manifests`).

pub mod names;
pub mod project;
mod render;

use std::path::{Path, PathBuf};

pub use project::{Project, Resource, Source, Webhooks};
pub use render::{FileChange, Plan};

/// Why a scaffold command refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// A name, version, domain or flag is not valid.
    #[error("{what} {value:?} is not valid: {why}")]
    Invalid {
        /// The flag.
        what: String,
        /// What was given.
        value: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// `init` in a folder that already has files.
    #[error("{0} is not empty ({1} is there): run kubeforge init in an empty folder")]
    NotEmpty(PathBuf, String),
    /// A `create` outside a scaffolded project.
    #[error(
        "{0} has no PROJECT file: run kubeforge init first, or run this in the project's folder"
    )]
    NotAProject(PathBuf),
    /// The PROJECT file cannot be read.
    #[error("{path}: {message}")]
    BadProject {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The resource (or its controller or webhook) exists already.
    #[error("{0}")]
    Exists(String),
    /// The request does not make sense as given.
    #[error("{0}")]
    Usage(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl ScaffoldError {
    /// Whether the error is the user's input (exit code 2) rather than
    /// the machine's.
    pub fn is_usage(&self) -> bool {
        !matches!(self, ScaffoldError::Io { .. })
    }
}

/// What `init` is asked for.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// The API groups' suffix (`example.com`).
    pub domain: String,
    /// The repository path (`example.com/memcached-operator`).
    pub repo: String,
    /// The project name; defaults to the repository's last segment.
    pub name: Option<String>,
    /// Where the kubeforge crates come from.
    pub kubeforge: Source,
    /// A `Cargo.lock` to start from (the kubeforge workspace's, so the
    /// project builds with the versions kubeforge is tested with).
    pub lockfile: Option<String>,
}

/// What `create api` is asked for.
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// The group's first label.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// Namespaced (default) or cluster-scoped.
    pub namespaced: bool,
    /// Write the Rust type.
    pub resource: bool,
    /// Write a controller.
    pub controller: bool,
}

/// What `create webhook` is asked for.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// The group's first label.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
    /// A defaulting webhook.
    pub defaulting: bool,
    /// A validating webhook.
    pub validation: bool,
}

/// `kubeforge init` in `dir`: the plan (call [`Plan::apply`] to write).
pub fn init(dir: &Path, o: &InitOptions) -> Result<Plan, ScaffoldError> {
    names::domain(&o.domain)?;
    names::repo(&o.repo)?;
    let name = match &o.name {
        Some(n) => n.clone(),
        None => o.repo.rsplit('/').next().unwrap_or_default().to_string(),
    };
    names::project_name(&name)?;
    if let Ok(entries) = std::fs::read_dir(dir) {
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            // What an empty repository already has is fine.
            .filter(|n| n != ".git" && n != ".gitignore" && n != "README.md" && n != "LICENSE")
            .collect();
        names.sort();
        if let Some(first) = names.first() {
            return Err(ScaffoldError::NotEmpty(dir.to_path_buf(), first.clone()));
        }
    }
    let project = Project {
        layout: project::LAYOUT.to_string(),
        domain: o.domain.clone(),
        repo: o.repo.clone(),
        project_name: name,
        kubeforge: o.kubeforge.clone(),
        resources: Vec::new(),
    };
    let mut plan = render::plan(dir, &project)?;
    if let Some(lock) = &o.lockfile {
        plan.once(dir.join("Cargo.lock"), lock.clone());
    }
    Ok(plan)
}

/// The project at `dir`, once `group`, `version` and `kind` are valid for it.
fn load_checked(
    dir: &Path,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<Project, ScaffoldError> {
    let project = Project::load(dir)?;
    names::group(group, &project.domain)?;
    names::version(version)?;
    names::kind(kind)?;
    Ok(project)
}

/// `kubeforge create api` in the project at `dir`.
pub fn create_api(dir: &Path, o: &ApiOptions) -> Result<Plan, ScaffoldError> {
    let mut project = load_checked(dir, &o.group, &o.version, &o.kind)?;
    if !o.resource && !o.controller {
        return Err(ScaffoldError::Usage(
            "nothing to create: pass --resource (the Rust type), --controller, or both".into(),
        ));
    }
    let full = format!("{}.{}.{} {}", o.kind, o.group, project.domain, o.version);
    let existing: Vec<&Resource> = project.versions_of(&o.group, &o.kind).collect();
    if existing.iter().any(|r| r.version == o.version) {
        return Err(ScaffoldError::Exists(format!(
            "{full} exists already (see PROJECT); choose another kind or version"
        )));
    }
    if o.controller && existing.iter().any(|r| r.controller) {
        return Err(ScaffoldError::Exists(format!(
            "kind {} has a controller already (one per kind, for its storage version): run again without --controller",
            o.kind
        )));
    }
    if let Some(first) = existing.first()
        && first.namespaced != o.namespaced
    {
        return Err(ScaffoldError::Usage(format!(
            "{} is {} in {}; every version of a kind has one scope",
            o.kind,
            if first.namespaced {
                "namespaced"
            } else {
                "cluster-scoped"
            },
            first.version
        )));
    }
    if !o.resource && existing.is_empty() {
        return Err(ScaffoldError::Usage(format!(
            "a controller needs its kind's type: pass --resource too (no version of {} exists)",
            o.kind
        )));
    }
    let storage = existing.is_empty();
    project.resources.push(Resource {
        group: o.group.clone(),
        version: o.version.clone(),
        kind: o.kind.clone(),
        namespaced: o.namespaced,
        api: o.resource,
        controller: o.controller,
        storage,
        webhooks: Webhooks::default(),
    });
    render::plan(dir, &project)
}

/// `kubeforge create webhook` in the project at `dir`.
pub fn create_webhook(dir: &Path, o: &WebhookOptions) -> Result<Plan, ScaffoldError> {
    let mut project = load_checked(dir, &o.group, &o.version, &o.kind)?;
    if !o.defaulting && !o.validation {
        return Err(ScaffoldError::Usage(
            "no webhook asked for: pass --defaulting, --programmatic-validation, or both".into(),
        ));
    }
    let domain = project.domain.clone();
    let r = project
        .resources
        .iter_mut()
        .find(|r| r.group == o.group && r.version == o.version && r.kind == o.kind && r.api)
        .ok_or_else(|| {
            ScaffoldError::Usage(format!(
                "{}/{} {}.{domain} has no Rust type: run kubeforge create api --group {} --version {} --kind {} --resource first",
                o.group, o.version, o.kind, o.group, o.version, o.kind
            ))
        })?;
    if r.webhooks.defaulting || r.webhooks.validation {
        return Err(ScaffoldError::Exists(format!(
            "{}/{} {} has webhooks already (src/webhooks): edit them there",
            o.group, o.version, o.kind
        )));
    }
    r.webhooks = Webhooks {
        defaulting: o.defaulting,
        validation: o.validation,
    };
    render::plan(dir, &project)
}

/// Every file the project at `dir` implies, from its `PROJECT` alone: what
/// the last `kubeforge create` wrote. [`Plan::drift`] of it lists what is
/// no longer so.
pub fn regenerate(dir: &Path) -> Result<Plan, ScaffoldError> {
    render::plan(dir, &Project::load(dir)?)
}

/// The project folder at or above `start` (the first with a PROJECT file).
pub fn find_project(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(project::FILE).is_file())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kf-scaffold-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }

    fn init_opts() -> InitOptions {
        InitOptions {
            domain: "example.com".into(),
            repo: "example.com/memcached-operator".into(),
            name: None,
            kubeforge: Source::Path("/opt/kubeforge".into()),
            lockfile: None,
        }
    }

    /// The repository's Memcached sample was made by `kubeforge init` and
    /// `kubeforge create api`: regenerating it from its PROJECT changes
    /// nothing (so a scaffold change that would touch it shows up here,
    /// and the sample is re-run with the scaffold).
    #[test]
    fn the_memcached_sample_is_what_the_scaffold_regenerates() {
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../operators/memcached-operator");
        let plan = regenerate(&sample).expect("the sample's PROJECT");
        assert!(
            plan.paths()
                .any(|p| p.ends_with("src/controllers/memcached.rs")),
            "the plan covers the controller"
        );
        let drift = plan.drift();
        assert!(
            drift.is_empty(),
            "{drift:?} differ from what kubeforge create writes: re-run `kubeforge create api` in the sample, or update it"
        );
    }

    #[test]
    fn drift_lists_changed_generated_files_and_missing_ones() {
        let dir = tmp("drift");
        init(&dir, &init_opts())
            .expect("init")
            .apply()
            .expect("write");
        create_api(&dir, &api("Memcached", "v1alpha1", true))
            .expect("api")
            .apply()
            .expect("write");
        assert!(regenerate(&dir).expect("plan").drift().is_empty());
        // Yours: edited is fine, gone is not.
        std::fs::write(dir.join("src/controllers/memcached.rs"), "// mine\n").expect("edit");
        assert!(regenerate(&dir).expect("plan").drift().is_empty());
        std::fs::remove_file(dir.join("tests/memcached.rs")).expect("rm");
        std::fs::write(dir.join("src/api/mod.rs"), "// edited\n").expect("edit");
        let plan = regenerate(&dir).expect("plan");
        let drift: Vec<PathBuf> = plan.drift().into_iter().map(Path::to_path_buf).collect();
        assert_eq!(
            drift,
            vec![dir.join("src/api/mod.rs"), dir.join("tests/memcached.rs")]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn api(kind: &str, version: &str, controller: bool) -> ApiOptions {
        ApiOptions {
            group: "cache".into(),
            version: version.into(),
            kind: kind.into(),
            namespaced: true,
            resource: true,
            controller,
        }
    }

    #[test]
    fn later_commands_keep_user_files_and_regenerate_module_lists() {
        let dir = tmp("rerun");
        init(&dir, &init_opts())
            .and_then(|p| p.apply())
            .expect("init");
        create_api(&dir, &api("Memcached", "v1alpha1", true))
            .and_then(|p| p.apply())
            .expect("create api");
        let mine = dir.join("src/controllers/memcached.rs");
        std::fs::write(&mine, "// mine\n").expect("edit");
        let changes = create_api(&dir, &api("MemcachedBackup", "v1alpha1", true))
            .and_then(|p| p.apply())
            .expect("second kind");
        assert!(changes.contains(&FileChange::Kept(mine.clone())));
        assert_eq!(std::fs::read_to_string(&mine).expect("read"), "// mine\n");
        let m = std::fs::read_to_string(dir.join("src/controllers/mod.rs")).expect("mod.rs");
        assert!(
            m.contains("pub mod memcached;") && m.contains("pub mod memcached_backup;"),
            "{m}"
        );
        let p = Project::load(&dir).expect("PROJECT");
        assert_eq!(p.resources.len(), 2);
        assert!(p.resources.iter().all(|r| r.storage));
        // A second version is not the storage version; both are merged.
        create_api(&dir, &api("Memcached", "v1", false))
            .and_then(|p| p.apply())
            .expect("second version");
        let crds = std::fs::read_to_string(dir.join("src/api/mod.rs")).expect("api");
        assert!(
            crds.contains("merge_crds") && crds.contains("\"v1alpha1\""),
            "{crds}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn refusals_write_nothing() {
        let dir = tmp("refuse");
        std::fs::write(dir.join("main.go"), "package main\n").expect("write");
        assert!(matches!(
            init(&dir, &init_opts()),
            Err(ScaffoldError::NotEmpty(_, ref f)) if f == "main.go"
        ));
        std::fs::remove_file(dir.join("main.go")).expect("rm");
        init(&dir, &init_opts())
            .and_then(|p| p.apply())
            .expect("init");
        create_api(&dir, &api("Memcached", "v1alpha1", true))
            .and_then(|p| p.apply())
            .expect("create api");
        let project = std::fs::read_to_string(dir.join("PROJECT")).expect("PROJECT");
        for (err, want) in [
            (
                create_api(&dir, &api("Memcached", "v1alpha1", false)),
                "exists already",
            ),
            (
                create_api(&dir, &api("Memcached", "v2", true)),
                "has a controller already",
            ),
            (create_api(&dir, &api("memcached", "v2", false)), "--kind"),
            (create_api(&dir, &api("Other", "v1.0", false)), "--version"),
            (
                create_webhook(
                    &dir,
                    &WebhookOptions {
                        group: "cache".into(),
                        version: "v9".into(),
                        kind: "Memcached".into(),
                        defaulting: true,
                        validation: false,
                    },
                ),
                "has no Rust type",
            ),
        ] {
            let e = err.expect_err(want);
            assert!(e.is_usage() && e.to_string().contains(want), "{e}");
        }
        assert_eq!(
            std::fs::read_to_string(dir.join("PROJECT")).expect("PROJECT"),
            project
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
