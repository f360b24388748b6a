//! `kubectl describe` for pods (with events written through
//! events.k8s.io/v1, as kube-runtime's Recorder writes them), deployments,
//! nodes, namespaces and custom resources.

mod common;

use common::{Cluster, default_kubectl, fixture};

#[test]
fn kubectl_describe() {
    let k = default_kubectl();
    let c = Cluster::start(&[]);
    c.ok(&k, &["run", "p", "--image=busybox"]);
    let uid = c.ok(&k, &["get", "pod", "p", "-o", "jsonpath={.metadata.uid}"]);
    let event = format!(
        "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata:\n  name: p.reconciled\n  namespace: default\nregarding:\n  apiVersion: v1\n  kind: Pod\n  name: p\n  namespace: default\n  uid: {uid}\nreason: Reconciled\nnote: all good here\ntype: Normal\naction: Reconcile\nreportingController: demo-controller\nreportingInstance: demo-1\neventTime: \"2026-01-01T00:00:00.000000Z\"\n"
    );
    let out = c.kubectl_stdin(&k, &["create", "-f", "-"], Some(&event));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = c.ok(&k, &["describe", "pod", "p"]);
    assert!(pod.contains("Name:") && pod.contains("busybox"), "{pod}");
    let events = pod.split("Events:").nth(1).unwrap_or_default();
    assert!(
        events.contains("Reconciled")
            && events.contains("all good here")
            && events.contains("demo-controller"),
        "describe pod events: {events}"
    );

    c.ok(
        &k,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    let d = c.ok(&k, &["describe", "deployment", "web"]);
    assert!(
        d.contains("Replicas:") && d.contains("2 desired") && d.contains("RollingUpdate"),
        "{d}"
    );

    let node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: hand-made\n  labels:\n    kubernetes.io/hostname: hand-made\nstatus:\n  capacity:\n    cpu: \"4\"\n    memory: 8Gi\n    pods: \"110\"\n  allocatable:\n    cpu: \"4\"\n    memory: 8Gi\n    pods: \"110\"\n";
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(node));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = c.ok(&k, &["describe", "node", "hand-made"]);
    assert!(
        n.contains("hand-made") && n.contains("Capacity:") && n.contains("8Gi"),
        "{n}"
    );

    let ns = c.ok(&k, &["describe", "ns", "default"]);
    assert!(ns.contains("Status:") && ns.contains("Active"), "{ns}");

    c.ok(
        &k,
        &[
            "apply",
            "-f",
            &fixture("crontab-crd.yaml").to_string_lossy(),
        ],
    );
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
        ],
    );
    let ct = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: nightly\nspec:\n  cronSpec: \"0 3 * * *\"\n  image: backup\n";
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(ct));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = c.ok(&k, &["describe", "crontab", "nightly"]);
    assert!(
        d.contains("Cron Spec:")
            && d.contains("0 3 * * *")
            && d.contains("API Version:  stable.example.com/v1"),
        "{d}"
    );
    c.stop();
}
