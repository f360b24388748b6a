//! A whole cluster as a user drives it: `kubeforge up` (workload
//! controllers, scheduler, simulated nodes) and the real kubectl —
//! Deployments rolling out, scaling and undoing, EndpointSlices following
//! readiness, Jobs completing, DaemonSets skipping tainted nodes,
//! StatefulSets in order, nodes going NotReady when their heartbeats stop,
//! graceful deletion, a restart resuming, the Memcached sample, node
//! config errors, and kubectl-created pods placed by the scheduler's rules
//! (resource fit, node selector, GPUs and taints, anti-affinity, priority
//! preemption) with `kubectl describe` showing FailedScheduling.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Cluster, TempDir, default_kubectl};

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// One live (not terminating) pod as `kubectl get pods -o jsonpath` shows it.
#[derive(Debug, Clone)]
struct PodRow {
    name: String,
    phase: String,
    ip: String,
    node: String,
    image: String,
    ready: String,
}

const POD_ROWS: &str = "jsonpath={range .items[*]}{.metadata.name}|{.status.phase}|{.status.podIP}|{.spec.nodeName}|{.spec.containers[0].image}|{.status.conditions[?(@.type==\"Ready\")].status}|{.metadata.deletionTimestamp}{\"\\n\"}{end}";

/// Live pods matching a label selector.
fn pods(c: &Cluster, k: &Path, selector: &str) -> Vec<PodRow> {
    let out = c.ok(k, &["get", "pods", "-l", selector, "-o", POD_ROWS]);
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 7 && f[6].is_empty()).then(|| PodRow {
                name: f[0].into(),
                phase: f[1].into(),
                ip: f[2].into(),
                node: f[3].into(),
                image: f[4].into(),
                ready: f[5].into(),
            })
        })
        .collect()
}

fn running(rows: &[PodRow]) -> usize {
    rows.iter().filter(|p| p.phase == "Running").count()
}

