//! The `/openapi/v2` and `/openapi/v3` documents.

use std::collections::BTreeMap;
use std::sync::Arc;

use kubeforge_schema::{
    ResourceInfo, SchemaSource, openapi_v2_json, openapi_v2_protobuf, openapi_v3_group_version,
    openapi_v3_root,
};
use serde_json::{Value, json};

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    subresources: &[&str],
) -> ResourceInfo {
    ResourceInfo {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        namespaced,
        verbs: ALL_VERBS.iter().map(|s| (*s).to_owned()).collect(),
        subresources: subresources.iter().map(|s| (*s).to_owned()).collect(),
        schema: SchemaSource::Builtin,
    }
}

fn crontab() -> ResourceInfo {
    ResourceInfo {
        group: "stable.example.com".into(),
        version: "v1".into(),
        kind: "CronTab".into(),
        plural: "crontabs".into(),
        namespaced: true,
        verbs: ALL_VERBS.iter().map(|s| (*s).to_owned()).collect(),
        subresources: vec!["status".into()],
        schema: SchemaSource::Custom(Arc::new(json!({
            "type": "object",
            "properties": {
                "spec": { "type": "object", "properties": {
                    "cronSpec": { "type": "string", "description": "The schedule." },
                    "image": { "type": "string" },
                    "replicas": { "type": "integer", "default": 1 },
                    "port": { "x-kubernetes-int-or-string": true },
                    "maybe": { "type": "string", "nullable": true },
                    "raw": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                } },
                "status": { "type": "object", "properties": { "ok": { "type": "boolean" } } },
            },
        }))),
    }
}

fn resources() -> Vec<ResourceInfo> {
    vec![
        builtin("", "v1", "Namespace", "namespaces", false, &["status"]),
        builtin("", "v1", "Pod", "pods", true, &["status"]),
        builtin("", "v1", "ConfigMap", "configmaps", true, &[]),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            &["status", "scale"],
        ),
        builtin(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            &["status", "scale"],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["status"],
        ),
        crontab(),
    ]
}

/// Every `$ref` in `v`.
fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                if k == "$ref" {
                    out.extend(c.as_str());
                } else {
                    refs(c, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| refs(c, out)),
        _ => {}
    }
}

#[test]
fn v3_apps_document() {
    let doc = openapi_v3_group_version("apps", "v1", &resources());
    assert_eq!(doc["openapi"], "3.0.0");
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let deployment = &schemas["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"],
        json!([{ "group": "apps", "kind": "Deployment", "version": "v1" }])
    );
    assert_eq!(
        deployment["properties"]["metadata"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert!(schemas.contains_key("io.k8s.api.apps.v1.DeploymentList"));
    assert!(schemas.contains_key("io.k8s.api.autoscaling.v1.Scale"));
    assert!(!schemas.contains_key("io.k8s.api.core.v1.Namespace"));
    assert_eq!(
        schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["oneOf"],
        json!([{ "type": "integer" }, { "type": "string" }])
    );

    // Every reference resolves; no JSON-Schema-only keywords leak.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("bad ref {r}"));
        assert!(schemas.contains_key(name), "dangling {r}");
    }
    let text = doc.to_string();
    for bad in [
        "$defs",
        "$schema",
        "\"const\"",
        "prefixItems",
        "#/definitions/",
    ] {
        assert!(!text.contains(bad), "document contains {bad}");
    }

    let item = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"];
    let patch = &item["patch"];
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({ "group": "apps", "kind": "Deployment", "version": "v1" })
    );
    let params: Vec<&str> = patch["parameters"]
        .as_array()
        .expect("params")
        .iter()
        .filter(|p| p["in"] == "query")
        .map(|p| p["name"].as_str().unwrap_or(""))
        .collect();
    for p in ["fieldManager", "fieldValidation", "dryRun", "force"] {
        assert!(params.contains(&p), "missing {p} in {params:?}");
    }
    assert_eq!(patch["operationId"], "patchAppsV1NamespacedDeployment");
    assert_eq!(item["get"]["x-kubernetes-action"], "get");
    assert_eq!(
        item["put"]["operationId"],
        "replaceAppsV1NamespacedDeployment"
    );

    // Every PATCH operation (the query-param verifier may hit any of them) has
    // fieldValidation.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if let Some(patch) = item.get("patch") {
            let has = patch["parameters"]
                .as_array()
                .expect("params")
                .iter()
                .any(|p| p["name"] == "fieldValidation");
            assert!(has, "{path}");
        }
    }
    let scale =
        &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"];
    assert_eq!(
        scale["x-kubernetes-group-version-kind"],
        json!({ "group": "autoscaling", "kind": "Scale", "version": "v1" })
    );
    assert_eq!(
        doc["paths"]["/apis/apps/v1/deployments"]["get"]["operationId"],
        "listAppsV1DeploymentForAllNamespaces"
    );
    assert_eq!(
        doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["delete"]["operationId"],
        "deleteAppsV1CollectionNamespacedDeployment"
    );
}

