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
    /// The Node authorizer's graph and rules.
    pub nodes: Arc<crate::node_authz::NodeAuthz>,
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
        // kube's `--authorization-mode=Node,RBAC`: nodes are judged by the
        // Node authorizer first; what it leaves, with its reason, goes on.
        let node_reason = match crate::node_authz::decide(server, a) {
            Some(d @ Decision::Allow { .. }) => return d,
            Some(Decision::Deny { reason } | Decision::NoOpinion { reason }) => reason,
            None => String::new(),
        };
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
            Decision::NoOpinion { reason } if !skipped.is_empty() || !node_reason.is_empty() => {
                // kube's union authorizer joins its authorizers' reasons.
                let mut lines: Vec<String> = Vec::new();
                if !node_reason.is_empty() {
                    lines.push(node_reason);
                }
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
    let mut field_equals = Vec::new();
    if name.is_empty() && verb == "get" {
        verb = if query.flag("watch") { "watch" } else { "list" }.into();
        if let Some(fs) = query.get("fieldSelector")
            && let Ok(sel) = kubeforge_apimachinery::fields::FieldSelector::parse(fs)
        {
            if let Some(n) = sel.exact("metadata.name")
                && valid_path_segment(n)
            {
                name = n.to_string();
            }
            field_equals = sel.equalities();
        }
    }
    let mut a = Attributes::resource(
        user,
        &verb,
        &namespace,
        &p.group,
        &p.version,
        &p.plural,
        p.subresource.as_deref().unwrap_or_default(),
        &name,
    );
    a.field_equals = field_equals;
    a
}

/// The address a network connection came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientAddr(pub std::net::IpAddr);

/// The client's address: the connection's peer (in-process requests come
/// from loopback), or, when the peer is a trusted proxy, the address
/// `X-Forwarded-For` names before the trusted hops. The header is walked
/// from the right, as each proxy appends the address it was reached
/// from: the first entry that is not a trusted proxy is the client, and
/// every entry left of it is whatever that client chose to send. `None`
/// (unknown, so address conditions fail closed) when a trusted peer sends
/// no header, or an entry on the walk does not parse.
pub(crate) fn client_address(
    parts: &http::request::Parts,
    trusted: &[IpNet],
) -> Option<std::net::IpAddr> {
    let peer = parts
        .extensions
        .get::<ClientAddr>()
        .map_or(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), |c| c.0);
    let is_trusted = |ip: std::net::IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(peer) {
        return Some(peer);
    }
    forwarded_client(
        parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.to_str().ok()),
        is_trusted,
    )
}

/// The client named by the `X-Forwarded-For` values `headers` (in the
/// order received, `None` for a value that is not text) behind trusted
/// hops: see [`client_address`].
fn forwarded_client<'a>(
    headers: impl Iterator<Item = Option<&'a str>>,
    is_trusted: impl Fn(std::net::IpAddr) -> bool,
) -> Option<std::net::IpAddr> {
    let mut entries: Vec<Option<&str>> = Vec::new();
    for h in headers {
        match h {
            Some(v) => entries.extend(v.split(',').map(|e| Some(e.trim()))),
            None => entries.push(None),
        }
    }
    let mut last = None;
    for entry in entries.into_iter().rev() {
        let ip: std::net::IpAddr = entry?.parse().ok()?;
        if !is_trusted(ip) {
            return Some(ip);
        }
        last = Some(ip);
    }
    // Every hop is a trusted proxy: the leftmost one is the client.
    last
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

#[cfg(test)]
mod forwarded_tests {
    use super::forwarded_client;

    /// (headers as received, client) with 10.0.0.0/8 trusted, as kube's
    /// tests of client addresses list them, walked from the right.
    #[test]
    fn forwarded_for_is_walked_from_the_right_past_trusted_hops() {
        let trusted = |ip: std::net::IpAddr| match ip {
            std::net::IpAddr::V4(v4) => v4.octets()[0] == 10,
            std::net::IpAddr::V6(_) => false,
        };
        let cases: &[(&[Option<&str>], Option<&str>)] = &[
            // The proxy appended the real client after a forged entry.
            (&[Some("10.6.6.6, 203.0.113.7")], Some("203.0.113.7")),
            (&[Some("203.0.113.7")], Some("203.0.113.7")),
            // Two trusted hops, then the client.
            (
                &[Some("198.51.100.1, 203.0.113.7, 10.0.0.2")],
                Some("203.0.113.7"),
            ),
            // Repeated headers read as one list.
            (
                &[Some("10.6.6.6"), Some("203.0.113.7")],
                Some("203.0.113.7"),
            ),
            // Only trusted hops: the leftmost is the client.
            (&[Some("10.0.0.3, 10.0.0.2")], Some("10.0.0.3")),
            (&[Some(" 2001:db8::1 ")], Some("2001:db8::1")),
            // Fail closed: nothing, garbage or non-text on the walk.
            (&[], None),
            (&[Some("")], None),
            (&[Some("10.6.6.6, not-an-ip")], None),
            (&[Some("203.0.113.7:443")], None),
            (&[None], None),
            // Garbage left of the client is the client's own business.
            (&[Some("junk, 203.0.113.7")], Some("203.0.113.7")),
        ];
        for (headers, want) in cases {
            let got = forwarded_client(headers.iter().copied(), trusted);
            assert_eq!(
                got,
                want.map(|w| w.parse().expect("an address")),
                "X-Forwarded-For {headers:?}"
            );
        }
    }
}
