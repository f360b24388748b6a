//! CNI specification versions: which ones we speak, and what each one
//! allows (CHECK from 0.4.0, GC and STATUS from 1.1.0, the `version` key in
//! `ips` before 1.0.0).

use std::fmt;

/// The versions this plugin accepts in `cniVersion`, oldest first.
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A CNI specification version this plugin speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    /// 0.3.0: the `interfaces`/`ips`/`routes` result.
    V0_3_0,
    /// 0.3.1.
    V0_3_1,
    /// 0.4.0: adds CHECK and `prevResult` on DEL.
    V0_4_0,
    /// 1.0.0: drops `version` from `ips`; the newest containerd 1.6 knows.
    V1_0_0,
    /// 1.1.0: adds GC and STATUS, interface `mtu`, route `mtu`/`advmss`/`priority`/`table`/`scope`.
    V1_1_0,
}

impl SpecVersion {
    /// The newest version we speak.
    pub const LATEST: SpecVersion = SpecVersion::V1_1_0;

    /// The version named by `s`, if we speak it.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "0.3.0" => Self::V0_3_0,
            "0.3.1" => Self::V0_3_1,
            "0.4.0" => Self::V0_4_0,
            "1.0.0" => Self::V1_0_0,
            "1.1.0" => Self::V1_1_0,
            _ => return None,
        })
    }

    /// The version as written in `cniVersion`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_3_0 => "0.3.0",
            Self::V0_3_1 => "0.3.1",
            Self::V0_4_0 => "0.4.0",
            Self::V1_0_0 => "1.0.0",
            Self::V1_1_0 => "1.1.0",
        }
    }

    /// Whether result `ips` carry `"version": "4"|"6"` (before 1.0.0).
    pub fn ips_have_version(self) -> bool {
        self < Self::V1_0_0
    }

    /// Whether the CHECK command exists in this version (0.4.0 and later).
    pub fn has_check(self) -> bool {
        self >= Self::V0_4_0
    }

    /// Whether GC and STATUS exist in this version (1.1.0 and later).
    pub fn has_gc_and_status(self) -> bool {
        self >= Self::V1_1_0
    }
}

impl fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        for v in SUPPORTED_VERSIONS {
            assert_eq!(SpecVersion::parse(v).map(SpecVersion::as_str), Some(*v));
        }
        for v in ["", "0.1.0", "0.2.0", "1.2.0", "1.0", " 1.0.0"] {
            assert_eq!(SpecVersion::parse(v), None, "{v:?}");
        }
        assert!(SpecVersion::V0_3_1.ips_have_version());
        assert!(!SpecVersion::V1_0_0.ips_have_version());
        assert!(!SpecVersion::V0_3_1.has_check());
        assert!(SpecVersion::V0_4_0.has_check());
        assert!(!SpecVersion::V1_0_0.has_gc_and_status());
        assert!(SpecVersion::LATEST.has_gc_and_status());
    }
}
