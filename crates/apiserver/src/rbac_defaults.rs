//! The RBAC objects kube-apiserver's `rbac/bootstrap-roles` hook creates
//! that every client relies on: `cluster-admin` for `system:masters`,
//! discovery and the self-reviews for every authenticated user, health and
//! version for everyone, the token issuer's OIDC documents for every
//! ServiceAccount. Made at start when missing, labelled and annotated
//! as kube's are (`kubernetes.io/bootstrapping=rbac-defaults`,
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`).

use serde_json::{Value, json};

use crate::error::ApiResult;
use crate::server::ApiServer;

const GV: &str = "rbac.authorization.k8s.io/v1";

fn meta(name: &str) -> Value {
    json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
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
            "system:service-account-issuer-discovery",
            json!([{"nonResourceURLs": [
                "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                "/openid/v1/jwks", "/openid/v1/jwks/"
            ], "verbs": ["get"]}]),
        ),
    ]
}

/// `(name, role, groups)` of the bootstrap ClusterRoleBindings.
const CLUSTER_ROLE_BINDINGS: &[(&str, &str, &[&str])] = &[
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
];

/// Create the bootstrap roles and bindings that are missing.
pub(crate) async fn ensure(server: &ApiServer) -> ApiResult<()> {
    for (name, rules) in cluster_roles() {
        crate::rest::ensure_object(
            server,
            ("rbac.authorization.k8s.io", "v1", "clusterroles"),
            json!({"apiVersion": GV, "kind": "ClusterRole", "metadata": meta(name), "rules": rules}),
        )
        .await?;
    }
    for (name, role, groups) in CLUSTER_ROLE_BINDINGS {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
            .collect();
        crate::rest::ensure_object(
            server,
            ("rbac.authorization.k8s.io", "v1", "clusterrolebindings"),
            json!({"apiVersion": GV, "kind": "ClusterRoleBinding", "metadata": meta(name),
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": subjects}),
        )
        .await?;
    }
    Ok(())
}
