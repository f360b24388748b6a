//! API errors and their one conversion to a Kubernetes `Status` object.
//!
//! Every failure a handler can produce is an [`ApiError`]; the HTTP edge turns
//! it into a `Status` with the right `code` and `reason`, the way
//! kube-apiserver's `apierrors` package does, so clients (kubectl, kube-rs,
//! the Python client) recognise it.

use serde_json::{Value, json};

/// One field-level cause inside a `Status`'s details.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `metav1.CauseType`, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The field path, e.g. `spec.cronSpec`.
    pub field: String,
}

impl From<kubeforge_apimachinery::names::Cause> for Cause {
    fn from(c: kubeforge_apimachinery::names::Cause) -> Self {
        Cause {
            reason: c.reason,
            message: c.message,
            field: c.field,
        }
    }
}

/// An error answered to the client as a `Status` object.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`.
    pub reason: &'static str,
    /// Message shown to users.
    pub message: String,
    /// `details`, boxed to keep `Result<_, ApiError>` small.
    pub details: Box<Details>,
}

/// The `details` of a `Status`.
#[derive(Clone, Debug, Default)]
pub struct Details {
    /// `details.name`.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (the resource, as kube-apiserver reports it).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`.
    pub retry_after: Option<u32>,
}

/// Result alias for handlers.
pub type ApiResult<T> = Result<T, ApiError>;

/// A group/resource pair, printed the way kube-apiserver qualifies resources
/// in messages (`deployments.apps`, `pods`).
#[derive(Clone, Copy, Debug)]
pub struct GroupResource<'a> {
    /// API group ("" for core).
    pub group: &'a str,
    /// Plural resource name.
    pub resource: &'a str,
}

