//! Shared helpers of the workload-controller tests: an in-process API
//! server with the GC and the workload controllers running, and a test
//! kubelet that writes pod status as a kubelet would.

#![allow(dead_code, missing_docs)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kubeforge_apiserver::ApiServer;
use kubeforge_controllers::Builtin;
use kubeforge_controllers::workloads::{self, WorkloadOptions, Workloads};
use kubeforge_testenv::FaultHandle;
use serde_json::{Value, json};

pub struct Env {
    pub server: ApiServer,
    pub client: Client,
    pub builtin: Builtin,
    pub workloads: Workloads,
}

impl Env {
    pub async fn stop(self) {
        self.workloads.stop().await;
        self.builtin.stop().await;
    }
}

pub async fn start() -> Env {
    start_with(WorkloadOptions::default()).await
}

pub async fn start_with(opts: WorkloadOptions) -> Env {
    let server = ApiServer::in_memory().await;
    let client = server.client();
    start_on(server, client.clone(), client, opts).await
}

/// [`start_with`], the controllers' requests passing through `faults`
/// (the test's own `client` does not).
pub async fn start_with_faults(opts: WorkloadOptions, faults: &FaultHandle) -> Env {
    use tower::Layer;
    let server = ApiServer::in_memory().await;
    let faulty = Client::new(faults.layer().layer(server.service()), "default");
    let client = server.client();
    start_on(server, faulty, client, opts).await
}

async fn start_on(
    server: ApiServer,
    controllers: Client,
    client: Client,
    opts: WorkloadOptions,
) -> Env {
    server.set_controllers_running(true);
    let builtin = kubeforge_controllers::start_builtin(controllers.clone());
    tokio::time::timeout(Duration::from_secs(20), builtin.wait_synced())
        .await
        .expect("builtin controllers synced");
    let workloads = workloads::start(controllers, opts)
        .await
        .expect("workload controllers start");
    Env {
        server,
        client,
        builtin,
        workloads,
    }
}

pub use kubeforge_testenv::eventually;

pub fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// What the test kubelet does with a pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Running and Ready.
    Ready,
    /// Running, not Ready.
    NotReady,
    /// Finished with Succeeded.
    Succeed,
    /// Finished with Failed.
    Fail,
    /// Left Pending.
    Ignore,
}

/// The status a kubelet would write for `fate`.
pub fn status_for(fate: Fate, ip: &str) -> Value {
    let now = jiff::Timestamp::now().to_string();
    match fate {
        Fate::Ready | Fate::NotReady => {
            let ready = if fate == Fate::Ready { "True" } else { "False" };
            json!({"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]})
        }
        Fate::Succeed => json!({"phase": "Succeeded", "startTime": now,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}]}),
        Fate::Fail => json!({"phase": "Failed", "startTime": now,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now}]}),
        Fate::Ignore => Value::Null,
    }
}

/// Write pod status as a kubelet would.
pub async fn set_pod_status(client: &Client, ns: &str, name: &str, fate: Fate, ip: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let _ = api
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status_for(fate, ip)})),
        )
        .await;
}

/// A test kubelet: every new pod (any namespace) gets the status `decide`
/// picks for it, once.
pub struct Kubelet {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn kubelet(client: &Client, decide: impl Fn(&Pod) -> Fate + Send + Sync + 'static) -> Kubelet {
    let client = client.clone();
    let task = tokio::spawn(async move {
        let api: Api<Pod> = Api::all(client.clone());
        let seen: Arc<Mutex<BTreeMap<String, ()>>> = Arc::default();
        let mut n: u32 = 0;
        // With backoff: at teardown the server's watches end at once, and a
        // watcher retrying without a pause never yields, so the runtime's
        // shutdown would wait on it forever.
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        while let Some(ev) = stream.next().await {
            let pods = match ev {
                Ok(watcher::Event::Apply(p)) | Ok(watcher::Event::InitApply(p)) => vec![p],
                _ => continue,
            };
            for p in pods {
                let uid = p.metadata.uid.clone().unwrap_or_default();
                if p.metadata.deletion_timestamp.is_some()
                    || p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Pending")
                {
                    continue;
                }
                if seen.lock().expect("lock").insert(uid, ()).is_some() {
                    continue;
                }
                let fate = decide(&p);
                if fate == Fate::Ignore {
                    continue;
                }
                n += 1;
                let ip = format!("10.244.{}.{}", n / 250, n % 250 + 1);
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                let name = p.metadata.name.clone().unwrap_or_default();
                set_pod_status(&client, &ns, &name, fate, &ip).await;
            }
        }
    });
    Kubelet { task }
}

pub fn all_ready(_: &Pod) -> Fate {
    Fate::Ready
}
