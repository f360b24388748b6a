//! Helpers shared by the workload controllers: expectations, selectors,
//! pod readiness, int-or-percent arithmetic, the pod-template hash, pod
//! construction and API calls.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, Patch, PatchParams};
use kube::core::{Selector, SelectorExt};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use serde_json::{Value, json};

pub(crate) use kubeforge_runtime::sync::lock;

/// Spaces one controller's syncs of each object at least a given interval
/// apart: a sync that comes sooner waits out the rest first, and the
/// triggers that arrive meanwhile are merged by the controller's queue into
/// the one sync after it. A ReplicaSet of 1,000 pods gets an event per pod
/// change — thousands a second while it rolls out — and each sync reads all
/// its pods; pacing keeps that to a bounded number of syncs per second
/// without delaying the first sync after a quiet spell.
#[derive(Default)]
pub(crate) struct Pacer {
    last: Mutex<HashMap<String, tokio::time::Instant>>,
}

impl Pacer {
    /// Wait until `every` has passed since the last sync of `key` began,
    /// then record this one; whether it waited.
    pub(crate) async fn pace(&self, key: &str, every: Duration) -> bool {
        if every.is_zero() {
            return false;
        }
        let next = {
            let mut m = lock(&self.last);
            let now = tokio::time::Instant::now();
            let next = m.get(key).map(|t| *t + every).filter(|t| *t > now);
            m.insert(key.to_string(), next.unwrap_or(now));
            next
        };
        if let Some(at) = next {
            tokio::time::sleep_until(at).await;
        }
        next.is_some()
    }

    /// Forget `key` (the object is gone).
    pub(crate) fn forget(&self, key: &str) {
        lock(&self.last).remove(key);
    }
}

/// How long an unmet expectation is trusted (kube: 5 minutes).
const EXPECTATION_TTL: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Expected {
    adds: HashSet<String>,
    dels: HashSet<String>,
    at: Option<Instant>,
}

/// Pods a controller created or deleted and has not yet seen so in its
/// cache (kube's ControllerExpectations, by pod name): until they are
/// observed, a controller does not count pods again, so watch lag never
/// makes it create or delete twice.
#[derive(Default)]
pub(crate) struct Expectations {
    by_owner: Mutex<HashMap<String, Expected>>,
    /// Pod UIDs whose tracking finalizer `owner` removed and has not yet
    /// seen gone in its cache (kube's job `finalizerExpectations`).
    finalizer_removals: Mutex<HashMap<String, HashSet<String>>>,
}

impl Expectations {
    /// `owner` (a key such as `rs/ns/name`) expects pod `ns/name` to appear.
    pub(crate) fn expect_add(&self, owner: &str, pod: String) {
        let mut m = lock(&self.by_owner);
        let e = m.entry(owner.to_string()).or_default();
        e.adds.insert(pod);
        e.at = Some(Instant::now());
    }

    /// `owner` expects pod `ns/name` to disappear (or be terminating).
    pub(crate) fn expect_del(&self, owner: &str, pod: String) {
        let mut m = lock(&self.by_owner);
        let e = m.entry(owner.to_string()).or_default();
        e.dels.insert(pod);
        e.at = Some(Instant::now());
    }

    /// Forget what `owner` expected (the owner is gone).
    pub(crate) fn forget(&self, owner: &str) {
        lock(&self.by_owner).remove(owner);
        lock(&self.finalizer_removals).remove(owner);
    }

    /// `owner` is about to remove its finalizer from the pods `uids`.
    pub(crate) fn expect_finalizers_removed(
        &self,
        owner: &str,
        uids: impl IntoIterator<Item = String>,
    ) {
        lock(&self.finalizer_removals)
            .entry(owner.to_string())
            .or_default()
            .extend(uids);
    }

    /// The removal from pod `uid` failed: no change to wait for.
    pub(crate) fn finalizer_removal_failed(&self, owner: &str, uid: &str) {
        if let Some(set) = lock(&self.finalizer_removals).get_mut(owner) {
            set.remove(uid);
        }
    }

