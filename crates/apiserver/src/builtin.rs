//! The built-in resources, one row each.
//!
//! A row names the resource and its discovery facts; columns, field
//! selectors and strategies are data too. The computed Table cells that need
//! more than a field path live at the bottom as small functions.

use kubeforge_apimachinery::names::NameRule;
use serde_json::{Value, json};

use crate::registry::{ALL_VERBS, ResourceDef, ScalePaths, Strategy};
use crate::table::Column;

/// Sub-resources a row may declare.
const STATUS: u8 = 1;
const SCALE: u8 = 2;
const BINDING: u8 = 4;
const EPHEMERAL_CONTAINERS: u8 = 16;
const EVICTION: u8 = 32;

struct Row {
    gv: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    namespaced: bool,
    subs: u8,
    fields: &'static [&'static str],
    name_rule: NameRule,
    generation: bool,
    strategy: Strategy,
    columns: fn() -> Vec<Column>,
}

const NS: bool = true;
const CLUSTER: bool = false;
const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

fn no_columns() -> Vec<Column> {
    vec![Column::age()]
}

macro_rules! row {
    ($gv:expr, $kind:expr, $plural:expr, $short:expr, $cats:expr, $ns:expr, $subs:expr, $fields:expr, $rule:ident, $gen:expr, $strategy:ident, $cols:expr) => {
        Row {
            gv: $gv,
            kind: $kind,
            plural: $plural,
            short: $short,
            categories: $cats,
            namespaced: $ns,
            subs: $subs,
            fields: $fields,
            name_rule: NameRule::$rule,
            generation: $gen,
            strategy: Strategy::$strategy,
            columns: $cols,
        }
    };
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "reportingController",
    "type",
];

/// Field labels kube computes from a Go bool or integer, with what an
/// object without the field shows (`NodeToSelectableFields`:
/// `strconv.FormatBool(node.Spec.Unschedulable)`, the pod's
/// `spec.hostNetwork`, a Job's `status.successful`, a ReplicaSet's
/// `status.replicas`). String fields show "" and need no entry.
#[allow(clippy::type_complexity)]
const ABSENT_FIELDS: &[(&str, &str, &[(&str, &str)])] = &[
    ("v1", "Node", &[("spec.unschedulable", "false")]),
    ("v1", "Pod", &[("spec.hostNetwork", "false")]),
    ("batch/v1", "Job", &[("status.successful", "0")]),
    ("apps/v1", "ReplicaSet", &[("status.replicas", "0")]),
    ("v1", "ReplicationController", &[("status.replicas", "0")]),
];

