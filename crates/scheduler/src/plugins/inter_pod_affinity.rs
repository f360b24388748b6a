//! InterPodAffinity: required pod affinity and anti-affinity per topology
//! domain (with symmetry: existing pods' anti-affinity also rejects the
//! incoming pod, and the first pod of a self-affine group may go anywhere),
//! and preferred terms in the score (weight 2).

use std::collections::HashMap;

use serde::Deserialize;

use super::helper::{decode_args, min_max_normalize, plugin};
use crate::framework::{
    ClusterEvent, Code, CycleState, FilterPlugin, NodeInfo, NodeScore, PodInfo, PodMatcher,
    PreFilterExtensions, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, Snapshot,
    Status,
    topology_counts::{FastBuild, TermKind},
    types::AffinityTerm,
};

const STATE_FILTER: &str = "PreFilterInterPodAffinity";
const STATE_SCORE: &str = "PreScoreInterPodAffinity";

type Counts = HashMap<String, HashMap<String, i64, FastBuild>, FastBuild>;

fn bump(m: &mut Counts, key: &str, value: &str, d: i64) {
    // Look up before inserting: most bumps hit an existing (key, value), and
    // `entry` would allocate both strings every time.
    let inner = match m.get_mut(key) {
        Some(inner) => inner,
        None => m.entry(key.to_string()).or_default(),
    };
    match inner.get_mut(value) {
        Some(c) => *c += d,
        None => {
            inner.insert(value.to_string(), d);
        }
    }
}

fn get(m: &Counts, key: &str, value: &str) -> i64 {
    m.get(key).and_then(|v| v.get(value)).copied().unwrap_or(0)
}

/// `InterPodAffinityArgs`.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Accepted for compatibility.
    pub api_version: Option<String>,
    /// Accepted for compatibility.
    pub kind: Option<String>,
    /// Score weight of existing pods' required affinity toward the incoming pod.
    pub hard_pod_affinity_weight: Option<i64>,
}

/// The InterPodAffinity plugin.
pub struct InterPodAffinity {
    hard_weight: i64,
}
plugin!(
    InterPodAffinity,
    "InterPodAffinity",
    [pre_filter, filter, pre_score, score],
    events = vec![
        ClusterEvent::NodeAdd,
        ClusterEvent::NodeUpdate,
        ClusterEvent::PodDelete,
        ClusterEvent::PodAdd
    ]
);

impl InterPodAffinity {
    /// Build from args.
    pub fn new(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let a: Args = decode_args(args)?;
        let w = a.hard_pod_affinity_weight.unwrap_or(1);
        if !(0..=100).contains(&w) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {w}: not in valid range [0-100]"
            ));
        }
        Ok(InterPodAffinity { hard_weight: w })
    }
}

#[derive(Clone, Default)]
struct FilterState {
    existing_anti: Counts,
    affinity: Counts,
    anti: Counts,
}

impl FilterState {
    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, d: i64) {
        let labels = node.labels();
        for t in &other.required_anti_affinity {
            if t.matches(pod)
                && let Some(v) = labels.get(&t.topology_key)
            {
                bump(&mut self.existing_anti, &t.topology_key, v, d);
            }
        }
        // Required affinity counts a pod only when it matches every term,
        // then in each term's domain (kube's `updateWithAffinityTerms`).
        if matches_own_terms(other, &pod.required_affinity) {
            for t in &pod.required_affinity {
                if let Some(v) = labels.get(&t.topology_key) {
                    bump(&mut self.affinity, &t.topology_key, v, d);
                }
            }
        }
        for t in &pod.required_anti_affinity {
            if t.matches(other)
                && let Some(v) = labels.get(&t.topology_key)
            {
                bump(&mut self.anti, &t.topology_key, v, d);
            }
        }
    }
}

