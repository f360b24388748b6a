//! What the server serves, from discovery: the resources the controllers
//! watch, list and delete, and the mapping from an ownerReference's
//! `apiVersion` and `kind` to a resource.
//!
//! Discovery is client-go's `ServerPreferredResources`, group-version by
//! group-version (`/api/v1`, `/apis/{group}/{version}`), so one failing
//! group-version (an aggregated API whose backend is down answers 503)
//! leaves the rest usable: its failure is recorded in [`Catalog::failed`]
//! and the controllers decide what that means (the garbage collector keeps
//! watching what it watched there; the namespace controller deletes what it
//! can and does not finalize). A resource is taken at its group's preferred
//! version, or — when that version does not serve it — at the first version
//! (in the server's priority order) that does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
use kube::Client;
use kube::core::discovery::verbs;
use kube::core::{ApiResource, GroupVersion, GroupVersionKind};

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
    fn new(r: &APIResource, gv: &GroupVersion) -> Resource {
        Resource {
            ar: ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(&gv.group, &gv.version, &r.kind),
                &r.name,
            ),
            namespaced: r.namespaced,
            verbs: r.verbs.clone(),
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

    /// Its group-version as discovery names it (`v1`, `apps/v1`).
    pub fn group_version(&self) -> &str {
        &self.ar.api_version
    }
}

/// Resources kube's garbage collector ignores by default.
const GC_IGNORED: [(&str, &str); 2] = [("", "events"), ("events.k8s.io", "events")];

/// Group-versions fetched at once during discovery.
const CONCURRENT_FETCHES: usize = 16;

/// A snapshot of discovery.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Each resource once, at its preferred version (see the module docs).
    preferred: Vec<Arc<Resource>>,
    /// `(group, version, kind)` → the resource serving that kind there.
    by_gvk: HashMap<(String, String, String), Arc<Resource>>,
    /// Group-versions whose discovery failed → why.
    failed: BTreeMap<String, String>,
}

impl Catalog {
    /// Run discovery. Fails only when the group lists (`/api`, `/apis`)
    /// cannot be read; a failing group-version is recorded in
    /// [`Catalog::failed`] instead.
    pub async fn discover(client: &Client) -> Result<Catalog, kube::Error> {
        let core = client.list_core_api_versions().await?;
        let groups = client.list_api_groups().await?;
        // (group, versions in priority order, preferred version)
        let mut plan: Vec<(String, Vec<String>, Option<String>)> = Vec::new();
        plan.push((
            String::new(),
            core.versions.clone(),
            core.versions.first().cloned(),
        ));
        for g in groups.groups {
            let versions = g.versions.iter().map(|v| v.version.clone()).collect();
            let preferred = g.preferred_version.map(|v| v.version);
            plan.push((g.name, versions, preferred));
        }
        let mut fetches: Vec<GroupVersion> = Vec::new();
        for (group, versions, _) in &plan {
            fetches.extend(versions.iter().map(|v| GroupVersion::gv(group, v)));
        }
        let fetched: HashMap<String, Result<APIResourceList, kube::Error>> =
            futures::stream::iter(fetches)
                .map(|gv| async move {
                    let r = if gv.group.is_empty() {
                        client.list_core_api_resources(&gv.version).await
                    } else {
                        client.list_api_group_resources(&gv.api_version()).await
                    };
                    (gv.api_version(), r)
                })
                .buffer_unordered(CONCURRENT_FETCHES)
                .collect()
                .await;
        let mut cat = Catalog::default();
        let mut lists: HashMap<String, APIResourceList> = HashMap::new();
        for (gv, r) in fetched {
            match r {
                Ok(list) => {
                    lists.insert(gv, list);
                }
                Err(e) => {
                    tracing::debug!(group_version = %gv, error = %e, "discovery failed for a group-version");
                    cat.failed.insert(gv, discovery_error_message(&e));
                }
            }
        }
        for (group, versions, preferred) in plan {
            // plural → chosen resource, in first-seen order.
            let mut chosen: Vec<Arc<Resource>> = Vec::new();
            let mut index: HashMap<String, usize> = HashMap::new();
            for v in &versions {
                let gv = GroupVersion::gv(&group, v);
                let Some(list) = lists.get(&gv.api_version()) else {
                    continue;
                };
                let is_preferred = preferred.as_deref() == Some(v.as_str());
                for r in list.resources.iter().filter(|r| !r.name.contains('/')) {
                    let res = Arc::new(Resource::new(r, &gv));
                    cat.by_gvk
                        .entry((group.clone(), v.clone(), r.kind.clone()))
                        .or_insert_with(|| res.clone());
                    match index.get(&r.name) {
                        None => {
                            index.insert(r.name.clone(), chosen.len());
                            chosen.push(res);
                        }
                        Some(&i) if is_preferred => chosen[i] = res,
                        Some(_) => {}
                    }
                }
            }
            cat.preferred.extend(chosen);
        }
        Ok(cat)
    }

    /// Resources the garbage collector watches: listable, watchable and
    /// deletable, at their preferred version, minus events.
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
    /// listable, at their preferred version.
    pub fn namespaced_deletable(&self) -> Vec<Arc<Resource>> {
        self.preferred
            .iter()
            .filter(|r| r.namespaced && r.supports(verbs::DELETE) && r.supports(verbs::LIST))
            .cloned()
            .collect()
    }

    /// The resource an ownerReference's `apiVersion` and `kind` name, at
    /// exactly that version. `None` when that version is not served (kube's
    /// collector cannot map it either, and retries rather than guess).
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<Arc<Resource>> {
        let (group, version) = split_api_version(api_version);
        self.by_gvk
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .cloned()
    }

    /// Group-versions whose discovery failed (`v1`, `apps/v1`) → why.
    pub fn failed(&self) -> &BTreeMap<String, String> {
        &self.failed
    }

    /// client-go's `ErrGroupDiscoveryFailed` text for the failed
    /// group-versions, or `None` when none failed.
    pub fn failure_message(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .failed
            .iter()
            .map(|(gv, why)| format!("{gv}: {why}"))
            .collect();
        Some(format!(
            "unable to retrieve the complete list of server APIs: {}",
            each.join(", ")
        ))
    }
}

/// `(group, version)` of an `apiVersion` (`v1` is the core group).
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// What client-go reports for a failed discovery request: the `Status`
/// message, or for an answer that is not a `Status` (kube-aggregator
/// answers an unavailable APIService with a plain-text 503) the generic
/// message for its code.
fn discovery_error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason == "Failed to parse error data" || s.message.is_empty() => {
            match s.code {
                503 => "the server is currently unable to handle the request".to_string(),
                404 => "the server could not find the requested resource".to_string(),
                500 => {
                    "an error on the server has prevented the request from succeeding".to_string()
                }
                _ => s.message.clone(),
            }
        }
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_api_versions() {
        assert_eq!(split_api_version("v1"), ("", "v1"));
        assert_eq!(split_api_version("apps/v1"), ("apps", "v1"));
    }

    #[test]
    fn a_plain_text_503_reads_as_client_go_reports_it() {
        let e = kube::Error::Api(
            kube::core::Status::failure("service unavailable", "Failed to parse error data")
                .with_code(503)
                .boxed(),
        );
        assert_eq!(
            discovery_error_message(&e),
            "the server is currently unable to handle the request"
        );
    }
}
