//! Authorization, the stage after authentication: may this user do this.
//!
//! [`attributes`] turns a routed request into kube's authorizer attributes
//! (its `RequestInfoFactory`: method → verb, nameless GET → list or watch,
//! nameless DELETE → deletecollection, `metadata.name=X` field selectors
//! naming X, `namespaces/{name}` in namespace name, everything outside
//! `/api` and `/apis` resources a non-resource path with the lowercased
//! method). [`Access::authorize`] asks the chain kube-apiserver runs:
//! `system:masters` first, then RBAC over the server's own Roles,
//! ClusterRoles and bindings; a refusal is kube's 403 text.
//!
//! The RBAC snapshot is rebuilt from the store when a write to
//! `rbac.authorization.k8s.io` committed since it was built (the write path
//! calls [`changed`] after each commit), so a request sent after a binding
//! was created is decided with it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use http::Method;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kubeforge_apimachinery::net::IpNet;
use kubeforge_authz::access::AccessAuthorizer;
use kubeforge_authz::rbac::{RbacAuthorizer, RbacPolicy};
use kubeforge_authz::user::SYSTEM_MASTERS;
use kubeforge_authz::{Attributes, Authorizer, Decision, UserInfo};

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceDef;
use crate::request::{Query, Route};
use crate::server::ApiServer;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Authentication and authorization settings and the RBAC snapshot.
#[derive(Default)]
pub(crate) struct Access {
    /// How network requests authenticate (`None`: everyone is the loopback
    /// user, the first-wave default).
    pub authentication: RwLock<Option<Arc<crate::authn::Authentication>>>,
    /// Whether RBAC decides (else every authenticated request is allowed).
    pub rbac: AtomicBool,
    /// Signs and verifies ServiceAccount tokens.
    pub issuer: RwLock<Option<Arc<kubeforge_authz::satoken::TokenIssuer>>>,
    /// Where audit events go, and which.
    pub audit: RwLock<Option<Arc<crate::audit::AuditLog>>>,
    /// Proxies whose `X-Forwarded-For` names the client.
    pub trusted_proxies: RwLock<Arc<[IpNet]>>,
    /// Bumped after every committed RBAC or access-policy write.
    generation: AtomicU64,
    /// One more than the generation the access policies' status was last
    /// written for (0: never).
    pub status_written: AtomicU64,
    /// The snapshot and the generation it was built at.
    snapshot: RwLock<Option<(u64, Snapshot)>>,
}

/// The policies decisions are made by, as of one generation.
#[derive(Clone, Default)]
pub(crate) struct Snapshot {
    /// RBAC.
    pub rbac: RbacAuthorizer,
    /// kubeforge's AccessRoles and AccessBindings.
    pub access: AccessAuthorizer,
}

