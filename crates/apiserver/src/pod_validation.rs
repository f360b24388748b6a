//! kube's validation of a pod spec (`pkg/apis/core/validation`:
//! `ValidatePodSpec`'s containers, volumes and mounts), for Pods and the
//! pod templates of workloads. What a node agent later joins onto host
//! paths is refused here first, with kube's field paths and messages:
//!
//! - container names (regular and init; ephemeral ones in `ephemeral.rs`)
//!   are DNS-1123 labels, unique across them; images are required;
//! - volume names are DNS-1123 labels, unique, each volume has exactly one
//!   source; configMap, secret, downwardAPI and projected item paths are
//!   relative without `..` (and do not start with `..`), file modes are
//!   between 0 and 0777;
//! - a mount names a volume of the pod, has a unique `mountPath`, and its
//!   `subPath` / `subPathExpr` (not both) are relative without `..`;
//!   `Bidirectional` propagation only in privileged containers;
//! - container ports: names are IANA service names, unique; port numbers
//!   1–65535.

use std::collections::BTreeSet;

use kubeforge_apimachinery::names::{self, Cause};
use serde_json::Value;

/// kube's `fileModeErrorMsg`.
const FILE_MODE: &str = "must be a number between 0 and 0777 (octal), both inclusive";

/// The volume sources, in the order kube's `validateVolumeSource` reads
/// them (the second one found is the one named as too many).
pub(crate) const SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "projected",
    "csi",
    "ephemeral",
    "image",
];

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn dns_label(value: &str, field: &str, out: &mut Vec<Cause>) {
    for m in names::is_dns1123_label(value) {
        out.push(Cause::invalid(field, value, &m));
    }
}

/// kube's `ValidateLocalNonReservedPath`.
fn local_path(p: &str, field: &str, out: &mut Vec<Cause>) {
    for m in names::is_local_descending_path(p) {
        out.push(Cause::invalid(field, p, &m));
    }
    if p.starts_with("..") && !p.starts_with("../") {
        out.push(Cause::invalid(field, p, "must not start with '..'"));
    }
}

fn mode(v: &Value, key: &str, field: &str, out: &mut Vec<Cause>) {
    if let Some(m) = v.get(key).and_then(Value::as_i64)
        && !(0..=0o777).contains(&m)
    {
        out.push(Cause::invalid_rendered(
            &format!("{field}.{key}"),
            &m.to_string(),
            FILE_MODE,
        ));
    }
}

/// kube's `validateKeyToPath`.
fn key_to_path(item: &Value, field: &str, out: &mut Vec<Cause>) {
    if text(item, "key").is_empty() {
        out.push(Cause::required(&format!("{field}.key"), ""));
    }
    let path = text(item, "path");
    if path.is_empty() {
        out.push(Cause::required(&format!("{field}.path"), ""));
    }
    local_path(path, &format!("{field}.path"), out);
    mode(item, "mode", field, out);
}

/// kube's `validateDownwardAPIVolumeFile` (the path and mode part).
fn downward_file(item: &Value, field: &str, out: &mut Vec<Cause>) {
    let path = text(item, "path");
    if path.is_empty() {
        out.push(Cause::required(&format!("{field}.path"), ""));
    }
    local_path(path, &format!("{field}.path"), out);
    mode(item, "mode", field, out);
}

fn items(source: &Value, field: &str, downward: bool, out: &mut Vec<Cause>) {
    for (i, item) in arr(source, "items").iter().enumerate() {
        let f = format!("{field}.items[{i}]");
        if downward {
            downward_file(item, &f, out);
        } else {
            key_to_path(item, &f, out);
        }
    }
}

