//! `kubeforge init`, `kubeforge create api|webhook` and `kubeforge
//! manifests`: operator projects on kubeforge-runtime
//! ([`kubeforge_scaffold`]), without an async runtime (they only write
//! files, or run the project's own binary).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use kubeforge_scaffold::{
    ApiOptions, FileChange, InitOptions, Plan, ScaffoldError, Source, WebhookOptions,
};

/// `kubeforge init`.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// The suffix of the project's API groups, e.g. example.com.
    #[arg(long)]
    domain: String,
    /// The repository path, e.g. example.com/memcached-operator.
    #[arg(long)]
    repo: String,
    /// The project name (default: the repository's last segment).
    #[arg(long)]
    name: Option<String>,
    /// Use the kubeforge crates from this checkout (default: the one this
    /// kubeforge was built from).
    #[arg(long, conflicts_with = "kubeforge_git")]
    kubeforge_path: Option<PathBuf>,
    /// Use the kubeforge crates from this git repository instead (what a
    /// container build needs).
    #[arg(long)]
    kubeforge_git: Option<String>,
    /// The git branch, tag or commit with --kubeforge-git.
    #[arg(long, requires = "kubeforge_git")]
    kubeforge_rev: Option<String>,
    /// The folder to create the project in (default: the current one).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

/// `kubeforge create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(subcommand)]
    what: CreateCommand,
}

#[derive(Subcommand, Debug)]
enum CreateCommand {
    /// A kind: its Rust type (--resource) and a controller (--controller).
    Api(ApiArgs),
    /// Defaulting and validating webhooks for a kind's version.
    Webhook(WebhookArgs),
}

/// The group/version/kind flags.
#[derive(Args, Debug)]
struct Gvk {
    /// The group's first label, e.g. cache (the API group is GROUP.DOMAIN).
    #[arg(long)]
    group: String,
    /// The version, e.g. v1alpha1.
    #[arg(long)]
    version: String,
    /// The kind, e.g. Memcached.
    #[arg(long)]
    kind: String,
    /// The project folder (default: the one holding PROJECT, from the current folder up).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ApiArgs {
    #[command(flatten)]
    gvk: Gvk,
    /// Whether the kind is namespaced.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    namespaced: bool,
    /// Write the Rust type.
    #[arg(long)]
    resource: bool,
    /// Write a controller and its test.
    #[arg(long)]
    controller: bool,
}

#[derive(Args, Debug)]
struct WebhookArgs {
    #[command(flatten)]
    gvk: Gvk,
    /// A defaulting (mutating) webhook.
    #[arg(long)]
    defaulting: bool,
    /// A validating webhook.
    #[arg(long)]
    programmatic_validation: bool,
}

/// `kubeforge manifests`.
#[derive(Args, Debug)]
pub struct ManifestsArgs {
    /// The project folder (default: the one holding PROJECT, from the current folder up).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// The kubeforge checkout this binary was built from, if it is still there.
fn own_checkout() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let root = root.canonicalize().ok()?;
    root.join("crates/runtime/Cargo.toml")
        .is_file()
        .then_some(root)
}

fn report(changes: &[FileChange], dir: &Path) {
    for c in changes {
        let (what, path) = match c {
            FileChange::Created(p) => ("created", p),
            FileChange::Updated(p) => ("updated", p),
            FileChange::Kept(_) => continue,
        };
        let shown = path.strip_prefix(dir).unwrap_or(path);
        println!("{what:>8} {}", shown.display());
    }
}

fn finish(plan: Result<Plan, ScaffoldError>, dir: &Path) -> ExitCode {
    match plan.and_then(|p| p.apply()) {
        Ok(changes) => {
            report(&changes, dir);
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

fn fail(e: &ScaffoldError) -> ExitCode {
    eprintln!("error: {e}");
    if e.is_usage() {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}

fn project_dir(dir: &Option<PathBuf>) -> Result<PathBuf, ScaffoldError> {
    match dir {
        Some(d) => Ok(d.clone()),
        None => {
            let here = std::env::current_dir().map_err(|source| ScaffoldError::Io {
                path: ".".into(),
                source,
            })?;
            kubeforge_scaffold::find_project(&here).ok_or(ScaffoldError::NotAProject(here))
        }
    }
}

/// Run `kubeforge init`.
pub fn init(a: InitArgs) -> ExitCode {
    let (kubeforge, lockfile) = match (&a.kubeforge_git, &a.kubeforge_path) {
        (Some(url), _) => (
            Source::Git {
                url: url.clone(),
                rev: a.kubeforge_rev.clone(),
            },
            None,
        ),
        (None, path) => {
            let root = match path {
                Some(p) => match p.canonicalize() {
                    Ok(r) if r.join("crates/runtime/Cargo.toml").is_file() => r,
                    _ => {
                        return fail(&ScaffoldError::Invalid {
                            what: "--kubeforge-path".into(),
                            value: p.display().to_string(),
                            why: "it is not a kubeforge checkout (no crates/runtime/Cargo.toml there)".into(),
                        });
                    }
                },
                None => match own_checkout() {
                    Some(r) => r,
                    None => {
                        return fail(&ScaffoldError::Usage(
                            "the kubeforge checkout this binary was built from is gone: pass --kubeforge-path DIR or --kubeforge-git URL".into(),
                        ));
                    }
                },
            };
            let lock = std::fs::read_to_string(root.join("Cargo.lock")).ok();
            (Source::Path(root.display().to_string()), lock)
        }
    };
    let o = InitOptions {
        domain: a.domain,
        repo: a.repo,
        name: a.name,
        kubeforge,
        lockfile,
    };
    finish(kubeforge_scaffold::init(&a.dir, &o), &a.dir)
}

/// Run `kubeforge create …`.
pub fn create(a: CreateArgs) -> ExitCode {
    match a.what {
        CreateCommand::Api(api) => {
            let dir = match project_dir(&api.gvk.dir) {
                Ok(d) => d,
                Err(e) => return fail(&e),
            };
            let o = ApiOptions {
                group: api.gvk.group,
                version: api.gvk.version,
                kind: api.gvk.kind,
                namespaced: api.namespaced,
                resource: api.resource,
                controller: api.controller,
            };
            finish(kubeforge_scaffold::create_api(&dir, &o), &dir)
        }
        CreateCommand::Webhook(w) => {
            let dir = match project_dir(&w.gvk.dir) {
                Ok(d) => d,
                Err(e) => return fail(&e),
            };
            let o = WebhookOptions {
                group: w.gvk.group,
                version: w.gvk.version,
                kind: w.gvk.kind,
                defaulting: w.defaulting,
                validation: w.programmatic_validation,
            };
            finish(kubeforge_scaffold::create_webhook(&dir, &o), &dir)
        }
    }
}

/// Run `kubeforge manifests`: the project's own binary writes `config/`
/// from its code (`cargo run --quiet -- manifests`).
pub fn manifests(a: ManifestsArgs) -> ExitCode {
    let dir = match project_dir(&a.dir) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    if let Err(e) = kubeforge_scaffold::Project::load(&dir) {
        return fail(&e);
    }
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["run", "--quiet", "--", "manifests", "--config", "config"])
            .current_dir(&dir)
            .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!(
                "error: the project's `cargo run -- manifests` failed ({s}); fix what cargo printed above and run again"
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "error: running cargo in {}: {e}; is cargo on PATH?",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}