    /// The pods whose finalizer `owner` removed but whose cached copy still
    /// shows it (`still_showing`, read from the store the caller then lists
    /// its pods from): the caller treats them as having no finalizer.
    pub(crate) fn pending_finalizer_removals(
        &self,
        owner: &str,
        still_showing: impl Fn(&str) -> bool,
    ) -> HashSet<String> {
        let mut m = lock(&self.finalizer_removals);
        let Some(set) = m.get_mut(owner) else {
            return HashSet::new();
        };
        set.retain(|uid| still_showing(uid));
        if set.is_empty() {
            m.remove(owner);
            return HashSet::new();
        }
        set.clone()
    }

    /// Whether everything `owner` expected has been observed through
    /// `seen` (or the expectations expired). `seen` must read the store the
    /// caller then lists its pods from, and the check must come before
    /// that list (kube's `SatisfiedExpectations`, then the lister of the
    /// same informer): a pod seen here is then also in the list, so it is
    /// never counted missing and created again.
    pub(crate) fn satisfied(
        &self,
        owner: &str,
        seen: impl Fn(&ObjectRef<Pod>) -> Option<Arc<Pod>>,
    ) -> bool {
        let mut m = lock(&self.by_owner);
        let Some(e) = m.get_mut(owner) else {
            return true;
        };
        e.adds.retain(|k| seen(&pod_ref(k)).is_none());
        e.dels
            .retain(|k| seen(&pod_ref(k)).is_some_and(|p| p.metadata.deletion_timestamp.is_none()));
        let expired = e.at.is_some_and(|t| t.elapsed() > EXPECTATION_TTL);
        if e.adds.is_empty() && e.dels.is_empty() || expired {
            m.remove(owner);
            return true;
        }
        false
    }
}

/// What a controller last wrote to objects it then reads from a cache,
/// by object key: a sync can tell that a cached copy is older than the
/// controller's own last write, and must not act on it.
pub(crate) struct LastWrites<T>(Mutex<HashMap<String, T>>);

