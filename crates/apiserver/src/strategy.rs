//! Kind-specific rules (kube-apiserver's "strategies"): defaults applied on
//! create and update, status handling on create, extra validation, and what
//! deleting a namespace does. Everything generic lives in [`crate::rest`].

use serde_json::{Map, Value, json};

use crate::context::Ctx;
use crate::error::{ApiResult, Cause};
use crate::object::meta_mut;
use crate::registry::Strategy;

/// Defaults and status rules on create.
pub fn prepare_create(ctx: &Ctx<'_>, obj: &mut Value) {
    crate::rbac_validation::default(&ctx.def, obj);
    match ctx.def.strategy {
        Strategy::Namespace => {
            set_namespace_name_label(obj);
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        Strategy::Pod => {
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec, true);
            }
            let qos = qos_class(obj.get("spec"));
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        Strategy::Service => {
            default_service(obj);
            if ctx.def.status {
                obj["status"] = json!({"loadBalancer": {}});
            }
        }
        Strategy::Workload => {
            default_workload(&ctx.def.kind, obj);
            drop_status(obj);
        }
        Strategy::Secret => crate::secrets::prepare(obj),
        Strategy::Node | Strategy::Crd | Strategy::ConfigMap => {}
        Strategy::Plain => {
            if ctx.def.status {
                drop_status(obj);
            }
        }
    }
}

/// The label kube keeps equal to a namespace's name, on create and on
/// every update (namespace strategy `Canonicalize`), so relabelling a
/// namespace cannot make it look like another to namespace selectors.
pub(crate) const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Set [`NAMESPACE_NAME_LABEL`] to the namespace's name.
pub(crate) fn set_namespace_name_label(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .cloned()
        .unwrap_or(Value::Null);
    let labels = meta_mut(obj).entry("labels").or_insert_with(|| json!({}));
    // Labels that are not an object are left for validation to refuse.
    if let Some(l) = labels.as_object_mut() {
        l.insert(NAMESPACE_NAME_LABEL.into(), name);
    }
}

fn drop_status(obj: &mut Value) {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
}

/// Defaults re-applied on update (a client may send an object without them).
pub fn prepare_update(ctx: &Ctx<'_>, obj: &mut Value, old: &Value) {
    crate::rbac_validation::default(&ctx.def, obj);
    match ctx.def.strategy {
        Strategy::Pod => {
            crate::priority::keep_on_update(obj, old);
            if let Some(spec) = obj.get_mut("spec") {
                default_pod_spec(spec, true);
            }
        }
        Strategy::Service => {
            // The cluster IP is immutable once allocated. A `spec` that is
            // not an object is left for validation to refuse.
            if let Some(ip) = old.pointer("/spec/clusterIP").cloned()
                && let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
                && spec.get("clusterIP").is_none_or(|v| v.as_str() == Some(""))
            {
                let ips = old
                    .pointer("/spec/clusterIPs")
                    .cloned()
                    .unwrap_or_else(|| json!([ip]));
                spec.insert("clusterIP".into(), ip);
                spec.insert("clusterIPs".into(), ips);
            }
            default_service(obj);
        }
        Strategy::Workload => default_workload(&ctx.def.kind, obj),
        Strategy::Secret => crate::secrets::prepare(obj),
        Strategy::Namespace => {
            set_namespace_name_label(obj);
            if let Some(phase) = old.pointer("/status/phase").cloned()
                && obj.pointer("/status/phase").is_none()
            {
                obj["status"] = json!({"phase": phase});
            }
            if obj.get("spec").is_none()
                && let Some(s) = old.get("spec")
            {
                obj["spec"] = s.clone();
            }
        }
        _ => {}
    }
}

/// Kind-specific validation beyond schema and names.
pub fn validate(ctx: &Ctx<'_>, obj: &Value, causes: &mut Vec<Cause>) {
    if ctx.def.custom.is_none()
        && let Some((spec, field)) = crate::pod_validation::pod_spec_of(&ctx.def.kind, obj)
    {
        let mut found = Vec::new();
        crate::pod_validation::validate_pod_spec(spec, field, &mut found);
        causes.extend(found.into_iter().map(Cause::from));
    }
    if ctx.def.strategy == Strategy::Crd {
        crate::crd::validate(obj, causes);
    }
    if ctx.def.strategy == Strategy::Namespace {
        validate_namespace_finalizers(obj, causes);
    }
    if ctx.def.strategy == Strategy::Service {
        validate_cluster_ips(obj, causes);
    }
    crate::access_policy::validate(ctx, obj, causes);
    if ctx.def.strategy == Strategy::Workload {
        validate_workload_selector(&ctx.def.kind, obj, causes);
    }
    if ctx.def.custom.is_none() && ctx.def.strategy != Strategy::Crd {
        validate_kube_finalizer_names(obj, causes);
    }
}

