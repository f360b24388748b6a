//! Messages as kube-apiserver words them: Go's `field.Error` bodies
//! (`Invalid value: "x": ...`, `Required value`, ...) around kube-openapi's
//! validation messages (`spec.x in body must be of type string: "integer"`), and
//! Go's `%q` / `%v` formatting of values.

use serde_json::Value;

use crate::FieldError;

/// `metav1.CauseType` values.
pub(crate) const INVALID: &str = "FieldValueInvalid";
pub(crate) const REQUIRED: &str = "FieldValueRequired";
pub(crate) const NOT_SUPPORTED: &str = "FieldValueNotSupported";
pub(crate) const TYPE_INVALID: &str = "FieldValueTypeInvalid";
pub(crate) const TOO_LONG: &str = "FieldValueTooLong";
pub(crate) const TOO_MANY: &str = "FieldValueTooMany";
pub(crate) const FORBIDDEN: &str = "FieldValueForbidden";

/// Go's `strconv.Quote`, from the crate that holds Kubernetes' grammar.
pub(crate) use kubeforge_apimachinery::gofmt::quote as go_quote;

/// Go's `%v` of a float64 (shortest representation, exponent outside [1e-4, 1e21)).
pub(crate) fn go_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f.is_infinite() {
            if f > 0.0 {
                "+Inf".into()
            } else {
                "-Inf".into()
            }
        } else {
            "0".into()
        };
    }
    let exp = f.abs().log10().floor();
    if (-4.0..21.0).contains(&exp) {
        format!("{f}")
    } else {
        // Rust: "1e21", "1.5e-7"; Go: "1e+21", "1.5e-07".
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((mantissa, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// Go's `%v` of a JSON number as kube decodes it (int64 or float64).
pub(crate) fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else if let Some(u) = n.as_u64() {
        go_float(u as f64)
    } else {
        go_float(n.as_f64().unwrap_or(0.0))
    }
}

/// How Go's `field.Error` prints a bad value: strings quoted, numbers and booleans
/// plain, everything else as JSON.
pub(crate) fn bad_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_number(n),
        Value::Bool(b) => b.to_string(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// The JSON schema type name of a value, as kube-openapi reports it.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The name kube-openapi uses in messages: the path, `in body`.
fn subject(path: &str) -> String {
    format!("{path} in body")
}

/// `field.TypeInvalid` carrying kube-openapi's "must be of type" message.
pub(crate) fn type_invalid(path: &str, expected: &str, actual: &str) -> FieldError {
    let q = go_quote(actual);
    FieldError {
        field: path.to_owned(),
        reason: TYPE_INVALID,
        message: format!(
            "Invalid value: {q}: {} must be of type {expected}: {q}",
            subject(path)
        ),
    }
}

/// `field.Required` with no detail.
pub(crate) fn required(path: &str) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: REQUIRED,
        message: "Required value".into(),
    }
}

/// `field.Required` with a detail.
pub(crate) fn required_detail(path: &str, detail: &str) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: REQUIRED,
        message: format!("Required value: {detail}"),
    }
}

/// `field.Forbidden`.
pub(crate) fn forbidden(path: &str, detail: &str) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: FORBIDDEN,
        message: format!("Forbidden: {detail}"),
    }
}

/// `field.Invalid` with a value already formatted.
pub(crate) fn invalid_raw(path: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: INVALID,
        message: format!("Invalid value: {value}: {detail}"),
    }
}

/// `field.Invalid`.
pub(crate) fn invalid(path: &str, value: &Value, detail: &str) -> FieldError {
    invalid_raw(path, &bad_value(value), detail)
}

/// `field.NotSupported`.
pub(crate) fn not_supported(path: &str, value: &Value, allowed: &[String]) -> FieldError {
    let mut message = format!("Unsupported value: {}", bad_value(value));
    if !allowed.is_empty() {
        message.push_str(": supported values: ");
        let quoted: Vec<String> = allowed.iter().map(|s| go_quote(s)).collect();
        message.push_str(&quoted.join(", "));
    }
    FieldError {
        field: path.to_owned(),
        reason: NOT_SUPPORTED,
        message,
    }
}

/// `field.TooLong`.
pub(crate) fn too_long(path: &str, max: u64) -> FieldError {
    let unit = if max == 1 { "byte" } else { "bytes" };
    FieldError {
        field: path.to_owned(),
        reason: TOO_LONG,
        message: format!("Too long: may not be more than {max} {unit}"),
    }
}

/// `field.TooMany`.
pub(crate) fn too_many(path: &str, actual: usize, max: u64) -> FieldError {
    let unit = if max == 1 { "item" } else { "items" };
    FieldError {
        field: path.to_owned(),
        reason: TOO_MANY,
        message: format!("Too many: {actual}: must have at most {max} {unit}"),
    }
}

/// A kube-openapi message about `path`, as `field.Invalid` of `value`.
pub(crate) fn invalid_in_body(path: &str, value: &Value, what: &str) -> FieldError {
    invalid(path, value, &format!("{} {what}", subject(path)))
}

/// A kube-openapi message about `path` whose bad value is a count.
pub(crate) fn invalid_count_in_body(path: &str, count: usize, what: &str) -> FieldError {
    invalid_raw(
        path,
        &count.to_string(),
        &format!("{} {what}", subject(path)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_formatting() {
        assert_eq!(go_quote("a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_float(10.0), "10");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(
            bad_value(&serde_json::json!({"b": 1, "a": [true]})),
            "{\"a\":[true],\"b\":1}"
        );
    }
}
