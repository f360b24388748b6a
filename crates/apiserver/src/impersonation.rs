//! Impersonation, the stage after authentication and before
//! authorization: `Impersonate-User`, `Impersonate-Group` (repeatable),
//! `Impersonate-Uid` and `Impersonate-Extra-<key>` headers (what
//! `kubectl --as`, `--as-group`, `--as-uid` send), as kube's
//! `WithImpersonation` filter handles them.
//!
//! Each value needs verb `impersonate` on `users`, `groups`,
//! `serviceaccounts` (namespaced, for `system:serviceaccount:<ns>:<name>`),
//! `userextras` (`authentication.k8s.io`, subresource = key) or `uids`
//! (`authentication.k8s.io`); a refusal is the ordinary 403
//! (`users "bob" is forbidden: User "alice" cannot impersonate resource
//! "users" in API group "" at the cluster scope`). Groups, UID or extras
//! without a user are a 500, as in kube. The impersonated user gets
//! `system:authenticated` unless `system:authenticated` or
//! `system:unauthenticated` was asked for (`system:anonymous` gets
//! `system:unauthenticated`); a ServiceAccount without groups asked for gets
//! its two ServiceAccount groups. The requester's extras are dropped.
//!
//! Values are taken as sent: one that is not UTF-8, or `Impersonate-User`
//! / `Impersonate-Uid` repeated with different values, is a 400 (kube
//! authorizes raw bytes; skipping such a value would change whom the
//! request acts as, e.g. drop a ServiceAccount's groups, unchecked). An
//! empty `Impersonate-Group` is the group "" and needs its own right.

use std::collections::BTreeMap;
use std::sync::Arc;

use http::HeaderMap;
use kubeforge_authz::user::{
    ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, service_account_groups,
    service_account_username, split_service_account,
};
use kubeforge_authz::{Attributes, UserInfo};

use crate::error::{ApiError, ApiResult};
use crate::server::ApiServer;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// One thing the requester asks to act as.
enum Request {
    ServiceAccount { namespace: String, name: String },
    User(String),
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

impl Request {
    /// What the requester must be allowed: `impersonate` on it.
    fn attributes(&self, requester: &UserInfo) -> Attributes {
        let (ns, group, resource, sub, name) = match self {
            Request::ServiceAccount { namespace, name } => {
                (namespace.as_str(), "", "serviceaccounts", "", name.as_str())
            }
            Request::User(n) => ("", "", "users", "", n.as_str()),
            Request::Group(n) => ("", "", "groups", "", n.as_str()),
            Request::Extra { key, value } => (
                "",
                "authentication.k8s.io",
                "userextras",
                key.as_str(),
                value.as_str(),
            ),
            Request::Uid(u) => ("", "authentication.k8s.io", "uids", "", u.as_str()),
        };
        Attributes::resource(
            requester.clone(),
            "impersonate",
            ns,
            group,
            "v1",
            resource,
            sub,
            name,
        )
    }

    /// Go's `%v` of the ObjectReference kube builds, for the 500 text.
    fn describe(&self) -> String {
        match self {
            Request::ServiceAccount { namespace, name } => {
                format!("{{ServiceAccount {namespace} {name}    }}")
            }
            Request::User(n) => format!("{{User  {n}    }}"),
            Request::Group(n) => format!("{{Group  {n}    }}"),
            Request::Extra { key, value } => {
                format!("{{UserExtra  {value}  authentication.k8s.io/v1  {key}}}")
            }
            Request::Uid(u) => format!("{{UID  {u}  authentication.k8s.io/v1  }}"),
        }
    }
}

/// Every value of header `name` as text: a value that is not UTF-8 is a
/// 400 (kube authorizes the raw bytes; dropping it instead would change
/// whom the request acts as without any check).
fn values<'h>(headers: &'h HeaderMap, name: &str) -> ApiResult<Vec<&'h str>> {
    headers
        .get_all(name)
        .iter()
        .map(|v| {
            std::str::from_utf8(v.as_bytes()).map_err(|_| {
                ApiError::bad_request(format!("the {} header is not valid UTF-8", canonical(name)))
            })
        })
        .collect()
}