/// A Service's `spec.clusterIPs` (a user may choose them): each an IPv4
/// address in the service range (`10.96.0.0/12`, what kube's allocator
/// answers for one outside it), or `None` for a headless ClusterIP
/// Service. The proxy writes these into nftables; an address the host or
/// a pod uses would capture its traffic.
fn validate_cluster_ips(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec") else {
        return;
    };
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if ty == "ExternalName" {
        return;
    }
    let range = crate::bootstrap::SERVICE_CIDR;
    let ips: Vec<&str> = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let net = kubeforge_apimachinery::net::IpNet::parse(range);
    let mut outside = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let field = format!("spec.clusterIPs[{i}]");
        if *ip == "None" {
            if ty != "ClusterIP" {
                causes.push(Cause::from(kubeforge_apimachinery::names::Cause::invalid(
                    &field,
                    ip,
                    &format!("may not be set to 'None' for {ty} services"),
                )));
            }
            continue;
        }
        match ip.parse::<std::net::IpAddr>() {
            Err(_) => causes.push(Cause::from(kubeforge_apimachinery::names::Cause::invalid(
                &field,
                ip,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ))),
            Ok(addr) => {
                if net
                    .as_ref()
                    .is_ok_and(|n| !n.contains(addr) || n.addr() == addr)
                {
                    outside.push(*ip);
                }
            }
        }
    }
    if let Some(ip) = outside.first() {
        let list: Vec<String> = ips
            .iter()
            .map(|s| kubeforge_apimachinery::gofmt::quote(s))
            .collect();
        causes.push(Cause::from(kubeforge_apimachinery::names::Cause::invalid_rendered(
            "spec.clusterIPs",
            &format!("[]string{{{}}}", list.join(", ")),
            &format!(
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {range}"
            ),
        )));
    }
}

/// Workload kinds with a pod template and a required selector
/// (Deployment, ReplicaSet, StatefulSet, DaemonSet): the selector must be
/// present, non-empty and select the template's labels, as kube-apiserver's
/// apps validation requires (else 422).
fn validate_workload_selector(kind: &str, obj: &Value, causes: &mut Vec<Cause>) {
    if kind == "ReplicationController" {
        return validate_replication_controller(obj, causes);
    }
    if !matches!(
        kind,
        "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
    ) {
        return;
    }
    let Some(spec) = obj.get("spec") else { return };
    let sel = spec.get("selector").filter(|v| !v.is_null());
    let Some(sel) = sel else {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.selector".into(),
        });
        return;
    };
    let labels = spec
        .pointer("/template/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let match_labels = sel.get("matchLabels").and_then(Value::as_object);
    let exprs = sel.get("matchExpressions").and_then(Value::as_array);
    if match_labels.is_none_or(Map::is_empty) && exprs.is_none_or(Vec::is_empty) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {sel}: empty selector is invalid for {}",
                kind.to_lowercase()
            ),
            field: "spec.selector".into(),
        });
        return;
    }
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let mut ok = match_labels
        .map(|m| m.iter().all(|(k, v)| label(k) == v.as_str()))
        .unwrap_or(true);
    for e in exprs.map(Vec::as_slice).unwrap_or(&[]) {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let op = e
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let hit = match op {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            other => {
                causes.push(Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!("Unsupported value: {}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"", json!(other)),
                    field: "spec.selector.matchExpressions.operator".into(),
                });
                return;
            }
        };
        ok &= hit;
    }
    if !ok {
        causes.push(template_labels_mismatch(&labels));
    }
}

/// A ReplicationController's defaults beyond replicas (kube's
/// `SetDefaults_ReplicationController`): with template labels, an empty
/// selector becomes them, and so do empty object labels.
fn default_replication_controller(obj: &mut Value) {
    let Some(labels) = obj
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.is_object())
        .cloned()
    else {
        return;
    };
    let empty = |v: Option<&Value>| v.is_none_or(|v| v.as_object().is_none_or(Map::is_empty));
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && empty(spec.get("selector"))
    {
        spec.insert("selector".into(), labels.clone());
    }
    if obj.get("metadata").is_none_or(Value::is_object) && empty(obj.pointer("/metadata/labels")) {
        meta_mut(obj).insert("labels".into(), labels);
    }
}

