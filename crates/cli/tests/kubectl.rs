//! The kubectl checks, run with every kubectl from 1.27 to 1.33 and
//! the default one, each against its own `kubeforge up`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, fixture};

fn scenario(bin: &Path) {
    let c = Cluster::start(&[]);
    let f = |name: &str| fixture(name).to_string_lossy().into_owned();

    // Namespaces and a ConfigMap.
    let ns = c.ok(bin, &["get", "ns"]);
    assert!(
        ns.contains("default") && ns.contains("Active"),
        "get ns: {ns}"
    );
    c.ok(bin, &["create", "ns", "demo"]);
    c.ok(
        bin,
        &[
            "-n",
            "demo",
            "create",
            "configmap",
            "x",
            "--from-literal=a=b",
        ],
    );
    let yaml = c.ok(bin, &["-n", "demo", "get", "cm", "-o", "yaml"]);
    assert!(
        yaml.contains("a: b") && yaml.contains("name: x"),
        "get cm -o yaml: {yaml}"
    );
    let table = c.ok(bin, &["-n", "demo", "get", "cm"]);
    assert!(
        table.contains("NAME") && table.contains("DATA") && table.contains("AGE"),
        "{table}"
    );
    c.ok(bin, &["-n", "demo", "delete", "cm", "x"]);
    let err = c.fails(bin, &["-n", "demo", "get", "cm", "x"]);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );

    // The CronTab CRD.
    c.ok(bin, &["apply", "-f", &f("crontab-crd.yaml")]);
    c.ok(
        bin,
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
            "--timeout=20s",
        ],
    );
    let ct = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: my-new-cron-object\nspec:\n  cronSpec: \"* * * * */5\"\n  image: my-awesome-cron-image\n";
    let out = c.kubectl_stdin(bin, &["-n", "demo", "apply", "-f", "-"], Some(ct));
    assert!(
        out.status.success(),
        "apply crontab: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = c.ok(bin, &["-n", "demo", "get", "crontabs"]);
    assert!(list.contains("my-new-cron-object"), "{list}");
    let short = c.ok(bin, &["-n", "demo", "get", "ct"]);
    assert!(short.contains("my-new-cron-object"), "{short}");
    let spec = c.ok(
        bin,
        &[
            "-n",
            "demo",
            "get",
            "crontab",
            "my-new-cron-object",
            "-o",
            "jsonpath={.spec.cronSpec}",
        ],
    );
    assert_eq!(spec, "* * * * */5");
    let bad = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: bad\nspec:\n  cronSpec: 5\n";
    let out = c.kubectl_stdin(bin, &["-n", "demo", "apply", "-f", "-"], Some(bad));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an invalid CronTab was accepted");
    assert!(
        err.contains("spec.cronSpec") && err.contains("Invalid value"),
        "invalid crontab: {err}"
    );
    c.ok(
        bin,
        &["-n", "demo", "delete", "crontab", "my-new-cron-object"],
    );
    let left = c.kubectl(bin, &["-n", "demo", "get", "crontabs", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "");

    // Client-side apply twice with a change, then server-side apply.
    c.ok(bin, &["-n", "demo", "apply", "-f", &f("deployment.yaml")]);
    let changed = std::fs::read_to_string(fixture("deployment.yaml"))
        .expect("fixture")
        .replace("replicas: 2", "replicas: 3")
        .replace("nginx:1.25", "nginx:1.27")
        .replace("    tier: frontend\n", "");
    let out = c.kubectl_stdin(bin, &["-n", "demo", "apply", "-f", "-"], Some(&changed));
    assert!(
        out.status.success(),
        "second apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = c.ok(bin, &["-n", "demo", "get", "deploy", "web", "-o", "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image} {.metadata.labels.tier} {.spec.template.spec.containers[0].env[0].value}"]);
    assert_eq!(got.trim(), "3 nginx:1.27  blue", "after client-side apply");
    let ssa = changed.replace("replicas: 3", "replicas: 4");
    let out = c.kubectl_stdin(
        bin,
        &[
            "-n",
            "demo",
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&ssa),
    );
    assert!(
        out.status.success(),
        "server-side apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = c.ok(
        bin,
        &[
            "-n",
            "demo",
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
    );
    assert_eq!(got.trim(), "4");
    let cols = c.ok(bin, &["-n", "demo", "get", "deploy"]);
    let header = cols.lines().next().unwrap_or_default();
    for col in ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"] {
        assert!(
            header.contains(col),
            "get deploy header {header:?} lacks {col}"
        );
    }
    assert!(cols.contains("web"), "{cols}");

    // explain.
    let explain = c.ok(bin, &["explain", "deployment.spec.replicas"]);
    assert!(
        explain.contains("replicas") && explain.contains("integer"),
        "explain: {explain}"
    );
    assert!(
        explain.contains("Number of desired pods"),
        "explain: {explain}"
    );

    // get pods -w streams a change made by another client.
    let mut watch = Command::new(bin)
        .args(["-n", "demo", "get", "pods", "-w"])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("KUBECACHEDIR", c.dir.0.join("cache-watch"))
        .env("HOME", &c.dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get pods -w");
    let stdout = watch.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Give the watch a moment to be established, then make a change.
    std::thread::sleep(Duration::from_millis(500));
    c.ok(bin, &["-n", "demo", "run", "watched", "--image=nginx"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("watched") {
                break;
            }
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        seen.contains("watched") && seen.contains("Pending"),
        "get pods -w saw: {seen}"
    );

    // Namespace deletion takes its contents.
    c.ok(bin, &["delete", "ns", "demo"]);
    let err = c.fails(bin, &["get", "ns", "demo"]);
    assert!(err.contains("not found"), "{err}");
    c.stop();
}

#[test]
fn kubectl_default() {
    scenario(&common::default_kubectl());
}

#[test]
fn kubectl_1_27() {
    scenario(&common::versioned_kubectl(27));
}

#[test]
fn kubectl_1_28() {
    scenario(&common::versioned_kubectl(28));
}

#[test]
fn kubectl_1_29() {
    scenario(&common::versioned_kubectl(29));
}

#[test]
fn kubectl_1_30() {
    scenario(&common::versioned_kubectl(30));
}

#[test]
fn kubectl_1_31() {
    scenario(&common::versioned_kubectl(31));
}

#[test]
fn kubectl_1_32() {
    scenario(&common::versioned_kubectl(32));
}

#[test]
fn kubectl_1_33() {
    scenario(&common::versioned_kubectl(33));
}
