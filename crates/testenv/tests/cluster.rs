//! A whole cluster in a test: `.controllers().scheduler().nodes(n)` makes
//! Deployments roll out onto simulated nodes, as an operator's tests need.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kubeforge_controllers::nodesim::Delays;
use kubeforge_testenv::{TestEnv, eventually};

/// How long the waits below allow.
const WAIT: Duration = Duration::from_secs(30);

/// Create Deployment `web` (nginx, label `app=web`) with `replicas` and
/// wait until all of them are available.
async fn roll_out_web(deployments: &Api<Deployment>, replicas: i32) {
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx"}]},
            },
        },
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deploy)
        .await
        .expect("create deployment");
    eventually(&format!("{replicas} available replicas"), WAIT, || async {
        deployments
            .get("web")
            .await
            .ok()
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            == Some(replicas)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolls_out_onto_simulated_nodes() {
    let env = TestEnv::builder()
        .controllers()
        .scheduler()
        .nodes(2)
        .node_delays(Delays::zero())
        .start()
        .await
        .expect("start");
    let nodes: Api<Node> = Api::all(env.client());
    let names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .expect("list nodes")
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(names, ["node-0", "node-1"]);
    assert_eq!(env.simulator().map(|s| s.nodes().len()), Some(2));

    let deployments: Api<Deployment> = Api::default_namespaced(env.client());
    roll_out_web(&deployments, 3).await;
    let pods: Api<Pod> = Api::default_namespaced(env.client());
    let list = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("pods");
    assert_eq!(list.items.len(), 3);
    for p in &list.items {
        let status = p.status.as_ref().expect("status");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            status
                .pod_ip
                .as_deref()
                .is_some_and(|ip| ip.starts_with("10.64."))
        );
        let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert!(matches!(node, Some("node-0" | "node-1")), "{node:?}");
    }

    // Stopping a node's heartbeats through the API is refused for unknown nodes.
    let sim = env.simulator().expect("simulator");
    assert!(sim.set_heartbeats("node-9", false).is_err());
    sim.set_heartbeats("node-0", false).expect("known node");
    env.stop().await;
}

/// Whether `user` (in `groups`) may `verb` `resource` (optionally
/// `group/resource`) in `ns`, asked of the server by SubjectAccessReview.
async fn allowed(
    env: &TestEnv,
    user: &str,
    groups: &[&str],
    verb: &str,
    group: &str,
    resource: &str,
    ns: &str,
) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (resource, sub) = resource.split_once('/').unwrap_or((resource, ""));
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {"user": user, "groups": groups, "resourceAttributes": {
            "verb": verb, "group": group, "resource": resource,
            "subresource": sub, "namespace": ns}},
    }))
    .expect("review");
    let api: Api<SubjectAccessReview> = Api::all(env.client());
    let answer = api
        .create(&PostParams::default(), &review)
        .await
        .expect("create review");
    answer.status.expect("status").allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_components_run_under_their_own_least_privilege_identities() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kubeforge_apiserver::rbac_components::{
        self, CONTROLLER_MANAGER_USER, NODE_SIMULATOR_USER, SCHEDULER_USER,
    };
    let env = TestEnv::builder()
        .rbac(true)
        .controllers()
        .scheduler()
        .nodes(1)
        .node_delays(Delays::zero())
        .start()
        .await
        .expect("start");

    // Every account the controllers write as exists, with its role bound.
    let declared: Vec<&str> = rbac_components::controller_accounts().collect();
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client(), "kube-system");
    for account in kubeforge_controllers::clients::accounts::ALL {
        assert!(declared.contains(&account), "{account} has no role");
        accounts
            .get(account)
            .await
            .expect("controller ServiceAccount");
    }

    // Least privilege, as kube's bootstrap roles give it.
    let sa = |a: &str| format!("system:serviceaccount:kube-system:{a}");
    let sa_groups = [
        "system:serviceaccounts",
        "system:serviceaccounts:kube-system",
        "system:authenticated",
    ];
    let rs = sa("replicaset-controller");
    assert!(allowed(&env, &rs, &sa_groups, "create", "", "pods", "default").await);
    assert!(!allowed(&env, &rs, &sa_groups, "get", "", "secrets", "default").await);
    assert!(
        !allowed(
            &env,
            &rs,
            &sa_groups,
            "create",
            "apps",
            "deployments",
            "default"
        )
        .await
    );
    let ttl = sa("ttl-after-finished-controller");
    assert!(allowed(&env, &ttl, &sa_groups, "delete", "batch", "jobs", "default").await);
    assert!(!allowed(&env, &ttl, &sa_groups, "delete", "", "pods", "default").await);
    let auth = ["system:authenticated"];
    let kcm = CONTROLLER_MANAGER_USER;
    assert!(allowed(&env, kcm, &auth, "watch", "apps", "deployments", "").await);
    assert!(!allowed(&env, kcm, &auth, "create", "", "pods", "default").await);
    let sched = SCHEDULER_USER;
    assert!(allowed(&env, sched, &auth, "create", "", "pods/binding", "default").await);
    assert!(!allowed(&env, sched, &auth, "delete", "", "nodes", "").await);
    let node = NODE_SIMULATOR_USER;
    assert!(allowed(&env, node, &auth, "patch", "", "nodes/status", "").await);
    assert!(!allowed(&env, node, &auth, "delete", "", "namespaces", "").await);

    // And under those identities the cluster works: a Deployment rolls out
    // (deployment and replicaset controllers, scheduler, node), its
    // Service gets endpoints, a finished Job is deleted after its TTL,
    // deleting the Deployment collects its pods and a deleted namespace is
    // emptied and finalized.
    let deployments: Api<Deployment> = Api::default_namespaced(env.client());
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::default_namespaced(env.client());
    let svc = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service");
    roll_out_web(&deployments, 2).await;
    let slices: Api<EndpointSlice> = Api::default_namespaced(env.client());
    eventually("2 ready endpoints", WAIT, || async {
        slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
            .await
            .map(|l| l.items.iter().map(|s| s.endpoints.len()).sum::<usize>() == 2)
            .unwrap_or(false)
    })
    .await;

    let jobs: Api<Job> = Api::default_namespaced(env.client());
    let job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "once"},
        "spec": {
            "ttlSecondsAfterFinished": 0,
            "template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}},
        },
    }))
    .expect("job");
    jobs.create(&PostParams::default(), &job)
        .await
        .expect("create job");
    eventually("the finished Job deleted", WAIT, || async {
        matches!(jobs.get_opt("once").await, Ok(None))
    })
    .await;

    let pods: Api<Pod> = Api::default_namespaced(env.client());
    // The writes really are the controller's own: without its binding the
    // ReplicaSet controller cannot create pods, and says so.
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client());
    bindings
        .delete(
            "system:controller:replicaset-controller",
            &Default::default(),
        )
        .await
        .expect("delete binding");
    eventually("the binding's removal in force", WAIT, || async {
        !allowed(&env, &rs, &sa_groups, "create", "", "pods", "default").await
    })
    .await;
    let scale = kube::api::Patch::Merge(serde_json::json!({"spec": {"replicas": 3}}));
    deployments
        .patch("web", &Default::default(), &scale)
        .await
        .expect("scale");
    // Its status writes are refused too, so it says so in an Event (written
    // through the shared client, which keeps its events permission).
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(env.client());
    let denied = format!("User \"{rs}\" cannot create resource \"pods\"");
    eventually(
        "a FailedCreate event naming the missing permission",
        WAIT,
        || async {
            events.list(&ListParams::default()).await.is_ok_and(|l| {
                l.items.iter().any(|e| {
                    e.reason.as_deref() == Some("FailedCreate")
                        && e.note.as_deref().is_some_and(|n| n.contains(&denied))
                })
            })
        },
    )
    .await;
    assert_eq!(
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .expect("pods")
            .items
            .len(),
        2
    );

    deployments
        .delete("web", &Default::default())
        .await
        .expect("delete deployment");
    eventually("the Deployment's pods collected", WAIT, || async {
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;

    let namespaces: Api<Namespace> = Api::all(env.client());
    let ns = serde_json::from_value(serde_json::json!({"metadata": {"name": "scratch"}}))
        .expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(env.client(), "scratch");
    let cm =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "c"}})).expect("configmap");
    cms.create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
    namespaces
        .delete("scratch", &Default::default())
        .await
        .expect("delete namespace");
    eventually("the namespace finalized", WAIT, || async {
        matches!(namespaces.get_opt("scratch").await, Ok(None))
    })
    .await;
    env.stop().await;
}