static ROWS: &[Row] = &[
    row!(
        "v1",
        "Namespace",
        "namespaces",
        &["ns"],
        NONE,
        CLUSTER,
        STATUS,
        &["status.phase"],
        Label,
        false,
        Namespace,
        namespace_columns
    ),
    row!(
        "v1",
        "Pod",
        "pods",
        &["po"],
        ALL,
        NS,
        STATUS | BINDING | EPHEMERAL_CONTAINERS | EVICTION,
        POD_FIELDS,
        Subdomain,
        false,
        Pod,
        pod_columns
    ),
    row!(
        "v1",
        "Service",
        "services",
        &["svc"],
        ALL,
        NS,
        STATUS,
        &["spec.clusterIP", "spec.type"],
        Dns1035Label,
        false,
        Service,
        service_columns
    ),
    row!(
        "v1",
        "Endpoints",
        "endpoints",
        &["ep"],
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        endpoints_columns
    ),
    row!(
        "v1",
        "ConfigMap",
        "configmaps",
        &["cm"],
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        ConfigMap,
        configmap_columns
    ),
    row!(
        "v1",
        "Secret",
        "secrets",
        NONE,
        NONE,
        NS,
        0,
        &["type"],
        Subdomain,
        false,
        Secret,
        secret_columns
    ),
    row!(
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        &["sa"],
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "v1",
        "Node",
        "nodes",
        &["no"],
        NONE,
        CLUSTER,
        STATUS,
        &["spec.unschedulable"],
        Subdomain,
        false,
        Node,
        node_columns
    ),
    row!(
        "v1",
        "Event",
        "events",
        &["ev"],
        NONE,
        NS,
        0,
        EVENT_FIELDS,
        Subdomain,
        false,
        Plain,
        event_columns
    ),
    row!(
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        &["pv"],
        NONE,
        CLUSTER,
        STATUS,
        NONE,
        Subdomain,
        false,
        Plain,
        pv_columns
    ),
    row!(
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        &["pvc"],
        NONE,
        NS,
        STATUS,
        NONE,
        Subdomain,
        false,
        Plain,
        pvc_columns
    ),
    row!(
        "v1",
        "ResourceQuota",
        "resourcequotas",
        &["quota"],
        NONE,
        NS,
        STATUS,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "v1",
        "LimitRange",
        "limitranges",
        &["limits"],
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "v1",
        "PodTemplate",
        "podtemplates",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        &["rc"],
        ALL,
        NS,
        STATUS | SCALE,
        &["status.replicas"],
        Subdomain,
        true,
        Workload,
        replicationcontroller_columns
    ),
    row!(
        "v1",
        "ComponentStatus",
        "componentstatuses",
        &["cs"],
        NONE,
        CLUSTER,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        componentstatus_columns
    ),
    row!(
        "apiregistration.k8s.io/v1",
        "APIService",
        "apiservices",
        NONE,
        &["api-extensions"],
        CLUSTER,
        STATUS,
        NONE,
        Subdomain,
        false,
        Plain,
        apiservice_columns
    ),
    row!(
        "certificates.k8s.io/v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        &["csr"],
        NONE,
        CLUSTER,
        STATUS,
        &["spec.signerName"],
        PathSegment,
        false,
        Plain,
        csr_columns
    ),
    row!(
        "events.k8s.io/v1",
        "Event",
        "events",
        &["ev"],
        NONE,
        NS,
        0,
        EVENTS_V1_FIELDS,
        Subdomain,
        false,
        Plain,
        event_v1_columns
    ),
    row!(
        "apps/v1",
        "Deployment",
        "deployments",
        &["deploy"],
        ALL,
        NS,
        STATUS | SCALE,
        NONE,
        Subdomain,
        true,
        Workload,
        deployment_columns
    ),
    row!(
        "apps/v1",
        "ReplicaSet",
        "replicasets",
        &["rs"],
        ALL,
        NS,
        STATUS | SCALE,
        &["status.replicas"],
        Subdomain,
        true,
        Workload,
        replicaset_columns
    ),
    row!(
        "apps/v1",
        "StatefulSet",
        "statefulsets",
        &["sts"],
        ALL,
        NS,
        STATUS | SCALE,
        NONE,
        Subdomain,
        true,
        Workload,
        statefulset_columns
    ),
    row!(
        "apps/v1",
        "DaemonSet",
        "daemonsets",
        &["ds"],
        ALL,
        NS,
        STATUS,
        NONE,
        Subdomain,
        true,
        Workload,
        daemonset_columns
    ),
    row!(
        "apps/v1",
        "ControllerRevision",
        "controllerrevisions",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "batch/v1",
        "Job",
        "jobs",
        NONE,
        ALL,
        NS,
        STATUS,
        &["status.successful"],
        Subdomain,
        true,
        Workload,
        job_columns
    ),
    row!(
        "batch/v1",
        "CronJob",
        "cronjobs",
        &["cj"],
        ALL,
        NS,
        STATUS,
        NONE,
        Subdomain,
        true,
        Workload,
        cronjob_columns
    ),
    row!(
        "coordination.k8s.io/v1",
        "Lease",
        "leases",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        lease_columns
    ),
    row!(
        "scheduling.k8s.io/v1",
        "PriorityClass",
        "priorityclasses",
        &["pc"],
        NONE,
        CLUSTER,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        priorityclass_columns
    ),
    row!(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        &["api-extensions"],
        CLUSTER,
        STATUS,
        NONE,
        Subdomain,
        true,
        Crd,
        crd_columns
    ),
    row!(
        "networking.k8s.io/v1",
        "Ingress",
        "ingresses",
        &["ing"],
        NONE,
        NS,
        STATUS,
        NONE,
        Subdomain,
        true,
        Plain,
        ingress_columns
    ),
    row!(
        "networking.k8s.io/v1",
        "IngressClass",
        "ingressclasses",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        no_columns
    ),
    row!(
        "networking.k8s.io/v1",
        "NetworkPolicy",
        "networkpolicies",
        &["netpol"],
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        true,
        Plain,
        no_columns
    ),
    row!(
        "storage.k8s.io/v1",
        "StorageClass",
        "storageclasses",
        &["sc"],
        NONE,
        CLUSTER,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        storageclass_columns
    ),
    row!(
        "policy/v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        &["pdb"],
        NONE,
        NS,
        STATUS,
        NONE,
        Subdomain,
        true,
        Plain,
        pdb_columns
    ),
    row!(
        "autoscaling/v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        &["hpa"],
        ALL,
        NS,
        STATUS,
        NONE,
        Subdomain,
        true,
        Plain,
        hpa_columns
    ),
    row!(
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        "subjectaccessreviews",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "authorization.k8s.io/v1",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "authentication.k8s.io/v1",
        "TokenReview",
        "tokenreviews",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        "selfsubjectreviews",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "rbac.authorization.k8s.io/v1",
        "Role",
        "roles",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "rbac.authorization.k8s.io/v1",
        "RoleBinding",
        "rolebindings",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        rolebinding_columns
    ),
    row!(
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        "clusterroles",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        no_columns
    ),
    row!(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        PathSegment,
        false,
        Plain,
        rolebinding_columns
    ),
    row!(
        "admissionregistration.k8s.io/v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        NONE,
        &["api-extensions"],
        CLUSTER,
        0,
        NONE,
        Subdomain,
        true,
        Plain,
        webhook_columns
    ),
    row!(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        NONE,
        &["api-extensions"],
        CLUSTER,
        0,
        NONE,
        Subdomain,
        true,
        Plain,
        webhook_columns
    ),
    row!(
        "discovery.k8s.io/v1",
        "EndpointSlice",
        "endpointslices",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        endpointslice_columns
    ),
];

