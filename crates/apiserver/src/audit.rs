//! Audit, the stage after authentication: kube's audit policy
//! (`audit.k8s.io/v1` Policy: rules by user, group, verb, resource,
//! namespace and non-resource URL, first match decides the level `None`,
//! `Metadata`, `Request` or `RequestResponse`; `omitStages` globally and
//! per rule) and its log backend: one `audit.k8s.io/v1` Event per request
//! stage as a JSON line, appended to a file that is rotated by size
//! (kube-apiserver's `--audit-log-path`, `--audit-log-maxsize`,
//! `--audit-log-maxbackup`).
//!
//! Stages as kube writes them: `RequestReceived` once the user is known,
//! then `ResponseComplete` (or `ResponseStarted` for a watch, whose end is
//! not recorded here; `Panic` for a handler that panicked). A request that
//! fails authentication gets one `ResponseStarted` event, as kube's failed
//! authentication audit writes it. Each event carries the requester, the
//! impersonated user, the client address, the object, the response status
//! and the authorizer's `authorization.k8s.io/decision` and `reason`
//! annotations, and the annotations admission plugins add while the
//! request is served (`annotate`: Pod Security's
//! `pod-security.kubernetes.io/*`); `Request` adds the request body,
//! `RequestResponse` the response body (JSON only).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use kubeforge_authz::{Attributes, UserInfo};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// How much of a request is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Level {
    /// Nothing.
    None,
    /// Who, what, when, the answer's status.
    Metadata,
    /// And the request body.
    Request,
    /// And the response body.
    RequestResponse,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// A request stage an event is written at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Stage {
    /// As soon as the request is read and its user known.
    RequestReceived,
    /// Response headers sent, body still streaming (watches).
    ResponseStarted,
    /// The response is complete.
    ResponseComplete,
    /// The handler panicked.
    Panic,
}

impl Stage {
    fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
    #[serde(rename = "resourceNames")]
    resource_names: Vec<String>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// An audit Policy (`audit.k8s.io/v1`, kind `Policy`).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
}

/// Why audit could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The policy does not parse or is not an `audit.k8s.io/v1` Policy.
    #[error("the audit policy is invalid: {0}")]
    Policy(String),
    /// The log file cannot be opened or written.
    #[error("the audit log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

impl Policy {
    /// Parse a Policy from YAML or JSON.
    pub fn parse(text: &str) -> Result<Policy, AuditError> {
        let v: Value =
            serde_saphyr::from_str(text).map_err(|e| AuditError::Policy(e.to_string()))?;
        let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if !matches!(api_version, "audit.k8s.io/v1" | "audit.k8s.io/v1beta1") || kind != "Policy" {
            return Err(AuditError::Policy(format!(
                "expected apiVersion audit.k8s.io/v1, kind Policy; got {api_version:?}, {kind:?}"
            )));
        }
        serde_json::from_value(v).map_err(|e| AuditError::Policy(e.to_string()))
    }

    /// Every request at `level` (what tests and `--audit-level` use).
    pub fn everything(level: Level) -> Policy {
        Policy {
            rules: vec![Rule {
                level,
                users: Vec::new(),
                user_groups: Vec::new(),
                verbs: Vec::new(),
                resources: Vec::new(),
                namespaces: Vec::new(),
                non_resource_urls: Vec::new(),
                omit_stages: Vec::new(),
            }],
            omit_stages: Vec::new(),
        }
    }

    /// The level and omitted stages for `a` (kube's `policyRuleEvaluator`):
    /// the first rule that matches decides; none → `None`.
    fn evaluate(&self, a: &Attributes) -> (Level, Vec<Stage>) {
        for r in &self.rules {
            if r.matches(a) {
                let mut omit = self.omit_stages.clone();
                omit.extend(r.omit_stages.iter().copied());
                return (r.level, omit);
            }
        }
        (Level::None, Vec::new())
    }
}

impl Rule {
    fn matches(&self, a: &Attributes) -> bool {
        if !self.users.is_empty() && !self.users.contains(&a.user.name) {
            return false;
        }
        if !self.user_groups.is_empty() && !self.user_groups.iter().any(|g| a.user.in_group(g)) {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&a.verb) {
            return false;
        }
        if a.resource_request {
            if !self.non_resource_urls.is_empty() {
                return false;
            }
            if !self.namespaces.is_empty() && !self.namespaces.contains(&a.namespace) {
                return false;
            }
            self.resources.is_empty() || self.resources.iter().any(|g| g.matches(a))
        } else {
            if !self.namespaces.is_empty() || !self.resources.is_empty() {
                return false;
            }
            self.non_resource_urls.is_empty()
                || self
                    .non_resource_urls
                    .iter()
                    .any(|u| match u.strip_suffix('*') {
                        Some(prefix) => a.path.starts_with(prefix),
                        None => *u == a.path,
                    })
        }
    }
}

