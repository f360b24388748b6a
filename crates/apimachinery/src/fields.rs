//! Kubernetes field selectors (`k8s.io/apimachinery/pkg/fields`):
//! `field=value`, `field==value` and `field!=value` terms joined by `,`
//! (AND), and reading a field of a JSON object for matching.
//!
//! As in Go, a term is split at its first operator (`!=`, `==` or `=`); the
//! field name is taken literally, while the value may escape `\,`, `\=` and
//! `\\` (an unescaped `,` separates terms, an unescaped `=` in a value is an
//! error). Terms are kept sorted by their text, like Go.

use std::fmt;

use serde_json::Value;

use crate::error::SelectorError;

/// The operator of a field selector term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOp {
    /// `=` or `==`.
    Eq,
    /// `!=`.
    NotEq,
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field path, e.g. `spec.nodeName`.
    pub field: String,
    /// The comparison.
    pub op: FieldOp,
    /// The value, unescaped.
    pub value: String,
}

impl FieldRequirement {
    /// Whether a field whose value is `actual` satisfies this term.
    pub fn matches(&self, actual: &str) -> bool {
        match self.op {
            FieldOp::Eq => actual == self.value,
            FieldOp::NotEq => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            FieldOp::Eq => "=",
            FieldOp::NotEq => "!=",
        };
        write!(f, "{}{}{}", self.field, op, escape_value(&self.value))
    }
}

/// A field selector: the AND of its terms. The default value selects
/// everything.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a field selector (Go's `fields.ParseSelector`). The empty
    /// string selects everything; empty terms (`a=b,,c=d`) are skipped.
    pub fn parse(s: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort_unstable();
        let mut requirements = Vec::with_capacity(parts.len());
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((field, op, rhs)) = split_term(part) else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(rhs)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// A selector that matches everything.
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// Whether this selector places no restriction.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The terms, in Go's order (sorted by their source text).
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether an object matches: `get(field)` gives the object's value for a
    /// field (see [`json_field`]); `None` counts as the empty string, as Go's
    /// `fields.Set.Get` does for a missing field.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).as_deref().unwrap_or("")))
    }

    /// The value required for `field` by an `=`/`==` term, if any (Go's
    /// `RequiresExactMatch`; useful for indexing, e.g. `spec.nodeName`).
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.op == FieldOp::Eq)
            .map(|r| r.value.as_str())
    }

    /// Every `field=value` (or `==`) term, as (field, value) pairs (what
    /// kube's authorizer attributes carry as field requirements).
    pub fn equalities(&self) -> Vec<(String, String)> {
        self.requirements
            .iter()
            .filter(|r| r.op == FieldOp::Eq)
            .map(|r| (r.field.clone(), r.value.clone()))
            .collect()
    }
}

impl fmt::Display for FieldSelector {
    /// Go's `String()`: terms joined by `,`, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// Escapes `\`, `,` and `=` in a value for use in a field selector (Go's
/// `fields.EscapeValue`).
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits at commas not preceded by an escaping backslash; the backslashes
/// stay in the terms.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at the first operator: at each position `!=`, then `==`,
/// then `=` is tried.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in [
            ("!=", FieldOp::NotEq),
            ("==", FieldOp::Eq),
            ("=", FieldOp::Eq),
        ] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], kind, rhs));
            }
        }
    }
    None
}

