//! A pod's status from what the runtime reports, as the kubelet's
//! `generateAPIPodStatus` writes it: container states with last states and
//! restart counts, the phase (`getPhase`), and the conditions
//! PodReadyToStartContainers, Initialized, Ready, ContainersReady and
//! PodScheduled with their reasons and transition times.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{Value, json};

use crate::cri::api;

/// One container run as the runtime reports it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Run {
    /// The runtime's container id.
    pub id: String,
    /// Which run this is (the restart count when it was made).
    pub attempt: u32,
    /// CREATED, RUNNING, EXITED or UNKNOWN.
    pub state: i32,
    /// Unix nanoseconds.
    pub started_at: i64,
    /// Unix nanoseconds.
    pub finished_at: i64,
    /// The exit code, when exited.
    pub exit_code: i32,
    /// `Completed`, `Error`, `OOMKilled`.
    pub reason: String,
    /// The runtime's message.
    pub message: String,
    /// The image the runtime ran (`docker.io/library/busybox@sha256:…`).
    pub image_ref: String,
}

impl Run {
    /// From the runtime's ContainerStatus.
    pub fn from_status(s: &api::ContainerStatus) -> Run {
        Run {
            id: s.id.clone(),
            attempt: s.metadata.as_ref().map_or(0, |m| m.attempt),
            state: s.state,
            started_at: s.started_at,
            finished_at: s.finished_at,
            exit_code: s.exit_code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            image_ref: s.image_ref.clone(),
        }
    }

    /// Whether the container is running.
    pub fn running(&self) -> bool {
        self.state == api::ContainerState::ContainerRunning as i32
    }

    /// Whether the container has exited.
    pub fn exited(&self) -> bool {
        self.state == api::ContainerState::ContainerExited as i32
            || self.state == api::ContainerState::ContainerUnknown as i32 && self.finished_at > 0
    }

    /// Whether it exited with code 0.
    pub fn succeeded(&self) -> bool {
        self.exited() && self.exit_code == 0
    }
}

/// What the agent knows of one container beyond the runtime: its latest
/// run, the run before (for `lastState`), why it is waiting, whether it is
/// ready.
#[derive(Clone, Debug, Default)]
pub struct ContainerView {
    /// The latest run.
    pub latest: Option<Run>,
    /// The run before it.
    pub previous: Option<Run>,
    /// `(reason, message)` while waiting (ErrImagePull, CrashLoopBackOff …).
    pub waiting: Option<(String, String)>,
    /// The readiness probe's verdict (true without a probe once running).
    pub ready: bool,
    /// The startup probe has succeeded (or there is none).
    pub started: bool,
}

/// Everything a pod's status is computed from.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The sandbox is ready and has its network.
    pub sandbox_ready: bool,
    /// The pod's IPs, first the primary.
    pub pod_ips: Vec<String>,
    /// The node's IP.
    pub host_ip: String,
    /// Per container name (init and regular).
    pub containers: HashMap<String, ContainerView>,
    /// When the agent first took the pod (RFC 3339).
    pub start_time: Option<String>,
}

