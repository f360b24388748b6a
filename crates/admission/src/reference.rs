//! Image references read as container runtimes read them: the grammar and
//! normalization of distribution's `reference` package
//! (`ParseNormalizedNamed`, `splitDockerDomain`), so a policy sees the
//! registry a runtime would pull from.
//!
//! The first path component is a registry when it is `localhost`, contains
//! `.` or `:`, or has an uppercase letter (repository paths must be
//! lowercase, so `Mirror/app` is host `Mirror`); otherwise the image is on
//! Docker Hub (`docker.io`, with `library/` before one-component names).
//! `index.docker.io` is Docker Hub too.

/// Docker Hub.
const DEFAULT_DOMAIN: &str = "docker.io";
/// Docker Hub's legacy name.
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// distribution's `NameTotalLengthMax`.
const NAME_TOTAL_LENGTH_MAX: usize = 255;

/// An image reference taken apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry `host[:port]` (`docker.io` for Docker Hub).
    pub registry: String,
    /// Repository path (`library/nginx`).
    pub repository: String,
    /// Tag, if any.
    pub tag: Option<String>,
    /// Digest (`sha256:<hex>`), if any.
    pub digest: Option<String>,
}

/// Why a reference is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// distribution's `ErrReferenceInvalidFormat` and friends.
    #[error("{0:?} is not a valid image reference: {1}")]
    Invalid(String, &'static str),
    /// An uppercase repository path.
    #[error("{0:?} is not a valid image reference: repository name ({1}) must be lowercase")]
    Uppercase(String, String),
}

impl ImageRef {
    /// distribution's `ParseNormalizedNamed`.
    pub fn parse(image: &str) -> Result<ImageRef, ReferenceError> {
        let invalid = |why| ReferenceError::Invalid(image.to_string(), why);
        if image.len() == 64
            && image
                .bytes()
                .all(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9'))
        {
            return Err(invalid("cannot specify 64-byte hexadecimal strings"));
        }
        let (domain, remainder) = split_docker_domain(image);
        let remote = remainder.split(':').next().unwrap_or("");
        if remote.to_lowercase() != remote {
            return Err(ReferenceError::Uppercase(
                image.to_string(),
                remote.to_string(),
            ));
        }
        // Parse(domain + "/" + remainder): name[:tag][@digest].
        let (rest, digest) = match remainder.split_once('@') {
            Some((r, d)) => {
                if !is_digest(d) {
                    return Err(invalid("invalid digest"));
                }
                (r, Some(d.to_string()))
            }
            None => (remainder.as_str(), None),
        };
        // The path has no ':', so the first ':' left starts the tag.
        let (path, tag) = match rest.split_once(':') {
            Some((p, t)) => {
                if !is_tag(t) {
                    return Err(invalid("invalid tag"));
                }
                (p, Some(t.to_string()))
            }
            None => (rest, None),
        };
        if !is_domain(&domain) {
            return Err(invalid("invalid registry host"));
        }
        if path.is_empty() || !path.split('/').all(is_path_component) {
            return Err(invalid("invalid repository path"));
        }
        if domain.len() + 1 + path.len() > NAME_TOTAL_LENGTH_MAX {
            return Err(invalid(
                "repository name must not be more than 255 characters",
            ));
        }
        Ok(ImageRef {
            registry: domain,
            repository: path.to_string(),
            tag,
            digest,
        })
    }
}

/// distribution's `splitDockerDomain`: (domain, remainder with tag/digest).
fn split_docker_domain(name: &str) -> (String, String) {
    let Some((first, rest)) = name.split_once('/') else {
        return (DEFAULT_DOMAIN.into(), format!("library/{name}"));
    };
    let (domain, remote) = if first == "localhost" {
        (first, rest)
    } else if first == LEGACY_DEFAULT_DOMAIN {
        (DEFAULT_DOMAIN, rest)
    } else if first.contains(['.', ':']) || first.to_lowercase() != first {
        (first, rest)
    } else {
        (DEFAULT_DOMAIN, name)
    };
    if domain == DEFAULT_DOMAIN && !remote.contains('/') {
        return (domain.into(), format!("library/{remote}"));
    }
    (domain.into(), remote.into())
}

/// `domainAndPort`: a host name or a bracketed IPv6 address, then an
/// optional `:port`.
fn is_domain(s: &str) -> bool {
    let (host_ok, port) = if let Some(v6) = s.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return false;
        };
        let addr_ok = !addr.is_empty() && addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
        (addr_ok, after)
    } else {
        let (host, port) = match s.find(':') {
            Some(i) => s.split_at(i),
            None => (s, ""),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !c.starts_with('-')
                && !c.ends_with('-')
        };
        (host.split('.').all(component_ok), port)
    };
    let port_ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(p) => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
    };
    host_ok && port_ok
}

/// `pathComponent`: `[a-z0-9]+` joined by `.`, `_`, `__` or runs of `-`.
fn is_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-')) {
            return false;
        }
    }
    true
}

/// `tag`: `[\w][\w.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && word(b[0])
        && b.iter().all(|&x| word(x) || x == b'.' || x == b'-')
}

