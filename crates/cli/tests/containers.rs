//! `kubeforge up --container-nodes 2` as a user drives it with the real
//! kubectl: pods run in containerd, logs come back, pods on different nodes
//! reach each other, failures show kube's reasons, and stopping `up` leaves
//! nothing behind. Needs root and the Debian packages scripts/test-all.sh
//! installs.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Cluster, default_kubectl};

fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("timed out waiting for {what}");
}

fn jsonpath(c: &Cluster, k: &Path, pod: &str, path: &str) -> String {
    let out = c.kubectl(k, &["get", "pod", pod, "-o", &format!("jsonpath={path}")]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn container_nodes_run_pods_for_kubectl_and_leave_nothing() {
    let k = default_kubectl();
    let c = Cluster::start(&["--container-nodes", "2", "--memory"]);
    let state = c.dir.0.join("state");
    let nodes = c.ok(&k, &["get", "nodes", "-o", "name"]);
    assert_eq!(nodes.trim(), "node/container-0\nnode/container-1");
    let runtime = c.ok(
        &k,
        &[
            "get",
            "node",
            "container-0",
            "-o",
            "jsonpath={.status.nodeInfo.containerRuntimeVersion}",
        ],
    );
    assert!(runtime.starts_with("containerd://1."), "{runtime}");

    // kubectl run with the image's usual name; kubectl logs (and -f).
    c.ok(
        &k,
        &[
            "run",
            "hello",
            "--image=busybox:1.36",
            "--",
            "sh",
            "-c",
            "echo hello from $(hostname); sleep 3600",
        ],
    );
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/hello",
            "--timeout=90s",
        ],
    );
    wait_for("hello's greeting", || {
        c.ok(&k, &["logs", "hello"]) == "hello from hello\n"
    });
    // -f keeps following the running container until kubectl's own timeout.
    let follow = c.kubectl(
        &k,
        &["logs", "-f", "hello", "--tail=1", "--request-timeout=2s"],
    );
    assert_eq!(
        String::from_utf8_lossy(&follow.stdout),
        "hello from hello\n"
    );

    // kubectl exec with every kubectl: output, exit codes, stdin.
    for v in [27, 33] {
        let kv = common::versioned_kubectl(v);
        assert_eq!(
            c.ok(&kv, &["exec", "hello", "--", "echo", "exec works"]),
            "exec works\n",
            "kubectl 1.{v}"
        );
    }
    let out = c.kubectl(
        &k,
        &[
            "exec",
            "hello",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 7",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "kubectl exits with the command's code"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("err\ncommand terminated with exit code 7"),
        "{:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    let echoed = c.kubectl_stdin(
        &k,
        &["exec", "-i", "hello", "--", "cat"],
        Some("through stdin\n"),
    );
    assert_eq!(String::from_utf8_lossy(&echoed.stdout), "through stdin\n");
    // kubectl cp (tar over exec) both ways.
    let local = c.dir.0.join("copied.txt");
    std::fs::write(&local, "copied in\n").unwrap();
    c.ok(
        &k,
        &["cp", local.to_str().unwrap(), "hello:/tmp/copied.txt"],
    );
    assert_eq!(
        c.ok(&k, &["exec", "hello", "--", "cat", "/tmp/copied.txt"]),
        "copied in\n"
    );
    let back = c.dir.0.join("back.txt");
    c.ok(&k, &["cp", "hello:/tmp/copied.txt", back.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&back).unwrap(), "copied in\n");
    // kubectl port-forward serves a pod's port on localhost.
    c.ok(
        &k,
        &[
            "run",
            "web",
            "--image=busybox:1.36",
            "--",
            "sh",
            "-c",
            "mkdir -p /www && echo forwarded > /www/index.html && httpd -f -p 8080 -h /www",
        ],
    );
    c.ok(
        &k,
        &["wait", "--for=condition=Ready", "pod/web", "--timeout=90s"],
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut pf = std::process::Command::new(&k)
        .args(["port-forward", "pod/web", &format!("{port}:8080")])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", &c.dir.0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut page = String::new();
    wait_for("the forwarded port to answer", || {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
            return false;
        };
        use std::io::{Read, Write};
        let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
        page.clear();
        s.read_to_string(&mut page).is_ok() && page.ends_with("forwarded\n")
    });
    let _ = pf.kill();
    let _ = pf.wait();

    // A Service: its ClusterIP balances over the ready pods of both nodes,
    // from a pod and from the host; an unready pod gets no traffic.
    c.ok(
        &k,
        &[
            "create",
            "deployment",
            "svc",
            "--image=busybox:1.36",
            "--replicas=2",
            "--",
            "sh",
            "-c",
            "mkdir -p /www && hostname > /www/index.html && httpd -f -p 8080 -h /www",
        ],
    );
    c.ok(&k, &["rollout", "status", "deploy/svc", "--timeout=90s"]);
    let unready = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "svc-unready", "labels": {"app": "svc"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36",
            "command": ["sh", "-c", "mkdir -p /www && hostname > /www/index.html && httpd -f -p 8080 -h /www"],
            "readinessProbe": {"exec": {"command": ["false"]}, "periodSeconds": 1}}]}});
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&unready.to_string()));
    c.ok(
        &k,
        &[
            "expose",
            "deployment",
            "svc",
            "--port=80",
            "--target-port=8080",
        ],
    );
    let ip = c.ok(
        &k,
        &["get", "svc", "svc", "-o", "jsonpath={.spec.clusterIP}"],
    );
    wait_for("the unready pod to run", || {
        jsonpath(&c, &k, "svc-unready", "{.status.phase}") == "Running"
    });
    wait_for("both endpoints", || {
        let out = c.ok(
            &k,
            &[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=svc",
                "-o",
                "jsonpath={.items[*].endpoints[?(@.conditions.ready==true)].addresses[*]}",
            ],
        );
        out.split_whitespace().count() == 2
    });
    let script = format!("for i in $(seq 1 12); do wget -qO- http://{ip}/; done");
    c.ok(
        &k,
        &[
            "run",
            "svc-client",
            "--image=busybox:1.36",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for("the Service client completes", || {
        jsonpath(&c, &k, "svc-client", "{.status.phase}") == "Succeeded"
    });
    let answers = c.ok(&k, &["logs", "svc-client"]);
    let hosts: std::collections::BTreeSet<&str> = answers.lines().collect();
    assert_eq!(answers.lines().count(), 12, "{answers}");
    assert!(
        hosts
            .iter()
            .all(|h| h.starts_with("svc-") && *h != "svc-unready"),
        "{hosts:?}"
    );
    assert_eq!(hosts.len(), 2, "both ready pods answer: {hosts:?}");
    let mut from_host = String::new();
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect((ip.as_str(), 80)).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        s.read_to_string(&mut from_host).unwrap();
    }
    assert!(from_host.contains("\r\n\r\nsvc-"), "{from_host}");

    // An image built from this machine's memcached; a client pod on the
    // other node talks to it.
    let built = std::process::Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["image", "build", "memcached:1.6", "--data-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    c.ok(
        &k,
        &[
            "run",
            "mc",
            "--image=memcached:1.6",
            "--overrides={\"spec\":{\"nodeName\":\"container-1\"}}",
            "--",
            "-m",
            "64",
        ],
    );
    c.ok(
        &k,
        &["wait", "--for=condition=Ready", "pod/mc", "--timeout=90s"],
    );
    let ip = jsonpath(&c, &k, "mc", "{.status.podIP}");
    assert!(ip.starts_with("10.244.1."), "{ip}");
    let script =
        format!("printf 'set k 0 0 5\\r\\nhello\\r\\nget k\\r\\nquit\\r\\n' | nc {ip} 11211");
    c.ok(
        &k,
        &[
            "run",
            "client",
            "--image=busybox:1.36",
            "--restart=Never",
            "--overrides={\"spec\":{\"nodeName\":\"container-0\"}}",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for("the client completes", || {
        jsonpath(&c, &k, "client", "{.status.phase}") == "Succeeded"
    });
    let talk = c.ok(&k, &["logs", "client"]);
    assert_eq!(talk.replace('\r', ""), "STORED\nVALUE k 0 5\nhello\nEND\n");
    assert_eq!(
        jsonpath(
            &c,
            &k,
            "client",
            "{.status.containerStatuses[0].state.terminated.reason}"
        ),
        "Completed"
    );

    // A crashing container: CrashLoopBackOff, its last run's exit code.
    c.ok(
        &k,
        &[
            "run",
            "crash",
            "--image=busybox:1.36",
            "--",
            "sh",
            "-c",
            "exit 4",
        ],
    );
    wait_for("crash to loop", || {
        jsonpath(
            &c,
            &k,
            "crash",
            "{.status.containerStatuses[0].state.waiting.reason}",
        ) == "CrashLoopBackOff"
    });
    assert_eq!(
        jsonpath(
            &c,
            &k,
            "crash",
            "{.status.containerStatuses[0].lastState.terminated.exitCode}"
        ),
        "4"
    );

    // An image nobody built: ImagePullBackOff and the command that builds it.
    c.ok(&k, &["run", "unbuilt", "--image=nosuch:2"]);
    wait_for("unbuilt to back off", || {
        jsonpath(
            &c,
            &k,
            "unbuilt",
            "{.status.containerStatuses[0].state.waiting.reason}",
        ) == "ImagePullBackOff"
    });
    let msg = jsonpath(
        &c,
        &k,
        "unbuilt",
        "{.status.containerStatuses[0].state.waiting.message}",
    );
    assert!(msg.contains("kubeforge image build nosuch:2"), "{msg}");
    let err = c.fails(&k, &["logs", "unbuilt"]);
    assert!(
        err.contains("is waiting to start: trying and failing to pull image"),
        "{err}"
    );

    // Deleting pods removes their containers; stopping up removes the rest.
    c.ok(
        &k,
        &[
            "delete",
            "pod",
            "--all",
            "--wait=true",
            "--timeout=60s",
            "--grace-period=1",
        ],
    );
    c.stop();
    let state_text = state.display().to_string();
    let procs = std::process::Command::new("pgrep")
        .args(["-f", &state_text])
        .output()
        .unwrap();
    assert!(
        procs.stdout.is_empty(),
        "processes left: {}",
        String::from_utf8_lossy(&procs.stdout)
    );
    // Live processes only: an exited shim may wait a moment for its reaper.
    let ps = std::process::Command::new("ps")
        .args(["-eo", "stat=,args="])
        .output()
        .unwrap();
    let shims: Vec<String> = String::from_utf8_lossy(&ps.stdout)
        .lines()
        .filter(|l| l.contains("containerd-shim") && !l.trim_start().starts_with('Z'))
        .map(str::to_string)
        .collect();
    assert!(shims.is_empty(), "shims left: {shims:?}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&state_text),
        "mounts left under {state_text}"
    );
    let links = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kf-br"))
        .collect::<Vec<_>>();
    assert!(links.is_empty(), "bridges left: {links:?}");
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&tables.stdout).contains("kubeforge"),
        "nft tables left"
    );
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        assert!(
            !h.path().join("kubeforge/container-0").exists(),
            "cgroups left in {}",
            h.path().display()
        );
    }
}