/// An RFC 3339 UTC time in seconds from Unix nanoseconds.
pub fn rfc3339_ns(ns: i64) -> Option<String> {
    if ns <= 0 {
        return None;
    }
    jiff::Timestamp::from_nanosecond(i128::from(ns))
        .ok()
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// Now as RFC 3339 seconds.
pub fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn terminated(run: &Run) -> Value {
    let mut t = json!({
        "exitCode": run.exit_code,
        "reason": if run.reason.is_empty() {
            if run.exit_code == 0 { "Completed" } else { "Error" }
        } else {
            run.reason.as_str()
        },
        "containerID": format!("containerd://{}", run.id),
    });
    if !run.message.is_empty() {
        t["message"] = json!(run.message);
    }
    if let Some(s) = rfc3339_ns(run.started_at) {
        t["startedAt"] = json!(s);
    }
    if let Some(f) = rfc3339_ns(run.finished_at) {
        t["finishedAt"] = json!(f);
    }
    t
}

/// One container's status entry.
fn container_status(c: &Container, view: &ContainerView, default_waiting: &str) -> Value {
    let image = c.image.clone().unwrap_or_default();
    let mut s = json!({
        "name": c.name,
        "image": image,
        "imageID": "",
        "ready": false,
        "restartCount": 0,
        "started": false,
        "lastState": {},
    });
    let waiting = |reason: &str, message: &str| {
        let mut w = json!({"reason": reason});
        if !message.is_empty() {
            w["message"] = json!(message);
        }
        json!({"waiting": w})
    };
    match &view.latest {
        None => {
            let (reason, message) = view
                .waiting
                .clone()
                .unwrap_or_else(|| (default_waiting.to_string(), String::new()));
            s["state"] = waiting(&reason, &message);
        }
        Some(run) => {
            s["restartCount"] = json!(run.attempt);
            s["containerID"] = json!(format!("containerd://{}", run.id));
            if !run.image_ref.is_empty() {
                s["imageID"] = json!(run.image_ref);
            }
            if let Some(prev) = view.previous.as_ref().filter(|p| p.exited()) {
                s["lastState"] = json!({"terminated": terminated(prev)});
            }
            if run.running() {
                let mut r = json!({});
                if let Some(t) = rfc3339_ns(run.started_at) {
                    r["startedAt"] = json!(t);
                }
                s["state"] = json!({"running": r});
                s["ready"] = json!(view.ready);
                s["started"] = json!(view.started);
            } else if run.exited() {
                match &view.waiting {
                    // Waiting to restart: the run that ended is the last state.
                    Some((reason, message)) => {
                        s["state"] = waiting(reason, message);
                        s["lastState"] = json!({"terminated": terminated(run)});
                    }
                    None => s["state"] = json!({"terminated": terminated(run)}),
                }
            } else {
                let (reason, message) = view
                    .waiting
                    .clone()
                    .unwrap_or_else(|| ("ContainerCreating".to_string(), String::new()));
                s["state"] = waiting(&reason, &message);
            }
        }
    }
    s
}

fn names(list: &[&str]) -> String {
    format!("[{}]", list.join(" "))
}

/// The pod's status as a JSON object for a `/status` merge patch.
pub fn pod_status(pod: &Pod, obs: &Observed) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let old = pod.status.clone().unwrap_or_default();
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let inits = spec.init_containers.clone().unwrap_or_default();
    let view = |name: &str| obs.containers.get(name).cloned().unwrap_or_default();

    // Init containers: done in order, one at a time.
    let mut init_statuses = Vec::new();
    let mut init_incomplete = Vec::new();
    let mut init_failed = false;
    for c in &inits {
        let v = view(&c.name);
        let done = v.latest.as_ref().is_some_and(Run::succeeded) && v.waiting.is_none();
        if !done {
            init_incomplete.push(c.name.as_str());
        }
        let failed = v
            .latest
            .as_ref()
            .is_some_and(|r| r.exited() && r.exit_code != 0);
        if failed && policy == "Never" {
            init_failed = true;
        }
        init_statuses.push(container_status(c, &v, "PodInitializing"));
    }
    let initialized = init_incomplete.is_empty();

    let mut statuses = Vec::new();
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    let mut unready = Vec::new();
    for c in &spec.containers {
        let v = view(&c.name);
        let default = if initialized {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let st = container_status(c, &v, default);
        if st["state"].get("running").is_some() {
            running += 1;
        } else if let Some(t) = st["state"].get("terminated") {
            stopped += 1;
            if t["exitCode"] == 0 {
                succeeded += 1;
            }
        } else if st["lastState"].get("terminated").is_some() {
            stopped += 1;
            if st["lastState"]["terminated"]["exitCode"] == 0 {
                succeeded += 1;
            }
        } else {
            waiting += 1;
        }
        if st["ready"] != true {
            unready.push(c.name.as_str());
        }
        statuses.push(st);
    }

    let phase = if init_failed {
        "Failed"
    } else if !initialized || waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        if policy == "Always" {
            "Running"
        } else if stopped == succeeded {
            "Succeeded"
        } else if policy == "Never" {
            "Failed"
        } else {
            "Running"
        }
    } else {
        "Pending"
    };

    // A finished pod stays finished (the kubelet never leaves a terminal phase).
    let phase = match old.phase.as_deref() {
        Some(p @ ("Succeeded" | "Failed")) => p,
        _ => phase,
    };
    let now = now();
    let old_conditions = old.conditions.clone().unwrap_or_default();
    let cond = |ty: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let since = old_conditions
            .iter()
            .find(|c| c.type_ == ty && c.status == status)
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| json!(now));
        let mut c = json!({"type": ty, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
        if let Some(r) = reason {
            c["reason"] = json!(r);
        }
        if let Some(m) = message {
            c["message"] = json!(m);
        }
        c
    };
    let terminal = phase == "Succeeded" || phase == "Failed";
    let containers_ready = unready.is_empty() && !terminal;
    let (ready_reason, ready_message) = if terminal {
        (Some("PodCompleted"), None)
    } else if containers_ready {
        (None, None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                names(&unready)
            )),
        )
    };
    let mut conditions = vec![
        cond("PodReadyToStartContainers", obs.sandbox_ready, None, None),
        if initialized {
            cond(
                "Initialized",
                true,
                terminal.then_some("PodCompleted"),
                None,
            )
        } else {
            cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: {}",
                    names(&init_incomplete)
                )),
            )
        },
        cond(
            "Ready",
            containers_ready,
            ready_reason,
            ready_message.clone(),
        ),
        cond(
            "ContainersReady",
            containers_ready,
            ready_reason,
            ready_message,
        ),
    ];
    if let Some(sched) = old_conditions.iter().find(|c| c.type_ == "PodScheduled") {
        conditions.push(serde_json::to_value(sched).unwrap_or_default());
    } else {
        conditions.push(cond("PodScheduled", true, None, None));
    }

    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": obs.host_ip,
        "hostIPs": [{"ip": obs.host_ip}],
        "containerStatuses": statuses,
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    if let Some(ip) = obs.pod_ips.first() {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!(
            obs.pod_ips
                .iter()
                .map(|ip| json!({"ip": ip}))
                .collect::<Vec<_>>()
        );
    }
    let start = old
        .start_time
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .or_else(|| obs.start_time.clone().map(Value::String));
    if let Some(t) = start {
        status["startTime"] = t;
    }
    if let Some(q) = &old.qos_class {
        status["qosClass"] = json!(q);
    }
    status
}