/// Order of the built-in groups in `/apis`, as kube-apiserver lists them.
pub fn group_rank(group: &str) -> usize {
    const ORDER: &[&str] = &[
        "apiregistration.k8s.io",
        "apps",
        "events.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "networking.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "scheduling.k8s.io",
        "coordination.k8s.io",
        "node.k8s.io",
        "discovery.k8s.io",
        "flowcontrol.apiserver.k8s.io",
    ];
    ORDER
        .iter()
        .position(|g| *g == group)
        .unwrap_or(ORDER.len())
}

/// The built-in rows as registry definitions.
pub fn rows() -> Vec<ResourceDef> {
    ROWS.iter()
        .map(to_def)
        .map(|mut d| {
            if let Some(verbs) = read_only_verbs(&d.group, &d.plural) {
                d.verbs = verbs.iter().map(|s| s.to_string()).collect();
            }
            d
        })
        .collect()
}

/// The Metrics API's rows (metrics.k8s.io/v1beta1 `nodes` and `pods`,
/// get and list only), served while a metrics provider is set
/// (`ApiServer::set_metrics_provider`); computed, never stored.
static METRICS_ROWS: &[Row] = &[
    row!(
        "metrics.k8s.io/v1beta1",
        "NodeMetrics",
        "nodes",
        NONE,
        NONE,
        CLUSTER,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        metrics_columns
    ),
    row!(
        "metrics.k8s.io/v1beta1",
        "PodMetrics",
        "pods",
        NONE,
        NONE,
        NS,
        0,
        NONE,
        Subdomain,
        false,
        Plain,
        metrics_columns
    ),
];

/// The Metrics API's rows, with the verbs metrics-server serves.
pub(crate) fn metrics_rows() -> Vec<ResourceDef> {
    METRICS_ROWS
        .iter()
        .map(to_def)
        .map(|mut d| {
            d.verbs = vec!["get".to_string(), "list".to_string()];
            d
        })
        .collect()
}

/// metrics-server's table: CPU, memory (a pod's summed over its
/// containers) and the window.
fn metrics_columns() -> Vec<Column> {
    fn total(o: &Value, resource: &str) -> Value {
        if let Some(q) = o
            .pointer(&format!("/usage/{resource}"))
            .and_then(Value::as_str)
        {
            return json!(q);
        }
        let parse = |q: &str| match resource {
            "cpu" => kubeforge_apimachinery::quantity::parse_milli(q).ok(),
            _ => kubeforge_apimachinery::quantity::parse_value(q).ok(),
        };
        let sum: i64 = arr(o, "/containers")
            .iter()
            .filter_map(|c| c.pointer(&format!("/usage/{resource}")))
            .filter_map(Value::as_str)
            .filter_map(parse)
            .sum();
        json!(match resource {
            "cpu" => kubeforge_apimachinery::quantity::format_milli(sum),
            _ => kubeforge_apimachinery::quantity::format_bytes(sum),
        })
    }
    vec![
        Column::func("CPU", "string", 0, |o| total(o, "cpu")),
        Column::func("Memory", "string", 0, |o| total(o, "memory")),
        Column::text("Window", 0, "/window"),
    ]
}

/// Rows served with fewer verbs than stored kinds, with the verbs they
/// serve: read-only `componentstatuses`, create-only reviews.
fn read_only_verbs(group: &str, plural: &str) -> Option<&'static [&'static str]> {
    if group.is_empty() && plural == crate::componentstatus::PLURAL {
        return Some(&["get", "list"]);
    }
    crate::reviews::REVIEWS
        .iter()
        .any(|(g, p)| *g == group && *p == plural)
        .then_some(&["create"])
}

fn to_def(r: &Row) -> ResourceDef {
    let (group, version) = match r.gv.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), r.gv.to_string()),
    };
    let scale = (r.subs & SCALE != 0).then(|| ScalePaths {
        spec_replicas: "spec.replicas".into(),
        status_replicas: "status.replicas".into(),
        label_selector: Some("spec.selector".into()),
        selector_is_set: r.gv == "v1" && r.kind == "ReplicationController",
    });
    ResourceDef {
        validator: kubeforge_schema::builtin_schema(&group, &version, r.kind),
        group,
        version,
        kind: r.kind.to_string(),
        plural: r.plural.to_string(),
        singular: r.kind.to_ascii_lowercase(),
        short_names: r.short.iter().map(|s| s.to_string()).collect(),
        categories: r.categories.iter().map(|s| s.to_string()).collect(),
        namespaced: r.namespaced,
        verbs: ALL_VERBS.iter().map(|s| s.to_string()).collect(),
        status: r.subs & STATUS != 0,
        scale,
        binding: r.subs & BINDING != 0,
        ephemeral_containers: r.subs & EPHEMERAL_CONTAINERS != 0,
        eviction: r.subs & EVICTION != 0,
        columns: (r.columns)(),
        field_selectors: r.fields.iter().map(|s| s.to_string()).collect(),
        field_absent: ABSENT_FIELDS
            .iter()
            .find(|(gv, kind, _)| *gv == r.gv && *kind == r.kind)
            .map_or(&[], |(_, _, f)| f),
        namespace_field: !(r.gv == "v1" && matches!(r.kind, "Node" | "Namespace")),
        name_rule: r.name_rule,
        generation: r.generation,
        strategy: r.strategy,
        custom: None,
        conversion: (group_is_events(r.gv) && r.kind == "Event")
            .then_some(&crate::convert::EVENTS_V1),
    }
}

