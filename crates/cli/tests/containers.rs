//! `kubeforge up --container-nodes 2` as a user drives it with the real
//! kubectl: pods run in containerd, logs come back, pods on different nodes
//! reach each other, failures show kube's reasons, and stopping `up` leaves
//! nothing behind. Needs root and the Debian packages scripts/test-all.sh
//! installs.
//!
//! Hermetic: the cluster's machine-wide names carry the id of its own data
//! directory, and "nothing left" looks for that id only, so another
//! cluster on the machine (a user's `up`, another test) neither fails this
//! test nor is disturbed by it.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Cluster, default_kubectl};

/// Start kubectl with `args` against `c`, its stdout piped and its stderr
/// to `stderr`, for commands that keep running (`logs -f`, `port-forward`).
fn spawn_kubectl(
    c: &Cluster,
    k: &Path,
    args: &[&str],
    stderr: std::process::Stdio,
) -> std::process::Child {
    std::process::Command::new(k)
        .args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", &c.dir.0)
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// The first line `child` prints (without its newline) for which `pick`
/// gives a value, within 60 s; `None` when it ends or the time is up first.
/// The rest of its output is drained, so that it never writes to a closed
/// pipe (kubectl port-forward prints a line per connection).
fn first_line_where<T: Send + 'static>(
    child: &mut std::process::Child,
    pick: impl Fn(&str) -> Option<T> + Send + 'static,
) -> Option<T> {
    use std::io::BufRead;
    let out = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut found = false;
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if !found && let Some(v) = pick(&line) {
                found = true;
                let _ = tx.send(v);
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60)).ok()
}

/// `GET /` over HTTP/1.0 at `addr`: the whole answer, or what came before
/// a failure (empty when nothing answered). Every step is bounded.
fn http_get(addr: &str) -> String {
    use std::io::{Read, Write};
    let limit = Duration::from_secs(10);
    let Ok(addr) = addr.parse::<std::net::SocketAddr>() else {
        panic!("{addr} is not an address");
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, limit) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(limit));
    let _ = s.set_write_timeout(Some(limit));
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    let mut page = String::new();
    let _ = s.read_to_string(&mut page);
    page
}

/// The gateway of `node`'s bridge: the first address of its pod range.
fn gateway(c: &Cluster, k: &Path, node: &str) -> String {
    let cidr = c.ok(k, &["get", "node", node, "-o", "jsonpath={.spec.podCIDR}"]);
    let net = cidr.trim().strip_suffix(".0/24").expect("a /24 pod range");
    format!("{net}.1")
}

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

/// `kubeforge image build ARGS --data-dir STATE`, which must succeed.
fn build_image(state: &Path, args: &[&str]) {
    let built = std::process::Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["image", "build"])
        .args(args)
        .arg("--data-dir")
        .arg(state)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// How many ready endpoint addresses Service `svc`'s slices list.
fn ready_endpoints(c: &Cluster, k: &Path, svc: &str) -> usize {
    let out = c.ok(
        k,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={svc}"),
            "-o",
            "jsonpath={.items[*].endpoints[?(@.conditions.ready==true)].addresses[*]}",
        ],
    );
    out.split_whitespace().count()
}

