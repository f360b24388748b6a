//! Extending the scheduler: a custom Filter/Score plugin registered by name
//! and enabled in a profile, an HTTP extender written with the extender
//! server library, and configuration errors naming the field.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use kubeforge_scheduler::extender::{ExtenderArgs, ExtenderFilterResult, HostPriority};
use kubeforge_scheduler::extender_server::{ExtenderHandler, serve};
use kubeforge_scheduler::framework::{
    CycleState, FilterPlugin, NodeInfo, Plugin, PodInfo, Registry, ScorePlugin, Status,
};
use kubeforge_scheduler::{SchedulerBuilder, SchedulerConfiguration};
use serde_json::json;

/// Only nodes labelled `team=<the pod's team label>`; prefers longer names.
struct TeamOnly;
impl Plugin for TeamOnly {
    fn name(&self) -> &str {
        "TeamOnly"
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}
impl FilterPlugin for TeamOnly {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.labels.get("team") {
            Some(t) if node.labels().get("team") != Some(t) => {
                Status::unschedulable("node(s) belong to another team")
            }
            _ => Status::success(),
        }
    }
}
impl ScorePlugin for TeamOnly {
    fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        ((node.name.len() as i64 * 10).min(100), Status::success())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_plugin_registered_by_name_and_enabled_in_a_profile() {
    let (_s, c) = server().await;
    node(
        &c,
        "red-1",
        "4",
        "8Gi",
        json!({"metadata": {"labels": {"team": "red"}}}),
    )
    .await;
    node(
        &c,
        "blue-1",
        "4",
        "8Gi",
        json!({"metadata": {"labels": {"team": "blue"}}}),
    )
    .await;
    node(
        &c,
        "blue-long",
        "4",
        "8Gi",
        json!({"metadata": {"labels": {"team": "blue"}}}),
    )
    .await;
    let mut reg = Registry::new();
    reg.register("TeamOnly", |_, _| Ok(Arc::new(TeamOnly) as Arc<dyn Plugin>))
        .unwrap();
    let cfg = SchedulerConfiguration::from_yaml(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: team-scheduler\n  plugins:\n    multiPoint:\n      enabled:\n      - name: TeamOnly\n        weight: 50\n",
    )
    .unwrap();
    let sched = SchedulerBuilder::new(c.clone())
        .config(cfg)
        .plugins(reg)
        .start()
        .unwrap();
    pod(&c, "blue-pod", "100m", "64Mi", json!({"metadata": {"labels": {"team": "blue"}}, "spec": {"schedulerName": "team-scheduler"}})).await;
    assert_eq!(bound(&c, "blue-pod").await, "blue-long");
    pod(&c, "green-pod", "100m", "64Mi", json!({"metadata": {"labels": {"team": "green"}}, "spec": {"schedulerName": "team-scheduler"}})).await;
    let msg = unschedulable_message(&c, "green-pod").await;
    assert!(
        msg.starts_with("0/3 nodes are available: 3 node(s) belong to another team."),
        "{msg}"
    );
    // pods for other schedulers are left alone
    pod(
        &c,
        "other",
        "100m",
        "64Mi",
        json!({"spec": {"schedulerName": "someone-else"}}),
    )
    .await;
    assert_eq!(
        node_after(&c, "other", std::time::Duration::from_millis(300)).await,
        None
    );
    sched.stop().await;
}

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(String, serde_json::Value)>>,
}
struct OnlyNodeB(Arc<Recorder>);
impl ExtenderHandler for OnlyNodeB {
    fn filter(&self, args: ExtenderArgs) -> ExtenderFilterResult {
        self.0
            .calls
            .lock()
            .unwrap()
            .push(("filter".into(), serde_json::to_value(&args).unwrap()));
        let names = args.node_names.unwrap_or_default();
        let mut failed = std::collections::HashMap::new();
        for n in &names {
            if n != "b" && n != "c" {
                failed.insert(n.clone(), "extender says no".to_string());
            }
        }
        ExtenderFilterResult {
            node_names: Some(names.into_iter().filter(|n| n == "b" || n == "c").collect()),
            failed_nodes: Some(failed),
            ..Default::default()
        }
    }
    fn prioritize(&self, args: ExtenderArgs) -> Vec<HostPriority> {
        self.0
            .calls
            .lock()
            .unwrap()
            .push(("prioritize".into(), serde_json::to_value(&args).unwrap()));
        args.node_names
            .unwrap_or_default()
            .into_iter()
            .map(|n| HostPriority {
                score: if n == "c" { 10 } else { 0 },
                host: n,
            })
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extender_receives_kube_scheduler_calls() {
    let (_s, c) = server().await;
    for n in ["a", "b", "c"] {
        node(&c, n, "4", "8Gi", json!({})).await;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let rec = Arc::new(Recorder::default());
    tokio::spawn(serve(
        listener,
        Arc::new(OnlyNodeB(rec.clone())),
        std::future::pending(),
    ));
    let cfg = SchedulerConfiguration::from_yaml(&format!(
        "extenders:\n- urlPrefix: http://{addr}/scheduler\n  filterVerb: filter\n  prioritizeVerb: prioritize\n  weight: 5\n  nodeCacheCapable: true\n"
    ))
    .unwrap();
    let sched = SchedulerBuilder::new(c.clone())
        .config(cfg)
        .start()
        .unwrap();
    pod(&c, "p", "100m", "64Mi", json!({})).await;
    assert_eq!(
        bound(&c, "p").await,
        "c",
        "filter keeps b and c, prioritize × 5 × 10 prefers c"
    );
    let calls = rec.calls.lock().unwrap().clone();
    let (verb, body) = &calls[0];
    assert_eq!(verb, "filter");
    assert_eq!(
        body["Pod"]["metadata"]["name"], "p",
        "PascalCase keys, the whole pod"
    );
    assert!(body["Nodes"].is_null(), "nodeCacheCapable sends names only");
    assert_eq!(body["NodeNames"].as_array().unwrap().len(), 3);
    assert!(
        calls
            .iter()
            .any(|(v, b)| v == "prioritize" && b["NodeNames"].as_array().unwrap().len() == 2)
    );
    sched.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_extender_is_skipped_only_when_ignorable() {
    let (_s, c) = server().await;
    node(&c, "n1", "4", "8Gi", json!({})).await;
    // nothing listens on this port
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = |ignorable: bool| {
        SchedulerConfiguration::from_yaml(&format!(
            "extenders:\n- urlPrefix: http://{dead}\n  filterVerb: filter\n  ignorable: {ignorable}\n  httpTimeout: 500ms\n"
        ))
        .unwrap()
    };
    let sched = SchedulerBuilder::new(c.clone())
        .config(cfg(false))
        .start()
        .unwrap();
    pod(&c, "strict", "100m", "64Mi", json!({})).await;
    assert_eq!(
        node_after(&c, "strict", std::time::Duration::from_millis(700)).await,
        None
    );
    let start = std::time::Instant::now();
    loop {
        let evs = events(&c, "strict").await;
        if evs
            .iter()
            .any(|(r, n)| r == "FailedScheduling" && n.contains("extender"))
        {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "{evs:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    sched.stop().await;
    let sched = SchedulerBuilder::new(c.clone())
        .config(cfg(true))
        .start()
        .unwrap();
    assert_eq!(bound(&c, "strict").await, "n1");
    sched.stop().await;
}

#[tokio::test]
async fn configuration_errors_name_the_field() {
    let (_s, c) = server().await;
    let build = |yaml: &str| {
        let cfg = SchedulerConfiguration::from_yaml(yaml).map_err(|e| e.to_string())?;
        SchedulerBuilder::new(c.clone())
            .config(cfg)
            .build_core(tokio::runtime::Handle::current())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let err = build("profiles:\n- plugins:\n    filter:\n      enabled: [{name: NoSuchPlugin}]\n")
        .unwrap_err();
    assert_eq!(
        err,
        "profiles[0].plugins.filter.enabled[0].name: Invalid value: \"NoSuchPlugin\": plugin not registered"
    );
    let err = build(
        "profiles:\n- plugins:\n    score:\n      enabled: [{name: TaintToleration, weight: -2}]\n",
    )
    .unwrap_err();
    assert!(
        err.starts_with("profiles[0].plugins.score.enabled[0].weight: Invalid value: -2"),
        "{err}"
    );
    let err = build("profiles:\n- plugins:\n    score:\n      enabled: [{name: NodePorts}]\n")
        .unwrap_err();
    assert!(
        err.contains("does not extend the score extension point"),
        "{err}"
    );
    let err = build("profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Cheapest}}\n").unwrap_err();
    assert!(err.starts_with("profiles[0].pluginConfig[0].args: Invalid value: plugin NodeResourcesFit: scoringStrategy.type: Unsupported value: \"Cheapest\""), "{err}");
    let err = build("percentageOfNodesToScore: 150\n").unwrap_err();
    assert!(
        err.starts_with("percentageOfNodesToScore: Invalid value: 150"),
        "{err}"
    );
    let err = build("profiles:\n- schedulerName: a\n- schedulerName: a\n").unwrap_err();
    assert!(
        err.starts_with("profiles[1].schedulerName: Invalid value: \"a\": Duplicate value"),
        "{err}"
    );
    // disabling everything then enabling a few is allowed
    build("profiles:\n- plugins:\n    multiPoint:\n      disabled: [{name: '*'}]\n      enabled: [{name: PrioritySort}, {name: NodeResourcesFit}, {name: DefaultBinder}]\n").unwrap();
}