fn group_is_events(gv: &str) -> bool {
    gv == "events.k8s.io/v1"
}

// ---- computed cells ----

fn s(v: &Value, p: &str) -> String {
    match v.pointer(p) {
        Some(Value::String(x)) => x.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn i(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(v: &'a Value, p: &str) -> &'a [Value] {
    v.pointer(p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn or_none(x: String) -> Value {
    if x.is_empty() {
        json!("<none>")
    } else {
        json!(x)
    }
}

/// A string map (`metadata.labels`-like) as `k=v,k=v`, `<none>` when empty.
fn string_map(o: &Value, pointer: &str) -> Value {
    let pairs = o
        .pointer(pointer)
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    or_none(pairs)
}

fn len_of(v: &Value, p: &str) -> usize {
    match v.pointer(p) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn namespace_columns() -> Vec<Column> {
    vec![Column::text("Status", 0, "/status/phase"), Column::age()]
}

fn pod_columns() -> Vec<Column> {
    vec![
        Column::func("Ready", "string", 0, |o| {
            let total = arr(o, "/spec/containers").len();
            let ready = arr(o, "/status/containerStatuses")
                .iter()
                .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                .count();
            json!(format!("{ready}/{total}"))
        }),
        Column::func("Status", "string", 0, pod_status),
        Column::func("Restarts", "string", 0, |o| {
            let n: i64 = arr(o, "/status/containerStatuses")
                .iter()
                .map(|c| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0))
                .sum();
            json!(n.to_string())
        }),
        Column::age(),
        Column::func("IP", "string", 1, |o| or_none(s(o, "/status/podIP"))),
        Column::func("Node", "string", 1, |o| or_none(s(o, "/spec/nodeName"))),
        Column::func("Nominated Node", "string", 1, |o| {
            or_none(s(o, "/status/nominatedNodeName"))
        }),
        Column::func("Readiness Gates", "string", 1, |o| {
            let gates = arr(o, "/spec/readinessGates");
            if gates.is_empty() {
                json!("<none>")
            } else {
                json!(format!("0/{}", gates.len()))
            }
        }),
    ]
}

fn pod_status(o: &Value) -> Value {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        return json!("Terminating");
    }
    for c in arr(o, "/status/containerStatuses") {
        if let Some(r) = c.pointer("/state/waiting/reason").and_then(Value::as_str) {
            return json!(r);
        }
        if let Some(r) = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str)
        {
            return json!(r);
        }
    }
    let reason = s(o, "/status/reason");
    if !reason.is_empty() {
        return json!(reason);
    }
    let phase = s(o, "/status/phase");
    if phase.is_empty() {
        json!("Pending")
    } else {
        json!(phase)
    }
}

fn service_columns() -> Vec<Column> {
    vec![
        Column::text("Type", 0, "/spec/type"),
        Column::func("Cluster-IP", "string", 0, |o| {
            or_none(s(o, "/spec/clusterIP"))
        }),
        Column::func("External-IP", "string", 0, |o| {
            let ips: Vec<String> = arr(o, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .map(str::to_string)
                .chain(
                    arr(o, "/spec/externalIPs")
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string)),
                )
                .collect();
            if ips.is_empty() {
                if s(o, "/spec/type") == "LoadBalancer" {
                    json!("<pending>")
                } else {
                    json!("<none>")
                }
            } else {
                json!(ips.join(","))
            }
        }),
        Column::func("Port(s)", "string", 0, |o| {
            let ports: Vec<String> = arr(o, "/spec/ports")
                .iter()
                .map(|p| {
                    let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(np) => format!("{port}:{np}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect();
            or_none(ports.join(","))
        }),
        Column::age(),
        Column::func("Selector", "string", 1, |o| string_map(o, "/spec/selector")),
    ]
}

fn endpoints_columns() -> Vec<Column> {
    vec![
        Column::func("Endpoints", "string", 0, |o| {
            let mut eps = Vec::new();
            for subset in arr(o, "/subsets") {
                for a in subset
                    .get("addresses")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                {
                    let ip = a.get("ip").and_then(Value::as_str).unwrap_or_default();
                    for p in subset
                        .get("ports")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or(&[])
                    {
                        eps.push(format!(
                            "{ip}:{}",
                            p.get("port").and_then(Value::as_i64).unwrap_or(0)
                        ));
                    }
                }
            }
            or_none(eps.join(","))
        }),
        Column::age(),
    ]
}

fn configmap_columns() -> Vec<Column> {
    vec![
        Column::func("Data", "integer", 0, |o| {
            json!(len_of(o, "/data") + len_of(o, "/binaryData"))
        }),
        Column::age(),
    ]
}

fn secret_columns() -> Vec<Column> {
    vec![
        Column::text("Type", 0, "/type"),
        Column::func("Data", "integer", 0, |o| json!(len_of(o, "/data"))),
        Column::age(),
    ]
}

fn node_columns() -> Vec<Column> {
    vec![
        Column::func("Status", "string", 0, |o| {
            let ready = arr(o, "/status/conditions")
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                .and_then(|c| c.get("status").and_then(Value::as_str))
                .map(|st| if st == "True" { "Ready" } else { "NotReady" })
                .unwrap_or("Unknown");
            let mut out = ready.to_string();
            if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                out.push_str(",SchedulingDisabled");
            }
            json!(out)
        }),
        Column::func("Roles", "string", 0, |o| {
            let roles: Vec<String> = o
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .filter(|r| !r.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            or_none(roles.join(","))
        }),
        Column::age(),
        Column::text("Version", 0, "/status/nodeInfo/kubeletVersion"),
        Column::func("Internal-IP", "string", 1, |o| {
            or_none(node_address(o, "InternalIP"))
        }),
        Column::func("External-IP", "string", 1, |o| {
            or_none(node_address(o, "ExternalIP"))
        }),
        Column::text("OS-Image", 1, "/status/nodeInfo/osImage"),
        Column::text("Kernel-Version", 1, "/status/nodeInfo/kernelVersion"),
        Column::text(
            "Container-Runtime",
            1,
            "/status/nodeInfo/containerRuntimeVersion",
        ),
    ]
}

fn node_address(o: &Value, kind: &str) -> String {
    arr(o, "/status/addresses")
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
        .and_then(|a| a.get("address").and_then(Value::as_str))
        .unwrap_or_default()
        .to_string()
}

fn event_columns() -> Vec<Column> {
    vec![
        Column::func("Last Seen", "string", 0, |o| {
            let ts = o
                .get("lastTimestamp")
                .filter(|v| !v.is_null())
                .or_else(|| o.get("eventTime"))
                .or_else(|| o.pointer("/metadata/creationTimestamp"));
            json!(crate::table::age(ts, jiff::Timestamp::now()))
        }),
        Column::text("Type", 0, "/type"),
        Column::text("Reason", 0, "/reason"),
        Column::func("Object", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                s(o, "/involvedObject/kind").to_ascii_lowercase(),
                s(o, "/involvedObject/name")
            ))
        }),
        Column::text("Message", 0, "/message"),
    ]
}

fn event_v1_columns() -> Vec<Column> {
    vec![
        Column::text("Type", 0, "/type"),
        Column::text("Reason", 0, "/reason"),
        Column::func("Object", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                s(o, "/regarding/kind").to_ascii_lowercase(),
                s(o, "/regarding/name")
            ))
        }),
        Column::text("Note", 0, "/note"),
        Column::age(),
    ]
}