/// Go's `fields.UnescapeValue`, with its error texts (the unescaped character
/// is printed as its code point number, as Go's `%v` of a rune does).
fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                other => {
                    return Err(SelectorError::Field(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                return Err(SelectorError::Field(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            other => out.push(other),
        }
    }
    if in_slash {
        return Err(SelectorError::Field(
            "invalid field selector: invalid escape sequence: \\".into(),
        ));
    }
    Ok(out)
}

/// Reads a dotted field path (e.g. `spec.nodeName`, `metadata.name`) from a
/// JSON object as a string for field-selector matching: strings as they are,
/// numbers and booleans in their JSON form (`3`, `true`), a missing field or
/// `null` as `""`. Returns `None` when the path leads to an object or an
/// array, which cannot be compared with a field selector value.
pub fn json_field(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for segment in path.split('.') {
        match cur.get(segment) {
            Some(v) => cur = v,
            None => return Some(String::new()),
        }
    }
    match cur {
        Value::Null => Some(String::new()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(field: &str, op: FieldOp, value: &str) -> FieldRequirement {
        FieldRequirement {
            field: field.into(),
            op,
            value: value.into(),
        }
    }

    #[test]
    fn parse_table() {
        let cases: Vec<(&str, Vec<FieldRequirement>)> = vec![
            ("", vec![]),
            (",", vec![]),
            ("a=b", vec![req("a", FieldOp::Eq, "b")]),
            ("a==b", vec![req("a", FieldOp::Eq, "b")]),
            ("a!=b", vec![req("a", FieldOp::NotEq, "b")]),
            ("a=", vec![req("a", FieldOp::Eq, "")]),
            ("=b", vec![req("", FieldOp::Eq, "b")]),
            ("a=!b", vec![req("a", FieldOp::Eq, "!b")]),
            (
                "spec.nodeName=n1,metadata.name!=x",
                vec![
                    req("metadata.name", FieldOp::NotEq, "x"),
                    req("spec.nodeName", FieldOp::Eq, "n1"),
                ],
            ),
            (
                "a=b,,c=d",
                vec![req("a", FieldOp::Eq, "b"), req("c", FieldOp::Eq, "d")],
            ),
            (r"a=x\,y", vec![req("a", FieldOp::Eq, "x,y")]),
            (r"a=x\=y", vec![req("a", FieldOp::Eq, "x=y")]),
            (r"a=x\\y", vec![req("a", FieldOp::Eq, r"x\y")]),
            (
                r"a=x\\,b=c",
                vec![req("a", FieldOp::Eq, r"x\"), req("b", FieldOp::Eq, "c")],
            ),
            ("a= b ", vec![req("a", FieldOp::Eq, " b ")]),
            ("é=ü", vec![req("é", FieldOp::Eq, "ü")]),
        ];
        for (input, want) in cases {
            let s = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(s.requirements(), want.as_slice(), "{input:?}");
            assert_eq!(s.is_everything(), want.is_empty());
            assert_eq!(
                FieldSelector::parse(&s.to_string()).unwrap(),
                s,
                "{input:?}"
            );
        }
    }

    #[test]
    fn parse_errors_match_go() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("x=1,a", "invalid selector: 'x=1,a'; can't understand 'a'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a===b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                r"a=b\x",
                r"invalid field selector: invalid escape sequence: \x",
            ),
            (
                r"a=b\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ];
        for (input, want) in cases {
            let e = FieldSelector::parse(input).unwrap_err();
            assert_eq!(e.to_string(), want, "{input:?}");
            assert!(matches!(e, SelectorError::Field(_)));
        }
    }

    #[test]
    fn display_escapes() {
        let s = FieldSelector::parse(r"b!=x\,y,a=p\=q").unwrap();
        assert_eq!(s.to_string(), r"a=p\=q,b!=x\,y");
        assert_eq!(escape_value(r"a\b,c=d"), r"a\\b\,c\=d");
        assert_eq!("a=b".parse::<FieldSelector>().unwrap().to_string(), "a=b");
    }

    #[test]
    fn matching_and_exact() {
        let pod = json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"nodeName": "node-1", "hostNetwork": true, "priority": 10, "containers": []},
            "status": {"phase": "Running", "podIP": null}
        });
        let get = |f: &str| json_field(&pod, f);
        let cases = [
            ("", true),
            ("metadata.name=web-1", true),
            ("metadata.name==web-1", true),
            ("metadata.name!=web-1", false),
            ("spec.nodeName=node-1,status.phase=Running", true),
            ("spec.nodeName=node-1,status.phase!=Running", false),
            ("spec.nodeName=", false),
            ("spec.schedulerName=", true),
            ("spec.schedulerName!=x", true),
            ("status.podIP=", true),
            ("spec.hostNetwork=true", true),
            ("spec.priority=10", true),
            ("spec.containers=", true),
            (
                "metadata.namespace=default,metadata.namespace!=kube-system",
                true,
            ),
        ];
        for (sel, want) in cases {
            assert_eq!(
                FieldSelector::parse(sel).unwrap().matches(get),
                want,
                "{sel:?}"
            );
        }
        let s = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed").unwrap();
        assert_eq!(s.exact("spec.nodeName"), Some("n1"));
        assert_eq!(s.exact("status.phase"), None);
        assert_eq!(s.exact("metadata.name"), None);
    }

    #[test]
    fn json_field_table() {
        let obj = json!({"a": {"b": "x", "n": 1.5, "t": false, "o": {}, "l": [1], "z": null}});
        assert_eq!(json_field(&obj, "a.b"), Some("x".into()));
        assert_eq!(json_field(&obj, "a.n"), Some("1.5".into()));
        assert_eq!(json_field(&obj, "a.t"), Some("false".into()));
        assert_eq!(json_field(&obj, "a.z"), Some("".into()));
        assert_eq!(json_field(&obj, "a.missing"), Some("".into()));
        assert_eq!(json_field(&obj, "a.b.c"), Some("".into()));
        assert_eq!(json_field(&obj, "a.o"), None);
        assert_eq!(json_field(&obj, "a.l"), None);
        assert_eq!(json_field(&json!("s"), "a"), Some("".into()));
    }
}
