//! The scheduler's configuration file in the `kubescheduler.config.k8s.io/v1`
//! `KubeSchedulerConfiguration` shape, and how a profile's plugin lists are
//! resolved from kube-scheduler's defaults plus the file (MultiPoint
//! expansion, `disabled: ["*"]`, weights).
//!
//! ```yaml
//! apiVersion: kubescheduler.config.k8s.io/v1
//! kind: KubeSchedulerConfiguration
//! profiles:
//! - schedulerName: default-scheduler
//!   plugins:
//!     score:
//!       disabled: [{name: NodeResourcesBalancedAllocation}]
//!       enabled: [{name: NodeResourcesFit, weight: 5}]
//!   pluginConfig:
//!   - name: NodeResourcesFit
//!     args: {scoringStrategy: {type: MostAllocated}}
//! ```

use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;

/// A configuration that cannot be used; the message names the field.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not YAML/JSON of the right shape.
    #[error("decoding the scheduler configuration: {0}")]
    Decode(String),
    /// A field with an invalid value.
    #[error("{field}: Invalid value: {message}")]
    Invalid {
        /// The path to the field (`profiles[0].plugins.score.enabled[1].weight`).
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// `KubeSchedulerConfiguration` (the fields kubeforge uses; unknown fields are
/// rejected, as kube-scheduler's strict decoding does).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulerConfiguration {
    /// Must be `kubescheduler.config.k8s.io/v1` when given.
    pub api_version: Option<String>,
    /// Must be `KubeSchedulerConfiguration` when given.
    pub kind: Option<String>,
    /// Nodes filtered/scored concurrently (default 16).
    pub parallelism: Option<i32>,
    /// Percentage of nodes to find feasible before scoring (0: adaptive).
    pub percentage_of_nodes_to_score: Option<i32>,
    /// First backoff (default 1 s).
    pub pod_initial_backoff_seconds: Option<i64>,
    /// Backoff cap (default 10 s).
    pub pod_max_backoff_seconds: Option<i64>,
    /// Profiles (default: one `default-scheduler` profile).
    #[serde(default)]
    pub profiles: Vec<Profile>,
    /// HTTP extenders (global).
    #[serde(default)]
    pub extenders: Vec<ExtenderConfig>,
    /// Accepted for compatibility and ignored (kubeforge's leader election
    /// and client settings come from the command line).
    pub leader_election: Option<serde_json::Value>,
    /// Accepted and ignored.
    pub client_connection: Option<serde_json::Value>,
    /// Accepted and ignored.
    pub delay_cache_until_active: Option<bool>,
}

/// One scheduling profile.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// The `spec.schedulerName` this profile serves.
    pub scheduler_name: Option<String>,
    /// Overrides the global percentage.
    pub percentage_of_nodes_to_score: Option<i32>,
    /// Plugin sets per extension point.
    #[serde(default)]
    pub plugins: Plugins,
    /// Plugin args.
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

/// Plugin sets per extension point.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    /// PreEnqueue.
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    /// QueueSort.
    #[serde(default)]
    pub queue_sort: PluginSet,
    /// PreFilter.
    #[serde(default)]
    pub pre_filter: PluginSet,
    /// Filter.
    #[serde(default)]
    pub filter: PluginSet,
    /// PostFilter.
    #[serde(default)]
    pub post_filter: PluginSet,
    /// PreScore.
    #[serde(default)]
    pub pre_score: PluginSet,
    /// Score.
    #[serde(default)]
    pub score: PluginSet,
    /// Reserve.
    #[serde(default)]
    pub reserve: PluginSet,
    /// Permit.
    #[serde(default)]
    pub permit: PluginSet,
    /// PreBind.
    #[serde(default)]
    pub pre_bind: PluginSet,
    /// Bind.
    #[serde(default)]
    pub bind: PluginSet,
    /// PostBind.
    #[serde(default)]
    pub post_bind: PluginSet,
    /// Every point the plugin implements.
    #[serde(default)]
    pub multi_point: PluginSet,
}

/// Enabled and disabled plugins of one point.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    /// Added after the defaults (or replacing a default of the same name).
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    /// Removed from the defaults; `*` removes all of them.
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

