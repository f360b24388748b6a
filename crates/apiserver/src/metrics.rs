//! The API server's own metrics at `/metrics`, under kube-apiserver's names,
//! labels, buckets and HELP stability prefixes, so dashboards and alerts
//! written for kube-apiserver (kubernetes-mixin, kube-prometheus) read them
//! unchanged: `apiserver_request_total`, `apiserver_request_duration_seconds`,
//! `apiserver_request_sli_duration_seconds`, `apiserver_current_inflight_requests`,
//! `apiserver_longrunning_requests`, `apiserver_watch_events_total`,
//! `apiserver_storage_objects` / `apiserver_resource_objects` and
//! `kubernetes_build_info`.
//!
//! A request's labels follow kube's `MonitorRequest`: the verb uppercased,
//! GET of a collection as LIST, `?watch` as WATCH, an apply patch as APPLY,
//! DELETE of a collection as DELETECOLLECTION, the streaming subresources
//! as CONNECT; the scope `resource` (a name, or a create), `namespace`,
//! `cluster` or `""` off the API; a resource the server does not serve is
//! reported without group, version and resource, so no request can grow
//! the label space. Scrapes get OpenMetrics text when they accept it (what
//! Prometheus asks for first) and Prometheus text 0.0.4 otherwise (what
//! `kubectl get --raw /metrics` and `promtool check metrics` read).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::registry::ResourceDef;
use crate::request::{Query, Route};

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// `apiserver_request_duration_seconds`' buckets.
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];
/// `apiserver_request_sli_duration_seconds`' buckets (the same from 50 ms).
const SLI_BUCKETS: [f64; 21] = [
    0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0,
    30.0, 45.0, 60.0,
];

/// The content type of OpenMetrics text.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The content type of Prometheus text 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a request is, for its metrics (kube's `RequestInfo`, cleaned),
/// built without allocating: the verb, scope and the rest are static
/// strings, the resource the served definition itself.
#[derive(Clone)]
pub(crate) struct RequestKey {
    verb: &'static str,
    dry_run: &'static str,
    scope: &'static str,
    component: &'static str,
    resource: Option<Arc<ResourceDef>>,
    subresource: &'static str,
}

impl PartialEq for RequestKey {
    fn eq(&self, o: &Self) -> bool {
        self.verb == o.verb
            && self.dry_run == o.dry_run
            && self.scope == o.scope
            && self.component == o.component
            && self.subresource == o.subresource
            && match (&self.resource, &o.resource) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for RequestKey {}

impl std::hash::Hash for RequestKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.verb.hash(h);
        self.dry_run.hash(h);
        self.scope.hash(h);
        self.component.hash(h);
        self.subresource.hash(h);
        self.resource.as_ref().map(Arc::as_ptr).hash(h);
    }
}

impl RequestKey {
    fn labels(&self) -> RequestLabels {
        let (group, version, resource) = match &self.resource {
            Some(d) => (d.group.clone(), d.version.clone(), d.plural.clone()),
            None => Default::default(),
        };
        RequestLabels {
            verb: self.verb.to_string(),
            dry_run: self.dry_run.to_string(),
            group,
            version,
            resource,
            subresource: self.subresource.to_string(),
            scope: self.scope.to_string(),
            component: self.component.to_string(),
        }
    }
}

/// The families' members one request key writes, looked up once.
struct Series {
    duration: Histogram,
    /// `None` for dry runs (kube leaves them out of the SLI).
    sli: Option<Histogram>,
    labels: RequestLabels,
    codes: RwLock<Vec<(u16, Counter)>>,
}

/// A request's labels as the families encode them.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    dry_run: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WithCode {
    #[prometheus(flatten)]
    request: RequestLabels,
    code: String,
}

/// The request labels without `dry_run` (and `code`): those of the SLI
/// histogram and of `apiserver_longrunning_requests`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SliLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GvrLabels {
    group: String,
    version: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    request_kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StorageLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    group: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    major: String,
    minor: String,
    git_version: String,
    git_commit: String,
    git_tree_state: String,
    build_date: String,
    go_version: String,
    compiler: String,
    platform: String,
}

/// Requests in flight of one kind, and the most seen since the last scrape
/// (kube reports the maximum of the last second).
#[derive(Default)]
struct InFlight {
    now: AtomicI64,
    peak: AtomicI64,
}