#[test]
fn v3_core_and_cluster_scoped() {
    let doc = openapi_v3_group_version("", "v1", &resources());
    let ns = &doc["paths"]["/api/v1/namespaces/{name}"];
    assert_eq!(
        ns["get"]["x-kubernetes-group-version-kind"],
        json!({ "group": "", "kind": "Namespace", "version": "v1" })
    );
    assert_eq!(ns["get"]["tags"], json!(["core_v1"]));
    assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/status"]["patch"].is_object());
    assert_eq!(
        doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"],
        json!([{ "group": "", "kind": "Pod", "version": "v1" }])
    );

    let rbac = openapi_v3_group_version("rbac.authorization.k8s.io", "v1", &resources());
    let cr = &rbac["paths"]["/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}"]["patch"];
    assert_eq!(cr["operationId"], "patchRbacAuthorizationV1ClusterRole");
    assert_eq!(cr["tags"], json!(["rbacAuthorization_v1"]));
}

#[test]
fn v3_custom_resource() {
    let doc = openapi_v3_group_version("stable.example.com", "v1", &resources());
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let ct = &schemas["com.example.stable.v1.CronTab"];
    assert_eq!(
        ct["x-kubernetes-group-version-kind"],
        json!([{ "group": "stable.example.com", "kind": "CronTab", "version": "v1" }])
    );
    assert_eq!(
        ct["properties"]["metadata"]["$ref"],
        "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(ct["properties"]["apiVersion"]["type"], "string");
    assert_eq!(
        ct["properties"]["spec"]["properties"]["cronSpec"]["description"],
        "The schedule."
    );
    assert_eq!(
        ct["properties"]["spec"]["properties"]["replicas"]["default"],
        1
    );
    assert_eq!(
        ct["properties"]["spec"]["properties"]["port"]["anyOf"],
        json!([{ "type": "integer" }, { "type": "string" }])
    );
    assert!(schemas.contains_key("com.example.stable.v1.CronTabList"));
    assert!(schemas.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));

    let patch = &doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]
        ["patch"];
    assert_eq!(
        patch["operationId"],
        "patchStableExampleComV1NamespacedCronTab"
    );
    assert!(
        patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_none()
    );
    assert!(
        patch["requestBody"]["content"]
            .get("application/merge-patch+json")
            .is_some()
    );
    assert!(doc["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}/status"]["put"].is_object());

    // Non-structural schemas are published as a plain object.
    let mut r = crontab();
    r.schema = SchemaSource::Custom(Arc::new(
        json!({ "type": "object", "properties": { "spec": {} } }),
    ));
    let doc = openapi_v3_group_version("stable.example.com", "v1", &[r]);
    let ct = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        ct,
        &json!({
            "type": "object",
            "x-kubernetes-group-version-kind": [{ "group": "stable.example.com", "kind": "CronTab", "version": "v1" }],
        })
    );
}

#[test]
fn v3_root() {
    let root = openapi_v3_root(&resources());
    let paths = root["paths"].as_object().expect("paths");
    let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        vec![
            "api/v1",
            "apis/apiextensions.k8s.io/v1",
            "apis/apps/v1",
            "apis/rbac.authorization.k8s.io/v1",
            "apis/stable.example.com/v1",
        ]
    );
    let url = paths["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url");
    let hash = url
        .strip_prefix("/openapi/v3/apis/apps/v1?hash=")
        .expect("prefix");
    assert!(!hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()));

    // Stable for the same input, changes with the group-version's document only.
    assert_eq!(openapi_v3_root(&resources()), root);
    let mut fewer = resources();
    fewer.retain(|r| r.kind != "StatefulSet");
    let changed = openapi_v3_root(&fewer);
    assert_ne!(
        changed["paths"]["apis/apps/v1"],
        root["paths"]["apis/apps/v1"]
    );
    assert_eq!(changed["paths"]["api/v1"], root["paths"]["api/v1"]);
}

