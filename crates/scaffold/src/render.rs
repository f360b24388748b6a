//! From a [`Project`] to the files it implies: the templates (our own
//! text, under `templates/`), filled in, and the plan that writes them —
//! yours once, generated ones every time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::ScaffoldError;
use crate::names::snake;
use crate::project::{Project, Resource, Source};

/// What writing one file did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileChange {
    /// It did not exist and was written.
    Created(PathBuf),
    /// A generated file whose content changed.
    Updated(PathBuf),
    /// Already as it should be, or yours (kept as it is).
    Kept(PathBuf),
}

#[derive(Clone, Debug)]
struct Entry {
    path: PathBuf,
    text: String,
    /// Rewritten every time (generated), or written only when missing.
    generated: bool,
}

/// The files a command would write; nothing is written until
/// [`apply`](Self::apply).
#[derive(Clone, Debug, Default)]
pub struct Plan {
    entries: Vec<Entry>,
}

impl Plan {
    /// Write `text` to `path` if it does not exist.
    pub fn once(&mut self, path: PathBuf, text: String) {
        self.entries.push(Entry {
            path,
            text,
            generated: false,
        });
    }

    /// Write `text` to `path`, replacing what is there.
    pub fn generated(&mut self, path: PathBuf, text: String) {
        self.entries.push(Entry {
            path,
            text,
            generated: true,
        });
    }

    /// The files, in order.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.entries.iter().map(|e| e.path.as_path())
    }

    /// What writing the plan would change: generated files whose content
    /// differs from what is on disk, and any file that is missing (your
    /// files count only when they are gone). Empty for a project that the
    /// scaffold's last run still describes.
    pub fn drift(&self) -> Vec<&Path> {
        self.entries
            .iter()
            .filter(|e| match std::fs::read_to_string(&e.path) {
                Ok(have) => e.generated && !same_text(&e.path, &have, &e.text),
                Err(_) => true,
            })
            .map(|e| e.path.as_path())
            .collect()
    }

    /// Write the plan. Each file goes through a temporary file and a
    /// rename, so an interrupted run leaves whole files.
    pub fn apply(&self) -> Result<Vec<FileChange>, ScaffoldError> {
        let mut out = Vec::new();
        for e in &self.entries {
            let io = |source| ScaffoldError::Io {
                path: e.path.clone(),
                source,
            };
            let have = std::fs::read_to_string(&e.path).ok();
            let change = match (&have, e.generated) {
                (Some(_), false) => FileChange::Kept(e.path.clone()),
                (Some(h), true) if same_text(&e.path, h, &e.text) => {
                    FileChange::Kept(e.path.clone())
                }
                (Some(_), true) => FileChange::Updated(e.path.clone()),
                (None, _) => FileChange::Created(e.path.clone()),
            };
            if !matches!(change, FileChange::Kept(_)) {
                if let Some(dir) = e.path.parent() {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let mut tmp = e.path.clone().into_os_string();
                tmp.push(".kubeforge-tmp");
                std::fs::write(&tmp, &e.text).map_err(io)?;
                std::fs::rename(&tmp, &e.path).map_err(io)?;
            }
            out.push(change);
        }
        Ok(out)
    }
}

/// Whether a file holding `have` already says `want`: the same text, or
/// for Rust sources the same code as `cargo fmt` may have laid it out
/// (whitespace and the trailing commas rustfmt adds aside), so formatting
/// a project does not make its generated modules look changed.
fn same_text(path: &Path, have: &str, want: &str) -> bool {
    if have == want {
        return true;
    }
    if path.extension().is_none_or(|e| e != "rs") {
        return false;
    }
    fn tokens(s: &str) -> String {
        let squeezed: Vec<char> = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut out = String::with_capacity(squeezed.len());
        for (i, c) in squeezed.iter().enumerate() {
            let closes = squeezed
                .get(i + 1)
                .is_some_and(|n| matches!(n, ')' | ']' | '}'));
            if *c == ',' && closes {
                continue;
            }
            out.push(*c);
        }
        out
    }
    tokens(have) == tokens(want)
}

