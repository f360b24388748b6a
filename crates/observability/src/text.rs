//! Writing Prometheus text format 0.0.4 by hand, for series rendered per
//! object as objects change (a metrics library's families would be rebuilt
//! for every object at every scrape): label values escaped as the format
//! says (`\\`, `\"`, `\n`), one `name{labels} value` line per sample.

use std::fmt::Write as _;

/// The content type of Prometheus text 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `value` escaped for a label value in the text format.
pub fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    let mut out = String::with_capacity(value.len() + 2);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.into()
}

/// Append `name{k="v",…} value\n` to `out`.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    out.push(' ');
    if value.fract() == 0.0 && value.abs() < 1e15 {
        let _ = write!(out, "{}", value as i64);
    } else {
        let _ = write!(out, "{value}");
    }
    out.push('\n');
}

/// Append a family's `# HELP` and `# TYPE` lines.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_label_values() {
        let mut out = String::new();
        sample(&mut out, "m", &[("a", "x\"y\\z\nw"), ("b", "")], 1.0);
        sample(&mut out, "n", &[], 0.25);
        assert_eq!(out, "m{a=\"x\\\"y\\\\z\\nw\",b=\"\"} 1\nn 0.25\n");
    }
}