#[test]
fn deployment_rolls_out_scales_undoes_and_endpoints_follow_readiness() {
    let k = default_kubectl();
    let c = Cluster::start(&["--memory", "--pod-exit-delay", "200ms"]);
    c.ok(
        &k,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    let out = c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");

    // kubectl get pods -o wide: 3 Running pods with pod IPs, over the nodes.
    let wide = c.ok(&k, &["get", "pods", "-o", "wide"]);
    let lines: Vec<&str> = wide
        .lines()
        .skip(1)
        .filter(|l| l.contains("Running"))
        .collect();
    assert_eq!(lines.len(), 3, "{wide}");
    let rows = pods(&c, &k, "app=web");
    assert_eq!(running(&rows), 3, "{rows:?}");
    let ips: BTreeSet<&str> = rows.iter().map(|p| p.ip.as_str()).collect();
    assert_eq!(ips.len(), 3, "distinct IPs: {rows:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("10.64.")), "{rows:?}");
    for p in &rows {
        assert!(wide.contains(&p.ip), "{} in {wide}", p.ip);
    }
    let nodes: BTreeSet<&str> = rows.iter().map(|p| p.node.as_str()).collect();
    assert!(nodes.len() >= 2, "pods spread over nodes: {rows:?}");

    // A new image rolls out without ever dropping below 3 available
    // (maxUnavailable 25% of 3 rounds down to 0).
    c.ok(&k, &["set", "image", "deploy/web", "nginx=nginx:1.27"]);
    let mut min_available = i64::MAX;
    wait_for("the nginx:1.27 rollout", Duration::from_secs(60), || {
        let s = c.ok(
            &k,
            &["get", "deploy", "web", "-o", "jsonpath={.status.availableReplicas}|{.status.updatedReplicas}|{.status.replicas}|{.status.observedGeneration}|{.metadata.generation}"],
        );
        let f: Vec<i64> = s.split('|').map(|x| x.parse().unwrap_or(0)).collect();
        min_available = min_available.min(f[0]);
        f == [3, 3, 3, f[4], f[4]]
    });
    assert!(
        min_available >= 3,
        "available dropped to {min_available} during the rollout"
    );
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    wait_for("3 pods on nginx:1.27", Duration::from_secs(30), || {
        let rows = pods(&c, &k, "app=web");
        running(&rows) == 3 && rows.len() == 3 && rows.iter().all(|p| p.image == "nginx:1.27")
    });
    let history = c.ok(&k, &["rollout", "history", "deploy/web"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    // rollout undo goes back to nginx.
    c.ok(&k, &["rollout", "undo", "deploy/web"]);
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    wait_for("3 pods back on nginx", Duration::from_secs(30), || {
        let rows = pods(&c, &k, "app=web");
        running(&rows) == 3 && rows.len() == 3 && rows.iter().all(|p| p.image == "nginx")
    });

    // scale.
    c.ok(&k, &["scale", "deploy/web", "--replicas=5"]);
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    wait_for("5 running pods", Duration::from_secs(30), || {
        running(&pods(&c, &k, "app=web")) == 5
    });

    // EndpointSlices follow readiness.
    c.ok(&k, &["expose", "deployment", "web", "--port=80"]);
    let endpoints = || -> BTreeMap<String, String> {
        let out = c.ok(
            &k,
            &["get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "jsonpath={range .items[*].endpoints[*]}{.addresses[0]}={.conditions.ready}{\"\\n\"}{end}"],
        );
        out.lines()
            .filter_map(|l| {
                l.split_once('=')
                    .map(|(a, b)| (a.to_string(), b.to_string()))
            })
            .collect()
    };
    wait_for("5 ready endpoints", Duration::from_secs(30), || {
        let e = endpoints();
        e.len() == 5 && e.values().all(|r| r == "true")
    });
    let rows = pods(&c, &k, "app=web");
    let victim = rows[0].clone();
    c.ok(
        &k,
        &["annotate", "pod", &victim.name, "kubeforge.dev/ready=false"],
    );
    wait_for(
        "the unready pod's endpoint to turn not ready",
        Duration::from_secs(30),
        || {
            let e = endpoints();
            e.get(&victim.ip).map(String::as_str) == Some("false")
                && e.iter().filter(|(_, r)| *r == "true").count() == 4
        },
    );
    let row = pods(&c, &k, "app=web")
        .into_iter()
        .find(|p| p.name == victim.name);
    assert_eq!(row.map(|r| r.ready), Some("False".to_string()));
    c.ok(
        &k,
        &["annotate", "pod", &victim.name, "kubeforge.dev/ready-"],
    );
    wait_for(
        "the pod's endpoint ready again",
        Duration::from_secs(30),
        || endpoints().get(&victim.ip).map(String::as_str) == Some("true"),
    );
    c.stop();
}

const NODE_CONFIG: &str = "\
zones: [zone-a, zone-b]
nodes:
  - name: worker
    count: 2
    capacity: {cpu: \"8\", memory: 32Gi, pods: \"110\"}
  - name: gpu-0
    capacity: {cpu: \"16\", memory: 64Gi, pods: \"110\", nvidia.com/gpu: \"4\"}
    labels: {accelerator: a100}
    taints:
      - {key: nvidia.com/gpu, value: present, effect: NoSchedule}
";

const JOB: &str = "\
apiVersion: batch/v1
kind: Job
metadata: {name: count}
spec:
  completions: 5
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers: [{name: count, image: busybox}]
";

const DAEMONSET: &str = "\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: busybox}]
";

/// A ReplicationController as an old manifest writes it: no selector, the
/// template's labels stand in.
const REPLICATION_CONTROLLER: &str = "apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
spec:
  replicas: 2
  template:
    metadata:
      labels:
        app: legacy
    spec:
      containers:
      - name: c
        image: nginx
";

#[test]
fn kubectl_drain_waits_for_the_disruption_budget() {
    let k = default_kubectl();
    let c = Cluster::start(&["--memory", "--pod-exit-delay", "200ms"]);
    c.ok(
        &k,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    c.ok(
        &k,
        &[
            "create",
            "poddisruptionbudget",
            "web",
            "--selector=app=web",
            "--min-available=3",
        ],
    );
    let budget = || {
        c.ok(
            &k,
            &["get", "pdb", "web", "-o", "jsonpath={.status.currentHealthy}/{.status.disruptionsAllowed}/{.status.observedGeneration}"],
        )
    };
    wait_for(
        "the budget to count 3 healthy pods",
        Duration::from_secs(30),
        || budget().trim() == "3/0/1",
    );
    let table = c.ok(&k, &["get", "pdb", "web"]);
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("MIN AVAILABLE") && header.contains("ALLOWED DISRUPTIONS"),
        "{table}"
    );
    let row: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..4], ["web", "3", "N/A", "0"], "{table}");

    // The budget allows nothing: drain cordons the node, retries the 429s
    // and gives up at its timeout with every pod still running.
    let node = pods(&c, &k, "app=web")[0].node.clone();
    let err = c.fails(
        &k,
        &["drain", &node, "--ignore-daemonsets", "--timeout=12s"],
    );
    assert!(
        err.contains("Cannot evict pod as it would violate the pod's disruption budget.")
            && err.contains("will retry after 5s"),
        "drain stderr: {err}"
    );
    assert_eq!(
        c.ok(
            &k,
            &["get", "node", &node, "-o", "jsonpath={.spec.unschedulable}"]
        )
        .trim(),
        "true"
    );
    assert_eq!(running(&pods(&c, &k, "app=web")), 3);

    // With room for one disruption the drain goes through, one pod at a
    // time, and the Deployment comes back elsewhere.
    c.ok(
        &k,
        &[
            "patch",
            "pdb",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":2}}"#,
        ],
    );
    let out = c.ok(
        &k,
        &["drain", &node, "--ignore-daemonsets", "--timeout=120s"],
    );
    assert!(
        out.contains(&format!("node/{node} drained")),
        "drain: {out}"
    );
    wait_for(
        "3 running pods off the drained node",
        Duration::from_secs(60),
        || {
            let rows = pods(&c, &k, "app=web");
            running(&rows) == 3 && rows.iter().all(|p| p.node != node)
        },
    );
    c.ok(&k, &["uncordon", &node]);

    // A ReplicationController: defaults, scale, columns.
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(REPLICATION_CONTROLLER));
    wait_for("2 legacy pods running", Duration::from_secs(60), || {
        running(&pods(&c, &k, "app=legacy")) == 2
    });
    c.ok(&k, &["scale", "rc/legacy", "--replicas=3"]);
    wait_for("3 legacy pods running", Duration::from_secs(60), || {
        running(&pods(&c, &k, "app=legacy")) == 3
    });
    wait_for("the RC to report 3 ready", Duration::from_secs(30), || {
        let table = c.ok(&k, &["get", "rc", "legacy"]);
        let row: Vec<String> = table
            .lines()
            .nth(1)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        row.len() >= 4 && row[..4] == ["legacy", "3", "3", "3"]
    });
    let wide = c.ok(&k, &["get", "rc", "legacy", "-o", "wide"]);
    assert!(
        wide.contains("SELECTOR") && wide.contains("app=legacy"),
        "{wide}"
    );
    c.stop();
}

#[test]
fn node_config_job_and_daemonset_on_untainted_nodes() {
    let k = default_kubectl();
    let dir = TempDir::new("nodecfg");
    let cfg = dir.0.join("nodes.yaml");
    std::fs::write(&cfg, NODE_CONFIG).expect("write config");
    let cfg_arg = cfg.display().to_string();
    let c = Cluster::start_in(
        dir,
        &[
            "--memory",
            "--node-config",
            &cfg_arg,
            "--pod-run-time",
            "300ms",
        ],
    );

    // The declared nodes, with the GPU node's extended resource, zone and taint.
    let nodes = c.ok(&k, &["get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}|{.metadata.labels.topology\\.kubernetes\\.io/zone}|{.status.allocatable.nvidia\\.com/gpu}|{.spec.taints[*].key}|{.spec.podCIDR}{\"\\n\"}{end}"]);
    let nodes: Vec<&str> = nodes.lines().collect();
    assert_eq!(
        nodes,
        [
            "gpu-0|zone-a|4|nvidia.com/gpu|10.64.2.0/24",
            "worker-0|zone-a|||10.64.0.0/24",
            "worker-1|zone-b|||10.64.1.0/24"
        ]
    );

    // A Job with completions 5 / parallelism 2 completes, never running more than 2.
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(JOB));
    let mut max_active = 0;
    wait_for("the Job to complete", Duration::from_secs(60), || {
        let s = c.ok(&k, &["get", "job", "count", "-o", "jsonpath={.status.active}|{.status.succeeded}|{.status.conditions[?(@.type==\"Complete\")].status}"]);
        let f: Vec<&str> = s.split('|').collect();
        max_active = max_active.max(f[0].parse::<i32>().unwrap_or(0));
        f.get(2) == Some(&"True")
    });
    let succeeded = c.ok(
        &k,
        &["get", "job", "count", "-o", "jsonpath={.status.succeeded}"],
    );
    assert_eq!(succeeded, "5");
    assert!(max_active <= 2, "{max_active} pods active at once");
    let phases = c.ok(
        &k,
        &[
            "get",
            "pods",
            "-l",
            "job-name=count",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ],
    );
    let succeeded_pods = phases
        .split_whitespace()
        .filter(|p| *p == "Succeeded")
        .count();
    assert!(succeeded_pods >= 5, "{phases}");
    assert!(
        !c.ok(&k, &["get", "pods", "-l", "job-name=count"])
            .contains("gpu-0"),
        "Job pods avoid the tainted node"
    );

    // A DaemonSet lands one pod per node, except the tainted one.
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(DAEMONSET));
    wait_for("2 running agents", Duration::from_secs(30), || {
        running(&pods(&c, &k, "app=agent")) == 2
    });
    c.ok(&k, &["rollout", "status", "ds/agent", "--timeout=30s"]);
    let nodes: BTreeSet<String> = pods(&c, &k, "app=agent")
        .into_iter()
        .map(|p| p.node)
        .collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["worker-0".to_string(), "worker-1".to_string()])
    );
    c.stop();
}