/// `{{key}}` → value, for each pair.
fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut s = template.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    s
}

/// The version requirement kubeforge's workspace gives `krate`.
fn workspace_version(krate: &str) -> &'static str {
    const WORKSPACE: &str = include_str!("../../../Cargo.toml");
    WORKSPACE
        .lines()
        .find_map(|l| {
            let (name, rest) = l.split_once('=')?;
            if name.trim() != krate {
                return None;
            }
            let rest = rest.trim();
            let quoted = match rest.strip_prefix('{') {
                Some(table) => table.split_once("version")?.1.split_once('"')?.1,
                None => rest.strip_prefix('"')?,
            };
            quoted.split_once('"').map(|(v, _)| v)
        })
        .unwrap_or("*")
}

fn dependency(source: &Source, dir: &str) -> String {
    match source {
        Source::Path(root) => format!("{{ path = {:?} }}", format!("{root}/crates/{dir}")),
        Source::Git {
            url,
            rev: Some(rev),
        } => format!("{{ git = {url:?}, rev = {rev:?} }}"),
        Source::Git { url, rev: None } => format!("{{ git = {url:?} }}"),
    }
}

/// Per-project substitutions.
struct Vars {
    name: String,
    krate: String,
    domain: String,
    namespace: String,
    leader_id: String,
}

