//! Container nodes end to end, on `kubeforge up --container-nodes 1`
//! (root, Debian's containerd): the exec round trip (`kubectl exec -- true`
//! less kubectl's own start, and kube-rs's `Api::exec` alone) and how soon
//! a Service's new endpoint is in the proxy's nftables rules after its
//! EndpointSlice changes. Run with
//! `cargo bench -p kubeforge --bench container_nodes`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::ok;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{AttachParams, PostParams};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e3
}

fn main() {
    let dir = std::env::temp_dir().join(format!("kubeforge-cn-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut child, kubeconfig) = common::up(&dir, &["--container-nodes", "1"]);
    // The cluster's Service rules are in its own table.
    let proxy_table = kubeforge_node::footprint::ClusterId::of(&dir).proxy_table();
    let k = kubeconfig.as_path();
    ok(
        k,
        &["run", "box", "--image=busybox:1.36", "--", "sleep", "3600"],
    );
    ok(
        k,
        &["wait", "--for=condition=Ready", "pod/box", "--timeout=120s"],
    );

    let rounds = 30;
    let (mut exec, mut get) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        ok(k, &["get", "pod", "box", "-o", "name"]);
        get.push(t.elapsed());
        let t = Instant::now();
        ok(k, &["exec", "box", "--", "true"]);
        exec.push(t.elapsed());
    }
    let (exec50, get50) = (pct(&mut exec, 0.5), pct(&mut get, 0.5));
    println!(
        "kubectl exec box -- true: p50 {exec50:.1} ms, p99 {:.1} ms; kubectl get pod (its start + one request): p50 {get50:.1} ms; exec beyond kubectl's start: {:.1} ms ({rounds} rounds)",
        pct(&mut exec, 0.99),
        exec50 - get50
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(k).expect("kubeconfig");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        let client = kube::Client::try_from(cfg).expect("client");
        let pods: kube::Api<Pod> = kube::Api::default_namespaced(client.clone());
        let mut times = Vec::new();
        for _ in 0..rounds {
            let t = Instant::now();
            let mut p = pods
                .exec("box", ["true"], &AttachParams::default().stderr(false))
                .await
                .expect("exec");
            let status = p.take_status().expect("status").await;
            assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));
            times.push(t.elapsed());
        }
        println!(
            "kube-rs Api::exec(true) round trip (WebSocket): p50 {:.1} ms, p99 {:.1} ms ({rounds} rounds)",
            pct(&mut times, 0.5),
            pct(&mut times, 0.99)
        );

        // A selectorless Service and its EndpointSlice: each round adds an
        // address and times until the proxy's rules DNAT to it.
        let svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "bench"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}}))
        .expect("service");
        kube::Api::<k8s_openapi::api::core::v1::Service>::default_namespaced(client.clone())
            .create(&PostParams::default(), &svc)
            .await
            .expect("create service");
        let slices: kube::Api<k8s_openapi::api::discovery::v1::EndpointSlice> =
            kube::Api::default_namespaced(client);
        let mut lat = Vec::new();
        for i in 0..rounds {
            let addrs: Vec<String> = (0..=i).map(|j| format!("10.244.0.{}", 100 + j)).collect();
            let slice = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "bench-x", "labels": {"kubernetes.io/service-name": "bench"}},
                "addressType": "IPv4",
                "ports": [{"name": "", "port": 8080, "protocol": "TCP"}],
                "endpoints": addrs.iter().map(|a| serde_json::json!({"addresses": [a], "conditions": {"ready": true}})).collect::<Vec<_>>()}))
            .expect("slice");
            let mut slice: k8s_openapi::api::discovery::v1::EndpointSlice = slice;
            if i > 0 {
                slice.metadata.resource_version =
                    slices.get("bench-x").await.expect("get").metadata.resource_version;
            }
            let t = Instant::now();
            if i == 0 {
                slices.create(&PostParams::default(), &slice).await.expect("create slice");
            } else {
                slices
                    .replace("bench-x", &PostParams::default(), &slice)
                    .await
                    .expect("replace slice");
            }
            let want = format!("dnat to {}:8080", addrs[i]);
            loop {
                let out = Command::new("nft")
                    .args(["list", "table", "ip", &proxy_table])
                    .output()
                    .expect("nft");
                if String::from_utf8_lossy(&out.stdout).contains(&want) {
                    break;
                }
                assert!(t.elapsed() < Duration::from_secs(10), "the rule never came");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            lat.push(t.elapsed());
        }
        println!(
            "EndpointSlice write -> new endpoint's DNAT rule in nftables: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({rounds} changes)",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            pct(&mut lat, 1.0)
        );
    });
    let _ = ok(
        k,
        &["delete", "pod", "box", "--grace-period=1", "--wait=true"],
    );
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
