//! Small helpers that reproduce Go's `fmt` renderings used in Kubernetes
//! error messages (`%q` of a string, `%#v` of a `[]string`), so messages read
//! exactly like the API server's.

use std::fmt::Write as _;

/// Go's `strconv.Quote` (`%q`): a double-quoted string with Go escapes.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if is_go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `unicode.IsPrint`: graphic characters and the
/// ASCII space, but no other spaces and no control characters.
fn is_go_printable(c: char) -> bool {
    c == ' ' || !(c.is_control() || c.is_whitespace())
}

/// Go's `%#v` of a `[]string`: `[]string{"a", "b"}`.
pub(crate) fn string_slice(values: &[String]) -> String {
    let mut out = String::from("[]string{");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&quote(v));
    }
    out.push('}');
    out
}

/// Joins messages the way `k8s.io/apimachinery/pkg/util/errors.Aggregate`
/// prints them: one message as is, several deduplicated inside `[a, b]`.
pub(crate) fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_matches_go() {
        assert_eq!(quote("abc"), r#""abc""#);
        assert_eq!(quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(quote("a\nb\tc\u{1}"), r#""a\nb\tc\x01""#);
        assert_eq!(quote("héllo"), "\"héllo\"");
        assert_eq!(quote("a\u{a0}b"), r#""a\u00a0b""#);
    }

    #[test]
    fn string_slice_matches_go() {
        assert_eq!(string_slice(&[]), "[]string{}");
        assert_eq!(
            string_slice(&["a".into(), "b".into()]),
            r#"[]string{"a", "b"}"#
        );
    }

    #[test]
    fn aggregate_matches_go() {
        assert_eq!(aggregate(&[]), "");
        assert_eq!(aggregate(&["x".into()]), "x");
        assert_eq!(aggregate(&["x".into(), "y".into(), "x".into()]), "[x, y]");
        assert_eq!(aggregate(&["x".into(), "x".into()]), "x");
    }
}