fn pv_columns() -> Vec<Column> {
    vec![
        Column::text("Capacity", 0, "/spec/capacity/storage"),
        Column::func("Access Modes", "string", 0, access_modes),
        Column::text("Reclaim Policy", 0, "/spec/persistentVolumeReclaimPolicy"),
        Column::text("Status", 0, "/status/phase"),
        Column::func("Claim", "string", 0, |o| {
            let n = s(o, "/spec/claimRef/name");
            if n.is_empty() {
                json!("")
            } else {
                json!(format!("{}/{n}", s(o, "/spec/claimRef/namespace")))
            }
        }),
        Column::text("StorageClass", 0, "/spec/storageClassName"),
        Column::text("Reason", 0, "/status/reason"),
        Column::age(),
    ]
}

fn access_modes(o: &Value) -> Value {
    let modes: Vec<&str> = arr(o, "/spec/accessModes")
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    json!(modes.join(","))
}

fn pvc_columns() -> Vec<Column> {
    vec![
        Column::text("Status", 0, "/status/phase"),
        Column::text("Volume", 0, "/spec/volumeName"),
        Column::text("Capacity", 0, "/status/capacity/storage"),
        Column::func("Access Modes", "string", 0, access_modes),
        Column::text("StorageClass", 0, "/spec/storageClassName"),
        Column::age(),
    ]
}

fn deployment_columns() -> Vec<Column> {
    vec![
        Column::func("Ready", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                i(o, "/status/readyReplicas"),
                i(o, "/spec/replicas")
            ))
        }),
        Column::int("Up-to-date", 0, "/status/updatedReplicas"),
        Column::int("Available", 0, "/status/availableReplicas"),
        Column::age(),
        Column::func("Containers", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "name")
        }),
        Column::func("Images", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "image")
        }),
        Column::func("Selector", "string", 1, |o| {
            selector_string(o.pointer("/spec/selector"))
        }),
    ]
}

