//! Webhook configurations as the chain uses them: the
//! `MutatingWebhookConfiguration` / `ValidatingWebhookConfiguration` objects
//! parsed once into [`Webhook`]s, cached and re-read only when the stored
//! configurations change, and the matching rules (kube-apiserver's
//! `rules.Matcher`, `namespaceSelector`, `objectSelector`, `matchPolicy`).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use kubeforge_apimachinery::labels::Selector;
use kubeforge_store::Store;
use serde_json::Value;

/// Storage prefix of MutatingWebhookConfigurations.
pub(crate) const MUTATING_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/mutatingwebhookconfigurations/";
/// Storage prefix of ValidatingWebhookConfigurations.
pub(crate) const VALIDATING_PREFIX: &str =
    "/registry/admissionregistration.k8s.io/validatingwebhookconfigurations/";

/// Default `timeoutSeconds`.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest `timeoutSeconds` honoured.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// One rule of a webhook (`rules[]`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    /// `*`, `Cluster` or `Namespaced`.
    pub scope: String,
}

/// `sideEffects`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SideEffects {
    /// `None` or `NoneOnDryRun`: safe to call on dry runs.
    DryRunSafe,
    /// `Some` or `Unknown`: a dry run that matches is refused.
    Unsafe,
}

/// Where a webhook is called.
#[derive(Clone, Debug)]
pub(crate) enum Endpoint {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`, resolved through the service map.
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

impl Endpoint {
    /// The URL kube-apiserver would post to (services as `name.ns.svc`).
    pub fn url(&self) -> String {
        match self {
            Endpoint::Url(u) => u.clone(),
            Endpoint::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}"),
        }
    }
}

/// One webhook of a configuration, ready to match and call.
#[derive(Debug)]
pub(crate) struct Webhook {
    /// `webhooks[].name`, the name in every error.
    pub name: String,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Fail` (the default).
    pub fail_closed: bool,
    /// `matchPolicy: Equivalent` (the default).
    pub equivalent: bool,
    /// `namespaceSelector`, or why it does not parse (matching it fails
    /// the request, as kube's namespace matcher does).
    pub namespace_selector: Result<Selector, String>,
    /// `objectSelector`, or why it does not parse.
    pub object_selector: Result<Selector, String>,
    pub side_effects: SideEffects,
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// Where to call it, or why it cannot be called (a configuration the
    /// chain could not read: calling it fails, and `failurePolicy` decides).
    pub endpoint: Result<Endpoint, String>,
    /// PEM `caBundle`, decoded.
    pub ca_bundle: Vec<u8>,
}

/// The parsed configurations and what they were parsed from.
#[derive(Default)]
pub(crate) struct Snapshot {
    /// (key, mod_revision) of every configuration read.
    seen: Vec<(String, u64)>,
    /// Webhooks in configuration-name order, then list order.
    pub webhooks: Vec<Arc<Webhook>>,
}

/// A cache of one kind of configuration, checked against the store on every
/// read: only the keys and revisions are compared, objects are re-parsed
/// only when one changed.
pub(crate) struct ConfigCache {
    prefix: &'static str,
    mutating: bool,
    snapshot: RwLock<Arc<Snapshot>>,
}

impl ConfigCache {
    pub fn new(prefix: &'static str, mutating: bool) -> ConfigCache {
        ConfigCache {
            prefix,
            mutating,
            snapshot: RwLock::new(Arc::new(Snapshot::default())),
        }
    }

