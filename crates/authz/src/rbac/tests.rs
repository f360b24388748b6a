//! RBAC decisions and reasons, pinned against kube's evaluation.

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use serde_json::{Value, json};

use super::*;

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

fn cluster_role(name: &str, rules: Value) -> ClusterRole {
    obj(json!({"metadata": {"name": name}, "rules": rules}))
}

fn role(ns: &str, name: &str, rules: Value) -> Role {
    obj(json!({"metadata": {"name": name, "namespace": ns}, "rules": rules}))
}

fn crb(name: &str, role: &str, subjects: Value) -> ClusterRoleBinding {
    obj(json!({"metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects}))
}

fn rb(ns: &str, name: &str, kind: &str, role: &str, subjects: Value) -> RoleBinding {
    obj(json!({"metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": subjects}))
}

fn pods_reader() -> Value {
    json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
}

fn get_pods(user: &UserInfo, ns: &str) -> Attributes {
    Attributes::resource(user.clone(), "get", ns, "", "v1", "pods", "", "p")
}

#[test]
fn cluster_bindings_apply_everywhere_with_kubes_reason() {
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[],
        &[crb(
            "readers",
            "reader",
            json!([{"kind": "Group", "name": "team"}]),
        )],
    );
    let z = RbacAuthorizer::new(p);
    let u = UserInfo::new("alice", ["team", "system:authenticated"]);
    for ns in ["a", "b", ""] {
        assert_eq!(
            z.authorize(&get_pods(&u, ns)),
            Decision::Allow {
                reason: r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "reader" to Group "team""#.into()
            }
        );
    }
    let other = UserInfo::new("bob", ["system:authenticated"]);
    assert_eq!(
        z.authorize(&get_pods(&other, "a")),
        Decision::NoOpinion {
            reason: String::new()
        }
    );
}

#[test]
fn role_bindings_apply_only_in_their_namespace() {
    let p = RbacPolicy::build(
        &[role(
            "dev",
            "local",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]),
        )],
        &[cluster_role("reader", pods_reader())],
        &[
            rb(
                "dev",
                "alice-reads",
                "ClusterRole",
                "reader",
                json!([{"kind": "User", "name": "alice"}]),
            ),
            rb(
                "dev",
                "alice-local",
                "Role",
                "local",
                json!([{"kind": "User", "name": "alice"}]),
            ),
        ],
        &[],
    );
    let z = RbacAuthorizer::new(p);
    let alice = UserInfo::new("alice", ["system:authenticated"]);
    assert_eq!(
        z.authorize(&get_pods(&alice, "dev")).reason(),
        r#"RBAC: allowed by RoleBinding "alice-reads/dev" of ClusterRole "reader" to User "alice""#
    );
    assert!(!z.authorize(&get_pods(&alice, "prod")).allowed());
    assert!(
        !z.authorize(&get_pods(&alice, "")).allowed(),
        "not cluster-wide"
    );
    let cm = Attributes::resource(
        alice.clone(),
        "delete",
        "dev",
        "",
        "v1",
        "configmaps",
        "",
        "c",
    );
    assert_eq!(
        z.authorize(&cm).reason(),
        r#"RBAC: allowed by RoleBinding "alice-local/dev" of Role "local" to User "alice""#
    );
    let create = Attributes::resource(alice, "create", "dev", "", "v1", "pods", "", "");
    assert!(!z.authorize(&create).allowed(), "reader has no create");
}

#[test]
fn service_account_subjects_default_to_the_binding_namespace() {
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[rb(
            "dev",
            "bot-reads",
            "ClusterRole",
            "reader",
            json!([{"kind": "ServiceAccount", "name": "bot"}]),
        )],
        &[crb(
            "nowhere",
            "reader",
            json!([{"kind": "ServiceAccount", "name": "bot"}]),
        )],
    );
    let z = RbacAuthorizer::new(p);
    let bot = UserInfo::new("system:serviceaccount:dev:bot", ["system:serviceaccounts"]);
    assert_eq!(
        z.authorize(&get_pods(&bot, "dev")).reason(),
        r#"RBAC: allowed by RoleBinding "bot-reads/dev" of ClusterRole "reader" to ServiceAccount "bot/dev""#
    );
    // A ClusterRoleBinding's ServiceAccount without a namespace names nobody.
    assert!(!z.authorize(&get_pods(&bot, "prod")).allowed());
    let other = UserInfo::new("system:serviceaccount:prod:bot", Vec::<String>::new());
    assert!(!z.authorize(&get_pods(&other, "dev")).allowed());
}

