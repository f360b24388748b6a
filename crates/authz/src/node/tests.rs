//! The Node authorizer's decisions, as kube's node_authorizer_test.go
//! pins them.

use serde_json::json;

use super::*;

fn node_user(name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:node:{name}"),
        groups: vec![NODES_GROUP.into(), "system:authenticated".into()],
        ..UserInfo::default()
    }
}

fn ask(
    user: UserInfo,
    verb: &str,
    group: &str,
    resource: &str,
    sub: &str,
    ns: &str,
    name: &str,
) -> Attributes {
    Attributes::resource(user, verb, ns, group, "v1", resource, sub, name)
}

fn graph() -> NodeGraph {
    let mut g = NodeGraph::new();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"nodeName": "n1", "serviceAccountName": "sa",
                 "imagePullSecrets": [{"name": "pull"}],
                 "volumes": [{"name": "s", "secret": {"secretName": "vol-secret"}},
                             {"name": "c", "configMap": {"name": "vol-cm"}},
                             {"name": "p", "persistentVolumeClaim": {"claimName": "claim"}},
                             {"name": "e", "ephemeral": {}},
                             {"name": "proj", "projected": {"sources": [{"secret": {"name": "proj-secret"}},
                                                                        {"configMap": {"name": "kube-root-ca.crt"}}]}}],
                 "initContainers": [{"name": "i", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}]}],
                 "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "envfrom-cm"}}]}]}
    }))
    .expect("pod");
    g.set_pod(&pod);
    g.set_claim("ns", "claim", Some("pv-1"));
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "ns"},
        "spec": {"nodeName": "n2", "volumes": [{"name": "s", "secret": {"secretName": "db-secret"}}],
                 "containers": [{"name": "c"}]}
    }))
    .expect("pod");
    g.set_pod(&other);
    g
}

fn allowed(d: &Decision) -> bool {
    matches!(d, Decision::Allow { .. })
}

fn reason(d: &Decision) -> &str {
    match d {
        Decision::Allow { reason } | Decision::Deny { reason } | Decision::NoOpinion { reason } => {
            reason
        }
    }
}

#[test]
fn a_node_reads_only_what_its_pods_use() {
    let g = graph();
    let n1 = || node_user("n1");
    for (resource, name) in [
        ("secrets", "vol-secret"),
        ("secrets", "pull"),
        ("secrets", "env-secret"),
        ("secrets", "proj-secret"),
        ("configmaps", "vol-cm"),
        ("configmaps", "envfrom-cm"),
        ("configmaps", "kube-root-ca.crt"),
        ("persistentvolumeclaims", "claim"),
        ("persistentvolumeclaims", "web-e"),
    ] {
        let d = authorize(&g, &[], &ask(n1(), "get", "", resource, "", "ns", name));
        assert!(allowed(&d), "{resource}/{name}: {d:?}");
    }
    // Another node's pod's secret, an unused one, another namespace's.
    for (ns, name) in [
        ("ns", "db-secret"),
        ("ns", "unused"),
        ("other", "vol-secret"),
    ] {
        let d = authorize(&g, &[], &ask(n1(), "get", "", "secrets", "", ns, name));
        assert!(!allowed(&d));
        assert_eq!(
            reason(&d),
            "no relationship found between node 'n1' and this object"
        );
    }
    assert!(allowed(&authorize(
        &g,
        &[],
        &ask(node_user("n2"), "get", "", "secrets", "", "ns", "db-secret")
    )));
    // Reads of a single named object by list/watch (metadata.name), not
    // all of them, and no writes.
    assert!(allowed(&authorize(
        &g,
        &[],
        &ask(n1(), "watch", "", "secrets", "", "ns", "vol-secret")
    )));
    let d = authorize(&g, &[], &ask(n1(), "list", "", "secrets", "", "ns", ""));
    assert_eq!(reason(&d), "No Object name found");
    let d = authorize(
        &g,
        &[],
        &ask(n1(), "update", "", "secrets", "", "ns", "vol-secret"),
    );
    assert_eq!(reason(&d), "can only read resources of this type");
    // PersistentVolumes through their bound claims.
    assert!(allowed(&authorize(
        &g,
        &[],
        &ask(n1(), "get", "", "persistentvolumes", "", "", "pv-1")
    )));
    assert!(!allowed(&authorize(
        &g,
        &[],
        &ask(
            node_user("n2"),
            "get",
            "",
            "persistentvolumes",
            "",
            "",
            "pv-1"
        )
    )));
    // Tokens only for the ServiceAccounts of its pods.
    assert!(allowed(&authorize(
        &g,
        &[],
        &ask(n1(), "create", "", "serviceaccounts", "token", "ns", "sa")
    )));
    let d = authorize(
        &g,
        &[],
        &ask(
            n1(),
            "create",
            "",
            "serviceaccounts",
            "token",
            "ns",
            "default",
        ),
    );
    assert_eq!(
        reason(&d),
        "no relationship found between node 'n1' and this object"
    );
    let d = authorize(
        &g,
        &[],
        &ask(n1(), "get", "", "serviceaccounts", "", "ns", "sa"),
    );
    assert_eq!(
        reason(&d),
        "can only create tokens for individual service accounts"
    );
}

