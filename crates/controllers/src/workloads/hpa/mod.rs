//! The HorizontalPodAutoscaler controller (kube's
//! `pkg/controller/podautoscaler/horizontal.go`), autoscaling/v2 with
//! `Resource` and `ContainerResource` metrics (cpu and memory,
//! `Utilization` and `AverageValue` targets) read from the Metrics API
//! (`metrics.k8s.io/v1beta1` PodMetrics).
//!
//! Every HPA is synced once per sync period (15 s,
//! `--horizontal-pod-autoscaler-sync-period`), and when its spec changes:
//! its target's `/scale` (any kind that has one, found through discovery)
//! gives the current replicas and the pod selector; the pods and their
//! metrics give a proposal per metric ([`calc`]); the largest is
//! normalized (min/max, stabilization and rate policies, kept in memory as
//! kube does) and written back through `/scale`, with the status
//! (`currentReplicas`, `desiredReplicas`, `currentMetrics`, the
//! `AbleToScale`/`ScalingActive`/`ScalingLimited` conditions with kube's
//! reasons and messages, `lastScaleTime`) and kube's events
//! (`SuccessfulRescale`, `FailedGetScale`, `FailedGetResourceMetric`, …).
//!
//! It writes as `system:serviceaccount:kube-system:horizontal-pod-autoscaler`
//! (kube's `system:controller:horizontal-pod-autoscaler` role).

pub mod calc;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
    HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricValueStatus,
    ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubeforge_apimachinery::labels::Selector;
use kubeforge_apimachinery::quantity;
use kubeforge_runtime::sync::lock;
use kubeforge_runtime::{Action, Manager, ReconcileError, predicates};
use serde_json::{Value, json};

use self::calc::{Calculator, History, Normalized, PodMetric, PodState, ScalingRules};
use super::Ctx;
use crate::clients::accounts;

/// The HPA controller's settings (kube-controller-manager's
/// `--horizontal-pod-autoscaler-*` flags).
#[derive(Clone, Debug)]
pub struct HpaOptions {
    /// How often each HPA is synced (15 s).
    pub sync_period: Duration,
    /// The scale-down stabilization window when `behavior` does not set
    /// one (300 s).
    pub downscale_stabilization: Duration,
    /// Tolerance, cpu initialization period and initial readiness delay
    /// (0.1, 5 min, 30 s).
    pub calculator: Calculator,
}

impl Default for HpaOptions {
    fn default() -> Self {
        HpaOptions {
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
            calculator: Calculator::default(),
        }
    }
}

/// What the controller keeps between syncs: per HPA (by UID) its
/// recommendations and scale events.
#[derive(Default)]
pub(crate) struct State {
    histories: Mutex<HashMap<String, History>>,
}

/// The Metrics API's PodMetrics resource.
fn pod_metrics_resource() -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    }
}

pub(crate) fn register(mgr: &Manager, ctx: Arc<Ctx>) {
    let index_ctx = ctx.clone();
    let period = ctx.opts.hpa.sync_period;
    let hpas = mgr.store::<HorizontalPodAutoscaler>();
    mgr.controller::<HorizontalPodAutoscaler, _>("horizontalpodautoscaler", super::Shared(ctx))
        // Our own status writes do not trigger a sync; the period does.
        .with_predicate(predicates::generation_changed())
        // Keep the pod index fed (the HPA reads pods by namespace from it)
        // even when no other pod-watching controller runs.
        .watches::<Pod, _>(move |pod| {
            index_ctx.pod_index.observe(&index_ctx.pods, pod);
            Vec::new()
        })
        .register(move |hpa, ctx| {
            let hpas = hpas.clone();
            async move {
                sync(&hpa, &ctx).await;
                forget_deleted(&ctx, &hpas);
                Ok::<_, ReconcileError>(Action::requeue(period))
            }
        });
}

/// Drop the history of HPAs that are gone (kube forgets a key when its
/// HPA is not found; a deleted HPA is never reconciled here).
fn forget_deleted(ctx: &Ctx, hpas: &kubeforge_runtime::Cache<HorizontalPodAutoscaler>) {
    let mut histories = lock(&ctx.hpa.histories);
    if histories.len() <= hpas.len() {
        return;
    }
    let live: std::collections::HashSet<String> = hpas
        .state()
        .iter()
        .filter_map(|h| h.metadata.uid.clone())
        .collect();
    histories.retain(|uid, _| live.contains(uid));
}