/// A ReplicationController's selector and template (kube's
/// `ValidateReplicationControllerSpec`): the selector is required, the
/// template too, its labels must match the selector and its pods must
/// restart always.
fn validate_replication_controller(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec") else { return };
    let selector = spec.get("selector").and_then(Value::as_object);
    if selector.is_none_or(Map::is_empty) {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.selector".into(),
        });
    }
    let Some(template) = spec.get("template").filter(|t| !t.is_null()) else {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.template".into(),
        });
        return;
    };
    let labels = template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(sel) = selector.filter(|s| !s.is_empty())
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        causes.push(template_labels_mismatch(&labels));
    }
    let restart = template
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if restart != "Always" {
        causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"Always\"",
                json!(restart)
            ),
            field: "spec.template.spec.restartPolicy".into(),
        });
    }
    if template
        .pointer("/spec/activeDeadlineSeconds")
        .is_some_and(|v| !v.is_null())
    {
        causes.push(Cause {
            reason: "FieldValueForbidden".into(),
            message: "Forbidden: activeDeadlineSeconds in ReplicationController is not Supported"
                .into(),
            field: "spec.template.spec.activeDeadlineSeconds".into(),
        });
    }
}

/// kube's ``` `selector` does not match template `labels` ``` cause, the
/// labels shown as Go prints a `map[string]string`.
fn template_labels_mismatch(labels: &Map<String, Value>) -> Cause {
    let shown: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{}:{}", json!(k), v))
        .collect();
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!(
            "Invalid value: map[string]string{{{}}}: `selector` does not match template `labels`",
            shown.join(", ")
        ),
        field: "spec.template.metadata.labels".into(),
    }
}

/// Built-in kinds (kube's core `ValidateObjectMeta`): a finalizer name
/// without a `/` must be a standard one (`kubernetes`, `orphan`,
/// `foregroundDeletion`), named `metadata.finalizers[i]`. Custom resources
/// and CRDs only need qualified names (checked with the rest of the
/// metadata).
fn validate_kube_finalizer_names(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(list) = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
    else {
        return;
    };
    for (i, f) in list.iter().enumerate() {
        if let Some(f) = f.as_str()
            && !f.contains('/')
            && !STANDARD_FINALIZERS.contains(&f)
        {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {}: name is neither a standard finalizer name nor is it fully qualified",
                    json!(f)
                ),
                field: format!("metadata.finalizers[{i}]"),
            });
        }
    }
}

/// The grace period of a graceful deletion (kube's `CheckGracefulDelete`),
/// or `None` when this object is deleted without one.
///
/// Only pods delete gracefully, and only when the server was told that
/// something finishes graceful deletion (a kubelet or a node simulator,
/// [`crate::ApiServer::set_graceful_pod_deletion`]); otherwise pods are
/// deleted at once. The period is the request's `gracePeriodSeconds`, else
/// the pod's `terminationGracePeriodSeconds` (0 when unset, as kube); an
/// unscheduled or terminated pod gets 0.
pub fn graceful_delete(ctx: &Ctx<'_>, obj: &Value, requested: Option<i64>) -> Option<i64> {
    if ctx.def.strategy != Strategy::Pod || !ctx.server.graceful_pod_deletion() {
        return None;
    }
    let mut period = requested
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(0);
    if obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        period = 0;
    }
    if matches!(
        obj.pointer("/status/phase").and_then(Value::as_str),
        Some("Failed" | "Succeeded")
    ) {
        period = 0;
    }
    Some(period.max(0))
}

/// Work done before an object is removed when no namespace controller
/// runs: a namespace takes its contents with it at once. (With a namespace
/// controller, deleting a namespace only marks it Terminating; the
/// controller empties it and finalizes it.)
pub async fn before_delete(ctx: &Ctx<'_>, obj: &Value) -> ApiResult<()> {
    if ctx.def.strategy != Strategy::Namespace || ctx.server.namespace_controller_enabled() {
        return Ok(());
    }
    let Some(ns) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
        return Ok(());
    };
    let store = ctx.server.store();
    for def in ctx.server.registry().all() {
        if !def.namespaced {
            continue;
        }
        let prefix = def.collection_prefix(Some(ns));
        let keys: Vec<String> = store
            .range(&prefix, None, 0)
            .kvs
            .into_iter()
            .map(|kv| kv.key.to_string())
            .collect();
        // Deleting RBAC objects here must reach the authorizer too, or a
        // namespace recreated under the same name would keep its bindings.
        if !keys.is_empty() {
            crate::authz::changed(ctx.server, &def);
        }
        for key in keys {
            if let Some(kv) = store.get(&key) {
                let mut last: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
                if last.is_object() {
                    meta_mut(&mut last).insert(
                        "deletionTimestamp".into(),
                        json!(crate::object::now_rfc3339()),
                    );
                }
                let _ = store
                    .delete(&key, None, move |rev, _| {
                        crate::object::encode_with_rv(last, rev)
                    })
                    .await;
            }
        }
    }
    Ok(())
}

