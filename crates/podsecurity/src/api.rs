//! Levels, versions and the namespace labels that choose them, read as
//! `k8s.io/pod-security-admission/api` reads them: a label that does not
//! parse is an error *and* a fail-safe value (enforce falls back to
//! `restricted` and `latest`; audit and warn fail open to `privileged`).

use std::collections::BTreeMap;
use std::fmt;

use kubeforge_apimachinery::names::Cause;

/// The prefix of every Pod Security label and audit annotation.
pub const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
/// `pod-security.kubernetes.io/enforce`.
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
/// `pod-security.kubernetes.io/enforce-version`.
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// `pod-security.kubernetes.io/audit`.
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
/// `pod-security.kubernetes.io/audit-version`.
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
/// `pod-security.kubernetes.io/warn`.
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
/// `pod-security.kubernetes.io/warn-version`.
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// A Pod Security Standards level, from least to most strict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// No restriction.
    Privileged,
    /// Prevents known privilege escalations.
    Baseline,
    /// Current pod hardening best practice.
    Restricted,
}

impl Level {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// kube's `ParseLevel`: the level, or the error text (the caller
    /// decides what to fall back to).
    pub fn parse(s: &str) -> Result<Level, &'static str> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err("must be one of privileged, baseline, restricted"),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy version: `latest` or `v1.N`. `latest` is newer than every
/// numbered version, even one from the future.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    /// `latest`.
    Latest,
    /// `v1.N`, holding N.
    V1(u32),
}

impl Version {
    /// kube's `ParseVersion`: `latest` or `v1.N` (N without leading
    /// zeros).
    pub fn parse(s: &str) -> Result<Version, &'static str> {
        const BAD: &str = "must be \"latest\" or \"v1.x\"";
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let minor = s.strip_prefix("v1.").ok_or(BAD)?;
        let digits_only = !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || (minor.len() > 1 && minor.starts_with('0')) {
            return Err(BAD);
        }
        // Go's Atoi fails past its int range; so does this.
        minor.parse::<u32>().map(Version::V1).map_err(|_| BAD)
    }

    /// Whether `self` is older than `other`.
    pub fn older_than(self, other: Version) -> bool {
        match (self, other) {
            (Version::Latest, _) => false,
            (Version::V1(_), Version::Latest) => true,
            (Version::V1(a), Version::V1(b)) => a < b,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::V1(n) => write!(f, "v1.{n}"),
        }
    }
}

/// A level at a version, printed `baseline:latest`, `restricted:v1.24`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    /// The level.
    pub level: Level,
    /// The version of the standards.
    pub version: Version,
}

impl LevelVersion {
    /// `privileged:latest`, the cluster default when nothing is configured.
    pub const PRIVILEGED: LevelVersion = LevelVersion {
        level: Level::Privileged,
        version: Version::Latest,
    };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// What a namespace enforces, audits and warns about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Violations refuse the pod (403).
    pub enforce: LevelVersion,
    /// Violations are written to the audit log.
    pub audit: LevelVersion,
    /// Violations come back as `Warning` headers.
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED,
            audit: LevelVersion::PRIVILEGED,
            warn: LevelVersion::PRIVILEGED,
        }
    }
}

impl Policy {
    /// Whether all three modes are `privileged` (nothing to evaluate).
    pub fn all_privileged(&self) -> bool {
        self.enforce.level == Level::Privileged
            && self.audit.level == Level::Privileged
            && self.warn.level == Level::Privileged
    }

    /// kube's `Policy.Equivalent`: each mode the same, any two
    /// `privileged` ones being the same whatever their versions.
    pub fn equivalent(&self, other: &Policy) -> bool {
        let same = |a: LevelVersion, b: LevelVersion| {
            (a.level == Level::Privileged && b.level == Level::Privileged) || a == b
        };
        same(self.enforce, other.enforce)
            && same(self.audit, other.audit)
            && same(self.warn, other.warn)
    }
}

