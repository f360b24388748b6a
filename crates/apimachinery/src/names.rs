//! Name and object-metadata validation, with the messages of
//! `k8s.io/apimachinery/pkg/util/validation` and
//! `k8s.io/apimachinery/pkg/api/validation` (Kubernetes 1.32/1.33 wording).
//!
//! The `is_*` functions return the list of problems with a value (empty when
//! valid), word for word as Go's `validation.Is*` functions.
//! [`validate_object_meta`] turns them into [`Cause`]s as the API server puts
//! them in a 422 `Invalid` status: one cause per problem, with the field path
//! (`metadata.name`), the reason (`FieldValueInvalid`) and the message
//! (`Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must ...`).

use serde_json::Value;

use crate::gofmt;

/// One field-level validation failure, as a `metav1.StatusCause`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The cause type, e.g. `FieldValueInvalid`, `FieldValueRequired`,
    /// `FieldValueForbidden`, `FieldValueTooLong`.
    pub reason: String,
    /// The message without the field, e.g. `Invalid value: "x": ...` or
    /// `Required value: name or generateName is required`.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A `FieldValueInvalid` cause for a string value.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause::invalid_rendered(field, &gofmt::quote(value), detail)
    }

    /// A `FieldValueInvalid` cause whose bad value is already rendered
    /// (e.g. a number, or Go's `[]string{...}`).
    pub fn invalid_rendered(field: &str, rendered: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid".into(),
            message: with_detail(format!("Invalid value: {rendered}"), detail),
            field: field.into(),
        }
    }

    /// A `FieldValueRequired` cause.
    pub fn required(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueRequired".into(),
            message: with_detail("Required value".into(), detail),
            field: field.into(),
        }
    }

    /// A `FieldValueForbidden` cause.
    pub fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueForbidden".into(),
            message: with_detail("Forbidden".into(), detail),
            field: field.into(),
        }
    }

    /// A `FieldValueNotSupported` cause for a string value
    /// (`Unsupported value: "x": supported values: "a", "b"`).
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let list: Vec<String> = supported.iter().map(|s| gofmt::quote(s)).collect();
        Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                gofmt::quote(value),
                list.join(", ")
            ),
            field: field.into(),
        }
    }

    /// A `FieldValueNotFound` cause for a string value
    /// (`Not found: "x"`).
    pub fn not_found(field: &str, value: &str) -> Cause {
        Cause {
            reason: "FieldValueNotFound".into(),
            message: format!("Not found: {}", gofmt::quote(value)),
            field: field.into(),
        }
    }

    /// A `FieldValueDuplicate` cause for a string value
    /// (`Duplicate value: "x"`).
    pub fn duplicate(field: &str, value: &str) -> Cause {
        Cause {
            reason: "FieldValueDuplicate".into(),
            message: format!("Duplicate value: {}", gofmt::quote(value)),
            field: field.into(),
        }
    }

    /// A `FieldValueTooLong` cause (`Too long: must have at most N bytes`).
    pub fn too_long(field: &str, max_bytes: usize) -> Cause {
        Cause {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: must have at most {max_bytes} bytes"),
            field: field.into(),
        }
    }

    /// The full Go `field.Error` text: `<field>: <message>`.
    pub fn to_error_string(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

fn with_detail(mut s: String, detail: &str) -> String {
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

/// Which name format a resource's `metadata.name` must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds: Pod, Deployment, ConfigMap, ...).
    Subdomain,
    /// RFC 1123 label (Namespace, Service's own checks, ...).
    Label,
    /// RFC 1035 label (Service names).
    Dns1035Label,
    /// A path segment (RBAC roles and bindings, ...): not `.` or `..`, no `/` or `%`.
    PathSegment,
}

impl NameRule {
    /// The problems with `name` under this rule. With `prefix` the value is a
    /// `generateName` prefix, where a trailing `-` is allowed.
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        match self {
            NameRule::Subdomain => is_dns1123_subdomain(&masked(name, prefix)),
            NameRule::Label => is_dns1123_label(&masked(name, prefix)),
            NameRule::Dns1035Label => is_dns1035_label(&masked(name, prefix)),
            NameRule::PathSegment => is_path_segment_name(name, prefix),
        }
    }
}