    /// The current webhooks.
    pub fn current(&self, store: &Store) -> Arc<Snapshot> {
        let range = store.range(self.prefix, None, 0);
        let fresh = |s: &Snapshot| {
            s.seen.len() == range.kvs.len()
                && s.seen
                    .iter()
                    .zip(&range.kvs)
                    .all(|((k, r), kv)| **k == *kv.key && *r == kv.mod_revision)
        };
        if let Ok(s) = self.snapshot.read()
            && fresh(&s)
        {
            return s.clone();
        }
        let mut webhooks = Vec::new();
        let mut seen = Vec::with_capacity(range.kvs.len());
        for kv in &range.kvs {
            seen.push((kv.key.to_string(), kv.mod_revision));
            match serde_json::from_slice::<Value>(&kv.value) {
                Ok(v) => {
                    for w in v
                        .get("webhooks")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        webhooks.push(Arc::new(parse_webhook(w, self.mutating)));
                    }
                }
                Err(e) => {
                    tracing::warn!(key = %kv.key, error = %e, "unreadable webhook configuration")
                }
            }
        }
        let snap = Arc::new(Snapshot { seen, webhooks });
        if let Ok(mut s) = self.snapshot.write() {
            *s = snap.clone();
        }
        snap
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Parse one `webhooks[]` entry; problems end up in `endpoint`.
pub(crate) fn parse_webhook(w: &Value, mutating: bool) -> Webhook {
    let name = w
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut problems = Vec::new();
    let rules = w
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| Rule {
            operations: strings(r.get("operations")),
            groups: strings(r.get("apiGroups")),
            versions: strings(r.get("apiVersions")),
            resources: strings(r.get("resources")),
            scope: r
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
        })
        .collect();
    let selector = |field: &str| match w.get(field) {
        None | Some(Value::Null) => Ok(Selector::everything()),
        Some(v) => Selector::from_label_selector(v).map_err(|e| format!("{field}: {e}")),
    };
    let namespace_selector = selector("namespaceSelector");
    let object_selector = selector("objectSelector");
    let timeout = w
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT)
        .clamp(Duration::from_secs(1), MAX_TIMEOUT);
    let versions = strings(w.get("admissionReviewVersions"));
    if !versions.is_empty() && !versions.iter().any(|v| v == "v1") {
        problems.push(format!(
            "admissionReviewVersions {versions:?} does not include v1, the only version this server sends"
        ));
    }
    let cc = w.get("clientConfig").cloned().unwrap_or(Value::Null);
    let ca_bundle = match cc.get("caBundle").and_then(Value::as_str) {
        Some(b) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(b)
                .unwrap_or_else(|e| {
                    problems.push(format!("clientConfig.caBundle is not base64: {e}"));
                    Vec::new()
                })
        }
        None => Vec::new(),
    };
    let endpoint = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
        (Some(u), None) if u.starts_with("https://") => Ok(Endpoint::Url(u.to_string())),
        (Some(u), None) => Err(format!("clientConfig.url {u:?} must use https")),
        (None, Some(s)) => {
            let port = s.get("port").and_then(Value::as_u64).unwrap_or(443);
            let path = s.get("path").and_then(Value::as_str).unwrap_or("/");
            match (
                s.get("namespace").and_then(Value::as_str),
                s.get("name").and_then(Value::as_str),
                u16::try_from(port),
            ) {
                (Some(ns), Some(n), Ok(port)) => Ok(Endpoint::Service {
                    namespace: ns.to_string(),
                    name: n.to_string(),
                    port,
                    path: if path.starts_with('/') {
                        path.to_string()
                    } else {
                        format!("/{path}")
                    },
                }),
                _ => Err("clientConfig.service needs namespace, name and a valid port".into()),
            }
        }
        _ => Err("clientConfig needs exactly one of url and service".into()),
    };
    let endpoint = if problems.is_empty() {
        endpoint
    } else {
        Err(problems.join("; "))
    };
    Webhook {
        name,
        rules,
        fail_closed: w.get("failurePolicy").and_then(Value::as_str) != Some("Ignore"),
        equivalent: w.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
        namespace_selector,
        object_selector,
        side_effects: match w.get("sideEffects").and_then(Value::as_str) {
            Some("None" | "NoneOnDryRun") => SideEffects::DryRunSafe,
            _ => SideEffects::Unsafe,
        },
        timeout,
        reinvoke: mutating
            && w.get("reinvocationPolicy").and_then(Value::as_str) == Some("IfNeeded"),
        endpoint,
        ca_bundle,
    }
}

/// What a request is, for matching.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestInfo<'a> {
    pub operation: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespaced: bool,
}

fn any_or(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

impl Rule {
    /// kube's `rules.Matcher`; `any_version` for `matchPolicy: Equivalent`.
    pub fn matches(&self, r: &RequestInfo<'_>, any_version: bool) -> bool {
        let scope = match self.scope.as_str() {
            "Cluster" => !r.namespaced,
            "Namespaced" => r.namespaced,
            _ => true,
        };
        scope
            && any_or(&self.operations, r.operation)
            && any_or(&self.groups, r.group)
            && (any_version || any_or(&self.versions, r.version))
            && self.resources.iter().any(|res| {
                let (res, sub) = res.split_once('/').unwrap_or((res, ""));
                (res == "*" || res == r.resource) && (sub == "*" || sub == r.subresource)
            })
    }
}

impl Webhook {
    /// Whether a rule matches exactly, or (Equivalent) another version of
    /// the same group and resource.
    pub fn matches_rules(&self, r: &RequestInfo<'_>) -> bool {
        self.rules.iter().any(|rule| rule.matches(r, false))
            || (self.equivalent && self.rules.iter().any(|rule| rule.matches(r, true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req<'a>(op: &'a str, resource: &'a str, sub: &'a str) -> RequestInfo<'a> {
        RequestInfo {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            namespaced: true,
        }
    }

    #[test]
    fn rules_match_like_kube() {
        let w = parse_webhook(
            &json!({"name": "a.example.com", "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "deployments/scale"]}],
                "clientConfig": {"url": "https://127.0.0.1:1/x"}, "sideEffects": "None", "admissionReviewVersions": ["v1"]}),
            false,
        );
        assert!(w.matches_rules(&req("CREATE", "pods", "")));
        assert!(!w.matches_rules(&req("CREATE", "pods", "status")));
        assert!(!w.matches_rules(&req("UPDATE", "pods", "")));
        assert!(w.matches_rules(&req("CREATE", "deployments", "scale")));
        let all = parse_webhook(
            &json!({"name": "b", "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}], "clientConfig": {"url": "https://h/"}}),
            false,
        );
        assert!(all.matches_rules(&req("DELETE", "pods", "status")));
        let star = parse_webhook(
            &json!({"name": "c", "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["v2"], "resources": ["*"], "scope": "Cluster"}], "clientConfig": {"url": "https://h/"}, "matchPolicy": "Exact"}),
            false,
        );
        assert!(!star.matches_rules(&req("CREATE", "pods", "")));
        let mut cluster = req("CREATE", "nodes", "");
        cluster.namespaced = false;
        assert!(!star.matches_rules(&cluster), "Exact needs the version");
        cluster.version = "v2";
        assert!(star.matches_rules(&cluster));
    }

    #[test]
    fn bad_configuration_is_reported_on_the_endpoint() {
        let w = parse_webhook(
            &json!({"name": "d", "clientConfig": {"url": "http://plain/"}, "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, "timeoutSeconds": 99}),
            false,
        );
        let e = w.endpoint.expect_err("invalid");
        assert!(e.contains("must use https"), "{e}");
        let e = w.namespace_selector.expect_err("invalid selector");
        assert!(e.starts_with("namespaceSelector: "), "{e}");
        assert!(w.object_selector.is_ok());
        assert_eq!(w.timeout, MAX_TIMEOUT);
        assert!(w.fail_closed);
    }
}
