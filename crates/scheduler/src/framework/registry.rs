//! Plugins by name: a [`Registry`] maps a name to a factory that builds the
//! plugin from its `pluginConfig` args and a [`Handle`] to the scheduler
//! (kube-scheduler's `runtime.Registry`). Out-of-tree plugins register here
//! beside the in-tree ones, then a profile enables them by name.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use super::interface::Plugin;
use super::waiting::WaitingPods;
use crate::plugins;

/// What a plugin may use beyond the arguments of each call.
#[derive(Clone, Default)]
pub struct Handle {
    /// The API client (absent in in-process benchmarks without a server).
    pub client: Option<kube::Client>,
    /// The async runtime API calls from plugins run on.
    pub runtime: Option<tokio::runtime::Handle>,
    /// Resources extenders manage that NodeResourcesFit ignores.
    pub extender_ignored_resources: Vec<String>,
    /// Pods waiting at Permit.
    pub waiting_pods: WaitingPods,
    /// PodDisruptionBudgets, for preemption.
    pub pdbs: Arc<RwLock<Vec<PdbInfo>>>,
    /// Nodes to examine when filtering in parallel (kube-scheduler's
    /// `parallelism`).
    pub parallelism: usize,
}

/// A PodDisruptionBudget as preemption uses it.
#[derive(Debug, Clone)]
pub struct PdbInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pods it covers (never empty: a budget with an absent or empty
    /// selector covers no pod, as preemption reads it).
    pub selector: kubeforge_apimachinery::labels::Selector,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
    /// `status.disruptedPods`: pods whose eviction the API server already
    /// counted against the budget; evicting them again costs nothing.
    pub disrupted: std::collections::BTreeSet<String>,
}

/// Builds a plugin from its args (`pluginConfig[].args`, `None` when not
/// configured) — an error names what is wrong with the args.
pub type PluginFactory = Arc<
    dyn Fn(Option<&serde_json::Value>, &Handle) -> Result<Arc<dyn Plugin>, String> + Send + Sync,
>;

/// Plugin factories by name.
#[derive(Clone, Default)]
pub struct Registry {
    factories: BTreeMap<String, PluginFactory>,
}

/// Registering the same name twice.
#[derive(Debug, thiserror::Error)]
#[error("a plugin named {0:?} already exists")]
pub struct DuplicatePlugin(pub String);

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// The in-tree plugins (kube-scheduler's defaults and kubeforge's own).
    pub fn in_tree() -> Registry {
        let mut r = Registry::new();
        plugins::register_in_tree(&mut r);
        r
    }

    /// Register a factory under a name.
    pub fn register<F>(&mut self, name: &str, factory: F) -> Result<(), DuplicatePlugin>
    where
        F: Fn(Option<&serde_json::Value>, &Handle) -> Result<Arc<dyn Plugin>, String>
            + Send
            + Sync
            + 'static,
    {
        if self.factories.contains_key(name) {
            return Err(DuplicatePlugin(name.to_string()));
        }
        self.factories.insert(name.to_string(), Arc::new(factory));
        Ok(())
    }

    /// Merge another registry in (out-of-tree plugins).
    pub fn merge(&mut self, other: Registry) -> Result<(), DuplicatePlugin> {
        for (name, f) in other.factories {
            if self.factories.contains_key(&name) {
                return Err(DuplicatePlugin(name));
            }
            self.factories.insert(name, f);
        }
        Ok(())
    }

    /// The factory for a name.
    pub fn get(&self, name: &str) -> Option<&PluginFactory> {
        self.factories.get(name)
    }

    /// Registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }
}
