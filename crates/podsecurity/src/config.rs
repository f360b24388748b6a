//! The PodSecurity plugin's configuration, `PodSecurityConfiguration`
//! (`pod-security.admission.config.k8s.io/v1`, also `v1beta1`), read on
//! its own or from the `PodSecurity` entry of an `AdmissionConfiguration`
//! (`apiserver.config.k8s.io/v1`, kube-apiserver's
//! `--admission-control-config-file`), defaulted and validated as
//! kube's `admission/api` packages do.

use std::collections::BTreeSet;

use kubeforge_apimachinery::names::{Cause, is_dns1123_label, is_dns1123_subdomain};
use serde::Deserialize;
use serde_json::Value;

use crate::api::{Level, LevelVersion, Policy, Version};

/// What the file's group and kind must be.
const CONFIG_GROUP: &str = "pod-security.admission.config.k8s.io";
const CONFIG_KIND: &str = "PodSecurityConfiguration";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not YAML or JSON, or a field of the wrong type.
    #[error("PodSecurity configuration does not parse: {0}")]
    Parse(String),
    /// Not a configuration this reads.
    #[error("{0}")]
    Kind(String),
    /// Parsed, but a field is invalid (kube's field errors, joined).
    #[error("invalid PodSecurity configuration: {0}")]
    Invalid(String),
}

/// `defaults` as written (kube's v1 type): every field defaults to
/// `privileged` / `latest`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Defaults {
    enforce: Option<String>,
    #[serde(rename = "enforce-version")]
    enforce_version: Option<String>,
    audit: Option<String>,
    #[serde(rename = "audit-version")]
    audit_version: Option<String>,
    warn: Option<String>,
    #[serde(rename = "warn-version")]
    warn_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Exemptions {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    runtime_classes: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Raw {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    exemptions: Exemptions,
}

/// A validated PodSecurity configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// The policy of a namespace without labels (and what its labels do
    /// not say).
    pub defaults: Policy,
    /// Users whose requests are never evaluated.
    pub exempt_users: BTreeSet<String>,
    /// Namespaces never evaluated.
    pub exempt_namespaces: BTreeSet<String>,
    /// RuntimeClasses whose pods are never evaluated.
    pub exempt_runtime_classes: BTreeSet<String>,
}

impl Config {
    /// Read a configuration file: a `PodSecurityConfiguration`, or an
    /// `AdmissionConfiguration` whose `PodSecurity` plugin entry holds one
    /// inline (`configuration:`). An `AdmissionConfiguration` without that
    /// entry gives the defaults.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let v: Value =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if v.get("kind").and_then(Value::as_str) == Some("AdmissionConfiguration") {
            let plugins = v.get("plugins").and_then(Value::as_array);
            let entry = plugins
                .into_iter()
                .flatten()
                .find(|p| p.get("name").and_then(Value::as_str) == Some("PodSecurity"));
            return match entry {
                None => Ok(Config::default()),
                Some(p) => match p.get("configuration") {
                    Some(c) => Config::from_value(c.clone()),
                    None => Err(ConfigError::Kind(
                        "the PodSecurity plugin entry has no inline `configuration` (a `path` to another file is not read)".into(),
                    )),
                },
            };
        }
        Config::from_value(v)
    }

    /// A configuration from its decoded form.
    pub fn from_value(v: Value) -> Result<Config, ConfigError> {
        let raw: Raw = serde_json::from_value(v).map_err(|e| ConfigError::Parse(e.to_string()))?;
        let group = raw
            .api_version
            .as_deref()
            .and_then(|a| a.split_once('/'))
            .map(|(g, _)| g);
        if group != Some(CONFIG_GROUP) || raw.kind.as_deref() != Some(CONFIG_KIND) {
            return Err(ConfigError::Kind(format!(
                "expected kind {CONFIG_KIND} of apiVersion {CONFIG_GROUP}/v1, got kind {:?} of apiVersion {:?}",
                raw.kind.unwrap_or_default(),
                raw.api_version.unwrap_or_default()
            )));
        }
        let mut errs = Vec::new();
        let d = &raw.defaults;
        let level = |field: &str, v: &Option<String>, errs: &mut Vec<Cause>| {
            let v = v.as_deref().unwrap_or("privileged");
            Level::parse(v).unwrap_or_else(|why| {
                errs.push(Cause::invalid(field, v, why));
                Level::Privileged
            })
        };
        let version = |field: &str, v: &Option<String>, errs: &mut Vec<Cause>| {
            let v = v.as_deref().unwrap_or("latest");
            Version::parse(v).unwrap_or_else(|why| {
                errs.push(Cause::invalid(field, v, why));
                Version::Latest
            })
        };
        // kube's order: enforce, warn, audit.
        let enforce = LevelVersion {
            level: level("defaults.enforce", &d.enforce, &mut errs),
            version: version("defaults.enforce-version", &d.enforce_version, &mut errs),
        };
        let warn = LevelVersion {
            level: level("defaults.warn", &d.warn, &mut errs),
            version: version("defaults.warn-version", &d.warn_version, &mut errs),
        };
        let audit = LevelVersion {
            level: level("defaults.audit", &d.audit, &mut errs),
            version: version("defaults.audit-version", &d.audit_version, &mut errs),
        };
        let e = &raw.exemptions;
        let exempt_namespaces = unique(
            "exemptions.namespaces",
            &e.namespaces,
            is_dns1123_label,
            &mut errs,
        );
        let exempt_runtime_classes = unique(
            "exemptions.runtimeClasses",
            &e.runtime_classes,
            is_dns1123_subdomain,
            &mut errs,
        );
        let exempt_users = unique(
            "exemptions.usernames",
            &e.usernames,
            |u| {
                if u.is_empty() {
                    vec![String::new()]
                } else {
                    Vec::new()
                }
            },
            &mut errs,
        );
        if !errs.is_empty() {
            let texts: Vec<String> = errs
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect();
            return Err(ConfigError::Invalid(texts.join(", ")));
        }
        Ok(Config {
            defaults: Policy {
                enforce,
                audit,
                warn,
            },
            exempt_users,
            exempt_namespaces,
            exempt_runtime_classes,
        })
    }
}