/// One volume's source: exactly one, and its own checks.
fn volume_source(vol: &Value, field: &str, out: &mut Vec<Cause>) {
    let mut found = 0;
    for key in SOURCES {
        let Some(source) = vol.get(*key).filter(|s| !s.is_null()) else {
            continue;
        };
        found += 1;
        let f = format!("{field}.{key}");
        if found > 1 {
            out.push(Cause::forbidden(
                &f,
                "may not specify more than 1 volume type",
            ));
            continue;
        }
        match *key {
            "hostPath" => {
                let path = text(source, "path");
                if path.is_empty() {
                    out.push(Cause::required(&format!("{f}.path"), ""));
                } else if path.split('/').any(|p| p == "..") {
                    out.push(Cause::invalid(
                        &format!("{f}.path"),
                        path,
                        "must not contain '..'",
                    ));
                }
            }
            "secret" => {
                if text(source, "secretName").is_empty() {
                    out.push(Cause::required(&format!("{f}.secretName"), ""));
                }
                mode(source, "defaultMode", &f, out);
                items(source, &f, false, out);
            }
            "configMap" => {
                if text(source, "name").is_empty() {
                    out.push(Cause::required(&format!("{f}.name"), ""));
                }
                mode(source, "defaultMode", &f, out);
                items(source, &f, false, out);
            }
            "downwardAPI" => {
                mode(source, "defaultMode", &f, out);
                items(source, &f, true, out);
            }
            "projected" => {
                mode(source, "defaultMode", &f, out);
                for (i, s) in arr(source, "sources").iter().enumerate() {
                    let sf = format!("{f}.sources[{i}]");
                    for (kind, downward) in [
                        ("configMap", false),
                        ("secret", false),
                        ("downwardAPI", true),
                    ] {
                        if let Some(p) = s.get(kind).filter(|p| !p.is_null()) {
                            items(p, &format!("{sf}.{kind}"), downward, out);
                        }
                    }
                    if let Some(t) = s.get("serviceAccountToken").filter(|t| !t.is_null()) {
                        let path = text(t, "path");
                        let pf = format!("{sf}.serviceAccountToken.path");
                        if path.is_empty() {
                            out.push(Cause::required(&pf, ""));
                        }
                        local_path(path, &pf, out);
                    }
                }
            }
            _ => {}
        }
    }
    if found == 0 {
        out.push(Cause::required(field, "must specify a volume type"));
    }
}

/// kube's `ValidateVolumes`: the names of the volumes that passed.
fn volumes(spec: &Value, field: &str, out: &mut Vec<Cause>) -> BTreeSet<String> {
    let mut ok = BTreeSet::new();
    for (i, vol) in arr(spec, "volumes").iter().enumerate() {
        let f = format!("{field}.volumes[{i}]");
        let mut el = Vec::new();
        volume_source(vol, &f, &mut el);
        let name = text(vol, "name");
        let nf = format!("{f}.name");
        if name.is_empty() {
            el.push(Cause::required(&nf, ""));
        } else {
            dns_label(name, &nf, &mut el);
        }
        if ok.contains(name) {
            el.push(Cause::duplicate(&nf, name));
        }
        if el.is_empty() {
            ok.insert(name.to_string());
        } else {
            out.extend(el);
        }
    }
    ok
}