/// Pods for the scheduler's rules, applied with kubectl in one document.
const SCHEDULING_PODS: &str = "\
apiVersion: v1
kind: Pod
metadata: {name: too-big}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: \"100\"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: in-zone-b}
spec:
  nodeSelector: {topology.kubernetes.io/zone: zone-b}
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: gpu-job}
spec:
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers: [{name: c, image: cuda, resources: {limits: {nvidia.com/gpu: \"2\"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: no-toleration}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: \"7\"}}}]
";

/// Three pods that must not share a node: two fit on the untainted
/// workers, the third cannot.
fn anti_pod(name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, labels: {{app: anti}}}}
spec:
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - topologyKey: kubernetes.io/hostname
          labelSelector: {{matchLabels: {{app: anti}}}}
  containers: [{{name: c, image: busybox}}]
"
    )
}

const PREEMPTION: &str = "\
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 1000
---
apiVersion: v1
kind: Pod
metadata: {name: urgent}
spec:
  priorityClassName: urgent
  nodeSelector: {topology.kubernetes.io/zone: zone-b}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: \"4\"}}}]
";

/// The status of `pod` as `node|phase`.
fn placed(c: &Cluster, k: &Path, pod: &str) -> String {
    c.ok(
        k,
        &[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.spec.nodeName}|{.status.phase}",
        ],
    )
}