fn jsonpath(c: &Cluster, k: &Path, pod: &str, path: &str) -> String {
    let out = c.kubectl(k, &["get", "pod", pod, "-o", &format!("jsonpath={path}")]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kube-rs's `Api::<Pod>::exec` (stdin, stdout, the exit code in the
/// status) and `portforward` against the pods `hello` and `web`.
fn kube_rs_streams(kubeconfig: &Path) {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::AttachParams;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Every step bounded: the whole exchange within three minutes.
    let streams = async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let pods: kube::Api<Pod> =
            kube::Api::default_namespaced(kube::Client::try_from(cfg).unwrap());
        let mut proc = pods
            .exec(
                "hello",
                ["sh", "-c", "read line; echo got $line; exit 3"],
                &AttachParams::default().stdin(true).stderr(true),
            )
            .await
            .unwrap();
        let mut stdin = proc.stdin().unwrap();
        stdin.write_all(b"kube-rs\n").await.unwrap();
        let mut out = String::new();
        proc.stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert_eq!(out, "got kube-rs\n");
        let status = proc.take_status().unwrap().await.unwrap();
        assert_eq!(
            status.reason.as_deref(),
            Some("NonZeroExitCode"),
            "{status:?}"
        );
        let code = status
            .details
            .and_then(|d| d.causes)
            .into_iter()
            .flatten()
            .find(|c| c.reason.as_deref() == Some("ExitCode"))
            .and_then(|c| c.message);
        assert_eq!(code.as_deref(), Some("3"));
        drop(stdin);
        proc.join().await.unwrap();

        // v5 (translated to SPDY at the API server): closing stdin alone
        // ends `cat`'s input.
        let mut proc = pods
            .exec(
                "hello",
                ["cat"],
                &AttachParams::default().stdin(true).stderr(false),
            )
            .await
            .unwrap();
        let mut stdin = proc.stdin().unwrap();
        stdin.write_all(b"until end of input\n").await.unwrap();
        stdin.shutdown().await.unwrap();
        let mut out = String::new();
        let mut stdout = proc.stdout().unwrap();
        tokio::time::timeout(
            std::time::Duration::from_secs(30),
            stdout.read_to_string(&mut out),
        )
        .await
        .expect("cat ends once stdin is closed (v5's close signal)")
        .unwrap();
        assert_eq!(out, "until end of input\n");
        let status = proc.take_status().unwrap().await.unwrap();
        assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

        let mut pf = pods.portforward("web", &[8080]).await.unwrap();
        let mut s = pf.take_stream(8080).unwrap();
        s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut page = Vec::new();
        s.read_to_end(&mut page).await.unwrap();
        assert!(
            String::from_utf8_lossy(&page).ends_with("forwarded\n"),
            "{}",
            String::from_utf8_lossy(&page)
        );
        drop(s);
        pf.abort();
    };
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(180), streams).await })
        .expect("kube-rs's exec and port-forward finish within 3 minutes");
}

