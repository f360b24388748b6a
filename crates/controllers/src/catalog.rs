//! What the server serves, from discovery: the resources the controllers
//! watch, list and delete, and the mapping from an ownerReference's
//! `apiVersion` and `kind` to a resource.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::core::discovery::{ApiCapabilities, ApiResource, Scope, verbs};
use kube::discovery::Discovery;

/// One served resource at one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Group, version, kind and plural.
    pub ar: ApiResource,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Verbs from discovery (`list`, `watch`, `delete`, `deletecollection`, …).
    pub verbs: Vec<String>,
}

impl Resource {
    fn new(ar: ApiResource, caps: &ApiCapabilities) -> Resource {
        Resource {
            ar,
            namespaced: caps.scope == Scope::Namespaced,
            verbs: caps.operations.clone(),
        }
    }

    /// Whether discovery lists `verb`.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `plural.group` (kube's GroupResource string, `pods.` for the core group
    /// as kube formats it in namespace conditions).
    pub fn group_resource(&self) -> String {
        format!("{}.{}", self.ar.plural, self.ar.group)
    }

    /// A key naming the resource regardless of version.
    pub fn key(&self) -> String {
        format!("{}/{}", self.ar.group, self.ar.plural)
    }
}

/// Resources kube's garbage collector ignores by default.
const GC_IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// A snapshot of discovery.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Each group's resources at its preferred version.
    preferred: Vec<Arc<Resource>>,
    /// `(group, kind)` → resources of that kind at every served version,
    /// preferred first.
    by_kind: HashMap<(String, String), Vec<Arc<Resource>>>,
}

impl Catalog {
    /// Run discovery.
    pub async fn discover(client: &Client) -> Result<Catalog, kube::Error> {
        let discovery = Discovery::new(client.clone()).run().await?;
        let mut cat = Catalog::default();
        for group in discovery.groups() {
            let preferred = group.preferred_version_or_latest().to_string();
            let mut versions: Vec<String> = group.versions().map(str::to_string).collect();
            versions.sort_by_key(|v| *v != preferred);
            for v in versions {
                for (ar, caps) in group.versioned_resources(&v) {
                    let r = Arc::new(Resource::new(ar, &caps));
                    if v == preferred {
                        cat.preferred.push(r.clone());
                    }
                    cat.by_kind
                        .entry((r.ar.group.clone(), r.ar.kind.clone()))
                        .or_default()
                        .push(r);
                }
            }
        }
        Ok(cat)
    }

    /// Resources the garbage collector watches: listable, watchable and
    /// deletable, at their group's preferred version, minus events.
    pub fn gc_resources(&self) -> Vec<Arc<Resource>> {
        self.preferred
            .iter()
            .filter(|r| {
                r.supports(verbs::LIST) && r.supports(verbs::WATCH) && r.supports(verbs::DELETE)
            })
            .filter(|r| {
                !GC_IGNORED
                    .iter()
                    .any(|(g, p)| r.ar.group == *g && r.ar.plural == *p)
            })
            .cloned()
            .collect()
    }

    /// Namespaced resources a namespace's deletion must empty: deletable and
    /// listable, at their group's preferred version.
    pub fn namespaced_deletable(&self) -> Vec<Arc<Resource>> {
        self.preferred
            .iter()
            .filter(|r| r.namespaced && r.supports(verbs::DELETE) && r.supports(verbs::LIST))
            .cloned()
            .collect()
    }

    /// The resource an ownerReference's `apiVersion` and `kind` name: that
    /// version when served, else the group's preferred one.
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<Arc<Resource>> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let list = self.by_kind.get(&(group.to_string(), kind.to_string()))?;
        list.iter()
            .find(|r| r.ar.version == version)
            .or_else(|| list.first())
            .cloned()
    }
}