/// kube's `PolicyToEvaluate`: the policy a namespace's labels ask for,
/// `defaults` filling what they leave out, and a cause per label that
/// does not parse (field `metadata.labels[<key>]`). A usable policy comes
/// back even with errors: enforce falls back to `restricted` / `latest`,
/// audit and warn to `privileged`.
pub fn policy_to_evaluate(
    labels: Option<&BTreeMap<String, String>>,
    defaults: Policy,
) -> (Policy, Vec<Cause>) {
    let mut p = defaults;
    let mut errs = Vec::new();
    let Some(labels) = labels.filter(|l| !l.is_empty()) else {
        return (p, errs);
    };
    let mut bad = |key: &str, value: &str, why: &str| {
        errs.push(Cause::invalid(
            &format!("metadata.labels[{key}]"),
            value,
            why,
        ));
    };
    let modes: [(&mut LevelVersion, &str, &str, Level); 3] = [
        (
            &mut p.enforce,
            ENFORCE_LEVEL_LABEL,
            ENFORCE_VERSION_LABEL,
            Level::Restricted,
        ),
        (
            &mut p.audit,
            AUDIT_LEVEL_LABEL,
            AUDIT_VERSION_LABEL,
            Level::Privileged,
        ),
        (
            &mut p.warn,
            WARN_LEVEL_LABEL,
            WARN_VERSION_LABEL,
            Level::Privileged,
        ),
    ];
    let mut parsed_level = [false; 3];
    for (i, (lv, level_key, version_key, fail_level)) in modes.into_iter().enumerate() {
        if let Some(v) = labels.get(level_key) {
            lv.level = Level::parse(v).unwrap_or_else(|why| {
                bad(level_key, v, why);
                fail_level
            });
            parsed_level[i] = lv.level.as_str() == v;
        }
        if let Some(v) = labels.get(version_key) {
            lv.version = Version::parse(v).unwrap_or_else(|why| {
                bad(version_key, v, why);
                Version::Latest
            });
        }
    }
    // Warn defaults to an explicitly set, stricter enforce level (and its
    // version, unless warn's is set).
    let has_warn_level = labels.contains_key(WARN_LEVEL_LABEL);
    if !has_warn_level && parsed_level[0] && p.enforce.level > p.warn.level {
        p.warn.level = p.enforce.level;
        if !labels.contains_key(WARN_VERSION_LABEL) {
            p.warn.version = p.enforce.version;
        }
    }
    (p, errs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn versions_parse_as_kube_parses_them() {
        for (s, want) in [
            ("latest", Ok(Version::Latest)),
            ("v1.0", Ok(Version::V1(0))),
            ("v1.25", Ok(Version::V1(25))),
            ("v1.999", Ok(Version::V1(999))),
        ] {
            assert_eq!(Version::parse(s), want, "{s}");
        }
        for s in [
            "",
            "v1",
            "v1.",
            "v1.01",
            "1.25",
            "v2.0",
            "v1.25.0",
            "v1.-1",
            "Latest",
            "v1.+1",
            "v1.99999999999",
        ] {
            assert!(Version::parse(s).is_err(), "{s} must not parse");
        }
        assert!(Version::V1(24).older_than(Version::V1(25)));
        assert!(Version::V1(900).older_than(Version::Latest));
        assert!(!Version::Latest.older_than(Version::V1(900)));
        assert_eq!(
            LevelVersion {
                level: Level::Restricted,
                version: Version::V1(24)
            }
            .to_string(),
            "restricted:v1.24"
        );
    }

    #[test]
    fn bad_labels_fail_safe_and_say_why() {
        let (p, errs) = policy_to_evaluate(
            Some(&labels(&[
                (ENFORCE_LEVEL_LABEL, "strict"),
                (AUDIT_LEVEL_LABEL, "nope"),
                (WARN_VERSION_LABEL, "1.25"),
                (WARN_LEVEL_LABEL, "baseline"),
            ])),
            Policy::default(),
        );
        assert_eq!(p.enforce.level, Level::Restricted);
        // An enforce label that does not parse does not raise warn.
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(p.warn.level, Level::Baseline);
        assert_eq!(p.warn.version, Version::Latest);
        let texts: Vec<String> = errs
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            texts,
            [
                "metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: \"nope\": must be one of privileged, baseline, restricted",
                "metadata.labels[pod-security.kubernetes.io/warn-version]: Invalid value: \"1.25\": must be \"latest\" or \"v1.x\"",
            ]
        );
    }

    #[test]
    fn defaults_fill_what_labels_leave_out() {
        let defaults = Policy {
            enforce: LevelVersion {
                level: Level::Baseline,
                version: Version::V1(30),
            },
            ..Policy::default()
        };
        let (p, errs) =
            policy_to_evaluate(Some(&labels(&[(ENFORCE_VERSION_LABEL, "v1.24")])), defaults);
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:v1.24");
        // Enforce came from the defaults, not a label: warn stays.
        assert_eq!(p.warn, LevelVersion::PRIVILEGED);
        assert_eq!(policy_to_evaluate(None, defaults).0, defaults);
    }

    #[test]
    fn warn_follows_an_explicit_stricter_enforce() {
        let eval =
            |pairs: &[(&str, &str)]| policy_to_evaluate(Some(&labels(pairs)), Policy::default()).0;
        assert_eq!(
            eval(&[(ENFORCE_LEVEL_LABEL, "baseline")]).warn.to_string(),
            "baseline:latest"
        );
        assert_eq!(
            eval(&[
                (ENFORCE_LEVEL_LABEL, "restricted"),
                (ENFORCE_VERSION_LABEL, "v1.25")
            ])
            .warn
            .to_string(),
            "restricted:v1.25"
        );
        assert_eq!(
            eval(&[
                (ENFORCE_LEVEL_LABEL, "restricted"),
                (WARN_VERSION_LABEL, "v1.20")
            ])
            .warn
            .to_string(),
            "restricted:v1.20"
        );
        assert_eq!(
            eval(&[
                (ENFORCE_LEVEL_LABEL, "restricted"),
                (WARN_LEVEL_LABEL, "bogus")
            ])
            .warn,
            LevelVersion::PRIVILEGED
        );
        assert_eq!(
            eval(&[
                (ENFORCE_LEVEL_LABEL, "baseline"),
                (WARN_LEVEL_LABEL, "privileged")
            ])
            .warn,
            LevelVersion::PRIVILEGED
        );
    }
}