#[test]
fn edges_follow_pods_as_they_change() {
    let mut g = graph();
    let n1 = || node_user("n1");
    let get = |g: &NodeGraph| {
        allowed(&authorize(
            g,
            &[],
            &ask(n1(), "get", "", "secrets", "", "ns", "vol-secret"),
        ))
    };
    assert!(get(&g));
    // A second pod on n1 using the same secret keeps the edge when the
    // first goes.
    let twin: Pod = serde_json::from_value(json!({
        "metadata": {"name": "twin", "namespace": "ns"},
        "spec": {"nodeName": "n1", "volumes": [{"name": "s", "secret": {"secretName": "vol-secret"}}],
                 "containers": [{"name": "c"}]}
    }))
    .expect("pod");
    g.set_pod(&twin);
    g.remove_pod("ns", "web");
    assert!(get(&g));
    g.remove_pod("ns", "twin");
    assert!(!get(&g));
    // An unbound pod relates to no node; binding it adds the edges.
    let mut pending = twin.clone();
    pending.spec.as_mut().expect("spec").node_name = None;
    g.set_pod(&pending);
    assert!(!get(&g));
    g.set_pod(&twin);
    assert!(get(&g));
    assert_eq!(g.pod_count(), 2);
    // Names no pod uses any more are forgotten.
    let held = g.interned();
    g.remove_pod("ns", "db");
    g.remove_pod("ns", "twin");
    assert_eq!(g.pod_count(), 0);
    assert!(g.interned() < held);
    assert_eq!(g.interned(), 0, "every name was released");
}

#[test]
fn nodes_reach_their_own_node_lease_and_pods_only() {
    let g = graph();
    let n1 = || node_user("n1");
    let d = |a: Attributes| authorize(&g, &[], &a);
    assert!(allowed(&d(ask(n1(), "get", "", "nodes", "", "", "n1"))));
    assert_eq!(
        reason(&d(ask(n1(), "get", "", "nodes", "", "", "n2"))),
        "node 'n1' cannot read 'n2', only its own Node object"
    );
    assert_eq!(
        reason(&d(ask(n1(), "list", "", "nodes", "", "", ""))),
        "node 'n1' cannot read all nodes, only its own Node object"
    );
    assert!(allowed(&d(ask(
        n1(),
        "patch",
        "",
        "nodes",
        "status",
        "",
        "n2"
    ))));
    assert!(allowed(&d(ask(
        n1(),
        "update",
        "coordination.k8s.io",
        "leases",
        "",
        "kube-node-lease",
        "n1"
    ))));
    assert_eq!(
        reason(&d(ask(
            n1(),
            "update",
            "coordination.k8s.io",
            "leases",
            "",
            "kube-node-lease",
            "n2"
        ))),
        "can only access node lease with the same name as the requesting node"
    );
    assert_eq!(
        reason(&d(ask(
            n1(),
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            "default",
            "n1"
        ))),
        "can only access leases in the \"kube-node-lease\" system namespace"
    );
    // Pods: its own by field selector, one related pod by name.
    let mut watch = ask(n1(), "watch", "", "pods", "", "", "");
    assert_eq!(
        reason(&d(watch.clone())),
        "can only list/watch pods with spec.nodeName field selector"
    );
    watch.field_equals = vec![("spec.nodeName".into(), "n1".into())];
    assert!(allowed(&d(watch.clone())));
    watch.field_equals = vec![("spec.nodeName".into(), "n2".into())];
    assert!(!allowed(&d(watch)));
    assert!(allowed(&d(ask(n1(), "get", "", "pods", "", "ns", "web"))));
    assert!(!allowed(&d(ask(n1(), "get", "", "pods", "", "ns", "db"))));
    assert!(allowed(&d(ask(
        n1(),
        "patch",
        "",
        "pods",
        "status",
        "ns",
        "db"
    ))));
    assert!(!allowed(&d(ask(
        n1(),
        "update",
        "",
        "pods",
        "",
        "ns",
        "web"
    ))));
    // Not a node: no opinion, nothing said.
    let alice = UserInfo {
        name: "alice".into(),
        ..UserInfo::default()
    };
    assert_eq!(
        d(ask(alice, "get", "", "secrets", "", "ns", "vol-secret")),
        no_opinion("")
    );
    // The node prefix without the group is not a node.
    let pretender = UserInfo {
        name: "system:node:n1".into(),
        ..UserInfo::default()
    };
    assert_eq!(node_identity(&pretender), None);
    let nameless = UserInfo {
        name: "system:node:".into(),
        groups: vec![NODES_GROUP.into()],
        ..UserInfo::default()
    };
    assert_eq!(
        reason(&d(ask(nameless, "get", "", "nodes", "", "", "x"))),
        "unknown node for user \"system:node:\""
    );
}

#[test]
fn other_requests_follow_the_node_rules() {
    let g = graph();
    let rules = vec![Rule {
        verbs: vec!["create".into()],
        api_groups: vec!["".into()],
        resources: vec!["events".into()],
        ..Rule::default()
    }];
    assert!(allowed(&authorize(
        &g,
        &rules,
        &ask(node_user("n1"), "create", "", "events", "", "ns", "")
    )));
    assert!(!allowed(&authorize(
        &g,
        &rules,
        &ask(node_user("n1"), "delete", "", "events", "", "ns", "e")
    )));
}