/// `digest`: `algorithm:hex` with at least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((alg, hex)) = d.split_once(':') else {
        return false;
    };
    let alg_ok = alg.split(['-', '_', '+', '.']).all(|part| {
        let b = part.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    });
    alg_ok && hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(s: &str) -> (String, String) {
        let r = ImageRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (r.registry, r.repository)
    }

    /// distribution's `TestNormalizedSplitHostname` and the domain and
    /// remote-name columns of `TestParseRepositoryInfo`.
    #[test]
    fn domains_follow_distribution() {
        let cases = [
            ("test.com/foo", "test.com", "foo"),
            ("test_com/foo", "docker.io", "test_com/foo"),
            ("docker/migrator", "docker.io", "docker/migrator"),
            ("test.com:8080/foo", "test.com:8080", "foo"),
            ("test-com:8080/foo", "test-com:8080", "foo"),
            ("foo", "docker.io", "library/foo"),
            ("xn--n3h.com/foo", "xn--n3h.com", "foo"),
            ("xn--n3h.com:18080/foo", "xn--n3h.com:18080", "foo"),
            ("docker.io/foo", "docker.io", "library/foo"),
            ("docker.io/library/foo", "docker.io", "library/foo"),
            ("docker.io/library/foo/bar", "docker.io", "library/foo/bar"),
            ("index.docker.io/fooo/bar", "docker.io", "fooo/bar"),
            (
                "index.docker.io/library/ubuntu-12.04-base",
                "docker.io",
                "library/ubuntu-12.04-base",
            ),
            ("library/ubuntu", "docker.io", "library/ubuntu"),
            (
                "127.0.0.1:8000/private/moonbase",
                "127.0.0.1:8000",
                "private/moonbase",
            ),
            (
                "example.com:8000/privatebasee",
                "example.com:8000",
                "privatebasee",
            ),
            ("store/foo/bar", "docker.io", "store/foo/bar"),
            ("Foo/bar", "Foo", "bar"),
            ("FOO/bar", "FOO", "bar"),
            ("Mirror/app:1", "Mirror", "app"),
            ("localhost/foo", "localhost", "foo"),
            ("localhost:5000/a/b:1.2", "localhost:5000", "a/b"),
            ("[fc00::1]:5000/docker", "[fc00::1]:5000", "docker"),
        ];
        for (input, domain, path) in cases {
            assert_eq!(
                split(input),
                (domain.to_string(), path.to_string()),
                "{input}"
            );
        }
    }

    /// distribution's `TestValidateReferenceName` and `TestValidateRemoteName`.
    #[test]
    fn validity_follows_distribution() {
        let valid = [
            "docker/docker",
            "library/debian",
            "debian",
            "docker.io/docker/docker",
            "docker.io/library/debian",
            "docker.io/debian",
            "index.docker.io/docker/docker",
            "index.docker.io/library/debian",
            "index.docker.io/debian",
            "127.0.0.1:5000/docker/docker",
            "127.0.0.1:5000/library/debian",
            "127.0.0.1:5000/debian",
            "192.168.0.1",
            "192.168.0.1:80",
            "192.168.0.1:8/debian",
            "192.168.0.2:25000/debian",
            "thisisthesongthatneverendsitgoesonandonandonthisisthesongthatnev",
            "[fc00::1]:5000/docker",
            "[fc00::1]:5000/docker/docker",
            "[fc00:1:2:3:4:5:6:7]:5000/library/debian",
            "docker.io/1a3f5e7d9c1b3a5f7e9d1c3b5a7f9e1d3c5b7a9f1e3d5d7c9b1a3f5e7d9c1b3a",
            "Docker/docker",
            "DOCKER/docker",
            "docker-rules/docker",
            "docker---rules/docker",
            "doc/docker",
            "d/docker",
            "jess/t",
            "dock__er/docker",
            "busybox:latest@sha256:86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa",
        ];
        for v in valid {
            assert!(ImageRef::parse(v).is_ok(), "{v} should be valid");
        }
        let invalid = [
            "https://github.com/docker/docker",
            "docker/Docker",
            "-docker",
            "-docker/docker",
            "-docker.io/docker/docker",
            "docker///docker",
            "docker.io/docker/Docker",
            "docker.io/docker///docker",
            "[fc00::1]",
            "[fc00::1]:5000",
            "fc00::1:5000/debian",
            "[fe80::1%eth0]:5000/debian",
            "[2001:db8:3:4::192.0.2.33]:5000/debian",
            "1a3f5e7d9c1b3a5f7e9d1c3b5a7f9e1d3c5b7a9f1e3d5d7c9b1a3f5e7d9c1b3a",
            "docker-/docker",
            "-docker-/docker",
            "____/____",
            "_docker/_docker",
            "dock..er/docker",
            "dock_.er/docker",
            "dock-.er/docker",
            "docker/",
            "",
            "bad image",
            "nginx@sha256:00",
        ];
        for v in invalid {
            assert!(ImageRef::parse(v).is_err(), "{v} should be invalid");
        }
        let long = format!("{}/docker", "a".repeat(256));
        assert!(ImageRef::parse(&long).is_err());
    }

    #[test]
    fn tags_and_digests() {
        let d = "sha256:86e0e091d0da6bde2456dbb48306f3956bbeb2eae1b5b9a43045843f69fe4aaa";
        let r = ImageRef::parse(&format!("busybox:latest@{d}")).expect("ref");
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert_eq!(r.digest.as_deref(), Some(d));
        let r = ImageRef::parse("192.168.0.1:80").expect("ref");
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("docker.io", "library/192.168.0.1", Some("80"))
        );
    }
}
