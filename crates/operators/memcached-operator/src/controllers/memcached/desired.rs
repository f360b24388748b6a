//! Pure functions from a `Memcached` to what should exist: the Deployment
//! the operator owns, and the conditions its status reports. No client, no
//! clock: the reconciler passes both in, so every rule here is unit-tested.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec, PodTemplateSpec,
    ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};

use crate::api::cache::v1alpha1::Memcached;

/// Environment variable naming the memcached image (as the operator-sdk
/// tutorial's `MEMCACHED_IMAGE`).
pub const IMAGE_ENV: &str = "MEMCACHED_IMAGE";
/// Image used when `MEMCACHED_IMAGE` is unset or empty.
pub const DEFAULT_IMAGE: &str = "memcached:1.6.26-alpine3.19";
/// User id memcached runs as (the alpine image's `memcache` user).
pub const RUN_AS_USER: i64 = 1001;

/// Condition type: the Deployment has `spec.size` available replicas.
pub const AVAILABLE: &str = "Available";
/// Condition type: the Deployment is being created or resized.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: something stops the operator from reaching the spec
/// (also set while the finalizer cleans up).
pub const DEGRADED: &str = "Degraded";

/// The image from `MEMCACHED_IMAGE`, or [`DEFAULT_IMAGE`].
pub fn image_from_env() -> String {
    match std::env::var(IMAGE_ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => DEFAULT_IMAGE.to_string(),
    }
}

/// Labels on the Deployment, its selector and its pods.
pub fn labels(m: &Memcached) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "memcached".to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), m.name_any()),
        (
            "app.kubernetes.io/managed-by".to_string(),
            "kubeforge-memcached-operator".to_string(),
        ),
    ])
}

/// The label selector (as a `key=value,...` string) that finds the pods of `m`.
pub fn pod_selector(m: &Memcached) -> String {
    labels(m)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The Deployment for `m`: same name and namespace, `spec.size` replicas,
/// controlled by `m` (so the garbage collector removes it with `m`), a
/// non-root, no-privilege pod running `image`.
///
/// Returns `None` when `m` has no uid yet (it was never stored), since an
/// owner reference needs one.
pub fn deployment(m: &Memcached, image: &str) -> Option<Deployment> {
    let mut owner = m.controller_owner_ref(&())?;
    // As controller-runtime's SetControllerReference: foreground deletion of
    // the Memcached waits for the Deployment.
    owner.block_owner_deletion = Some(true);
    let labels = labels(m);
    let port = m.spec.container_port;
    let container = Container {
        name: "memcached".into(),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            "memcached".into(),
            format!("--port={port}"),
            "--memory-limit=64".into(),
            "-o".into(),
            "modern".into(),
            "-v".into(),
        ]),
        ports: Some(vec![ContainerPort {
            container_port: port,
            name: Some("memcached".into()),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("50m".into())),
                ("memory".to_string(), Quantity("64Mi".into())),
            ])),
            limits: Some(BTreeMap::from([
                ("cpu".to_string(), Quantity("500m".into())),
                ("memory".to_string(), Quantity("128Mi".into())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS_USER),
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..Capabilities::default()
            }),
            ..SecurityContext::default()
        }),
        ..Container::default()
    };
    Some(Deployment {
        metadata: ObjectMeta {
            name: Some(m.name_any()),
            namespace: m.namespace(),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(m.spec.size),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".into(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    })
}

/// What differs between a live Deployment and the desired one, as far as
/// the operator manages it: the replica count and the memcached container's
/// image and port. `None` when nothing needs changing.
pub fn drift(live: &Deployment, want: &Deployment) -> Option<Drift> {
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let container = |d: &Deployment| {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "memcached").cloned())
    };
    let (lc, wc) = (container(live), container(want));
    let image_or_port = |c: &Option<Container>| {
        c.as_ref()
            .map(|c| (c.image.clone(), c.command.clone(), c.ports.clone()))
    };
    let d = Drift {
        replicas: replicas(live) != replicas(want),
        container: image_or_port(&lc) != image_or_port(&wc),
    };
    (d.replicas || d.container).then_some(d)
}

/// The parts of a Deployment [`drift`] found changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drift {
    /// `spec.replicas` differs from `spec.size`.
    pub replicas: bool,
    /// The memcached container's image, command or port differs.
    pub container: bool,
}

/// A condition the operator wants on the status (the helper that stores it
/// sets `lastTransitionTime` and `observedGeneration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredCondition {
    /// `Available`, `Progressing` or `Degraded`.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

fn cond(
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
    message: String,
) -> DesiredCondition {
    DesiredCondition {
        type_,
        status,
        reason,
        message,
    }
}