#[test]
fn kubectl_pods_are_placed_by_the_scheduling_rules() {
    let k = default_kubectl();
    let dir = TempDir::new("scheduling");
    let cfg = dir.0.join("nodes.yaml");
    std::fs::write(&cfg, NODE_CONFIG).expect("write config");
    let cfg_arg = cfg.display().to_string();
    let c = Cluster::start_in(dir, &["--memory", "--node-config", &cfg_arg]);
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(SCHEDULING_PODS));

    // Node affinity by selector, the GPU node for the pod that tolerates
    // its taint and asks for GPUs, and a worker for the pod that does not.
    wait_for("the placeable pods to run", Duration::from_secs(30), || {
        ["in-zone-b", "gpu-job", "no-toleration"]
            .iter()
            .all(|p| placed(&c, &k, p).ends_with("|Running"))
    });
    assert_eq!(placed(&c, &k, "in-zone-b"), "worker-1|Running");
    assert_eq!(placed(&c, &k, "gpu-job"), "gpu-0|Running");
    let worker = placed(&c, &k, "no-toleration");
    assert!(worker.starts_with("worker-"), "{worker}");

    // Resource fit: no node has 100 CPUs; describe shows why.
    assert_eq!(placed(&c, &k, "too-big"), "|Pending");
    wait_for("a FailedScheduling event", Duration::from_secs(30), || {
        let d = c.ok(&k, &["describe", "pod", "too-big"]);
        d.contains("FailedScheduling") && d.contains("Insufficient cpu")
    });
    let d = c.ok(&k, &["describe", "pod", "too-big"]);
    assert!(d.contains("0/3 nodes are available"), "{d}");

    // Required anti-affinity by hostname: two pods on the two workers, the
    // third (the GPU node is tainted) stays Pending and says why (the
    // running pods' own term rejects it first: "didn't satisfy existing
    // pods anti-affinity rules", as kube-scheduler words it).
    let anti: String = ["anti-1", "anti-2", "anti-3"]
        .iter()
        .map(|n| anti_pod(n))
        .collect::<Vec<_>>()
        .join("---\n");
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&anti));
    wait_for(
        "two anti-affinity pods to run",
        Duration::from_secs(30),
        || running(&pods(&c, &k, "app=anti")) == 2,
    );
    let nodes: BTreeSet<String> = pods(&c, &k, "app=anti")
        .into_iter()
        .filter(|p| p.phase == "Running")
        .map(|p| p.node)
        .collect();
    assert_eq!(
        nodes,
        BTreeSet::from(["worker-0".to_string(), "worker-1".to_string()])
    );
    wait_for(
        "the third pod's FailedScheduling",
        Duration::from_secs(30),
        || {
            let pending: Vec<PodRow> = pods(&c, &k, "app=anti")
                .into_iter()
                .filter(|p| p.phase == "Pending")
                .collect();
            pending.len() == 1
                && c.ok(&k, &["describe", "pod", &pending[0].name])
                    .contains("anti-affinity rules")
        },
    );

    // Priority preemption: zone b's worker has 8 CPUs, 7 of them taken by
    // priority-0 pods at most; the urgent pod needs 4 and evicts to fit.
    let before = c.ok(
        &k,
        &[
            "get",
            "pods",
            "--field-selector",
            "spec.nodeName=worker-1",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    let filler = "\
apiVersion: v1
kind: Pod
metadata: {name: filler}
spec:
  terminationGracePeriodSeconds: 0
  nodeSelector: {topology.kubernetes.io/zone: zone-b}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: \"5\"}}}]
";
    // Fill worker-1 unless the 7-CPU pod already did.
    if !before.contains("no-toleration") {
        c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(filler));
        wait_for("the filler to run", Duration::from_secs(30), || {
            placed(&c, &k, "filler") == "worker-1|Running"
        });
    }
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(PREEMPTION));
    wait_for(
        "the urgent pod to run on worker-1",
        Duration::from_secs(60),
        || placed(&c, &k, "urgent") == "worker-1|Running",
    );
    let nominated_or_gone = c.kubectl(&k, &["get", "pod", "filler", "no-toleration", "-o", "jsonpath={range .items[*]}{.metadata.name}|{.spec.nodeName}|{.metadata.deletionTimestamp}{\"\\n\"}{end}"]);
    let left = String::from_utf8_lossy(&nominated_or_gone.stdout).to_string();
    assert!(
        !left
            .lines()
            .any(|l| l.contains("|worker-1|") && l.ends_with('|')),
        "the low-priority pod on worker-1 was preempted: {left}"
    );
    let events = c.ok(
        &k,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=Preempted",
            "-o",
            "jsonpath={.items[*].involvedObject.name}",
        ],
    );
    let victim = if before.contains("no-toleration") {
        "no-toleration"
    } else {
        "filler"
    };
    assert!(
        events.split_whitespace().any(|n| n == victim),
        "a Preempted event on {victim}: {events:?}"
    );
    c.stop();
}