impl InFlight {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(n, Ordering::Relaxed);
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::Relaxed);
    }

    /// The peak since the last call; the next period starts at the
    /// current count.
    fn take_peak(&self) -> i64 {
        let now = self.now.load(Ordering::Relaxed);
        self.peak.swap(now, Ordering::Relaxed).max(now)
    }
}

/// The API server's metrics.
pub(crate) struct ApiMetrics {
    registry: Registry,
    series: RwLock<HashMap<RequestKey, Arc<Series>>>,
    requests: Family<WithCode, Counter>,
    duration: Family<RequestLabels, Histogram>,
    sli: Family<SliLabels, Histogram>,
    inflight: Family<KindLabels, Gauge>,
    read_only: InFlight,
    mutating: InFlight,
    storage_objects: Family<StorageLabels, Gauge>,
    resource_objects: Family<ResourceLabels, Gauge>,
    longrunning: Family<SliLabels, Gauge>,
    watch_events: Family<GvrLabels, Counter>,
}

/// An open watch: counted in `apiserver_longrunning_requests` until
/// dropped, and counting the events it sends.
pub(crate) struct OpenWatch {
    open: Gauge,
    events: Counter,
}

impl OpenWatch {
    /// One more event sent.
    pub(crate) fn sent(&self) {
        self.events.inc();
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics::new()
    }
}

impl std::fmt::Debug for ApiMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiMetrics").finish_non_exhaustive()
    }
}

/// A request being served: counted in flight until dropped.
pub(crate) struct Tracked<'a> {
    flight: &'a InFlight,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.flight.leave();
    }
}