/// A plugin by name, with a score weight.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    /// The registered name.
    pub name: String,
    /// Score weight (1–100; unset or 0 means the default).
    pub weight: Option<i32>,
}

/// Args for one plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    /// Plugin name.
    pub name: String,
    /// Its args (shape per plugin).
    #[serde(default)]
    pub args: serde_json::Value,
}

/// An HTTP extender, as kube-scheduler's `Extender` config.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExtenderConfig {
    /// `http://host:port/prefix`.
    pub url_prefix: String,
    /// Verb for filter calls (empty: not called).
    #[serde(default)]
    pub filter_verb: String,
    /// Verb for preempt calls.
    #[serde(default)]
    pub preempt_verb: String,
    /// Verb for prioritize calls.
    #[serde(default)]
    pub prioritize_verb: String,
    /// Multiplier of the extender's 0–10 scores.
    #[serde(default)]
    pub weight: i64,
    /// Verb for bind calls (the extender binds instead of the default binder).
    #[serde(default)]
    pub bind_verb: String,
    /// Use HTTPS (not supported: kubeforge rejects it at startup).
    #[serde(default, rename = "enableHTTPS")]
    pub enable_https: bool,
    /// TLS settings (accepted, unused without HTTPS).
    pub tls_config: Option<serde_json::Value>,
    /// Call timeout ("5s", "500ms"; default 5 s).
    pub http_timeout: Option<String>,
    /// Send node names instead of whole nodes.
    #[serde(default)]
    pub node_cache_capable: bool,
    /// Only pods requesting one of these resources go to the extender.
    #[serde(default)]
    pub managed_resources: Vec<ManagedResource>,
    /// Failures are skipped instead of failing the pod.
    #[serde(default)]
    pub ignorable: bool,
}

/// A resource an extender manages.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManagedResource {
    /// Resource name.
    pub name: String,
    /// The in-tree NodeResourcesFit ignores it.
    #[serde(default)]
    pub ignored_by_scheduler: bool,
}