/// Mirrors kube-openapi's `proto.NewOpenAPIData` checks (what kubectl does with
/// the v2 document) on the JSON form.
fn kube_openapi_parse(defs: &serde_json::Map<String, Value>, s: &Value, path: &str) {
    let m = s
        .as_object()
        .unwrap_or_else(|| panic!("{path}: not an object"));
    if let Some(r) = m.get("$ref") {
        assert!(
            m.get("properties").is_none(),
            "{path}: $ref with properties"
        );
        assert!(m.get("type").is_none(), "{path}: $ref with type");
        let name = r
            .as_str()
            .and_then(|r| r.strip_prefix("#/definitions/"))
            .unwrap_or_else(|| panic!("{path}: bad ref"));
        assert!(defs.contains_key(name), "{path}: unknown model {name}");
        return;
    }
    assert!(
        m.get("oneOf").is_none() && m.get("anyOf").is_none(),
        "{path}: v2 has no oneOf/anyOf"
    );
    match m.get("type").and_then(Value::as_str) {
        None => {
            if let Some(Value::Object(props)) = m.get("properties") {
                for (k, p) in props {
                    kube_openapi_parse(defs, p, &format!("{path}.{k}"));
                }
            }
        }
        Some("object") => {
            if let Some(Value::Object(props)) = m.get("properties") {
                for (k, p) in props {
                    kube_openapi_parse(defs, p, &format!("{path}.{k}"));
                }
            } else if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
                kube_openapi_parse(defs, ap, path);
            }
        }
        Some("array") => {
            let items = m
                .get("items")
                .unwrap_or_else(|| panic!("{path}: array without items"));
            kube_openapi_parse(defs, items, path);
        }
        Some(t) => assert!(
            ["string", "number", "integer", "boolean"].contains(&t),
            "{path}: type {t}"
        ),
    }
}

#[test]
fn v2_json_is_kubectl_parsable() {
    let doc = openapi_v2_json(&resources());
    assert_eq!(doc["swagger"], "2.0");
    let defs = doc["definitions"].as_object().expect("definitions");
    for (name, s) in defs {
        kube_openapi_parse(defs, s, name);
    }
    assert_eq!(
        defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"],
        "string"
    );
    assert_eq!(
        defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
        "int-or-string"
    );
    assert_eq!(
        defs["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"],
        "string"
    );
    let ct = &defs["com.example.stable.v1.CronTab"];
    assert_eq!(
        ct["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    // v2 drops defaults, nullable types and preserve-unknown object types, as kube does.
    assert!(
        ct["properties"]["spec"]["properties"]["replicas"]
            .get("default")
            .is_none()
    );
    assert!(
        ct["properties"]["spec"]["properties"]["maybe"]
            .get("type")
            .is_none()
    );
    assert!(
        ct["properties"]["spec"]["properties"]["raw"]
            .get("type")
            .is_none()
    );
}

// --- a tiny protobuf decoder for the test ---

#[derive(Debug)]
enum Field<'a> {
    Varint,
    Fixed64,
    Bytes(&'a [u8]),
}

fn read_varint(buf: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[*pos];
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

fn decode(buf: &[u8]) -> Vec<(u32, Field<'_>)> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = read_varint(buf, &mut pos);
        let field = (key >> 3) as u32;
        let f = match key & 7 {
            0 => {
                read_varint(buf, &mut pos);
                Field::Varint
            }
            1 => {
                pos += 8;
                Field::Fixed64
            }
            2 => {
                let len = read_varint(buf, &mut pos) as usize;
                let b = &buf[pos..pos + len];
                pos += len;
                Field::Bytes(b)
            }
            w => panic!("unexpected wire type {w}"),
        };
        out.push((field, f));
    }
    assert_eq!(pos, buf.len());
    out
}

fn bytes_of<'a>(fields: &[(u32, Field<'a>)], n: u32) -> Vec<&'a [u8]> {
    fields
        .iter()
        .filter(|(f, _)| *f == n)
        .filter_map(|(_, v)| match v {
            Field::Bytes(b) => Some(*b),
            _ => None,
        })
        .collect()
}