fn containers(o: &Value, p: &str, field: &str) -> Value {
    json!(
        arr(o, p)
            .iter()
            .filter_map(|c| c.get(field).and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// A metav1.LabelSelector as the string kubectl prints.
fn selector_string(sel: Option<&Value>) -> Value {
    match sel.map(kubeforge_apimachinery::labels::Selector::from_label_selector) {
        Some(Ok(s)) if !s.is_everything() => json!(s.to_string()),
        _ => json!("<none>"),
    }
}

fn replicaset_columns() -> Vec<Column> {
    vec![
        Column::int("Desired", 0, "/spec/replicas"),
        Column::int("Current", 0, "/status/replicas"),
        Column::int("Ready", 0, "/status/readyReplicas"),
        Column::age(),
        Column::func("Containers", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "name")
        }),
        Column::func("Images", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "image")
        }),
        Column::func("Selector", "string", 1, |o| {
            selector_string(o.pointer("/spec/selector"))
        }),
    ]
}

/// `kubectl get rc`: a ReplicaSet's columns, the selector a plain label
/// map (kube's `printReplicationController`).
fn replicationcontroller_columns() -> Vec<Column> {
    let mut cols = replicaset_columns();
    if let Some(last) = cols.last_mut() {
        *last = Column::func("Selector", "string", 1, |o| {
            match o
                .pointer("/spec/selector")
                .map(kubeforge_apimachinery::labels::Selector::from_set)
            {
                Some(Ok(s)) if !s.is_everything() => json!(s.to_string()),
                _ => json!("<none>"),
            }
        });
    }
    cols
}

fn statefulset_columns() -> Vec<Column> {
    vec![
        Column::func("Ready", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                i(o, "/status/readyReplicas"),
                i(o, "/spec/replicas")
            ))
        }),
        Column::age(),
        Column::func("Containers", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "name")
        }),
        Column::func("Images", "string", 1, |o| {
            containers(o, "/spec/template/spec/containers", "image")
        }),
    ]
}

fn daemonset_columns() -> Vec<Column> {
    vec![
        Column::int("Desired", 0, "/status/desiredNumberScheduled"),
        Column::int("Current", 0, "/status/currentNumberScheduled"),
        Column::int("Ready", 0, "/status/numberReady"),
        Column::int("Up-to-date", 0, "/status/updatedNumberScheduled"),
        Column::int("Available", 0, "/status/numberAvailable"),
        Column::func("Node Selector", "string", 0, |o| {
            string_map(o, "/spec/template/spec/nodeSelector")
        }),
        Column::age(),
    ]
}

fn job_columns() -> Vec<Column> {
    vec![
        Column::func("Status", "string", 0, |o| {
            let conds = arr(o, "/status/conditions");
            let is = |t: &str| {
                conds.iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some(t)
                        && c.get("status").and_then(Value::as_str) == Some("True")
                })
            };
            let st = if is("Complete") {
                "Complete"
            } else if is("Failed") {
                "Failed"
            } else if o.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating"
            } else if is("Suspended") {
                "Suspended"
            } else {
                "Running"
            };
            json!(st)
        }),
        Column::func("Completions", "string", 0, |o| {
            let want = o.pointer("/spec/completions").and_then(Value::as_i64);
            let done = i(o, "/status/succeeded");
            match want {
                Some(w) => json!(format!("{done}/{w}")),
                None => json!(format!(
                    "{done}/1 of {}",
                    o.pointer("/spec/parallelism")
                        .and_then(Value::as_i64)
                        .unwrap_or(1)
                )),
            }
        }),
        Column::func("Duration", "string", 0, |o| {
            let start = o
                .pointer("/status/startTime")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok());
            let end = o
                .pointer("/status/completionTime")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .unwrap_or_else(jiff::Timestamp::now);
            match start {
                Some(st) => json!(crate::table::human_duration(
                    end.as_second() - st.as_second()
                )),
                None => json!(""),
            }
        }),
        Column::age(),
    ]
}

fn cronjob_columns() -> Vec<Column> {
    vec![
        Column::text("Schedule", 0, "/spec/schedule"),
        Column::func("Timezone", "string", 0, |o| or_none(s(o, "/spec/timeZone"))),
        Column::func("Suspend", "boolean", 0, |o| {
            json!(
                o.pointer("/spec/suspend")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            )
        }),
        Column::func("Active", "integer", 0, |o| {
            json!(arr(o, "/status/active").len())
        }),
        Column::func("Last Schedule", "date", 0, |o| {
            match o.pointer("/status/lastScheduleTime") {
                Some(t) => json!(crate::table::age(Some(t), jiff::Timestamp::now())),
                None => json!("<none>"),
            }
        }),
        Column::age(),
    ]
}

fn lease_columns() -> Vec<Column> {
    vec![
        Column::text("Holder", 0, "/spec/holderIdentity"),
        Column::age(),
    ]
}

