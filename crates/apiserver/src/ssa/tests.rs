//! Unit tests of the server-side-apply core.

use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::{ApplyError, ApplyRequest, apply};
use super::compare::{compare_objects, created_fields, created_fields_v1, skeleton};
use super::managed::{
    cap_updaters, decode_managed, is_reset, record_changes, same_object, set_managed,
};
use super::merge::{config_set_root, merge_into};
use super::path::display_path;
use super::schema::{CrdSchema, Schema};
use super::set::{FieldSet, Scope, strip_meta};
fn apply_as(
    schema: &Schema,
    live: Option<&Value>,
    config: Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApplyError> {
    apply(
        schema,
        live,
        &config,
        &ApplyRequest {
            manager,
            force,
            subresource: "",
            scope: Scope::All,
            api_version: "v1",
        },
    )
}

fn fields_of<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
    obj.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| e["manager"] == json!(manager))
        .map(|e| &e["fieldsV1"])
}

#[test]
fn fields_v1_round_trip_with_kube_entries() {
    // As written by kube-apiserver for `kubectl create deployment`.
    let v1 = json!({
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:replicas": {}, "f:selector": {},
            "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {".": {}, "k:{\"protocol\":\"TCP\",\"containerPort\":80}": {".": {}, "f:containerPort": {}}}}
            }}}
        }
    });
    let set = FieldSet::from_fields_v1(&v1).expect("parse");
    let out = set.to_fields_v1();
    // Keys come back canonical (sorted key fields).
    assert!(
        out.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"nginx\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}/f:containerPort")
            .is_some(),
        "{out}"
    );
    assert_eq!(FieldSet::from_fields_v1(&out).expect("reparse"), set);
    assert!(set.has(&["f:spec".into(), "f:selector".into()]));
    assert!(set.has(&["f:metadata".into(), "f:labels".into()]));
    assert!(!set.has(&["f:spec".into()]));
    assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
}

/// The one-walk create path agrees with comparing against the skeleton.
#[test]
fn created_fields_match_the_skeleton_comparison() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z", "resourceVersion": "5",
            "labels": {"a": "b"}, "annotations": {}, "finalizers": ["x", "x"],
            "ownerReferences": [{"uid": "u1", "name": "o", "kind": "K", "apiVersion": "v1"}]},
        "spec": {"containers": [
            {"name": "c", "image": "i", "ports": [{"containerPort": 80}, {"containerPort": 80}],
             "resources": {"requests": {"cpu": "1"}}, "securityContext": {}},
            {"name": "c", "image": "dup"},
            {"image": "no-name"}],
            "nodeSelector": {"k": "v"}, "affinity": {"nodeAffinity": {}}, "tolerations": [{"key": "t"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "True"}]}});
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "n", "image": "x"}]}},
            "strategy": {}}});
    let cr = json!({"apiVersion": "x/v1", "kind": "C", "metadata": {"name": "c", "labels": {"l": "v"}},
        "spec": {"items": [{"name": "a", "v": 1}], "tags": ["a", "b"], "m": {"k": {"x": 1}}},
        "status": {"ok": true}});
    let crd = Arc::new(CrdSchema::new(Arc::new(
        json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object"}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "m": {"type": "object", "x-kubernetes-map-type": "atomic"}}}}}),
    )));
    let cases = [
        (Schema::builtin("", "Pod"), pod),
        (Schema::builtin("apps", "Deployment"), deploy),
        (Schema::custom(crd), cr),
    ];
    for (schema, obj) in cases {
        let ty = schema.root();
        for scope in [Scope::All, Scope::NoStatus, Scope::OnlyStatus] {
            let cmp = compare_objects(&skeleton(&obj, &ty), &obj, &ty, scope);
            let mut want = cmp.added;
            want.union_with(&cmp.modified);
            assert!(cmp.removed.is_empty());
            let got = created_fields(&obj, &ty, scope);
            assert_eq!(got.to_fields_v1(), want.to_fields_v1(), "{obj}");
            // The direct rendering agrees with the trie after stripping.
            let mut stripped = got;
            strip_meta(&mut stripped);
            assert_eq!(
                Value::Object(created_fields_v1(&obj, &ty, scope)),
                stripped.into_fields_v1(),
                "{obj}"
            );
        }
    }
}

#[test]
fn display_paths() {
    let p = vec![
        "f:spec".to_string(),
        "f:containers".into(),
        "k:{\"name\":\"a\"}".into(),
        "f:ports".into(),
        "k:{\"containerPort\":80,\"protocol\":\"TCP\"}".into(),
    ];
    assert_eq!(
        display_path(&p),
        ".spec.containers[name=\"a\"].ports[containerPort=80,protocol=\"TCP\"]"
    );
    assert_eq!(
        display_path(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]),
        ".metadata.finalizers[=\"x\"]"
    );
}

