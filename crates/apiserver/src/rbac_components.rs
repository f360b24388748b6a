//! The identities kubeforge's built-in components run as, and the
//! bootstrap roles that give each exactly what it does (kube's
//! `bootstrappolicy`): every controller writes as its own ServiceAccount
//! in `kube-system` bound to `system:controller:<name>` (as
//! kube-controller-manager with `--use-service-account-credentials`), the
//! controllers' shared caches read as `system:kube-controller-manager`,
//! the scheduler is `system:kube-scheduler`, and the node simulator
//! `system:kubeforge:node-simulator` with kube's `system:node` role.
//!
//! The rules are kube's, with `patch` added where our controllers patch
//! what kube's update (status subresources, a Deployment's revision
//! annotation) and the scheduler's reads of PriorityClasses and
//! coscheduling PodGroups; `docs/COMPATIBILITY.md` lists them. The
//! ServiceAccounts are made at start, as kube-controller-manager makes
//! them.

use kubeforge_authz::UserInfo;
use kubeforge_authz::user::ALL_AUTHENTICATED;
use serde_json::{Value, json};

use crate::error::ApiResult;
use crate::rbac_defaults::READ;
use crate::server::ApiServer;

/// The user of the controllers' shared caches and events.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
/// The scheduler's user.
pub const SCHEDULER_USER: &str = "system:kube-scheduler";
/// The node simulator's user.
pub const NODE_SIMULATOR_USER: &str = "system:kubeforge:node-simulator";
/// The user of the object-state metrics (kube-state-metrics' role):
/// it lists and watches what it reports on, nothing more.
pub const STATE_METRICS_USER: &str = "system:kubeforge:kube-state-metrics";
/// The Metrics API provider's user (metrics-server's role: it reads pods
/// and nodes, and nodes' resource endpoints).
pub const METRICS_SERVER_USER: &str = "system:metrics-server";
/// The group node agents authenticate in (`system:node:<name>`).
pub const NODES_GROUP: &str = "system:nodes";
/// kube-proxy's user (the Service proxy of container nodes).
pub const KUBE_PROXY_USER: &str = "system:kube-proxy";
/// The cluster DNS server's user (kube-dns's role, `system:kube-dns`).
pub const KUBE_DNS_USER: &str = "system:kube-dns";
/// The user the API server calls kubelets as (kubeadm's name).
pub const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// A node agent's user: `system:node:<name>` in `system:nodes`, as its
/// client certificate names it.
pub fn node_user(node: &str) -> UserInfo {
    UserInfo::new(
        &format!("system:node:{node}"),
        [NODES_GROUP, ALL_AUTHENTICATED],
    )
}

/// The namespace of the controllers' ServiceAccounts.
pub const CONTROLLER_NAMESPACE: &str = "kube-system";

/// A component user outside any ServiceAccount: `name` in
/// `system:authenticated`, as its client certificate would name it.
pub fn component_user(name: &str) -> UserInfo {
    UserInfo::new(name, [ALL_AUTHENTICATED])
}

/// The user of the controller writing as ServiceAccount `account` in
/// `kube-system`.
pub fn controller_user(account: &str) -> UserInfo {
    UserInfo::service_account(CONTROLLER_NAMESPACE, account)
}

/// One PolicyRule: verbs, API groups, resources, resource names.
type Rule = (
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const CORE: &[&str] = &[""];
const APPS: &[&str] = &["apps", "extensions"];
const UPDATE: &[&str] = &["update"];
/// Status writes: kube's `update`, and our controllers' merge patches.
const STATUS: &[&str] = &["patch", "update"];
const CREATE: &[&str] = &["create"];
const OWN_PODS: &[&str] = &["create", "delete", "list", "patch", "watch"];
const ALL_BUT_DC: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];
const EVENTS: Rule = (
    CREATE_PATCH_UPDATE,
    &["", "events.k8s.io"],
    &["events"],
    &[],
);
const CREATE_PATCH_UPDATE: &[&str] = &["create", "patch", "update"];