fn priorityclass_columns() -> Vec<Column> {
    vec![
        Column::int("Value", 0, "/value"),
        Column::func("Global-Default", "boolean", 0, |o| {
            json!(
                o.get("globalDefault")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            )
        }),
        Column::age(),
        Column::func("PreemptionPolicy", "string", 0, |o| {
            let p = s(o, "/preemptionPolicy");
            json!(if p.is_empty() {
                "PreemptLowerPriority".to_string()
            } else {
                p
            })
        }),
    ]
}

fn crd_columns() -> Vec<Column> {
    vec![Column::func("Created At", "date", 0, |o| {
        json!(s(o, "/metadata/creationTimestamp"))
    })]
}

fn ingress_columns() -> Vec<Column> {
    vec![
        Column::func("Class", "string", 0, |o| {
            or_none(s(o, "/spec/ingressClassName"))
        }),
        Column::func("Hosts", "string", 0, |o| {
            let hosts: Vec<&str> = arr(o, "/spec/rules")
                .iter()
                .filter_map(|r| r.get("host").and_then(Value::as_str))
                .collect();
            json!(if hosts.is_empty() {
                "*".to_string()
            } else {
                hosts.join(",")
            })
        }),
        Column::func("Address", "string", 0, |o| {
            let a: Vec<&str> = arr(o, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    i.get("ip")
                        .or_else(|| i.get("hostname"))
                        .and_then(Value::as_str)
                })
                .collect();
            json!(a.join(","))
        }),
        Column::func("Ports", "string", 0, |o| {
            json!(if arr(o, "/spec/tls").is_empty() {
                "80"
            } else {
                "80, 443"
            })
        }),
        Column::age(),
    ]
}

fn storageclass_columns() -> Vec<Column> {
    vec![
        Column::text("Provisioner", 0, "/provisioner"),
        Column::func("ReclaimPolicy", "string", 0, |o| {
            let p = s(o, "/reclaimPolicy");
            json!(if p.is_empty() {
                "Delete".to_string()
            } else {
                p
            })
        }),
        Column::func("VolumeBindingMode", "string", 0, |o| {
            let p = s(o, "/volumeBindingMode");
            json!(if p.is_empty() {
                "Immediate".to_string()
            } else {
                p
            })
        }),
        Column::func("AllowVolumeExpansion", "boolean", 0, |o| {
            json!(
                o.get("allowVolumeExpansion")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            )
        }),
        Column::age(),
    ]
}

fn pdb_columns() -> Vec<Column> {
    vec![
        Column::func("Min Available", "string", 0, |o| {
            or_na(o.pointer("/spec/minAvailable"))
        }),
        Column::func("Max Unavailable", "string", 0, |o| {
            or_na(o.pointer("/spec/maxUnavailable"))
        }),
        Column::int("Allowed Disruptions", 0, "/status/disruptionsAllowed"),
        Column::age(),
    ]
}

fn or_na(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => json!(s),
        Some(Value::Number(n)) => json!(n.to_string()),
        _ => json!("N/A"),
    }
}

fn hpa_columns() -> Vec<Column> {
    vec![
        Column::func("Reference", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                s(o, "/spec/scaleTargetRef/kind"),
                s(o, "/spec/scaleTargetRef/name")
            ))
        }),
        Column::func("Targets", "string", 0, |o| json!(hpa_targets(o))),
        Column::func("MinPods", "string", 0, |o| {
            json!(
                o.pointer("/spec/minReplicas")
                    .and_then(Value::as_i64)
                    .map_or_else(|| "<unset>".to_string(), |m| m.to_string())
            )
        }),
        Column::int("MaxPods", 0, "/spec/maxReplicas"),
        Column::int("Replicas", 0, "/status/currentReplicas"),
        Column::age(),
    ]
}

