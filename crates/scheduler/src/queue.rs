//! The scheduling queue (kube-scheduler's `PriorityQueue`): **activeQ**
//! ordered by the QueueSort plugin (priority, then arrival), **backoffQ**
//! (1 s doubling to 10 s per attempt), **unschedulable** pods waiting for a
//! cluster event one of their rejecting plugins cares about (or 5 minutes),
//! and **gated** pods held by PreEnqueue. It also remembers nominated nodes
//! from preemption.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::framework::{ClusterEvent, Plugin, PodInfo, QueuedPodInfo};

/// How long a pod stays unschedulable without a relevant event.
pub const UNSCHEDULABLE_TIMEOUT: Duration = Duration::from_secs(5 * 60);
/// How often unschedulable pods are checked against the timeout.
pub const UNSCHEDULABLE_FLUSH: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable(Instant),
    Gated,
    InFlight,
}

struct Slot {
    info: QueuedPodInfo,
    place: Place,
    version: u64,
}

/// The queue's sizes (for the `scheduler_pending_pods` metric).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueLengths {
    /// Ready to schedule.
    pub active: usize,
    /// Waiting out their backoff.
    pub backoff: usize,
    /// Waiting for a cluster event.
    pub unschedulable: usize,
    /// Held by PreEnqueue (scheduling gates).
    pub gated: usize,
}

/// The scheduling queue.
pub struct SchedulingQueue {
    sort: Arc<dyn Plugin>,
    active: Vec<(QueuedPodInfo, u64)>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    pods: HashMap<String, Slot>,
    initial_backoff: Duration,
    max_backoff: Duration,
    seq: u64,
    cycle: u64,
    move_cycle: u64,
    last_flush: Instant,
    nominated: HashMap<String, (Arc<str>, Arc<PodInfo>)>,
    /// The same nominations sorted by node name, kept so as they change
    /// (copied only if a cycle still holds the previous list).
    nominated_sorted: Nominated,
}

/// Pods nominated by preemption as (node, pod), sorted by node name.
pub type Nominated = Arc<Vec<(Arc<str>, Arc<PodInfo>)>>;

