//! Workload-controller benchmarks on the in-process API server:
//!
//! 1. Deployment rollout latency: a 3-replica Deployment from create to
//!    `kubectl rollout status` success (updated = available = 3 for the
//!    current generation), with the scheduler and the node simulator (3
//!    nodes, zero delays) playing scheduler and kubelets. p50/p99 over N.
//! 2. ReplicaSet throughput: pods per second the ReplicaSet controller
//!    creates (and observes back in its status) for a 3,000-replica
//!    ReplicaSet, with nothing else running.
//!
//! `cargo bench -p kubeforge-controllers --bench workloads`
//! (env `ROLLOUTS`, `RS_REPLICAS` to change the sizes; `TRACE=1` prints the
//! stages of the first rollouts: ReplicaSet, pods, bound, running, available).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use kube::api::{Api, DeleteParams, PostParams};
use kubeforge_controllers::nodesim::{Delays, NodeSimulator, SimulatorOptions, config};
use kubeforge_controllers::workloads::{self, WorkloadController, WorkloadOptions};
use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn rollouts(n: usize) -> anyhow_free::Result<()> {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    server.set_controllers_running(true);
    server.set_graceful_pod_deletion(true);
    let client = server.client();
    let builtin = kubeforge_controllers::start_builtin(client.clone());
    let w = workloads::start(client.clone(), WorkloadOptions::default()).await?;
    let config = SchedulerConfiguration::from_yaml(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n",
    )?;
    let scheduler = SchedulerBuilder::new(client.clone())
        .config(config)
        .start()?;
    let sim = NodeSimulator::start(
        client.clone(),
        SimulatorOptions::new(config::uniform(3)?).delays(Delays::zero()),
    )
    .await?;
    let api: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut lat = Vec::new();
    for i in 0..n {
        let name = format!("web-{i}");
        let d: Deployment = serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
            "replicas": 3, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}}))?;
        let t0 = Instant::now();
        api.create(&PostParams::default(), &d).await?;
        let trace = std::env::var("TRACE").is_ok() && i < 3;
        let mut last = String::new();
        loop {
            if trace {
                let pods: Api<k8s_openapi::api::core::v1::Pod> =
                    Api::default_namespaced(client.clone());
                let rss: Api<ReplicaSet> = Api::default_namespaced(client.clone());
                let ps = pods
                    .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
                    .await?
                    .items;
                let bound = ps
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    .count();
                let running = ps
                    .iter()
                    .filter(|p| {
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    })
                    .count();
                let rs = rss
                    .list(&kube::api::ListParams::default().labels(&format!("app={name}")))
                    .await?
                    .items;
                let rs_s = rs.first().map(|r| {
                    format!(
                        "{:?}/{:?}",
                        r.status.as_ref().map(|s| s.replicas),
                        r.status.as_ref().and_then(|s| s.available_replicas)
                    )
                });
                let now = format!(
                    "rs={} {:?} pods={} bound={bound} running={running}",
                    rs.len(),
                    rs_s,
                    ps.len()
                );
                if now != last {
                    eprintln!("{:>7.1} ms {now}", t0.elapsed().as_secs_f64() * 1e3);
                    last = now;
                }
            }
            let d = api.get(&name).await?;
            let s = d.status.unwrap_or_default();
            if d.metadata.generation <= s.observed_generation
                && s.updated_replicas == Some(3)
                && s.available_replicas == Some(3)
                && s.replicas == Some(3)
            {
                break;
            }
            if t0.elapsed() > Duration::from_secs(60) {
                return Err(format!("rollout of {name} did not finish in 60 s").into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        lat.push(t0.elapsed());
        api.delete(&name, &DeleteParams::background()).await?;
    }
    lat.sort();
    println!(
        "deployment rollout (3 replicas, scheduler + simulator, zero delays), n={n}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&lat, 0.5).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
    sim.stop().await;
    scheduler.stop().await;
    w.stop().await;
    builtin.stop().await;
    Ok(())
}

async fn replicaset_throughput(replicas: usize) -> anyhow_free::Result<()> {
    let server = kubeforge_apiserver::ApiServer::in_memory().await;
    let client = server.client();
    let w = workloads::start(
        client.clone(),
        WorkloadOptions {
            enabled: vec![WorkloadController::ReplicaSet],
            ..WorkloadOptions::default()
        },
    )
    .await?;
    let api: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let rs: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "big"}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": {"app": "big"}},
        "template": {"metadata": {"labels": {"app": "big"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}))?;
    let t0 = Instant::now();
    api.create(&PostParams::default(), &rs).await?;
    loop {
        let r = api.get("big").await?;
        if r.status.is_some_and(|s| s.replicas as usize == replicas) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            return Err("ReplicaSet did not reach its replicas in 300 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let took = t0.elapsed();
    println!(
        "replicaset controller: {replicas} pods created and counted in {:.2} s = {:.0} pods/s",
        took.as_secs_f64(),
        replicas as f64 / took.as_secs_f64()
    );
    w.stop().await;
    Ok(())
}

/// A tiny boxed-error result for a binary without anyhow.
mod anyhow_free {
    pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;
}

fn main() -> anyhow_free::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        rollouts(env_usize("ROLLOUTS", 30)).await?;
        replicaset_throughput(env_usize("RS_REPLICAS", 3000)).await
    })
}
