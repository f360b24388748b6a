//! The RBAC objects kube-apiserver's `rbac/bootstrap-roles` hook creates
//! that every client relies on: `cluster-admin` for `system:masters`,
//! discovery and the self-reviews for every authenticated user, health and
//! version for everyone, the token issuer's OIDC documents for every
//! ServiceAccount; and the user-facing `admin`, `edit` and `view`, which
//! aggregate the `system:aggregate-to-*` roles (and anything else labelled
//! `rbac.authorization.k8s.io/aggregate-to-*`) once the aggregation
//! controller runs. Made at start when missing, labelled and annotated
//! as kube's are (`kubernetes.io/bootstrapping=rbac-defaults`,
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`).

use serde_json::{Value, json};

use crate::error::ApiResult;
use crate::server::ApiServer;

const GV: &str = "rbac.authorization.k8s.io/v1";
/// The resource ClusterRoles are created through.
pub(crate) const CLUSTER_ROLES: (&str, &str, &str) =
    ("rbac.authorization.k8s.io", "v1", "clusterroles");
/// The resource ClusterRoleBindings are created through.
pub(crate) const CLUSTER_ROLE_BINDINGS: (&str, &str, &str) =
    ("rbac.authorization.k8s.io", "v1", "clusterrolebindings");

fn meta(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

/// Read verbs.
pub(crate) const READ: &[&str] = &["get", "list", "watch"];
const WRITE: [&str; 5] = ["create", "delete", "deletecollection", "patch", "update"];

/// A bootstrap ClusterRole `name` with `rules`.
pub(crate) fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": GV, "kind": "ClusterRole", "metadata": meta(name), "rules": rules})
}

/// A bootstrap ClusterRoleBinding `name` of ClusterRole `role` to
/// `subjects`.
pub(crate) fn cluster_role_binding(name: &str, role: &str, subjects: Vec<Value>) -> Value {
    json!({"apiVersion": GV, "kind": "ClusterRoleBinding", "metadata": meta(name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects})
}

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

/// kube's `system:aggregate-to-{admin,edit,view}` (bootstrappolicy), and
/// the aggregating `admin`, `edit`, `view`: `(name, labels, rules,
/// aggregated label)`.
fn aggregated_roles() -> Vec<(&'static str, Value, Value, Option<&'static str>)> {
    let read_write: Vec<&str> = READ.iter().chain(WRITE.iter()).copied().collect();
    let to = |k: &str| json!({format!("rbac.authorization.k8s.io/aggregate-to-{k}"): "true"});
    vec![
        ("admin", json!({}), json!([]), Some("admin")),
        ("edit", to("admin"), json!([]), Some("edit")),
        ("view", to("edit"), json!([]), Some("view")),
        (
            "system:aggregate-to-admin",
            to("admin"),
            json!([
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["localsubjectaccessreviews"]
                ),
                rule(
                    &read_write,
                    "rbac.authorization.k8s.io",
                    &["roles", "rolebindings"]
                ),
            ]),
            None,
        ),
        (
            "system:aggregate-to-edit",
            to("edit"),
            json!([
                rule(
                    READ,
                    "",
                    &[
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward",
                        "secrets",
                        "services/proxy"
                    ]
                ),
                rule(&["impersonate"], "", &["serviceaccounts"]),
                rule(
                    &WRITE,
                    "",
                    &[
                        "pods",
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward"
                    ]
                ),
                rule(
                    &WRITE,
                    "",
                    &[
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "endpoints",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets"
                    ]
                ),
                rule(
                    &WRITE,
                    "apps",
                    &[
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale"
                    ]
                ),
                rule(&WRITE, "autoscaling", &["horizontalpodautoscalers"]),
                rule(&WRITE, "batch", &["jobs", "cronjobs"]),
                rule(
                    &WRITE,
                    "extensions",
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "ingresses",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                        "networkpolicies"
                    ]
                ),
                rule(&WRITE, "policy", &["poddisruptionbudgets"]),
                rule(
                    &WRITE,
                    "networking.k8s.io",
                    &["networkpolicies", "ingresses"]
                ),
            ]),
            None,
        ),
        (
            "system:aggregate-to-view",
            to("view"),
            json!([
                rule(
                    READ,
                    "",
                    &[
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps"
                    ]
                ),
                rule(
                    READ,
                    "",
                    &[
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log"
                    ]
                ),
                rule(READ, "", &["namespaces"]),
                rule(
                    READ,
                    "apps",
                    &[
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale"
                    ]
                ),
                rule(
                    READ,
                    "autoscaling",
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status"
                    ]
                ),
                rule(
                    READ,
                    "batch",
                    &["jobs", "cronjobs", "cronjobs/status", "jobs/status"]
                ),
                rule(
                    READ,
                    "extensions",
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                        "networkpolicies"
                    ]
                ),
                rule(
                    READ,
                    "policy",
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"]
                ),
                rule(
                    READ,
                    "networking.k8s.io",
                    &["networkpolicies", "ingresses", "ingresses/status"]
                ),
            ]),
            None,
        ),
    ]
}