/// `(ServiceAccount, rules of system:controller:<account>)`.
const CONTROLLERS: &[(&str, &[Rule])] = &[
    (
        "service-account-controller",
        &[(CREATE, CORE, &["serviceaccounts"], &[]), EVENTS],
    ),
    (
        "root-ca-cert-publisher",
        &[(&["create", "update"], CORE, &["configmaps"], &[]), EVENTS],
    ),
    (
        "generic-garbage-collector",
        &[
            (
                &["delete", "get", "list", "patch", "update", "watch"],
                &["*"],
                &["*"],
                &[],
            ),
            EVENTS,
        ],
    ),
    (
        "namespace-controller",
        &[
            (
                &["delete", "get", "list", "watch"],
                CORE,
                &["namespaces"],
                &[],
            ),
            (
                UPDATE,
                CORE,
                &["namespaces/finalize", "namespaces/status"],
                &[],
            ),
            (
                &["delete", "deletecollection", "get", "list", "watch"],
                &["*"],
                &["*"],
                &[],
            ),
        ],
    ),
    (
        "clusterrole-aggregation-controller",
        &[(
            &["escalate", "get", "list", "patch", "update", "watch"],
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
            &[],
        )],
    ),
    (
        "certificate-controller",
        &[
            (
                &["delete", "get", "list", "watch"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
                &[],
            ),
            (
                UPDATE,
                &["certificates.k8s.io"],
                &[
                    "certificatesigningrequests/approval",
                    "certificatesigningrequests/status",
                ],
                &[],
            ),
            (
                &["approve"],
                &["certificates.k8s.io"],
                &["signers"],
                &["kubernetes.io/kube-apiserver-client-kubelet"],
            ),
            (
                &["sign"],
                &["certificates.k8s.io"],
                &["signers"],
                &[
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                    "kubernetes.io/legacy-unknown",
                ],
            ),
            (
                CREATE,
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
                &[],
            ),
            EVENTS,
        ],
    ),
    (
        "replicaset-controller",
        &[
            (
                &["get", "list", "update", "watch"],
                APPS,
                &["replicasets"],
                &[],
            ),
            (STATUS, APPS, &["replicasets/status"], &[]),
            (UPDATE, APPS, &["replicasets/finalizers"], &[]),
            (OWN_PODS, CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "replication-controller",
        &[
            (
                &["get", "list", "update", "watch"],
                CORE,
                &["replicationcontrollers"],
                &[],
            ),
            (STATUS, CORE, &["replicationcontrollers/status"], &[]),
            (UPDATE, CORE, &["replicationcontrollers/finalizers"], &[]),
            (OWN_PODS, CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "deployment-controller",
        &[
            (
                &["get", "list", "patch", "update", "watch"],
                APPS,
                &["deployments"],
                &[],
            ),
            (STATUS, APPS, &["deployments/status"], &[]),
            (UPDATE, APPS, &["deployments/finalizers"], &[]),
            (ALL_BUT_DC, APPS, &["replicasets"], &[]),
            (&["get", "list", "update", "watch"], CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "statefulset-controller",
        &[
            (&["list", "watch"], CORE, &["pods"], &[]),
            (READ, &["apps"], &["statefulsets"], &[]),
            (STATUS, &["apps"], &["statefulsets/status"], &[]),
            (UPDATE, &["apps"], &["statefulsets/finalizers"], &[]),
            (
                &["create", "delete", "get", "patch", "update"],
                CORE,
                &["pods"],
                &[],
            ),
            (ALL_BUT_DC, &["apps"], &["controllerrevisions"], &[]),
            (
                &["create", "get", "list", "watch"],
                CORE,
                &["persistentvolumeclaims"],
                &[],
            ),
            (
                &["delete", "update"],
                CORE,
                &["persistentvolumeclaims"],
                &[],
            ),
            (UPDATE, CORE, &["pods/finalizers"], &[]),
            EVENTS,
        ],
    ),
    (
        "daemon-set-controller",
        &[
            (READ, APPS, &["daemonsets"], &[]),
            (STATUS, APPS, &["daemonsets/status"], &[]),
            (UPDATE, APPS, &["daemonsets/finalizers"], &[]),
            (&["list", "watch"], CORE, &["nodes"], &[]),
            (OWN_PODS, CORE, &["pods"], &[]),
            (CREATE, CORE, &["pods/binding"], &[]),
            (ALL_BUT_DC, &["apps"], &["controllerrevisions"], &[]),
            EVENTS,
        ],
    ),
    (
        "job-controller",
        &[
            (
                &["get", "list", "patch", "update", "watch"],
                &["batch"],
                &["jobs"],
                &[],
            ),
            (STATUS, &["batch"], &["jobs/status"], &[]),
            (UPDATE, &["batch"], &["jobs/finalizers"], &[]),
            (OWN_PODS, CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "cronjob-controller",
        &[
            (
                &["get", "list", "update", "watch"],
                &["batch"],
                &["cronjobs"],
                &[],
            ),
            (ALL_BUT_DC, &["batch"], &["jobs"], &[]),
            (STATUS, &["batch"], &["cronjobs/status"], &[]),
            (UPDATE, &["batch"], &["cronjobs/finalizers"], &[]),
            (&["delete", "list", "watch"], CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "ttl-after-finished-controller",
        &[
            (
                &["delete", "get", "list", "watch"],
                &["batch"],
                &["jobs"],
                &[],
            ),
            EVENTS,
        ],
    ),
    (
        "endpointslice-controller",
        &[
            (READ, CORE, &["nodes", "pods", "services"], &[]),
            (UPDATE, CORE, &["services/finalizers"], &[]),
            (
                &["create", "delete", "get", "list", "update", "watch"],
                &["discovery.k8s.io"],
                &["endpointslices"],
                &[],
            ),
            EVENTS,
        ],
    ),
    (
        "endpoint-controller",
        &[
            (READ, CORE, &["pods", "services"], &[]),
            (
                &["create", "delete", "get", "list", "update", "watch"],
                CORE,
                &["endpoints"],
                &[],
            ),
            (CREATE, CORE, &["endpoints/restricted"], &[]),
            EVENTS,
        ],
    ),
    (
        "node-controller",
        &[
            (
                &["delete", "get", "list", "patch", "update", "watch"],
                CORE,
                &["nodes"],
                &[],
            ),
            (STATUS, CORE, &["nodes/status", "pods/status"], &[]),
            (&["delete", "get", "list", "watch"], CORE, &["pods"], &[]),
            EVENTS,
        ],
    ),
    (
        "horizontal-pod-autoscaler",
        &[
            (READ, &["autoscaling"], &["horizontalpodautoscalers"], &[]),
            (
                STATUS,
                &["autoscaling"],
                &["horizontalpodautoscalers/status"],
                &[],
            ),
            (&["get", "update"], &["*"], &["*/scale"], &[]),
            (&["list"], CORE, &["pods"], &[]),
            (&["list"], &["metrics.k8s.io"], &["pods"], &[]),
            (&["get", "list"], &["custom.metrics.k8s.io"], &["*"], &[]),
            (&["get", "list"], &["external.metrics.k8s.io"], &["*"], &[]),
            EVENTS,
        ],
    ),
    (
        "disruption-controller",
        &[
            (READ, APPS, &["deployments", "replicasets"], &[]),
            (READ, CORE, &["replicationcontrollers"], &[]),
            (READ, &["policy"], &["poddisruptionbudgets"], &[]),
            (READ, &["apps"], &["statefulsets"], &[]),
            (UPDATE, &["policy"], &["poddisruptionbudgets/status"], &[]),
            (STATUS, CORE, &["pods/status"], &[]),
            (&["get"], &["*"], &["*/scale"], &[]),
            EVENTS,
        ],
    ),
];

const LEASES: &[&str] = &["coordination.k8s.io"];
const STORAGE: &[&str] = &["storage.k8s.io"];
const TOKEN_REVIEWS: Rule = (CREATE, &["authentication.k8s.io"], &["tokenreviews"], &[]);
const ACCESS_REVIEWS: Rule = (
    CREATE,
    &["authorization.k8s.io"],
    &["subjectaccessreviews"],
    &[],
);

/// `(name, rules)` of the component ClusterRoles besides the controllers'.
const COMPONENTS: &[(&str, &[Rule])] = &[
    (
        METRICS_SERVER_USER,
        &[
            (&["get"], CORE, &["nodes/metrics"], &[]),
            (READ, CORE, &["pods", "nodes"], &[]),
        ],
    ),
    (
        STATE_METRICS_USER,
        &[
            (&["list", "watch"], CORE, &["pods", "nodes"], &[]),
            (&["list", "watch"], &["apps"], &["deployments"], &[]),
        ],
    ),
    (
        CONTROLLER_MANAGER_USER,
        &[
            EVENTS,
            (CREATE, LEASES, &["leases"], &[]),
            (
                &["get", "update"],
                LEASES,
                &["leases"],
                &["kube-controller-manager"],
            ),
            (CREATE, CORE, &["secrets", "serviceaccounts"], &[]),
            (&["delete"], CORE, &["secrets"], &[]),
            (
                &["get"],
                CORE,
                &["configmaps", "namespaces", "secrets", "serviceaccounts"],
                &[],
            ),
            (UPDATE, CORE, &["secrets", "serviceaccounts"], &[]),
            TOKEN_REVIEWS,
            ACCESS_REVIEWS,
            (&["list", "watch"], &["*"], &["*"], &[]),
            (CREATE, CORE, &["serviceaccounts/token"], &[]),
        ],
    ),
    (
        SCHEDULER_USER,
        &[
            EVENTS,
            (CREATE, LEASES, &["leases"], &[]),
            (&["get", "update"], LEASES, &["leases"], &["kube-scheduler"]),
            (READ, CORE, &["nodes"], &[]),
            (&["delete", "get", "list", "watch"], CORE, &["pods"], &[]),
            (CREATE, CORE, &["bindings", "pods/binding"], &[]),
            (STATUS, CORE, &["pods/status"], &[]),
            (READ, CORE, &["replicationcontrollers", "services"], &[]),
            (READ, APPS, &["replicasets"], &[]),
            (READ, &["apps"], &["statefulsets"], &[]),
            (READ, &["policy"], &["poddisruptionbudgets"], &[]),
            (
                READ,
                CORE,
                &["persistentvolumeclaims", "persistentvolumes"],
                &[],
            ),
            TOKEN_REVIEWS,
            ACCESS_REVIEWS,
            (READ, STORAGE, &["csinodes"], &[]),
            (READ, CORE, &["namespaces"], &[]),
            (READ, STORAGE, &["csidrivers", "csistoragecapacities"], &[]),
            // kubeforge's scheduler reads these; kube's does not.
            (READ, &["scheduling.k8s.io"], &["priorityclasses"], &[]),
            (READ, &["scheduling.x-k8s.io"], &["podgroups"], &[]),
        ],
    ),
    (
        "system:volume-scheduler",
        &[
            (
                &["get", "list", "patch", "update", "watch"],
                CORE,
                &["persistentvolumes", "persistentvolumeclaims"],
                &[],
            ),
            (READ, STORAGE, &["storageclasses"], &[]),
        ],
    ),
    (
        "system:node",
        &[
            TOKEN_REVIEWS,
            (
                CREATE,
                &["authorization.k8s.io"],
                &["localsubjectaccessreviews", "subjectaccessreviews"],
                &[],
            ),
            (READ, CORE, &["services"], &[]),
            (
                &["create", "get", "list", "patch", "update", "watch"],
                CORE,
                &["nodes"],
                &[],
            ),
            (STATUS, CORE, &["nodes/status"], &[]),
            (CREATE_PATCH_UPDATE, CORE, &["events"], &[]),
            (READ, CORE, &["pods"], &[]),
            (&["create", "delete"], CORE, &["pods"], &[]),
            (STATUS, CORE, &["pods/status"], &[]),
            (CREATE, CORE, &["pods/eviction"], &[]),
            (READ, CORE, &["configmaps", "secrets"], &[]),
            (
                &["get"],
                CORE,
                &["persistentvolumeclaims", "persistentvolumes", "endpoints"],
                &[],
            ),
            (
                &["create", "get", "list", "watch"],
                &["certificates.k8s.io"],
                &["certificatesigningrequests"],
                &[],
            ),
            (
                &["create", "delete", "get", "patch", "update"],
                LEASES,
                &["leases"],
                &[],
            ),
            (&["get"], STORAGE, &["volumeattachments"], &[]),
            (CREATE, CORE, &["serviceaccounts/token"], &[]),
            (
                &["get", "patch", "update"],
                CORE,
                &["persistentvolumeclaims/status"],
                &[],
            ),
            (READ, STORAGE, &["csidrivers"], &[]),
            (
                &["create", "delete", "get", "patch", "update"],
                STORAGE,
                &["csinodes"],
                &[],
            ),
            (READ, &["node.k8s.io"], &["runtimeclasses"], &[]),
        ],
    ),
];

/// The `system:node` role's rules: what the Node authorizer allows nodes
/// beyond what its graph decides (kube's `NodeRules`).
pub(crate) fn node_rules() -> Vec<kubeforge_authz::rbac::rules::Rule> {
    let rules = COMPONENTS
        .iter()
        .find(|(name, _)| *name == "system:node")
        .map(|(_, rules)| rules_json(rules))
        .unwrap_or_default();
    serde_json::from_value::<Vec<k8s_openapi::api::rbac::v1::PolicyRule>>(rules)
        .unwrap_or_default()
        .iter()
        .map(Into::into)
        .collect()
}

/// `(binding and role name, user)` of the component ClusterRoleBindings
/// besides the controllers'.
const COMPONENT_BINDINGS: &[(&str, &str, &str)] = &[
    (
        METRICS_SERVER_USER,
        METRICS_SERVER_USER,
        METRICS_SERVER_USER,
    ),
    (
        CONTROLLER_MANAGER_USER,
        CONTROLLER_MANAGER_USER,
        CONTROLLER_MANAGER_USER,
    ),
    (SCHEDULER_USER, SCHEDULER_USER, SCHEDULER_USER),
    (
        "system:volume-scheduler",
        "system:volume-scheduler",
        SCHEDULER_USER,
    ),
    (
        "kubeforge:node-simulator",
        "system:node",
        NODE_SIMULATOR_USER,
    ),
    (STATE_METRICS_USER, STATE_METRICS_USER, STATE_METRICS_USER),
];

/// The ServiceAccounts (in `kube-system`) the built-in controllers write
/// as, each bound to `system:controller:<name>`.
pub fn controller_accounts() -> impl Iterator<Item = &'static str> {
    CONTROLLERS.iter().map(|(a, _)| *a)
}

fn rules_json(rules: &[Rule]) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|(verbs, groups, resources, names)| {
            let mut r = json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
            if !names.is_empty() {
                r["resourceNames"] = json!(names);
            }
            r
        })
        .collect();
    Value::Array(rules)
}

/// Create the component roles, bindings and ServiceAccounts that are
/// missing.
pub(crate) async fn ensure(server: &ApiServer) -> ApiResult<()> {
    use crate::rbac_defaults::{
        CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES, cluster_role, cluster_role_binding,
    };
    for (account, rules) in CONTROLLERS {
        let name = format!("system:controller:{account}");
        crate::rest::ensure_object(
            server,
            ("", "v1", "serviceaccounts"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": account, "namespace": CONTROLLER_NAMESPACE}}),
        )
        .await?;
        crate::rest::ensure_object(
            server,
            CLUSTER_ROLES,
            cluster_role(&name, rules_json(rules)),
        )
        .await?;
        let subject =
            json!({"kind": "ServiceAccount", "name": account, "namespace": CONTROLLER_NAMESPACE});
        let binding = cluster_role_binding(&name, &name, vec![subject]);
        crate::rest::ensure_object(server, CLUSTER_ROLE_BINDINGS, binding).await?;
    }
    for (name, rules) in COMPONENTS {
        crate::rest::ensure_object(server, CLUSTER_ROLES, cluster_role(name, rules_json(rules)))
            .await?;
    }
    for (name, role, user) in COMPONENT_BINDINGS {
        let subject =
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user});
        let binding = cluster_role_binding(name, role, vec![subject]);
        crate::rest::ensure_object(server, CLUSTER_ROLE_BINDINGS, binding).await?;
    }
    // metrics-server's `system:aggregated-metrics-reader`: reading the
    // Metrics API is part of view, edit and admin (the ClusterRole
    // aggregation controller folds it in).
    let mut reader = cluster_role(
        "system:aggregated-metrics-reader",
        rules_json(&[(READ, &["metrics.k8s.io"], &["pods", "nodes"], &[])]),
    );
    for to in ["admin", "edit", "view"] {
        reader["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{to}")] =
            json!("true");
    }
    crate::rest::ensure_object(server, CLUSTER_ROLES, reader).await?;
    // Node agents (`system:node:<name>` in `system:nodes`) are judged by
    // the Node authorizer (crate::node_authz), as in kube: no binding
    // grants them `system:node`. Clusters made before it had one, which
    // would let a node read every Secret: it goes.
    if let Some(def) =
        server
            .registry()
            .get("rbac.authorization.k8s.io", "v1", "clusterrolebindings")
    {
        let old = def.key(None, "kubeforge:nodes");
        if let Some(kv) = server.store().get(&old) {
            let last: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            let _ = server
                .store()
                .delete(&old, None, move |rev, _| {
                    crate::object::encode_with_rv(last, rev)
                })
                .await;
            crate::authz::changed(server, &def);
        }
    }
    // The API server's kubelet client may use every node's API (kubeadm's
    // `kube-apiserver-kubelet-client` bound to `system:kubelet-api-admin`).
    let client = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER});
    let role = cluster_role(
        "system:kubelet-api-admin",
        rules_json(&[
            (READ, CORE, &["nodes"], &[]),
            (&["proxy"], CORE, &["nodes"], &[]),
            (
                &["*"],
                CORE,
                &["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"],
                &[],
            ),
        ]),
    );
    crate::rest::ensure_object(server, CLUSTER_ROLES, role).await?;
    // kube-proxy's role (bootstrappolicy's `system:node-proxier`), bound to
    // its user as kube-proxy's kubeconfig names it.
    let proxier = cluster_role(
        "system:node-proxier",
        rules_json(&[
            (&["list", "watch"], CORE, &["endpoints", "services"], &[]),
            (&["get", "list", "watch"], CORE, &["nodes"], &[]),
            (CREATE_PATCH_UPDATE, CORE, &["events"], &[]),
            (
                &["list", "watch"],
                &["discovery.k8s.io"],
                &["endpointslices"],
                &[],
            ),
        ]),
    );
    crate::rest::ensure_object(server, CLUSTER_ROLES, proxier).await?;
    let user =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_PROXY_USER});
    let binding = cluster_role_binding("system:node-proxier", "system:node-proxier", vec![user]);
    crate::rest::ensure_object(server, CLUSTER_ROLE_BINDINGS, binding).await?;
    // The cluster DNS server: bootstrappolicy's `system:kube-dns` (list and
    // watch Services and Endpoints) plus EndpointSlices, as CoreDNS's
    // role has them.
    let dns = cluster_role(
        "system:kube-dns",
        rules_json(&[
            (&["list", "watch"], CORE, &["endpoints", "services"], &[]),
            (
                &["list", "watch"],
                &["discovery.k8s.io"],
                &["endpointslices"],
                &[],
            ),
        ]),
    );
    crate::rest::ensure_object(server, CLUSTER_ROLES, dns).await?;
    let user =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBE_DNS_USER});
    let binding = cluster_role_binding("system:kube-dns", "system:kube-dns", vec![user]);
    crate::rest::ensure_object(server, CLUSTER_ROLE_BINDINGS, binding).await?;
    let binding = cluster_role_binding(
        KUBELET_CLIENT_USER,
        "system:kubelet-api-admin",
        vec![client],
    );
    crate::rest::ensure_object(server, CLUSTER_ROLE_BINDINGS, binding).await?;
    Ok(())
}