/// kube-scheduler's default MultiPoint plugins with their weights
/// (`pkg/scheduler/apis/config/v1/default_plugins.go`, minus the volume
/// plugins kubeforge does not have).
pub const DEFAULT_PLUGINS: &[(&str, i32)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// The default profile name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

impl SchedulerConfiguration {
    /// Parse YAML or JSON text.
    pub fn from_yaml(text: &str) -> Result<SchedulerConfiguration, ConfigError> {
        let cfg: SchedulerConfiguration =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Decode(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read and parse a file.
    pub fn from_file(path: &std::path::Path) -> Result<SchedulerConfiguration, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            source: e,
        })?;
        SchedulerConfiguration::from_yaml(&text)
    }

    /// Checks that do not need the registry.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(v) = &self.api_version
            && v != "kubescheduler.config.k8s.io/v1"
        {
            return Err(invalid(
                "apiVersion",
                format!("{v:?}: only kubescheduler.config.k8s.io/v1 is supported"),
            ));
        }
        if let Some(k) = &self.kind
            && k != "KubeSchedulerConfiguration"
        {
            return Err(invalid(
                "kind",
                format!("{k:?}: must be KubeSchedulerConfiguration"),
            ));
        }
        if let Some(p) = self.parallelism
            && p <= 0
        {
            return Err(invalid(
                "parallelism",
                format!("{p}: should be an integer value greater than zero"),
            ));
        }
        if let Some(p) = self.percentage_of_nodes_to_score
            && !(0..=100).contains(&p)
        {
            return Err(invalid(
                "percentageOfNodesToScore",
                format!("{p}: not in valid range [0-100]"),
            ));
        }
        let ib = self.pod_initial_backoff_seconds.unwrap_or(1);
        if ib <= 0 {
            return Err(invalid(
                "podInitialBackoffSeconds",
                format!("{ib}: must be greater than 0"),
            ));
        }
        let mb = self.pod_max_backoff_seconds.unwrap_or(10);
        if mb < ib {
            return Err(invalid(
                "podMaxBackoffSeconds",
                format!("{mb}: must be greater than or equal to PodInitialBackoffSeconds"),
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, p) in self.profiles.iter().enumerate() {
            let name = p
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if name.is_empty() {
                return Err(invalid(
                    format!("profiles[{i}].schedulerName"),
                    "\"\": Required value",
                ));
            }
            if !names.insert(name.clone()) {
                return Err(invalid(
                    format!("profiles[{i}].schedulerName"),
                    format!("{name:?}: Duplicate value"),
                ));
            }
            if let Some(pct) = p.percentage_of_nodes_to_score
                && !(0..=100).contains(&pct)
            {
                return Err(invalid(
                    format!("profiles[{i}].percentageOfNodesToScore"),
                    format!("{pct}: not in valid range [0-100]"),
                ));
            }
            for (point, set) in p.plugins.points() {
                for (j, r) in set.enabled.iter().enumerate() {
                    if let Some(w) = r.weight
                        && !(0..=100).contains(&w)
                    {
                        return Err(invalid(
                            format!("profiles[{i}].plugins.{point}.enabled[{j}].weight"),
                            format!("{w}: must be in the range [0, 100] (0 means the default)"),
                        ));
                    }
                    if r.name.is_empty() || r.name == "*" {
                        return Err(invalid(
                            format!("profiles[{i}].plugins.{point}.enabled[{j}].name"),
                            format!("{:?}: must name a plugin", r.name),
                        ));
                    }
                }
            }
            let mut seen = std::collections::HashSet::new();
            for (j, pc) in p.plugin_config.iter().enumerate() {
                if !seen.insert(pc.name.clone()) {
                    return Err(invalid(
                        format!("profiles[{i}].pluginConfig[{j}].name"),
                        format!("{:?}: Duplicate value", pc.name),
                    ));
                }
            }
        }
        for (i, e) in self.extenders.iter().enumerate() {
            if e.url_prefix.is_empty() {
                return Err(invalid(
                    format!("extenders[{i}].urlPrefix"),
                    "\"\": Required value",
                ));
            }
            if e.enable_https {
                return Err(invalid(
                    format!("extenders[{i}].enableHTTPS"),
                    "true: HTTPS extenders are not supported by kubeforge yet",
                ));
            }
            if !e.prioritize_verb.is_empty() && e.weight <= 0 {
                return Err(invalid(
                    format!("extenders[{i}].weight"),
                    format!("{}: must have a positive weight applied to it", e.weight),
                ));
            }
            if let Some(t) = &e.http_timeout {
                parse_duration(t).map_err(|m| invalid(format!("extenders[{i}].httpTimeout"), m))?;
            }
        }
        if self
            .extenders
            .iter()
            .filter(|e| !e.bind_verb.is_empty())
            .count()
            > 1
        {
            return Err(invalid(
                "extenders",
                "found 2 extenders implementing bind: only one extender can implement bind",
            ));
        }
        Ok(())
    }

    /// The profiles to run (one `default-scheduler` when none are given).
    pub fn effective_profiles(&self) -> Vec<Profile> {
        if self.profiles.is_empty() {
            vec![Profile::default()]
        } else {
            self.profiles.clone()
        }
    }

    /// Backoff bounds.
    pub fn backoff(&self) -> (Duration, Duration) {
        (
            Duration::from_secs(self.pod_initial_backoff_seconds.unwrap_or(1).max(1) as u64),
            Duration::from_secs(self.pod_max_backoff_seconds.unwrap_or(10).max(1) as u64),
        )
    }
}

impl Plugins {
    /// Every point's set with its config name.
    pub fn points(&self) -> [(&'static str, &PluginSet); 13] {
        [
            ("preEnqueue", &self.pre_enqueue),
            ("queueSort", &self.queue_sort),
            ("preFilter", &self.pre_filter),
            ("filter", &self.filter),
            ("postFilter", &self.post_filter),
            ("preScore", &self.pre_score),
            ("score", &self.score),
            ("reserve", &self.reserve),
            ("permit", &self.permit),
            ("preBind", &self.pre_bind),
            ("bind", &self.bind),
            ("postBind", &self.post_bind),
            ("multiPoint", &self.multi_point),
        ]
    }
}

impl PluginSet {
    fn disables(&self, name: &str) -> bool {
        self.disabled
            .iter()
            .any(|d| d.name == "*" || d.name == name)
    }
}

/// One extension point's resolved plugin list: (name, weight, field that
/// enabled it).
pub type Resolved = Vec<(String, i64, String)>;

/// Resolve a point's list: the point's own `enabled` entries first, then
/// MultiPoint plugins (defaults unless disabled, then the profile's), skipping
/// names disabled at this point. `implements` says whether a plugin name
/// takes part in this point.
pub(crate) fn resolve_point(
    profile_index: usize,
    plugins: &Plugins,
    point: &str,
    set: &PluginSet,
    implements: &dyn Fn(&str) -> bool,
) -> Resolved {
    let mut out: Resolved = Vec::new();
    for (j, r) in set.enabled.iter().enumerate() {
        if out.iter().any(|(n, _, _)| n == &r.name) {
            continue;
        }
        let weight = r
            .weight
            .filter(|w| *w > 0)
            .or_else(|| {
                plugins
                    .multi_point
                    .enabled
                    .iter()
                    .find(|m| m.name == r.name)
                    .and_then(|m| m.weight)
                    .filter(|w| *w > 0)
            })
            .or_else(|| {
                DEFAULT_PLUGINS
                    .iter()
                    .find(|d| d.0 == r.name)
                    .map(|d| d.1)
                    .filter(|w| *w > 0)
            })
            .unwrap_or(1);
        out.push((
            r.name.clone(),
            i64::from(weight),
            format!("profiles[{profile_index}].plugins.{point}.enabled[{j}]"),
        ));
    }
    let mut multi: Vec<(String, i32, String)> = Vec::new();
    for (name, w) in DEFAULT_PLUGINS {
        if !plugins.multi_point.disables(name) {
            multi.push((name.to_string(), *w, "default plugins".into()));
        }
    }
    for (j, r) in plugins.multi_point.enabled.iter().enumerate() {
        let field = format!("profiles[{profile_index}].plugins.multiPoint.enabled[{j}]");
        match multi.iter_mut().find(|m| m.0 == r.name) {
            Some(m) => {
                if let Some(w) = r.weight.filter(|w| *w > 0) {
                    m.1 = w;
                }
                m.2 = field;
            }
            None => multi.push((r.name.clone(), r.weight.unwrap_or(0), field)),
        }
    }
    for (name, w, field) in multi {
        if set.disables(&name) || out.iter().any(|(n, _, _)| *n == name) {
            continue;
        }
        // Explicitly listed plugins must exist; the framework checks that.
        // Defaults/multiPoint only land where the plugin implements the point.
        if implements(&name) {
            out.push((name, i64::from(w.max(1)), field));
        }
    }
    out
}

/// Parse a Go duration string as `metav1.Duration` writes it ("5s", "1m30s",
/// "250ms").
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: not a duration (examples: \"5s\", \"250ms\", \"1m30s\")");
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let n: f64 = rest[..n_end].parse().map_err(|_| bad())?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += n * unit;
        rest = &rest[u_end..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration("5 parsecs").is_err());
    }

    #[test]
    fn bad_weight_names_the_field() {
        let err = SchedulerConfiguration::from_yaml(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeResourcesFit\n        weight: 500\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "profiles[0].plugins.score.enabled[0].weight: Invalid value: 500: must be in the range [0, 100] (0 means the default)"
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = SchedulerConfiguration::from_yaml("profiles:\n- schedulerNam: x\n").unwrap_err();
        assert!(err.to_string().contains("schedulerNam"), "{err}");
    }

    #[test]
    fn multipoint_and_star() {
        let cfg = SchedulerConfiguration::from_yaml(
            "profiles:\n- plugins:\n    score:\n      disabled: [{name: '*'}]\n      enabled: [{name: ImageLocality, weight: 7}]\n",
        )
        .unwrap();
        let p = &cfg.profiles[0];
        let scores = resolve_point(0, &p.plugins, "score", &p.plugins.score, &|n| {
            ["ImageLocality", "NodeResourcesFit", "TaintToleration"].contains(&n)
        });
        assert_eq!(scores.len(), 1);
        assert_eq!((scores[0].0.as_str(), scores[0].1), ("ImageLocality", 7));
        let filters = resolve_point(0, &p.plugins, "filter", &p.plugins.filter, &|n| {
            ["NodeResourcesFit", "TaintToleration"].contains(&n)
        });
        assert_eq!(
            filters.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
            ["TaintToleration", "NodeResourcesFit"]
        );
    }
}