impl<T> Default for LastWrites<T> {
    fn default() -> Self {
        LastWrites(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> LastWrites<T> {
    /// The controller wrote `key`, which now reads `v`.
    pub(crate) fn record(&self, key: String, v: T) {
        lock(&self.0).insert(key, v);
    }

    /// The last write to `key` not yet seen in the cache.
    pub(crate) fn get(&self, key: &str) -> Option<T> {
        lock(&self.0).get(key).cloned()
    }

    /// The cache shows the write (or the object is gone).
    pub(crate) fn forget(&self, key: &str) {
        lock(&self.0).remove(key);
    }
}

/// The cache key of pod `ns/name`.
fn pod_ref(key: &str) -> ObjectRef<Pod> {
    match key.split_once('/') {
        Some((ns, name)) => ObjectRef::new(name).within(ns),
        None => ObjectRef::new(key),
    }
}

/// `ns/name` of an object.
pub(crate) fn key_of(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// The controller reference of an object, if any.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// A selector that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("invalid selector: {0}")]
pub(crate) struct BadSelector(pub String);

/// Parse a LabelSelector. `None` or an empty selector selects nothing (as
/// workload controllers treat it).
pub(crate) fn selector(sel: Option<&LabelSelector>) -> Result<Option<Selector>, BadSelector> {
    let Some(sel) = sel else { return Ok(None) };
    if sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && sel.match_expressions.as_ref().is_none_or(Vec::is_empty)
    {
        return Ok(None);
    }
    Selector::try_from(sel.clone())
        .map(Some)
        .map_err(|e| BadSelector(e.to_string()))
}

/// Whether `sel` selects `labels`.
pub(crate) fn matches(sel: &Option<Selector>, labels: Option<&BTreeMap<String, String>>) -> bool {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    sel.as_ref()
        .is_some_and(|s| s.matches(labels.unwrap_or(&EMPTY)))
}

/// Whether the pod is active: not terminating and not finished
/// (kube's `IsPodActive`).
pub(crate) fn is_active(p: &Pod) -> bool {
    !is_terminal(p) && p.metadata.deletion_timestamp.is_none()
}

/// Whether the pod has finished (Succeeded or Failed).
pub(crate) fn is_terminal(p: &Pod) -> bool {
    matches!(phase(p), "Succeeded" | "Failed")
}

/// The pod's phase ("" when unset).
pub(crate) fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// When the pod's Ready condition turned True, if it is True.
pub(crate) fn ready_since(p: &Pod) -> Option<Option<jiff::Timestamp>> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?;
    (c.status == "True").then(|| c.last_transition_time.as_ref().map(|t| t.0))
}

/// Whether the pod is Ready.
pub(crate) fn is_ready(p: &Pod) -> bool {
    ready_since(p).is_some()
}

/// Whether the pod has been Ready for `min_ready` seconds at `now`; also
/// when it will be (for a requeue).
pub(crate) fn availability(
    p: &Pod,
    min_ready: i32,
    now: jiff::Timestamp,
) -> (bool, Option<Duration>) {
    match ready_since(p) {
        None => (false, None),
        Some(_) if min_ready <= 0 => (true, None),
        Some(None) => (false, None),
        Some(Some(since)) => {
            let at = since
                .checked_add(jiff::SignedDuration::from_secs(i64::from(min_ready)))
                .unwrap_or(since);
            if at <= now {
                (true, None)
            } else {
                let wait = Duration::try_from(at.duration_since(now)).unwrap_or_default();
                (false, Some(wait))
            }
        }
    }
}

/// The value of an int-or-percent against `total`, rounding up or down
/// (kube's `GetScaledValueFromIntOrPercent`).
pub(crate) fn scaled(v: Option<&IntOrString>, total: i32, round_up: bool) -> Result<i32, String> {
    match v {
        None => Ok(0),
        Some(IntOrString::Int(i)) => Ok(*i),
        Some(IntOrString::String(s)) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|n| n.parse::<i64>().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid type: string is not a percentage: {s:?}"))?;
            let num = pct * i64::from(total);
            let v = if round_up {
                (num + 99).div_euclid(100)
            } else {
                num.div_euclid(100)
            };
            i32::try_from(v).map_err(|_| format!("value out of range: {s}"))
        }
    }
}

/// 32-bit FNV-1a.
pub(crate) fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// kube's `rand.SafeEncodeString`: each byte mapped onto an alphabet
/// without vowels or look-alikes.
pub(crate) fn safe_encode(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    s.bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The pod-template hash: FNV-32a over the template (canonical JSON: keys
/// sorted) followed by the collision count as 4 little-endian bytes, as
/// decimal text, safe-encoded (kube's `ComputeHash`; kube hashes the Go
/// struct's printed form, so values differ from a real cluster's).
pub(crate) fn template_hash(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut t = template.clone();
    if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        l.remove(POD_TEMPLATE_HASH);
    }
    let mut bytes = serde_json::to_value(&t)
        .map(|v| v.to_string().into_bytes())
        .unwrap_or_default();
    if let Some(c) = collision_count {
        bytes.extend_from_slice(&(c as u32).to_le_bytes());
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The label naming a pod's template hash.
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Whether two templates are equal ignoring the pod-template-hash label.
pub(crate) fn templates_equal(a: &PodTemplateSpec, b: &PodTemplateSpec) -> bool {
    let strip = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(m) = t.metadata.as_mut() {
            if let Some(l) = m.labels.as_mut() {
                l.remove(POD_TEMPLATE_HASH);
                if l.is_empty() {
                    m.labels = None;
                }
            }
            if m.annotations.as_ref().is_some_and(BTreeMap::is_empty) {
                m.annotations = None;
            }
        }
        serde_json::to_value(&t).unwrap_or(Value::Null)
    };
    strip(a) == strip(b)
}

/// A controller reference to `owner`.
pub(crate) fn owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    kubeforge_runtime::owner::controller_owner_ref(owner)
}

/// A pod for `template`, controlled by `owner`: named `name` or generated
/// from `prefix`.
pub(crate) fn pod_from_template(
    template: &PodTemplateSpec,
    owner: OwnerReference,
    name: Option<String>,
    prefix: &str,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    let generate_name = name.is_none().then(|| format!("{prefix}-"));
    Pod {
        metadata: ObjectMeta {
            name,
            generate_name,
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Merge-patch the status subresource of `K` `ns/name`.
pub(crate) async fn patch_status<K>(
    client: &Client,
    ns: Option<&str>,
    name: &str,
    status: Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns.unwrap_or_default());
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map(|_| ())
}

/// Adopt `pod` for `owner`: add the controller reference with a UID
/// precondition (kube's `ClaimPods`). Returns whether it was adopted.
pub(crate) async fn adopt_pod(
    client: &Client,
    pod: &Pod,
    owner: OwnerReference,
) -> Result<bool, kube::Error> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut refs = pod.metadata.owner_references.clone().unwrap_or_default();
    refs.retain(|r| r.uid != owner.uid);
    refs.push(owner);
    let patch = json!({"metadata": {
        "ownerReferences": refs,
        "uid": pod.metadata.uid,
        "resourceVersion": pod.metadata.resource_version,
    }});
    match api
        .patch(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(e) if crate::is_not_found(&e) || crate::is_conflict(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Release `meta` from the controller with UID `uid` (the selector no
/// longer matches): remove that ownerReference.
pub(crate) async fn release<K>(
    client: &Client,
    meta: &ObjectMeta,
    uid: &str,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let ns = meta.namespace.as_deref().unwrap_or_default();
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let mut refs = meta.owner_references.clone().unwrap_or_default();
    refs.retain(|r| r.uid != uid);
    let patch =
        json!({"metadata": {"ownerReferences": refs, "resourceVersion": meta.resource_version}});
    match api
        .patch(
            meta.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::is_not_found(&e) || crate::is_conflict(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `Time` now.
pub(crate) fn now_time() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_are_judged_by_what_the_caller_lists_from() {
        let e = Expectations::default();
        let pod = |deleting: bool| {
            let mut p = Pod::default();
            p.metadata.name = Some("p".into());
            p.metadata.namespace = Some("ns".into());
            if deleting {
                p.metadata.deletion_timestamp = Some(now_time());
            }
            Arc::new(p)
        };
        e.expect_add("rs/ns/x", "ns/p".into());
        // The cache may hold the pod already: until the store the pods are
        // listed from has it, the creation is not observed.
        assert!(!e.satisfied("rs/ns/x", |_| None));
        assert!(e.satisfied("rs/ns/x", |id| (id.name == "p").then(|| pod(false))));
        e.expect_del("rs/ns/x", "ns/p".into());
        assert!(!e.satisfied("rs/ns/x", |_| Some(pod(false))));
        assert!(e.satisfied("rs/ns/x", |_| Some(pod(true))));
        assert!(e.satisfied("other", |_| None), "nothing expected");
    }

    #[tokio::test(start_paused = true)]
    async fn pacer_spaces_syncs_of_one_key_only() {
        let p = Pacer::default();
        let every = Duration::from_millis(100);
        let t0 = tokio::time::Instant::now();
        assert!(!p.pace("rs/a", every).await);
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "the first sync is not delayed"
        );
        assert!(!p.pace("rs/b", every).await);
        assert_eq!(t0.elapsed(), Duration::ZERO, "another key is not delayed");
        tokio::time::advance(Duration::from_millis(30)).await;
        assert!(p.pace("rs/a", every).await);
        assert_eq!(t0.elapsed(), every, "the second waits out the interval");
        tokio::time::advance(Duration::from_millis(250)).await;
        let t1 = tokio::time::Instant::now();
        assert!(!p.pace("rs/a", every).await);
        assert_eq!(t1.elapsed(), Duration::ZERO, "after a quiet spell no wait");
        p.forget("rs/a");
        assert!(!p.pace("rs/a", every).await);
        assert_eq!(
            t1.elapsed(),
            Duration::ZERO,
            "a forgotten key starts afresh"
        );
        assert!(!p.pace("rs/a", Duration::ZERO).await);
        assert_eq!(t1.elapsed(), Duration::ZERO, "zero means no pacing");
    }

    #[test]
    fn percentages_round_like_kube() {
        let p = |s: &str| IntOrString::String(s.into());
        assert_eq!(scaled(Some(&p("25%")), 3, true), Ok(1));
        assert_eq!(scaled(Some(&p("25%")), 3, false), Ok(0));
        assert_eq!(scaled(Some(&p("50%")), 5, true), Ok(3));
        assert_eq!(scaled(Some(&p("50%")), 5, false), Ok(2));
        assert_eq!(scaled(Some(&IntOrString::Int(2)), 5, false), Ok(2));
        assert!(scaled(Some(&p("x")), 5, false).is_err());
    }

    #[test]
    fn fnv_and_safe_encoding() {
        // FNV-1a test vectors.
        assert_eq!(fnv32a(b""), 0x811c_9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c_292c);
        assert_eq!(safe_encode("0123"), "4567");
        let t = PodTemplateSpec::default();
        assert_eq!(template_hash(&t, None), template_hash(&t, None));
        assert_ne!(template_hash(&t, None), template_hash(&t, Some(1)));
    }
}