impl SchedulingQueue {
    /// A queue ordered by `sort` (a QueueSort plugin).
    pub fn new(sort: Arc<dyn Plugin>, initial_backoff: Duration, max_backoff: Duration) -> Self {
        SchedulingQueue {
            sort,
            active: Vec::new(),
            backoff: BinaryHeap::new(),
            pods: HashMap::new(),
            initial_backoff,
            max_backoff,
            seq: 0,
            cycle: 0,
            move_cycle: 0,
            last_flush: Instant::now(),
            nominated: HashMap::new(),
            nominated_sorted: Nominated::default(),
        }
    }

    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        match self.sort.as_queue_sort() {
            Some(s) => s.less(a, b),
            None => a.seq < b.seq,
        }
    }

    fn push_active(&mut self, info: QueuedPodInfo, version: u64) {
        self.active.push((info, version));
        let mut i = self.active.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.less(&self.active[i].0, &self.active[parent].0) {
                self.active.swap(i, parent);
                i = parent;
            } else {
                break;
            }
        }
    }

    fn pop_active(&mut self) -> Option<(QueuedPodInfo, u64)> {
        if self.active.is_empty() {
            return None;
        }
        let last = self.active.len() - 1;
        self.active.swap(0, last);
        let top = self.active.pop();
        let n = self.active.len();
        let mut i = 0;
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < n && self.less(&self.active[l].0, &self.active[best].0) {
                best = l;
            }
            if r < n && self.less(&self.active[r].0, &self.active[best].0) {
                best = r;
            }
            if best == i {
                break;
            }
            self.active.swap(i, best);
            i = best;
        }
        top
    }

    fn place(&mut self, uid: &str, place: Place, now: Instant) {
        let Some(slot) = self.pods.get_mut(uid) else {
            return;
        };
        slot.version += 1;
        slot.place = place;
        let (info, version) = (slot.info.clone(), slot.version);
        match place {
            Place::Active => self.push_active(info, version),
            Place::Backoff => {
                let until = self.backoff_until(&info, now);
                self.backoff
                    .push(Reverse((until, version, uid.to_string())));
            }
            _ => {}
        }
    }

    fn backoff_duration(&self, attempts: u32) -> Duration {
        let mut d = self.initial_backoff;
        for _ in 1..attempts.max(1) {
            d = d.saturating_mul(2);
            if d >= self.max_backoff {
                return self.max_backoff;
            }
        }
        d.min(self.max_backoff)
    }

    fn backoff_until(&self, info: &QueuedPodInfo, now: Instant) -> Instant {
        now + self.backoff_duration(info.attempts)
    }

    /// A new pod (or one seen again). `admitted` is the PreEnqueue verdict.
    pub fn add(&mut self, pod: Arc<PodInfo>, admitted: bool) {
        let now = Instant::now();
        if let Some(slot) = self.pods.get_mut(&pod.uid) {
            let was = slot.place;
            slot.info.pod = pod.clone();
            match (was, admitted) {
                (Place::InFlight, _) => {}
                (_, false) => self.place(&pod.uid, Place::Gated, now),
                (Place::Gated, true) | (Place::Active, true) => {
                    self.place(&pod.uid, Place::Active, now)
                }
                // An update may make it schedulable: retry (after backoff).
                (Place::Unschedulable(_), true) => self.place(&pod.uid, Place::Backoff, now),
                (Place::Backoff, true) => {}
            }
            return;
        }
        self.seq += 1;
        let info = QueuedPodInfo {
            pod: pod.clone(),
            timestamp: now,
            attempts: 0,
            initial_attempt: None,
            unschedulable_plugins: Vec::new(),
            seq: self.seq,
            scheduling_cycle: 0,
        };
        self.pods.insert(
            pod.uid.clone(),
            Slot {
                info,
                place: Place::Gated,
                version: 0,
            },
        );
        self.place(
            &pod.uid,
            if admitted {
                Place::Active
            } else {
                Place::Gated
            },
            now,
        );
    }

    /// Whether the queue holds this pod (in any sub-queue or in flight).
    pub fn contains(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// The pod's queued info, if held.
    pub fn get(&self, uid: &str) -> Option<&QueuedPodInfo> {
        self.pods.get(uid).map(|s| &s.info)
    }

    /// Forget a pod (deleted, or bound elsewhere).
    pub fn delete(&mut self, uid: &str) {
        self.pods.remove(uid);
        self.unlist(uid);
    }

    /// The next pod to schedule.
    pub fn pop(&mut self) -> Option<QueuedPodInfo> {
        while let Some((info, version)) = self.pop_active() {
            let Some(slot) = self.pods.get_mut(&info.pod.uid) else {
                continue;
            };
            if slot.version != version || slot.place != Place::Active {
                continue;
            }
            slot.place = Place::InFlight;
            slot.info.attempts += 1;
            if slot.info.initial_attempt.is_none() {
                slot.info.initial_attempt = Some(Instant::now());
            }
            self.cycle += 1;
            slot.info.scheduling_cycle = self.cycle;
            return Some(slot.info.clone());
        }
        None
    }

    /// The pod was scheduled (assumed): it leaves the queue.
    pub fn done(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// After a failed attempt: unschedulable until a relevant event — or
    /// backoff at once if such an event came while it was being scheduled.
    pub fn add_unschedulable(&mut self, mut info: QueuedPodInfo, plugins: Vec<String>) {
        let now = Instant::now();
        let uid = info.pod.uid.clone();
        let popped_at = info.scheduling_cycle;
        info.unschedulable_plugins = plugins;
        let place = if self.move_cycle >= popped_at {
            Place::Backoff
        } else {
            Place::Unschedulable(now)
        };
        self.reinsert(info, place, now, &uid);
    }

    /// After an error (or a failed bind): retry after the backoff.
    pub fn add_backoff(&mut self, info: QueuedPodInfo) {
        let now = Instant::now();
        let uid = info.pod.uid.clone();
        self.reinsert(info, Place::Backoff, now, &uid);
    }

    fn reinsert(&mut self, info: QueuedPodInfo, place: Place, now: Instant, uid: &str) {
        match self.pods.get_mut(uid) {
            Some(slot) => {
                // keep a newer pod object seen while in flight
                let pod = slot.info.pod.clone();
                slot.info = info;
                slot.info.pod = pod;
            }
            None => {
                self.pods.insert(
                    uid.to_string(),
                    Slot {
                        info,
                        place,
                        version: 0,
                    },
                );
            }
        }
        self.place(uid, place, now);
    }

    /// A cluster event: unschedulable pods rejected by a plugin interested in
    /// it move to backoff/active.
    pub fn move_on_event(
        &mut self,
        event: ClusterEvent,
        interested: &dyn Fn(&str, ClusterEvent) -> bool,
    ) {
        self.move_cycle = self.cycle;
        let now = Instant::now();
        let uids: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| matches!(s.place, Place::Unschedulable(_)))
            .filter(|(_, s)| {
                s.info.unschedulable_plugins.is_empty()
                    || s.info
                        .unschedulable_plugins
                        .iter()
                        .any(|p| interested(p, event))
            })
            .map(|(u, _)| u.clone())
            .collect();
        for uid in uids {
            self.requeue(&uid, now);
        }
    }

    fn requeue(&mut self, uid: &str, now: Instant) {
        let Some(slot) = self.pods.get(uid) else {
            return;
        };
        // still backing off since the last attempt? then backoffQ
        let until = match slot.place {
            Place::Unschedulable(since) => since + self.backoff_duration(slot.info.attempts),
            _ => now,
        };
        if until <= now {
            self.place(uid, Place::Active, now);
        } else if let Some(slot) = self.pods.get_mut(uid) {
            slot.version += 1;
            slot.place = Place::Backoff;
            self.backoff
                .push(Reverse((until, slot.version, uid.to_string())));
        }
    }

    /// Move expired backoffs to active, and unschedulable pods older than
    /// five minutes (checked every 30 s).
    pub fn flush(&mut self, now: Instant) {
        while let Some(Reverse((until, version, uid))) = self.backoff.peek().cloned() {
            if until > now {
                break;
            }
            self.backoff.pop();
            if let Some(s) = self.pods.get(&uid)
                && s.version == version
                && s.place == Place::Backoff
            {
                self.place(&uid, Place::Active, now);
            }
        }
        if now.duration_since(self.last_flush) >= UNSCHEDULABLE_FLUSH {
            self.last_flush = now;
            let old: Vec<String> = self
                .pods
                .iter()
                .filter(|(_, s)| matches!(s.place, Place::Unschedulable(t) if now.duration_since(t) >= UNSCHEDULABLE_TIMEOUT))
                .map(|(u, _)| u.clone())
                .collect();
            for uid in old {
                self.place(&uid, Place::Active, now);
            }
        }
    }

    /// When the next backoff expires.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.backoff.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Every held pod that is not in flight: (uid, pod) — to re-evaluate
    /// gates or priorities.
    pub fn pods(&self) -> Vec<Arc<PodInfo>> {
        self.pods
            .values()
            .filter(|s| s.place != Place::InFlight)
            .map(|s| s.info.pod.clone())
            .collect()
    }

    /// Sizes per sub-queue.
    pub fn lengths(&self) -> QueueLengths {
        let mut l = QueueLengths::default();
        for s in self.pods.values() {
            match s.place {
                Place::Active => l.active += 1,
                Place::Backoff => l.backoff += 1,
                Place::Unschedulable(_) => l.unschedulable += 1,
                Place::Gated => l.gated += 1,
                Place::InFlight => {}
            }
        }
        l
    }

    /// Record a nominated node (preemption); lower-priority nominations on
    /// the same node are cleared, as kube-scheduler does.
    pub fn nominate(&mut self, pod: Arc<PodInfo>, node: &str) -> Vec<Arc<PodInfo>> {
        self.unlist(&pod.uid);
        let list = &self.nominated_sorted;
        let lo = list.partition_point(|(n, _)| **n < *node);
        let cleared: Vec<String> = list[lo..]
            .iter()
            .take_while(|(n, _)| **n == *node)
            .filter(|(_, p)| p.priority < pod.priority && p.uid != pod.uid)
            .map(|(_, p)| p.uid.clone())
            .collect();
        let mut out = Vec::new();
        for u in cleared {
            if let Some((_, p)) = self.unlist(&u) {
                out.push(p);
            }
        }
        self.enlist(Arc::from(node), pod);
        out
    }

    /// Put a nomination in both indexes.
    fn enlist(&mut self, node: Arc<str>, pod: Arc<PodInfo>) {
        let list = Arc::make_mut(&mut self.nominated_sorted);
        let at = list.partition_point(|(n, _)| **n <= *node);
        list.insert(at, (node.clone(), pod.clone()));
        self.nominated.insert(pod.uid.clone(), (node, pod));
    }

    /// A pending pod added or changed: its nomination as kube's nominator
    /// keeps it (`addNominatedPod` / `updateNominatedPod` without
    /// nominating info). `status.nominatedNodeName` sets it — so a
    /// restarted scheduler holds the room its predecessor's preemption
    /// freed — without clearing others; a nomination only in memory (the
    /// status write still on its way) is kept while neither version of the
    /// pod names one; one the status dropped is dropped. The entry always
    /// takes the newest pod.
    pub fn update_nomination(&mut self, pod: Arc<PodInfo>) {
        let from_status = nominated_node_name(&pod);
        let kept = self
            .nominated
            .get(&pod.uid)
            .and_then(|(node, old)| nominated_node_name(old).is_none().then(|| node.clone()));
        self.unlist(&pod.uid);
        if let Some(node) = from_status.map(Arc::from).or(kept) {
            self.enlist(node, pod);
        }
    }

    /// Take a pod's nomination out of both indexes.
    fn unlist(&mut self, uid: &str) -> Option<(Arc<str>, Arc<PodInfo>)> {
        let (node, pod) = self.nominated.remove(uid)?;
        let list = Arc::make_mut(&mut self.nominated_sorted);
        let lo = list.partition_point(|(n, _)| **n < *node);
        if let Some(i) = list[lo..]
            .iter()
            .take_while(|(n, _)| **n == *node)
            .position(|(_, p)| p.uid == uid)
        {
            list.remove(lo + i);
        }
        Some((node, pod))
    }

    /// Forget a nomination (the pod was scheduled or deleted).
    pub fn clear_nomination(&mut self, uid: &str) {
        self.unlist(uid);
    }

    /// Nominated pods as (node, pod), sorted by node name (so a node's are
    /// found by binary search); shared, so holding it costs no copy.
    pub fn nominated(&mut self) -> Nominated {
        self.nominated_sorted.clone()
    }
}