#[test]
fn containers_are_a_list_map_with_port_keys_defaulted() {
    let schema = Schema::builtin("apps", "Deployment");
    let config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"spec": {"containers": [
            {"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]}}}});
    let set = config_set_root(&config, &schema.root(), Scope::All).expect("set");
    let v1 = set.to_fields_v1();
    assert_eq!(
        v1.pointer("/f:spec/f:template/f:spec/f:containers/k:{\"name\":\"a\"}/f:ports/k:{\"containerPort\":80,\"protocol\":\"TCP\"}"),
        Some(&json!({".": {}, "f:containerPort": {}})),
        "{v1}"
    );
    assert_eq!(v1.pointer("/f:spec/f:selector"), Some(&json!({})));
    let dup =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}}});
    let e = config_set_root(&dup, &schema.root(), Scope::All).expect_err("duplicate");
    assert!(e.duplicate);
    assert_eq!(e.field, "spec.template.spec.containers");
}

#[test]
fn merge_orders_like_smd() {
    let schema = Schema::builtin("", "Pod");
    let ty = schema.root();
    let mut live = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}, {"name": "c"}]}});
    let config = json!({"spec": {"containers": [{"name": "d"}, {"name": "c", "image": "2"}, {"name": "a"}]}});
    merge_into(&mut live, &config, &ty);
    let names: Vec<&str> = live["spec"]["containers"]
        .as_array()
        .expect("list")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["b", "d", "c", "a"]);
    assert_eq!(live["spec"]["containers"][3]["image"], json!("1"));
    assert_eq!(live["spec"]["containers"][2]["image"], json!("2"));
}

#[test]
fn appliers_share_list_maps_and_sets() {
    let schema = Schema::builtin("", "Pod");
    let a = apply_as(
        &schema,
        None,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["x/a"]},
            "spec": {"containers": [{"name": "a", "image": "1"}]}}),
        "A",
        false,
    )
    .expect("a");
    let b = apply_as(
        &schema,
        Some(&a),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["x/b"]},
            "spec": {"containers": [{"name": "b", "image": "2"}]}}),
        "B",
        false,
    )
    .expect("b");
    assert_eq!(b["spec"]["containers"].as_array().map(Vec::len), Some(2));
    assert_eq!(b["metadata"]["finalizers"], json!(["x/a", "x/b"]));
    let a2 = apply_as(
        &schema,
        Some(&b),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
        "A",
        false,
    )
    .expect("a drops");
    assert_eq!(
        a2["spec"]["containers"],
        json!([{"name": "b", "image": "2"}])
    );
    assert_eq!(a2["metadata"]["finalizers"], json!(["x/b"]));
    assert!(fields_of(&a2, "A").is_none(), "empty entries are dropped");
}

#[test]
fn conflicts_and_force() {
    let schema = Schema::builtin("", "ConfigMap");
    let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": v, "other": "o"}});
    let a = apply_as(&schema, None, cm("1"), "A", false).expect("a");
    // Same value: shared ownership, no conflict.
    let b = apply_as(&schema, Some(&a), cm("1"), "B", false).expect("shared");
    assert!(fields_of(&b, "A").is_some() && fields_of(&b, "B").is_some());
    let Err(ApplyError::Conflicts(c)) = apply_as(&schema, Some(&b), cm("2"), "B", false) else {
        panic!("expected conflicts");
    };
    // `other` has the same value: no conflict there.
    assert_eq!(c, vec![("\"A\"".to_string(), ".data.k".to_string())]);
    let forced = apply_as(&schema, Some(&b), cm("2"), "B", true).expect("force");
    assert_eq!(forced["data"]["k"], json!("2"));
    assert_eq!(
        fields_of(&forced, "A"),
        Some(&json!({"f:data": {"f:other": {}}}))
    );
}

#[test]
fn update_records_changes_and_takes_them_from_others() {
    let schema = Schema::builtin("", "ConfigMap");
    let ty = schema.root();
    let old = apply_as(
        &schema,
        None,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}),
        "A",
        false,
    )
    .expect("a");
    let mut new = old.clone();
    new["data"]["a"] = json!("9");
    new["data"]["c"] = json!("3");
    new["metadata"]["labels"] = json!({"x": "y"});
    let mut entries = decode_managed(&old["metadata"]["managedFields"]).expect("decode");
    let cmp = compare_objects(&old, &new, &ty, Scope::All);
    record_changes(&mut entries, cmp, "U", "v1", "");
    set_managed(&mut new, entries);
    assert_eq!(
        fields_of(&new, "U"),
        Some(
            &json!({"f:data": {"f:a": {}, "f:c": {}}, "f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
        )
    );
    assert_eq!(fields_of(&new, "A"), Some(&json!({"f:data": {"f:b": {}}})));
}

#[test]
fn crd_list_map_from_schema() {
    let schema = Schema::custom(Arc::new(CrdSchema::new(Arc::new(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"ports": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}
        }}}}
    })))));
    let obj = |ports: Value| json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "x"}, "spec": {"ports": ports}});
    let a = apply_as(
        &schema,
        None,
        obj(json!([{"name": "a", "port": 1}])),
        "A",
        false,
    )
    .expect("a");
    let b = apply_as(
        &schema,
        Some(&a),
        obj(json!([{"name": "b", "port": 2}])),
        "B",
        false,
    )
    .expect("b");
    assert_eq!(b["spec"]["ports"].as_array().map(Vec::len), Some(2));
    let Err(ApplyError::Conflicts(c)) = apply_as(
        &schema,
        Some(&b),
        obj(json!([{"name": "a", "port": 5}])),
        "B",
        false,
    ) else {
        panic!("conflict expected");
    };
    assert_eq!(
        c,
        vec![(
            "\"A\"".to_string(),
            ".spec.ports[name=\"a\"].port".to_string()
        )]
    );
}

