#![allow(clippy::unwrap_used)]
//! Pods that really run: a private containerd (Debian's, with runc and the
//! reference CNI plugins), images built from this machine's busybox into a
//! local docker-registry, and the node agent driving them over CRI for an
//! in-process API server. Needs root and the packages scripts/test-all.sh
//! installs; without them the test fails saying what is missing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_apiserver::{KubeletClient, rbac_components};
use kubeforge_node::AgentConfig;
use kubeforge_node::cri::api;
use kubeforge_node::footprint::{self, DirLock};
use kubeforge_node::local::Runtimes;
use kubeforge_testenv::{TestEnv, eventually_some};
use serde_json::json;

/// This test's runtimes, in a data directory of its own: its names on the
/// machine carry its own cluster id, so another cluster running here (a
/// user's `kubeforge up`, another test) neither fails it nor is touched.
struct Machine {
    dir: PathBuf,
    runtimes: Option<Runtimes>,
    lock: Option<DirLock>,
}

/// A test that panics midway still removes what it started: the record
/// of the runtimes is cleaned as `kubeforge clean` would.
impl Drop for Machine {
    fn drop(&mut self) {
        if self.runtimes.take().is_some() {
            drop(self.lock.take());
            match footprint::clean(&self.dir) {
                Ok(r) => eprintln!("cleaned after a failed test: {:?}", r.removed),
                Err(e) => eprintln!("cannot clean {}: {e}", self.dir.display()),
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn machine(tag: &str) -> Machine {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    // Short: the containerd socket path must fit a sockaddr_un.
    let dir = PathBuf::from(format!("/tmp/kf-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lock = DirLock::acquire(&dir).unwrap();
    let runtimes = Runtimes::start(&lock, 1, |_| "box-1".to_string())
        .await
        .expect("the registry and containerd start (needs root, containerd, runc, containernetworking-plugins, docker-registry)");
    Machine {
        dir: lock.dir().to_path_buf(),
        runtimes: Some(runtimes),
        lock: Some(lock),
    }
}

impl Machine {
    fn runtimes(&self) -> &Runtimes {
        self.runtimes.as_ref().unwrap()
    }

    /// Stop in order, then check that nothing of this cluster is left.
    async fn stop(mut self) {
        let runtimes = self.runtimes.take().unwrap();
        let id = runtimes.id().clone();
        let cgroup = runtimes.cgroup_parent().to_string();
        runtimes.stop().await;
        assert!(
            kubeforge_node::host::mounts_under(&self.dir).is_empty(),
            "nothing stays mounted under {}",
            self.dir.display()
        );
        let socket = self.dir.display().to_string();
        assert!(
            kubeforge_node::host::processes_mentioning(&format!("{socket}/")).is_empty(),
            "no process of this cluster is left"
        );
        let links: Vec<String> = footprint::links()
            .into_iter()
            .filter(|l| l.starts_with(&id.link_prefix()))
            .collect();
        assert!(links.is_empty(), "links left: {links:?}");
        let tables: Vec<(String, String)> = footprint::tables()
            .into_iter()
            .filter(|(_, t)| t.starts_with(&id.table_prefix()))
            .collect();
        assert!(tables.is_empty(), "tables left: {tables:?}");
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let left = hierarchy.path().join(cgroup.trim_start_matches('/'));
            assert!(!left.exists(), "{} is removed", left.display());
        }
        assert!(
            footprint::Record::read(&self.dir).is_none(),
            "the record is gone with what it named"
        );
    }
}

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec}))
    .unwrap()
}

async fn wait_pod(api: &Api<Pod>, name: &str, what: &str, check: impl Fn(&Pod) -> bool) -> Pod {
    eventually_some(what, Duration::from_secs(60), || async {
        api.get(name).await.ok().filter(|p| check(p))
    })
    .await
}

fn container_state(p: &Pod) -> serde_json::Value {
    serde_json::to_value(
        &p.status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0],
    )
    .unwrap()
}