fn string_of(fields: &[(u32, Field<'_>)], n: u32) -> String {
    bytes_of(fields, n)
        .first()
        .map(|b| String::from_utf8(b.to_vec()).expect("utf8"))
        .unwrap_or_default()
}

#[test]
fn v2_protobuf_decodes() {
    let bytes = openapi_v2_protobuf(&resources());
    let doc = decode(&bytes);
    assert_eq!(string_of(&doc, 1), "2.0");
    let info = decode(bytes_of(&doc, 2)[0]);
    assert_eq!(string_of(&info, 1), "Kubernetes");
    assert!(string_of(&info, 2).starts_with("v1."));

    let definitions = decode(bytes_of(&doc, 9)[0]);
    let mut named: BTreeMap<String, Vec<(u32, Field<'_>)>> = BTreeMap::new();
    for entry in bytes_of(&definitions, 1) {
        let ns = decode(entry);
        let name = string_of(&ns, 1);
        let schema = decode(bytes_of(&ns, 2)[0]);
        named.insert(name, schema);
    }
    let json_doc = openapi_v2_json(&resources());
    assert_eq!(
        named.len(),
        json_doc["definitions"].as_object().expect("defs").len()
    );

    // Vendor extensions carry YAML that reads back as the GVK list.
    let gvk_of = |name: &str| -> Value {
        let schema = &named[name];
        for ext in bytes_of(schema, 31) {
            let na = decode(ext);
            if string_of(&na, 1) == "x-kubernetes-group-version-kind" {
                let any = decode(bytes_of(&na, 2)[0]);
                let yaml = string_of(&any, 2);
                return serde_json::from_str(yaml.trim()).expect("flow YAML is JSON here");
            }
        }
        Value::Null
    };
    assert_eq!(
        gvk_of("io.k8s.api.apps.v1.Deployment"),
        json!([{ "group": "apps", "kind": "Deployment", "version": "v1" }])
    );
    assert_eq!(
        gvk_of("io.k8s.api.core.v1.Pod"),
        json!([{ "group": "", "kind": "Pod", "version": "v1" }])
    );
    assert_eq!(
        gvk_of("com.example.stable.v1.CronTab"),
        json!([{ "group": "stable.example.com", "kind": "CronTab", "version": "v1" }])
    );

    // Deployment: type "object" (TypeItem), properties with a $ref'd metadata.
    let dep = &named["io.k8s.api.apps.v1.Deployment"];
    let ty = decode(bytes_of(dep, 22)[0]);
    assert_eq!(string_of(&ty, 1), "object");
    let props = decode(bytes_of(dep, 25)[0]);
    let mut prop_names = Vec::new();
    for p in bytes_of(&props, 1) {
        let ns = decode(p);
        let name = string_of(&ns, 1);
        if name == "metadata" {
            let s = decode(bytes_of(&ns, 2)[0]);
            assert_eq!(
                string_of(&s, 1),
                "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
            );
            assert!(bytes_of(&s, 22).is_empty(), "a $ref has no type");
        }
        prop_names.push(name);
    }
    assert_eq!(
        prop_names,
        vec!["apiVersion", "kind", "metadata", "spec", "status"]
    );
    // Required is a repeated string.
    let spec_def = &named["io.k8s.api.apps.v1.DeploymentSpec"];
    let required: Vec<&[u8]> = bytes_of(spec_def, 19);
    assert_eq!(
        required,
        vec![b"selector".as_slice(), b"template".as_slice()]
    );
    // Arrays carry exactly one items schema.
    let pod_spec = &named["io.k8s.api.core.v1.PodSpec"];
    let props = decode(bytes_of(pod_spec, 25)[0]);
    for p in bytes_of(&props, 1) {
        let ns = decode(p);
        if string_of(&ns, 1) == "containers" {
            let s = decode(bytes_of(&ns, 2)[0]);
            let items = decode(bytes_of(&s, 23)[0]);
            assert_eq!(bytes_of(&items, 1).len(), 1);
        }
    }
    // Maps: additionalProperties holds a schema (oneof field 1).
    let labels_ok = {
        let meta = &named["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
        let props = decode(bytes_of(meta, 25)[0]);
        bytes_of(&props, 1).into_iter().any(|p| {
            let ns = decode(p);
            string_of(&ns, 1) == "labels" && {
                let s = decode(bytes_of(&ns, 2)[0]);
                let ap = decode(bytes_of(&s, 21)[0]);
                !bytes_of(&ap, 1).is_empty()
            }
        })
    };
    assert!(labels_ok);
}