/// One condition to set (kube's `setCondition`).
struct Conditions(Vec<HorizontalPodAutoscalerCondition>);

impl Conditions {
    fn set(&mut self, type_: &str, status: bool, reason: &str, message: String) {
        let status = if status { "True" } else { "False" }.to_string();
        let now = Time(
            jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
                .unwrap_or_else(|_| jiff::Timestamp::now()),
        );
        match self.0.iter_mut().find(|c| c.type_ == type_) {
            Some(c) => {
                if c.status != status {
                    c.last_transition_time = Some(now);
                }
                c.status = status;
                c.reason = Some(reason.to_string());
                c.message = Some(message);
            }
            None => self.0.push(HorizontalPodAutoscalerCondition {
                type_: type_.to_string(),
                status,
                reason: Some(reason.to_string()),
                message: Some(message),
                last_transition_time: Some(now),
            }),
        }
    }
}

/// A metric that could not be computed: the condition kube sets and the
/// error text.
struct MetricError {
    reason: String,
    message: String,
}

/// Record a core/v1 Event about the HPA from `horizontal-pod-autoscaler`,
/// as kube's (legacy) event recorder does. Written directly: kube-runtime's
/// recorder folds events with the same reason into one and keeps the
/// first note, which would hide every rescale's "New size" but the first.
async fn event(ctx: &Ctx, hpa: &HorizontalPodAutoscaler, warning: bool, reason: &str, note: &str) {
    let client = ctx.client(accounts::HORIZONTAL_POD_AUTOSCALER).clone();
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let ev = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": format!("{name}.{:x}", now.as_nanosecond()),
            "namespace": ns,
        },
        "involvedObject": {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "name": name,
            "namespace": ns,
            "uid": hpa.metadata.uid,
            "resourceVersion": hpa.metadata.resource_version,
        },
        "reason": reason,
        "message": note,
        "type": if warning { "Warning" } else { "Normal" },
        "source": {"component": "horizontal-pod-autoscaler"},
        "firstTimestamp": Time(now),
        "lastTimestamp": Time(now),
        "count": 1,
        "reportingComponent": "horizontal-pod-autoscaler",
        "reportingInstance": "",
    });
    let Ok(ev) = serde_json::from_value::<k8s_openapi::api::core::v1::Event>(ev) else {
        return;
    };
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        tracing::debug!(error = %e, "recording an HPA event");
    }
}