fn matches_own_terms(pod: &PodInfo, terms: &[AffinityTerm]) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod))
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (Option<PreFilterResult>, Status) {
        let wants = !pod.required_affinity.is_empty() || !pod.required_anti_affinity.is_empty();
        if !wants && snapshot.pods_with_required_anti_affinity() == 0 {
            return (None, Status::skip());
        }
        let mut st = FilterState::default();
        // Existing pods' anti-affinity toward this pod, one check per
        // distinct term (the snapshot groups equal terms and counts them).
        if snapshot.pods_with_required_anti_affinity() > 0 {
            for g in snapshot.existing_terms() {
                if g.kind == TermKind::RequiredAntiAffinity && g.term.matches(pod) {
                    for (v, c) in &g.domains {
                        bump(&mut st.existing_anti, &g.term.topology_key, v, *c);
                    }
                }
            }
        }
        // This pod's own terms: matching pods per domain, from the
        // snapshot's incremental counts (no scan of every pod). Each
        // anti-affinity term counts the pods it selects; the affinity terms
        // count only pods all of them select.
        let all_affinity = match pod.required_affinity.as_slice() {
            [] | [_] => None,
            many => Some(PodMatcher::AllTerms(many.to_vec())),
        };
        for (terms, out, all) in [
            (
                &pod.required_affinity,
                &mut st.affinity,
                all_affinity.as_ref(),
            ),
            (&pod.required_anti_affinity, &mut st.anti, None),
        ] {
            for t in terms {
                let one;
                let matcher = match all {
                    Some(m) => m,
                    None => {
                        one = PodMatcher::Term(t.clone());
                        &one
                    }
                };
                let counts = snapshot.topology_counts("", matcher, &t.topology_key, &[]);
                for (v, c) in counts {
                    if c != 0 {
                        bump(out, &t.topology_key, &v, c);
                    }
                }
            }
        }
        if !wants && st.existing_anti.is_empty() {
            return (None, Status::skip());
        }
        state.write(STATE_FILTER, st);
        (None, Status::success())
    }

    fn extensions(&self) -> Option<&dyn PreFilterExtensions> {
        Some(self)
    }
}

impl PreFilterExtensions for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(STATE_FILTER) {
            st.update(pod, other, node, 1);
        }
        Status::success()
    }
    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        if let Some(st) = state.read_mut::<FilterState>(STATE_FILTER) {
            st.update(pod, other, node, -1);
        }
        Status::success()
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(st) = state.read::<FilterState>(STATE_FILTER) else {
            return Status::success();
        };
        let labels = node.labels();
        // Existing pods' anti-affinity toward this pod (symmetry).
        for (k, v) in labels {
            if get(&st.existing_anti, k, v) > 0 {
                return Status::unschedulable(
                    "node(s) didn't satisfy existing pods anti-affinity rules",
                );
            }
        }
        for t in &pod.required_anti_affinity {
            if let Some(v) = labels.get(&t.topology_key)
                && get(&st.anti, &t.topology_key, v) > 0
            {
                return Status::unschedulable("node(s) didn't match pod anti-affinity rules");
            }
        }
        if !pod.required_affinity.is_empty() {
            let mut all_exist = true;
            for t in &pod.required_affinity {
                match labels.get(&t.topology_key) {
                    None => {
                        return Status::unresolvable("node(s) didn't match pod affinity rules");
                    }
                    Some(v) => {
                        if get(&st.affinity, &t.topology_key, v) <= 0 {
                            all_exist = false;
                        }
                    }
                }
            }
            if !all_exist {
                // The first pod of a group that matches its own terms may go
                // anywhere the topology keys exist.
                let no_matches = st.affinity.values().all(|m| m.values().all(|c| *c <= 0));
                if !(no_matches && matches_own_terms(pod, &pod.required_affinity)) {
                    return Status::new(
                        Code::UnschedulableAndUnresolvable,
                        "node(s) didn't match pod affinity rules",
                    );
                }
            }
        }
        Status::success()
    }
}

