//! Built-in kinds' schemas from k8s-openapi.

use kubeforge_schema::{FieldError, builtin_kinds, builtin_schema};
use serde_json::json;

fn deployment() -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web", "namespace": "default", "labels": { "app": "web" } },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "strategy": { "type": "RollingUpdate", "rollingUpdate": { "maxSurge": "25%", "maxUnavailable": 1 } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": {
                    "containers": [{
                        "name": "nginx",
                        "image": "nginx:1.25",
                        "ports": [{ "containerPort": 80, "protocol": "TCP" }],
                        "resources": { "limits": { "cpu": "500m", "memory": "128Mi" }, "requests": { "cpu": 0.25 } },
                        "env": [{ "name": "A", "value": "b" }],
                    }],
                },
            },
        },
    })
}

#[test]
fn deployment_valid() {
    let v = builtin_schema("apps", "v1", "Deployment").expect("Deployment schema");
    assert_eq!(v.validate(&deployment()), Vec::<FieldError>::new());
    assert!(v.unknown_fields(&deployment()).is_empty());
}

#[test]
fn deployment_unknown_field() {
    let v = builtin_schema("apps", "v1", "Deployment").expect("Deployment schema");
    let mut obj = deployment();
    obj["spec"]["replicaz"] = json!(3);
    obj["spec"]["template"]["spec"]["containers"][0]["imagePullPolize"] = json!("Always");
    obj["metadata"]["labelz"] = json!({});
    let unknown = v.unknown_fields(&obj);
    assert_eq!(
        unknown,
        vec![
            "metadata.labelz",
            "spec.replicaz",
            "spec.template.spec.containers[0].imagePullPolize",
        ]
    );
    let removed = v.prune(&mut obj);
    assert_eq!(removed, unknown);
    assert_eq!(obj, deployment());
}

#[test]
fn deployment_type_errors() {
    let v = builtin_schema("apps", "v1", "Deployment").expect("Deployment schema");
    let mut obj = deployment();
    obj["spec"]["replicas"] = json!("two");
    obj["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!(true);
    let errs = v.validate(&obj);
    let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec!["spec.replicas", "spec.strategy.rollingUpdate.maxSurge"],
        "{errs:#?}"
    );
    assert!(errs.iter().all(|e| e.reason == "FieldValueTypeInvalid"));

    let mut obj = deployment();
    obj["spec"].as_object_mut().map(|s| s.remove("selector"));
    let errs = v.validate(&obj);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].field, "spec.selector");
    assert_eq!(errs[0].reason, "FieldValueRequired");
}

#[test]
fn free_form_fields_are_kept() {
    // RawExtension, FieldsV1 and JSON values accept anything.
    let v = builtin_schema("apps", "v1", "ControllerRevision").expect("schema");
    let obj = json!({
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": "r",
            "managedFields": [{ "manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:x": {} } } }],
        },
        "data": { "spec": { "anything": [1, 2, { "goes": true }] } },
        "revision": 1,
    });
    assert!(
        v.unknown_fields(&obj).is_empty(),
        "{:?}",
        v.unknown_fields(&obj)
    );
    assert!(v.validate(&obj).is_empty(), "{:?}", v.validate(&obj));

    let crd =
        builtin_schema("apiextensions.k8s.io", "v1", "CustomResourceDefinition").expect("schema");
    let obj = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": "crontabs.stable.example.com" },
        "spec": {
            "group": "stable.example.com",
            "names": { "kind": "CronTab", "plural": "crontabs", "singular": "crontab", "shortNames": ["ct"] },
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": { "spec": { "type": "object", "default": {}, "properties": {
                        "cronSpec": { "type": "string", "enum": ["a", "b"], "example": "a" },
                        "replicas": { "type": "integer", "default": 1 },
                        "ratio": { "type": "number", "default": 0.5, "nullable": true },
                        "port": { "x-kubernetes-int-or-string": true, "anyOf": [{ "type": "integer" }, { "type": "string" }] },
                    } } },
                } },
            }],
        },
    });
    assert!(crd.validate(&obj).is_empty(), "{:#?}", crd.validate(&obj));
    assert!(
        crd.unknown_fields(&obj).is_empty(),
        "{:?}",
        crd.unknown_fields(&obj)
    );
}

#[test]
fn every_listed_kind_has_a_schema() {
    let kinds: Vec<_> = builtin_kinds().collect();
    assert_eq!(kinds.len(), 44);
    for (g, v, k) in kinds {
        let validator = builtin_schema(g, v, k).unwrap_or_else(|| panic!("{g}/{v} {k}"));
        let api_version = if g.is_empty() {
            v.to_owned()
        } else {
            format!("{g}/{v}")
        };
        let obj = json!({ "apiVersion": api_version, "kind": k, "metadata": { "name": "x" } });
        assert!(validator.unknown_fields(&obj).is_empty(), "{k}");
    }
    assert!(builtin_schema("apps", "v1", "Nope").is_none());
    assert!(builtin_schema("apps", "v2", "Deployment").is_none());
}

#[test]
fn quantities_and_secrets() {
    let pod = builtin_schema("", "v1", "Pod").expect("Pod");
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p" },
        "spec": { "containers": [{ "name": "c", "resources": { "limits": { "cpu": 1, "memory": "1Gi" } } }] },
    });
    assert!(pod.validate(&obj).is_empty(), "{:?}", pod.validate(&obj));

    let secret = builtin_schema("", "v1", "Secret").expect("Secret");
    let ok = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" }, "data": { "k": "aGVsbG8=" } });
    assert!(
        secret.validate(&ok).is_empty(),
        "{:?}",
        secret.validate(&ok)
    );
    let bad = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" }, "data": { "k": "not base64!" } });
    let errs = secret.validate(&bad);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].field, "data.k");
}

#[test]
fn builtin_validation_is_fast() {
    let v = builtin_schema("apps", "v1", "Deployment").expect("Deployment schema");
    let obj = deployment();
    assert!(v.validate(&obj).is_empty());
    let start = std::time::Instant::now();
    for _ in 0..1000 {
        assert!(v.validate(&obj).is_empty());
        assert!(v.unknown_fields(&obj).is_empty());
    }
    let per_call = start.elapsed() / 1000;
    assert!(
        per_call < std::time::Duration::from_millis(1),
        "{per_call:?} per validate+unknown_fields"
    );
}

#[test]
fn nulls_are_accepted_for_builtins() {
    // `kubectl create --dry-run=client -o yaml` output carries `creationTimestamp: null`.
    let v = builtin_schema("", "v1", "ConfigMap").expect("ConfigMap");
    let obj = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": "c", "creationTimestamp": null },
        "data": { "a": "b" },
    });
    assert!(v.validate(&obj).is_empty(), "{:?}", v.validate(&obj));
}