#[test]
fn service_accounts_bound_cluster_wide_with_their_namespace() {
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[],
        &[crb(
            "bots",
            "reader",
            json!([
            {"kind": "User", "name": "carol"},
            {"kind": "ServiceAccount", "name": "bot", "namespace": "ops"}]),
        )],
    );
    let z = RbacAuthorizer::new(p);
    let bot = UserInfo::new("system:serviceaccount:ops:bot", Vec::<String>::new());
    assert_eq!(
        z.authorize(&get_pods(&bot, "x")).reason(),
        r#"RBAC: allowed by ClusterRoleBinding "bots" of ClusterRole "reader" to ServiceAccount "bot/ops""#
    );
    // A User subject spelled as the ServiceAccount's username names it too.
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[],
        &[crb(
            "as-user",
            "reader",
            json!([{"kind": "User", "name": "system:serviceaccount:ops:bot"}]),
        )],
    );
    assert!(
        RbacAuthorizer::new(p)
            .authorize(&get_pods(&bot, "x"))
            .allowed()
    );
}

#[test]
fn missing_roles_become_the_reason_of_a_refusal() {
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[rb(
            "dev",
            "gone-role",
            "Role",
            "gone",
            json!([{"kind": "User", "name": "u"}]),
        )],
        &[
            crb("a-gone", "gone", json!([{"kind": "User", "name": "u"}])),
            crb("b-gone-too", "gone", json!([{"kind": "User", "name": "u"}])),
        ],
    );
    let z = RbacAuthorizer::new(p);
    let u = UserInfo::new("u", Vec::<String>::new());
    assert_eq!(
        z.authorize(&get_pods(&u, "")),
        Decision::NoOpinion {
            reason: r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#.into()
        }
    );
    assert_eq!(
        z.authorize(&get_pods(&u, "dev")).reason(),
        r#"RBAC: [clusterrole.rbac.authorization.k8s.io "gone" not found, role.rbac.authorization.k8s.io "gone" not found]"#
    );
    // An error does not hide a later allow.
    let p = RbacPolicy::build(
        &[],
        &[cluster_role("reader", pods_reader())],
        &[],
        &[
            crb("a-gone", "gone", json!([{"kind": "User", "name": "u"}])),
            crb("b-reads", "reader", json!([{"kind": "User", "name": "u"}])),
        ],
    );
    assert!(
        RbacAuthorizer::new(p)
            .authorize(&get_pods(&u, ""))
            .allowed()
    );
}

#[test]
fn the_reason_names_the_first_binding_and_subject_that_allow() {
    let p = RbacPolicy::build(
        &[],
        &[
            cluster_role("nothing", json!([])),
            cluster_role("reader", pods_reader()),
        ],
        &[],
        &[
            crb(
                "a-nothing",
                "nothing",
                json!([{"kind": "User", "name": "u"}]),
            ),
            crb(
                "b-reads",
                "reader",
                json!([
                {"kind": "Group", "name": "g"},
                {"kind": "User", "name": "u"}]),
            ),
            crb("c-reads", "reader", json!([{"kind": "User", "name": "u"}])),
        ],
    );
    let u = UserInfo::new("u", ["g"]);
    assert_eq!(
        RbacAuthorizer::new(p)
            .authorize(&get_pods(&u, "x"))
            .reason(),
        r#"RBAC: allowed by ClusterRoleBinding "b-reads" of ClusterRole "reader" to Group "g""#
    );
}

#[test]
fn rules_for_collects_cluster_and_namespace_rules() {
    let p = RbacPolicy::build(
        &[role(
            "dev",
            "local",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
        )],
        &[cluster_role("reader", pods_reader())],
        &[
            rb(
                "dev",
                "l",
                "Role",
                "local",
                json!([{"kind": "User", "name": "u"}]),
            ),
            rb(
                "dev",
                "missing",
                "Role",
                "nope",
                json!([{"kind": "User", "name": "u"}]),
            ),
        ],
        &[crb("r", "reader", json!([{"kind": "User", "name": "u"}]))],
    );
    let u = UserInfo::new("u", Vec::<String>::new());
    let (rules, errors) = p.rules_for(&u, "dev");
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].resources, vec!["pods".to_string()]);
    assert_eq!(rules[1].resources, vec!["configmaps".to_string()]);
    assert_eq!(
        errors,
        vec![r#"role.rbac.authorization.k8s.io "nope" not found"#.to_string()]
    );
    assert_eq!(p.rules_for(&u, "").0.len(), 1);
    assert_eq!(p.binding_count(), 3);
}
