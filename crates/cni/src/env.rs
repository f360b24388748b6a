//! The `CNI_*` environment: which command, which container, which netns
//! and interface. Parsed from any lookup function so tests and a
//! multi-call front can supply it without touching the process environment.

use crate::error::CniError;
use crate::netconf::valid_interface_name;

/// A CNI command (`CNI_COMMAND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach a container.
    Add,
    /// Detach a container (idempotent, best-effort).
    Del,
    /// Verify an attachment against `prevResult`.
    Check,
    /// Report the supported spec versions.
    Version,
    /// Release resources of attachments not in `cni.dev/valid-attachments`.
    Gc,
    /// Report whether ADD can succeed (codes 50/51 when not).
    Status,
}

impl Command {
    /// The command named `s` (as in `CNI_COMMAND`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Self::Add,
            "DEL" => Self::Del,
            "CHECK" => Self::Check,
            "VERSION" => Self::Version,
            "GC" => Self::Gc,
            "STATUS" => Self::Status,
            _ => return None,
        })
    }
}

/// The invocation's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID` (empty for VERSION, GC, STATUS).
    pub container_id: String,
    /// `CNI_NETNS` (may be empty for DEL).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS` as key/value pairs.
    pub args: Vec<(String, String)>,
    /// `CNI_PATH`.
    pub path: String,
}

/// Reads the environment through `var` (e.g. `|k| std::env::var(k).ok()`); code 4 on anything missing or invalid.
pub fn parse_env(var: impl Fn(&str) -> Option<String>) -> Result<CniEnv, CniError> {
    let command_s = var("CNI_COMMAND").unwrap_or_default();
    if command_s.is_empty() {
        return Err(CniError::InvalidEnvironment(
            "required env variables [CNI_COMMAND] missing".into(),
        ));
    }
    let command = Command::parse(&command_s)
        .ok_or_else(|| CniError::InvalidEnvironment(format!("unknown CNI_COMMAND: {command_s}")))?;
    // Which variables each command requires, as libcni's skel has it.
    let required: &[&str] = match command {
        Command::Add | Command::Check => {
            &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
        }
        Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
        Command::Version | Command::Gc | Command::Status => &[],
    };
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|k| var(k).is_none_or(|v| v.is_empty()))
        .collect();
    if !missing.is_empty() {
        return Err(CniError::InvalidEnvironment(format!(
            "required env variables [{}] missing",
            missing.join(",")
        )));
    }
    let env = CniEnv {
        command,
        container_id: var("CNI_CONTAINERID").unwrap_or_default(),
        netns: var("CNI_NETNS").unwrap_or_default(),
        ifname: var("CNI_IFNAME").unwrap_or_default(),
        args: parse_cni_args(&var("CNI_ARGS").unwrap_or_default())?,
        path: var("CNI_PATH").unwrap_or_default(),
    };
    if required.contains(&"CNI_CONTAINERID") && !valid_container_id(&env.container_id) {
        return Err(CniError::InvalidEnvironment(format!(
            "invalid characters in CNI_CONTAINERID {:?}",
            env.container_id
        )));
    }
    if required.contains(&"CNI_IFNAME") && !valid_interface_name(&env.ifname) {
        return Err(CniError::InvalidEnvironment(format!(
            "invalid CNI_IFNAME {:?}",
            env.ifname
        )));
    }
    Ok(env)
}

/// Parses `CNI_ARGS` (`K=V;K=V`); code 4 on an entry without `=`.
pub fn parse_cni_args(s: &str) -> Result<Vec<(String, String)>, CniError> {
    s.split(';')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    CniError::InvalidEnvironment(format!("invalid CNI_ARGS pair {kv:?}"))
                })
        })
        .collect()
}

fn valid_container_id(id: &str) -> bool {
    crate::netconf::valid_network_name(id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<CniEnv, CniError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse_env(|k| m.get(k).cloned())
    }

    #[test]
    fn required_per_command() {
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap_err();
        assert_eq!(e.code(), 4);
        assert_eq!(
            e.to_string(),
            "required env variables [CNI_NETNS,CNI_PATH] missing"
        );
        let ok = env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/x"),
        ])
        .unwrap();
        assert_eq!(ok.command, Command::Del);
        assert_eq!(
            env(&[("CNI_COMMAND", "VERSION")]).unwrap().command,
            Command::Version
        );
        assert_eq!(env(&[("CNI_COMMAND", "NOPE")]).unwrap_err().code(), 4);
        assert_eq!(env(&[]).unwrap_err().code(), 4);
        let bad_id = [
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "../x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/x"),
        ];
        assert_eq!(env(&bad_id).unwrap_err().code(), 4);
    }

    #[test]
    fn cni_args() {
        assert_eq!(
            parse_cni_args("IgnoreUnknown=1;K8S_POD_NAME=a=b").unwrap(),
            [
                ("IgnoreUnknown".to_string(), "1".to_string()),
                ("K8S_POD_NAME".to_string(), "a=b".to_string())
            ]
        );
        assert!(parse_cni_args("").unwrap().is_empty());
        assert_eq!(parse_cni_args("novalue").unwrap_err().code(), 4);
    }
}
