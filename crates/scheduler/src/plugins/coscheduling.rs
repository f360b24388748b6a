//! Coscheduling (gang scheduling, as kubernetes-sigs/scheduler-plugins):
//! pods labelled `scheduling.x-k8s.io/pod-group: <name>` belong to the
//! PodGroup `<name>` (`scheduling.x-k8s.io/v1alpha1`, `spec.minMember`,
//! `spec.scheduleTimeoutSeconds`). Each member waits at Permit until
//! `minMember` members are reserved, then all are allowed together; when the
//! wait times out or one member fails, every waiting member is rejected and
//! unreserved — all or nothing. Not enabled by default: add it to a profile
//! (`multiPoint: {enabled: [{name: Coscheduling}]}`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde::Deserialize;

use super::helper::{decode_args, plugin};
use crate::framework::{
    ClusterEvent, Code, CycleState, Handle, PermitPlugin, PodInfo, PreFilterPlugin,
    PreFilterResult, ReservePlugin, Snapshot, Status,
};

/// The label naming a pod's group.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// `CoschedulingArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Accepted for compatibility.
    pub api_version: Option<String>,
    /// Accepted for compatibility.
    pub kind: Option<String>,
    /// Default wait at Permit when the PodGroup sets none (default 60).
    pub permit_waiting_time_seconds: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Group {
    min_member: usize,
    timeout: Option<u64>,
}

/// The Coscheduling plugin.
pub struct Coscheduling {
    handle: Handle,
    default_wait: Duration,
    groups: Arc<RwLock<HashMap<(String, String), Group>>>,
    /// Reserved (assumed or bound) members per group: pod UIDs.
    reserved: RwLock<HashMap<(String, String), HashSet<String>>>,
}
plugin!(
    Coscheduling,
    "Coscheduling",
    [pre_filter, reserve, permit],
    events = vec![
        ClusterEvent::PodAdd,
        ClusterEvent::PodDelete,
        ClusterEvent::Other
    ]
);

fn group_of(pod: &PodInfo) -> Option<(String, String)> {
    pod.labels
        .get(POD_GROUP_LABEL)
        .filter(|g| !g.is_empty())
        .map(|g| (pod.namespace.clone(), g.clone()))
}

impl Coscheduling {
    /// Build from args; watches PodGroups when the handle has a client.
    pub fn new(args: Option<&serde_json::Value>, handle: &Handle) -> Result<Self, String> {
        let a: Args = decode_args(args)?;
        let groups: Arc<RwLock<HashMap<(String, String), Group>>> = Arc::default();
        if let (Some(client), Some(rt)) = (handle.client.clone(), handle.runtime.clone()) {
            let groups = groups.clone();
            rt.spawn(async move {
                let ar = ApiResource::from_gvk_with_plural(
                    &GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup"),
                    "podgroups",
                );
                let api: kube::Api<DynamicObject> = kube::Api::all_with(client, &ar);
                let mut s = std::pin::pin!(watcher(api, watcher::Config::default()));
                while let Some(ev) = s.next().await {
                    let key = |o: &DynamicObject| {
                        (o.metadata.namespace.clone().unwrap_or_default(), o.metadata.name.clone().unwrap_or_default())
                    };
                    match ev {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            let spec = o.data.get("spec");
                            let g = Group {
                                min_member: spec.and_then(|s| s.get("minMember")).and_then(|v| v.as_u64()).unwrap_or(1) as usize,
                                timeout: spec.and_then(|s| s.get("scheduleTimeoutSeconds")).and_then(|v| v.as_u64()),
                            };
                            if let Ok(mut m) = groups.write() {
                                m.insert(key(&o), g);
                            }
                        }
                        Ok(watcher::Event::Delete(o)) => {
                            if let Ok(mut m) = groups.write() {
                                m.remove(&key(&o));
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "PodGroup watch failed (is the CRD installed?); retrying");
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                    }
                }
            });
        }
        Ok(Coscheduling {
            handle: handle.clone(),
            default_wait: Duration::from_secs(a.permit_waiting_time_seconds.unwrap_or(60)),
            groups,
            reserved: RwLock::default(),
        })
    }

    fn group(&self, key: &(String, String)) -> Option<Group> {
        self.groups.read().ok().and_then(|m| m.get(key).copied())
    }
}

impl PreFilterPlugin for Coscheduling {
    fn pre_filter(
        &self,
        _: &mut CycleState,
        pod: &PodInfo,
        _: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        match group_of(pod) {
            None => (None, Status::skip()),
            Some(key) if self.group(&key).is_none() => (
                None,
                Status::unresolvable(format!("PodGroup {}/{} not found", key.0, key.1)),
            ),
            Some(_) => (None, Status::skip()),
        }
    }
}

impl ReservePlugin for Coscheduling {
    fn reserve(&self, _: &mut CycleState, pod: &PodInfo, _: &str) -> Status {
        if let Some(key) = group_of(pod)
            && let Ok(mut m) = self.reserved.write()
        {
            m.entry(key).or_default().insert(pod.uid.clone());
        }
        Status::success()
    }

    fn unreserve(&self, _: &CycleState, pod: &PodInfo, _: &str) {
        let Some(key) = group_of(pod) else { return };
        if let Ok(mut m) = self.reserved.write()
            && let Some(set) = m.get_mut(&key)
        {
            set.remove(&pod.uid);
        }
        // All or nothing: the other waiting members go back too.
        for (other, _) in self.handle.waiting_pods.list() {
            if other.uid != pod.uid && group_of(&other).as_ref() == Some(&key) {
                self.handle.waiting_pods.reject(
                    &other.uid,
                    "Coscheduling",
                    &format!(
                        "another member of PodGroup {}/{} was rejected",
                        key.0, key.1
                    ),
                );
            }
        }
    }
}

impl PermitPlugin for Coscheduling {
    fn permit(&self, _: &mut CycleState, pod: &PodInfo, _: &str) -> (Status, Duration) {
        let Some(key) = group_of(pod) else {
            return (Status::success(), Duration::ZERO);
        };
        let Some(group) = self.group(&key) else {
            return (
                Status::unresolvable(format!("PodGroup {}/{} not found", key.0, key.1)),
                Duration::ZERO,
            );
        };
        let reserved = self
            .reserved
            .read()
            .ok()
            .and_then(|m| m.get(&key).map(HashSet::len))
            .unwrap_or(0);
        if reserved >= group.min_member {
            // The gang is complete: release every waiting member.
            for (other, _) in self.handle.waiting_pods.list() {
                if group_of(&other).as_ref() == Some(&key) {
                    self.handle.waiting_pods.allow(&other.uid, "Coscheduling");
                }
            }
            return (Status::success(), Duration::ZERO);
        }
        let wait = group.timeout.map_or(self.default_wait, Duration::from_secs);
        (
            Status::new(
                Code::Wait,
                format!(
                    "waiting for {} more member(s) of PodGroup {}/{}",
                    group.min_member - reserved,
                    key.0,
                    key.1
                ),
            ),
            wait,
        )
    }
}
