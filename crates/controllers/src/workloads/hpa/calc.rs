//! The HorizontalPodAutoscaler's arithmetic, with no API access: kube's
//! `replica_calculator.go` (which pods count, the correction for missing
//! and unready pods, the tolerance) and the normalization of
//! `horizontal.go` (min/max, the scale-up limit without `behavior`,
//! stabilization windows and rate policies with it). Read it beside those
//! files; the tests pin the cases kube's `replica_calculator_test.go` pins.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jiff::Timestamp;

/// One pod as the calculation sees it.
#[derive(Clone, Debug)]
pub struct PodState {
    /// Name (metrics are matched by it).
    pub name: String,
    /// `status.phase`.
    pub phase: String,
    /// Has a `deletionTimestamp`.
    pub deleting: bool,
    /// `status.startTime`.
    pub start_time: Option<Timestamp>,
    /// The Ready condition: whether True, and its `lastTransitionTime`.
    pub ready: Option<(bool, Timestamp)>,
    /// Sum of the containers' requests of the resource (milli-units), or
    /// the name of the first container without one.
    /// `None` if a container has none.
    pub request: Result<i64, String>,
}

/// One pod's metric: sum over its containers, in milli-units.
#[derive(Clone, Copy, Debug)]
pub struct PodMetric {
    /// The window's end.
    pub timestamp: Timestamp,
    /// The window.
    pub window: Duration,
    /// Milli-units (MilliValue of cpu or memory).
    pub value: i64,
}

