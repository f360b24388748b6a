//! The Metrics API as a user sees it, against `kubeforge up` with simulated
//! nodes and the real kubectl: `kubectl top nodes|pods` (with `-A`, `-l`,
//! `--containers`) printing usage that follows the pods' requests and the
//! `kubeforge.io/usage` annotation, the objects' wire form, who may read
//! them (view's aggregated `system:aggregated-metrics-reader`), and a
//! HorizontalPodAutoscaler scaling a Deployment up and back down as its
//! pods' usage is raised and lowered.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Cluster, default_kubectl};

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// kubectl's table rows (header skipped), split on whitespace.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect()
}

fn row<'a>(rows: &'a [Vec<String>], name: &str) -> &'a [String] {
    rows.iter()
        .find(|r| r.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
}

const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: calm, labels: {app: calm}}
spec:
  containers:
  - name: web
    image: nginx
    resources: {requests: {cpu: 200m, memory: 128Mi}}
---
apiVersion: v1
kind: Pod
metadata:
  name: hot
  labels: {app: hot}
  annotations: {kubeforge.io/usage: "cpu=750m,memory=300Mi;sidecar:cpu=20m"}
spec:
  containers:
  - name: web
    image: nginx
    resources: {requests: {cpu: 500m, memory: 256Mi}}
  - name: sidecar
    image: busybox
---
apiVersion: v1
kind: Namespace
metadata: {name: other}
---
apiVersion: v1
kind: Pod
metadata: {name: bare, namespace: other}
spec:
  containers:
  - name: main
    image: busybox
"#;