#[test]
fn update_entries_are_capped() {
    let schema = Schema::builtin("", "ConfigMap");
    let ty = schema.root();
    let mut obj =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
    let mut entries = Vec::new();
    for i in 0..13 {
        let mut new = obj.clone();
        new["data"][format!("k{i}")] = json!("v");
        let cmp = compare_objects(&obj, &new, &ty, Scope::All);
        record_changes(&mut entries, cmp, &format!("m{i:02}"), "v1", "");
        // Distinct, increasing times.
        if let Some(e) = entries.last_mut() {
            e.time = Some(format!("2024-01-01T00:00:{i:02}Z"));
        }
        cap_updaters(&mut entries);
        obj = new;
    }
    assert_eq!(entries.len(), 10);
    let ancient = entries
        .iter()
        .find(|e| e.manager == "ancient-changes")
        .expect("bucket");
    assert_eq!(
        ancient.fields.to_fields_v1(),
        json!({"f:data": {"f:k0": {}, "f:k1": {}, "f:k2": {}, "f:k3": {}}})
    );
    assert!(entries.iter().any(|e| e.manager == "m12"));
}

#[test]
fn managed_fields_reset_and_sameness() {
    assert!(is_reset(&json!([])));
    assert!(is_reset(&json!([{}])));
    assert!(!is_reset(&json!([{"manager": "x"}])));
    let a = json!({"metadata": {"resourceVersion": "1", "managedFields": [{"manager": "m", "time": "t1"}]}, "x": 1});
    let b = json!({"metadata": {"resourceVersion": "2", "managedFields": [{"manager": "m", "time": "t2"}]}, "x": 1});
    assert!(same_object(&a, &b, true));
    let c = json!({"metadata": {"managedFields": [{"manager": "n"}]}, "x": 1});
    assert!(!same_object(&a, &c, true));
    assert!(same_object(&a, &c, false));
}

/// SMD `typed/merge_test.go` "null/empty map", "null/empty struct" and
/// "null/empty list", and the set cases with an empty applied list: an
/// empty or null container merged into a non-empty live one keeps it;
/// when both are empty or null, the applied one stands; atomic values and
/// scalars are replaced (a null scalar too).
#[test]
fn null_and_empty_containers_merge_like_smd() {
    let schema = Schema::custom(Arc::new(CrdSchema::new(Arc::new(json!({
        "type": "object", "properties": {
            "inner": {"type": "object", "additionalProperties": {"type": "string"}},
            "atomicMap": {"type": "object", "x-kubernetes-map-type": "atomic"},
            "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "atomicList": {"type": "array", "items": {"type": "string"}},
            "scalar": {"type": "string"}}
    })))));
    let ty = schema.root();
    let cases = [
        (json!({}), json!({"inner": {}}), json!({"inner": {}})),
        (json!({}), json!({"inner": null}), json!({"inner": null})),
        (
            json!({"inner": null}),
            json!({"inner": {}}),
            json!({"inner": {}}),
        ),
        (
            json!({"inner": {}}),
            json!({"inner": null}),
            json!({"inner": null}),
        ),
        (
            json!({"inner": {"a": "1"}}),
            json!({"inner": null}),
            json!({"inner": {"a": "1"}}),
        ),
        (
            json!({"inner": {"a": "1"}}),
            json!({"inner": {}}),
            json!({"inner": {"a": "1"}}),
        ),
        (
            json!({"atomicMap": {"a": "1"}}),
            json!({"atomicMap": null}),
            json!({"atomicMap": null}),
        ),
        (
            json!({"set": ["a", "b"]}),
            json!({"set": []}),
            json!({"set": ["a", "b"]}),
        ),
        (
            json!({"set": ["a", "b"]}),
            json!({"set": null}),
            json!({"set": ["a", "b"]}),
        ),
        (
            json!({"set": []}),
            json!({"set": null}),
            json!({"set": null}),
        ),
        (
            json!({"atomicList": ["a"]}),
            json!({"atomicList": null}),
            json!({"atomicList": null}),
        ),
        (
            json!({"atomicList": ["a"]}),
            json!({"atomicList": []}),
            json!({"atomicList": []}),
        ),
        (
            json!({"scalar": "x"}),
            json!({"scalar": null}),
            json!({"scalar": null}),
        ),
    ];
    for (live, config, want) in cases {
        let mut merged = live.clone();
        merge_into(&mut merged, &config, &ty);
        assert_eq!(merged, want, "{live} + {config}");
    }
    // A null container is owned as a leaf, as SMD's field set has it.
    let set = config_set_root(&json!({"inner": null, "set": null}), &ty, Scope::All).expect("set");
    assert_eq!(set.to_fields_v1(), json!({"f:inner": {}, "f:set": {}}));
}