/// The values of a list, each valid (per `check`) and not repeated.
fn unique(
    field: &str,
    values: &[String],
    check: impl Fn(&str) -> Vec<String>,
    errs: &mut Vec<Cause>,
) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for (i, v) in values.iter().enumerate() {
        let path = format!("{field}[{i}]");
        let problems = check(v);
        if v.is_empty() {
            errs.push(Cause::required(&path, ""));
        } else if !problems.is_empty() {
            errs.push(Cause::invalid(&path, v, &problems.join(", ")));
        } else if !set.insert(v.clone()) {
            errs.push(Cause::duplicate(&path, v));
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admission_configuration_entry_is_read_and_defaulted() {
        let c = Config::parse(
            r#"
apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      warn: restricted
      warn-version: v1.28
    exemptions:
      usernames: [system:serviceaccount:kube-system:replicaset-controller]
      namespaces: [kube-system]
      runtimeClasses: [kata]
"#,
        )
        .expect("valid");
        assert_eq!(c.defaults.enforce.to_string(), "baseline:latest");
        assert_eq!(c.defaults.warn.to_string(), "restricted:v1.28");
        assert_eq!(c.defaults.audit.to_string(), "privileged:latest");
        assert!(c.exempt_namespaces.contains("kube-system"));
        assert!(c.exempt_runtime_classes.contains("kata"));
        assert_eq!(c.exempt_users.len(), 1);
    }

    #[test]
    fn invalid_fields_are_named() {
        let err = Config::parse(
            r#"{"apiVersion":"pod-security.admission.config.k8s.io/v1","kind":"PodSecurityConfiguration",
                "defaults":{"enforce":"strict","audit-version":"1.2"},
                "exemptions":{"namespaces":["a","a","Bad_NS"],"usernames":[""]}}"#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for want in [
            "defaults.enforce: Invalid value: \"strict\": must be one of privileged, baseline, restricted",
            "defaults.audit-version: Invalid value: \"1.2\": must be \"latest\" or \"v1.x\"",
            "exemptions.namespaces[1]: Duplicate value: \"a\"",
            "exemptions.namespaces[2]: Invalid value: \"Bad_NS\"",
            "exemptions.usernames[0]: Required value",
        ] {
            assert!(text.contains(want), "{want:?} not in {text}");
        }
        assert!(matches!(
            Config::parse("kind: Pod\napiVersion: v1\n"),
            Err(ConfigError::Kind(_))
        ));
        assert!(matches!(
            Config::parse(
                "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefault: {}\n"
            ),
            Err(ConfigError::Parse(_))
        ));
    }
}