/// kube's `reconcileAutoscaler`; errors are reported in the status and as
/// events, and the HPA is synced again next period either way.
async fn sync(hpa: &HorizontalPodAutoscaler, ctx: &Ctx) {
    let client = ctx.client(accounts::HORIZONTAL_POD_AUTOSCALER).clone();
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let uid = hpa.metadata.uid.clone().unwrap_or_default();
    let Some(spec) = hpa.spec.as_ref() else {
        return;
    };
    let old_status = hpa.status.clone().unwrap_or_default();
    let mut conditions = Conditions(old_status.conditions.clone().unwrap_or_default());
    let mut status = HorizontalPodAutoscalerStatus {
        current_replicas: old_status.current_replicas,
        desired_replicas: old_status.desired_replicas,
        current_metrics: old_status.current_metrics.clone(),
        last_scale_time: old_status.last_scale_time.clone(),
        observed_generation: hpa.metadata.generation,
        conditions: None,
    };
    let target = &spec.scale_target_ref;
    let (group, version) = match target.api_version.as_deref().unwrap_or("").split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            target.api_version.clone().unwrap_or_default(),
        ),
    };
    // The target's /scale.
    let gvk = GroupVersionKind::gvk(&group, &version, &target.kind);
    let scale = match kube::discovery::pinned_kind(&client, &gvk).await {
        Ok((ar, _)) => {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            api.get_scale(&target.name).await.map(|s| (api, s))
        }
        Err(e) => Err(e),
    };
    let (scale_api, scale) = match scale {
        Ok(s) => s,
        Err(e) => {
            let err = api_message(&e);
            event(ctx, hpa, true, "FailedGetScale", &err).await;
            conditions.set(
                "AbleToScale",
                false,
                "FailedGetScale",
                format!("the HPA controller was unable to get the target's current scale: {err}"),
            );
            write_status(&client, hpa, &old_status, status, conditions).await;
            return;
        }
    };
    conditions.set(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale".into(),
    );
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let selector = scale
        .status
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    let now = Instant::now();
    lock(&ctx.hpa.histories)
        .entry(uid.clone())
        .or_default()
        .record_initial(current, now);
    let min = spec.min_replicas.unwrap_or(1);
    let max = spec.max_replicas;
    let mut desired = 0;
    let mut reason = String::new();
    let mut rescale = true;
    let mut metric_statuses: Option<Vec<MetricStatus>> = None;
    let (up_rules, down_rules) = behavior_rules(hpa, ctx.opts.hpa.downscale_stabilization);
    if current == 0 && min != 0 {
        desired = 0;
        rescale = false;
        conditions.set(
            "ScalingActive",
            false,
            "ScalingDisabled",
            "scaling is disabled since the replica count of the target is zero".into(),
        );
    } else if current > max {
        reason = "Current number of replicas above Spec.MaxReplicas".into();
        desired = max;
    } else if current < min {
        reason = "Current number of replicas below Spec.MinReplicas".into();
        desired = min;
    } else {
        let computed =
            compute_replicas(ctx, hpa, &client, &ns, &selector, current, &mut conditions).await;
        match computed {
            Err((statuses, err)) => {
                status.current_replicas = Some(current);
                status.current_metrics = statuses;
                event(ctx, hpa, true, "FailedComputeMetricsReplicas", &err).await;
                write_status(&client, hpa, &old_status, status, conditions).await;
                return;
            }
            Ok((proposal, metric, statuses)) => {
                metric_statuses = Some(statuses);
                if proposal > desired {
                    desired = proposal;
                }
                if desired > current {
                    reason = format!("{metric} above target");
                }
                if desired < current {
                    reason = "All metrics below target".into();
                }
                let n: Normalized = {
                    let mut histories = lock(&ctx.hpa.histories);
                    let h = histories.entry(uid.clone()).or_default();
                    match &spec.behavior {
                        None => h.normalize(
                            current,
                            desired,
                            min,
                            max,
                            ctx.opts.hpa.downscale_stabilization,
                            now,
                        ),
                        Some(_) => h.normalize_with_behavior(
                            current,
                            desired,
                            min,
                            max,
                            &up_rules,
                            &down_rules,
                            now,
                        ),
                    }
                };
                conditions.set("AbleToScale", true, n.able_reason, n.able_message.into());
                conditions.set(
                    "ScalingLimited",
                    n.limited,
                    n.limited_reason,
                    n.limited_message.into(),
                );
                desired = n.replicas;
                rescale = desired != current;
            }
        }
    }
    if rescale {
        let mut body = scale.clone();
        body.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec {
            replicas: Some(desired),
        });
        if let Err(e) = scale_api
            .replace_scale(&target.name, &PostParams::default(), &body)
            .await
        {
            let err = api_message(&e);
            event(
                ctx,
                hpa,
                true,
                "FailedRescale",
                &format!("New size: {desired}; reason: {reason}; error: {err}"),
            )
            .await;
            conditions.set(
                "AbleToScale",
                false,
                "FailedUpdateScale",
                format!("the HPA controller was unable to update the target scale: {err}"),
            );
            status.current_replicas = Some(current);
            write_status(&client, hpa, &old_status, status, conditions).await;
            return;
        }
        conditions.set(
            "AbleToScale",
            true,
            "SucceededRescale",
            format!("the HPA controller was able to update the target scale to {desired}"),
        );
        event(
            ctx,
            hpa,
            false,
            "SuccessfulRescale",
            &format!("New size: {desired}; reason: {reason}"),
        )
        .await;
        if spec.behavior.is_some() {
            lock(&ctx.hpa.histories)
                .entry(uid)
                .or_default()
                .store_scale_event(&up_rules, &down_rules, current, desired, now);
        }
        tracing::info!(hpa = %format!("{ns}/{name}"), old = current, new = desired, %reason, "successful rescale");
        status.last_scale_time = Some(Time(jiff::Timestamp::now()));
    } else {
        desired = current;
    }
    status.current_replicas = Some(current);
    status.desired_replicas = desired;
    status.current_metrics = metric_statuses.filter(|m| !m.is_empty());
    write_status(&client, hpa, &old_status, status, conditions).await;
}