/// A CA and a certificate it signed for `cn` in `org`: (CA PEM, cert PEM, key PEM).
fn ca_and_client(cn: &str, org: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "test-ca");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.distinguished_name.push(DnType::OrganizationName, org);
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let cert = p.signed_by(&key, &issuer).unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_in_containerd_and_leave_nothing_behind() {
    let m = machine("pods").await;
    let env = TestEnv::builder()
        .controllers()
        .rbac(true)
        .loopback(true)
        .start()
        .await
        .unwrap();
    let client = env.client();
    // The API server reaches the agent with its kubelet client certificate.
    let (ca, cert, key) = ca_and_client(
        rbac_components::KUBELET_CLIENT_USER,
        "kubeadm:cluster-admins",
    );
    env.server()
        .set_kubelet_client(Some(KubeletClient::new(&cert, &key).unwrap()));
    let mut cfg = AgentConfig::new(
        "box-1",
        m.runtimes().runtime(0).socket(),
        m.dir.join("agent"),
    );
    cfg.cgroup_parent = m.runtimes().cgroup_parent().to_string();
    cfg.labels = BTreeMap::from([(
        "node.kubeforge.io/containers".to_string(),
        "true".to_string(),
    )]);
    cfg.client_ca_pem = Some(ca);
    // The agent runs as its node, with system:node's permissions only.
    let node_client = env.server().client_as(rbac_components::node_user("box-1"));
    let agent = kubeforge_node::start(node_client, cfg)
        .await
        .expect("the agent starts");

    // The Node is registered with what the runtime says.
    let nodes: Api<Node> = Api::all(client.clone());
    let node = eventually_some("the node is Ready", Duration::from_secs(30), || async {
        nodes.get("box-1").await.ok().filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
    let info = node.status.as_ref().unwrap().node_info.as_ref().unwrap();
    assert!(
        info.container_runtime_version
            .starts_with("containerd://1."),
        "{info:?}"
    );

    // A pod runs: its command sees $(VAR) expanded and downward-API env.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let spec = json!({"nodeName": "box-1", "containers": [{"name": "main", "image": "busybox:1.36",
        "command": ["sh", "-c", "echo hello from $(POD_NAME) at $MY_IP; sleep 3600"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]});
    pods.create(&PostParams::default(), &pod("hello", spec))
        .await
        .unwrap();
    let running = wait_pod(&pods, "hello", "hello is Running", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    let status = running.status.as_ref().unwrap();
    let ip = status.pod_ip.clone().expect("a pod IP");
    let range = m.runtimes().network().subnet(0);
    assert!(
        ip.starts_with(range.trim_end_matches("0/24")),
        "{ip} in {range}"
    );
    let c = container_state(&running);
    assert!(
        c["containerID"]
            .as_str()
            .unwrap()
            .starts_with("containerd://"),
        "{c}"
    );
    assert_eq!(c["ready"], true);
    assert!(c["imageID"].as_str().unwrap().contains("sha256:"), "{c}");
    let conds: Vec<_> = status
        .conditions
        .iter()
        .flatten()
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    for want in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert!(
            conds.contains(&(want.to_string(), "True".to_string())),
            "{want} in {conds:?}"
        );
    }
    // What the process wrote is in its CRI log.
    let log_dir = m.dir.join("agent/logs");
    let log = eventually_some("the log has the greeting", Duration::from_secs(20), || {
        let log_dir = log_dir.clone();
        async move {
            let dir = std::fs::read_dir(&log_dir).ok()?.flatten().next()?.path();
            let text = std::fs::read_to_string(dir.join("main/0.log")).ok()?;
            text.contains("hello from hello").then_some(text)
        }
    })
    .await;
    assert!(log.contains(&format!("hello from hello at {ip}")), "{log}");
    // ... and reaches users through the API server: kube-rs ...
    let text = pods
        .logs("hello", &Default::default())
        .await
        .expect("pods/log through the node");
    assert_eq!(text, format!("hello from hello at {ip}\n"));
    // ... and kubectl.
    let kubeconfig = env.kubeconfig_path().unwrap().to_path_buf();
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["logs", "hello", "--timestamps"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("Z hello from hello at {ip}")),
        "{stdout}"
    );

    // A readiness probe holds the pod unready until it passes; a failing
    // liveness probe restarts the container.
    let spec = json!({"nodeName": "box-1", "terminationGracePeriodSeconds": 2, "containers": [{"name": "app", "image": "busybox:1.36",
        "command": ["sh", "-c", "sleep 2; touch /tmp/ready; sleep 3600"],
        "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1}}]});
    pods.create(&PostParams::default(), &pod("ready-later", spec))
        .await
        .unwrap();
    let unready = wait_pod(&pods, "ready-later", "ready-later runs", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    assert_eq!(
        container_state(&unready)["ready"],
        false,
        "unready until the probe passes"
    );
    wait_pod(&pods, "ready-later", "ready-later turns ready", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c[0].ready)
    })
    .await;
    let spec = json!({"nodeName": "box-1", "terminationGracePeriodSeconds": 2, "containers": [{"name": "app", "image": "busybox:1.36",
        "command": ["sleep", "3600"],
        "livenessProbe": {"tcpSocket": {"port": 9}, "periodSeconds": 1, "failureThreshold": 2}}]});
    pods.create(&PostParams::default(), &pod("unlive", spec))
        .await
        .unwrap();
    let restarted = wait_pod(&pods, "unlive", "unlive is restarted", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c[0].restart_count >= 1)
    })
    .await;
    let events = kubeforge_testenv::events_about(&client, "default", "unlive").await;
    let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.clone()).collect();
    assert!(
        reasons.contains(&"Unhealthy".to_string()) && reasons.contains(&"Killing".to_string()),
        "{reasons:?}"
    );
    assert!(
        events.iter().any(|e| e.message.as_deref()
            == Some("Container app failed liveness probe, will be restarted")),
        "{events:?}"
    );
    let _ = restarted;

    // A crashing container restarts with a back-off.
    let spec = json!({"nodeName": "box-1", "containers": [{"name": "crash", "image": "busybox:1.36",
        "command": ["sh", "-c", "echo dying; exit 3"]}]});
    pods.create(&PostParams::default(), &pod("crash", spec))
        .await
        .unwrap();
    let looping = wait_pod(&pods, "crash", "crash is in CrashLoopBackOff", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs[0]
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    == Some("CrashLoopBackOff")
            })
    })
    .await;
    let c = container_state(&looping);
    // The crashed run's output is its log, and --previous's once it ran twice.
    let text = pods.logs("crash", &Default::default()).await.unwrap();
    assert_eq!(text, "dying\n");
    assert!(c["restartCount"].as_i64().unwrap() >= 1, "{c}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .starts_with("back-off 10s restarting failed container=crash pod=crash_default("),
        "{c}"
    );

    // An image nobody built: ErrImagePull, then ImagePullBackOff, with the hint.
    let spec = json!({"nodeName": "box-1", "containers": [{"name": "c", "image": "nosuch:9"}]});
    pods.create(&PostParams::default(), &pod("unbuilt", spec))
        .await
        .unwrap();
    let failed = wait_pod(&pods, "unbuilt", "unbuilt waits on its image", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs[0]
                    .state
                    .as_ref()
                    .and_then(|s| s.waiting.as_ref())
                    .and_then(|w| w.reason.as_deref())
                    == Some("ImagePullBackOff")
            })
    })
    .await;
    let c = container_state(&failed);
    assert!(
        c["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("kubeforge image build nosuch:9"),
        "{c}"
    );

    // Deleting pods stops and removes their sandboxes.
    for name in ["hello", "crash", "unbuilt", "ready-later", "unlive"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let cri = m.runtimes().runtime(0).cri();
    eventually_some("every sandbox is gone", Duration::from_secs(60), || {
        let cri = cri.clone();
        let pods = pods.clone();
        let log_dir = log_dir.clone();
        async move {
            let mut rt = cri.runtime.clone();
            let left = rt
                .list_pod_sandbox(api::ListPodSandboxRequest { filter: None })
                .await
                .ok()?
                .into_inner()
                .items;
            let objects = pods.list(&Default::default()).await.ok()?.items;
            // Their logs go with them.
            let logs = std::fs::read_dir(&log_dir).ok()?.count();
            (left.is_empty() && objects.is_empty() && logs == 0).then_some(())
        }
    })
    .await;
    agent.stop_and_remove_pods().await;
    let node_cgroup = format!("{}/box-1", m.runtimes().cgroup_parent());
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let left = hierarchy.path().join(node_cgroup.trim_start_matches('/'));
        assert!(!left.exists(), "{} is removed", left.display());
    }
    env.stop().await;
    m.stop().await;
}