const STATEFULSET: &str = "\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 3
  selector: {matchLabels: {app: sts}}
  template:
    metadata: {labels: {app: sts}}
    spec:
      containers: [{name: nginx, image: nginx}]
";

#[test]
fn statefulset_creates_pods_in_order() {
    let k = default_kubectl();
    // A start delay over a second: a pod created only once its predecessor
    // runs has a later creationTimestamp (second resolution).
    let c = Cluster::start(&["--memory", "--pod-start-delay", "1500ms"]);
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(STATEFULSET));
    let mut seen = Vec::new();
    wait_for(
        "web-0, web-1, web-2 Running",
        Duration::from_secs(60),
        || {
            let rows = pods(&c, &k, "app=sts");
            let by_name: BTreeMap<&str, &PodRow> =
                rows.iter().map(|p| (p.name.as_str(), p)).collect();
            // Ordered: web-N exists only once web-(N-1) is Running and Ready.
            for i in 1..3 {
                if by_name.contains_key(format!("web-{i}").as_str()) {
                    let prev = by_name.get(format!("web-{}", i - 1).as_str());
                    assert!(
                        prev.is_some_and(|p| p.phase == "Running" && p.ready == "True"),
                        "web-{i} exists before web-{} is ready: {rows:?}",
                        i - 1
                    );
                }
            }
            let names: Vec<String> = by_name.keys().map(|n| n.to_string()).collect();
            if seen.last() != Some(&names) {
                seen.push(names);
            }
            running(&rows) == 3
        },
    );
    assert_eq!(seen.last().map(Vec::len), Some(3));
    let created = c.ok(&k, &["get", "pods", "-l", "app=sts", "-o", "jsonpath={range .items[*]}{.metadata.name}={.metadata.creationTimestamp}{\"\\n\"}{end}"]);
    let created: BTreeMap<&str, &str> = created.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(
        created["web-0"] < created["web-1"] && created["web-1"] < created["web-2"],
        "created one after another: {created:?}"
    );
    c.stop();
}