/// The defaulted `behavior` rules (autoscaling/v2's defaults; the
/// scale-down window from the controller's flag when unset).
fn behavior_rules(
    hpa: &HorizontalPodAutoscaler,
    downscale: Duration,
) -> (ScalingRules, ScalingRules) {
    let behavior = hpa.spec.as_ref().and_then(|s| s.behavior.as_ref());
    let convert = |r: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>,
                   default: ScalingRules| {
        let Some(r) = r else { return default };
        ScalingRules {
            stabilization_window: r
                .stabilization_window_seconds
                .map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
                .unwrap_or(default.stabilization_window),
            select_policy: r.select_policy.clone().unwrap_or_else(|| "Max".into()),
            policies: match &r.policies {
                Some(p) if !p.is_empty() => p
                    .iter()
                    .map(|p| (p.type_.clone(), p.value, p.period_seconds))
                    .collect(),
                _ => default.policies,
            },
        }
    };
    (
        convert(
            behavior.and_then(|b| b.scale_up.as_ref()),
            ScalingRules::default_up(),
        ),
        convert(
            behavior.and_then(|b| b.scale_down.as_ref()),
            ScalingRules::default_down(downscale),
        ),
    )
}

fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// kube's `computeReplicasForMetrics`: the largest proposal, its metric's
/// name and every metric's status; or the statuses and the error.
#[allow(clippy::too_many_arguments)]
async fn compute_replicas(
    ctx: &Ctx,
    hpa: &HorizontalPodAutoscaler,
    client: &kube::Client,
    ns: &str,
    selector: &str,
    current: i32,
    conditions: &mut Conditions,
) -> Result<(i32, String, Vec<MetricStatus>), (Option<Vec<MetricStatus>>, String)> {
    if selector.is_empty() {
        let msg = "selector is required";
        event(ctx, hpa, true, "SelectorRequired", msg).await;
        conditions.set(
            "ScalingActive",
            false,
            "InvalidSelector",
            "the HPA target's scale is missing a selector".into(),
        );
        return Err((None, msg.into()));
    }
    let parsed = match Selector::parse(selector) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!(
                "couldn't convert selector into a corresponding internal selector object: {e}"
            );
            event(ctx, hpa, true, "InvalidSelector", &msg).await;
            conditions.set("ScalingActive", false, "InvalidSelector", msg.clone());
            return Err((None, msg));
        }
    };
    let default_metric = [MetricSpec {
        type_: "Resource".into(),
        resource: Some(k8s_openapi::api::autoscaling::v2::ResourceMetricSource {
            name: "cpu".into(),
            target: k8s_openapi::api::autoscaling::v2::MetricTarget {
                type_: "Utilization".into(),
                average_utilization: Some(80),
                ..Default::default()
            },
        }),
        ..Default::default()
    }];
    let specs: &[MetricSpec] = match hpa.spec.as_ref().and_then(|s| s.metrics.as_deref()) {
        Some(m) if !m.is_empty() => m,
        // autoscaling/v2's default: 80 % CPU.
        _ => &default_metric,
    };
    let pods: Vec<Arc<Pod>> = ctx
        .pod_index
        .in_namespace(&ctx.pods, ns)
        .into_iter()
        .filter(|p| parsed.matches(&p.metadata.labels.clone().unwrap_or_default()))
        .collect();
    let mut statuses = Vec::with_capacity(specs.len());
    let mut best: Option<(i32, String)> = None;
    let mut first_error: Option<MetricError> = None;
    let mut invalid = 0;
    for spec in specs {
        match resource_metric(ctx, client, ns, selector, spec, current, &pods).await {
            Ok((replicas, name, status)) => {
                statuses.push(status);
                if best.as_ref().is_none_or(|(r, _)| replicas > *r) {
                    best = Some((replicas, name));
                }
            }
            Err(e) => {
                statuses.push(MetricStatus {
                    type_: spec.type_.clone(),
                    ..Default::default()
                });
                event(ctx, hpa, true, &e.reason, &e.message).await;
                invalid += 1;
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    let proposal = best.as_ref().map_or(0, |(r, _)| *r);
    // All invalid, or some invalid and the rest would scale down: do
    // nothing (kube's rule, so a broken metric never shrinks a workload).
    if let Some(e) = first_error.filter(|_| invalid >= specs.len() || proposal < current) {
        conditions.set(
            "ScalingActive",
            false,
            &e.reason,
            format!(
                "the HPA was unable to compute the replica count: {}",
                e.message
            ),
        );
        let msg = format!(
            "invalid metrics ({invalid} invalid out of {}), first error is: {}",
            specs.len(),
            e.message
        );
        return Err((Some(statuses), msg));
    }
    let (replicas, metric) = best.unwrap_or((current, String::new()));
    conditions.set(
        "ScalingActive",
        true,
        "ValidMetricFound",
        format!("the HPA was able to successfully calculate a replica count from {metric}"),
    );
    Ok((replicas, metric, statuses))
}

fn invalid(kind: &str, reason: &str) -> MetricError {
    MetricError {
        reason: reason.into(),
        message: format!("invalid {kind} metric source: the {kind} field is missing"),
    }
}

/// One `Resource` or `ContainerResource` metric: kube's
/// `computeStatusForResourceMetric` / `…ContainerResourceMetric`.
async fn resource_metric(
    ctx: &Ctx,
    client: &kube::Client,
    ns: &str,
    selector: &str,
    spec: &MetricSpec,
    current: i32,
    pods: &[Arc<Pod>],
) -> Result<(i32, String, MetricStatus), MetricError> {
    // `Resource`, or `ContainerResource` (one container of each pod).
    let (resource, container, target) = match spec.type_.as_str() {
        "Resource" => match spec.resource.as_ref() {
            Some(r) => (r.name.as_str(), None, &r.target),
            None => return Err(invalid("Resource", "FailedGetResourceMetric")),
        },
        "ContainerResource" => match spec.container_resource.as_ref() {
            Some(r) => (r.name.as_str(), Some(r.container.as_str()), &r.target),
            None => {
                return Err(invalid(
                    "ContainerResource",
                    "FailedGetContainerResourceMetric",
                ));
            }
        },
        other => {
            let reason = match other {
                "Pods" => "FailedGetPodsMetric",
                "Object" => "FailedGetObjectMetric",
                "External" => "FailedGetExternalMetric",
                _ => "InvalidMetricSourceType",
            };
            return Err(MetricError {
                reason: reason.into(),
                message: format!(
                    "{other} metrics are not supported by kubeforge's HPA controller (Resource and ContainerResource metrics only)"
                ),
            });
        }
    };
    let cpu = resource == "cpu";
    let fail = |message: String| MetricError {
        reason: if container.is_some() {
            "FailedGetContainerResourceMetric"
        } else {
            "FailedGetResourceMetric"
        }
        .into(),
        message,
    };
    let utilization_target = target
        .average_utilization
        .filter(|_| target.average_value.is_none());
    if target.average_value.is_none() && utilization_target.is_none() {
        return Err(fail(
            "invalid resource metric source: neither an average utilization target nor an average value (or value) target was set".into(),
        ));
    }
    let what = if utilization_target.is_some() {
        "utilization"
    } else {
        "usage"
    };
    // The pods' metrics.
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &pod_metrics_resource());
    let listed = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| {
            fail(format!(
                "failed to get {resource} {what}: unable to get metrics for resource {resource}: unable to fetch metrics from resource metrics API: {}",
                api_message(&e)
            ))
        })?;
    if listed.items.is_empty() {
        return Err(fail(format!(
            "failed to get {resource} {what}: unable to get metrics for resource {resource}: no metrics returned from resource metrics API"
        )));
    }
    let mut metrics = BTreeMap::new();
    for item in listed.items {
        let Some(name) = item.metadata.name.clone() else {
            continue;
        };
        let Ok(m) = serde_json::from_value::<kubeforge_observability::resource_metrics::PodMetrics>(
            serde_json::to_value(&item).unwrap_or(Value::Null),
        ) else {
            continue;
        };
        let mut sum = 0i64;
        let measured: Vec<_> = m
            .containers
            .iter()
            .filter(|c| container.is_none_or(|name| c.name == name))
            .collect();
        let mut missing = measured.is_empty();
        for c in measured {
            match c
                .usage
                .get(resource)
                .and_then(|q| quantity::parse_milli(&q.0).ok())
            {
                // MilliValue, for memory too (milli-bytes), as kube sums.
                Some(v) => sum = sum.saturating_add(v),
                None => {
                    missing = true;
                    break;
                }
            }
        }
        if missing {
            continue;
        }
        metrics.insert(
            name,
            PodMetric {
                timestamp: m.timestamp.0,
                window: parse_go_duration(&m.window).unwrap_or(Duration::from_secs(60)),
                value: sum,
            },
        );
    }
    let states: Vec<PodState> = pods
        .iter()
        .map(|p| pod_state(p, resource, container))
        .collect();
    let calc = ctx.opts.hpa.calculator;
    let now = jiff::Timestamp::now();
    let resource_status = |current: MetricValueStatus| match container {
        None => MetricStatus {
            type_: "Resource".into(),
            resource: Some(ResourceMetricStatus {
                name: resource.to_string(),
                current,
            }),
            ..Default::default()
        },
        Some(c) => MetricStatus {
            type_: "ContainerResource".into(),
            container_resource: Some(ContainerResourceMetricStatus {
                name: resource.to_string(),
                container: c.to_string(),
                current,
            }),
            ..Default::default()
        },
    };
    let kind = if container.is_some() {
        "container resource"
    } else {
        "resource"
    };
    match utilization_target {
        Some(target) => {
            let p = calc
                .resource_replicas(current, target, cpu, &states, &metrics, now)
                .map_err(|e| fail(format!("failed to get {resource} utilization: {e}")))?;
            Ok((
                p.replicas,
                format!("{resource} {kind} utilization (percentage of request)"),
                resource_status(MetricValueStatus {
                    average_utilization: Some(p.utilization),
                    average_value: Some(Quantity(quantity::format_milli(p.raw_average))),
                    value: None,
                }),
            ))
        }
        None => {
            let target = target
                .average_value
                .as_ref()
                .and_then(|q| quantity::parse_milli(&q.0).ok())
                .unwrap_or(0);
            let p = calc
                .raw_replicas(current, target, cpu, &states, &metrics, now)
                .map_err(|e| fail(format!("failed to get {resource} usage: {e}")))?;
            Ok((
                p.replicas,
                format!("{resource} {kind}"),
                resource_status(MetricValueStatus {
                    average_value: Some(Quantity(quantity::format_milli(p.raw_average))),
                    ..Default::default()
                }),
            ))
        }
    }
}