/// The three conditions for a Memcached of `size` whose Deployment is
/// `deployment` (`None`: not there yet), after a reconcile that failed with
/// `failure` (`None`: it succeeded).
///
/// Available is decided from the Deployment's own status, never assumed:
/// `status.availableReplicas >= size` for a Deployment whose controller has
/// seen its current generation. Without a Deployment controller (no pods
/// run), a Memcached stays `Available=False` with reason
/// `DeploymentUnavailable`.
pub fn conditions(
    size: i32,
    deployment: Option<&Deployment>,
    failure: Option<&str>,
) -> [DesiredCondition; 3] {
    let Some(d) = deployment else {
        let degraded = match failure {
            Some(e) => cond(DEGRADED, "True", "DeploymentFailed", e.to_string()),
            None => cond(DEGRADED, "False", "AsExpected", "no failures".into()),
        };
        return [
            cond(
                AVAILABLE,
                "Unknown",
                "Reconciling",
                "starting reconciliation".into(),
            ),
            cond(
                PROGRESSING,
                "True",
                "CreatingDeployment",
                "creating the memcached Deployment".into(),
            ),
            degraded,
        ];
    };
    let default_status = DeploymentStatus::default();
    let st = d.status.as_ref().unwrap_or(&default_status);
    let generation = d.metadata.generation.unwrap_or(0);
    let seen =
        st.observed_generation.unwrap_or(0) >= generation && st.observed_generation.is_some();
    let available = st.available_replicas.unwrap_or(0);
    let updated = st.updated_replicas.unwrap_or(0);
    let total = st.replicas.unwrap_or(0);
    let replica_failure = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True");
    let deadline_exceeded = st.conditions.iter().flatten().find(|c| {
        c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });

    let is_available = seen && available >= size;
    let availability = if is_available {
        cond(
            AVAILABLE,
            "True",
            "DeploymentAvailable",
            format!("{available} of {size} replicas available"),
        )
    } else if !seen {
        cond(
            AVAILABLE,
            "False",
            "DeploymentUnavailable",
            format!(
                "the Deployment controller has not reported on generation {generation} yet ({available} of {size} replicas available)"
            ),
        )
    } else {
        cond(
            AVAILABLE,
            "False",
            "DeploymentUnavailable",
            format!("{available} of {size} replicas available"),
        )
    };
    let done = seen && updated == size && total == size && available >= size;
    let progressing = if done {
        cond(
            PROGRESSING,
            "False",
            "ReconcileComplete",
            format!("Deployment has {size} up-to-date replicas"),
        )
    } else if let Some(c) = deadline_exceeded {
        cond(
            PROGRESSING,
            "False",
            "ProgressDeadlineExceeded",
            c.message.clone().unwrap_or_default(),
        )
    } else {
        cond(
            PROGRESSING,
            "True",
            "Scaling",
            format!("scaling to {size} replicas ({updated} up to date, {total} in total)"),
        )
    };
    let degraded = if let Some(e) = failure {
        cond(DEGRADED, "True", "ReconcileFailed", e.to_string())
    } else if let Some(c) = replica_failure {
        cond(
            DEGRADED,
            "True",
            "ReplicaFailure",
            c.message.clone().unwrap_or_default(),
        )
    } else if let Some(c) = deadline_exceeded {
        cond(
            DEGRADED,
            "True",
            "ProgressDeadlineExceeded",
            c.message.clone().unwrap_or_default(),
        )
    } else {
        cond(DEGRADED, "False", "AsExpected", "no failures".into())
    };
    [availability, progressing, degraded]
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::cache::v1alpha1::MemcachedSpec;
    use k8s_openapi::api::apps::v1::DeploymentCondition;

    fn stored(size: i32) -> Memcached {
        let mut m = Memcached::with_size("ns1", "cache", size);
        m.metadata.uid = Some("uid-1".into());
        m.metadata.generation = Some(1);
        m
    }

    fn with_status(d: &Deployment, generation: i64, st: DeploymentStatus) -> Deployment {
        let mut d = d.clone();
        d.metadata.generation = Some(generation);
        d.status = Some(st);
        d
    }

    #[test]
    fn deployment_is_owned_sized_and_non_root() {
        let m = stored(3);
        let d = deployment(&m, "example/memcached:test").unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("cache"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("ns1"));
        let owners = d.metadata.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].kind, "Memcached");
        assert_eq!(owners[0].api_version, "cache.example.com/v1alpha1");
        assert_eq!(owners[0].uid, "uid-1");
        assert_eq!(owners[0].controller, Some(true));
        assert_eq!(owners[0].block_owner_deletion, Some(true));
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&labels(&m)));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(
            pod.security_context.as_ref().unwrap().run_as_non_root,
            Some(true)
        );
        let c = &pod.containers[0];
        assert_eq!(c.image.as_deref(), Some("example/memcached:test"));
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 11211);
        assert!(
            c.command
                .as_ref()
                .unwrap()
                .contains(&"--port=11211".to_string())
        );
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref(),
            Some(&["ALL".to_string()][..])
        );
        let res = c.resources.as_ref().unwrap();
        assert!(res.requests.as_ref().unwrap().contains_key("memory"));
        assert!(res.limits.as_ref().unwrap().contains_key("memory"));
    }

    #[test]
    fn custom_port_reaches_the_container() {
        let mut m = stored(1);
        m.spec = MemcachedSpec {
            size: 1,
            container_port: 12000,
        };
        let d = deployment(&m, DEFAULT_IMAGE).unwrap();
        let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 12000);
        assert!(
            c.command
                .as_ref()
                .unwrap()
                .contains(&"--port=12000".to_string())
        );
    }

    #[test]
    fn no_deployment_without_uid() {
        let m = Memcached::with_size("ns1", "cache", 1);
        assert!(deployment(&m, DEFAULT_IMAGE).is_none());
    }

    #[test]
    fn image_comes_from_env_with_default() {
        // Both cases in one test: the environment is process-wide.
        // SAFETY-free: std::env::set_var is unsafe in edition 2024, so we only read here.
        let got = image_from_env();
        match std::env::var(IMAGE_ENV) {
            Ok(v) if !v.trim().is_empty() => assert_eq!(got, v.trim()),
            _ => assert_eq!(got, DEFAULT_IMAGE),
        }
    }

    #[test]
    fn drift_sees_replicas_and_image_only() {
        let m = stored(3);
        let want = deployment(&m, "a").unwrap();
        let mut live = want.clone();
        // Fields the API server defaults are not drift.
        live.spec.as_mut().unwrap().revision_history_limit = Some(10);
        live.metadata.resource_version = Some("5".into());
        assert_eq!(drift(&live, &want), None);
        live.spec.as_mut().unwrap().replicas = Some(1);
        assert_eq!(
            drift(&live, &want),
            Some(Drift {
                replicas: true,
                container: false
            })
        );
        let other = deployment(&m, "b").unwrap();
        assert_eq!(
            drift(&other, &want),
            Some(Drift {
                replicas: false,
                container: true
            })
        );
    }

    #[test]
    fn conditions_without_deployment() {
        let [a, p, d] = conditions(3, None, None);
        assert_eq!(
            (a.type_, a.status, a.reason),
            (AVAILABLE, "Unknown", "Reconciling")
        );
        assert_eq!((p.status, p.reason), ("True", "CreatingDeployment"));
        assert_eq!((d.status, d.reason), ("False", "AsExpected"));
        let [_, _, d] = conditions(3, None, Some("forbidden"));
        assert_eq!((d.status, d.reason), ("True", "DeploymentFailed"));
        assert_eq!(d.message, "forbidden");
    }

    #[test]
    fn available_only_from_the_deployment_status() {
        let m = stored(3);
        let d = deployment(&m, "a").unwrap();
        // Freshly created: no controller has looked at it.
        let fresh = with_status(&d, 1, DeploymentStatus::default());
        let [a, p, _] = conditions(3, Some(&fresh), None);
        assert_eq!((a.status, a.reason), ("False", "DeploymentUnavailable"));
        assert_eq!((p.status, p.reason), ("True", "Scaling"));
        // Seen, 2 of 3 available.
        let partial = with_status(
            &d,
            1,
            DeploymentStatus {
                observed_generation: Some(1),
                replicas: Some(3),
                updated_replicas: Some(3),
                available_replicas: Some(2),
                ready_replicas: Some(2),
                ..DeploymentStatus::default()
            },
        );
        let [a, p, _] = conditions(3, Some(&partial), None);
        assert_eq!(a.status, "False");
        assert!(a.message.contains("2 of 3"), "{}", a.message);
        assert_eq!(p.status, "True");
        // All there.
        let full = with_status(
            &d,
            1,
            DeploymentStatus {
                observed_generation: Some(1),
                replicas: Some(3),
                updated_replicas: Some(3),
                available_replicas: Some(3),
                ready_replicas: Some(3),
                ..DeploymentStatus::default()
            },
        );
        let [a, p, dg] = conditions(3, Some(&full), None);
        assert_eq!((a.status, a.reason), ("True", "DeploymentAvailable"));
        assert_eq!((p.status, p.reason), ("False", "ReconcileComplete"));
        assert_eq!(dg.status, "False");
        // Same status but the Deployment was resized since (generation 2):
        // the old counts say nothing about the new spec.
        let stale = with_status(&d, 2, full.status.clone().unwrap());
        let [a, p, _] = conditions(3, Some(&stale), None);
        assert_eq!(a.status, "False");
        assert_eq!(p.status, "True");
    }

    #[test]
    fn degraded_reports_replica_failure_and_errors() {
        let m = stored(1);
        let d = with_status(
            &deployment(&m, "a").unwrap(),
            1,
            DeploymentStatus {
                observed_generation: Some(1),
                conditions: Some(vec![DeploymentCondition {
                    type_: "ReplicaFailure".into(),
                    status: "True".into(),
                    message: Some("pods \"cache-x\" is forbidden: quota".into()),
                    ..DeploymentCondition::default()
                }]),
                ..DeploymentStatus::default()
            },
        );
        let [_, _, dg] = conditions(1, Some(&d), None);
        assert_eq!((dg.status, dg.reason), ("True", "ReplicaFailure"));
        assert!(dg.message.contains("quota"));
        let [_, _, dg] = conditions(1, Some(&d), Some("update failed"));
        assert_eq!((dg.status, dg.reason), ("True", "ReconcileFailed"));
    }
}