impl Vars {
    fn of(p: &Project) -> Vars {
        // A stable, short Lease name unique to the project (kubebuilder
        // uses a random prefix; a hash of the name is stable across runs).
        let mut h: u32 = 0x811c_9dc5;
        for b in p.project_name.bytes().chain(p.domain.bytes()) {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        Vars {
            name: p.project_name.clone(),
            krate: p.crate_name(),
            domain: p.domain.clone(),
            namespace: format!("{}-system", p.project_name),
            leader_id: format!("{h:08x}.{}", p.domain),
        }
    }

    fn pairs(&self) -> Vec<(&str, &str)> {
        vec![
            ("name", self.name.as_str()),
            ("crate", self.krate.as_str()),
            ("domain", self.domain.as_str()),
            ("namespace", self.namespace.as_str()),
            ("leader_id", self.leader_id.as_str()),
        ]
    }
}

/// Per-resource substitutions.
fn resource_pairs(p: &Project, r: &Resource) -> Vec<(&'static str, String)> {
    let fq = p.api_group(r);
    let lower = r.kind.to_ascii_lowercase();
    let api_for_obj = if r.namespaced {
        "Api::namespaced(\n        ctx.client.clone(),\n        &obj\n            .namespace()\n            .ok_or_else(|| ReconcileError::terminal(\"a namespaced object without a namespace\"))?,\n    )".to_string()
    } else {
        "Api::all(ctx.client.clone())".to_string()
    };
    let api_in_test = if r.namespaced {
        "Api::namespaced(env.client(), \"default\")"
    } else {
        "Api::all(env.client())"
    };
    vec![
        ("kind", r.kind.clone()),
        ("group", r.group.clone()),
        ("version", r.version.clone()),
        ("fqgroup", fq),
        ("lower", lower),
        ("snake", snake(&r.kind)),
        (
            "namespaced_attr",
            if r.namespaced {
                "\n    namespaced,".to_string()
            } else {
                String::new()
            },
        ),
        ("api_for_obj", api_for_obj),
        ("api_in_test", api_in_test.to_string()),
    ]
}

fn fill_resource(template: &str, p: &Project, r: &Resource) -> String {
    let v = Vars::of(p);
    let res = resource_pairs(p, r);
    let mut pairs = v.pairs();
    pairs.extend(res.iter().map(|(k, v)| (*k, v.as_str())));
    fill(template, &pairs)
}

const GENERATED_RS: &str =
    "// Generated by kubeforge from PROJECT: `kubeforge create` rewrites this file.\n";

/// Every file `project` implies.
pub(crate) fn plan(dir: &Path, p: &Project) -> Result<Plan, ScaffoldError> {
    let v = Vars::of(p);
    let mut plan = Plan::default();
    let at = |rel: &str| dir.join(rel);
    let t = |template: &str| fill(template, &v.pairs());

    // The project.
    let mut cargo = t(include_str!("../templates/Cargo.toml.tpl"));
    for krate in [
        "anyhow",
        "k8s-openapi",
        "kube",
        "schemars",
        "serde",
        "serde_json",
        "tokio",
        "tracing",
        "tracing-subscriber",
    ] {
        cargo = cargo.replace(&format!("{{{{v:{krate}}}}}"), workspace_version(krate));
    }
    cargo = cargo
        .replace(
            "{{dep:kubeforge-runtime}}",
            &dependency(&p.kubeforge, "runtime"),
        )
        .replace(
            "{{dep:kubeforge-testenv}}",
            &dependency(&p.kubeforge, "testenv"),
        );
    plan.once(at("Cargo.toml"), cargo);
    plan.generated(at("PROJECT"), p.render()?);
    plan.once(at("Makefile"), t(include_str!("../templates/Makefile.tpl")));
    plan.once(
        at("Dockerfile"),
        t(include_str!("../templates/Dockerfile.tpl")),
    );
    plan.once(
        at(".gitignore"),
        t(include_str!("../templates/gitignore.tpl")),
    );
    plan.once(
        at(".dockerignore"),
        t(include_str!("../templates/dockerignore.tpl")),
    );
    plan.once(
        at("README.md"),
        t(include_str!("../templates/README.md.tpl")),
    );
    plan.once(
        at("src/main.rs"),
        t(include_str!("../templates/main.rs.tpl")),
    );
    plan.once(at("src/lib.rs"), t(include_str!("../templates/lib.rs.tpl")));

    // config/: yours, except what `make manifests` and this scaffold rewrite.
    const CONFIG: &[(&str, &str)] = &[
        (
            "config/manager/manager.yaml",
            include_str!("../templates/config/manager.yaml.tpl"),
        ),
        (
            "config/manager/kustomization.yaml",
            include_str!("../templates/config/manager.kustomization.yaml.tpl"),
        ),
        (
            "config/rbac/kustomization.yaml",
            include_str!("../templates/config/rbac.kustomization.yaml.tpl"),
        ),
        (
            "config/rbac/service_account.yaml",
            include_str!("../templates/config/service_account.yaml.tpl"),
        ),
        (
            "config/rbac/role_binding.yaml",
            include_str!("../templates/config/role_binding.yaml.tpl"),
        ),
        (
            "config/rbac/leader_election_role_binding.yaml",
            include_str!("../templates/config/leader_election_role_binding.yaml.tpl"),
        ),
        (
            "config/rbac/role.yaml",
            include_str!("../templates/config/role.yaml.tpl"),
        ),
        (
            "config/rbac/leader_election_role.yaml",
            include_str!("../templates/config/leader_election_role.yaml.tpl"),
        ),
        (
            "config/crd/kustomization.yaml",
            include_str!("../templates/config/crd.kustomization.yaml.tpl"),
        ),
        (
            "config/default/metrics_service.yaml",
            include_str!("../templates/config/metrics_service.yaml.tpl"),
        ),
    ];
    for (path, template) in CONFIG {
        plan.once(at(path), t(template));
    }

    let any_webhook = p
        .resources
        .iter()
        .any(|r| r.webhooks.defaulting || r.webhooks.validation);
    let default = fill(
        include_str!("../templates/config/default.kustomization.yaml.tpl"),
        &[
            v.pairs().as_slice(),
            &[(
                "webhook_resource",
                if any_webhook {
                    "- ../webhook"
                } else {
                    "# - ../webhook (after kubeforge create webhook)"
                },
            )],
        ]
        .concat(),
    );
    plan.generated(at("config/default/kustomization.yaml"), default);
    if any_webhook {
        plan.once(
            at("config/webhook/kustomization.yaml"),
            t(include_str!(
                "../templates/config/webhook.kustomization.yaml.tpl"
            )),
        );
        plan.once(
            at("config/webhook/manifests.yaml"),
            t(include_str!(
                "../templates/config/webhook.manifests.yaml.tpl"
            )),
        );
        plan.once(
            at("config/webhook/service.yaml"),
            t(include_str!("../templates/config/webhook.service.yaml.tpl")),
        );
        plan.once(
            at("config/overlays/cert-manager/kustomization.yaml"),
            t(include_str!(
                "../templates/config/overlay.cert-manager.yaml.tpl"
            )),
        );
        plan.once(
            at("config/overlays/cert-manager/certificate.yaml"),
            t(include_str!("../templates/config/certmanager.yaml.tpl")),
        );
    }

    resources(dir, p, &mut plan);
    Ok(plan)
}

/// The API, controller and webhook modules, samples and tests.
fn resources(dir: &Path, p: &Project, plan: &mut Plan) {
    let at = |rel: String| dir.join(rel);
    let mut groups: Vec<&str> = p
        .resources
        .iter()
        .filter(|r| r.api)
        .map(|r| r.group.as_str())
        .collect();
    groups.sort();
    groups.dedup();

    // src/api/mod.rs: the groups and every kind's CRD.
    let mut api = String::from(GENERATED_RS);
    api.push_str("//! The project's custom resources, by group and version.\n\n");
    for g in &groups {
        let _ = writeln!(api, "pub mod {g};");
    }
    api.push_str(
        "\nuse k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;\n",
    );
    if !groups.is_empty() {
        api.push_str("#[allow(unused_imports)]\nuse kube::CustomResourceExt;\n");
    }
    api.push_str("\n/// Every CRD of the project; a kind's versions are merged into one\n/// CRD whose storage version is the first scaffolded.\npub fn crds() -> Vec<CustomResourceDefinition> {\n    vec![\n");
    let mut kinds: Vec<(&str, &str)> = Vec::new();
    for r in p.resources.iter().filter(|r| r.api) {
        if !kinds.contains(&(r.group.as_str(), r.kind.as_str())) {
            kinds.push((r.group.as_str(), r.kind.as_str()));
        }
    }
    for (g, k) in &kinds {
        let versions: Vec<&Resource> = p.versions_of(g, k).filter(|r| r.api).collect();
        let storage = versions
            .iter()
            .find(|r| r.storage)
            .or(versions.first())
            .map(|r| r.version.as_str())
            .unwrap_or_default();
        if versions.len() == 1 {
            let _ = writeln!(api, "        {g}::{storage}::{k}::crd(),");
        } else {
            let list: Vec<String> = versions
                .iter()
                .map(|r| format!("{g}::{}::{k}::crd()", r.version))
                .collect();
            let _ = writeln!(
                api,
                "        kube::core::crd::merge_crds(\n            vec![{}],\n            {storage:?},\n        )\n        .expect(\"the versions of {k}.{g}.{} merge (same names and scope)\"),",
                list.join(", "),
                p.domain
            );
        }
    }
    api.push_str("    ]\n}\n");
    plan.generated(at("src/api/mod.rs".into()), api);

    for g in &groups {
        let mut versions: Vec<&str> = p
            .resources
            .iter()
            .filter(|r| r.api && r.group == *g)
            .map(|r| r.version.as_str())
            .collect();
        versions.sort();
        versions.dedup();
        let mut m = String::from(GENERATED_RS);
        let _ = writeln!(m, "//! API group {g}.{}.\n", p.domain);
        for v in &versions {
            let _ = writeln!(m, "pub mod {v};");
        }
        plan.generated(at(format!("src/api/{g}/mod.rs")), m);
        for v in &versions {
            let mut m = String::from(GENERATED_RS);
            let _ = writeln!(m, "//! {g}.{}/{v}.\n", p.domain);
            for r in p
                .resources
                .iter()
                .filter(|r| r.api && r.group == *g && r.version == *v)
            {
                let s = snake(&r.kind);
                let _ = writeln!(m, "mod {s};\npub use {s}::*;");
            }
            plan.generated(at(format!("src/api/{g}/{v}/mod.rs")), m);
        }
    }

    // Controllers.
    let mut ctl = String::from(GENERATED_RS);
    ctl.push_str("//! The project's controllers, one module per kind.\n\n");
    let controllers: Vec<&Resource> = p.resources.iter().filter(|r| r.controller).collect();
    for r in &controllers {
        let _ = writeln!(ctl, "pub mod {};", snake(&r.kind));
    }
    ctl.push_str(
        "\nuse kubeforge_runtime::Manager;\n\n/// Register every controller with `mgr`.\n",
    );
    if controllers.is_empty() {
        ctl.push_str("pub fn register_all(_mgr: &Manager) {}\n");
    } else {
        ctl.push_str("pub fn register_all(mgr: &Manager) {\n");
        for r in &controllers {
            let _ = writeln!(ctl, "    {}::register(mgr);", snake(&r.kind));
        }
        ctl.push_str("}\n");
    }
    plan.generated(at("src/controllers/mod.rs".into()), ctl);

    // Webhooks.
    plan.generated(at("src/webhooks/mod.rs".into()), webhooks_mod(p));

    // Per resource: yours, once.
    let mut samples = Vec::new();
    for r in &p.resources {
        let s = snake(&r.kind);
        let fill = |tpl: &str| fill_resource(tpl, p, r);
        if r.api {
            plan.once(
                at(format!("src/api/{}/{}/{s}.rs", r.group, r.version)),
                fill(include_str!("../templates/type.rs.tpl")),
            );
            let sample = format!(
                "{}_{}_{}.yaml",
                r.group,
                r.version,
                r.kind.to_ascii_lowercase()
            );
            plan.once(
                at(format!("config/samples/{sample}")),
                format!(
                    "apiVersion: {}/{}\nkind: {}\nmetadata:\n  name: {}-sample\nspec:\n  size: 1\n",
                    p.api_group(r),
                    r.version,
                    r.kind,
                    r.kind.to_ascii_lowercase()
                ),
            );
            samples.push(sample);
        }
        if r.controller {
            plan.once(
                at(format!("src/controllers/{s}.rs")),
                fill(include_str!("../templates/controller.rs.tpl")),
            );
            plan.once(
                at(format!("tests/{s}.rs")),
                fill(include_str!("../templates/controller_test.rs.tpl")),
            );
        }
        if r.webhooks.defaulting || r.webhooks.validation {
            let defaulting = if r.webhooks.defaulting {
                fill(include_str!("../templates/webhook_defaulting.rs.tpl"))
            } else {
                String::new()
            };
            let validation = if r.webhooks.validation {
                fill(include_str!("../templates/webhook_validation.rs.tpl"))
            } else {
                String::new()
            };
            let text = fill(include_str!("../templates/webhook.rs.tpl"))
                .replace("{{defaulting}}", &defaulting)
                .replace("{{validation}}", &validation);
            plan.once(at(format!("src/webhooks/{s}_{}.rs", r.version)), text);
            let mut checks = String::new();
            if r.webhooks.defaulting {
                checks.push_str(&fill("    let created = api\n        .create(&pp, &{{kind}}::new(\"defaulted\", {{kind}}Spec::default()))\n        .await\n        .expect(\"create without a size\");\n    assert_eq!(created.spec.size, Some(1), \"the defaulting webhook sets spec.size\");\n"));
            }
            if r.webhooks.validation {
                checks.push_str(&fill("    let refused = api\n        .create(&pp, &{{kind}}::new(\"too-big\", {{kind}}Spec { size: Some(11) }))\n        .await\n        .expect_err(\"a size over the maximum is refused\");\n    assert!(refused.to_string().contains(\"is more than\"), \"{refused}\");\n    api.create(&pp, &{{kind}}::new(\"fits\", {{kind}}Spec { size: Some(3) }))\n        .await\n        .expect(\"a size within the maximum is admitted\");\n"));
            }
            let test = fill(include_str!("../templates/webhook_test.rs.tpl"))
                .replace("{{webhook_checks}}", &checks);
            plan.once(at(format!("tests/{s}_{}_webhook.rs", r.version)), test);
        }
    }
    let mut kust = String::from(
        "# Generated by kubeforge from PROJECT (rewritten by `kubeforge create`).\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:",
    );
    if samples.is_empty() {
        kust.push_str(" []\n");
    } else {
        kust.push('\n');
        for s in &samples {
            let _ = writeln!(kust, "- {s}");
        }
    }
    plan.generated(at("config/samples/kustomization.yaml".into()), kust);
}

/// `src/webhooks/mod.rs`: the webhook modules, their registration on a
/// server, their configurations and what installing them needs.
fn webhooks_mod(p: &Project) -> String {
    let v = Vars::of(p);
    let hooked: Vec<&Resource> = p
        .resources
        .iter()
        .filter(|r| r.webhooks.defaulting || r.webhooks.validation)
        .collect();
    let mut m = String::from(GENERATED_RS);
    m.push_str("//! The project's admission webhooks: one module per kind and version (yours),\n//! registered here on the webhook server, and their configurations.\n\n");
    for r in &hooked {
        let _ = writeln!(m, "pub mod {}_{};", snake(&r.kind), r.version);
    }
    let _ = write!(
        m,
        r#"
use k8s_openapi::api::admissionregistration::v1::{{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
}};
#[allow(unused_imports)]
use kube::Resource as _;
use kubeforge_runtime::Permissions;
use kubeforge_runtime::webhook::WebhookServerBuilder;

/// Whether the project has webhooks.
pub const ANY: bool = {any};
/// The Service in front of the deployed manager's webhook server.
pub const SERVICE: &str = "{name}-webhook-service";
/// The label selecting this project's webhook configurations (whose CA
/// bundle the manager fills in when it makes its own certificate).
pub const CA_SELECTOR: &str = "app.kubernetes.io/part-of={name}";

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug)]
pub enum Endpoint {{
    /// The deployed manager, through its Service (`config/webhook`) in
    /// `namespace`; the CA bundle is injected later.
    Service {{
        /// The Service's namespace.
        namespace: String,
    }},
    /// A URL base such as `https://127.0.0.1:9443` (`make run`), trusting
    /// `ca_bundle` (PEM).
    Url {{
        /// Scheme, host and port.
        base: String,
        /// The CA of the serving certificate.
        ca_bundle: String,
    }},
}}

#[allow(dead_code)]
fn client(endpoint: &Endpoint, path: &str) -> WebhookClientConfig {{
    match endpoint {{
        Endpoint::Service {{ namespace }} => {{
            // Named without the kustomize prefix: kustomize renames it.
            kubeforge_runtime::webhook::service_client_config(namespace, "webhook-service", path)
        }}
        Endpoint::Url {{ base, ca_bundle }} => WebhookClientConfig {{
            url: Some(format!("{{base}}{{path}}")),
            ca_bundle: Some(k8s_openapi::ByteString(ca_bundle.as_bytes().to_vec())),
            service: None,
        }},
    }}
}}

#[allow(dead_code)]
fn label<K: kube::Resource>(mut c: K) -> K {{
    c.meta_mut().labels = Some([("app.kubernetes.io/part-of".to_string(), "{name}".to_string())].into());
    c
}}

/// Serve every webhook on `builder`.
pub fn register(builder: WebhookServerBuilder) -> WebhookServerBuilder {{
"#,
        any = !hooked.is_empty(),
        name = v.name,
    );
    for r in &hooked {
        let module = format!("{}_{}", snake(&r.kind), r.version);
        let ty = format!("crate::api::{}::{}::{}", r.group, r.version, r.kind);
        let path = webhook_path(p, r);
        if r.webhooks.defaulting {
            let _ = writeln!(
                m,
                "    let builder = builder.defaulter::<{ty}, _>(\"/mutate-{path}\", {module}::default);"
            );
        }
        if r.webhooks.validation {
            let _ = writeln!(
                m,
                "    let builder = builder.validator::<{ty}, _>(\"/validate-{path}\", {module}::validate);"
            );
        }
    }
    m.push_str("    builder\n}\n\n/// The webhook configurations pointing the API server at `endpoint`.\npub fn configurations(\n    endpoint: &Endpoint,\n) -> (Vec<MutatingWebhookConfiguration>, Vec<ValidatingWebhookConfiguration>) {\n    #[allow(unused_mut)]\n    let mut mutating = Vec::new();\n    #[allow(unused_mut)]\n    let mut validating = Vec::new();\n");
    if hooked.is_empty() {
        m.push_str("    let _ = endpoint;\n");
    }
    for r in &hooked {
        let ty = format!("crate::api::{}::{}::{}", r.group, r.version, r.kind);
        let path = webhook_path(p, r);
        let lower = r.kind.to_ascii_lowercase();
        let fq = p.api_group(r);
        let target = format!("&[(\"{fq}\", \"{}\", &{ty}::plural(&()))]", r.version);
        if r.webhooks.defaulting {
            let _ = writeln!(
                m,
                "    mutating.push(label(kubeforge_runtime::webhook::mutating_configuration_with(\n        \"mutating-{lower}-{ver}\",\n        \"m{lower}-{ver}.{fq}\",\n        client(endpoint, \"/mutate-{path}\"),\n        {target},\n    )));",
                ver = r.version
            );
        }
        if r.webhooks.validation {
            let _ = writeln!(
                m,
                "    validating.push(label(kubeforge_runtime::webhook::validating_configuration_with(\n        \"validating-{lower}-{ver}\",\n        \"v{lower}-{ver}.{fq}\",\n        client(endpoint, \"/validate-{path}\"),\n        {target},\n    )));",
                ver = r.version
            );
        }
    }
    let _ = write!(
        m,
        r#"    (mutating, validating)
}}

/// What the deployed manager needs to put its certificate's CA into the
/// webhook configurations (nothing without webhooks).
pub fn permissions() -> Permissions {{
    let mut p = Permissions::new();
    if ANY {{
        for kind in ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"] {{
            p.allow("admissionregistration.k8s.io", kind, &["get", "list", "patch"]);
        }}
    }}
    p
}}