#[test]
fn container_nodes_run_pods_for_kubectl_and_leave_nothing() {
    let k = default_kubectl();
    let c = Cluster::start(&[
        "--container-nodes",
        "2",
        "--memory",
        "--operators",
        "memcached",
    ]);
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
    // -f prints the last line and keeps following the running container.
    let mut follow = spawn_kubectl(
        &c,
        &k,
        &["logs", "-f", "hello", "--tail=1"],
        std::process::Stdio::null(),
    );
    let first = first_line_where(&mut follow, |l| Some(l.to_string()));
    let still_following = matches!(follow.try_wait(), Ok(None));
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(first.as_deref(), Some("hello from hello"));
    assert!(
        still_following,
        "kubectl logs -f returned instead of following"
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
    // The node's Summary API through the API server's node proxy.
    let summary: serde_json::Value = serde_json::from_str(&c.ok(
        &k,
        &[
            "get",
            "--raw",
            "/api/v1/nodes/container-0/proxy/stats/summary",
        ],
    ))
    .unwrap();
    let node = jsonpath(&c, &k, "hello", "{.spec.nodeName}");
    let summary = if node == "container-0" {
        summary
    } else {
        serde_json::from_str(&c.ok(
            &k,
            &[
                "get",
                "--raw",
                &format!("/api/v1/nodes/{node}/proxy/stats/summary"),
            ],
        ))
        .unwrap()
    };
    let hello = summary["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["podRef"]["name"] == "hello")
        .unwrap_or_else(|| panic!("hello in {summary}"));
    assert_eq!(hello["containers"][0]["name"], "hello");
    assert!(
        hello["memory"]["workingSetBytes"].as_u64().unwrap() > 0,
        "{hello}"
    );
    assert!(
        hello["cpu"]["usageCoreNanoSeconds"].as_u64().unwrap() > 0,
        "{hello}"
    );
    assert_eq!(summary["node"]["nodeName"], node.as_str());

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
    // -v=8 logs the upgrade's answer: kubectl >= 1.31 tunnels SPDY inside
    // WebSocket, which the API server un-tunnels. kubectl picks the local
    // port and says which.
    let pf_log = c.dir.0.join("port-forward.log");
    let mut pf = spawn_kubectl(
        &c,
        &k,
        &["port-forward", "-v=8", "pod/web", ":8080"],
        std::fs::File::create(&pf_log).unwrap().into(),
    );
    // "Forwarding from 127.0.0.1:41235 -> 8080"
    let port = first_line_where(&mut pf, |l| {
        l.strip_prefix("Forwarding from 127.0.0.1:")?
            .split(' ')
            .next()?
            .parse::<u16>()
            .ok()
    });
    let Some(port) = port else {
        let _ = pf.kill();
        panic!(
            "kubectl port-forward did not say its port: {}",
            std::fs::read_to_string(&pf_log).unwrap_or_default()
        );
    };
    wait_for("the forwarded port to answer", || {
        http_get(&format!("127.0.0.1:{port}")).ends_with("forwarded\n")
    });
    let _ = pf.kill();
    let _ = pf.wait();
    let log = std::fs::read_to_string(&pf_log).unwrap();
    assert!(
        log.contains("Sec-Websocket-Protocol: SPDY/3.1+portforward.k8s.io"),
        "kubectl's port-forward went through the WebSocket tunnel: {log}"
    );

    // The WebSocket clients: kube-rs's and the Python client's exec and
    // port-forward (channel protocol v4, passed through to the runtime).
    kube_rs_streams(&c.kubeconfig);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python_streams.py");
    let py = std::process::Command::new("python3")
        .arg(&script)
        .arg(&c.kubeconfig)
        .args(["hello", "web", "8080"])
        .output()
        .expect("python3 must be installed (scripts/test-all.sh installs the kubernetes package)");
    assert!(
        py.status.success(),
        "python streams failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&py.stdout),
        String::from_utf8_lossy(&py.stderr)
    );

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
    wait_for("both endpoints", || ready_endpoints(&c, &k, "svc") == 2);
    // Each connection picks one of the two endpoints at random (numgen
    // random mod 2): all 24 landing on the same one has probability
    // 2 * 2^-24 = 1.2e-7, the false-failure rate of the check below.
    let script = format!("for i in $(seq 1 24); do wget -qO- http://{ip}/; done");
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
    assert_eq!(answers.lines().count(), 24, "{answers}");
    assert!(
        hosts
            .iter()
            .all(|h| h.starts_with("svc-") && *h != "svc-unready"),
        "{hosts:?}"
    );
    assert_eq!(hosts.len(), 2, "both ready pods answer: {hosts:?}");
    let from_host = http_get(&format!("{ip}:80"));
    assert!(from_host.contains("\r\n\r\nsvc-"), "{from_host}");

    // Cluster DNS: the Service by its short name (the search path) and its
    // full name, and a name outside the cluster refused.
    c.ok(
        &k,
        &[
            "run",
            "dns-client",
            "--image=busybox:1.36",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "cat /etc/resolv.conf; nslookup svc.default.svc.cluster.local; wget -qO- http://svc/; \
             nslookup example.invalid || echo refused",
        ],
    );
    wait_for("the DNS client completes", || {
        jsonpath(&c, &k, "dns-client", "{.status.phase}") == "Succeeded"
    });
    let dns_out = c.ok(&k, &["logs", "dns-client"]);
    assert!(dns_out.contains("nameserver 10.96.0.10"), "{dns_out}");
    assert!(
        dns_out.contains("search default.svc.cluster.local svc.cluster.local cluster.local"),
        "{dns_out}"
    );
    assert!(dns_out.contains("options ndots:5"), "{dns_out}");
    assert!(
        dns_out.contains(&format!("Address: {ip}")),
        "svc's ClusterIP {ip} resolved: {dns_out}"
    );
    assert!(
        dns_out.lines().any(|l| l.starts_with("svc-")),
        "a pod answered through the short name: {dns_out}"
    );
    assert!(dns_out.trim_end().ends_with("refused"), "{dns_out}");

    // The same pods through a NodePort, on a host address (the first
    // bridge's gateway; loopback is not one, as with kube-proxy's nftables
    // mode), and a hostPort through the portmap plugin.
    c.ok(
        &k,
        &[
            "expose",
            "deployment",
            "svc",
            "--name=svc-np",
            "--type=NodePort",
            "--port=80",
            "--target-port=8080",
        ],
    );
    let node_port = c.ok(
        &k,
        &[
            "get",
            "svc",
            "svc-np",
            "-o",
            "jsonpath={.spec.ports[0].nodePort}",
        ],
    );
    let get = |(host, port): (&str, u16)| http_get(&format!("{host}:{port}"));
    let np: u16 = node_port.parse().unwrap();
    let gateway0 = gateway(&c, &k, "container-0");
    let gateway1 = gateway(&c, &k, "container-1");
    wait_for("the NodePort to answer", || {
        get((gateway0.as_str(), np)).contains("\r\n\r\nsvc-")
    });
    let hostport = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hostport"},
        "spec": {"nodeName": "container-1", "containers": [{"name": "c", "image": "busybox:1.36",
            "command": ["sh", "-c", "mkdir -p /www && echo via-host-port > /www/index.html && httpd -f -p 8080 -h /www"],
            "ports": [{"containerPort": 8080, "hostPort": 18080}]}]}});
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&hostport.to_string()));
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/hostport",
            "--timeout=90s",
        ],
    );
    wait_for("the hostPort to answer", || {
        get((gateway1.as_str(), 18080)).ends_with("via-host-port\n")
    });

    // An image built from this machine's memcached; a client pod on the
    // other node talks to it.
    build_image(&state, &["memcached:1.6"]);
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
    assert!(
        ip.starts_with(gateway1.strip_suffix('1').unwrap()),
        "{ip} is in container-1's range ({gateway1})"
    );
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

    // In-cluster configuration: a pod of Debian's Python client lists pods
    // with its ServiceAccount's token, through the kubernetes Service.
    build_image(&state, &["python:3", "--preset", "python"]);
    c.ok(
        &k,
        &[
            "create",
            "rolebinding",
            "default-view",
            "--clusterrole=view",
            "--serviceaccount=default:default",
        ],
    );
    let incluster = "from kubernetes import client, config\n\
        config.load_incluster_config()\n\
        pods = client.CoreV1Api().list_namespaced_pod('default')\n\
        print(sorted(p.metadata.name for p in pods.items if p.metadata.name in ('hello', 'web')))\n";
    c.ok(
        &k,
        &[
            "run",
            "incluster",
            "--image=python:3",
            "--restart=Never",
            "--",
            "python3",
            "-c",
            incluster,
        ],
    );
    wait_for("the in-cluster client to finish", || {
        matches!(
            jsonpath(&c, &k, "incluster", "{.status.phase}").as_str(),
            "Succeeded" | "Failed"
        )
    });
    assert_eq!(
        c.ok(&k, &["logs", "incluster"]),
        "['hello', 'web']\n",
        "the in-cluster client's output"
    );
    assert_eq!(
        jsonpath(
            &c,
            &k,
            "incluster",
            "{.spec.volumes[0].projected.sources[0].serviceAccountToken.path}"
        ),
        "token"
    );

    // The Memcached operator's pods run real memcached: a set and a get
    // through a Service, and a killed memcached restarts its container.
    build_image(
        &state,
        &["memcached:1.6.26-alpine3.19", "--preset", "memcached"],
    );
    let sample = serde_json::json!({"apiVersion": "cache.example.com/v1alpha1", "kind": "Memcached",
        "metadata": {"name": "cache"}, "spec": {"size": 1, "containerPort": 11211}});
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&sample.to_string()));
    wait_for("the Memcached's Deployment", || {
        c.kubectl(&k, &["get", "deployment", "cache"])
            .status
            .success()
    });
    c.ok(&k, &["rollout", "status", "deploy/cache", "--timeout=90s"]);
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Available",
            "memcached/cache",
            "--timeout=90s",
        ],
    );
    c.ok(&k, &["expose", "deployment", "cache", "--port=11211"]);
    let ip = c.ok(
        &k,
        &["get", "svc", "cache", "-o", "jsonpath={.spec.clusterIP}"],
    );
    wait_for("the cache Service's endpoints", || {
        ready_endpoints(&c, &k, "cache") == 1
    });
    let script = format!(
        "printf 'set greeting 0 0 2\\r\\nhi\\r\\nquit\\r\\n' | nc {ip} 11211; \
         printf 'get greeting\\r\\nquit\\r\\n' | nc {ip} 11211"
    );
    c.ok(
        &k,
        &[
            "run",
            "cache-client",
            "--image=busybox:1.36",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_for("the cache client completes", || {
        jsonpath(&c, &k, "cache-client", "{.status.phase}") == "Succeeded"
    });
    let talk = c.ok(&k, &["logs", "cache-client"]).replace('\r', "");
    assert_eq!(talk, "STORED\nVALUE greeting 0 2\nhi\nEND\n");
    let pod = c.ok(
        &k,
        &[
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/instance=cache",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
    );
    c.ok(&k, &["exec", &pod, "--", "kill", "1"]);
    wait_for("the killed memcached to restart", || {
        jsonpath(&c, &k, &pod, "{.status.containerStatuses[0].restartCount}") == "1"
            && jsonpath(&c, &k, &pod, "{.status.containerStatuses[0].ready}") == "true"
    });

    // Lifecycle hooks: postStart runs before the container is looked at
    // again, preStop runs inside the grace period of a deletion.
    let hooks_dir = c.dir.0.join("hooks");
    std::fs::create_dir_all(&hooks_dir).unwrap();
    let hooked = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hooked"},
        "spec": {"terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "out", "hostPath": {"path": hooks_dir.display().to_string()}}],
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "out", "mountPath": "/out"}],
            "lifecycle": {
                "postStart": {"exec": {"command": ["sh", "-c", "echo started > /out/post-start"]}},
                "preStop": {"exec": {"command": ["sh", "-c", "echo stopping > /out/pre-stop"]}}}}]}});
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&hooked.to_string()));
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/hooked",
            "--timeout=90s",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(hooks_dir.join("post-start")).unwrap(),
        "started\n"
    );
    assert!(!hooks_dir.join("pre-stop").exists());
    c.ok(
        &k,
        &["delete", "pod", "hooked", "--wait=true", "--timeout=60s"],
    );
    assert_eq!(
        std::fs::read_to_string(hooks_dir.join("pre-stop")).unwrap(),
        "stopping\n"
    );

    // A memory hog over its limit is OOMKilled.
    let hog = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog"},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1.36",
            "command": ["dd", "if=/dev/zero", "of=/dev/null", "bs=256M", "count=1"],
            "resources": {"limits": {"memory": "32Mi"}}}]}});
    c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(&hog.to_string()));
    wait_for("the hog to be killed", || {
        jsonpath(&c, &k, "hog", "{.status.phase}") == "Failed"
    });
    assert_eq!(
        jsonpath(
            &c,
            &k,
            "hog",
            "{.status.containerStatuses[0].state.terminated.reason}"
        ),
        "OOMKilled"
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
    let left = common::leftovers(&state);
    assert!(left.is_empty(), "left after stopping: {left:#?}");
    assert!(
        !state.join("footprint.json").exists(),
        "the record is gone with what it named"
    );
}