/// The same status without its times, to tell whether a write is needed.
pub fn without_times(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s["conditions"].as_array_mut() {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastTransitionTime");
                o.remove("lastProbeTime");
            }
        }
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "u"}, "spec": spec}),
        )
        .unwrap()
    }

    fn run(attempt: u32, state: api::ContainerState, exit: i32) -> Run {
        Run {
            id: format!("id{attempt}"),
            attempt,
            state: state as i32,
            started_at: 1_700_000_000_000_000_000,
            finished_at: if state == api::ContainerState::ContainerExited {
                1_700_000_001_000_000_000
            } else {
                0
            },
            exit_code: exit,
            ..Default::default()
        }
    }

    fn observed(views: &[(&str, ContainerView)]) -> Observed {
        Observed {
            sandbox_ready: true,
            pod_ips: vec!["10.244.0.5".into()],
            host_ip: "127.0.0.1".into(),
            containers: views
                .iter()
                .cloned()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
            start_time: Some("2026-12-04T00:00:00Z".into()),
        }
    }

    #[test]
    fn a_running_container_makes_a_ready_running_pod() {
        let p = pod(json!({"containers": [{"name": "c", "image": "busybox:1.36"}]}));
        let v = ContainerView {
            latest: Some(run(0, api::ContainerState::ContainerRunning, 0)),
            ready: true,
            started: true,
            ..Default::default()
        };
        let s = pod_status(&p, &observed(&[("c", v)]));
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["podIP"], "10.244.0.5");
        assert_eq!(s["containerStatuses"][0]["containerID"], "containerd://id0");
        assert!(s["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let types: Vec<_> = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            types,
            [
                ("PodReadyToStartContainers", "True"),
                ("Initialized", "True"),
                ("Ready", "True"),
                ("ContainersReady", "True"),
                ("PodScheduled", "True")
            ]
        );
    }

    #[test]
    fn a_crash_loop_shows_waiting_with_the_last_run() {
        let p = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
        let v = ContainerView {
            latest: Some(run(3, api::ContainerState::ContainerExited, 1)),
            previous: Some(run(2, api::ContainerState::ContainerExited, 1)),
            waiting: Some((
                "CrashLoopBackOff".into(),
                "back-off 40s restarting failed container=c pod=p_d(u)".into(),
            )),
            ..Default::default()
        };
        let s = pod_status(&p, &observed(&[("c", v)]));
        let c = &s["containerStatuses"][0];
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
        assert_eq!(c["restartCount"], 3);
        assert_eq!(s["phase"], "Running");
        assert_eq!(s["conditions"][2]["reason"], "ContainersNotReady");
        assert_eq!(
            s["conditions"][2]["message"],
            "containers with unready status: [c]"
        );
    }

    #[test]
    fn phases_follow_the_restart_policy() {
        for (policy, exit, want) in [
            ("Never", 0, "Succeeded"),
            ("Never", 2, "Failed"),
            ("OnFailure", 0, "Succeeded"),
            ("Always", 0, "Running"),
        ] {
            let p = pod(json!({"restartPolicy": policy, "containers": [{"name": "c"}]}));
            let v = ContainerView {
                latest: Some(run(0, api::ContainerState::ContainerExited, exit)),
                ..Default::default()
            };
            assert_eq!(
                pod_status(&p, &observed(&[("c", v)]))["phase"],
                want,
                "{policy} {exit}"
            );
        }
    }

    #[test]
    fn init_containers_hold_the_pod_pending() {
        let p = pod(
            json!({"initContainers": [{"name": "i1"}, {"name": "i2"}], "containers": [{"name": "c"}]}),
        );
        let v = ContainerView {
            latest: Some(run(0, api::ContainerState::ContainerExited, 0)),
            ..Default::default()
        };
        let s = pod_status(&p, &observed(&[("i1", v)]));
        assert_eq!(s["phase"], "Pending");
        assert_eq!(
            s["conditions"][1]["message"],
            "containers with incomplete status: [i2]"
        );
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["reason"],
            "PodInitializing"
        );
        assert_eq!(
            s["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
    }
}