impl GroupResources {
    fn matches(&self, a: &Attributes) -> bool {
        if self.group != a.api_group {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = a.combined_resource();
        self.resources.iter().any(|res| {
            (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
                && (*res == combined
                    || res == "*"
                    || (!a.subresource.is_empty()
                        && res.strip_prefix("*/") == Some(a.subresource.as_str()))
                    || res.strip_suffix("/*") == Some(a.resource.as_str()))
        })
    }
}

/// An append-only file rotated when it would pass `max_bytes`: the full
/// file is renamed `<stem>-<UTC time>.<ext>` beside it and at most
/// `max_backups` such files are kept (0 keeps all), as kube's lumberjack
/// writer does.
struct Rotating {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    max_bytes: u64,
    max_backups: usize,
}

impl Rotating {
    fn open(path: &Path, max_bytes: u64, max_backups: usize) -> Result<Rotating, AuditError> {
        let io = |source| AuditError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let file = open_append(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        Ok(Rotating {
            path: path.to_path_buf(),
            file,
            size,
            max_bytes,
            max_backups,
        })
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.max_bytes > 0 && self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn backup_name(&self) -> PathBuf {
        let stem = self
            .path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("audit");
        let ext = self
            .path
            .extension()
            .and_then(|s| s.to_str())
            .map(|e| format!(".{e}"))
            .unwrap_or_default();
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H-%M-%S%.3f")
            .to_string();
        self.path.with_file_name(format!("{stem}-{now}{ext}"))
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let mut backup = self.backup_name();
        let mut n = 1;
        while backup.exists() {
            backup = self.backup_name().with_extension(format!("{n}.log"));
            n += 1;
        }
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path)?;
        self.size = 0;
        if self.max_backups > 0 {
            let mut backups = self.backups();
            backups.sort();
            let excess = backups.len().saturating_sub(self.max_backups);
            for old in &backups[..excess] {
                let _ = std::fs::remove_file(old);
            }
        }
        Ok(())
    }

    /// The rotated files beside the log (names sort by time).
    fn backups(&self) -> Vec<PathBuf> {
        let stem = self
            .path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("audit")
            .to_string();
        let Some(dir) = self.path.parent() else {
            return Vec::new();
        };
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| {
                        p != &self.path
                            && p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with(&format!("{stem}-")))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)
}

/// The audit log: a policy and where events go.
pub struct AuditLog {
    policy: Policy,
    out: Mutex<Rotating>,
}

impl AuditLog {
    /// Write events chosen by `policy` to `path`, rotating past
    /// `max_megabytes` (0: never) and keeping `max_backups` old files (0:
    /// all).
    pub fn open(
        policy: Policy,
        path: &Path,
        max_megabytes: u64,
        max_backups: usize,
    ) -> Result<AuditLog, AuditError> {
        Ok(AuditLog {
            policy,
            out: Mutex::new(Rotating::open(
                path,
                max_megabytes.saturating_mul(1024 * 1024),
                max_backups,
            )?),
        })
    }

    fn write(&self, event: &Value) {
        let mut line = match serde_json::to_vec(event) {
            Ok(l) => l,
            Err(_) => return,
        };
        line.push(b'\n');
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = out.write(&line) {
            tracing::error!(error = %e, path = %out.path.display(), "writing the audit log failed");
        }
    }
}

fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn user_json(u: &UserInfo) -> Value {
    crate::reviews::user_info(u)
}

tokio::task_local! {
    /// The audit annotations noted while one request is served.
    static NOTES: std::cell::RefCell<Vec<(String, String)>>;
}

/// Note an audit annotation for the request this task is serving (kube's
/// `AddAnnotation`); outside a request it is dropped.
pub(crate) fn annotate(key: impl Into<String>, value: impl Into<String>) {
    let note = (key.into(), value.into());
    let _ = NOTES.try_with(|n| n.borrow_mut().push(note));
}

/// Run `f` (serving one request), collecting what it [`annotate`]s.
pub(crate) async fn collecting<F: std::future::Future>(f: F) -> (F::Output, Vec<(String, String)>) {
    NOTES
        .scope(std::cell::RefCell::new(Vec::new()), async move {
            let out = f.await;
            (out, NOTES.with(|n| n.take()))
        })
        .await
}

/// One request being audited.
pub(crate) struct Record {
    log: Arc<AuditLog>,
    level: Level,
    omit: Vec<Stage>,
    event: Map<String, Value>,
    watch: bool,
}

impl Record {
    /// Start auditing a request by `requester` acting as `a.user`, asking
    /// `a`; writes `RequestReceived`. `None` when the policy's level is
    /// `None`.
    pub fn start(
        log: &Arc<AuditLog>,
        a: &Attributes,
        requester: &UserInfo,
        uri: &str,
        user_agent: Option<&str>,
        received: jiff::Timestamp,
    ) -> Option<Record> {
        let r = Record::new(log, a, requester, uri, user_agent, received)?;
        r.emit(Stage::RequestReceived);
        Some(r)
    }

    fn new(
        log: &Arc<AuditLog>,
        a: &Attributes,
        requester: &UserInfo,
        uri: &str,
        user_agent: Option<&str>,
        received: jiff::Timestamp,
    ) -> Option<Record> {
        let (level, omit) = log.policy.evaluate(a);
        if level == Level::None {
            return None;
        }
        let mut event = Map::new();
        event.insert("kind".into(), json!("Event"));
        event.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        event.insert("level".into(), json!(level.as_str()));
        event.insert("auditID".into(), json!(uuid::Uuid::new_v4().to_string()));
        event.insert("stage".into(), json!(""));
        event.insert("requestURI".into(), json!(uri));
        event.insert("verb".into(), json!(a.verb));
        event.insert("user".into(), user_json(requester));
        if let Some(ip) = a.source {
            event.insert("sourceIPs".into(), json!([ip.to_string()]));
        }
        if let Some(ua) = user_agent {
            event.insert("userAgent".into(), json!(ua));
        }
        if a.resource_request {
            let mut o = json!({"resource": a.resource, "apiVersion": a.api_version});
            if !a.namespace.is_empty() {
                o["namespace"] = json!(a.namespace);
            }
            if !a.name.is_empty() {
                o["name"] = json!(a.name);
            }
            if !a.api_group.is_empty() {
                o["apiGroup"] = json!(a.api_group);
            }
            if !a.subresource.is_empty() {
                o["subresource"] = json!(a.subresource);
            }
            event.insert("objectRef".into(), o);
        }
        event.insert(
            "requestReceivedTimestamp".into(),
            json!(micro_time(received)),
        );
        Some(Record {
            log: log.clone(),
            level,
            omit,
            event,
            watch: a.verb == "watch",
        })
    }

    /// The request's ID (the `Audit-Id` response header).
    pub fn id(&self) -> &str {
        self.event
            .get("auditID")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Note whom the request acts as after impersonation.
    pub fn impersonated(&mut self, user: &UserInfo) {
        self.event
            .insert("impersonatedUser".into(), user_json(user));
    }

    /// Note the authorizer's decision.
    pub fn authorized(&mut self, allowed: bool, reason: &str) {
        let mut a =
            json!({"authorization.k8s.io/decision": if allowed { "allow" } else { "forbid" }});
        a["authorization.k8s.io/reason"] = json!(reason);
        self.event.insert("annotations".into(), a);
    }

    /// Add annotations admission plugins noted (after the authorizer's).
    pub fn annotations(&mut self, notes: Vec<(String, String)>) {
        if notes.is_empty() {
            return;
        }
        let a = self
            .event
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = a.as_object_mut() {
            for (k, v) in notes {
                a.insert(k, Value::String(v));
            }
        }
    }

    /// The request body, kept at level `Request` and above: JSON as sent,
    /// Kubernetes protobuf (kubectl's typed creates) decoded to JSON.
    pub fn request_body(&mut self, body: &Bytes) {
        if self.level < Level::Request || body.is_empty() {
            return;
        }
        let v = if body.starts_with(&crate::protobuf::MAGIC) {
            crate::protobuf::decode(body).ok()
        } else {
            serde_json::from_slice::<Value>(body).ok()
        };
        if let Some(v) = v {
            self.event.insert("requestObject".into(), v);
        }
    }

    fn emit(&self, stage: Stage) {
        if self.omit.contains(&stage) {
            return;
        }
        let mut e = self.event.clone();
        e.insert("stage".into(), json!(stage.as_str()));
        e.insert(
            "stageTimestamp".into(),
            json!(micro_time(jiff::Timestamp::now())),
        );
        self.log.write(&Value::Object(e));
    }

    /// The answer is known: write `ResponseComplete` (`ResponseStarted`
    /// for a watch that streams, `Panic` when `panicked`). `body` is the
    /// response body when complete and JSON.
    pub fn finish(
        mut self,
        code: u16,
        error: Option<&crate::error::ApiError>,
        body: Option<&Bytes>,
        panicked: bool,
    ) {
        let mut status = json!({"metadata": {}, "code": code});
        if let Some(e) = error {
            status["status"] = json!("Failure");
            status["message"] = json!(e.message);
            status["reason"] = json!(e.reason);
        }
        self.event.insert("responseStatus".into(), status);
        if self.level >= Level::RequestResponse
            && let Some(b) = body
            && let Ok(v) = serde_json::from_slice::<Value>(b)
        {
            self.event.insert("responseObject".into(), v);
        }
        let stage = if panicked {
            Stage::Panic
        } else if self.watch && code == 200 {
            Stage::ResponseStarted
        } else {
            Stage::ResponseComplete
        };
        self.emit(stage);
    }
}

/// A request refused at authentication: one `ResponseStarted` event with
/// what is known (kube's failed-authentication audit).
pub(crate) fn unauthenticated(
    log: &Arc<AuditLog>,
    a: &Attributes,
    uri: &str,
    user_agent: Option<&str>,
) {
    let Some(mut r) = Record::new(log, a, &a.user, uri, user_agent, jiff::Timestamp::now()) else {
        return;
    };
    r.event.insert(
        "responseStatus".into(),
        json!({"metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
    );
    r.emit(Stage::ResponseStarted);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attrs(user: &str, verb: &str, ns: &str, resource: &str, sub: &str) -> Attributes {
        Attributes::resource(
            UserInfo::new(user, ["system:authenticated"]),
            verb,
            ns,
            "",
            "v1",
            resource,
            sub,
            "p",
        )
    }

    #[test]
    fn the_first_matching_rule_decides_as_in_kube() {
        let p = Policy::parse(
            r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: RequestResponse
  resources: [{group: "", resources: ["pods/*"]}]
- level: Request
  namespaces: [prod]
  verbs: [create, update]
- level: None
  nonResourceURLs: ["/healthz*"]
- level: Metadata
  omitStages: [ResponseStarted]
"#,
        )
        .unwrap();
        assert_eq!(
            p.evaluate(&attrs("system:kube-proxy", "get", "a", "pods", ""))
                .0,
            Level::None
        );
        assert_eq!(
            p.evaluate(&attrs("u", "get", "a", "pods", "log")).0,
            Level::RequestResponse
        );
        // kube's "resource/*" also matches the resource itself.
        assert_eq!(
            p.evaluate(&attrs("u", "get", "a", "pods", "")).0,
            Level::RequestResponse
        );
        assert_eq!(
            p.evaluate(&attrs("u", "get", "a", "services", "")).0,
            Level::Metadata
        );
        assert_eq!(
            p.evaluate(&attrs("u", "create", "prod", "secrets", "")).0,
            Level::Request
        );
        let health = Attributes::non_resource(UserInfo::new("u", ["g"]), "get", "/healthz/etcd");
        assert_eq!(p.evaluate(&health).0, Level::None);
        let (level, omit) = p.evaluate(&Attributes::non_resource(
            UserInfo::new("u", ["g"]),
            "get",
            "/version",
        ));
        assert_eq!(level, Level::Metadata);
        assert_eq!(omit, vec![Stage::RequestReceived, Stage::ResponseStarted]);
        assert!(Policy::parse("apiVersion: v1\nkind: ConfigMap\n").is_err());
        assert!(
            Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n")
                .is_err()
        );
    }

    #[test]
    fn the_file_rotates_and_keeps_its_backups() {
        let dir = std::env::temp_dir().join(format!("kubeforge-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("audit.log");
        let mut r = Rotating::open(&path, 100, 2).unwrap();
        for i in 0..10 {
            r.write(format!("{{\"line\":{i:040}}}\n").as_bytes())
                .unwrap();
        }
        let backups = r.backups();
        assert_eq!(backups.len(), 2, "{backups:?}");
        let current = std::fs::read_to_string(&path).unwrap();
        assert!(
            current.ends_with(&format!("{{\"line\":{:040}}}\n", 9)),
            "{current}"
        );
        assert!(current.len() <= 100);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