/// A pod as [`calc`] sees it; requests are summed over the containers
/// and restartable init containers, or taken from the one named
/// (kube's `calculateRequests`).
fn pod_state(pod: &Pod, resource: &str, container: Option<&str>) -> PodState {
    let status = pod.status.as_ref();
    let spec = pod.spec.as_ref();
    let mut request: Result<i64, String> = Ok(0);
    if let Some(spec) = spec {
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let chosen = spec
            .containers
            .iter()
            .chain(init)
            .filter(|c| container.is_none_or(|name| c.name == name));
        for c in chosen {
            let r = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .and_then(|q| quantity::parse_milli(&q.0).ok());
            request = match (request, r) {
                (Ok(sum), Some(v)) => Ok(sum + v),
                (Ok(_), None) => Err(c.name.clone()),
                (missing, _) => missing,
            };
        }
    }
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| Some((c.status == "True", c.last_transition_time.as_ref()?.0)));
    PodState {
        name: pod.metadata.name.clone().unwrap_or_default(),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        start_time: status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
        ready,
        request,
    }
}

/// A Go duration string (`15s`, `1.5s`, `500ms`, `1m30s`).
fn parse_go_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, tail) = rest.split_at(end);
        let num: f64 = num.parse().ok()?;
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += num * scale;
        rest = tail;
    }
    Some(Duration::from_secs_f64(total))
}

/// Write the status if it changed (kube's `updateStatusIfNeeded`), as a
/// merge patch of the whole status (absent fields cleared).
async fn write_status(
    client: &kube::Client,
    hpa: &HorizontalPodAutoscaler,
    old: &HorizontalPodAutoscalerStatus,
    mut status: HorizontalPodAutoscalerStatus,
    conditions: Conditions,
) {
    status.conditions = Some(conditions.0).filter(|c| !c.is_empty());
    let old_value = serde_json::to_value(old).unwrap_or(Value::Null);
    let mut new_value = serde_json::to_value(&status).unwrap_or(Value::Null);
    if old_value == new_value {
        return;
    }
    if let Some(obj) = new_value.as_object_mut() {
        for key in ["currentMetrics", "lastScaleTime", "conditions"] {
            obj.entry(key).or_insert(Value::Null);
        }
    }
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": new_value})),
        )
        .await
    {
        tracing::warn!(hpa = %format!("{ns}/{name}"), error = %e, "updating the HPA's status");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("15s"), Some(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("x"), None);
    }
}
