//! The request context every verb handler is given ([`Ctx`]: the server,
//! the resource row, path, query, headers, negotiated output and the
//! warnings to send back) and which endpoint a write came through
//! ([`Sub`]), with what every handler needs of them: store keys, dry run,
//! rendering one object in the negotiated form, the parsed selectors.
//! Handlers live in their own modules ([`crate::rest`] for the verbs).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use kubeforge_apimachinery::{fields::FieldSelector, labels::Selector};
use serde_json::{Value, json};

use crate::body::ApiBody;
use crate::codec::{self, Accept};
use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceDef;
use crate::request::Query;
use crate::server::ApiServer;
use crate::table::{self, IncludeObject};

/// Everything a verb handler needs about its request.
pub struct Ctx<'a> {
    /// The server.
    pub server: &'a ApiServer,
    /// The resource row.
    pub def: Arc<ResourceDef>,
    /// Namespace from the path.
    pub ns: Option<String>,
    /// Name from the path.
    pub name: Option<String>,
    /// Query parameters.
    pub query: Query,
    /// Request headers.
    pub headers: HeaderMap,
    /// Negotiated response form.
    pub accept: Accept,
    /// Warnings to send back as `Warning` headers.
    pub warnings: Vec<String>,
    /// Who asks (after impersonation); the loopback user for the server's
    /// own writes.
    pub user: Arc<kubeforge_authz::UserInfo>,
}

/// Which endpoint an update came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    /// The object itself: status changes are ignored when `/status` exists.
    Main,
    /// `/status`: only status changes are kept.
    Status,
    /// `namespaces/{name}/finalize`: only spec.finalizers changes are kept.
    Finalize,
    /// `pods/{name}/ephemeralcontainers`: only spec.ephemeralContainers
    /// changes are kept ([`crate::ephemeral`]).
    EphemeralContainers,
    /// `certificatesigningrequests/{name}/approval`: only the conditions
    /// change ([`crate::csr`]).
    Approval,
    /// `/scale`: the replicas written to the object; its managed fields are
    /// converted to and from the Scale's by `crate::scale`.
    Scale,
}

impl Sub {
    /// The subresource name admission webhooks see.
    pub(crate) fn subresource(self) -> &'static str {
        match self {
            Sub::Main => "",
            Sub::Status => "status",
            Sub::Finalize => "finalize",
            Sub::EphemeralContainers => "ephemeralcontainers",
            Sub::Approval => "approval",
            Sub::Scale => "scale",
        }
    }
}

impl Ctx<'_> {
    pub(crate) fn key(&self, name: &str) -> String {
        self.def.key(self.ns.as_deref(), name)
    }

    pub(crate) fn path_name(&self) -> ApiResult<&str> {
        self.name.as_deref().ok_or_else(ApiError::no_route)
    }

    pub(crate) fn dry_run(&self) -> bool {
        self.query.dry_run()
    }

    /// Render stored bytes for the requested version and form.
    pub(crate) fn output(&self, bytes: &Bytes) -> Bytes {
        self.def.present_to(bytes, self.accept.omit_managed_fields)
    }

    /// Respond with one object in the negotiated form.
    pub(crate) fn respond_object(
        &self,
        code: StatusCode,
        bytes: &Bytes,
    ) -> ApiResult<Response<ApiBody>> {
        let out = self.output(bytes);
        if self.accept.table || self.accept.metadata_only {
            let v: Value =
                serde_json::from_slice(&out).map_err(|e| ApiError::internal(e.to_string()))?;
            let body = if self.accept.table {
                let include = IncludeObject::parse(self.query.get("includeObject"));
                table::single(&self.def.columns, &v, include)
            } else {
                partial_metadata(&v)
            };
            return Ok(codec::respond_value(code, &body));
        }
        Ok(codec::respond(code, out, self.accept.yaml))
    }

    /// The parsed label and field selectors of a list or watch.
    pub(crate) fn selectors(&self) -> ApiResult<(Selector, FieldSelector)> {
        let labels = Selector::parse(self.query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let fields = FieldSelector::parse(self.query.get("fieldSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        for r in fields.requirements() {
            if !self.def.supports_field(&r.field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    r.field
                )));
            }
        }
        Ok((labels, fields))
    }
}

pub(crate) fn partial_metadata(v: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": v.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}
