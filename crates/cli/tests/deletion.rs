//! Deletion with the real kubectl against `kubeforge up` (which runs the
//! garbage collector and the namespace controller): `--cascade` background,
//! foreground and orphan on a Deployment owning pods, and `kubectl delete
//! ns --wait` of a namespace holding pods, configmaps and custom resources,
//! some held by finalizers that another party removes later.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Cluster, fixture};

/// Pods owned by `owner` (a Deployment with that uid), labelled `set=<set>`.
fn dependents_yaml(set: &str, owner: &str, uid: &str, block: bool) -> String {
    let mut out = String::new();
    for i in 0..3 {
        out.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {set}-{i}\n  labels:\n    set: {set}\n  ownerReferences:\n  - apiVersion: apps/v1\n    kind: Deployment\n    name: {owner}\n    uid: {uid}\n    controller: true\n    blockOwnerDeletion: {block}\nspec:\n  containers:\n  - name: c\n    image: nginx:1.25\n"
        ));
    }
    out
}

fn deployment_yaml(name: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replicas: 3\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n      - name: c\n        image: nginx:1.25\n"
    )
}

fn pods_of(c: &Cluster, bin: &Path, set: &str) -> Vec<String> {
    c.ok(
        bin,
        &[
            "get",
            "pods",
            "-l",
            &format!("set={set}"),
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
        ],
    )
    .lines()
    .map(str::to_string)
    .filter(|l| !l.is_empty())
    .collect()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn owner_with_pods(c: &Cluster, bin: &Path, name: &str, block: bool) {
    let out = c.kubectl_stdin(bin, &["apply", "-f", "-"], Some(&deployment_yaml(name)));
    assert!(
        out.status.success(),
        "apply owner: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let uid = c.ok(
        bin,
        &["get", "deployment", name, "-o", "jsonpath={.metadata.uid}"],
    );
    assert!(!uid.is_empty(), "owner uid");
    let out = c.kubectl_stdin(
        bin,
        &["apply", "-f", "-"],
        Some(&dependents_yaml(name, name, uid.trim(), block)),
    );
    assert!(
        out.status.success(),
        "apply dependents: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(pods_of(c, bin, name).len(), 3);
}

#[test]
fn kubectl_cascade_policies() {
    let bin = common::default_kubectl();
    let bin = bin.as_path();
    let c = Cluster::start(&["--memory"]);

    // Background: the owner goes at once, the garbage collector takes the pods.
    owner_with_pods(&c, bin, "bg", false);
    c.ok(bin, &["delete", "deployment", "bg", "--cascade=background"]);
    let err = c.fails(bin, &["get", "deployment", "bg"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    wait_until(
        "background: the pods are deleted",
        Duration::from_secs(20),
        || pods_of(&c, bin, "bg").is_empty(),
    );

    // Foreground: kubectl waits for the owner, which goes after its
    // blocking dependents — so they are gone when it returns.
    owner_with_pods(&c, bin, "fg", true);
    c.ok(
        bin,
        &[
            "delete",
            "deployment",
            "fg",
            "--cascade=foreground",
            "--timeout=30s",
        ],
    );
    let err = c.fails(bin, &["get", "deployment", "fg"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    assert!(
        pods_of(&c, bin, "fg").is_empty(),
        "foreground: the dependents went first"
    );

    // Orphan: the owner goes, the pods stay without the ownerReference.
    owner_with_pods(&c, bin, "or", true);
    c.ok(
        bin,
        &[
            "delete",
            "deployment",
            "or",
            "--cascade=orphan",
            "--timeout=30s",
        ],
    );
    let err = c.fails(bin, &["get", "deployment", "or"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(pods_of(&c, bin, "or").len(), 3, "orphan: the pods stay");
    let refs = c.ok(
        bin,
        &[
            "get",
            "pods",
            "-l",
            "set=or",
            "-o",
            "jsonpath={.items[*].metadata.ownerReferences}",
        ],
    );
    assert!(refs.trim().is_empty(), "ownerReferences removed: {refs}");
    c.stop();
}

#[test]
fn kubectl_delete_namespace_waits_for_finalizers() {
    let bin = common::default_kubectl();
    let bin = bin.as_path();
    let c = Cluster::start(&["--memory"]);
    let crd = fixture("crontab-crd.yaml").to_string_lossy().into_owned();
    c.ok(bin, &["apply", "-f", &crd]);
    c.ok(
        bin,
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
            "--timeout=20s",
        ],
    );
    c.ok(bin, &["create", "ns", "demo"]);
    let mut manifest = String::new();
    for i in 0..3 {
        manifest.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\n  namespace: demo\nspec:\n  containers:\n  - name: c\n    image: nginx:1.25\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i}\n  namespace: demo\ndata:\n  k: v\n---\napiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: ct{i}\n  namespace: demo\nspec:\n  cronSpec: '* * * * */5'\n  image: img\n"
        ));
    }
    // Two objects held by a finalizer "some controller" owns.
    manifest.push_str("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: demo\n  finalizers: [example.com/hold]\n---\napiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: held\n  namespace: demo\n  finalizers: [example.com/hold]\nspec:\n  cronSpec: '* * * * */5'\n");
    let out = c.kubectl_stdin(bin, &["apply", "-f", "-"], Some(&manifest));
    assert!(
        out.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The other controller: after a moment, it sees the namespace
    // terminating and removes its finalizers.
    let kubeconfig = c.kubeconfig.clone();
    let home = c.dir.0.clone();
    let kubectl = bin.to_path_buf();
    let other = std::thread::spawn(move || {
        let run = |args: &[&str]| {
            std::process::Command::new(&kubectl)
                .args(args)
                .env("KUBECONFIG", &kubeconfig)
                .env("HOME", &home)
                .output()
                .expect("kubectl")
        };
        std::thread::sleep(Duration::from_secs(2));
        let ns = String::from_utf8_lossy(&run(&["get", "ns", "demo"]).stdout).into_owned();
        let cm = String::from_utf8_lossy(
            &run(&[
                "-n",
                "demo",
                "get",
                "cm",
                "held",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ])
            .stdout,
        )
        .into_owned();
        let remove = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;
        let patching = Instant::now();
        let a = run(&[
            "-n",
            "demo",
            "patch",
            "cm",
            "held",
            "--type=json",
            "-p",
            remove,
        ]);
        let b = run(&[
            "-n",
            "demo",
            "patch",
            "crontab",
            "held",
            "--type=json",
            "-p",
            remove,
        ]);
        (ns, cm, a.status.success(), b.status.success(), patching)
    });

    let started = Instant::now();
    c.ok(bin, &["delete", "ns", "demo", "--wait", "--timeout=30s"]);
    let returned = Instant::now();
    let (ns_seen, cm_deleting, patched_cm, patched_ct, patched_at) =
        other.join().expect("the other controller");
    assert!(
        ns_seen.contains("Terminating"),
        "get ns while terminating: {ns_seen}"
    );
    assert!(
        !cm_deleting.trim().is_empty(),
        "held object marked deleting"
    );
    assert!(patched_cm && patched_ct, "finalizers removed");
    assert!(
        returned >= patched_at,
        "kubectl delete ns returned before the finalizers were removed ({:?} after start)",
        returned - started
    );
    let err = c.fails(bin, &["get", "ns", "demo"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    // Nothing of it is left anywhere.
    let left = c.ok(bin, &["get", "crontabs", "-A", "-o", "name"]);
    assert!(left.trim().is_empty(), "{left}");
    c.stop();
}