/// Mark a namespace Terminating on its first DELETE (kube's namespace
/// storage `Delete`): `deletionTimestamp` and `status.phase: Terminating`;
/// `spec.finalizers` stay, so the namespace controller empties the
/// namespace and then finalizes it.
pub fn mark_namespace_terminating(obj: &mut Value) {
    let m = meta_mut(obj);
    if !m.contains_key("deletionTimestamp") {
        m.insert(
            "deletionTimestamp".into(),
            json!(crate::object::now_rfc3339()),
        );
    }
    m.insert("deletionGracePeriodSeconds".into(), json!(0));
    if !obj.get("status").is_some_and(Value::is_object) {
        obj["status"] = json!({});
    }
    obj["status"]["phase"] = json!("Terminating");
}

/// Finalizer names a namespace's `spec.finalizers` may hold without a
/// domain (kube's `IsStandardFinalizerName`).
const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

/// `spec.finalizers` of a namespace: each a qualified name, and either
/// fully qualified (`example.com/name`) or a standard one (kube's
/// `validateFinalizerName` in `ValidateNamespace`).
fn validate_namespace_finalizers(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(list) = obj.pointer("/spec/finalizers").and_then(Value::as_array) else {
        return;
    };
    for f in list {
        let Some(f) = f.as_str() else {
            causes.push(Cause {
                reason: "FieldValueTypeInvalid".into(),
                message: format!("Invalid value: {f}: must be a string"),
                field: "spec.finalizers".into(),
            });
            continue;
        };
        for m in kubeforge_apimachinery::names::is_qualified_name(f) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {}: {m}", json!(f)),
                field: "spec.finalizers".into(),
            });
        }
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {}: name is neither a standard finalizer name nor is it fully qualified",
                    json!(f)
                ),
                field: "spec.finalizers".into(),
            });
        }
    }
}

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).is_none_or(Value::is_null) {
        m.insert(k.to_string(), v);
    }
}

/// PodSpec defaults (SetDefaults_PodSpec and the containers').
pub fn default_pod_spec(spec: &mut Value, is_pod: bool) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    set_default(m, "restartPolicy", json!("Always"));
    set_default(m, "dnsPolicy", json!("ClusterFirst"));
    set_default(m, "schedulerName", json!("default-scheduler"));
    set_default(m, "terminationGracePeriodSeconds", json!(30));
    set_default(m, "securityContext", json!({}));
    if is_pod {
        set_default(m, "enableServiceLinks", json!(true));
        set_default(m, "serviceAccountName", json!("default"));
        if let Some(sa) = m.get("serviceAccountName").cloned() {
            set_default(m, "serviceAccount", sa);
        }
        default_toleration_seconds(m);
    }
    // SetDefaults_Volume: a volume with no source is an emptyDir.
    for v in m
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(v) = v.as_object_mut()
            && !crate::pod_validation::SOURCES
                .iter()
                .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
        {
            v.insert("emptyDir".into(), json!({}));
        }
    }
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                default_container(c);
                if is_pod {
                    default_requests_to_limits(c);
                }
            }
        }
    }
}

