//! The policy engine: which compiled policies apply to a pod (exempt
//! namespaces, exclusions, namespace and object selectors), and what they
//! say, per mode. Enforce refuses or mutates, Warn turns violations into
//! warnings, Audit records them (see [`AuditRecord`]) and changes nothing.
//!
//! The engine answers nothing until its inputs have synced
//! ([`Engine::not_ready`]), and refuses a pod whose namespace it cannot
//! read when a policy needs the namespace's labels.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::core::admission::{AdmissionRequest, Operation};
use kube::runtime::reflector::Store;
use kubeforge_runtime::webhook::Verdict;

use crate::policy::{CompiledPolicy, Mode};
use crate::rules;
use crate::signature::{SIGNATURES_LABEL, decode_signatures};

/// One violation recorded by an Audit-mode policy.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    /// The policy.
    pub policy: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// `CREATE` or `UPDATE`.
    pub operation: String,
    /// The violations, joined.
    pub message: String,
}

/// Where the engine reads namespaces and signatures.
#[derive(Clone, Default)]
pub struct ClusterView {
    /// Namespaces (for namespace selectors and sidecar opt-in).
    pub namespaces: Option<Store<Namespace>>,
    /// ConfigMaps labelled [`SIGNATURES_LABEL`].
    pub signatures: Option<Store<ConfigMap>>,
    /// Used when a namespace is not in the cache yet (just created).
    pub client: Option<kube::Client>,
}

/// Inputs the engine waits for (see [`Engine::waiting_for`]).
pub mod inputs {
    /// The AdmissionPolicy cache.
    pub const POLICIES: u8 = 1;
    /// The namespace cache.
    pub const NAMESPACES: u8 = 2;
    /// The signature ConfigMap cache.
    pub const SIGNATURES: u8 = 4;
}

/// The engine; cheap to share.
pub struct Engine {
    policies: RwLock<Arc<Vec<Arc<CompiledPolicy>>>>,
    exempt: Vec<String>,
    view: ClusterView,
    audit: Option<tokio::sync::mpsc::UnboundedSender<AuditRecord>>,
    /// [`inputs`] not synced yet.
    pending: tokio::sync::watch::Sender<u8>,
}

impl Engine {
    /// An engine that never touches pods in `exempt` namespaces.
    pub fn new(exempt: Vec<String>, view: ClusterView) -> Engine {
        Engine {
            policies: RwLock::new(Arc::default()),
            exempt,
            view,
            audit: None,
            pending: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Answer no review until each of `inputs` (a mask of [`inputs`]) is
    /// marked with [`Engine::synced`].
    #[must_use]
    pub fn waiting_for(self, inputs: u8) -> Engine {
        self.pending.send_replace(inputs);
        self
    }

    /// Mark an input as synced.
    pub fn synced(&self, input: u8) {
        self.pending.send_modify(|p| *p &= !input);
    }

    /// Resolves once every input has synced.
    pub async fn until_ready(&self) {
        let mut rx = self.pending.subscribe();
        let _ = rx.wait_for(|p| *p == 0).await;
    }

    /// Why the engine cannot answer yet, or `None` when it can.
    pub fn not_ready(&self) -> Option<String> {
        let pending = *self.pending.borrow();
        if pending == 0 {
            return None;
        }
        let names: Vec<&str> = [
            (inputs::POLICIES, "AdmissionPolicies"),
            (inputs::NAMESPACES, "namespaces"),
            (inputs::SIGNATURES, "signature ConfigMaps"),
        ]
        .iter()
        .filter(|(bit, _)| pending & bit != 0)
        .map(|(_, n)| *n)
        .collect();
        Some(format!(
            "the policy server is not ready: its cache of {} has not synced yet",
            names.join(", ")
        ))
    }

    /// Send Audit-mode results to `tx`.
    #[must_use]
    pub fn with_audit(mut self, tx: tokio::sync::mpsc::UnboundedSender<AuditRecord>) -> Engine {
        self.audit = Some(tx);
        self
    }

    /// Replace the policies in effect.
    pub fn set_policies(&self, policies: Vec<CompiledPolicy>) {
        self.set_compiled(policies.into_iter().map(Arc::new).collect());
    }

    /// Replace the policies in effect (shared with the policy cache).
    pub fn set_compiled(&self, policies: Vec<Arc<CompiledPolicy>>) {
        if let Ok(mut p) = self.policies.write() {
            *p = Arc::new(policies);
        }
    }

    /// The policies in effect.
    pub fn policies(&self) -> Arc<Vec<Arc<CompiledPolicy>>> {
        self.policies.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// The namespace's labels: from the cache, else from the API server
    /// (a namespace just created). An error when it cannot be read: the
    /// policies that select namespaces cannot be decided then. An engine
    /// with no cluster view sees no labels.
    async fn namespace_labels(&self, ns: &str) -> Result<BTreeMap<String, String>, String> {
        if let Some(store) = &self.view.namespaces
            && let Some(n) = store.get(&kube::runtime::reflector::ObjectRef::new(ns))
        {
            return Ok(n.metadata.labels.clone().unwrap_or_default());
        }
        let Some(client) = &self.view.client else {
            return Ok(BTreeMap::new());
        };
        let api: kube::Api<Namespace> = kube::Api::all(client.clone());
        match api.get_opt(ns).await {
            Ok(Some(n)) => Ok(n.metadata.labels.unwrap_or_default()),
            Ok(None) => Err(format!(
                "the policy server cannot read namespace \"{ns}\": not found"
            )),
            Err(e) => Err(format!(
                "the policy server cannot read namespace \"{ns}\": {e}"
            )),
        }
    }

    fn signatures(&self, key: &str) -> Vec<Vec<u8>> {
        let Some(store) = &self.view.signatures else {
            return Vec::new();
        };
        store
            .state()
            .iter()
            .filter(|cm| {
                cm.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SIGNATURES_LABEL))
                    .is_some_and(|v| v == "true")
            })
            .filter_map(|cm| {
                cm.data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| decode_signatures(v))
            })
            .flatten()
            .collect()
    }

