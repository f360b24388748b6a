#![allow(clippy::unwrap_used)]

use jiff::Timestamp;
use serde_json::{Value, json};

use super::*;
use crate::rbac::RbacPolicy;
use crate::{Attributes, Decision, UserInfo};

fn role(kind: &str, ns: &str, name: &str, spec: Value) -> RoleObject {
    let obj = json!({"kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec});
    RoleObject::from_value(&obj, kind == "AccessRole").unwrap()
}

fn binding(kind: &str, ns: &str, name: &str, spec: Value) -> BindingObject {
    let obj = json!({"kind": kind, "metadata": {"name": name, "namespace": ns}, "spec": spec});
    BindingObject::from_value(&obj, kind == "AccessBinding").unwrap()
}

fn pods(verbs: &[&str]) -> Value {
    json!({"apiGroups": [""], "resources": ["pods"], "verbs": verbs})
}

fn bob() -> UserInfo {
    UserInfo::new("bob", ["team", "system:authenticated"])
}

fn ask(verb: &str, ns: &str) -> Attributes {
    Attributes::resource(bob(), verb, ns, "", "v1", "pods", "", "web")
}

fn now() -> Timestamp {
    "2026-12-01T10:00:00Z".parse().unwrap()
}

fn build(roles: &[RoleObject], bindings: &[BindingObject]) -> AccessAuthorizer {
    AccessAuthorizer::new(AccessPolicy::build(
        roles,
        bindings,
        &[],
        &RbacPolicy::default(),
    ))
}

fn chain() -> Vec<RoleObject> {
    vec![
        role(
            "ClusterAccessRole",
            "",
            "viewer",
            json!({"rules": [pods(&["get", "list"])]}),
        ),
        role(
            "ClusterAccessRole",
            "",
            "admin",
            json!({"rules": [pods(&["delete"])], "parents": [{"name": "viewer"}]}),
        ),
        role(
            "ClusterAccessRole",
            "",
            "editor",
            json!({"rules": [pods(&["update"])], "parents": [{"name": "admin"}]}),
        ),
    ]
}

#[test]
fn a_role_inherits_its_parents_rules_transitively_and_says_through_which() {
    let z = build(
        &chain(),
        &[binding(
            "AccessBinding",
            "dev",
            "team-edits",
            json!({"roleRef": {"kind": "ClusterAccessRole", "name": "editor"},
                   "subjects": [{"kind": "Group", "name": "team"}]}),
        )],
    );
    let d = z.decide_at(&ask("get", "dev"), now());
    assert_eq!(
        d,
        Decision::Allow {
            reason: concat!(
                r#"kubeforge: allowed by AccessBinding "team-edits" in namespace "dev" of ClusterAccessRole "editor" to Group "team": "#,
                r#"rule 0 {APIGroups:[""], Resources:["pods"], Verbs:["get" "list"]} of ClusterAccessRole "viewer" "#,
                r#"(inherited: ClusterAccessRole "editor" → ClusterAccessRole "admin" → ClusterAccessRole "viewer")"#
            )
            .into()
        }
    );
    assert!(z.decide_at(&ask("delete", "dev"), now()).allowed());
    assert!(z.decide_at(&ask("update", "dev"), now()).allowed());
    assert!(!z.decide_at(&ask("create", "dev"), now()).allowed());
    // A namespaced binding grants nothing elsewhere.
    assert!(!z.decide_at(&ask("get", "prod"), now()).allowed());
}

#[test]
fn a_deny_wins_over_every_allow() {
    let mut roles = chain();
    roles.push(role(
        "ClusterAccessRole",
        "",
        "deleter",
        json!({"rules": [pods(&["delete"])]}),
    ));
    let z = build(
        &roles,
        &[
            binding(
                "ClusterAccessBinding",
                "",
                "a-admins",
                json!({"roleRef": {"name": "admin"}, "subjects": [{"kind": "User", "name": "bob"}]}),
            ),
            binding(
                "ClusterAccessBinding",
                "",
                "z-no-delete",
                json!({"roleRef": {"name": "deleter"}, "effect": "Deny",
                       "subjects": [{"kind": "Group", "name": "team"}]}),
            ),
        ],
    );
    match z.decide_at(&ask("delete", "dev"), now()) {
        Decision::Deny { reason } => assert_eq!(
            reason,
            r#"kubeforge: denied by ClusterAccessBinding "z-no-delete" (Deny) of ClusterAccessRole "deleter" to Group "team": rule 0 {APIGroups:[""], Resources:["pods"], Verbs:["delete"]} of ClusterAccessRole "deleter""#
        ),
        d => panic!("{d:?}"),
    }
    assert!(z.decide_at(&ask("get", "dev"), now()).allowed());
}

#[test]
fn bindings_whose_conditions_fail_are_skipped_and_explain_says_why() {
    let z = build(
        &chain(),
        &[
            binding(
                "ClusterAccessBinding",
                "",
                "office-hours",
                json!({"roleRef": {"name": "viewer"}, "subjects": [{"kind": "User", "name": "bob"}],
                       "conditions": {"timeWindows": [{"days": ["Sat", "Sun"], "start": "09:00", "end": "17:00"}]}}),
            ),
            binding(
                "ClusterAccessBinding",
                "",
                "office-network",
                json!({"roleRef": {"name": "viewer"}, "subjects": [{"kind": "User", "name": "bob"}],
                       "conditions": {"sourceCIDRs": ["10.0.0.0/8"]}}),
            ),
        ],
    );
    let mut a = ask("get", "dev");
    a.source = Some("127.0.0.1".parse().unwrap());
    let e = z.explain(&a, now());
    assert!(!e.decision.allowed());
    assert_eq!(
        e.skipped,
        vec![
            r#"kubeforge: ClusterAccessBinding "office-hours" of ClusterAccessRole "viewer" to User "bob" does not apply: the time 2026-12-01T10:00:00Z is outside its time windows [Sat,Sun 09:00-17:00 UTC]"#,
            r#"kubeforge: ClusterAccessBinding "office-network" of ClusterAccessRole "viewer" to User "bob" does not apply: the client address 127.0.0.1 is outside its source CIDRs [10.0.0.0/8]"#,
        ]
    );
    a.source = Some("10.3.4.5".parse().unwrap());
    assert!(z.decide_at(&a, now()).allowed());
    // Saturday, in the window.
    a.source = None;
    assert!(
        z.decide_at(&a, "2026-12-05T10:00:00Z".parse().unwrap())
            .allowed()
    );
}

#[test]
fn cycles_and_missing_parents_grant_nothing_and_deny_everything_they_bind() {
    let roles = vec![
        role(
            "ClusterAccessRole",
            "",
            "a",
            json!({"rules": [pods(&["get"])], "parents": [{"name": "b"}]}),
        ),
        role(
            "ClusterAccessRole",
            "",
            "b",
            json!({"rules": [pods(&["list"])], "parents": [{"name": "a"}]}),
        ),
        role(
            "ClusterAccessRole",
            "",
            "orphan",
            json!({"parents": [{"name": "gone"}]}),
        ),
    ];
    let subjects = json!([{"kind": "User", "name": "bob"}]);
    let z = build(
        &roles,
        &[
            binding(
                "ClusterAccessBinding",
                "",
                "grant-a",
                json!({"roleRef": {"name": "a"}, "subjects": subjects}),
            ),
            binding(
                "AccessBinding",
                "dev",
                "deny-orphan",
                json!({"roleRef": {"kind": "ClusterAccessRole", "name": "orphan"}, "effect": "Deny", "subjects": subjects}),
            ),
        ],
    );
    let p = z.policy();
    assert_eq!(
        p.role_problem(RoleKind::ClusterAccessRole, "", "a"),
        Some(
            r#"its parents form a cycle: ClusterAccessRole "a" → ClusterAccessRole "b" → ClusterAccessRole "a""#
        )
    );
    assert_eq!(
        p.role_problem(RoleKind::ClusterAccessRole, "", "orphan"),
        Some(
            r#"parent ClusterAccessRole "gone": clusteraccessrole.authz.kubeforge.dev "gone" not found"#
        )
    );
    let e = z.explain(&ask("get", "prod"), now());
    assert!(!e.decision.allowed());
    assert!(e.skipped[0].contains("grants nothing"), "{:?}", e.skipped);
    match z.decide_at(&ask("get", "dev"), now()) {
        Decision::Deny { reason } => assert!(reason.contains("denied to fail closed"), "{reason}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn rbac_roles_can_be_parents_and_unknown_sources_fail_closed_for_deny() {
    let view: k8s_openapi::api::rbac::v1::ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "view"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    }))
    .unwrap();
    let rbac = RbacPolicy::build(&[], &[view], &[], &[]);
    let roles = vec![role(
        "AccessRole",
        "dev",
        "reader",
        json!({"parents": [{"kind": "ClusterRole", "name": "view"}]}),
    )];
    let bindings = vec![
        binding(
            "AccessBinding",
            "dev",
            "read",
            json!({"roleRef": {"name": "reader"}, "subjects": [{"kind": "User", "name": "bob"}]}),
        ),
        binding(
            "AccessBinding",
            "dev",
            "outside",
            json!({"roleRef": {"name": "reader"}, "effect": "Deny",
                   "subjects": [{"kind": "User", "name": "bob"}],
                   "conditions": {"sourceCIDRs": ["192.0.2.0/24"]}}),
        ),
    ];
    let z = AccessAuthorizer::new(AccessPolicy::build(&roles, &bindings, &[], &rbac));
    let mut a = ask("get", "dev");
    a.source = Some("127.0.0.1".parse().unwrap());
    match z.decide_at(&a, now()) {
        Decision::Allow { reason } => {
            assert!(reason.contains(r#"of ClusterRole "view""#), "{reason}")
        }
        d => panic!("{d:?}"),
    }
    a.source = None;
    assert!(matches!(z.decide_at(&a, now()), Decision::Deny { .. }));
}

#[test]
fn bad_objects_name_their_fields() {
    let errs = RoleObject::from_value(
        &json!({"metadata": {"name": "r"}, "spec": {
            "rules": [{"verbs": [], "nonResourceURLs": ["/x"], "resources": ["pods"]}],
            "parents": [{"kind": "Role", "name": "x"}, {"name": "r"}]
        }}),
        false,
    )
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(|c| c.to_error_string()).collect();
    assert_eq!(
        text,
        vec![
            "spec.rules[0].verbs: Required value: verbs must contain at least one value",
            r#"spec.rules[0].nonResourceURLs: Invalid value: []string{"/x"}: rules cannot apply to both regular resources and non-resource URLs"#,
            r#"spec.parents[0].kind: Unsupported value: "Role": supported values: "ClusterAccessRole", "ClusterRole""#,
            r#"spec.parents[1].name: Invalid value: "r": a role cannot be its own parent"#,
        ]
    );
    let errs = BindingObject::from_value(
        &json!({"metadata": {"name": "b"}, "spec": {
            "roleRef": {"kind": "Mystery", "name": ""},
            "subjects": [{"kind": "ServiceAccount", "name": "bot"}, {"kind": "Robot", "name": "r"}],
            "effect": "Maybe"
        }}),
        false,
    )
    .unwrap_err();
    let text: Vec<String> = errs.iter().map(|c| c.to_error_string()).collect();
    assert_eq!(
        text,
        vec![
            r#"spec.roleRef.kind: Unsupported value: "Mystery": supported values: "ClusterAccessRole", "ClusterRole""#,
            "spec.roleRef.name: Required value",
            "spec.subjects[0].namespace: Required value",
            r#"spec.subjects[1].kind: Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group""#,
            r#"spec.effect: Unsupported value: "Maybe": supported values: "Allow", "Deny""#,
        ]
    );
}

#[test]
fn invalid_deny_bindings_fail_closed_for_their_subjects() {
    let obj = json!({"metadata": {"name": "broken"}, "spec": {
        "roleRef": {"name": "viewer"}, "effect": "Deny",
        "subjects": [{"kind": "User", "name": "bob"}],
        "conditions": {"timeWindows": [{"start": "09:00", "end": "10:00", "timeZone": "Gone/Zone"}]}
    }});
    let reason = spec::causes_text(&BindingObject::from_value(&obj, false).unwrap_err());
    let invalid = Invalid {
        kind: "ClusterAccessBinding".into(),
        namespace: String::new(),
        name: "broken".into(),
        reason,
        salvage: Some(BindingObject::salvage(&obj)),
    };
    let z = AccessAuthorizer::new(AccessPolicy::build(
        &chain(),
        &[],
        &[invalid],
        &RbacPolicy::default(),
    ));
    match z.decide_at(&ask("get", "dev"), now()) {
        Decision::Deny { reason } => assert!(reason.contains("Gone/Zone"), "{reason}"),
        d => panic!("{d:?}"),
    }
}