impl ApiMetrics {
    fn new() -> ApiMetrics {
        let mut registry = Registry::default();
        let requests = Family::<WithCode, Counter>::default();
        let duration = Family::<RequestLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(DURATION_BUCKETS)) as fn() -> Histogram,
        );
        let sli = Family::<SliLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(SLI_BUCKETS)) as fn() -> Histogram,
        );
        let inflight = Family::<KindLabels, Gauge>::default();
        let storage_objects = Family::<StorageLabels, Gauge>::default();
        let resource_objects = Family::<ResourceLabels, Gauge>::default();
        let build = Family::<BuildLabels, Gauge>::default();
        let longrunning = Family::<SliLabels, Gauge>::default();
        let watch_events = Family::<GvrLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "[STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "[STABLE] Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            duration.clone(),
        );
        registry.register(
            "apiserver_request_sli_duration_seconds",
            "[ALPHA] Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group, version, resource, subresource, scope and component",
            sli.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "[STABLE] Maximal number of currently used inflight request limit of this apiserver per request kind in last second",
            inflight.clone(),
        );
        registry.register(
            "apiserver_storage_objects",
            "[STABLE] (Deprecated since 1.34.0) Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1",
            storage_objects.clone(),
        );
        registry.register(
            "apiserver_resource_objects",
            "[ALPHA] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1",
            resource_objects.clone(),
        );
        registry.register(
            "apiserver_longrunning_requests",
            "[STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way",
            longrunning.clone(),
        );
        registry.register(
            "apiserver_watch_events",
            "[BETA] Number of events sent in watch clients",
            watch_events.clone(),
        );
        registry.register(
            "kubernetes_build_info",
            "[BETA] A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running",
            build.clone(),
        );
        let v = crate::server::version_info();
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        build
            .get_or_create(&BuildLabels {
                major: s("major"),
                minor: s("minor"),
                git_version: s("gitVersion"),
                git_commit: s("gitCommit"),
                git_tree_state: s("gitTreeState"),
                build_date: s("buildDate"),
                go_version: s("goVersion"),
                compiler: s("compiler"),
                platform: s("platform"),
            })
            .set(1);
        for kind in ["readOnly", "mutating"] {
            inflight
                .get_or_create(&KindLabels { request_kind: kind })
                .set(0);
        }
        ApiMetrics {
            registry,
            series: RwLock::default(),
            requests,
            duration,
            sli,
            inflight,
            read_only: InFlight::default(),
            mutating: InFlight::default(),
            storage_objects,
            resource_objects,
            longrunning,
            watch_events,
        }
    }

    /// A watch of `def` starts (in a namespace, or across them): it counts
    /// as long-running until the returned guard drops.
    pub(crate) fn watch_opened(&self, def: &ResourceDef, namespaced: bool) -> OpenWatch {
        let labels = SliLabels {
            verb: "WATCH".into(),
            group: def.group.clone(),
            version: def.version.clone(),
            resource: def.plural.clone(),
            subresource: String::new(),
            scope: if namespaced { "namespace" } else { "cluster" }.into(),
            component: "apiserver".into(),
        };
        let open = self.longrunning.get_or_create(&labels).clone();
        open.inc();
        let events = self
            .watch_events
            .get_or_create(&GvrLabels {
                group: labels.group,
                version: labels.version,
                resource: labels.resource,
            })
            .clone();
        OpenWatch { open, events }
    }

    /// Count a request in flight (read-only or mutating by its method) until
    /// the returned guard drops.
    pub(crate) fn enter(&self, method: &http::Method) -> Tracked<'_> {
        let flight = if matches!(
            *method,
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        ) {
            &self.read_only
        } else {
            &self.mutating
        };
        flight.enter();
        Tracked { flight }
    }

    /// Record a finished request: `key` (from [`labels`]), the HTTP status
    /// and how long it took to answer.
    pub(crate) fn observe(&self, key: RequestKey, code: u16, secs: f64) {
        let series = self.series_of(key);
        series.duration.observe(secs);
        if let Some(sli) = &series.sli {
            sli.observe(secs);
        }
        let counted = read(&series.codes)
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, counter)| counter.inc())
            .is_some();
        if !counted {
            let mut codes = write(&series.codes);
            let counter = match codes.iter().find(|(c, _)| *c == code) {
                Some((_, counter)) => counter.clone(),
                None => {
                    let counter = self
                        .requests
                        .get_or_create(&WithCode {
                            request: series.labels.clone(),
                            code: code.to_string(),
                        })
                        .clone();
                    codes.push((code, counter.clone()));
                    counter
                }
            };
            counter.inc();
        }
    }

    /// The series of `key`, made on first use.
    fn series_of(&self, key: RequestKey) -> Arc<Series> {
        if let Some(s) = read(&self.series).get(&key) {
            return s.clone();
        }
        let labels = key.labels();
        let sli = key.dry_run.is_empty().then(|| {
            self.sli
                .get_or_create(&SliLabels {
                    verb: labels.verb.clone(),
                    group: labels.group.clone(),
                    version: labels.version.clone(),
                    resource: labels.resource.clone(),
                    subresource: labels.subresource.clone(),
                    scope: labels.scope.clone(),
                    component: labels.component.clone(),
                })
                .clone()
        });
        let series = Arc::new(Series {
            duration: self.duration.get_or_create(&labels).clone(),
            sli,
            labels,
            codes: RwLock::default(),
        });
        write(&self.series).entry(key).or_insert(series).clone()
    }

    /// The metrics as OpenMetrics text, with the object counts read from
    /// `server`'s store now.
    pub(crate) fn encode(&self, server: &crate::ApiServer) -> String {
        self.inflight
            .get_or_create(&KindLabels {
                request_kind: "readOnly",
            })
            .set(self.read_only.take_peak());
        self.inflight
            .get_or_create(&KindLabels {
                request_kind: "mutating",
            })
            .set(self.mutating.take_peak());
        self.storage_objects.clear();
        self.resource_objects.clear();
        let mut seen = std::collections::BTreeSet::new();
        for def in server.registry().all() {
            // Only what is stored (not reviews and other create-only kinds).
            if !def.has_verb("list") {
                continue;
            }
            let prefix = def.key_prefix();
            if !seen.insert(prefix.clone()) {
                continue;
            }
            let n = i64::try_from(server.store().count(&prefix)).unwrap_or(i64::MAX);
            let gr = def.gr();
            let resource = if gr.group.is_empty() {
                gr.resource.to_string()
            } else {
                format!("{}.{}", gr.resource, gr.group)
            };
            self.storage_objects
                .get_or_create(&StorageLabels { resource })
                .set(n);
            self.resource_objects
                .get_or_create(&ResourceLabels {
                    group: gr.group.to_string(),
                    resource: gr.resource.to_string(),
                })
                .set(n);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

// prometheus-client ends each HELP text with a period itself: the texts
// above are kube's without their last one.

/// The streaming subresources kube reports as CONNECT.
const CONNECT: [&str; 5] = ["log", "exec", "portforward", "attach", "proxy"];
/// The subresources a label may name (any other is reported as none, so
/// no request can add label values).
const SUBRESOURCES: [&str; 14] = [
    "status",
    "scale",
    "binding",
    "eviction",
    "ephemeralcontainers",
    "approval",
    "finalize",
    "token",
    "log",
    "exec",
    "portforward",
    "attach",
    "proxy",
    "resize",
];

/// The key of a request (kube's `MonitorRequest` cleaning): see the
/// module docs. `served(group, version, plural)` is the served definition
/// of that resource, if any.
pub(crate) fn labels(
    method: &http::Method,
    path: &str,
    route: &Route,
    query: &Query,
    content_type: Option<&str>,
    served: impl Fn(&str, &str, &str) -> Option<Arc<ResourceDef>>,
) -> RequestKey {
    let dry_run = match query.get("dryRun") {
        None => "",
        Some("All") => "All",
        Some(_) => "invalid",
    };
    let mut key = RequestKey {
        verb: match *method {
            http::Method::GET => "GET",
            http::Method::HEAD => "HEAD",
            http::Method::POST => "POST",
            http::Method::PUT => "PUT",
            http::Method::PATCH => "PATCH",
            http::Method::DELETE => "DELETE",
            http::Method::OPTIONS => "OPTIONS",
            _ => "other",
        },
        dry_run,
        scope: "",
        component: "apiserver",
        resource: None,
        subresource: "",
    };
    match route {
        Route::Resource(p) => {
            let sub = p.subresource.as_deref().unwrap_or_default();
            key.verb = match *method {
                _ if CONNECT.contains(&sub) => "CONNECT",
                http::Method::GET | http::Method::HEAD if query.flag("watch") => "WATCH",
                http::Method::GET | http::Method::HEAD if p.name.is_none() => "LIST",
                http::Method::GET | http::Method::HEAD => "GET",
                http::Method::POST => "CREATE",
                http::Method::PUT => "UPDATE",
                http::Method::PATCH
                    if content_type.is_some_and(|c| c.starts_with("application/apply-patch")) =>
                {
                    "APPLY"
                }
                http::Method::PATCH => "PATCH",
                http::Method::DELETE if p.name.is_none() => "DELETECOLLECTION",
                http::Method::DELETE => "DELETE",
                _ => "other",
            };
            key.scope = if p.name.is_some() || key.verb == "CREATE" {
                "resource"
            } else if p.namespace.is_some() {
                "namespace"
            } else {
                "cluster"
            };
            key.resource = served(&p.group, &p.version, &p.plural);
            if key.resource.is_some() {
                key.subresource = SUBRESOURCES
                    .iter()
                    .find(|s| **s == sub)
                    .copied()
                    .unwrap_or_default();
            }
        }
        Route::Health => {
            // kube's health checks: no component, the path as subresource.
            key.component = "";
            key.subresource = ["/healthz", "/livez", "/readyz"]
                .iter()
                .find(|h| path.starts_with(*h))
                .copied()
                .unwrap_or_default();
        }
        _ => {}
    }
    key
}

/// Whether a scrape with `accept` gets OpenMetrics text.
pub(crate) fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// OpenMetrics text as Prometheus text 0.0.4: counters' HELP and TYPE
/// lines name the `_total` series, and the `# UNIT` and `# EOF` lines go.
pub fn prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|tag| {
            let rest = line.strip_prefix(tag)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            counters
                .contains(name)
                .then(|| format!("{tag}{name}_total {tail}"))
        });
        match rewritten {
            Some(r) => out.push_str(r.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::route;

    fn of(method: http::Method, path_query: &str, content_type: Option<&str>) -> RequestLabels {
        let (path, q) = path_query.split_once('?').unwrap_or((path_query, ""));
        let r = route(path, |_, _, p| p != "namespaces" && p != "nodes");
        let registry = crate::registry::Registry::with_builtins();
        labels(
            &method,
            path,
            &r,
            &Query::parse(Some(q)),
            content_type,
            |g, v, p| registry.get(g, v, p),
        )
        .labels()
    }

    #[test]
    fn verbs_and_scopes_as_kube_reports_them() {
        use http::Method as M;
        let cases = [
            (
                M::GET,
                "/api/v1/namespaces/default/pods",
                None,
                "LIST",
                "namespace",
            ),
            (M::GET, "/api/v1/pods", None, "LIST", "cluster"),
            (M::GET, "/api/v1/pods?watch=1", None, "WATCH", "cluster"),
            (
                M::GET,
                "/api/v1/namespaces/default/pods/p",
                None,
                "GET",
                "resource",
            ),
            (
                M::POST,
                "/api/v1/namespaces/default/pods",
                None,
                "CREATE",
                "resource",
            ),
            (
                M::PUT,
                "/api/v1/namespaces/default/pods/p",
                None,
                "UPDATE",
                "resource",
            ),
            (
                M::PATCH,
                "/apis/apps/v1/namespaces/default/deployments/d",
                Some("application/apply-patch+yaml"),
                "APPLY",
                "resource",
            ),
            (
                M::PATCH,
                "/apis/apps/v1/namespaces/default/deployments/d",
                Some("application/merge-patch+json"),
                "PATCH",
                "resource",
            ),
            (
                M::DELETE,
                "/api/v1/namespaces/default/pods",
                None,
                "DELETECOLLECTION",
                "namespace",
            ),
            (
                M::DELETE,
                "/api/v1/namespaces/default/pods/p",
                None,
                "DELETE",
                "resource",
            ),
            (
                M::GET,
                "/api/v1/namespaces/default/pods/p/log",
                None,
                "CONNECT",
                "resource",
            ),
            (M::GET, "/api", None, "GET", ""),
        ];
        for (m, path, ct, verb, scope) in cases {
            let l = of(m, path, ct);
            assert_eq!((l.verb.as_str(), l.scope.as_str()), (verb, scope), "{path}");
        }
        let l = of(
            http::Method::GET,
            "/apis/apps/v1/namespaces/default/deployments/d/scale",
            None,
        );
        assert_eq!(
            (
                l.group.as_str(),
                l.version.as_str(),
                l.resource.as_str(),
                l.subresource.as_str()
            ),
            ("apps", "v1", "deployments", "scale")
        );
        assert_eq!(l.component, "apiserver");
        // A resource nobody serves adds no label values.
        let l = of(http::Method::GET, "/apis/x.io/v1/nonsense/x/status", None);
        assert_eq!(
            (
                l.group.as_str(),
                l.resource.as_str(),
                l.subresource.as_str()
            ),
            ("", "", "")
        );
        let health = of(http::Method::GET, "/healthz", None);
        assert_eq!(
            (health.component.as_str(), health.subresource.as_str()),
            ("", "/healthz")
        );
        let dry = |q: &str| {
            of(
                http::Method::POST,
                &format!("/api/v1/namespaces/d/pods?{q}"),
                None,
            )
            .dry_run
        };
        assert_eq!(dry(""), "");
        assert_eq!(dry("dryRun=All"), "All");
        assert_eq!(dry("dryRun=Some"), "invalid");
    }

    #[test]
    fn openmetrics_becomes_prometheus_text() {
        let om = "# HELP apiserver_request [STABLE] Counter.\n# TYPE apiserver_request counter\napiserver_request_total{code=\"200\"} 3\n# HELP g A gauge.\n# TYPE g gauge\n# UNIT g seconds\ng 1\n# EOF\n";
        assert_eq!(
            prometheus_text(om),
            "# HELP apiserver_request_total [STABLE] Counter.\n# TYPE apiserver_request_total counter\napiserver_request_total{code=\"200\"} 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n"
        );
    }

    #[test]
    fn inflight_reports_the_peak_since_the_last_scrape() {
        let f = InFlight::default();
        f.enter();
        f.enter();
        f.leave();
        assert_eq!(f.take_peak(), 2);
        assert_eq!(f.take_peak(), 1);
        f.leave();
        assert_eq!(f.take_peak(), 1, "the period started at one in flight");
        assert_eq!(f.take_peak(), 0);
    }
}
