//! The grammar of what a scaffold is asked for — domains, groups,
//! versions, kinds, project names — checked before anything is written,
//! each refusal saying what is wrong and how to fix it.

use kubeforge_apimachinery::names::{is_dns1123_label, is_dns1123_subdomain};

use crate::ScaffoldError;

fn bad(what: &str, value: &str, why: impl Into<String>) -> ScaffoldError {
    ScaffoldError::Invalid {
        what: what.to_string(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// A domain: a DNS subdomain such as `example.com` (the suffix of every
/// API group, `<group>.<domain>`).
pub fn domain(value: &str) -> Result<(), ScaffoldError> {
    let errs = is_dns1123_subdomain(value);
    if let Some(e) = errs.first() {
        return Err(bad(
            "--domain",
            value,
            format!("{e}; use a DNS name you control, e.g. example.com"),
        ));
    }
    Ok(())
}

/// A group: one lowercase DNS label such as `cache` (the API group is
/// `<group>.<domain>`).
pub fn group(value: &str, domain: &str) -> Result<(), ScaffoldError> {
    if let Some(e) = is_dns1123_label(value).first() {
        return Err(bad(
            "--group",
            value,
            format!("{e}; use one lowercase word such as cache"),
        ));
    }
    let full = format!("{value}.{domain}");
    if let Some(e) = is_dns1123_subdomain(&full).first() {
        return Err(bad("--group", value, format!("the API group {full}: {e}")));
    }
    Ok(())
}

/// A version as Kubernetes orders them: `v1`, `v2beta1`, `v1alpha3`.
pub fn version(value: &str) -> Result<(), ScaffoldError> {
    let rest = value.strip_prefix('v').unwrap_or("");
    let digits =
        |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && !s.starts_with('0');
    let ok = match rest.find(|c: char| !c.is_ascii_digit()) {
        None => digits(rest),
        Some(i) => {
            let (major, tail) = rest.split_at(i);
            let level = tail
                .strip_prefix("alpha")
                .or_else(|| tail.strip_prefix("beta"));
            digits(major) && level.is_some_and(digits)
        }
    };
    if !ok {
        return Err(bad(
            "--version",
            value,
            "a version is v<N>, v<N>alpha<M> or v<N>beta<M> (N, M > 0), e.g. v1alpha1",
        ));
    }
    Ok(())
}

/// A kind: UpperCamelCase letters and digits, starting with a capital,
/// at most 63 characters, such as `Memcached`.
pub fn kind(value: &str) -> Result<(), ScaffoldError> {
    let mut chars = value.chars();
    let first_upper = chars.next().is_some_and(|c| c.is_ascii_uppercase());
    if !first_upper || !value.chars().all(|c| c.is_ascii_alphanumeric()) || value.len() > 63 {
        return Err(bad(
            "--kind",
            value,
            "a kind is UpperCamelCase ASCII letters and digits starting with a capital, at most 63 characters, e.g. Memcached",
        ));
    }
    Ok(())
}

/// A project name: a DNS label (it names the crate, the namespace prefix
/// and the image), such as `memcached-operator`.
pub fn project_name(value: &str) -> Result<(), ScaffoldError> {
    if let Some(e) = is_dns1123_label(value).first() {
        return Err(bad(
            "--name",
            value,
            format!("{e}; name the project like memcached-operator"),
        ));
    }
    if value.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(bad(
            "--name",
            value,
            "a crate name cannot start with a digit; start it with a letter",
        ));
    }
    Ok(())
}

/// A repository path such as `example.com/memcached-operator` (recorded in
/// PROJECT; its last segment is the default project name).
pub fn repo(value: &str) -> Result<(), ScaffoldError> {
    let ok = !value.is_empty()
        && !value.starts_with('/')
        && !value.ends_with('/')
        && value.split('/').all(|s| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
        });
    if !ok {
        return Err(bad(
            "--repo",
            value,
            "a repository path is slash-separated segments of letters, digits, '-', '.', '_' or '~', e.g. example.com/memcached-operator",
        ));
    }
    Ok(())
}

/// `MemcachedBackup` → `memcached_backup` (module and file names).
pub fn snake(kind: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = kind.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && !chars[i - 1].is_ascii_uppercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if i > 0 && (prev_lower || next_lower) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(*c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_follow_kubernetes_grammar() {
        for ok in ["v1", "v1alpha1", "v2beta3", "v10"] {
            version(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "1",
            "v",
            "v0",
            "V1",
            "v1alpha",
            "v1gamma1",
            "v1alpha0",
            "v01",
            "v1-alpha1",
        ] {
            assert!(version(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn kinds_groups_domains_and_names() {
        kind("Memcached").expect("Memcached");
        for bad in ["memcached", "Mem-cached", "", "Mem cached"] {
            assert!(kind(bad).is_err(), "{bad:?}");
        }
        domain("example.com").expect("domain");
        assert!(domain("Example.com").is_err());
        assert!(domain("-x.com").is_err());
        group("cache", "example.com").expect("group");
        assert!(group("Cache", "example.com").is_err());
        assert!(group("ca.che", "example.com").is_err());
        project_name("memcached-operator").expect("name");
        assert!(project_name("Memcached").is_err());
        assert!(project_name("1op").is_err());
        repo("example.com/memcached-operator").expect("repo");
        assert!(repo("/abs").is_err() && repo("a//b").is_err() && repo("a/../b").is_err());
    }

    #[test]
    fn snake_case_module_names() {
        assert_eq!(snake("Memcached"), "memcached");
        assert_eq!(snake("MemcachedBackup"), "memcached_backup");
        assert_eq!(snake("HTTPRoute"), "http_route");
    }
}