impl std::fmt::Display for GroupResource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Box::default(),
        }
    }

    fn with_target(mut self, gr: GroupResource<'_>, name: &str) -> Self {
        self.details.name = Some(name.to_string());
        self.details.group = Some(gr.group.to_string());
        self.details.kind = Some(gr.resource.to_string());
        self
    }

    /// 404 NotFound for a named object.
    pub fn not_found(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{gr} \"{name}\" not found")).with_target(gr, name)
    }

    /// 404 NotFound for a path the server does not serve.
    pub fn no_route() -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
        e.details.causes.push(Cause {
            reason: "UnexpectedServerResponse".into(),
            message: "404 page not found".into(),
            field: String::new(),
        });
        e
    }

    /// 409 AlreadyExists.
    pub fn already_exists(gr: GroupResource<'_>, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{gr} \"{name}\" already exists"),
        )
        .with_target(gr, name)
    }

    /// 409 Conflict on a stale resourceVersion or failed precondition.
    pub fn conflict(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} \"{name}\": {why}"),
        )
        .with_target(gr, name)
    }

    /// 409 Conflict with the usual "object has been modified" text.
    pub fn stale(gr: GroupResource<'_>, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with field causes; `kind` is the object's kind
    /// (kube-apiserver reports `details.kind` as the Kind here).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let list: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let summary = match list.len() {
            0 => String::from("invalid object"),
            1 => list[0].clone(),
            _ => format!("[{}]", list.join(", ")),
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {summary}"),
        );
        e.details.name = Some(name.to_string());
        e.details.group = Some(group.to_string());
        e.details.kind = Some(kind.to_string());
        e.details.causes = causes;
        e
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 403 Forbidden (used for writes into a terminating namespace and similar).
    pub fn forbidden(gr: GroupResource<'_>, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{gr} \"{name}\" is forbidden: {why}"),
        )
        .with_target(gr, name)
    }

    /// 403 for a create in namespace `ns` while it is being deleted, as
    /// kube's NamespaceLifecycle admission answers: cause
    /// `NamespaceTerminating` on `metadata.namespace`, which clients test
    /// for (client-go's `HasStatusCause`) to drop the work.
    pub fn namespace_terminating(gr: GroupResource<'_>, name: &str, ns: &str) -> Self {
        let mut e = Self::forbidden(
            gr,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        );
        e.details.causes.push(Cause {
            reason: "NamespaceTerminating".into(),
            message: format!("namespace {ns} is being terminated"),
            field: "metadata.namespace".into(),
        });
        e
    }

    /// 401 Unauthorized, kube's body exactly: no detail about why.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden from authorization: `message` is the whole text
    /// (`pods "p" is forbidden: User …`), details name the group, the
    /// resource (as `kind`) and the object.
    pub fn access_denied(message: String, group: &str, resource: &str, name: &str) -> Self {
        let mut e = Self::new(403, "Forbidden", message);
        if !group.is_empty() || !resource.is_empty() || !name.is_empty() {
            e.details.name = (!name.is_empty()).then(|| name.to_string());
            e.details.group = Some(group.to_string());
            e.details.kind = Some(resource.to_string());
        }
        e
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_supported(gr: GroupResource<'_>, verb: &str) -> Self {
        let mut e = Self::new(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind \"{gr}\""),
        );
        e.details.group = Some(gr.group.to_string());
        e.details.kind = Some(gr.resource.to_string());
        e
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(what: &str) -> Self {
        Self::new(
            406,
            "NotAcceptable",
            format!(
                "only the following media types are accepted: application/json, application/yaml ({what} requested)"
            ),
        )
    }

    /// 410 Expired (compacted revision or stale continue token).
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let m = message.into();
        let mut e = Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {m}"),
        );
        e.details.causes.push(Cause {
            reason: String::new(),
            message: m,
            field: String::new(),
        });
        e
    }

    /// 429 TooManyRequests.
    pub fn too_many_requests(message: impl Into<String>, retry_after: u32) -> Self {
        let mut e = Self::new(429, "TooManyRequests", message);
        e.details.retry_after = Some(retry_after);
        e
    }

    /// 504 Timeout for a read or watch at a revision the store has not
    /// reached: kube's `storage.NewTooLargeResourceVersionError` (a
    /// `NewTimeoutError`, so "Timeout: " leads the message, retry after
    /// 1 s, cause `ResourceVersionTooLarge`).
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut e = Self::timeout(format!(
            "Timeout: Too large resource version: {requested}, current: {current}"
        ));
        e.details.retry_after = Some(1);
        e.details.causes.push(Cause {
            reason: "ResourceVersionTooLarge".into(),
            message: "Too large resource version".into(),
            field: String::new(),
        });
        e
    }

    /// 504 Timeout.
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    /// The `Status` object's JSON as kube-apiserver writes it: Go's field
    /// order (`kind`, `apiVersion`, `metadata`, `status`, `message`,
    /// `reason`, `details`, `code`; in `details`: `name`, `group`, `kind`,
    /// `uid`, `causes` of `reason`, `message`, `field`, then
    /// `retryAfterSeconds`), empty fields left out as `omitempty` does, and
    /// no trailing newline (the response adds it).
    pub fn status_json(&self) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Empty {}
        #[derive(serde::Serialize)]
        struct CauseOut<'a> {
            #[serde(skip_serializing_if = "str::is_empty")]
            reason: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            message: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            field: &'a str,
        }
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct DetailsOut<'a> {
            #[serde(skip_serializing_if = "str::is_empty")]
            name: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            group: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            kind: &'a str,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            causes: Vec<CauseOut<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            retry_after_seconds: Option<u32>,
        }
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusOut<'a> {
            kind: &'static str,
            api_version: &'static str,
            metadata: Empty,
            status: &'static str,
            #[serde(skip_serializing_if = "str::is_empty")]
            message: &'a str,
            #[serde(skip_serializing_if = "str::is_empty")]
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<DetailsOut<'a>>,
            #[serde(skip_serializing_if = "is_zero")]
            code: u16,
        }
        fn is_zero(c: &u16) -> bool {
            *c == 0
        }
        let d = &self.details;
        let details = DetailsOut {
            name: d.name.as_deref().unwrap_or(""),
            group: d.group.as_deref().unwrap_or(""),
            kind: d.kind.as_deref().unwrap_or(""),
            causes: d
                .causes
                .iter()
                .map(|c| CauseOut {
                    reason: &c.reason,
                    message: &c.message,
                    field: &c.field,
                })
                .collect(),
            retry_after_seconds: d.retry_after.filter(|s| *s > 0),
        };
        let empty = details.name.is_empty()
            && details.group.is_empty()
            && details.kind.is_empty()
            && details.causes.is_empty()
            && details.retry_after_seconds.is_none();
        let out = StatusOut {
            kind: "Status",
            api_version: "v1",
            metadata: Empty {},
            status: "Failure",
            message: &self.message,
            reason: self.reason,
            details: (!empty).then_some(details),
            code: self.code,
        };
        // Serializing these plain structs into a Vec cannot fail.
        serde_json::to_vec(&out).unwrap_or_default()
    }

    /// The `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(n) = &self.details.name {
            details.insert("name".into(), json!(n));
        }
        if let Some(g) = self.details.group.as_ref().filter(|g| !g.is_empty()) {
            details.insert("group".into(), json!(g));
        }
        if let Some(k) = &self.details.kind {
            details.insert("kind".into(), json!(k));
        }
        if !self.details.causes.is_empty() {
            let causes: Vec<Value> = self
                .details
                .causes
                .iter()
                .map(|c| {
                    let mut m = serde_json::Map::new();
                    if !c.reason.is_empty() {
                        m.insert("reason".into(), json!(c.reason));
                    }
                    m.insert("message".into(), json!(c.message));
                    if !c.field.is_empty() {
                        m.insert("field".into(), json!(c.field));
                    }
                    Value::Object(m)
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(r) = self.details.retry_after {
            details.insert("retryAfterSeconds".into(), json!(r));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

impl From<kubeforge_store::StoreError> for ApiError {
    fn from(e: kubeforge_store::StoreError) -> Self {
        use kubeforge_store::StoreError as S;
        match e {
            S::Compacted {
                requested,
                compacted,
            } => ApiError::expired(format!(
                "too old resource version: {requested} ({compacted})"
            )),
            S::Closed => ApiError::new(503, "ServiceUnavailable", "the storage is shutting down"),
            other => ApiError::internal(other.to_string()),
        }
    }
}