/// Create or update the configurations for `endpoint` (server-side apply,
/// field manager `{name}`): what `make run` does with development
/// certificates.
pub async fn install(client: kube::Client, endpoint: &Endpoint) -> Result<(), kube::Error> {{
    use kube::api::{{Api, Patch, PatchParams}};
    let pp = PatchParams::apply("{name}").force();
    let (mutating, validating) = configurations(endpoint);
    for c in mutating {{
        let name = c.metadata.name.clone().unwrap_or_default();
        Api::<MutatingWebhookConfiguration>::all(client.clone()).patch(&name, &pp, &Patch::Apply(&c)).await?;
    }}
    for c in validating {{
        let name = c.metadata.name.clone().unwrap_or_default();
        Api::<ValidatingWebhookConfiguration>::all(client.clone()).patch(&name, &pp, &Patch::Apply(&c)).await?;
    }}
    Ok(())
}}
"#,
        name = v.name
    );
    m
}

/// `cache-example-com-v1alpha1-memcached` (controller-runtime's path
/// after `/mutate-` or `/validate-`).
fn webhook_path(p: &Project, r: &Resource) -> String {
    format!(
        "{}-{}-{}",
        p.api_group(r).replace('.', "-"),
        r.version,
        r.kind.to_ascii_lowercase()
    )
}

#[cfg(test)]
mod tests {
    use super::same_text;
    use std::path::Path;

    #[test]
    fn rust_sources_compare_as_cargo_fmt_may_lay_them_out() {
        let rs = Path::new("src/api/mod.rs");
        let generated = "pub fn crds() -> Vec<Crd> {\n    vec![\n        a::A::crd(),\n    ]\n}\n";
        let formatted = "pub fn crds() -> Vec<Crd> {\n    vec![a::A::crd()]\n}\n";
        assert!(same_text(rs, formatted, generated));
        let changed = "pub fn crds() -> Vec<Crd> {\n    vec![a::A::crd(), b::B::crd()]\n}\n";
        assert!(!same_text(rs, changed, generated));
        // Other files must match exactly.
        let yaml = Path::new("config/samples/kustomization.yaml");
        assert!(!same_text(yaml, "resources:\n- a\n", "resources:\n-  a\n"));
    }
}
