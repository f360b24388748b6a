//! The plugin's errors and their CNI error codes: every failure leaves the
//! plugin as `{cniVersion, code, msg, details}` on stdout with a non-zero
//! exit, and this is the one place that decides the code.

use serde_json::{Value, json};

/// Everything that can make a CNI command fail.
#[derive(Debug, thiserror::Error)]
pub enum CniError {
    /// Code 1: the `cniVersion` asked for is one we don't speak, or the command doesn't exist in it.
    #[error("{msg}")]
    IncompatibleVersion {
        /// What is incompatible.
        msg: String,
        /// The versions involved.
        details: String,
    },
    /// Code 2: a netconf field we understand but do not implement.
    #[error("unsupported field {field}: {value}")]
    UnsupportedField {
        /// The field's name.
        field: String,
        /// Its value as given.
        value: String,
    },
    /// Code 4: a `CNI_*` environment variable is missing or invalid.
    #[error("{0}")]
    InvalidEnvironment(String),
    /// Code 5: reading stdin or a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Code 6: stdin (or `prevResult`) is not the JSON we expect.
    #[error("failed to decode: {0}")]
    Decode(String),
    /// Code 7: the netconf decodes but is not valid.
    #[error("invalid network config: {0}")]
    InvalidConfig(String),
    /// Code 11: a transient condition; the runtime should retry later.
    #[error("try again later: {0}")]
    TryAgain(String),
    /// Code 50: the plugin cannot serve ADD (STATUS).
    #[error("plugin not available: {0}")]
    NotAvailable(String),
    /// Code 51: not available, and existing attachments may have limited connectivity (STATUS).
    #[error("plugin not available, existing attachments may be affected: {0}")]
    LimitedConnectivity(String),
    /// Code 100: a netlink request failed.
    #[error("{context}: {source}")]
    Netlink {
        /// What was being done.
        context: String,
        /// The kernel's answer.
        #[source]
        source: std::io::Error,
    },
    /// Code 101: no address left in a range set, or a duplicate allocation.
    #[error("{0}")]
    Allocation(String),
    /// Code 102: CHECK found the attachment differs from `prevResult`.
    #[error("{0}")]
    CheckFailed(String),
    /// Code 103: a name we must create is taken (the container interface, or the bridge by a non-bridge).
    #[error("{0}")]
    Conflict(String),
}

impl CniError {
    /// The CNI error code (0-99 well-known, 100 and up ours).
    pub fn code(&self) -> u32 {
        match self {
            Self::IncompatibleVersion { .. } => 1,
            Self::UnsupportedField { .. } => 2,
            Self::InvalidEnvironment(_) => 4,
            Self::Io { .. } => 5,
            Self::Decode(_) => 6,
            Self::InvalidConfig(_) => 7,
            Self::TryAgain(_) => 11,
            Self::NotAvailable(_) => 50,
            Self::LimitedConnectivity(_) => 51,
            Self::Netlink { .. } => 100,
            Self::Allocation(_) => 101,
            Self::CheckFailed(_) => 102,
            Self::Conflict(_) => 103,
        }
    }

    /// The error as the spec's error JSON for `cni_version`.
    pub fn to_json(&self, cni_version: &str) -> Value {
        let mut v = json!({
            "cniVersion": cni_version,
            "code": self.code(),
            "msg": self.to_string(),
        });
        if let Self::IncompatibleVersion { details, .. } = self {
            v["details"] = Value::String(details.clone());
        } else if let Self::Io { source, .. } | Self::Netlink { source, .. } = self {
            v["details"] = Value::String(format!("{source:?}"));
        }
        v
    }

    /// A netlink failure while doing `context`.
    pub(crate) fn netlink(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Netlink {
            context: context.into(),
            source,
        }
    }

    /// An I/O failure while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn error_json() {
        let e = CniError::InvalidEnvironment("required env variables [CNI_NETNS] missing".into());
        let v = e.to_json("1.0.0");
        assert_eq!(v["code"], 4);
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["msg"], "required env variables [CNI_NETNS] missing");
        assert!(v.get("details").is_none());
        let e = CniError::IncompatibleVersion {
            msg: "incompatible CNI versions".into(),
            details: "x".into(),
        };
        assert_eq!(e.to_json("0.4.0")["details"], "x");
    }
}