const TOLERANT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      terminationGracePeriodSeconds: 1
      tolerations:
        - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
        - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 2}
      containers: [{name: app, image: nginx}]
";

#[test]
fn stopped_heartbeats_make_a_node_not_ready_and_its_pods_move() {
    let k = default_kubectl();
    let c = Cluster::start(&["--memory", "--node-monitor-grace-period", "3s"]);
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(TOLERANT));
    c.ok(&k, &["rollout", "status", "deploy/app", "--timeout=60s"]);
    let before = pods(&c, &k, "app=app");
    let node = before[0].node.clone();
    let node = node.as_str();

    c.ok(
        &k,
        &["annotate", "node", node, "kubeforge.dev/heartbeats=stopped"],
    );
    wait_for(
        "node-1 NotReady with the unreachable taint",
        Duration::from_secs(60),
        || {
            let s = c.ok(&k, &["get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}|{.spec.taints[*].key}"]);
            s.starts_with("Unknown|") && s.contains("node.kubernetes.io/unreachable")
        },
    );
    let status = c.ok(&k, &["get", "nodes"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with(node) && l.contains("NotReady")),
        "{status}"
    );
    // Its pod is evicted (terminating: the node's kubelet is gone) and
    // replaced on another node.
    wait_for("3 running pods off node-1", Duration::from_secs(60), || {
        let rows = pods(&c, &k, "app=app");
        running(&rows) == 3 && rows.iter().all(|p| p.node != node)
    });

    // Heartbeats resume: Ready again, the taint goes.
    c.ok(&k, &["annotate", "node", node, "kubeforge.dev/heartbeats-"]);
    wait_for("node-1 Ready again", Duration::from_secs(60), || {
        let s = c.ok(
            &k,
            &[
                "get",
                "node",
                node,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}|{.spec.taints[*].key}",
            ],
        );
        s.starts_with("True|") && !s.contains("unreachable")
    });
    c.stop();
}

#[test]
fn graceful_deletion_finishes_after_the_grace_period() {
    let k = default_kubectl();
    let c = Cluster::start(&["--memory", "--pod-exit-delay", "grace"]);
    c.ok(&k, &["run", "p", "--image=nginx"]);
    wait_for("p Running", Duration::from_secs(30), || {
        running(&pods(&c, &k, "run=p")) == 1
    });
    let started = Instant::now();
    c.ok(
        &k,
        &["delete", "pod", "p", "--grace-period=3", "--wait=false"],
    );
    let ts = c.ok(
        &k,
        &[
            "get",
            "pod",
            "p",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}|{.metadata.deletionGracePeriodSeconds}",
        ],
    );
    if started.elapsed() < Duration::from_secs(2) {
        assert!(
            ts.ends_with("|3") && ts.len() > 3,
            "terminating during its grace period: {ts}"
        );
    }
    wait_for("p gone", Duration::from_secs(30), || {
        !c.kubectl(&k, &["get", "pod", "p"]).status.success()
    });
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "deleted before its grace period"
    );
    c.stop();
}