    /// The policies applying to `pod` in `ns`, with the namespace's labels;
    /// an error when the namespace is needed and cannot be read.
    async fn applicable(
        &self,
        ns: &str,
        pod: &Pod,
    ) -> Result<(Vec<Arc<CompiledPolicy>>, BTreeMap<String, String>), String> {
        if self.exempt.iter().any(|e| e == ns) {
            return Ok((Vec::new(), BTreeMap::new()));
        }
        let all = self.policies();
        let mut labels = None;
        let mut out = Vec::new();
        for p in all.iter() {
            if p.spec.exclude_namespaces.iter().any(|e| e == ns) {
                continue;
            }
            let needs_ns = !p.namespace_selector.is_everything() || p.spec.sidecar.is_some();
            if needs_ns && labels.is_none() {
                labels = Some(self.namespace_labels(ns).await?);
            }
            if !p.namespace_selector.is_everything() {
                let l = labels.clone().unwrap_or_default();
                if !p.namespace_selector.matches(&l) {
                    continue;
                }
            }
            if !p.object_selector.is_everything() {
                let l = pod.metadata.labels.clone().unwrap_or_default();
                if !p.object_selector.matches(&l) {
                    continue;
                }
            }
            out.push(p.clone());
        }
        Ok((out, labels.unwrap_or_default()))
    }

    fn pod_name(req: &AdmissionRequest<Pod>, pod: &Pod) -> String {
        if !req.name.is_empty() {
            return req.name.clone();
        }
        pod.metadata
            .name
            .clone()
            .or_else(|| pod.metadata.generate_name.clone())
            .unwrap_or_default()
    }

    /// Validate a pod create or update.
    pub async fn validate(&self, req: &AdmissionRequest<Pod>) -> Verdict {
        let Some(pod) = req.object.as_ref() else {
            return Verdict::allow();
        };
        if !matches!(req.operation, Operation::Create | Operation::Update) {
            return Verdict::allow();
        }
        if let Some(why) = self.not_ready() {
            return Verdict::deny(why);
        }
        let ns = req.namespace.clone().unwrap_or_default();
        let (policies, _) = match self.applicable(&ns, pod).await {
            Ok(found) => found,
            Err(why) => return Verdict::deny(why),
        };
        // Through `pods/ephemeralcontainers` only the containers it adds
        // are reviewed (the rest of the pod cannot change there).
        let added;
        let pod = if req.sub_resource.as_deref() == Some("ephemeralcontainers") {
            added = rules::added_ephemeral_containers(pod, req.old_object.as_ref());
            &added
        } else {
            pod
        };
        let mut denials = Vec::new();
        let mut verdict = Verdict::allow();
        for p in &policies {
            let mut v = Vec::new();
            if let Some(cfg) = &p.spec.require_resources {
                v.extend(rules::require_resources(pod, cfg));
            }
            if let Some(cfg) = &p.spec.images {
                v.extend(rules::images(pod, cfg));
            }
            if !p.keys.is_empty() {
                v.extend(rules::signatures(pod, &p.keys, &|k| self.signatures(k)));
            }
            if v.is_empty() {
                continue;
            }
            let message = v.join("; ");
            match p.spec.mode {
                Mode::Enforce => denials.push(format!("policy \"{}\": {message}", p.name)),
                Mode::Warn => verdict = verdict.warn(format!("policy \"{}\": {message}", p.name)),
                Mode::Audit => {
                    if let Some(tx) = &self.audit {
                        let _ = tx.send(AuditRecord {
                            policy: p.name.clone(),
                            namespace: ns.clone(),
                            name: Self::pod_name(req, pod),
                            operation: format!("{:?}", req.operation).to_uppercase(),
                            message,
                        });
                    }
                }
            }
        }
        if denials.is_empty() {
            verdict
        } else {
            Verdict {
                allowed: false,
                message: denials.join("; "),
                warnings: verdict.warnings,
            }
        }
    }

    /// Mutate a pod being created: default metadata, sidecar, scheduling.
    pub async fn mutate(&self, req: &AdmissionRequest<Pod>, pod: &mut Pod) -> Verdict {
        if req.operation != Operation::Create {
            return Verdict::allow();
        }
        if let Some(why) = self.not_ready() {
            return Verdict::deny(why);
        }
        let ns = req.namespace.clone().unwrap_or_default();
        let (policies, ns_labels) = match self.applicable(&ns, pod).await {
            Ok(found) => found,
            Err(why) => return Verdict::deny(why),
        };
        for p in policies.iter().filter(|p| p.spec.mode != Mode::Audit) {
            if let Some(cfg) = &p.spec.default_metadata {
                rules::default_metadata(pod, cfg);
            }
            if let Some(cfg) = &p.spec.sidecar {
                let (k, v) = &p.sidecar_namespace_label;
                let ns_in = ns_labels.get(k) == Some(v);
                if rules::wants_sidecar(pod, ns_in) {
                    rules::inject_sidecar(pod, cfg);
                }
            }
            if !p.spec.scheduling.is_empty() {
                rules::scheduling(pod, &p.spec.scheduling);
            }
        }
        Verdict::allow()
    }
}