/// The one value of a header that may be sent once (`Impersonate-User`,
/// `Impersonate-Uid`): `None` when absent or empty (kube's `Get`), a 400
/// when repeated with different values (kube would act on the first
/// alone, which a proxy in front may not have checked).
fn single<'h>(headers: &'h HeaderMap, name: &str) -> ApiResult<Option<&'h str>> {
    let all = values(headers, name)?;
    let Some(first) = all.first() else {
        return Ok(None);
    };
    if all.iter().any(|v| v != first) {
        return Err(ApiError::bad_request(format!(
            "the {} header may be given only once",
            canonical(name)
        )));
    }
    Ok(Some(*first).filter(|v| !v.is_empty()))
}

/// `Impersonate-User` for `impersonate-user`, as the header is documented.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// `%`-decoding of an extra key (kube's `unescapeExtraKey`: kept as sent
/// when it does not decode).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// The impersonation requests in `headers` (kube's
/// `buildImpersonationRequests`), or the 500 for groups/extras/UID without
/// a user.
fn requests(headers: &HeaderMap, path: &str) -> ApiResult<Vec<Request>> {
    let mut out = Vec::new();
    let user = single(headers, USER)?;
    if let Some(u) = user {
        out.push(match split_service_account(u) {
            Some((ns, name)) => Request::ServiceAccount {
                namespace: ns.to_string(),
                name: name.to_string(),
            },
            None => Request::User(u.to_string()),
        });
    }
    let mut others = false;
    for g in values(headers, GROUP)? {
        others = true;
        out.push(Request::Group(g.to_string()));
    }
    let mut extra_names: Vec<&str> = headers
        .keys()
        .map(http::HeaderName::as_str)
        .filter(|k| k.starts_with(EXTRA_PREFIX))
        .collect();
    extra_names.sort_unstable();
    extra_names.dedup();
    for name in extra_names {
        others = true;
        let key = unescape(&name[EXTRA_PREFIX.len()..]);
        for v in values(headers, name)? {
            out.push(Request::Extra {
                key: key.clone(),
                value: v.to_string(),
            });
        }
    }
    if let Some(uid) = single(headers, UID)? {
        others = true;
        out.push(Request::Uid(uid.to_string()));
    }
    if others && user.is_none() {
        let list: Vec<String> = out.iter().map(Request::describe).collect();
        return Err(ApiError::internal(format!(
            "Internal Server Error: {}: requested [{}] without impersonating a user",
            kubeforge_apimachinery::gofmt::quote(path),
            list.join(" ")
        )));
    }
    Ok(out)
}

/// The user the request acts as: `requester`, or whom it may impersonate.
/// The impersonation headers are removed.
pub(crate) fn impersonate(
    server: &ApiServer,
    requester: Arc<UserInfo>,
    headers: &mut HeaderMap,
    path: &str,
) -> ApiResult<Arc<UserInfo>> {
    if !headers
        .keys()
        .any(|k| k.as_str().starts_with("impersonate-"))
    {
        return Ok(requester);
    }
    let asked = requests(headers, path)?;
    if asked.is_empty() {
        return Ok(requester);
    }
    let groups_given = headers.contains_key(GROUP);
    let access = &server.inner.access;
    let mut user = UserInfo::default();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &asked {
        access.authorize(server, &r.attributes(&requester))?;
        match r {
            Request::ServiceAccount { namespace, name } => {
                user.name = service_account_username(namespace, name);
                if !groups_given {
                    user.groups = service_account_groups(namespace).to_vec();
                }
            }
            Request::User(n) => user.name = n.clone(),
            Request::Group(g) => user.groups.push(g.clone()),
            Request::Extra { key, value } => {
                extra.entry(key.clone()).or_default().push(value.clone());
            }
            Request::Uid(u) => user.uid = u.clone(),
        }
    }
    user.extra = extra;
    if user.name != ANONYMOUS {
        if !user
            .groups
            .iter()
            .any(|g| g == ALL_AUTHENTICATED || g == ALL_UNAUTHENTICATED)
        {
            user.groups.push(ALL_AUTHENTICATED.to_string());
        }
    } else if !user.in_group(ALL_UNAUTHENTICATED) {
        user.groups.push(ALL_UNAUTHENTICATED.to_string());
    }
    let names: Vec<http::HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for n in names {
        headers.remove(n);
    }
    tracing::debug!(requester = %requester.name, as_user = %user.name, "impersonating");
    Ok(Arc::new(user))
}