/// kube's DefaultTolerationSeconds admission: a pod that does not already
/// tolerate the not-ready / unreachable NoExecute taints (a toleration with
/// that key or no key, and effect NoExecute or none) gets one for 300 s.
fn default_toleration_seconds(m: &mut Map<String, Value>) {
    let list = m
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tolerated = |key: &str| {
        list.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut out = list.clone();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        if !tolerated(key) {
            out.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    if out.len() != list.len() {
        m.insert("tolerations".into(), Value::Array(out));
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    set_default(m, "resources", json!({}));
    let image = m
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let last = image.rsplit('/').next().unwrap_or_default();
    let latest = !image.contains('@') && (!last.contains(':') || last.ends_with(":latest"));
    set_default(
        m,
        "imagePullPolicy",
        json!(if latest { "Always" } else { "IfNotPresent" }),
    );
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(pm) = p.as_object_mut() {
                set_default(pm, "protocol", json!("TCP"));
            }
        }
    }
}

/// A pod's container (or init container) with `resources.limits` gets each
/// missing `requests` entry from its limit, as kube's `SetDefaults_Pod`
/// does (only for pods, not pod templates): a pod asking `nvidia.com/gpu: 2`
/// in its limits alone then requests two GPUs and is scheduled accordingly.
fn default_requests_to_limits(c: &mut Value) {
    let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    // A `requests` of another type is left for validation to refuse.
    if res.get("requests").is_none_or(Value::is_null) {
        res.insert("requests".into(), json!({}));
    }
    if let Some(requests) = res.get_mut("requests").and_then(Value::as_object_mut) {
        for (k, v) in limits {
            requests.entry(k).or_insert(v);
        }
    }
}

/// The pod's QoS class from its containers' requests and limits.
pub fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.and_then(|s| s.get(*k)).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        if req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty()) {
            any = true;
        }
        for res in ["cpu", "memory"] {
            let l = lim.and_then(|l| l.get(res));
            let r = req.and_then(|r| r.get(res)).or(l);
            if l.is_none() || r != l {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_service(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    if ty != "ExternalName" {
        match spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
        {
            None => {
                let ip = allocate_cluster_ip();
                spec.insert("clusterIP".into(), json!(ip));
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            // A chosen address is validated as clusterIPs[0].
            Some(ip) if spec.get("clusterIPs").is_none_or(Value::is_null) => {
                let ip = ip.to_string();
                spec.insert("clusterIPs".into(), json!([ip]));
            }
            Some(_) => {}
        }
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        set_default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if let Some(pm) = p.as_object_mut() {
                set_default(pm, "protocol", json!("TCP"));
                if let Some(port) = pm.get("port").cloned() {
                    set_default(pm, "targetPort", port);
                }
                if (ty == "NodePort" || ty == "LoadBalancer") && pm.get("nodePort").is_none() {
                    let b = uuid::Uuid::new_v4().as_u128();
                    pm.insert("nodePort".into(), json!(30000 + (b % 2768) as u64));
                }
            }
        }
    }
}

fn allocate_cluster_ip() -> String {
    // A random address in 10.96.0.0/12, avoiding the network and .1.
    let r = (uuid::Uuid::new_v4().as_u128() % ((1 << 20) - 2)) as u32 + 2;
    let ip = (10u32 << 24) | (96u32 << 16) | r;
    format!(
        "{}.{}.{}.{}",
        ip >> 24,
        (ip >> 16) & 255,
        (ip >> 8) & 255,
        ip & 255
    )
}

fn default_workload(kind: &str, obj: &mut Value) {
    if kind == "ReplicationController" {
        default_replication_controller(obj);
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    match kind {
        "Deployment" => {
            set_default(spec, "replicas", json!(1));
            set_default(
                spec,
                "strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
            );
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(spec, "progressDeadlineSeconds", json!(600));
        }
        "ReplicaSet" | "ReplicationController" => set_default(spec, "replicas", json!(1)),
        "StatefulSet" => {
            set_default(spec, "replicas", json!(1));
            set_default(spec, "podManagementPolicy", json!("OrderedReady"));
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
            );
            set_default(spec, "revisionHistoryLimit", json!(10));
            set_default(
                spec,
                "persistentVolumeClaimRetentionPolicy",
                json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
            );
        }
        "DaemonSet" => {
            set_default(
                spec,
                "updateStrategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
            );
            set_default(spec, "revisionHistoryLimit", json!(10));
        }
        "Job" => {
            if spec.get("completions").is_none() && spec.get("parallelism").is_none() {
                spec.insert("completions".into(), json!(1));
            }
            set_default(spec, "parallelism", json!(1));
            set_default(spec, "backoffLimit", json!(6));
            set_default(spec, "completionMode", json!("NonIndexed"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
            if let Some(t) = spec.get_mut("template").and_then(|t| t.get_mut("spec"))
                && let Some(m) = t.as_object_mut()
            {
                set_default(m, "restartPolicy", json!("Never"));
            }
        }
        "CronJob" => {
            set_default(spec, "concurrencyPolicy", json!("Allow"));
            set_default(spec, "suspend", json!(false));
            set_default(spec, "successfulJobsHistoryLimit", json!(3));
            set_default(spec, "failedJobsHistoryLimit", json!(1));
            if let Some(t) = spec
                .get_mut("jobTemplate")
                .and_then(|t| t.pointer_mut("/spec/template/spec"))
            {
                default_pod_spec(t, false);
            }
        }
        _ => {}
    }
    if let Some(t) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        default_pod_spec(t, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos() {
        assert_eq!(
            qos_class(Some(&json!({"containers": [{"name": "a"}]}))),
            "BestEffort"
        );
        let g = json!({"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]});
        assert_eq!(qos_class(Some(&g)), "Guaranteed");
        let b = json!({"containers": [{"resources": {"requests": {"cpu": "1"}}}]});
        assert_eq!(qos_class(Some(&b)), "Burstable");
    }
}
