//! One pod's worker, the kubelet's `SyncPod` loop for a single pod: it
//! reads what the runtime has for the pod (found by the pod's UID label,
//! so a restarted agent picks up where it was), makes the sandbox, runs
//! init containers in order and then the containers, restarts them as the
//! restart policy says with CrashLoopBackOff's doubling delay, writes the
//! pod's status when it changes, and on deletion stops everything within
//! the grace period and removes the pod.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::Value;
use tokio::sync::watch;

use crate::agent::Shared;
use crate::cri::api;
use crate::events::Kind;
use crate::pod::{self, ContainerInputs};
use crate::probes::ContainerProbes;
use crate::status::{self, ContainerView, Observed, Run};
use crate::volumes::PodVolumes;

/// CrashLoopBackOff's and image pulls' first delay.
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
/// Their cap.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);

/// One key's backoff, as client-go's `flowcontrol.Backoff` keeps it: the
/// delay doubles on each `next` up to the cap and starts over when nothing
/// happened for twice the cap.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    /// The current delay.
    pub delay: Duration,
    /// When `next` was last called (Unix time).
    pub last: Duration,
}

/// The time since the Unix epoch.
pub fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl Backoff {
    fn expired(event: Duration, last: Duration) -> bool {
        event.saturating_sub(last) > BACKOFF_MAX * 2
    }

    /// Whether an event at `event` is still inside the backoff.
    pub fn in_backoff_since(entry: Option<&Backoff>, event: Duration, now: Duration) -> bool {
        match entry {
            None => false,
            Some(b) if Backoff::expired(event, b.last) => false,
            Some(b) => now.saturating_sub(event) < b.delay,
        }
    }

    /// Record a restart at `now` after an event at `event`.
    pub fn next(entry: &mut Option<Backoff>, event: Duration, now: Duration) {
        let delay = match entry {
            Some(b) if !Backoff::expired(event, b.last) => (b.delay * 2).min(BACKOFF_MAX),
            _ => BACKOFF_INITIAL,
        };
        *entry = Some(Backoff { delay, last: now });
    }
}

/// What the worker remembers between syncs (everything else is read
/// from the runtime each time).
#[derive(Default)]
struct Memory {
    waiting: HashMap<String, (String, String)>,
    restart_backoff: HashMap<String, Option<Backoff>>,
    pull_backoff: HashMap<String, Option<Backoff>>,
    pull_failed_at: HashMap<String, Duration>,
    last_status: Option<Value>,
    volumes: PodVolumes,
    volumes_ready: bool,
    start_time: Option<String>,
    events_sent: HashMap<String, String>,
    probes: HashMap<String, ContainerProbes>,
}