/// kube's `validateVolumeMounts` (the mount-path field paths as kube
/// writes them: `subPath` and `subPathExpr` under the list, not the item).
fn mounts(c: &Value, vols: &BTreeSet<String>, field: &str, out: &mut Vec<Cause>) {
    let f = format!("{field}.volumeMounts");
    let mut points = BTreeSet::new();
    let privileged = c
        .pointer("/securityContext/privileged")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    for (i, m) in arr(c, "volumeMounts").iter().enumerate() {
        let idx = format!("{f}[{i}]");
        let name = text(m, "name");
        if name.is_empty() {
            out.push(Cause::required(&format!("{idx}.name"), ""));
        }
        if !vols.contains(name) {
            out.push(Cause::not_found(&format!("{idx}.name"), name));
        }
        let path = text(m, "mountPath");
        if path.is_empty() {
            out.push(Cause::required(&format!("{idx}.mountPath"), ""));
        }
        if !points.insert(path.to_string()) {
            out.push(Cause::invalid(
                &format!("{idx}.mountPath"),
                path,
                "must be unique",
            ));
        }
        let sub = text(m, "subPath");
        if !sub.is_empty() {
            for e in names::is_local_descending_path(sub) {
                out.push(Cause::invalid(&format!("{f}.subPath"), sub, &e));
            }
        }
        let expr = text(m, "subPathExpr");
        if !expr.is_empty() {
            if !sub.is_empty() {
                out.push(Cause::invalid(
                    &format!("{idx}.subPathExpr"),
                    expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            for e in names::is_local_descending_path(expr) {
                out.push(Cause::invalid(&format!("{f}.subPathExpr"), expr, &e));
            }
        }
        if let Some(p) = m.get("mountPropagation").and_then(Value::as_str) {
            let pf = format!("{f}.mountPropagation");
            const SUPPORTED: &[&str] = &["Bidirectional", "HostToContainer", "None"];
            if !SUPPORTED.contains(&p) {
                out.push(Cause::not_supported(&pf, p, SUPPORTED));
            }
            if p == "Bidirectional" && !privileged {
                out.push(Cause::forbidden(
                    &pf,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
    }
}

/// kube's `validateContainerPorts` (names and numbers).
fn ports(c: &Value, field: &str, out: &mut Vec<Cause>) {
    let mut seen = BTreeSet::new();
    for (i, p) in arr(c, "ports").iter().enumerate() {
        let idx = format!("{field}.ports[{i}]");
        let name = text(p, "name");
        if !name.is_empty() {
            let problems = names::is_valid_port_name(name);
            if !problems.is_empty() {
                for m in problems {
                    out.push(Cause::invalid(&format!("{idx}.name"), name, &m));
                }
            } else if !seen.insert(name.to_string()) {
                out.push(Cause::duplicate(&format!("{idx}.name"), name));
            }
        }
        match p.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => out.push(Cause::required(&format!("{idx}.containerPort"), "")),
            Some(n) => {
                for m in names::is_valid_port_num(n) {
                    out.push(Cause::invalid_rendered(
                        &format!("{idx}.containerPort"),
                        &n.to_string(),
                        &m,
                    ));
                }
            }
        }
        if let Some(n) = p.get("hostPort").and_then(Value::as_i64)
            && n != 0
        {
            for m in names::is_valid_port_num(n) {
                out.push(Cause::invalid_rendered(
                    &format!("{idx}.hostPort"),
                    &n.to_string(),
                    &m,
                ));
            }
        }
    }
}

/// One container: name, image, mounts, ports. `names` are the names taken
/// so far (a repeat is a duplicate).
fn container(
    c: &Value,
    vols: &BTreeSet<String>,
    field: &str,
    names_seen: &mut BTreeSet<String>,
    out: &mut Vec<Cause>,
) {
    let name = text(c, "name");
    let nf = format!("{field}.name");
    if name.is_empty() {
        out.push(Cause::required(&nf, ""));
    } else {
        dns_label(name, &nf, out);
    }
    if text(c, "image").is_empty() {
        out.push(Cause::required(&format!("{field}.image"), ""));
    }
    mounts(c, vols, field, out);
    ports(c, field, out);
    if names_seen.contains(name) {
        out.push(Cause::duplicate(&nf, name));
    } else if !name.is_empty() {
        names_seen.insert(name.to_string());
    }
}

/// Validate the pod spec `spec` found at `field` (`spec`,
/// `spec.template.spec`, …).
pub(crate) fn validate_pod_spec(spec: &Value, field: &str, out: &mut Vec<Cause>) {
    let vols = volumes(spec, field, out);
    let containers = arr(spec, "containers");
    let cf = format!("{field}.containers");
    if containers.is_empty() {
        out.push(Cause::required(&cf, ""));
    }
    let mut seen = BTreeSet::new();
    for (i, c) in containers.iter().enumerate() {
        container(c, &vols, &format!("{cf}[{i}]"), &mut seen, out);
    }
    for (i, c) in arr(spec, "initContainers").iter().enumerate() {
        container(
            c,
            &vols,
            &format!("{field}.initContainers[{i}]"),
            &mut seen,
            out,
        );
    }
    // Ephemeral containers (names unique across all three kinds, labels,
    // their own restrictions) are checked by `ephemeral.rs`, through the
    // subresource that alone may add them.
}

/// The pod spec fields a plain update may change (kube's
/// `updatablePodSpecFieldsStringArray`, as its message lists them).
pub(crate) const UPDATABLE: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// kube's `ValidatePodUpdate` for the spec: every field but the
/// updatable ones keeps its value (so an update cannot make a running pod
/// privileged, mount another volume or change what Pod Security admitted),
/// `activeDeadlineSeconds` may be set or lowered but not raised or
/// removed, tolerations may only be added, scheduling gates only removed.
/// `ephemeralContainers` are the subresource's to change.
pub(crate) fn validate_pod_spec_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let empty = Value::Object(Default::default());
    let new_spec = new.get("spec").unwrap_or(&empty);
    let old_spec = old.get("spec").unwrap_or(&empty);
    let deadline = |v: &Value| v.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (deadline(new_spec), deadline(old_spec)) {
        (None, Some(_)) => out.push(Cause::invalid_rendered(
            "spec.activeDeadlineSeconds",
            "null",
            "must not update from a positive integer to nil value",
        )),
        (Some(n), Some(o)) if n > o => out.push(Cause::invalid_rendered(
            "spec.activeDeadlineSeconds",
            &n.to_string(),
            "must be less than or equal to previous value",
        )),
        _ => {}
    }
    let mut munged = new_spec.clone();
    let Some(m) = munged.as_object_mut() else {
        return;
    };
    for list in ["containers", "initContainers"] {
        let old_list = old_spec.get(list).and_then(Value::as_array);
        if let (Some(new_list), Some(old_list)) =
            (m.get_mut(list).and_then(Value::as_array_mut), old_list)
            && new_list.len() == old_list.len()
        {
            for (c, o) in new_list.iter_mut().zip(old_list) {
                if let (Some(c), Some(image)) = (c.as_object_mut(), o.get("image")) {
                    c.insert("image".into(), image.clone());
                }
            }
        }
    }
    let carry = |m: &mut serde_json::Map<String, Value>, key: &str| match old_spec.get(key) {
        Some(v) => {
            m.insert(key.into(), v.clone());
        }
        None => {
            m.remove(key);
        }
    };
    carry(m, "activeDeadlineSeconds");
    carry(m, "ephemeralContainers");
    let items = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    let (tolerations, old_tolerations) = (
        items(m.get("tolerations")),
        items(old_spec.get("tolerations")),
    );
    if old_tolerations.iter().all(|t| tolerations.contains(t)) {
        carry(m, "tolerations");
    }
    let (gates, old_gates) = (
        items(m.get("schedulingGates")),
        items(old_spec.get("schedulingGates")),
    );
    if gates.iter().all(|g| old_gates.contains(g)) {
        carry(m, "schedulingGates");
    }
    let grace = |v: Option<&Value>| v.and_then(Value::as_i64);
    if grace(old_spec.get("terminationGracePeriodSeconds")).is_some_and(|g| g < 0)
        && grace(m.get("terminationGracePeriodSeconds")) == Some(1)
    {
        carry(m, "terminationGracePeriodSeconds");
    }
    if without_nulls(&munged) != without_nulls(old_spec) {
        out.push(Cause::forbidden(
            "spec",
            &format!("pod updates may not change fields other than {UPDATABLE}"),
        ));
    }
}

/// `v` with object members whose value is null removed, at every depth
/// (a null and an absent field are the same to Go's decoder).
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), without_nulls(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// Where a kind keeps its pod spec: a Pod's `spec`, a workload's
/// template, a CronJob's job template's.
pub(crate) fn pod_spec_of<'a>(kind: &str, obj: &'a Value) -> Option<(&'a Value, &'static str)> {
    match kind {
        // A pod without a spec has no containers, which is an error.
        "Pod" => Some((obj.get("spec").unwrap_or(&Value::Null), "spec")),
        "CronJob" => obj
            .pointer("/spec/jobTemplate/spec/template/spec")
            .map(|s| (s, "spec.jobTemplate.spec.template.spec")),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController"
        | "PodTemplate" => {
            let ptr = if kind == "PodTemplate" {
                "/template/spec"
            } else {
                "/spec/template/spec"
            };
            obj.pointer(ptr).map(|s| {
                (
                    s,
                    if kind == "PodTemplate" {
                        "template.spec"
                    } else {
                        "spec.template.spec"
                    },
                )
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors(spec: Value) -> Vec<String> {
        let mut out = Vec::new();
        validate_pod_spec(&spec, "spec", &mut out);
        out.iter().map(Cause::to_error_string).collect()
    }

    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    /// (spec, kube's errors), after `validation_test.go`'s cases for the
    /// names and paths a node joins onto host paths.
    #[test]
    fn names_and_paths_that_reach_the_host_are_refused() {
        let c = |extra: Value| {
            let mut c = json!({"name": "c", "image": "busybox"});
            if let (Some(m), Some(e)) = (c.as_object_mut(), extra.as_object()) {
                m.extend(e.clone());
            }
            c
        };
        let cases: Vec<(Value, Vec<String>)> = vec![
            (json!({"containers": [c(json!({}))]}), vec![]),
            (
                json!({"volumes": [{"name": "/", "emptyDir": {}}],
                       "containers": [c(json!({"volumeMounts": [{"name": "/", "mountPath": "/host"}]}))]}),
                vec![
                    format!("spec.volumes[0].name: Invalid value: \"/\": {LABEL}"),
                    "spec.containers[0].volumeMounts[0].name: Not found: \"/\"".into(),
                ],
            ),
            (
                json!({"containers": [c(json!({"name": "../../x"}))]}),
                vec![format!("spec.containers[0].name: Invalid value: \"../../x\": {LABEL}")],
            ),
            (
                json!({"containers": [c(json!({})), c(json!({}))], "initContainers": [c(json!({}))]}),
                vec![
                    "spec.containers[1].name: Duplicate value: \"c\"".into(),
                    "spec.initContainers[0].name: Duplicate value: \"c\"".into(),
                ],
            ),
            (
                json!({"volumes": [{"name": "v"}, {"name": "w", "emptyDir": {}, "hostPath": {"path": "/etc"}},
                                   {"name": "v", "emptyDir": {}}],
                       "containers": [c(json!({}))]}),
                vec![
                    "spec.volumes[0]: Required value: must specify a volume type".into(),
                    "spec.volumes[1].emptyDir: Forbidden: may not specify more than 1 volume type".into(),
                ],
            ),
            (
                json!({"volumes": [{"name": "cm", "configMap": {"name": "x", "defaultMode": 4095,
                         "items": [{"key": "k", "path": "/etc/passwd"}, {"key": "k", "path": "../../x", "mode": -1},
                                   {"key": "", "path": "..x"}]}}],
                       "containers": [c(json!({}))]}),
                vec![
                    "spec.volumes[0].configMap.defaultMode: Invalid value: 4095: must be a number between 0 and 0777 (octal), both inclusive".into(),
                    "spec.volumes[0].configMap.items[0].path: Invalid value: \"/etc/passwd\": must be a relative path".into(),
                    "spec.volumes[0].configMap.items[1].path: Invalid value: \"../../x\": must not contain '..'".into(),
                    "spec.volumes[0].configMap.items[1].mode: Invalid value: -1: must be a number between 0 and 0777 (octal), both inclusive".into(),
                    "spec.volumes[0].configMap.items[2].key: Required value".into(),
                    "spec.volumes[0].configMap.items[2].path: Invalid value: \"..x\": must not start with '..'".into(),
                ],
            ),
            (
                json!({"volumes": [{"name": "d", "emptyDir": {}}],
                       "containers": [c(json!({"volumeMounts": [
                           {"name": "d", "mountPath": "/a", "subPath": "../etc"},
                           {"name": "d", "mountPath": "/a", "subPath": "x", "subPathExpr": "/$(POD)"},
                           {"name": "d", "mountPath": "/b", "mountPropagation": "Bidirectional"}]}))]}),
                vec![
                    "spec.containers[0].volumeMounts.subPath: Invalid value: \"../etc\": must not contain '..'".into(),
                    "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/a\": must be unique".into(),
                    "spec.containers[0].volumeMounts[1].subPathExpr: Invalid value: \"/$(POD)\": subPathExpr and subPath are mutually exclusive".into(),
                    "spec.containers[0].volumeMounts.subPathExpr: Invalid value: \"/$(POD)\": must be a relative path".into(),
                    "spec.containers[0].volumeMounts.mountPropagation: Forbidden: Bidirectional mount propagation is available only to privileged containers".into(),
                ],
            ),
            (
                json!({"containers": [c(json!({"ports": [{"name": "HTTP", "containerPort": 0},
                                                      {"name": "web", "containerPort": 70000, "hostPort": -1},
                                                      {"name": "web", "containerPort": 80}]}))]}),
                vec![
                    "spec.containers[0].ports[0].name: Invalid value: \"HTTP\": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
                    "spec.containers[0].ports[0].name: Invalid value: \"HTTP\": must contain at least one letter (a-z)".into(),
                    "spec.containers[0].ports[0].containerPort: Required value".into(),
                    "spec.containers[0].ports[1].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].ports[1].hostPort: Invalid value: -1: must be between 1 and 65535, inclusive".into(),
                    "spec.containers[0].ports[2].name: Duplicate value: \"web\"".into(),
                ],
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(errors(spec.clone()), want, "{spec}");
        }
    }

    #[test]
    fn plain_updates_change_only_what_kube_lets_them() {
        let old = json!({"spec": {
            "containers": [{"name": "c", "image": "a:1", "securityContext": {"allowPrivilegeEscalation": false}}],
            "activeDeadlineSeconds": 100,
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
            "terminationGracePeriodSeconds": -1,
            "volumes": [{"name": "d", "emptyDir": {}}]}});
        let check = |edit: &dyn Fn(&mut Value)| {
            let mut new = old.clone();
            edit(&mut new);
            let mut out = Vec::new();
            validate_pod_spec_update(&new, &old, &mut out);
            out.iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        };
        // Allowed: image, a lower deadline, an added toleration, a removed
        // gate, grace from negative to 1, nulls for absent fields.
        assert!(check(&|p| p["spec"]["containers"][0]["image"] = json!("a:2")).is_empty());
        assert!(check(&|p| p["spec"]["activeDeadlineSeconds"] = json!(50)).is_empty());
        assert!(
            check(&|p| p["spec"]["tolerations"] =
                json!([{"key": "k", "operator": "Exists"}, {"key": "x", "operator": "Exists"}]))
            .is_empty()
        );
        assert!(check(&|p| p["spec"]["schedulingGates"] = json!([{"name": "g2"}])).is_empty());
        assert!(check(&|p| p["spec"]["terminationGracePeriodSeconds"] = json!(1)).is_empty());
        assert!(check(&|p| p["spec"]["nodeSelector"] = Value::Null).is_empty());
        // Refused: what would change what the pod may do.
        let frozen =
            format!("spec: Forbidden: pod updates may not change fields other than {UPDATABLE}");
        for edit in [
            &(|p: &mut Value| {
                p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true})
            }) as &dyn Fn(&mut Value),
            &|p| p["spec"]["volumes"] = json!([{"name": "d", "hostPath": {"path": "/"}}]),
            &|p| p["spec"]["hostNetwork"] = json!(true),
            &|p| {
                p["spec"]["containers"] =
                    json!([{"name": "c", "image": "a:1"}, {"name": "d", "image": "b"}])
            },
            &|p| p["spec"]["tolerations"] = json!([]),
            &|p| p["spec"]["schedulingGates"] = json!([{"name": "g3"}]),
            &|p| p["spec"]["nodeName"] = json!("n1"),
        ] {
            assert_eq!(check(edit), std::slice::from_ref(&frozen));
        }
        assert_eq!(
            check(&|p| p["spec"]["activeDeadlineSeconds"] = json!(200)),
            [
                "spec.activeDeadlineSeconds: Invalid value: 200: must be less than or equal to previous value"
            ]
        );
        assert_eq!(
            check(&|p| p["spec"]
                .as_object_mut()
                .map(|m| m.remove("activeDeadlineSeconds"))
                .map(|_| ())
                .unwrap_or(())),
            [
                "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value"
            ]
        );
    }
}