/// `status.nominatedNodeName`, when set.
fn nominated_node_name(pod: &PodInfo) -> Option<&str> {
    pod.pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::plugins::simple::PrioritySort;
    use k8s_openapi::api::core::v1::Pod;

    fn pod(name: &str, prio: i32) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "d", "uid": name},
            "spec": {"priority": prio, "containers": [{"name": "c"}]}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    #[test]
    fn nominations_stay_sorted_and_clear_lower_ones() {
        let mut q = SchedulingQueue::new(
            Arc::new(PrioritySort),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        let list = |q: &mut SchedulingQueue| -> Vec<(String, String)> {
            q.nominated()
                .iter()
                .map(|(n, p)| (n.to_string(), p.uid.clone()))
                .collect()
        };
        assert!(q.nominate(pod("a", 10), "n2").is_empty());
        assert!(q.nominate(pod("b", 10), "n1").is_empty());
        let held = q.nominated(); // a cycle still holding the old list
        assert!(q.nominate(pod("c", 5), "n3").is_empty());
        assert_eq!(held.len(), 2, "a held list does not change");
        assert_eq!(
            list(&mut q),
            [("n1", "b"), ("n2", "a"), ("n3", "c")].map(|(n, u)| (n.to_string(), u.to_string()))
        );
        // moving a nomination takes it off the old node
        assert!(q.nominate(pod("c", 5), "n1").is_empty());
        assert_eq!(
            list(&mut q),
            [("n1", "b"), ("n1", "c"), ("n2", "a")].map(|(n, u)| (n.to_string(), u.to_string()))
        );
        // a higher-priority nomination clears lower ones on its node only
        let cleared = q.nominate(pod("d", 50), "n1");
        let mut cleared: Vec<&str> = cleared.iter().map(|p| p.uid.as_str()).collect();
        cleared.sort();
        assert_eq!(cleared, ["b", "c"]);
        assert_eq!(
            list(&mut q),
            [("n1", "d"), ("n2", "a")].map(|(n, u)| (n.to_string(), u.to_string()))
        );
        q.clear_nomination("d");
        q.delete("a");
        assert!(list(&mut q).is_empty());
    }

    /// kube's updateNominatedPod: the status sets a nomination; one only
    /// in memory survives updates that name none; one the status drops goes.
    #[test]
    fn nominations_follow_the_status_of_pod_updates() {
        let mut q = SchedulingQueue::new(
            Arc::new(PrioritySort),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        let with_status = |name: &str, node: Option<&str>| {
            let p: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "d", "uid": name},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"nominatedNodeName": node}
            }))
            .unwrap();
            Arc::new(PodInfo::new(Arc::new(p)))
        };
        let list = |q: &mut SchedulingQueue| -> Vec<(String, String)> {
            q.nominated()
                .iter()
                .map(|(n, p)| (n.to_string(), p.uid.clone()))
                .collect()
        };
        let one = |n: &str, u: &str| vec![(n.to_string(), u.to_string())];
        q.update_nomination(with_status("a", Some("n1")));
        assert_eq!(list(&mut q), one("n1", "a"));
        q.update_nomination(with_status("a", Some("n2")));
        assert_eq!(list(&mut q), one("n2", "a"));
        q.update_nomination(with_status("a", None));
        assert!(list(&mut q).is_empty(), "the status dropped it");
        // Preemption's nomination, before its status write is seen.
        q.nominate(with_status("b", None), "n3");
        q.update_nomination(with_status("b", None));
        assert_eq!(list(&mut q), one("n3", "b"));
        // A restored nomination clears no one.
        q.update_nomination(with_status("c", Some("n3")));
        assert_eq!(list(&mut q).len(), 2);
    }

    #[test]
    fn priority_then_fifo_and_backoff() {
        let mut q = SchedulingQueue::new(
            Arc::new(PrioritySort),
            Duration::from_secs(1),
            Duration::from_secs(10),
        );
        q.add(pod("a", 0), true);
        q.add(pod("b", 10), true);
        q.add(pod("c", 0), true);
        q.add(pod("g", 100), false);
        assert_eq!(q.pop().unwrap().pod.name, "b");
        assert_eq!(q.pop().unwrap().pod.name, "a");
        let c = q.pop().unwrap();
        assert_eq!(c.pod.name, "c");
        assert!(q.pop().is_none(), "gated pods are not popped");
        assert_eq!(q.lengths().gated, 1);
        q.add_backoff(c);
        assert!(q.pop().is_none());
        q.flush(Instant::now() + Duration::from_millis(1100));
        let c = q.pop().unwrap();
        assert_eq!(c.attempts, 2);
        // backoff doubles: 2 s after the second attempt, capped at 10 s
        assert_eq!(q.backoff_duration(2), Duration::from_secs(2));
        assert_eq!(q.backoff_duration(5), Duration::from_secs(10));
        q.add_unschedulable(c, vec!["NodeResourcesFit".into()]);
        q.move_on_event(ClusterEvent::NodeAdd, &|p, _| p == "TaintToleration");
        assert_eq!(q.lengths().unschedulable, 1, "irrelevant event leaves it");
        q.move_on_event(ClusterEvent::NodeAdd, &|p, _| p == "NodeResourcesFit");
        assert_eq!(q.lengths().unschedulable, 0);
        // lifting the gate admits the pod
        q.add(pod("g", 100), true);
        assert_eq!(q.pop().unwrap().pod.name, "g");
    }
}