#[derive(Clone, Default)]
struct ScoreState {
    topology_score: Counts,
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        let has_preferred =
            !pod.preferred_affinity.is_empty() || !pod.preferred_anti_affinity.is_empty();
        if !has_preferred && snapshot.pods_with_affinity() == 0 {
            return Status::skip();
        }
        let mut st = ScoreState::default();
        // Existing pods' terms toward this pod, per distinct term.
        for g in snapshot.existing_terms() {
            let w = match g.kind {
                TermKind::RequiredAffinity => self.hard_weight,
                TermKind::RequiredAntiAffinity => 0,
                TermKind::PreferredAffinity => g.weight,
                TermKind::PreferredAntiAffinity => -g.weight,
            };
            if w != 0 && g.term.matches(pod) {
                for (v, c) in &g.domains {
                    bump(&mut st.topology_score, &g.term.topology_key, v, c * w);
                }
            }
        }
        // This pod's preferred terms toward existing pods.
        let own = pod
            .preferred_affinity
            .iter()
            .map(|w| (w, w.weight))
            .chain(pod.preferred_anti_affinity.iter().map(|w| (w, -w.weight)));
        for (w, weight) in own {
            let counts = snapshot.topology_counts(
                "",
                &PodMatcher::Term(w.term.clone()),
                &w.term.topology_key,
                &[],
            );
            for (v, c) in counts {
                if c != 0 {
                    bump(&mut st.topology_score, &w.term.topology_key, &v, c * weight);
                }
            }
        }
        if st.topology_score.is_empty() {
            return Status::skip();
        }
        state.write(STATE_SCORE, st);
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _: &PodInfo, node: &NodeInfo) -> (i64, Status) {
        let Some(st) = state.read::<ScoreState>(STATE_SCORE) else {
            return (0, Status::success());
        };
        let s = node
            .labels()
            .iter()
            .map(|(k, v)| get(&st.topology_score, k, v))
            .sum();
        (s, Status::success())
    }

    fn normalize(&self, _: &CycleState, _: &PodInfo, scores: &mut [NodeScore]) -> Status {
        min_max_normalize(scores);
        Status::success()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;
    use std::sync::Arc;

    fn node(name: &str, zone: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}},
                "status": {"allocatable": {"cpu": "4", "memory": "32Gi", "pods": "110"}}
            }))
            .unwrap(),
        )
    }

    fn pod(uid: &str, labels: serde_json::Value, affinity: serde_json::Value) -> Arc<PodInfo> {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": labels},
            "spec": {"containers": [{"name": "c"}], "affinity": affinity}
        }))
        .unwrap();
        Arc::new(PodInfo::new(Arc::new(p)))
    }

    /// Which nodes pass PreFilter + Filter for `incoming`.
    fn feasible(s: &Snapshot, incoming: &PodInfo) -> Vec<String> {
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        let (_, st) = pl.pre_filter(&mut state, incoming, s);
        assert!(st.is_success() || st.code == Code::Skip);
        let mut out: Vec<String> = s
            .nodes()
            .iter()
            .filter(|n| st.code == Code::Skip || pl.filter(&state, incoming, n).is_success())
            .map(|n| n.name.clone())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn own_terms_follow_pod_moves_and_relabels() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", "a"));
        s.apply_node(node("n2", "b"));
        s.apply_node(node("n3", "b"));
        s.add_pod("n2", pod("cache", json!({"app": "cache"}), json!(null)));
        let near = pod(
            "web",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}]}}),
        );
        let apart = pod(
            "solo",
            json!({"app": "solo"}),
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cache"}}}]}}),
        );
        assert_eq!(feasible(&s, &near), ["n2", "n3"]);
        assert_eq!(feasible(&s, &apart), ["n1", "n3"]);
        // the cache pod moves to n1: the kept counts follow
        s.remove_pod("n2", "cache");
        s.add_pod("n1", pod("cache", json!({"app": "cache"}), json!(null)));
        assert_eq!(feasible(&s, &near), ["n1"]);
        assert_eq!(feasible(&s, &apart), ["n2", "n3"]);
        // n3 relabelled into zone a joins the cache pod's domain
        s.apply_node(node("n3", "a"));
        assert_eq!(feasible(&s, &near), ["n1", "n3"]);
        // no cache pod left: the first pod of a self-matching group may go
        // anywhere, others nowhere
        s.remove_pod("n1", "cache");
        assert!(feasible(&s, &near).is_empty());
        assert_eq!(feasible(&s, &apart), ["n1", "n2", "n3"]);
    }

    #[test]
    fn existing_pods_terms_follow_pod_moves_and_relabels() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", "a"));
        s.apply_node(node("n2", "b"));
        s.apply_node(node("n3", "b"));
        let guard = || {
            pod(
                "guard",
                json!({"app": "guard"}),
                json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "web"}}}]},
                    "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}]}}),
            )
        };
        let web = pod("web", json!({"app": "web"}), json!(null));
        let other = pod("db", json!({"app": "db"}), json!(null));
        s.add_pod("n2", guard());
        // symmetry: the guard's anti-affinity keeps web pods out of zone b
        assert_eq!(feasible(&s, &web), ["n1"]);
        assert_eq!(feasible(&s, &other), ["n1", "n2", "n3"]);
        s.remove_pod("n2", "guard");
        s.add_pod("n1", guard());
        assert_eq!(feasible(&s, &web), ["n2", "n3"]);
        s.apply_node(node("n3", "a"));
        assert_eq!(feasible(&s, &web), ["n2"]);
        // the guard's required affinity toward web pods scores its own node
        // (hardPodAffinityWeight 1) above the others
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        let nodes: Vec<&NodeInfo> = s.nodes().iter().collect();
        assert!(pl.pre_score(&mut state, &web, &nodes, &s).is_success());
        let score = |n: &str| pl.score(&state, &web, s.get(n).unwrap()).0;
        assert_eq!((score("n1"), score("n2"), score("n3")), (1, 0, 0));
        s.remove_pod("n1", "guard");
        assert!(s.existing_terms().is_empty());
        let mut state = CycleState::default();
        assert_eq!(
            pl.pre_score(&mut state, &web, &nodes_of(&s), &s).code,
            Code::Skip
        );
    }

    #[test]
    fn required_affinity_counts_pods_matching_every_term() {
        let mut s = Snapshot::new();
        s.apply_node(node("n1", "a"));
        s.apply_node(node("n2", "a"));
        s.apply_node(node("n3", "b"));
        // zone a has a cache pod and a backend pod, but no pod that is both
        s.add_pod("n1", pod("cache", json!({"app": "cache"}), json!(null)));
        s.add_pod(
            "n2",
            pod("backend", json!({"tier": "backend"}), json!(null)),
        );
        let zone = "topology.kubernetes.io/zone";
        let web = pod(
            "web",
            json!({"app": "web"}),
            json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": zone, "labelSelector": {"matchLabels": {"app": "cache"}}},
                {"topologyKey": zone, "labelSelector": {"matchLabels": {"tier": "backend"}}}]}}),
        );
        assert!(
            feasible(&s, &web).is_empty(),
            "each term alone is met in zone a, both together nowhere"
        );
        // a pod both terms select, in zone b, opens zone b only
        s.add_pod(
            "n3",
            pod(
                "both",
                json!({"app": "cache", "tier": "backend"}),
                json!(null),
            ),
        );
        assert_eq!(feasible(&s, &web), ["n3"]);
        // the same through PreFilter's AddPod (a nominated pod): moving the
        // dual pod's twin into zone a opens zone a too
        let pl = InterPodAffinity::new(None).unwrap();
        let mut state = CycleState::default();
        let _ = pl.pre_filter(&mut state, &web, &s);
        let twin = pod(
            "twin",
            json!({"app": "cache", "tier": "backend"}),
            json!(null),
        );
        let lone = pod("lone", json!({"app": "cache"}), json!(null));
        let n1 = s.get("n1").unwrap();
        assert!(pl.add_pod(&mut state, &web, &lone, n1).is_success());
        assert!(!pl.filter(&state, &web, n1).is_success(), "one term only");
        assert!(pl.add_pod(&mut state, &web, &twin, n1).is_success());
        assert!(pl.filter(&state, &web, n1).is_success());
        assert!(pl.filter(&state, &web, s.get("n2").unwrap()).is_success());
    }

    fn nodes_of(s: &Snapshot) -> Vec<&NodeInfo> {
        s.nodes().iter().collect()
    }
}