impl Access {
    /// The authentication settings in force.
    pub fn authentication(&self) -> Option<Arc<crate::authn::Authentication>> {
        self.authentication
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The current generation of RBAC and access-policy objects.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The audit log, when on.
    pub fn audit(&self) -> Option<Arc<crate::audit::AuditLog>> {
        self.audit.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The trusted proxies.
    pub fn trusted_proxies(&self) -> Arc<[IpNet]> {
        self.trusted_proxies
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The ServiceAccount token issuer.
    pub fn token_issuer(&self) -> Option<Arc<kubeforge_authz::satoken::TokenIssuer>> {
        self.issuer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether RBAC decides; without it every request is allowed, so the
    /// attributes need not be built.
    pub fn rbac_enabled(&self) -> bool {
        self.rbac.load(Ordering::Relaxed)
    }

    /// The RBAC authorizer as of the last committed RBAC write.
    pub fn rbac_authorizer(&self, server: &ApiServer) -> RbacAuthorizer {
        self.snapshot(server).rbac
    }

    /// The policies as of the last committed RBAC or access-policy write.
    pub fn snapshot(&self, server: &ApiServer) -> Snapshot {
        let want = self.generation.load(Ordering::Acquire);
        if let Some((g, z)) = self
            .snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            && *g == want
        {
            return z.clone();
        }
        let mut slot = self.snapshot.write().unwrap_or_else(|p| p.into_inner());
        if let Some((g, z)) = slot.as_ref()
            && *g == want
        {
            return z.clone();
        }
        // `want` was read before the store is: a write committing while
        // this builds bumps the generation past it, and the next request
        // builds again.
        let rbac = load_policy(server);
        let access = crate::access_policy::load(server, &rbac);
        let z = Snapshot {
            rbac: RbacAuthorizer::new(rbac),
            access: AccessAuthorizer::new(access),
        };
        *slot = Some((want, z.clone()));
        z
    }

    /// Decide `a`: `system:masters` may do anything; then, when RBAC is
    /// on, kubeforge's policies (a Deny there refuses, an Allow allows),
    /// then RBAC.
    pub fn decide(&self, server: &ApiServer, a: &Attributes) -> Decision {
        self.decide_explained(server, a, false)
    }

    /// [`Access::decide`]; with `explain`, a refusal's reason also says why
    /// each kubeforge binding naming the user did not apply (what
    /// SubjectAccessReviews and `kubeforge authz explain` show).
    pub fn decide_explained(&self, server: &ApiServer, a: &Attributes, explain: bool) -> Decision {
        if a.user.in_group(SYSTEM_MASTERS) || !self.rbac_enabled() {
            return Decision::Allow {
                reason: String::new(),
            };
        }
        let snap = self.snapshot(server);
        let (first, skipped) = if explain {
            let e = snap.access.explain(a, jiff::Timestamp::now());
            (e.decision, e.skipped)
        } else {
            (snap.access.authorize(a), Vec::new())
        };
        if !matches!(first, Decision::NoOpinion { .. }) {
            return first;
        }
        match snap.rbac.authorize(a) {
            Decision::NoOpinion { reason } if !skipped.is_empty() => {
                let mut lines: Vec<String> = Vec::new();
                if !reason.is_empty() {
                    lines.push(reason);
                }
                lines.extend(skipped);
                Decision::NoOpinion {
                    reason: lines.join("\n"),
                }
            }
            d => d,
        }
    }

    /// Allow `a` or answer kube's 403.
    pub fn authorize(&self, server: &ApiServer, a: &Attributes) -> ApiResult<()> {
        match self.decide(server, a) {
            Decision::Allow { .. } => Ok(()),
            Decision::Deny { reason } | Decision::NoOpinion { reason } => {
                Err(forbidden(a, &reason))
            }
        }
    }
}

/// kube's 403 for a refused request.
pub(crate) fn forbidden(a: &Attributes, reason: &str) -> ApiError {
    ApiError::access_denied(
        a.forbidden_message(reason),
        &a.api_group,
        &a.resource,
        &a.name,
    )
}

/// After a committed write to `def`: RBAC objects invalidate the snapshot.
pub(crate) fn changed(server: &ApiServer, def: &ResourceDef) {
    if def.group == RBAC_GROUP || def.group == kubeforge_authz::access::GROUP {
        server
            .inner
            .access
            .generation
            .fetch_add(1, Ordering::AcqRel);
    }
}

fn load<T: serde::de::DeserializeOwned>(server: &ApiServer, plural: &str) -> Vec<T> {
    let Some(def) = server.registry().get(RBAC_GROUP, "v1", plural) else {
        return Vec::new();
    };
    let page = server.store().range(&def.key_prefix(), None, 0);
    page.kvs
        .iter()
        .filter_map(|kv| match serde_json::from_slice(&kv.value) {
            Ok(o) => Some(o),
            Err(e) => {
                // Stored objects passed validation; one that no longer
                // decodes grants nothing (fail closed) and is logged.
                tracing::warn!(resource = plural, error = %e, "stored RBAC object does not decode; ignored");
                None
            }
        })
        .collect()
}

fn load_policy(server: &ApiServer) -> RbacPolicy {
    let roles: Vec<Role> = load(server, "roles");
    let cluster_roles: Vec<ClusterRole> = load(server, "clusterroles");
    let bindings: Vec<RoleBinding> = load(server, "rolebindings");
    let cluster_bindings: Vec<ClusterRoleBinding> = load(server, "clusterrolebindings");
    RbacPolicy::build(&roles, &cluster_roles, &bindings, &cluster_bindings)
}

/// A path segment kube accepts as a name (`IsValidPathSegmentName`).
fn valid_path_segment(name: &str) -> bool {
    name != "." && name != ".." && !name.contains('/') && !name.contains('%')
}

/// kube's request attributes for a routed request.
pub(crate) fn attributes(
    user: UserInfo,
    method: &Method,
    path: &str,
    route: &Route,
    query: &Query,
) -> Attributes {
    let Route::Resource(p) = route else {
        return Attributes::non_resource(user, &method.as_str().to_ascii_lowercase(), path);
    };
    let mut name = p.name.clone().unwrap_or_default();
    let mut namespace = p.namespace.clone().unwrap_or_default();
    // `/api/v1/namespaces/{name}[/status|/finalize]` is in namespace name.
    if p.group.is_empty() && p.plural == "namespaces" && namespace.is_empty() {
        namespace = name.clone();
    }
    let mut verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    }
    .to_string();
    if verb.is_empty() {
        verb = method.as_str().to_ascii_lowercase();
    }
    if name.is_empty() && verb == "delete" {
        verb = "deletecollection".into();
    }
    if name.is_empty() && verb == "get" {
        verb = if query.flag("watch") { "watch" } else { "list" }.into();
        if let Some(fs) = query.get("fieldSelector")
            && let Ok(sel) = kubeforge_apimachinery::fields::FieldSelector::parse(fs)
            && let Some(n) = sel.exact("metadata.name")
            && valid_path_segment(n)
        {
            name = n.to_string();
        }
    }
    Attributes::resource(
        user,
        &verb,
        &namespace,
        &p.group,
        &p.version,
        &p.plural,
        p.subresource.as_deref().unwrap_or_default(),
        &name,
    )
}

/// The address a network connection came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddr(pub std::net::IpAddr);

/// The client's address: the connection's peer (in-process requests come
/// from loopback), or, when the peer is a trusted proxy, the first address
/// of `X-Forwarded-For` (kube's `utilnet.GetClientIP` reads the same
/// header; here only trusted proxies may set it).
pub(crate) fn client_address(parts: &http::request::Parts, trusted: &[IpNet]) -> std::net::IpAddr {
    let peer = parts
        .extensions
        .get::<ClientAddr>()
        .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), |c| c.0);
    if !trusted.iter().any(|n| n.contains(peer)) {
        return peer;
    }
    parts
        .headers
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .and_then(|first| first.trim().parse().ok())
        .unwrap_or(peer)
}

/// The user a request from the in-process transport acts as, shared.
pub(crate) fn identity(user: UserInfo) -> crate::authn::Identity {
    crate::authn::Identity(Arc::new(user))
}

/// The loopback identity, made once.
pub(crate) fn loopback_identity() -> crate::authn::Identity {
    static LOOPBACK: std::sync::LazyLock<crate::authn::Identity> =
        std::sync::LazyLock::new(|| identity(crate::authn::loopback_user()));
    LOOPBACK.clone()
}