#[test]
fn a_second_up_resumes_nodes_and_pods() {
    let k = default_kubectl();
    let dir = TempDir::new("resume");
    let state = dir.0.clone();
    let c = Cluster::start_in(dir, &["--no-fsync"]);
    c.ok(
        &k,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    let before: BTreeSet<(String, String)> = pods(&c, &k, "app=web")
        .into_iter()
        .map(|p| (p.name, p.ip))
        .collect();
    // Ctrl-C: everything shuts down and the process exits cleanly.
    let mut c = c;
    let int = Command::new("kill")
        .arg("-INT")
        .arg(c.child.id().to_string())
        .status();
    assert!(int.is_ok_and(|s| s.success()));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = c.child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "kubeforge did not stop on Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    let dir = TempDir(std::mem::replace(
        &mut c.dir.0,
        std::env::temp_dir().join("kubeforge-test-moved"),
    ));
    drop(c);
    assert_eq!(dir.0, state);

    let c = Cluster::start_in(dir, &["--no-fsync"]);
    let nodes = c.ok(&k, &["get", "nodes", "-o", "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}"]);
    assert_eq!(
        nodes.lines().collect::<Vec<_>>(),
        ["node-0=True", "node-1=True", "node-2=True"]
    );
    let after: BTreeSet<(String, String)> = pods(&c, &k, "app=web")
        .into_iter()
        .map(|p| (p.name, p.ip))
        .collect();
    assert_eq!(before, after, "the same pods keep their IPs");
    // New pods get IPs that do not clash with the resumed ones.
    c.ok(&k, &["scale", "deploy/web", "--replicas=9"]);
    c.ok(&k, &["rollout", "status", "deploy/web", "--timeout=60s"]);
    wait_for("9 running pods", Duration::from_secs(30), || {
        running(&pods(&c, &k, "app=web")) == 9
    });
    let ips: BTreeSet<String> = pods(&c, &k, "app=web").into_iter().map(|p| p.ip).collect();
    assert_eq!(ips.len(), 9, "distinct IPs: {ips:?}");
    c.stop();
}

#[test]
fn memcached_sample_becomes_available_with_its_running_pods() {
    let k = default_kubectl();
    let c = Cluster::start(&[
        "--memory",
        "--operators",
        "memcached",
        "--pod-exit-delay",
        "0",
    ]);
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../operators/memcached-operator/config/samples/cache_v1alpha1_memcached.yaml");
    c.ok(&k, &["apply", "-f", &sample.display().to_string()]);
    let out = c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Available",
            "memcached/memcached-sample",
            "--timeout=60s",
        ],
    );
    assert!(out.contains("condition met"), "{out}");
    wait_for(
        "status.nodes listing the 3 running pods",
        Duration::from_secs(30),
        || {
            let listed = c.ok(
                &k,
                &[
                    "get",
                    "memcached",
                    "memcached-sample",
                    "-o",
                    "jsonpath={.status.nodes[*]}",
                ],
            );
            let listed: BTreeSet<String> = listed.split_whitespace().map(String::from).collect();
            let running: BTreeSet<String> =
                pods(&c, &k, "app.kubernetes.io/instance=memcached-sample")
                    .into_iter()
                    .filter(|p| p.phase == "Running")
                    .map(|p| p.name)
                    .collect();
            listed.len() == 3 && listed == running
        },
    );
    // It did all that as its own ServiceAccount, with the ClusterRole of
    // config/rbac/role.yaml and nothing more.
    let sa =
        "system:serviceaccount:kubeforge-operators-system:kubeforge-operators-controller-manager";
    let can = |verb: &str, what: &str| {
        let out = c.kubectl(&k, &["auth", "can-i", verb, what, "--as", sa]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(can("create", "deployments.apps"), "yes");
    assert_eq!(can("update", "memcacheds.cache.example.com/status"), "yes");
    assert_eq!(can("get", "secrets"), "no");
    assert_eq!(can("delete", "pods"), "no");
    c.ok(&k, &["delete", "memcached", "memcached-sample"]);
    wait_for(
        "the Deployment, ReplicaSet and pods collected",
        Duration::from_secs(30),
        || {
            let left = c.ok(&k, &["get", "deploy,rs,pods", "-o", "name"]);
            left.trim().is_empty()
        },
    );
    c.stop();
}

#[test]
fn a_bad_node_config_is_a_startup_error_naming_the_line() {
    let dir = TempDir::new("badcfg");
    let cfg = dir.0.join("nodes.yaml");
    std::fs::write(
        &cfg,
        "nodes:\n  - name: a\n    capacity:\n      cpu: \"4\"\n      memory: plenty\n  - name: a\n",
    )
    .expect("write");
    let run = |cfg: &PathBuf| {
        Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args(["up", "--memory", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.0.join("state"))
            .arg("--node-config")
            .arg(cfg)
            .output()
            .expect("run kubeforge")
    };
    let out = run(&cfg);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 5") && err.contains("plenty"), "{err}");
    std::fs::write(&cfg, "nodes:\n  - name: a\n  - name: b\n  - name: a\n").expect("write");
    let out = run(&cfg);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line 4") && err.contains("duplicate node name \"a\""),
        "{err}"
    );
}