/// The calculator's settings (kube-controller-manager's flags).
#[derive(Clone, Copy, Debug)]
pub struct Calculator {
    /// `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period` (5 min).
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay` (30 s).
    pub initial_readiness_delay: Duration,
}

impl Default for Calculator {
    fn default() -> Self {
        Calculator {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

/// What [`Calculator::resource_replicas`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    /// Desired replicas for this metric.
    pub replicas: i32,
    /// Average utilization, percent of requests (Utilization targets).
    pub utilization: i32,
    /// Average value per pod, milli-units.
    pub raw_average: i64,
}

struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

impl Calculator {
    /// kube's `groupPods`.
    fn group(
        &self,
        pods: &[PodState],
        metrics: &BTreeMap<String, PodMetric>,
        cpu: bool,
        now: Timestamp,
    ) -> Groups {
        let mut g = Groups {
            ready: 0,
            unready: BTreeSet::new(),
            missing: BTreeSet::new(),
            ignored: BTreeSet::new(),
        };
        for pod in pods {
            if pod.deleting || pod.phase == "Failed" {
                g.ignored.insert(pod.name.clone());
                continue;
            }
            if pod.phase == "Pending" {
                g.unready.insert(pod.name.clone());
                continue;
            }
            let Some(metric) = metrics.get(&pod.name) else {
                g.missing.insert(pod.name.clone());
                continue;
            };
            if cpu {
                let unready = match (pod.ready, pod.start_time) {
                    (Some((ready, transition)), Some(start)) => {
                        if after(start, self.cpu_initialization_period) > now {
                            // Still initializing: unready, or no whole
                            // window of metrics since it became ready.
                            !ready || metric.timestamp < after(transition, metric.window)
                        } else {
                            // Unready and never ready since it started.
                            !ready && after(start, self.initial_readiness_delay) > transition
                        }
                    }
                    _ => true,
                };
                if unready {
                    g.unready.insert(pod.name.clone());
                    continue;
                }
            }
            g.ready += 1;
        }
        g
    }

    /// kube's common start of a replica calculation: the pods grouped,
    /// and the metrics of those neither ignored nor unready (errors in
    /// kube's words when there is nothing to count).
    fn counted(
        &self,
        pods: &[PodState],
        metrics: &BTreeMap<String, PodMetric>,
        cpu: bool,
        now: Timestamp,
    ) -> Result<(Groups, BTreeMap<String, i64>), String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let g = self.group(pods, metrics, cpu, now);
        let counted: BTreeMap<String, i64> = metrics
            .iter()
            .filter(|(n, _)| !g.ignored.contains(*n) && !g.unready.contains(*n))
            .map(|(n, m)| (n.clone(), m.value))
            .collect();
        if counted.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        Ok((g, counted))
    }

    /// Desired replicas for a Utilization target (kube's
    /// `GetResourceReplicas`); `cpu` turns on the CPU readiness rules.
    pub fn resource_replicas(
        &self,
        current: i32,
        target_utilization: i32,
        cpu: bool,
        pods: &[PodState],
        metrics: &BTreeMap<String, PodMetric>,
        now: Timestamp,
    ) -> Result<Proposal, String> {
        let (g, mut metrics) = self.counted(pods, metrics, cpu, now)?;
        let mut requests = BTreeMap::new();
        for p in pods {
            match &p.request {
                Ok(r) => {
                    requests.insert(p.name.clone(), *r);
                }
                Err(container) => {
                    return Err(format!(
                        "missing request for {} in container {container} of Pod {}",
                        if cpu { "cpu" } else { "memory" },
                        p.name
                    ));
                }
            }
        }
        let (ratio, utilization, raw) = utilization_ratio(&metrics, &requests, target_utilization)?;
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok(Proposal {
                    replicas: current,
                    utilization,
                    raw_average: raw,
                });
            }
            return Ok(Proposal {
                replicas: ceil(ratio * g.ready as f64),
                utilization,
                raw_average: raw,
            });
        }
        if !g.missing.is_empty() {
            if ratio < 1.0 {
                // Scale-down: missing pods use 100 % of their request (or
                // the target, when it is above 100 %).
                let fallback = i64::from(target_utilization.max(100));
                for name in &g.missing {
                    let r = requests.get(name).copied().unwrap_or(0);
                    metrics.insert(name.clone(), r * fallback / 100);
                }
            } else if ratio > 1.0 {
                for name in &g.missing {
                    metrics.insert(name.clone(), 0);
                }
            }
        }
        if scale_up_with_unready {
            for name in &g.unready {
                metrics.insert(name.clone(), 0);
            }
        }
        let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target_utilization)?;
        let same = Proposal {
            replicas: current,
            utilization,
            raw_average: raw,
        };
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok(same);
        }
        let replicas = ceil(new_ratio * metrics.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok(same);
        }
        Ok(Proposal {
            replicas,
            utilization,
            raw_average: raw,
        })
    }

    /// Desired replicas for an AverageValue target in milli-units (kube's
    /// `GetRawResourceReplicas` / `calcPlainMetricReplicas`); the
    /// proposal's `raw_average` is the average usage.
    pub fn raw_replicas(
        &self,
        current: i32,
        target: i64,
        cpu: bool,
        pods: &[PodState],
        metrics: &BTreeMap<String, PodMetric>,
        now: Timestamp,
    ) -> Result<Proposal, String> {
        let (g, mut metrics) = self.counted(pods, metrics, cpu, now)?;
        let (ratio, usage) = plain_ratio(&metrics, target);
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        let same = Proposal {
            replicas: current,
            utilization: 0,
            raw_average: usage,
        };
        if !scale_up_with_unready && g.missing.is_empty() {
            if (1.0 - ratio).abs() <= self.tolerance {
                return Ok(same);
            }
            return Ok(Proposal {
                replicas: ceil(ratio * g.ready as f64),
                ..same
            });
        }
        if !g.missing.is_empty() {
            let fill = if ratio < 1.0 { target } else { 0 };
            for name in &g.missing {
                metrics.insert(name.clone(), fill);
            }
        }
        if scale_up_with_unready {
            for name in &g.unready {
                metrics.insert(name.clone(), 0);
            }
        }
        let (new_ratio, _) = plain_ratio(&metrics, target);
        if (1.0 - new_ratio).abs() <= self.tolerance
            || (ratio < 1.0 && new_ratio > 1.0)
            || (ratio > 1.0 && new_ratio < 1.0)
        {
            return Ok(same);
        }
        let replicas = ceil(new_ratio * metrics.len() as f64);
        if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
            return Ok(same);
        }
        Ok(Proposal { replicas, ..same })
    }
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    jiff::SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(t)
}

fn ceil(x: f64) -> i32 {
    // Replica counts are small; the cast saturates.
    x.ceil() as i32
}

/// kube's `GetResourceUtilizationRatio`: the utilization is truncated to
/// a whole percent before the ratio is taken.
fn utilization_ratio(
    metrics: &BTreeMap<String, i64>,
    requests: &BTreeMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (name, v) in metrics {
        // Metrics of pods we do not know (no request) are extraneous.
        let Some(r) = requests.get(name) else {
            continue;
        };
        used += v;
        requested += r;
        n += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = i32::try_from(used * 100 / requested).unwrap_or(i32::MAX);
    Ok((
        f64::from(utilization) / f64::from(target.max(1)),
        utilization,
        used / n,
    ))
}

/// kube's `GetMetricUsageRatio`.
fn plain_ratio(metrics: &BTreeMap<String, i64>, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().sum();
    let usage = total / (metrics.len() as i64).max(1);
    (usage as f64 / target.max(1) as f64, usage)
}

/// `spec.behavior`'s rules for one direction, defaulted.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalingRules {
    /// Seconds of recommendations considered.
    pub stabilization_window: Duration,
    /// `Max`, `Min` or `Disabled`.
    pub select_policy: String,
    /// `(type: Pods|Percent, value, periodSeconds)`.
    pub policies: Vec<(String, i32, i32)>,
}

impl ScalingRules {
    /// kube's defaults for scale-up: no window, 100 % or 4 pods per 15 s,
    /// the larger.
    pub fn default_up() -> ScalingRules {
        ScalingRules {
            stabilization_window: Duration::ZERO,
            select_policy: "Max".into(),
            policies: vec![("Percent".into(), 100, 15), ("Pods".into(), 4, 15)],
        }
    }

    /// kube's defaults for scale-down: the given window (the controller's
    /// `--horizontal-pod-autoscaler-downscale-stabilization`, 300 s), 100 %
    /// per 15 s.
    pub fn default_down(window: Duration) -> ScalingRules {
        ScalingRules {
            stabilization_window: window,
            select_policy: "Max".into(),
            policies: vec![("Percent".into(), 100, 15)],
        }
    }
}

/// A scaling decision's conditions: AbleToScale's reason and message,
/// ScalingLimited's status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Normalized {
    /// The replicas to scale to.
    pub replicas: i32,
    /// AbleToScale (True) reason.
    pub able_reason: &'static str,
    /// AbleToScale message.
    pub able_message: &'static str,
    /// Whether ScalingLimited is True.
    pub limited: bool,
    /// ScalingLimited reason.
    pub limited_reason: &'static str,
    /// ScalingLimited message.
    pub limited_message: &'static str,
}

/// What the controller remembers per HPA between syncs (kube keeps the
/// same in memory): recent recommendations and scale events.
#[derive(Clone, Debug, Default)]
pub struct History {
    recommendations: Vec<(i32, Instant)>,
    up_events: Vec<(i32, Instant, bool)>,
    down_events: Vec<(i32, Instant, bool)>,
}

const READY: (&str, &str) = ("ReadyForNewScale", "recommended size matches current size");
const WITHIN: (&str, &str) = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const TOO_MANY: (&str, &str) = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const TOO_FEW: (&str, &str) = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);
const UP_LIMIT: (&str, &str) = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const DOWN_LIMIT: (&str, &str) = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);

fn older(t: Instant, now: Instant, d: Duration) -> bool {
    now.checked_sub(d).is_some_and(|cut| t < cut)
}

fn newer(t: Instant, now: Instant, d: Duration) -> bool {
    now.checked_sub(d).is_none_or(|cut| t > cut)
}

impl History {
    /// kube's `recordInitialRecommendation`.
    pub fn record_initial(&mut self, current: i32, now: Instant) {
        if self.recommendations.is_empty() {
            self.recommendations.push((current, now));
        }
    }

    /// Without `behavior` (kube's `normalizeDesiredReplicas`): the highest
    /// recommendation over `downscale_window`, then min/max and the
    /// scale-up limit (twice the current count, at least 4).
    pub fn normalize(
        &mut self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        downscale_window: Duration,
        now: Instant,
    ) -> Normalized {
        let mut stabilized = desired;
        let mut old = None;
        for (i, (rec, t)) in self.recommendations.iter().enumerate() {
            if older(*t, now, downscale_window) {
                old = Some(i);
            } else if *rec > stabilized {
                stabilized = *rec;
            }
        }
        match old {
            Some(i) => self.recommendations[i] = (desired, now),
            None => self.recommendations.push((desired, now)),
        }
        let (able_reason, able_message) = if stabilized != desired {
            (
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        } else {
            READY
        };
        let scale_up_limit = (2 * current).max(4);
        let (max_allowed, limit) = if max > scale_up_limit {
            (scale_up_limit, UP_LIMIT)
        } else {
            (max, TOO_MANY)
        };
        let (replicas, (limited_reason, limited_message)) = if stabilized < min {
            (min, TOO_FEW)
        } else if stabilized > max_allowed {
            (max_allowed, limit)
        } else {
            (stabilized, WITHIN)
        };
        Normalized {
            replicas,
            able_reason,
            able_message,
            limited: replicas != stabilized,
            limited_reason,
            limited_message,
        }
    }

    /// With `behavior` (kube's `normalizeDesiredReplicasWithBehaviors`):
    /// stabilization per direction, then the rate policies, then min/max.
    #[allow(clippy::too_many_arguments)]
    pub fn normalize_with_behavior(
        &mut self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &ScalingRules,
        down: &ScalingRules,
        now: Instant,
    ) -> Normalized {
        // Stabilization.
        let scaling_up = desired >= current;
        let window = if scaling_up {
            up.stabilization_window
        } else {
            down.stabilization_window
        };
        let obsolete = up.stabilization_window.max(down.stabilization_window);
        let mut stabilized = desired;
        let mut old = None;
        for (i, (rec, t)) in self.recommendations.iter().enumerate() {
            if newer(*t, now, window) {
                stabilized = if scaling_up {
                    stabilized.min(*rec)
                } else {
                    stabilized.max(*rec)
                };
            }
            if older(*t, now, obsolete) {
                old = Some(i);
            }
        }
        match old {
            Some(i) => self.recommendations[i] = (desired, now),
            None => self.recommendations.push((desired, now)),
        }
        let (able_reason, able_message) = if stabilized == desired {
            READY
        } else if scaling_up {
            (
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
        } else {
            (
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
        };
        // Rate policies.
        let (replicas, (limited_reason, limited_message)) = if stabilized > current {
            let limit = scale_up_limit(current, &self.up_events, up, now).max(current);
            let (max_allowed, why) = if max > limit {
                (limit, UP_LIMIT)
            } else {
                (max, TOO_MANY)
            };
            if stabilized > max_allowed {
                (max_allowed, why)
            } else {
                (stabilized, WITHIN)
            }
        } else if stabilized < current {
            let limit = scale_down_limit(current, &self.down_events, down, now).min(current);
            let (min_allowed, why) = if min < limit {
                (limit, DOWN_LIMIT)
            } else {
                (min, TOO_FEW)
            };
            if stabilized < min_allowed {
                (min_allowed, why)
            } else {
                (stabilized, WITHIN)
            }
        } else {
            (stabilized, WITHIN)
        };
        Normalized {
            replicas,
            able_reason,
            able_message,
            limited: replicas != stabilized,
            limited_reason,
            limited_message,
        }
    }

    /// kube's `storeScaleEvent` (only with `behavior`).
    pub fn store_scale_event(
        &mut self,
        up: &ScalingRules,
        down: &ScalingRules,
        previous: i32,
        new: i32,
        now: Instant,
    ) {
        let (events, rules, change) = if new > previous {
            (&mut self.up_events, up, new - previous)
        } else {
            (&mut self.down_events, down, previous - new)
        };
        let longest = rules.policies.iter().map(|p| p.2).max().unwrap_or(0);
        let period = Duration::from_secs(u64::try_from(longest).unwrap_or(0));
        for e in events.iter_mut() {
            if older(e.1, now, period) {
                e.2 = true;
            }
        }
        match events.iter().rposition(|e| e.2) {
            Some(i) => events[i] = (change, now, false),
            None => events.push((change, now, false)),
        }
    }
}

fn changes_in(period_seconds: i32, events: &[(i32, Instant, bool)], now: Instant) -> i32 {
    let period = Duration::from_secs(u64::try_from(period_seconds).unwrap_or(0));
    events
        .iter()
        .filter(|e| newer(e.1, now, period))
        .map(|e| e.0)
        .sum()
}

fn scale_up_limit(
    current: i32,
    events: &[(i32, Instant, bool)],
    rules: &ScalingRules,
    now: Instant,
) -> i32 {
    let pick: fn(i32, i32) -> i32 = match rules.select_policy.as_str() {
        "Disabled" => return current,
        "Min" => std::cmp::min,
        _ => std::cmp::max,
    };
    let mut result: Option<i32> = None;
    for (kind, value, period) in &rules.policies {
        let start = current - changes_in(*period, events, now);
        let proposed = if kind == "Pods" {
            start + value
        } else {
            (f64::from(start) * (1.0 + f64::from(*value) / 100.0)).ceil() as i32
        };
        // kube starts Min from 0 too, so a Min policy set proposes 0
        // before any policy; keep its behaviour.
        result = Some(pick(result.unwrap_or(0), proposed));
    }
    result.unwrap_or(0)
}

fn scale_down_limit(
    current: i32,
    events: &[(i32, Instant, bool)],
    rules: &ScalingRules,
    now: Instant,
) -> i32 {
    let pick: fn(i32, i32) -> i32 = match rules.select_policy.as_str() {
        "Disabled" => return current,
        "Min" => std::cmp::max,
        _ => std::cmp::min,
    };
    let mut result = i32::MAX;
    for (kind, value, period) in &rules.policies {
        let start = current + changes_in(*period, events, now);
        let proposed = if kind == "Pods" {
            start - value
        } else {
            (f64::from(start) * (1.0 - f64::from(*value) / 100.0)) as i32
        };
        result = pick(result, proposed);
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Pods of kube's tests: request 1000m each, Running, Ready since
    /// long before the CPU initialization period, metrics `levels` for
    /// the first pods (the rest have none).
    struct Case {
        requests: Vec<i64>,
        levels: Vec<i64>,
        readiness: Vec<bool>,
        phases: Vec<&'static str>,
        deleting: Vec<bool>,
        hot: Vec<bool>,
    }

    impl Case {
        fn new(levels: &[i64]) -> Case {
            Case {
                requests: vec![1000; levels.len()],
                levels: levels.to_vec(),
                readiness: vec![],
                phases: vec![],
                deleting: vec![],
                hot: vec![],
            }
        }

        fn run(&self, current: i32, target: i32) -> Result<Proposal, String> {
            let now = Timestamp::now();
            let ago = |s: i64| now.checked_sub(jiff::SignedDuration::from_secs(s)).unwrap();
            let pods: Vec<PodState> = self
                .requests
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    // kube's test pods: cool ones started 10 min ago, hot
                    // ones 30 s ago; readiness changed when they started.
                    let start = if self.hot.get(i).copied().unwrap_or(false) {
                        ago(30)
                    } else {
                        ago(600)
                    };
                    PodState {
                        name: format!("pod-{i}"),
                        phase: self.phases.get(i).copied().unwrap_or("Running").into(),
                        deleting: self.deleting.get(i).copied().unwrap_or(false),
                        start_time: Some(start),
                        ready: Some((self.readiness.get(i).copied().unwrap_or(true), start)),
                        request: Ok(*r),
                    }
                })
                .collect();
            let metrics = self
                .levels
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        format!("pod-{i}"),
                        PodMetric {
                            timestamp: now,
                            window: Duration::from_secs(60),
                            value: *v,
                        },
                    )
                })
                .collect();
            let calc = Calculator {
                tolerance: 0.1,
                cpu_initialization_period: Duration::from_secs(120),
                initial_readiness_delay: Duration::from_secs(10),
            };
            calc.resource_replicas(current, target, true, &pods, &metrics, now)
        }
    }

    fn p(replicas: i32, utilization: i32, raw_average: i64) -> Proposal {
        Proposal {
            replicas,
            utilization,
            raw_average,
        }
    }

    #[test]
    fn scale_up() {
        assert_eq!(Case::new(&[300, 500, 700]).run(3, 30), Ok(p(5, 50, 500)));
    }

    #[test]
    fn scale_up_unready_less_scale() {
        let mut c = Case::new(&[300, 500, 700]);
        c.readiness = vec![false, true, true];
        assert_eq!(c.run(3, 30), Ok(p(4, 60, 600)));
    }

    #[test]
    fn scale_up_hot_cpu_less_scale() {
        let mut c = Case::new(&[300, 500, 700]);
        c.hot = vec![true, false, false];
        assert_eq!(c.run(3, 30), Ok(p(4, 60, 600)));
    }

    #[test]
    fn scale_up_unready_no_scale() {
        let mut c = Case::new(&[400, 500, 700]);
        c.readiness = vec![true, false, false];
        assert_eq!(c.run(3, 30), Ok(p(3, 40, 400)));
    }

    #[test]
    fn scale_up_ignores_failed_and_deleted_pods() {
        let mut c = Case::new(&[500, 700]);
        c.requests = vec![1000; 4];
        c.readiness = vec![true, true, false, false];
        c.phases = vec!["Running", "Running", "Failed", "Failed"];
        assert_eq!(c.run(2, 30), Ok(p(4, 60, 600)));
        c.phases = vec!["Running"; 4];
        c.deleting = vec![false, false, true, true];
        assert_eq!(c.run(2, 30), Ok(p(4, 60, 600)));
    }

    #[test]
    fn scale_down() {
        assert_eq!(
            Case::new(&[100, 300, 500, 250, 250]).run(5, 50),
            Ok(p(3, 28, 280))
        );
    }

    #[test]
    fn scale_down_excludes_unready_pods() {
        let mut c = Case::new(&[100, 300, 500, 250, 250]);
        c.readiness = vec![true, true, true, false, false];
        assert_eq!(c.run(5, 50), Ok(p(2, 30, 300)));
    }

    #[test]
    fn scale_down_excludes_unscheduled_pods() {
        let mut c = Case::new(&[100]);
        c.requests = vec![1000; 5];
        c.readiness = vec![true, false, false, false, false];
        c.phases = vec!["Running", "Pending", "Pending", "Pending", "Pending"];
        assert_eq!(c.run(5, 50), Ok(p(1, 10, 100)));
    }

    #[test]
    fn tolerance() {
        let mut c = Case::new(&[1010, 1030, 1020]);
        c.requests = vec![900, 1000, 1100];
        assert_eq!(c.run(3, 100), Ok(p(3, 102, 1020)));
    }

    #[test]
    fn missing_metrics_scale_up_count_as_zero() {
        // kube's TestReplicaCalcMissingMetricsScaleUp: 4 pods, 2 with
        // metrics at 200 % of target: the missing ones count 0 %.
        let mut c = Case::new(&[2000, 2000]);
        c.requests = vec![1000; 4];
        // 200 % measured (ratio 4.0); with the missing two at 0 %, 4000m
        // of 4000m requested = 100 % → ratio 2.0 → ceil(2.0 × 4) = 8.
        assert_eq!(c.run(4, 50), Ok(p(8, 200, 2000)));
    }

    #[test]
    fn a_container_without_request_is_an_error() {
        let now = Timestamp::now();
        let long_ago = now
            .checked_sub(jiff::SignedDuration::from_secs(600))
            .unwrap();
        let pods = vec![PodState {
            name: "web-1".into(),
            phase: "Running".into(),
            deleting: false,
            start_time: Some(long_ago),
            ready: Some((true, long_ago)),
            request: Err("sidecar".into()),
        }];
        let metrics = BTreeMap::from([(
            "web-1".to_string(),
            PodMetric {
                timestamp: now,
                window: Duration::from_secs(60),
                value: 100,
            },
        )]);
        assert_eq!(
            Calculator::default().resource_replicas(1, 50, true, &pods, &metrics, now),
            Err("missing request for cpu in container sidecar of Pod web-1".to_string())
        );
    }

    #[test]
    fn disjoint_metrics_are_an_error() {
        let now = Timestamp::now();
        let pods = vec![PodState {
            name: "pod-0".into(),
            phase: "Running".into(),
            deleting: false,
            start_time: Some(now),
            ready: Some((true, now)),
            request: Ok(1000),
        }];
        let metrics = BTreeMap::from([(
            "an-older-pod-name".to_string(),
            PodMetric {
                timestamp: now,
                window: Duration::from_secs(60),
                value: 100,
            },
        )]);
        let calc = Calculator::default();
        assert_eq!(
            calc.resource_replicas(1, 100, false, &pods, &metrics, now),
            Err("no metrics returned matched known pods".to_string())
        );
    }

    #[test]
    fn plain_average_value() {
        let now = Timestamp::now();
        let pods: Vec<PodState> = (0..3)
            .map(|i| PodState {
                name: format!("pod-{i}"),
                phase: "Running".into(),
                deleting: false,
                start_time: Some(now),
                ready: Some((true, now)),
                request: Err("web".into()),
            })
            .collect();
        // kube's TestReplicaCalcScaleUpCM: 20, 10, 30 against 15 → 4.
        let metrics = [20000, 10000, 30000]
            .iter()
            .enumerate()
            .map(|(i, v)| {
                (
                    format!("pod-{i}"),
                    PodMetric {
                        timestamp: now,
                        window: Duration::from_secs(60),
                        value: *v,
                    },
                )
            })
            .collect();
        let got = Calculator::default()
            .raw_replicas(3, 15000, false, &pods, &metrics, now)
            .unwrap();
        assert_eq!((got.replicas, got.raw_average), (4, 20000));
    }

    #[test]
    fn normalize_without_behavior() {
        let now = Instant::now();
        let mut h = History::default();
        h.record_initial(2, now);
        // Scale-up limited to max(2 × 2, 4) = 4.
        let n = h.normalize(2, 10, 1, 20, Duration::from_secs(300), now);
        assert_eq!(
            (n.replicas, n.limited, n.limited_reason),
            (4, true, "ScaleUpLimit")
        );
        // Above max: TooManyReplicas.
        let n = h.normalize(4, 10, 1, 6, Duration::from_secs(300), now);
        assert_eq!((n.replicas, n.limited_reason), (6, "TooManyReplicas"));
        // Scale-down stabilized by the recent higher recommendations.
        let n = h.normalize(6, 1, 1, 6, Duration::from_secs(300), now);
        assert_eq!((n.replicas, n.able_reason), (6, "ScaleDownStabilized"));
        // With no window, it goes down at once, floored at min.
        let mut h = History::default();
        let n = h.normalize(6, 0, 1, 6, Duration::ZERO, now + Duration::from_secs(1));
        assert_eq!(
            (n.replicas, n.limited_reason, n.able_reason),
            (1, "TooFewReplicas", "ReadyForNewScale")
        );
    }

    #[test]
    fn normalize_with_behavior_policies() {
        let now = Instant::now();
        let up = ScalingRules::default_up();
        let down = ScalingRules::default_down(Duration::ZERO);
        let mut h = History::default();
        // 100 % or 4 pods per 15 s, the larger: from 1 → 5.
        let n = h.normalize_with_behavior(1, 20, 1, 30, &up, &down, now);
        assert_eq!((n.replicas, n.limited_reason), (5, "ScaleUpLimit"));
        h.store_scale_event(&up, &down, 1, 5, now);
        // Within the same period the limit counts from where it started (1).
        let n = h.normalize_with_behavior(5, 20, 1, 30, &up, &down, now + Duration::from_secs(1));
        assert_eq!(n.replicas, 5);
        // A Pods policy of 1 per 60 s when scaling down.
        let down = ScalingRules {
            stabilization_window: Duration::ZERO,
            select_policy: "Max".into(),
            policies: vec![("Pods".into(), 1, 60)],
        };
        let n = h.normalize_with_behavior(5, 1, 1, 30, &up, &down, now + Duration::from_secs(2));
        assert_eq!((n.replicas, n.limited_reason), (4, "ScaleDownLimit"));
        let disabled = ScalingRules {
            select_policy: "Disabled".into(),
            ..down
        };
        let n =
            h.normalize_with_behavior(5, 1, 1, 30, &up, &disabled, now + Duration::from_secs(3));
        assert_eq!(n.replicas, 5);
    }
}