/// `(name, rules)` of the bootstrap ClusterRoles.
fn cluster_roles() -> Vec<(&'static str, Value)> {
    let public = json!(["/healthz", "/livez", "/readyz", "/version", "/version/"]);
    vec![
        (
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ]),
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"
            ], "verbs": ["get"]}]),
        ),
        (
            "system:basic-user",
            json!([
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"],
                 "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]}
            ]),
        ),
        (
            "system:public-info-viewer",
            json!([{"nonResourceURLs": public, "verbs": ["get"]}]),
        ),
        (
            "system:monitoring",
            json!([{"nonResourceURLs": [
                "/healthz", "/healthz/*", "/livez", "/livez/*", "/metrics",
                "/metrics/slis", "/readyz", "/readyz/*"
            ], "verbs": ["get"]}]),
        ),
        (
            "system:service-account-issuer-discovery",
            json!([{"nonResourceURLs": [
                "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                "/openid/v1/jwks", "/openid/v1/jwks/"
            ], "verbs": ["get"]}]),
        ),
    ]
}

/// `(name, role, groups)` of the bootstrap ClusterRoleBindings.
const BOOTSTRAP_BINDINGS: &[(&str, &str, &[&str])] = &[
    ("cluster-admin", "cluster-admin", &["system:masters"]),
    (
        "system:discovery",
        "system:discovery",
        &["system:authenticated"],
    ),
    (
        "system:basic-user",
        "system:basic-user",
        &["system:authenticated"],
    ),
    (
        "system:public-info-viewer",
        "system:public-info-viewer",
        &["system:authenticated", "system:unauthenticated"],
    ),
    (
        "system:service-account-issuer-discovery",
        "system:service-account-issuer-discovery",
        &["system:serviceaccounts"],
    ),
    (
        "system:monitoring",
        "system:monitoring",
        &["system:monitoring"],
    ),
];

/// Create the bootstrap roles and bindings that are missing.
pub(crate) async fn ensure(server: &ApiServer) -> ApiResult<()> {
    for (name, labels, rules, gathers) in aggregated_roles() {
        let mut role = cluster_role(name, rules);
        if let (Some(l), Some(extra)) = (
            role["metadata"]["labels"].as_object_mut(),
            labels.as_object(),
        ) {
            l.extend(extra.clone());
        }
        if let Some(k) = gathers {
            role["aggregationRule"] = json!({"clusterRoleSelectors": [
                {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{k}"): "true"}}
            ]});
        }
        crate::rest::ensure_object(server, CLUSTER_ROLES, role).await?;
    }
    for (name, rules) in cluster_roles() {
        crate::rest::ensure_object(server, CLUSTER_ROLES, cluster_role(name, rules)).await?;
    }
    for (name, role, groups) in BOOTSTRAP_BINDINGS {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        crate::rest::ensure_object(
            server,
            CLUSTER_ROLE_BINDINGS,
            cluster_role_binding(name, role, subjects),
        )
        .await?;
    }
    Ok(())
}