/// kube's `formatHPAMetrics` (printers.go): `cpu: 75%/50%` per metric,
/// at most two, then `+ N more...`.
fn hpa_targets(o: &Value) -> String {
    let specs = arr(o, "/spec/metrics");
    if specs.is_empty() {
        return "<none>".into();
    }
    let statuses = arr(o, "/status/currentMetrics");
    let mut list: Vec<String> = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let status = statuses.get(i);
        let cur = |p: &str| {
            status.and_then(|st| st.pointer(p)).map(|v| match v {
                Value::String(x) => x.clone(),
                other => other.to_string(),
            })
        };
        let kind = s(spec, "/type");
        let item = match kind.as_str() {
            "Resource" | "ContainerResource" => {
                let key = if kind == "Resource" {
                    "resource"
                } else {
                    "containerResource"
                };
                let name = s(spec, &format!("/{key}/name"));
                let target = |p: &str| spec.pointer(&format!("/{key}/target/{p}"));
                if let Some(v) = target("averageValue") {
                    let current = cur(&format!("/{key}/current/averageValue"))
                        .unwrap_or_else(|| "<unknown>".into());
                    format!("{name}: {current}/{}", v.as_str().unwrap_or_default())
                } else {
                    let current = cur(&format!("/{key}/current/averageUtilization"))
                        .map_or_else(|| "<unknown>".into(), |u| format!("{u}%"));
                    let target = target("averageUtilization")
                        .and_then(Value::as_i64)
                        .map_or_else(|| "<auto>".into(), |u| format!("{u}%"));
                    format!("{name}: {current}/{target}")
                }
            }
            "Pods" => format!(
                "{}/{}",
                cur("/pods/current/averageValue").unwrap_or_else(|| "<unknown>".into()),
                s(spec, "/pods/target/averageValue")
            ),
            "Object" | "External" => {
                let key = if kind == "Object" {
                    "object"
                } else {
                    "external"
                };
                if let Some(v) = spec.pointer(&format!("/{key}/target/averageValue")) {
                    let current = cur(&format!("/{key}/current/averageValue"))
                        .unwrap_or_else(|| "<unknown>".into());
                    format!("{current}/{} (avg)", v.as_str().unwrap_or_default())
                } else {
                    let current =
                        cur(&format!("/{key}/current/value")).unwrap_or_else(|| "<unknown>".into());
                    format!("{current}/{}", s(spec, &format!("/{key}/target/value")))
                }
            }
            _ => "<unknown type>".into(),
        };
        list.push(item);
    }
    let count = list.len();
    if count > 2 {
        list.truncate(2);
        return format!("{} + {} more...", list.join(", "), count - 2);
    }
    list.join(", ")
}

fn rolebinding_columns() -> Vec<Column> {
    vec![
        Column::func("Role", "string", 0, |o| {
            json!(format!(
                "{}/{}",
                s(o, "/roleRef/kind"),
                s(o, "/roleRef/name")
            ))
        }),
        Column::age(),
    ]
}

fn webhook_columns() -> Vec<Column> {
    vec![
        Column::func("Webhooks", "integer", 0, |o| {
            json!(arr(o, "/webhooks").len())
        }),
        Column::age(),
    ]
}

fn endpointslice_columns() -> Vec<Column> {
    vec![
        Column::text("AddressType", 0, "/addressType"),
        Column::func("Ports", "string", 0, |o| {
            let ports: Vec<String> = arr(o, "/ports")
                .iter()
                .filter_map(|p| p.get("port").and_then(Value::as_i64))
                .map(|p| p.to_string())
                .collect();
            json!(if ports.is_empty() {
                "<unset>".to_string()
            } else {
                ports.join(",")
            })
        }),
        Column::func("Endpoints", "string", 0, |o| {
            let addrs: Vec<&str> = arr(o, "/endpoints")
                .iter()
                .flat_map(|e| {
                    e.get("addresses")
                        .and_then(Value::as_array)
                        .map(Vec::as_slice)
                        .unwrap_or(&[])
                })
                .filter_map(Value::as_str)
                .collect();
            json!(if addrs.is_empty() {
                "<unset>".to_string()
            } else {
                addrs.join(",")
            })
        }),
        Column::age(),
    ]
}

fn componentstatus_columns() -> Vec<Column> {
    fn healthy(o: &Value) -> Option<&Value> {
        arr(o, "/conditions")
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some("Healthy"))
    }
    vec![
        Column::func("Status", "string", 0, |o| {
            json!(match healthy(o)
                .and_then(|c| c.get("status"))
                .and_then(Value::as_str)
            {
                Some("True") => "Healthy",
                Some(_) => "Unhealthy",
                None => "Unknown",
            })
        }),
        Column::func("Message", "string", 0, |o| {
            json!(healthy(o).map(|c| s(c, "/message")).unwrap_or_default())
        }),
        Column::func("Error", "string", 0, |o| {
            json!(healthy(o).map(|c| s(c, "/error")).unwrap_or_default())
        }),
    ]
}

fn apiservice_columns() -> Vec<Column> {
    vec![
        Column::func("Service", "string", 0, |o| {
            json!(match o.pointer("/spec/service") {
                Some(svc) if !svc.is_null() => {
                    format!("{}/{}", s(svc, "/namespace"), s(svc, "/name"))
                }
                _ => "Local".to_string(),
            })
        }),
        Column::func("Available", "string", 0, |o| {
            let cond = arr(o, "/status/conditions")
                .iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"));
            json!(match cond {
                None => "Unknown".to_string(),
                Some(c) if s(c, "/status") == "True" => "True".to_string(),
                Some(c) => format!("{} ({})", s(c, "/status"), s(c, "/reason")),
            })
        }),
        Column::age(),
    ]
}

fn csr_columns() -> Vec<Column> {
    vec![
        Column::age(),
        Column::text("SignerName", 0, "/spec/signerName"),
        Column::text("Requestor", 0, "/spec/username"),
        Column::func("RequestedDuration", "string", 0, |o| {
            match o.pointer("/spec/expirationSeconds").and_then(Value::as_i64) {
                Some(secs) => json!(crate::table::human_duration(secs)),
                None => json!("<none>"),
            }
        }),
        Column::func("Condition", "string", 0, |o| {
            json!(crate::csr::condition_summary(o))
        }),
    ]
}