/// Run one pod until it is gone from the API (its sender dropped or set
/// to `None`) or the agent stops.
pub(crate) async fn run(
    shared: Arc<Shared>,
    uid: String,
    mut rx: watch::Receiver<Option<Arc<Pod>>>,
) {
    let mut mem = Memory::default();
    loop {
        let current = rx.borrow_and_update().clone();
        let wait = match current {
            None => {
                tear_down(&shared, &uid, &mut mem).await;
                return;
            }
            Some(pod) => match sync(&shared, &pod, &mut mem).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(pod = pod::identity(&pod).0, error = %e, "sync failed");
                    Duration::from_secs(1)
                }
            },
        };
        tokio::select! {
            changed = rx.changed() => if changed.is_err() {
                tear_down(&shared, &uid, &mut mem).await;
                return;
            },
            _ = tokio::time::sleep(wait) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// The pod's sandboxes, newest attempt first.
async fn sandboxes(
    shared: &Shared,
    uid: &str,
) -> Result<Vec<api::PodSandbox>, crate::cri::CriError> {
    let mut rt = shared.cri.runtime.clone();
    let mut items = rt
        .list_pod_sandbox(api::ListPodSandboxRequest {
            filter: Some(api::PodSandboxFilter {
                label_selector: HashMap::from([(pod::POD_UID.to_string(), uid.to_string())]),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .items;
    items.sort_by_key(|s| std::cmp::Reverse(s.metadata.as_ref().map_or(0, |m| m.attempt)));
    Ok(items)
}

/// The runs of each container in `sandbox`, newest first.
async fn runs(
    shared: &Shared,
    sandbox: &str,
) -> Result<HashMap<String, Vec<Run>>, crate::cri::CriError> {
    let mut rt = shared.cri.runtime.clone();
    let list = rt
        .list_containers(api::ListContainersRequest {
            filter: Some(api::ContainerFilter {
                pod_sandbox_id: sandbox.to_string(),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .containers;
    let mut out: HashMap<String, Vec<Run>> = HashMap::new();
    for c in list {
        let Some(name) = c.labels.get(pod::CONTAINER_NAME).cloned() else {
            continue;
        };
        let status = rt
            .container_status(api::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await?
            .into_inner()
            .status;
        if let Some(s) = status {
            out.entry(name).or_default().push(Run::from_status(&s));
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(|r| std::cmp::Reverse(r.attempt));
    }
    Ok(out)
}

fn is_ready(s: &api::PodSandbox) -> bool {
    s.state == api::PodSandboxState::SandboxReady as i32
}

/// Whether container `c` should run again after `run` ended.
fn should_restart(policy: &str, run: &Run) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => run.exit_code != 0,
        _ => true,
    }
}

/// One sync: returns how long until the next one is due.
async fn sync(
    shared: &Arc<Shared>,
    pod: &Pod,
    mem: &mut Memory,
) -> Result<Duration, crate::NodeError> {
    let (name, ns, uid) = pod::identity(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(30);
        kill_pod(shared, pod, grace).await;
        mem.volumes.tear_down(&shared.cfg.root_dir, uid);
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        return Ok(Duration::from_secs(1));
    }
    let old_phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    let terminal = old_phase == "Succeeded" || old_phase == "Failed";
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    if mem.start_time.is_none() {
        mem.start_time = Some(status::now());
    }

    // The sandbox.
    let boxes = sandboxes(shared, uid).await?;
    let ready = boxes.iter().find(|s| is_ready(s)).cloned();
    let attempt = boxes
        .first()
        .and_then(|s| s.metadata.as_ref())
        .map_or(0, |m| m.attempt + 1);
    let mut sandbox_cfg = pod::sandbox_config(
        pod,
        attempt,
        &shared.log_root(),
        &shared.cfg.dns,
        pod::NodePlace {
            name: &shared.cfg.node_name,
            cgroup: &shared.cgroup_root(),
        },
    );
    let mut may_start = true;
    let sandbox_id = match ready {
        Some(sb) => {
            if let Some(m) = sandbox_cfg.metadata.as_mut() {
                m.attempt = sb.metadata.as_ref().map_or(0, |m| m.attempt);
            }
            // Older sandboxes go.
            for old in boxes.iter().filter(|s| s.id != sb.id) {
                remove_sandbox(shared, &old.id).await;
            }
            Some(sb.id)
        }
        // Finished: report from the last sandbox's containers, start nothing.
        None if terminal => {
            may_start = false;
            boxes.first().map(|b| b.id.clone())
        }
        None if !boxes.is_empty()
            && policy == "Never"
            && attempt > 0
            && ran_to_end(shared, &boxes).await =>
        {
            // Everything ran once and the sandbox is gone: nothing restarts.
            may_start = false;
            boxes.first().map(|b| b.id.clone())
        }
        None => {
            for old in &boxes {
                remove_sandbox(shared, &old.id).await;
            }
            if let Err(e) = std::fs::create_dir_all(pod::log_directory(&shared.log_root(), pod)) {
                tracing::warn!(error = %e, "cannot create the pod's log directory");
            }
            tracing::debug!(pod = name, uid, attempt, "creating the sandbox");
            let mut rt = shared.cri.runtime.clone();
            match rt
                .run_pod_sandbox(api::RunPodSandboxRequest {
                    config: Some(sandbox_cfg.clone()),
                    runtime_handler: String::new(),
                })
                .await
            {
                Ok(r) => Some(r.into_inner().pod_sandbox_id),
                Err(e) => {
                    let msg = format!("Failed to create pod sandbox: {}", e.message());
                    event_once(
                        shared,
                        mem,
                        pod,
                        None,
                        Kind::Warning,
                        "FailedCreatePodSandBox",
                        &msg,
                    )
                    .await;
                    write_status(
                        shared,
                        pod,
                        mem,
                        Observed {
                            host_ip: shared.host_ip.clone(),
                            start_time: mem.start_time.clone(),
                            ..Default::default()
                        },
                    )
                    .await?;
                    return Ok(Duration::from_secs(2));
                }
            }
        }
    };

    let mut obs = Observed {
        host_ip: shared.host_ip.clone(),
        start_time: mem.start_time.clone(),
        ..Default::default()
    };
    let Some(sandbox_id) = sandbox_id else {
        // Finished and its sandbox gone: the status written stays.
        return Ok(Duration::from_secs(5));
    };
    let mut rt = shared.cri.runtime.clone();
    let sb = rt
        .pod_sandbox_status(api::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox_id.clone(),
            verbose: false,
        })
        .await?
        .into_inner()
        .status
        .unwrap_or_default();
    obs.sandbox_ready = is_ready_status(&sb);
    if let Some(net) = &sb.network {
        if !net.ip.is_empty() {
            obs.pod_ips.push(net.ip.clone());
        }
        obs.pod_ips
            .extend(net.additional_ips.iter().map(|i| i.ip.clone()));
    }
    if spec.host_network.unwrap_or(false) {
        obs.pod_ips = vec![shared.host_ip.clone()];
    }
    if obs.pod_ips.is_empty() {
        // A stopped sandbox has no network; the pod keeps the IPs it had.
        obs.pod_ips = pod
            .status
            .iter()
            .flat_map(|s| s.pod_ips.iter().flatten())
            .map(|p| p.ip.clone())
            .collect();
    }

    if !mem.volumes_ready
        || mem
            .volumes
            .renew_at
            .is_some_and(|t| t <= std::time::Instant::now())
    {
        let ctx = shared.env_context(&obs).await;
        match mem
            .volumes
            .set_up(&shared.client, &shared.cfg.root_dir, pod, &ctx)
            .await
        {
            Ok(()) => mem.volumes_ready = true,
            Err(e) => {
                event_once(
                    shared,
                    mem,
                    pod,
                    None,
                    Kind::Warning,
                    "FailedMount",
                    &e.to_string(),
                )
                .await;
                for c in spec
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(spec.containers.iter())
                {
                    mem.waiting
                        .insert(c.name.clone(), ("ContainerCreating".into(), String::new()));
                }
                write_status(shared, pod, mem, obs).await?;
                return Ok(Duration::from_secs(2));
            }
        }
    }

    let all_runs = runs(shared, &sandbox_id).await?;
    let now = unix_now();
    let mut wake = Duration::from_secs(1);
    // Init containers, in order: the first not yet done runs.
    let mut initialized = true;
    if may_start {
        for c in spec.init_containers.iter().flatten() {
            let latest = all_runs.get(&c.name).and_then(|r| r.first());
            match latest {
                Some(r) if r.succeeded() => {
                    mem.waiting.remove(&c.name);
                    continue;
                }
                Some(r) if r.running() => {
                    initialized = false;
                    break;
                }
                Some(r) if r.exited() => {
                    initialized = false;
                    if policy == "Never" {
                        break;
                    }
                    if let Some(w) =
                        restart(shared, pod, c, &sandbox_id, &sandbox_cfg, r, mem, &obs, now).await
                    {
                        wake = wake.min(w);
                    }
                    break;
                }
                _ => {
                    initialized = false;
                    if let Some(w) =
                        start(shared, pod, c, &sandbox_id, &sandbox_cfg, 0, mem, &obs).await
                    {
                        wake = wake.min(w);
                    }
                    break;
                }
            }
        }
    }
    if initialized && may_start {
        for c in &spec.containers {
            let latest = all_runs.get(&c.name).and_then(|r| r.first());
            match latest {
                Some(r) if r.running() => {
                    mem.waiting.remove(&c.name);
                }
                Some(r) if r.exited() => {
                    if !should_restart(&policy, r) {
                        mem.waiting.remove(&c.name);
                        continue;
                    }
                    if let Some(w) =
                        restart(shared, pod, c, &sandbox_id, &sandbox_cfg, r, mem, &obs, now).await
                    {
                        wake = wake.min(w);
                    }
                }
                Some(_) => {}
                None => {
                    if let Some(w) =
                        start(shared, pod, c, &sandbox_id, &sandbox_cfg, 0, mem, &obs).await
                    {
                        wake = wake.min(w);
                    }
                }
            }
        }
    }

    // What the runtime has now, after any starts.
    let all_runs = runs(shared, &sandbox_id).await?;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let rs = all_runs.get(&c.name);
        let latest = rs.and_then(|r| r.first().cloned());
        if latest.as_ref().is_some_and(Run::running) {
            mem.waiting.remove(&c.name);
        }
        // Old runs beyond the previous one are removed (their logs too).
        for old in rs.into_iter().flatten().skip(2) {
            let mut rt = shared.cri.runtime.clone();
            let _ = rt
                .remove_container(api::RemoveContainerRequest {
                    container_id: old.id.clone(),
                })
                .await;
        }
        let running = latest.as_ref().is_some_and(Run::running);
        let (mut ready, mut started) = (running, running);
        let probed =
            c.startup_probe.is_some() || c.readiness_probe.is_some() || c.liveness_probe.is_some();
        if let (true, true, Some(run)) = (running, probed, latest.as_ref()) {
            let fresh = mem.probes.get(&c.name).is_none_or(|p| p.id != run.id);
            if fresh {
                let age =
                    unix_now().saturating_sub(Duration::from_nanos(run.started_at.max(0) as u64));
                mem.probes
                    .insert(c.name.clone(), ContainerProbes::new(c, &run.id, age));
            }
            let ip = obs.pod_ips.first().cloned().unwrap_or_default();
            if let Some(p) = mem.probes.get_mut(&c.name) {
                let verdict = p.run(&shared.cri, c, &ip).await;
                ready = verdict.ready;
                started = verdict.started;
                if let Some(next) = verdict.next {
                    wake = wake.min(
                        next.saturating_duration_since(std::time::Instant::now())
                            .max(Duration::from_millis(50)),
                    );
                }
                for f in &verdict.failures {
                    shared
                        .events
                        .pod(pod, Some(&c.name), Kind::Warning, "Unhealthy", f)
                        .await;
                }
                if let Some(msg) = verdict.kill {
                    shared
                        .events
                        .pod(pod, Some(&c.name), Kind::Normal, "Killing", &msg)
                        .await;
                    let grace = pod::termination_grace(pod).max(2);
                    let mut rt = shared.cri.runtime.clone();
                    let _ = rt
                        .stop_container(api::StopContainerRequest {
                            container_id: run.id.clone(),
                            timeout: grace,
                        })
                        .await;
                    mem.probes.remove(&c.name);
                    wake = Duration::from_millis(50);
                }
            }
        }
        obs.containers.insert(
            c.name.clone(),
            ContainerView {
                latest,
                previous: rs.and_then(|r| r.get(1).cloned()),
                waiting: mem.waiting.get(&c.name).cloned(),
                ready,
                started,
            },
        );
    }
    let obs_ready = obs.sandbox_ready;
    let phase = write_status(shared, pod, mem, obs).await?;
    if (phase == "Succeeded" || phase == "Failed") && obs_ready {
        // A finished pod keeps its containers' records but not its sandbox.
        let mut rt = shared.cri.runtime.clone();
        let _ = rt
            .stop_pod_sandbox(api::StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id,
            })
            .await;
    }
    Ok(wake)
}

fn is_ready_status(s: &api::PodSandboxStatus) -> bool {
    s.state == api::PodSandboxState::SandboxReady as i32
}

/// Whether every container of the newest sandbox has exited.
async fn ran_to_end(shared: &Shared, boxes: &[api::PodSandbox]) -> bool {
    let Some(sb) = boxes.first() else {
        return false;
    };
    match runs(shared, &sb.id).await {
        Ok(r) => !r.is_empty() && r.values().all(|v| v.first().is_some_and(Run::exited)),
        Err(_) => false,
    }
}

/// Restart `c` after `last` ended, unless CrashLoopBackOff holds it back;
/// returns when to look again.
#[allow(clippy::too_many_arguments)]
async fn restart(
    shared: &Arc<Shared>,
    pod: &Pod,
    c: &Container,
    sandbox: &str,
    sandbox_cfg: &api::PodSandboxConfig,
    last: &Run,
    mem: &mut Memory,
    obs: &Observed,
    now: Duration,
) -> Option<Duration> {
    let finished = Duration::from_nanos(last.finished_at.max(0) as u64);
    let entry = mem.restart_backoff.entry(c.name.clone()).or_default();
    if Backoff::in_backoff_since(entry.as_ref(), finished, now) {
        let delay = entry.map(|b| b.delay).unwrap_or(BACKOFF_INITIAL);
        let (name, ns, uid) = pod::identity(pod);
        let msg = format!(
            "back-off {} restarting failed container={} pod={name}_{ns}({uid})",
            go_duration(delay),
            c.name
        );
        mem.waiting
            .insert(c.name.clone(), ("CrashLoopBackOff".into(), msg.clone()));
        event_once(
            shared,
            mem,
            pod,
            Some(&c.name),
            Kind::Warning,
            "BackOff",
            &format!(
                "Back-off restarting failed container {} in pod {name}_{ns}({uid})",
                c.name
            ),
        )
        .await;
        let left = (finished + delay).saturating_sub(now);
        return Some(left.max(Duration::from_millis(50)));
    }
    Backoff::next(entry, finished, now);
    start(
        shared,
        pod,
        c,
        sandbox,
        sandbox_cfg,
        last.attempt + 1,
        mem,
        obs,
    )
    .await
}

/// `10s`, `1m20s`, `5m0s`, as Go prints a duration.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Pull `c`'s image if needed, make and start the container; returns when
/// to look again if something holds it back.
#[allow(clippy::too_many_arguments)]
async fn start(
    shared: &Arc<Shared>,
    pod: &Pod,
    c: &Container,
    sandbox: &str,
    sandbox_cfg: &api::PodSandboxConfig,
    restart_count: u32,
    mem: &mut Memory,
    obs: &Observed,
) -> Option<Duration> {
    let image = c.image.clone().unwrap_or_default();
    let image_ref = match ensure_image(shared, pod, c, sandbox_cfg, mem).await {
        Ok(r) => r,
        Err(wait) => return Some(wait),
    };
    let ctx = shared.env_context(obs).await;
    let env = match crate::env::container_env(&shared.client, pod, c, &ctx).await {
        Ok(e) => e,
        Err(e) => {
            mem.waiting.insert(
                c.name.clone(),
                ("CreateContainerConfigError".into(), e.0.clone()),
            );
            event_once(
                shared,
                mem,
                pod,
                Some(&c.name),
                Kind::Warning,
                "Failed",
                &format!("Error: {}", e.0),
            )
            .await;
            return Some(Duration::from_secs(2));
        }
    };
    let mounts = match mem.volumes.mounts(c) {
        Ok(m) => m,
        Err(e) => {
            mem.waiting.insert(
                c.name.clone(),
                ("CreateContainerConfigError".into(), e.to_string()),
            );
            return Some(Duration::from_secs(2));
        }
    };
    let config = pod::container_config(
        pod,
        c,
        restart_count,
        ContainerInputs {
            env,
            mounts,
            image: image_ref,
            oom_score_adj: pod::oom_score_adj(pod, c, shared.memory),
        },
    );
    let mut rt = shared.cri.runtime.clone();
    let id = match rt
        .create_container(api::CreateContainerRequest {
            pod_sandbox_id: sandbox.to_string(),
            config: Some(config),
            sandbox_config: Some(sandbox_cfg.clone()),
        })
        .await
    {
        Ok(r) => r.into_inner().container_id,
        Err(e) => {
            let msg = e.message().to_string();
            mem.waiting
                .insert(c.name.clone(), ("CreateContainerError".into(), msg.clone()));
            event_once(
                shared,
                mem,
                pod,
                Some(&c.name),
                Kind::Warning,
                "Failed",
                &format!("Error: {msg}"),
            )
            .await;
            return Some(Duration::from_secs(2));
        }
    };
    event_once(
        shared,
        mem,
        pod,
        Some(&c.name),
        Kind::Normal,
        "Created",
        &format!("Created container {}", c.name),
    )
    .await;
    if let Err(e) = rt
        .start_container(api::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
    {
        let msg = e.message().to_string();
        mem.waiting
            .insert(c.name.clone(), ("RunContainerError".into(), msg.clone()));
        event_once(
            shared,
            mem,
            pod,
            Some(&c.name),
            Kind::Warning,
            "Failed",
            &format!("Error: {msg}"),
        )
        .await;
        return Some(Duration::from_secs(2));
    }
    mem.waiting.remove(&c.name);
    mem.events_sent.remove(&format!("{}/Failed", c.name));
    event_once(
        shared,
        mem,
        pod,
        Some(&c.name),
        Kind::Normal,
        "Started",
        &format!("Started container {}", c.name),
    )
    .await;
    tracing::debug!(container = %c.name, %image, "started");
    if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        // The kubelet runs postStart before it looks at the container
        // again; a failed hook kills the container, which then restarts
        // as the restart policy says.
        let ip = obs.pod_ips.first().cloned().unwrap_or_default();
        let grace = pod::termination_grace(pod);
        if let Err(e) = crate::probes::run_hook(&shared.cri, &id, c, hook, &ip, HOOK_TIMEOUT).await
        {
            tracing::info!(container = %c.name, error = %e, "postStart hook failed");
            event_once(
                shared,
                mem,
                pod,
                Some(&c.name),
                Kind::Warning,
                "FailedPostStartHook",
                &format!("PostStartHook failed: {e}"),
            )
            .await;
            let _ = rt
                .stop_container(api::StopContainerRequest {
                    container_id: id.clone(),
                    timeout: grace.max(2),
                })
                .await;
        }
    }
    // Look again soon: a container that exits at once is seen quickly.
    Some(Duration::from_millis(200))
}

/// Make sure `c`'s image is present (pulling it as `imagePullPolicy`
/// says); `Err(wait)` while it cannot be had.
async fn ensure_image(
    shared: &Arc<Shared>,
    pod: &Pod,
    c: &Container,
    sandbox_cfg: &api::PodSandboxConfig,
    mem: &mut Memory,
) -> Result<String, Duration> {
    let image = c.image.clone().unwrap_or_default();
    let parsed = match crate::image::ImageRef::parse(&image) {
        Ok(r) => r,
        Err(e) => {
            mem.waiting.insert(c.name.clone(), ("InvalidImageName".into(), format!("Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: {}", e.reason)));
            return Err(Duration::from_secs(10));
        }
    };
    let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
        if parsed.tag == "latest" && parsed.digest.is_none() {
            "Always".into()
        } else {
            "IfNotPresent".into()
        }
    });
    let spec = api::ImageSpec {
        image: image.clone(),
        user_specified_image: image.clone(),
        ..Default::default()
    };
    let mut images = shared.cri.image.clone();
    let present = images
        .image_status(api::ImageStatusRequest {
            image: Some(spec.clone()),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().image);
    if let Some(img) = &present
        && policy != "Always"
    {
        return Ok(img.id.clone());
    }
    if policy == "Never" {
        let msg = format!("Container image {image:?} is not present with pull policy of Never");
        mem.waiting
            .insert(c.name.clone(), ("ErrImageNeverPull".into(), msg.clone()));
        event_once(
            shared,
            mem,
            pod,
            Some(&c.name),
            Kind::Warning,
            "ErrImageNeverPull",
            &msg,
        )
        .await;
        return Err(Duration::from_secs(10));
    }
    let now = unix_now();
    let entry = mem.pull_backoff.get(&image).copied().flatten();
    if let Some(failed) = mem.pull_failed_at.get(&image).copied()
        && Backoff::in_backoff_since(entry.as_ref(), failed, now)
    {
        let delay = entry.map_or(BACKOFF_INITIAL, |b| b.delay);
        let msg = format!(
            "Back-off pulling image {image:?}: {}",
            hint(shared, &parsed)
        );
        mem.waiting
            .insert(c.name.clone(), ("ImagePullBackOff".into(), msg.clone()));
        event_once(
            shared,
            mem,
            pod,
            Some(&c.name),
            Kind::Normal,
            "BackOff",
            &format!("Back-off pulling image {image:?}"),
        )
        .await;
        return Err((failed + delay)
            .saturating_sub(now)
            .max(Duration::from_millis(50)));
    }
    event_once(
        shared,
        mem,
        pod,
        Some(&c.name),
        Kind::Normal,
        "Pulling",
        &format!("Pulling image {image:?}"),
    )
    .await;
    let started = std::time::Instant::now();
    let _permit = shared.pulls.lock().await;
    match images
        .pull_image(api::PullImageRequest {
            image: Some(spec),
            auth: None,
            sandbox_config: Some(sandbox_cfg.clone()),
        })
        .await
    {
        Ok(r) => {
            let r = r.into_inner();
            mem.pull_failed_at.remove(&image);
            let msg = format!(
                "Successfully pulled image {image:?} in {:?}",
                started.elapsed()
            );
            event_once(
                shared,
                mem,
                pod,
                Some(&c.name),
                Kind::Normal,
                "Pulled",
                &msg,
            )
            .await;
            Ok(r.image_ref)
        }
        Err(e) => {
            if let Some(img) = present {
                // Always, but the registry cannot be reached: use what is here.
                return Ok(img.id);
            }
            let msg = format!(
                "Failed to pull image {image:?}: {}; {}",
                e.message(),
                hint(shared, &parsed)
            );
            Backoff::next(mem.pull_backoff.entry(image.clone()).or_default(), now, now);
            mem.pull_failed_at.insert(image.clone(), now);
            mem.waiting
                .insert(c.name.clone(), ("ErrImagePull".into(), msg.clone()));
            event_once(
                shared,
                mem,
                pod,
                Some(&c.name),
                Kind::Warning,
                "Failed",
                &msg,
            )
            .await;
            Err(Duration::from_millis(500))
        }
    }
}

fn hint(_shared: &Shared, image: &crate::image::ImageRef) -> String {
    let short = image.path.strip_prefix("library/").unwrap_or(&image.path);
    format!(
        "no image {} in the local registry: build it with `kubeforge image build {short}:{}`",
        image.full(),
        image.tag
    )
}

/// Record an event unless the same one was the last of its kind for this
/// container (the kubelet's events aggregate; ours are not repeated).
async fn event_once(
    shared: &Shared,
    mem: &mut Memory,
    pod: &Pod,
    container: Option<&str>,
    kind: Kind,
    reason: &str,
    message: &str,
) {
    let key = format!("{}/{reason}", container.unwrap_or(""));
    if mem.events_sent.get(&key).is_some_and(|m| m == message) {
        return;
    }
    if matches!(reason, "Started" | "Created" | "Pulling" | "Pulled") {
        // Each run's own: a later run reports again.
        mem.events_sent.retain(|k, _| !k.ends_with("/BackOff"));
    } else {
        mem.events_sent.insert(key, message.to_string());
    }
    shared
        .events
        .pod(pod, container, kind, reason, message)
        .await;
}

/// Write the status computed from `obs` if it differs from the last one
/// written; returns the phase.
async fn write_status(
    shared: &Shared,
    pod: &Pod,
    mem: &mut Memory,
    mut obs: Observed,
) -> Result<String, crate::NodeError> {
    let spec = pod.spec.clone().unwrap_or_default();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let entry = obs.containers.entry(c.name.clone()).or_default();
        if entry.waiting.is_none() {
            entry.waiting = mem.waiting.get(&c.name).cloned();
        }
    }
    let status = status::pod_status(pod, &obs);
    let phase = status["phase"].as_str().unwrap_or_default().to_string();
    let comparable = status::without_times(&status);
    if mem.last_status.as_ref() == Some(&comparable) {
        return Ok(phase);
    }
    let (name, ns, _) = pod::identity(pod);
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
    let body = serde_json::json!({"status": status});
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => mem.last_status = Some(comparable),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(phase)
}

async fn remove_sandbox(shared: &Shared, id: &str) {
    let mut rt = shared.cri.runtime.clone();
    let _ = rt
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await;
    if let Err(e) = rt
        .remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
    {
        tracing::warn!(sandbox = id, error = %e.message(), "cannot remove sandbox");
    }
}

/// How long a postStart hook may run (the kubelet gives it no bound
/// but the pod's life; this keeps a hung hook from holding the worker).
const HOOK_TIMEOUT: Duration = Duration::from_secs(120);

/// Stop every container of the pod within `grace` seconds (at least 2,
/// as the kubelet's minimum), then its sandboxes. A container's preStop
/// hook runs first, inside the grace period; the container then gets
/// what is left of it (still at least 2 seconds).
pub(crate) async fn kill_pod(shared: &Shared, pod: &Pod, grace: i64) {
    let (_, _, uid) = pod::identity(pod);
    let Ok(boxes) = sandboxes(shared, uid).await else {
        return;
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let pod_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    for sb in &boxes {
        if let Ok(rs) = runs(shared, &sb.id).await {
            let stops = rs
                .iter()
                .flat_map(|(name, v)| v.iter().map(move |r| (name, r)))
                .filter(|(_, r)| r.running())
                .map(|(name, r)| {
                    let mut rt = shared.cri.runtime.clone();
                    let id = r.id.clone();
                    let container = spec
                        .containers
                        .iter()
                        .chain(spec.init_containers.iter().flatten())
                        .find(|c| &c.name == name)
                        .cloned();
                    let pod_ip = pod_ip.clone();
                    async move {
                        let started = std::time::Instant::now();
                        let budget = Duration::from_secs(u64::try_from(grace.max(0)).unwrap_or(0));
                        if let Some(c) = &container
                            && let Some(hook) =
                                c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref())
                            && let Err(e) = crate::probes::run_hook(
                                &shared.cri,
                                &id,
                                c,
                                hook,
                                &pod_ip,
                                budget.max(Duration::from_secs(1)),
                            )
                            .await
                        {
                            tracing::info!(container = %c.name, error = %e, "preStop hook failed");
                            shared
                                .events
                                .pod(
                                    pod,
                                    Some(&c.name),
                                    Kind::Warning,
                                    "FailedPreStopHook",
                                    &format!("PreStopHook failed: {e}"),
                                )
                                .await;
                        }
                        let left = budget.saturating_sub(started.elapsed()).as_secs();
                        let timeout = i64::try_from(left).unwrap_or(i64::MAX).max(2);
                        let _ = rt
                            .stop_container(api::StopContainerRequest {
                                container_id: id,
                                timeout,
                            })
                            .await;
                    }
                });
            futures::future::join_all(stops).await;
        }
        remove_sandbox(shared, &sb.id).await;
    }
}

/// The pod is gone from the API: stop and remove what is left, with its
/// volumes and logs.
async fn tear_down(shared: &Shared, uid: &str, mem: &mut Memory) {
    tracing::debug!(uid, "the pod is gone: tearing down");
    if let Ok(boxes) = sandboxes(shared, uid).await {
        for sb in boxes {
            remove_sandbox(shared, &sb.id).await;
        }
    }
    mem.volumes.tear_down(&shared.cfg.root_dir, uid);
    shared.remove_pod_cgroup(uid);
    if let Ok(dir) = std::fs::read_dir(shared.log_root()) {
        for e in dir.flatten() {
            if e.file_name()
                .to_string_lossy()
                .ends_with(&format!("_{uid}"))
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crash_loop_delays_double_to_five_minutes_and_reset() {
        let s = Duration::from_secs;
        let mut entry = None;
        // The first restart is at once.
        assert!(!Backoff::in_backoff_since(entry.as_ref(), s(1000), s(1000)));
        Backoff::next(&mut entry, s(1000), s(1000));
        assert_eq!(entry.unwrap().delay, s(10));
        let mut delays = Vec::new();
        let mut t = 1000;
        for _ in 0..7 {
            t += 1;
            assert!(Backoff::in_backoff_since(entry.as_ref(), s(t), s(t)));
            t += entry.unwrap().delay.as_secs();
            assert!(!Backoff::in_backoff_since(
                entry.as_ref(),
                s(t - entry.unwrap().delay.as_secs()),
                s(t)
            ));
            Backoff::next(&mut entry, s(t), s(t));
            delays.push(entry.unwrap().delay.as_secs());
        }
        assert_eq!(delays, [20, 40, 80, 160, 300, 300, 300]);
        // Ten minutes without a restart: back to 10 s.
        Backoff::next(&mut entry, s(t + 601), s(t + 601));
        assert_eq!(entry.unwrap().delay, s(10));
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
    }
}
