//! The Jobs a CronTab creates, and how the controller reads them back:
//! the Job for a scheduled time (owned by the CronTab, named after the
//! time), and a Job's state from its conditions. Pure functions.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Container, ObjectReference, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::schedule::{JobState, JobSummary, job_name};
use super::types::CronTab;

/// Label on every Job (and its pods) naming the CronTab.
pub const CRONTAB_LABEL: &str = "stable.example.com/crontab";
/// Annotation holding the time a Job was scheduled for (RFC 3339), like
/// CronJob's `batch.kubernetes.io/cronjob-scheduled-timestamp`.
pub const SCHEDULED_AT: &str = "stable.example.com/scheduled-at";

/// The Job for the run of `ct` scheduled at `scheduled`, controlled by `ct`.
/// `None` when `ct` has no uid (never stored).
pub fn job(ct: &CronTab, scheduled: Timestamp) -> Option<Job> {
    let mut owner = ct.controller_owner_ref(&())?;
    owner.block_owner_deletion = Some(true);
    let labels = BTreeMap::from([(CRONTAB_LABEL.to_string(), ct.name_any())]);
    Some(Job {
        metadata: ObjectMeta {
            name: Some(job_name(&ct.name_any(), scheduled)),
            namespace: ct.namespace(),
            labels: Some(labels.clone()),
            annotations: Some(BTreeMap::from([(
                SCHEDULED_AT.to_string(),
                scheduled.to_string(),
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(6),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("OnFailure".into()),
                    containers: vec![Container {
                        name: "crontab".into(),
                        image: Some(ct.spec.image.clone()),
                        command: ct.spec.command.clone(),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        status: None,
    })
}

/// Where `job` stands, from its `Complete`/`Failed` conditions.
pub fn state(job: &Job) -> JobState {
    let st = job.status.as_ref();
    let has = |t: &str| {
        st.and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == t && c.status == "True"))
    };
    if has("Complete") {
        JobState::Succeeded(st.and_then(|s| s.completion_time.as_ref()).map(|t| t.0))
    } else if has("Failed") {
        JobState::Failed
    } else {
        JobState::Active
    }
}

/// `job` as the history rules see it: ordered by its scheduled time
/// (creation time for Jobs without the annotation).
pub fn summary(job: &Job) -> JobSummary {
    let scheduled = job
        .annotations()
        .get(SCHEDULED_AT)
        .and_then(|s| s.parse::<Timestamp>().ok());
    let created = job.metadata.creation_timestamp.as_ref().map(|t| t.0);
    JobSummary {
        name: job.name_any(),
        started: scheduled.or(created).unwrap_or(Timestamp::UNIX_EPOCH),
        state: state(job),
    }
}

/// The reference `status.active` holds for `job`.
pub fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::crontab::types::CronTabSpec;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn stored() -> CronTab {
        let mut ct = CronTab::new("backup", CronTabSpec::new("*/1 * * * *", "busybox"));
        ct.metadata.namespace = Some("ns1".into());
        ct.metadata.uid = Some("uid-7".into());
        ct
    }

    #[test]
    fn job_is_owned_named_and_annotated() {
        let t: Timestamp = "2026-01-01T10:01:00Z".parse().unwrap();
        let j = job(&stored(), t).unwrap();
        assert_eq!(
            j.metadata.name.as_deref(),
            Some(job_name("backup", t).as_str())
        );
        assert_eq!(j.metadata.namespace.as_deref(), Some("ns1"));
        let o = &j.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("CronTab", "uid-7", Some(true))
        );
        assert_eq!(
            j.annotations().get(SCHEDULED_AT).unwrap(),
            "2026-01-01T10:01:00Z"
        );
        let pod = j.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.containers[0].image.as_deref(), Some("busybox"));
        assert_eq!(pod.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(summary(&job(&stored(), t).unwrap()).started, t);
    }

    #[test]
    fn state_from_conditions() {
        let t: Timestamp = "2026-01-01T10:01:00Z".parse().unwrap();
        let mut j = job(&stored(), t).unwrap();
        assert_eq!(state(&j), JobState::Active);
        let cond = |t: &str| JobCondition {
            type_: t.into(),
            status: "True".into(),
            ..JobCondition::default()
        };
        j.status = Some(JobStatus {
            conditions: Some(vec![cond("Failed")]),
            ..JobStatus::default()
        });
        assert_eq!(state(&j), JobState::Failed);
        j.status = Some(JobStatus {
            conditions: Some(vec![cond("Complete")]),
            completion_time: Some(Time(t)),
            ..JobStatus::default()
        });
        assert_eq!(state(&j), JobState::Succeeded(Some(t)));
        assert_eq!(reference(&j).kind.as_deref(), Some("Job"));
    }
}
