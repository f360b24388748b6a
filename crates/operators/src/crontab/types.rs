//! The `CronTab` custom resource (`crontabs.stable.example.com`, version
//! `v1`, short name `ct`): the seed book's CRD example, grown into a small
//! CronJob. `spec.cronSpec` is checked by a `pattern` in the CRD schema, so
//! the API server itself refuses `61 * * * *` and names the field.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Successful Jobs kept when `spec.successfulJobsHistoryLimit` is unset.
pub const DEFAULT_SUCCESSFUL_HISTORY: i32 = 3;
/// Failed Jobs kept when `spec.failedJobsHistoryLimit` is unset.
pub const DEFAULT_FAILED_HISTORY: i32 = 1;

/// Desired state of a CronTab.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "stable.example.com",
    version = "v1",
    kind = "CronTab",
    plural = "crontabs",
    singular = "crontab",
    shortname = "ct",
    namespaced,
    status = "CronTabStatus",
    derive = "PartialEq",
    doc = "CronTab runs a Job from spec.image at the times spec.cronSpec names.",
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.cronSpec"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    // Two "date" columns in the structured form trip clippy's duplicate
    // attribute check; the JSON form says the same.
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CronTabSpec {
    /// When to run, in standard 5-field cron syntax (minute hour
    /// day-of-month month day-of-week, UTC) or a macro such as `@hourly`.
    #[schemars(pattern(cron_spec_pattern()))]
    pub cron_spec: String,
    /// Container image each Job runs.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Command for the Job's container (the image's entrypoint when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// No new Jobs while true (running ones are left alone).
    #[serde(default)]
    pub suspend: bool,
    /// Finished successful Jobs to keep (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub successful_jobs_history_limit: Option<i32>,
    /// Finished failed Jobs to keep (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub failed_jobs_history_limit: Option<i32>,
    /// What to do when a run is due while the previous one still runs.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// A run missed by more than this many seconds is skipped (unset: no
    /// deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub starting_deadline_seconds: Option<i64>,
}

/// CronJob's concurrency policies.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum ConcurrencyPolicy {
    /// Runs may overlap.
    #[default]
    Allow,
    /// A due run is skipped while one is active.
    Forbid,
    /// A due run replaces (deletes) the active ones.
    Replace,
}

/// Observed state of a CronTab.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronTabStatus {
    /// The scheduled time of the last Job created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the last successful Job completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// Jobs that are still running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub active: Vec<ObjectReference>,
}

impl CronTabSpec {
    /// A spec running `image` on `cron_spec` with every option at its default.
    pub fn new(cron_spec: &str, image: &str) -> CronTabSpec {
        CronTabSpec {
            cron_spec: cron_spec.to_string(),
            image: image.to_string(),
            command: None,
            suspend: false,
            successful_jobs_history_limit: None,
            failed_jobs_history_limit: None,
            concurrency_policy: ConcurrencyPolicy::Allow,
            starting_deadline_seconds: None,
        }
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One cron field: a comma list of `*`, a value or a range, each with an
/// optional `/step`.
fn field(value: &str, star: &str) -> String {
    let atom = format!("({star}|{value}(-{value})?)(/[1-9][0-9]*)?");
    format!("{atom}(,{atom})*")
}

fn names(list: &[&str]) -> String {
    list.iter()
        .flat_map(|n| [n.to_string(), n.to_uppercase()])
        .collect::<Vec<_>>()
        .join("|")
}

/// The regular expression the CRD schema holds for `spec.cronSpec`: five
/// fields with the ranges of standard cron (minute 0-59, hour 0-23, day
/// 1-31, month 1-12 or jan-dec, weekday 0-7 or sun-sat), or a macro.
pub fn cron_spec_pattern() -> String {
    let minute = field("([0-5]?[0-9])", "\\*");
    let hour = field("([01]?[0-9]|2[0-3])", "\\*");
    let dom = field("(0?[1-9]|[12][0-9]|3[01])", "\\*|\\?");
    let month = field(&format!("(0?[1-9]|1[0-2]|{})", names(&MONTHS)), "\\*");
    let dow = field(&format!("([0-7]|{})", names(&DAYS)), "\\*|\\?");
    format!(
        "^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|{minute}\\s+{hour}\\s+{dom}\\s+{month}\\s+{dow})$"
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pattern_accepts_standard_and_refuses_out_of_range() {
        let re = regex::Regex::new(&cron_spec_pattern()).unwrap();
        for ok in [
            "*/1 * * * *",
            "0 0 * * *",
            "5,10,15-20/5 */2 1-15 jan-mar mon-fri",
            "59 23 31 12 7",
            "0 12 ? * SUN",
            "@hourly",
            "30  6 * *  1",
        ] {
            assert!(re.is_match(ok), "{ok} should match");
        }
        for bad in [
            "61 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * 32 * *",
            "* * * 13 *",
            "* * * * 8",
            "* * * *",
            "* * * * * *",
            "*/0 * * * *",
            "@every 5m",
            "",
        ] {
            assert!(!re.is_match(bad), "{bad:?} should not match");
        }
    }
}
