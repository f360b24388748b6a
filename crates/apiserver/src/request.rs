//! Parsing request paths and query parameters into what the handlers need.

use std::collections::HashMap;

/// What a path asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `/version`
    Version,
    /// `/healthz`, `/livez`, `/readyz` (and their `/…/name` checks)
    Health,
    /// `/metrics`: the server's own metrics.
    Metrics,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    Resources {
        /// Group ("" = core).
        group: String,
        /// Version.
        version: String,
    },
    /// `/openapi/v2`
    OpenApiV2,
    /// `/openapi/v3`
    OpenApiV3Root,
    /// `/openapi/v3/api/v1`, `/openapi/v3/apis/{group}/{version}`
    OpenApiV3 {
        /// Group.
        group: String,
        /// Version.
        version: String,
    },
    /// `/.well-known/openid-configuration`: the ServiceAccount issuer's
    /// OIDC discovery document.
    OpenIdConfiguration,
    /// `/openid/v1/jwks`: the keys ServiceAccount tokens are signed with.
    Jwks,
    /// A resource path.
    Resource(ResourcePath),
    /// Anything else.
    Unknown,
}

/// A resource path, before the registry lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourcePath {
    /// Group ("" = core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural resource.
    pub plural: String,
    /// Namespace from `/namespaces/{ns}/…`.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Subresource (`status`, `scale`, `binding`).
    pub subresource: Option<String>,
}

fn decode_segment(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse a request path. `is_namespaced(group, version, plural)` tells
/// whether `/namespaces/{x}/{plural}` names a namespaced collection, which
/// separates `namespaces/{name}/status` from `namespaces/{ns}/pods`.
pub fn route(path: &str, is_namespaced: impl Fn(&str, &str, &str) -> bool) -> Route {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode_segment)
        .collect();
    let s: Vec<&str> = segs.iter().map(String::as_str).collect();
    match s.as_slice() {
        ["version"] => Route::Version,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["metrics"] => Route::Metrics,
        [".well-known", "openid-configuration"] => Route::OpenIdConfiguration,
        ["openid", "v1", "jwks"] => Route::Jwks,
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => Route::Group((*g).to_string()),
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3"] => Route::OpenApiV3Root,
        ["openapi", "v3", "api", v] => Route::OpenApiV3 {
            group: String::new(),
            version: (*v).to_string(),
        },
        ["openapi", "v3", "apis", g, v] => Route::OpenApiV3 {
            group: (*g).to_string(),
            version: (*v).to_string(),
        },
        ["api", v, rest @ ..] => resource_route("", v, rest, &is_namespaced),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest, &is_namespaced),
        _ => Route::Unknown,
    }
}

fn resource_route(
    group: &str,
    version: &str,
    rest: &[&str],
    is_namespaced: &impl Fn(&str, &str, &str) -> bool,
) -> Route {
    let mk = |plural: &str, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Route::Resource(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        })
    };
    match rest {
        [] => Route::Resources {
            group: group.to_string(),
            version: version.to_string(),
        },
        [r] => mk(r, None, None, None),
        [r, name] => mk(r, None, Some(name), None),
        ["namespaces", ns, r] if is_namespaced(group, version, r) => mk(r, Some(ns), None, None),
        [r, name, sub] => mk(r, None, Some(name), Some(sub)),
        // The node proxy carries a path of its own after the subresource.
        ["nodes", name, "proxy", ..] if group.is_empty() => {
            mk("nodes", None, Some(name), Some("proxy"))
        }
        ["namespaces", ns, r, name] => mk(r, Some(ns), Some(name), None),
        ["namespaces", ns, r, name, sub] => mk(r, Some(ns), Some(name), Some(sub)),
        _ => Route::Unknown,
    }
}

/// Query parameters (last value wins).
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    /// Parse a query string.
    pub fn parse(q: Option<&str>) -> Query {
        Query(
            q.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }

    /// A parameter's value.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// A boolean parameter (`true`, `1`).
    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true" | "1" | "True"))
    }

    /// `dryRun=All`.
    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    /// A non-negative integer parameter.
    pub fn int(&self, k: &str) -> Result<Option<i64>, crate::error::ApiError> {
        match self.get(k) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                crate::error::ApiError::bad_request(format!(
                    "invalid value for {k}: {v:?} is not an integer"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(_: &str, _: &str, r: &str) -> bool {
        r != "status" && r != "finalize"
    }

    #[test]
    fn routes() {
        assert_eq!(route("/api", ns), Route::CoreVersions);
        assert_eq!(
            route("/api/v1", ns),
            Route::Resources {
                group: "".into(),
                version: "v1".into()
            }
        );
        let Route::Resource(p) = route("/api/v1/namespaces/demo/configmaps/x", ns) else {
            panic!()
        };
        assert_eq!(
            (p.namespace.as_deref(), p.plural.as_str(), p.name.as_deref()),
            (Some("demo"), "configmaps", Some("x"))
        );
        let Route::Resource(p) = route("/api/v1/namespaces/demo/status", ns) else {
            panic!()
        };
        assert_eq!(
            (
                p.plural.as_str(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("namespaces", Some("demo"), Some("status"))
        );
        let Route::Resource(p) = route("/apis/apps/v1/namespaces/d/deployments/web/scale", ns)
        else {
            panic!()
        };
        assert_eq!(p.subresource.as_deref(), Some("scale"));
        let Route::Resource(p) = route("/api/v1/namespaces", ns) else {
            panic!()
        };
        assert_eq!((p.plural.as_str(), p.name), ("namespaces", None));
        let Route::Resource(p) = route("/api/v1/nodes/n1/proxy/stats/summary", ns) else {
            panic!()
        };
        assert_eq!(
            (
                p.plural.as_str(),
                p.name.as_deref(),
                p.subresource.as_deref()
            ),
            ("nodes", Some("n1"), Some("proxy"))
        );
        assert!(matches!(
            route("/apis/apps/v1/nodes/n1/proxy/x", ns),
            Route::Unknown
        ));
    }
}