#[test]
fn kubectl_top_follows_requests_and_the_usage_annotation() {
    let c = Cluster::start(&["--nodes", "1", "--metric-resolution", "2s"]);
    let k = default_kubectl();
    let k = k.as_path();
    let out = c.kubectl_stdin(k, &["apply", "-f", "-"], Some(PODS));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the pods to run", Duration::from_secs(30), || {
        c.ok(k, &["get", "pods", "-A", "--no-headers"])
            .lines()
            .filter(|l| l.contains("Running"))
            .count()
            == 3
    });

    // Discovery lists the group, with get and list only.
    let resources = c.ok(
        k,
        &["api-resources", "--api-group=metrics.k8s.io", "-o", "wide"],
    );
    let rs = rows(&resources);
    assert_eq!(
        row(&rs, "nodes")[1],
        "metrics.k8s.io/v1beta1",
        "{resources}"
    );
    assert_eq!(row(&rs, "pods")[4], "get,list", "{resources}");

    // Pods: half the requests by default; what the annotation says (the
    // sidecar's own entry for cpu, the pod-wide one for memory).
    let mut top = String::new();
    wait_for("kubectl top pods", Duration::from_secs(30), || {
        let out = c.kubectl(k, &["top", "pods"]);
        top = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success() && top.contains("hot") && top.contains("calm")
    });
    let rs = rows(&top);
    assert!(top.starts_with("NAME"), "{top}");
    assert!(top.lines().next().unwrap().contains("CPU(cores)"), "{top}");
    assert_eq!(row(&rs, "calm")[1..], ["100m", "64Mi"], "{top}");
    // 750m + 20m; 300Mi + 300Mi.
    assert_eq!(row(&rs, "hot")[1..], ["770m", "600Mi"], "{top}");

    let only = rows(&c.ok(k, &["top", "pods", "-l", "app=hot"]));
    assert_eq!(only.len(), 1, "{only:?}");
    let containers = c.ok(k, &["top", "pods", "hot", "--containers"]);
    let cs = rows(&containers);
    assert!(
        containers.lines().next().unwrap().starts_with("POD"),
        "{containers}"
    );
    let sidecar = cs.iter().find(|r| r[1] == "sidecar").expect("sidecar row");
    assert_eq!(sidecar[2..], ["20m", "300Mi"], "{containers}");
    let web = cs.iter().find(|r| r[1] == "web").expect("web row");
    assert_eq!(web[2..], ["750m", "300Mi"], "{containers}");

    let all = c.ok(k, &["top", "pods", "-A"]);
    assert!(
        all.lines().next().unwrap().starts_with("NAMESPACE"),
        "{all}"
    );
    let bare = rows(&all)
        .into_iter()
        .find(|r| r[1] == "bare")
        .expect("the other namespace's pod");
    // No requests: the small defaults.
    assert_eq!(bare[..], ["other", "bare", "1m", "8Mi"], "{all}");

    // The node: its pods plus the base (100m, 256Mi).
    let nodes = c.ok(k, &["top", "nodes"]);
    let header: Vec<&str> = nodes.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        "{nodes}"
    );
    let node = row(&rows(&nodes), "node-0").to_vec();
    // 100m + 100m + 770m + 1m; 256Mi + 64Mi + 600Mi + 8Mi.
    assert_eq!(node[1], "971m", "{nodes}");
    assert_eq!(node[3], "928Mi", "{nodes}");
    assert!(node[2].ends_with('%') && node[4].ends_with('%'), "{nodes}");

    // The objects as metrics-server serves them.
    let raw = c.ok(
        k,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/hot",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(v["kind"], "PodMetrics");
    assert_eq!(v["apiVersion"], "metrics.k8s.io/v1beta1");
    assert_eq!(v["window"], "2s");
    assert_eq!(v["metadata"]["labels"]["app"], "hot");
    assert!(v["timestamp"].as_str().unwrap().ends_with('Z'), "{raw}");
    assert_eq!(v["containers"][0]["name"], "web");
    assert_eq!(v["containers"][0]["usage"]["cpu"], "750m");
    assert_eq!(v["containers"][0]["usage"]["memory"], "300Mi");
    let nodes_raw = c.ok(k, &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"]);
    let v: serde_json::Value = serde_json::from_str(&nodes_raw).unwrap();
    assert_eq!(v["kind"], "NodeMetricsList");
    assert_eq!(v["items"][0]["usage"]["cpu"], "971m");
    let missing = c.fails(
        k,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/nope",
        ],
    );
    assert!(missing.contains("not found"), "{missing}");

    // Who may read: view includes the Metrics API's pods (through
    // system:aggregated-metrics-reader); a namespace's viewer cannot read
    // nodes.
    c.ok(k, &["create", "serviceaccount", "viewer"]);
    c.ok(
        k,
        &[
            "create",
            "rolebinding",
            "viewer",
            "--clusterrole=view",
            "--serviceaccount=default:viewer",
        ],
    );
    let viewer = "--as=system:serviceaccount:default:viewer";
    wait_for(
        "view to aggregate the metrics reader",
        Duration::from_secs(20),
        || c.kubectl(k, &["top", "pods", viewer]).status.success(),
    );
    let denied = c.fails(k, &["top", "nodes", viewer]);
    assert!(denied.contains("forbidden"), "{denied}");
    c.stop();
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx
        resources: {requests: {cpu: 100m}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 4
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  - type: ContainerResource
    containerResource: {name: cpu, container: web, target: {type: Utilization, averageUtilization: 50}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ghost}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: ghost}
  maxReplicas: 3
"#;

/// `kubectl get hpa web`'s TARGETS and REPLICAS.
fn hpa(c: &Cluster, k: &Path) -> (String, String) {
    let out = c.ok(k, &["get", "hpa", "web"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE"
        ],
        "{out}"
    );
    // TARGETS is "cpu: 75%/50%, cpu: 75%/50%": words up to MINPODS.
    let line = out.lines().nth(1).unwrap_or_default();
    let cells: Vec<&str> = line.split_whitespace().collect();
    let n = cells.len();
    (cells[2..n - 4].join(" "), cells[n - 2].to_string())
}

fn deployment_replicas(c: &Cluster, k: &Path) -> String {
    c.ok(
        k,
        &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
    )
}

#[test]
fn hpa_scales_a_deployment_up_and_down_with_its_pods_usage() {
    let c = Cluster::start(&[
        "--nodes",
        "1",
        "--metric-resolution",
        "1s",
        "--horizontal-pod-autoscaler-sync-period",
        "1s",
        "--horizontal-pod-autoscaler-downscale-stabilization",
        "3s",
    ]);
    let k = default_kubectl();
    let k = k.as_path();
    let out = c.kubectl_stdin(k, &["apply", "-f", "-"], Some(WEB));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // At the default (half the requests) the pods sit on the target.
    let mut seen = (String::new(), String::new());
    wait_for("the HPA to measure 50%", Duration::from_secs(60), || {
        seen = hpa(&c, k);
        seen == ("cpu: 50%/50%, cpu: 50%/50%".into(), "2".into())
    });
    let active = c.ok(
        k,
        &[
            "get",
            "hpa",
            "web",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="ScalingActive")].reason}"#,
        ],
    );
    assert_eq!(active, "ValidMetricFound");

    // A target that does not exist: AbleToScale False, as kube says it.
    wait_for(
        "the ghost HPA's FailedGetScale",
        Duration::from_secs(30),
        || {
            c.ok(
                k,
                &[
                    "get",
                    "hpa",
                    "ghost",
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="AbleToScale")].reason}"#,
                ],
            ) == "FailedGetScale"
        },
    );

    // Raised to 100 % of their requests: twice the target → 4 (the max).
    c.ok(
        k,
        &[
            "annotate",
            "pods",
            "-l",
            "app=web",
            "kubeforge.io/usage=cpu=100m",
            "--overwrite",
        ],
    );
    wait_for(
        "the Deployment to scale up",
        Duration::from_secs(60),
        || deployment_replicas(&c, k) == "4",
    );
    wait_for(
        "the HPA to show 4 replicas",
        Duration::from_secs(60),
        || {
            seen = hpa(&c, k);
            seen.1 == "4" && seen.0.starts_with("cpu: ") && seen.0.ends_with("%/50%")
        },
    );
    let events = c.ok(
        k,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=SuccessfulRescale",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(
        events.contains(
            "New size: 4; reason: cpu resource utilization (percentage of request) above target"
        ),
        "{events}"
    );
    // The two new pods use the default 50 %: 75 % on average wants 6,
    // held at maxReplicas.
    wait_for(
        "ScalingLimited TooManyReplicas",
        Duration::from_secs(30),
        || {
            c.ok(
                k,
                &[
                    "get",
                    "hpa",
                    "web",
                    "-o",
                    r#"jsonpath={.status.conditions[?(@.type=="ScalingLimited")].reason}"#,
                ],
            ) == "TooManyReplicas"
        },
    );

    // Lowered to 10 %: back to minReplicas once the (3 s) window passed.
    c.ok(
        k,
        &[
            "annotate",
            "pods",
            "-l",
            "app=web",
            "kubeforge.io/usage=cpu=10%",
            "--overwrite",
        ],
    );
    wait_for(
        "the Deployment to scale down",
        Duration::from_secs(60),
        || deployment_replicas(&c, k) == "1",
    );
    wait_for("the HPA to show 1 replica", Duration::from_secs(60), || {
        hpa(&c, k).1 == "1"
    });
    let events = c.ok(
        k,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=SuccessfulRescale",
            "-o",
            "jsonpath={.items[*].message}",
        ],
    );
    assert!(
        events.contains("New size: 1; reason: All metrics below target"),
        "{events}"
    );
    c.stop();
}
