//! `$(VAR)` references in container commands, args and env values, as
//! Kubernetes expands them: a defined name is replaced by its value, `$$`
//! is an escaped `$`, and anything else (an undefined name, an unclosed
//! `$(`, a lone `$`) is kept as written.

/// Expand `$(NAME)` in `input` with `lookup`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            // `$$` is an escaped `$`.
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match lookup(name) {
                        Some(value) => out.push_str(&value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    // Unclosed: kept as written.
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::expand;

    fn env(name: &str) -> Option<String> {
        match name {
            "VAR_A" => Some("A".into()),
            "VAR_B" => Some("B".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_as_kube_does() {
        // Cases of kube's third_party/forked/golang/expansion tests.
        for (input, want) in [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_B)", "A-B"),
            ("$(EMPTY)", ""),
            ("$(UNKNOWN)", "$(UNKNOWN)"),
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("$(VAR_A", "$(VAR_A"),
            ("$VAR_A", "$VAR_A"),
            ("lone $", "lone $"),
            ("$()", "$()"),
            ("no refs", "no refs"),
            ("ünïcode $(VAR_A) ✓", "ünïcode A ✓"),
        ] {
            assert_eq!(expand(input, env), want, "{input}");
        }
    }
}
