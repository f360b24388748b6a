//! Bindings of one scope (the cluster, or one namespace) indexed by the
//! subjects they name, shared by the RBAC and the kubeforge policy
//! authorizers: a decision looks only at the bindings that name the caller
//! (by user name, by each of its groups; ServiceAccount subjects under
//! their username), so its cost does not grow with the number of bindings.

// Keys are subject names written by those allowed to write bindings;
// foldhash's per-process seed keeps lookups quick without SipHash's cost.
use foldhash::HashMap;

use k8s_openapi::api::rbac::v1::Subject;

use crate::UserInfo;
use crate::user::service_account_username;

/// A binding as the index sees it.
pub(crate) trait HasSubjects {
    /// Its subjects, as written.
    fn subjects(&self) -> &[Subject];
    /// Its namespace ("" for a cluster binding): a ServiceAccount subject
    /// without a namespace is in it.
    fn namespace(&self) -> &str;
}

/// Bindings of one scope, by subject.
#[derive(Debug)]
pub(crate) struct SubjectIndex<B> {
    pub bindings: Vec<B>,
    /// By username; ServiceAccount subjects under their username.
    users: HashMap<String, Vec<u32>>,
    groups: HashMap<String, Vec<u32>>,
}

impl<B> Default for SubjectIndex<B> {
    fn default() -> Self {
        SubjectIndex {
            bindings: Vec::new(),
            users: HashMap::default(),
            groups: HashMap::default(),
        }
    }
}

impl<B: HasSubjects> SubjectIndex<B> {
    pub fn add(&mut self, b: B) {
        let i = u32::try_from(self.bindings.len()).unwrap_or(u32::MAX);
        for s in b.subjects() {
            let list = match s.kind.as_str() {
                "User" => self.users.entry(s.name.clone()).or_default(),
                "Group" => self.groups.entry(s.name.clone()).or_default(),
                "ServiceAccount" => {
                    let ns = s
                        .namespace
                        .as_deref()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(b.namespace());
                    if ns.is_empty() {
                        continue;
                    }
                    self.users
                        .entry(service_account_username(ns, &s.name))
                        .or_default()
                }
                _ => continue,
            };
            if list.last() != Some(&i) {
                list.push(i);
            }
        }
        self.bindings.push(b);
    }

    /// The lists of bindings naming `user`: by name, then by each group
    /// in the user's order. A binding may appear in several.
    pub fn lists<'a>(&'a self, user: &'a UserInfo) -> impl Iterator<Item = &'a [u32]> + 'a {
        let by_name = self.users.get(&user.name).map(Vec::as_slice);
        let by_group = user
            .groups
            .iter()
            .filter_map(|g| self.groups.get(g).map(Vec::as_slice));
        by_name.into_iter().chain(by_group)
    }

    /// The indices of the bindings naming `user`, each once, in order.
    pub fn ids(&self, user: &UserInfo, out: &mut Vec<u32>) {
        out.clear();
        for list in self.lists(user) {
            out.extend_from_slice(list);
        }
        out.sort_unstable();
        out.dedup();
    }
}

/// Bindings of every scope: the cluster's, and each namespace's.
#[derive(Debug)]
pub(crate) struct Scoped<B> {
    cluster: SubjectIndex<B>,
    namespaces: HashMap<String, SubjectIndex<B>>,
}

impl<B> Default for Scoped<B> {
    fn default() -> Self {
        Scoped {
            cluster: SubjectIndex::default(),
            namespaces: HashMap::default(),
        }
    }
}

impl<B: HasSubjects> Scoped<B> {
    /// Add `b` to the scope of its namespace.
    pub fn add(&mut self, b: B) {
        if b.namespace().is_empty() {
            self.cluster.add(b);
        } else {
            self.namespaces
                .entry(b.namespace().to_string())
                .or_default()
                .add(b);
        }
    }

    /// Every scope: the cluster's, then each namespace's (what a grant
    /// valid in every namespace is compared with).
    pub fn all_scopes(&self) -> impl Iterator<Item = &SubjectIndex<B>> + '_ {
        std::iter::once(&self.cluster).chain(self.namespaces.values())
    }

    /// The scopes a request in `namespace` looks at: the cluster's
    /// bindings, then the namespace's (kube's order).
    pub fn scopes<'a>(&'a self, namespace: &str) -> impl Iterator<Item = &'a SubjectIndex<B>> + 'a {
        let ns = if namespace.is_empty() {
            None
        } else {
            self.namespaces.get(namespace)
        };
        std::iter::once(&self.cluster).chain(ns)
    }

    /// Number of bindings in every scope.
    pub fn len(&self) -> usize {
        self.cluster.bindings.len()
            + self
                .namespaces
                .values()
                .map(|i| i.bindings.len())
                .sum::<usize>()
    }
}