/// Go's `maskTrailingDash`, applied to `generateName` prefixes. (Go drops the
/// last two bytes and appends `a`; reproduced as is, since only the absence
/// of a trailing dash matters.)
fn masked(name: &str, prefix: bool) -> String {
    if prefix && name.len() > 1 && name.ends_with('-') {
        let cut = name.len() - 2;
        if name.is_char_boundary(cut) {
            return format!("{}a", &name[..cut]);
        }
    }
    name.to_string()
}

/// The maximum length of a DNS-1123 label.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// The maximum length of a DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// The maximum length of a DNS-1035 label.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;
/// The maximum length of a label value and of a qualified name's name part.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// The maximum total size of `metadata.annotations` (keys plus values).
pub const TOTAL_ANNOTATION_SIZE_LIMIT_BYTES: usize = 256 * 1024;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// Go's `validation.MaxLenError`.
fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Go's `validation.RegexError` (including its double space before `or`).
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            is_lower_alnum(f)
                && is_lower_alnum(l)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// Matches the DNS-1123 subdomain regex (labels joined by dots).
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// Matches `[a-z]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns1035_label(s: &str) -> bool {
    matches_dns1123_label(s) && s.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Problems with `s` as an RFC 1123 subdomain (Go's `IsDNS1123Subdomain`).
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Problems with `s` as an RFC 1123 label (Go's `IsDNS1123Label`).
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Problems with `p` as a path that stays under the directory it is
/// joined to (kube's `validateLocalDescendingPath`): not absolute, no `..`
/// element. Volume item paths, `subPath` and `subPathExpr` are checked
/// with it before anything joins them onto a host directory.
pub fn is_local_descending_path(p: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if p.starts_with('/') {
        errs.push("must be a relative path".to_string());
    }
    if p.split('/').any(|part| part == "..") {
        errs.push("must not contain '..'".to_string());
    }
    errs
}

/// Problems with `n` as a network port number (Go's `IsValidPortNum`).
pub fn is_valid_port_num(n: i64) -> Vec<String> {
    if (1..=65535).contains(&n) {
        Vec::new()
    } else {
        vec!["must be between 1 and 65535, inclusive".to_string()]
    }
}

/// Problems with `name` as a port name, an IANA service name (Go's
/// `IsValidPortName`).
pub fn is_valid_port_name(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 15 {
        errs.push("must be no more than 15 characters".to_string());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errs.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.push("must not begin or end with a hyphen".into());
    }
    errs
}

/// Problems with `s` as an RFC 1035 label (Go's `IsDNS1035Label`).
pub fn is_dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    if !matches_dns1035_label(s) {
        errs.push(regex_error(
            DNS1035_LABEL_ERR,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// Problems with `s` as a qualified name, i.e. a label or annotation key:
/// an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters (Go's `IsQualifiedName`).
pub fn is_qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(LABEL_VALUE_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Problems with `s` as a label value (Go's `IsValidLabelValue`): empty, or
/// at most 63 characters of `[-A-Za-z0-9_.]` starting and ending with an
/// alphanumeric character.
pub fn is_label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !(s.is_empty() || matches_qualified_name_part(s)) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Problems with `s` as a path segment name (Go's `ValidatePathSegmentName`):
/// not `.` or `..`, and no `/` or `%`. With `prefix` (a `generateName`) only
/// the characters are checked.
pub fn is_path_segment_name(s: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if s == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|bad| s.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR: &str =
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";

/// Problems with `s` as a ConfigMap or Secret data key (Go's
/// `IsConfigMapKey`): at most 253 characters of `[-._a-zA-Z0-9]`, not `.`
/// or `..` and not starting with `..` (a key becomes a file name in a
/// volume).
pub fn is_config_map_key(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    let ok = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if !ok {
        errs.push(regex_error(
            CONFIG_MAP_KEY_ERR,
            CONFIG_MAP_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if s == "." {
        errs.push("must not be '.'".into());
    } else if s == ".." {
        errs.push("must not be '..'".into());
    } else if s.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

const STANDARD_ORPHAN: &str = "orphan";
const STANDARD_FOREGROUND: &str = "foregroundDeletion";

/// Validates an object's `metadata` (a JSON object) like Go's
/// `ValidateObjectMeta`, returning one [`Cause`] per problem:
///
/// - `metadata.generateName` (if set) by `rule` as a prefix;
/// - `metadata.name` by `rule`, or `Required value: name or generateName is
///   required` when both are empty (a name that will be generated from
///   `generateName` is not checked);
/// - `metadata.namespace`: required and a DNS-1123 label when `namespaced`;
///   when not `namespaced` a non-empty namespace is `Forbidden: not allowed
///   on this type` (the API server clears the namespace of cluster-scoped
///   objects before validating, so callers usually never see this);
/// - `metadata.generation` not negative;
/// - `metadata.labels`: keys as qualified names, values as label values;
/// - `metadata.annotations`: keys as qualified names (case-insensitive) and a
///   total size of keys plus values of at most 256 KiB;
/// - `metadata.ownerReferences`: apiVersion, kind, name and uid present, at
///   most one controller;
/// - `metadata.finalizers`: qualified names, not both `orphan` and
///   `foregroundDeletion`.
///
/// A `meta` that is not an object is validated as an empty one.
pub fn validate_object_meta(meta: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    let s = |key: &str| meta.get(key).and_then(Value::as_str).unwrap_or("");

    let generate_name = s("generateName");
    if !generate_name.is_empty() {
        for m in rule.check(generate_name, true) {
            causes.push(Cause::invalid("metadata.generateName", generate_name, &m));
        }
    }
    let name = s("name");
    if name.is_empty() {
        if generate_name.is_empty() {
            causes.push(Cause::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for m in rule.check(name, false) {
            causes.push(Cause::invalid("metadata.name", name, &m));
        }
    }

    let namespace = s("namespace");
    if namespaced {
        if namespace.is_empty() {
            causes.push(Cause::required("metadata.namespace", ""));
        } else {
            for m in is_dns1123_label(namespace) {
                causes.push(Cause::invalid("metadata.namespace", namespace, &m));
            }
        }
    } else if !namespace.is_empty() {
        causes.push(Cause::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }

    if let Some(g) = meta.get("generation").and_then(Value::as_i64)
        && g < 0
    {
        causes.push(Cause::invalid_rendered(
            "metadata.generation",
            &g.to_string(),
            "must be greater than or equal to 0",
        ));
    }

    validate_labels(meta.get("labels"), "metadata.labels", &mut causes);
    validate_annotations(meta.get("annotations"), "metadata.annotations", &mut causes);
    validate_owner_references(meta.get("ownerReferences"), &mut causes);
    validate_finalizers(meta.get("finalizers"), &mut causes);
    causes
}

/// Validates a label map (keys and values), adding causes on `field`.
pub fn validate_labels(labels: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let Some(Value::Object(map)) = labels else {
        return;
    };
    for (k, v) in map {
        for m in is_qualified_name(k) {
            causes.push(Cause::invalid(field, k, &m));
        }
        match v {
            Value::String(v) => {
                for m in is_label_value(v) {
                    causes.push(Cause::invalid(field, v, &m));
                }
            }
            other => causes.push(type_invalid(field, other)),
        }
    }
}

/// Validates an annotation map (keys, total size), adding causes on `field`.
pub fn validate_annotations(annotations: Option<&Value>, field: &str, causes: &mut Vec<Cause>) {
    let Some(Value::Object(map)) = annotations else {
        return;
    };
    let mut total = 0usize;
    for (k, v) in map {
        for m in is_qualified_name(&k.to_lowercase()) {
            causes.push(Cause::invalid(field, k, &m));
        }
        total += k.len();
        match v {
            Value::String(v) => total += v.len(),
            other => causes.push(type_invalid(field, other)),
        }
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT_BYTES {
        causes.push(Cause::too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT_BYTES));
    }
}

fn type_invalid(field: &str, value: &Value) -> Cause {
    Cause {
        reason: "FieldValueTypeInvalid".into(),
        message: format!("Invalid value: {value}: must be a string"),
        field: field.into(),
    }
}

fn validate_owner_references(refs: Option<&Value>, causes: &mut Vec<Cause>) {
    let Some(Value::Array(refs)) = refs else {
        return;
    };
    const FIELD: &str = "metadata.ownerReferences";
    let mut first_controller: Option<String> = None;
    for r in refs {
        let s = |key: &str| r.get(key).and_then(Value::as_str).unwrap_or("");
        let api_version = s("apiVersion");
        // schema.FromAPIVersionAndKind: the version is what follows the last '/'.
        let version = api_version.rsplit('/').next().unwrap_or("");
        if version.is_empty() || api_version.matches('/').count() > 1 {
            causes.push(Cause::invalid(
                &format!("{FIELD}.apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        for (key, what) in [("kind", "kind"), ("name", "name"), ("uid", "uid")] {
            if s(key).is_empty() {
                causes.push(Cause::invalid(
                    &format!("{FIELD}.{key}"),
                    s(key),
                    &format!("{what} must not be empty"),
                ));
            }
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", s("kind"), s("name"));
            match &first_controller {
                Some(first) => causes.push(Cause::invalid_rendered(
                    FIELD,
                    &Value::Array(refs.clone()).to_string(),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
}

fn validate_finalizers(finalizers: Option<&Value>, causes: &mut Vec<Cause>) {
    let Some(Value::Array(list)) = finalizers else {
        return;
    };
    const FIELD: &str = "metadata.finalizers";
    let mut all = Vec::new();
    for f in list {
        match f {
            Value::String(f) => {
                for m in is_qualified_name(f) {
                    causes.push(Cause::invalid(FIELD, f, &m));
                }
                all.push(f.clone());
            }
            other => causes.push(type_invalid(FIELD, other)),
        }
    }
    if all.iter().any(|f| f == STANDARD_ORPHAN) && all.iter().any(|f| f == STANDARD_FOREGROUND) {
        causes.push(Cause::invalid_rendered(
            FIELD,
            &gofmt::string_slice(&all),
            &format!("finalizer {STANDARD_ORPHAN} and {STANDARD_FOREGROUND} cannot be both set"),
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    #[test]
    fn subdomain_table() {
        let long_ok = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        assert_eq!(long_ok.len(), 253);
        for ok in [
            "a",
            "example.com",
            "a-b.c-d",
            "0",
            "1.2.3.4",
            "abc-123",
            long_ok.as_str(),
        ] {
            assert!(is_dns1123_subdomain(ok).is_empty(), "{ok}");
        }
        for bad in [
            "", "A", "a_b", "-a", "a-", "a..b", ".a", "a.", "a.-b", "héllo", "a b",
        ] {
            assert_eq!(
                is_dns1123_subdomain(bad),
                vec![SUBDOMAIN_MSG.to_string()],
                "{bad}"
            );
        }
        let too_long = format!("{long_ok}a");
        assert_eq!(
            is_dns1123_subdomain(&too_long),
            vec!["must be no more than 253 characters".to_string()]
        );
    }

    #[test]
    fn config_map_keys_are_file_names() {
        const MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
        for ok in [
            "a", "key.name", "KEY_NAME", "key-name", ".hidden", "a..b", "tls.crt",
        ] {
            assert!(is_config_map_key(ok).is_empty(), "{ok}");
        }
        assert_eq!(is_config_map_key("a/b"), vec![MSG.to_string()]);
        assert_eq!(is_config_map_key(""), vec![MSG.to_string()]);
        assert_eq!(is_config_map_key("."), vec!["must not be '.'".to_string()]);
        assert_eq!(
            is_config_map_key(".."),
            vec!["must not be '..'".to_string()]
        );
        assert_eq!(
            is_config_map_key("..data"),
            vec!["must not start with '..'".to_string()]
        );
        assert_eq!(
            is_config_map_key(&"k".repeat(254)),
            vec!["must be no more than 253 characters".to_string()]
        );
    }

    #[test]
    fn label_table() {
        for ok in ["a", "my-name", "123-abc", &"a".repeat(63)] {
            assert!(is_dns1123_label(ok).is_empty(), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a_b"] {
            assert_eq!(is_dns1123_label(bad), vec![LABEL_MSG.to_string()], "{bad}");
        }
        assert_eq!(
            is_dns1123_label("a.b"),
            vec!["must not contain dots".to_string()]
        );
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn dns1035_table() {
        for ok in ["a", "my-name", "abc-123", "a1"] {
            assert!(is_dns1035_label(ok).is_empty(), "{ok}");
        }
        for bad in ["", "1abc", "-a", "a-", "A", "a.b"] {
            assert_eq!(
                is_dns1035_label(bad),
                vec![DNS1035_MSG.to_string()],
                "{bad}"
            );
        }
    }

    #[test]
    fn qualified_name_table() {
        for ok in [
            "a",
            "A",
            "MyName",
            "my.name",
            "123-abc",
            "example.com/MyName",
            "a/b",
            "k8s.io/a_b.c-d",
        ] {
            assert!(is_qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            is_qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                NAME_PART_MSG.to_string()
            ]
        );
        assert_eq!(is_qualified_name("a b"), vec![NAME_PART_MSG.to_string()]);
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty".to_string()]
        );
        assert_eq!(
            is_qualified_name("Example.com/a"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters".to_string()]
        );
        let many = is_qualified_name("a/b/c");
        assert_eq!(many.len(), 1);
        assert!(
            many[0].starts_with("a qualified name must consist of"),
            "{}",
            many[0]
        );
        assert!(many[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }

    #[test]
    fn label_value_table() {
        for ok in [
            "",
            "a",
            "MyValue",
            "my_value",
            "12345",
            "a.b-c_d",
            &"v".repeat(63),
        ] {
            assert!(is_label_value(ok).is_empty(), "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", "é"] {
            assert_eq!(
                is_label_value(bad),
                vec![LABEL_VALUE_MSG.to_string()],
                "{bad}"
            );
        }
        assert_eq!(
            is_label_value(&"v".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn path_segment_table() {
        assert!(is_path_segment_name("system:controller:foo", false).is_empty());
        assert_eq!(is_path_segment_name(".", false), vec!["may not be '.'"]);
        assert_eq!(is_path_segment_name("..", false), vec!["may not be '..'"]);
        assert!(is_path_segment_name("..", true).is_empty());
        assert_eq!(
            is_path_segment_name("a/b%c", false),
            vec!["may not contain '/'", "may not contain '%'"]
        );
    }

    #[test]
    fn generate_name_prefix_allows_trailing_dash() {
        assert!(NameRule::Subdomain.check("web-", true).is_empty());
        assert!(!NameRule::Subdomain.check("web-", false).is_empty());
        assert!(NameRule::Label.check("web-", true).is_empty());
        assert!(NameRule::Dns1035Label.check("web-", true).is_empty());
        assert!(NameRule::PathSegment.check("web-", true).is_empty());
        assert!(!NameRule::Subdomain.check("Web-", true).is_empty());
    }

    #[test]
    fn object_meta_bad_name() {
        let causes = validate_object_meta(
            &json!({"name": "Bad_Name", "namespace": "default"}),
            NameRule::Subdomain,
            true,
        );
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}"),
                field: "metadata.name".into(),
            }]
        );
        assert_eq!(
            causes[0].to_error_string(),
            format!("metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}")
        );
    }

    #[test]
    fn object_meta_required_and_namespace() {
        let causes = validate_object_meta(&json!({}), NameRule::Subdomain, true);
        assert_eq!(
            causes,
            vec![
                Cause::required("metadata.name", "name or generateName is required"),
                Cause::required("metadata.namespace", ""),
            ]
        );
        assert_eq!(
            causes[0].message,
            "Required value: name or generateName is required"
        );
        assert_eq!(causes[1].message, "Required value");

        let causes = validate_object_meta(
            &json!({"name": "a", "namespace": "Bad"}),
            NameRule::Subdomain,
            true,
        );
        assert_eq!(
            causes,
            vec![Cause::invalid("metadata.namespace", "Bad", LABEL_MSG)]
        );

        let causes = validate_object_meta(
            &json!({"name": "a", "namespace": "x"}),
            NameRule::Subdomain,
            false,
        );
        assert_eq!(causes[0].reason, "FieldValueForbidden");
        assert_eq!(causes[0].message, "Forbidden: not allowed on this type");

        assert!(validate_object_meta(&json!({"name": "a"}), NameRule::Subdomain, false).is_empty());
        assert!(validate_object_meta(&Value::Null, NameRule::Label, false).len() == 1);
    }

    #[test]
    fn object_meta_generate_name() {
        assert!(
            validate_object_meta(
                &json!({"generateName": "web-", "namespace": "d"}),
                NameRule::Subdomain,
                true
            )
            .is_empty()
        );
        let causes = validate_object_meta(
            &json!({"generateName": "Web-", "namespace": "d"}),
            NameRule::Subdomain,
            true,
        );
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.generateName");
        assert!(
            causes[0]
                .message
                .starts_with("Invalid value: \"Web-\": a lowercase RFC 1123 subdomain")
        );
    }

    #[test]
    fn object_meta_rules() {
        let svc = validate_object_meta(
            &json!({"name": "1web", "namespace": "d"}),
            NameRule::Dns1035Label,
            true,
        );
        assert_eq!(
            svc,
            vec![Cause::invalid("metadata.name", "1web", DNS1035_MSG)]
        );
        let role = validate_object_meta(
            &json!({"name": "system:Admin"}),
            NameRule::PathSegment,
            false,
        );
        assert!(role.is_empty());
        let role = validate_object_meta(&json!({"name": "a/b"}), NameRule::PathSegment, false);
        assert_eq!(
            role,
            vec![Cause::invalid(
                "metadata.name",
                "a/b",
                "may not contain '/'"
            )]
        );
        let ns = validate_object_meta(&json!({"name": "a.b"}), NameRule::Label, false);
        assert_eq!(
            ns,
            vec![Cause::invalid(
                "metadata.name",
                "a.b",
                "must not contain dots"
            )]
        );
    }

    #[test]
    fn object_meta_labels_and_annotations() {
        let meta = json!({
            "name": "a",
            "labels": {"good": "yes", "bad key": "v", "k": "bad value"},
            "annotations": {"Example.COM/Key": "any value at all", "bad/key/x": ""}
        });
        let causes = validate_object_meta(&meta, NameRule::Subdomain, false);
        assert_eq!(causes.len(), 3, "{causes:#?}");
        assert_eq!(
            causes[0],
            Cause::invalid("metadata.labels", "bad key", NAME_PART_MSG)
        );
        assert_eq!(
            causes[1],
            Cause::invalid("metadata.labels", "bad value", LABEL_VALUE_MSG)
        );
        assert_eq!(causes[2].field, "metadata.annotations");
        assert!(
            causes[2]
                .message
                .starts_with("Invalid value: \"bad/key/x\": a qualified name must consist")
        );

        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_BYTES);
        let causes = validate_object_meta(
            &json!({"name": "a", "annotations": {"k": big}}),
            NameRule::Subdomain,
            false,
        );
        assert_eq!(
            causes,
            vec![Cause::too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT_BYTES
            )]
        );
        assert_eq!(
            causes[0].message,
            "Too long: must have at most 262144 bytes"
        );
        assert_eq!(causes[0].reason, "FieldValueTooLong");
    }

    #[test]
    fn object_meta_generation_owner_refs_finalizers() {
        let meta = json!({
            "name": "a",
            "generation": -1,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "1", "controller": true},
                {"apiVersion": "", "kind": "", "name": "", "uid": "", "controller": true}
            ],
            "finalizers": ["orphan", "foregroundDeletion", "bad finalizer"]
        });
        let causes = validate_object_meta(&meta, NameRule::Subdomain, false);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "metadata.generation",
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.ownerReferences.name",
                "metadata.ownerReferences.uid",
                "metadata.ownerReferences",
                "metadata.finalizers",
                "metadata.finalizers",
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            causes[1].message,
            "Invalid value: \"\": version must not be empty"
        );
        assert!(causes[5].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/rs and /"
        ));
        assert_eq!(
            causes[7].message,
            "Invalid value: []string{\"orphan\", \"foregroundDeletion\", \"bad finalizer\"}: finalizer orphan and foregroundDeletion cannot be both set"
        );
        let ok = json!({"name": "a", "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}], "finalizers": ["kubernetes", "example.com/x"]});
        assert!(validate_object_meta(&ok, NameRule::Subdomain, false).is_empty());
    }
}
