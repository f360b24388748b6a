//! `metav1.Condition` lists as apimachinery's `meta.SetStatusCondition`
//! keeps them: one condition per type; `lastTransitionTime` changes only
//! when the status flips; reason, message and `observedGeneration` are
//! always updated.
//!
//! ```
//! use kubeforge_runtime::conditions::{self, ConditionStatus};
//! let mut conds = Vec::new();
//! let changed = conditions::set_condition(
//!     &mut conds,
//!     conditions::new("Available", ConditionStatus::True, "DeploymentReady", "3/3 ready").observed_generation(2),
//! );
//! assert!(changed);
//! assert!(conditions::is_true(&conds, "Available"));
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

impl ConditionStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// A condition to set; see [`new`].
#[derive(Clone, Debug)]
pub struct NewCondition {
    type_: String,
    status: ConditionStatus,
    reason: String,
    message: String,
    observed_generation: Option<i64>,
}

/// A condition of `type_` with `status`, a CamelCase `reason` and a
/// human-readable `message`.
pub fn new(
    type_: &str,
    status: impl Into<ConditionStatus>,
    reason: &str,
    message: &str,
) -> NewCondition {
    NewCondition {
        type_: type_.to_string(),
        status: status.into(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: None,
    }
}

impl NewCondition {
    /// The `metadata.generation` this condition was computed from.
    #[must_use]
    pub fn observed_generation(mut self, generation: impl Into<Option<i64>>) -> Self {
        self.observed_generation = generation.into();
        self
    }
}

/// Set `new` in `conditions`; whether anything changed (so a status write is
/// needed). `lastTransitionTime` is now for a new condition or a status flip,
/// and kept otherwise.
pub fn set_condition(conditions: &mut Vec<Condition>, new: NewCondition) -> bool {
    set_condition_at(conditions, new, Timestamp::now())
}

/// [`set_condition`] with an explicit "now" (for tests and injected clocks).
pub fn set_condition_at(
    conditions: &mut Vec<Condition>,
    new: NewCondition,
    now: Timestamp,
) -> bool {
    let status = new.status.as_str();
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => {
            conditions.push(Condition {
                type_: new.type_,
                status: status.to_string(),
                reason: new.reason,
                message: new.message,
                observed_generation: new.observed_generation,
                last_transition_time: Time(now),
            });
            true
        }
        Some(c) => {
            let mut changed = false;
            if c.status != status {
                c.status = status.to_string();
                c.last_transition_time = Time(now);
                changed = true;
            }
            if c.reason != new.reason {
                c.reason = new.reason;
                changed = true;
            }
            if c.message != new.message {
                c.message = new.message;
                changed = true;
            }
            if c.observed_generation != new.observed_generation {
                c.observed_generation = new.observed_generation;
                changed = true;
            }
            changed
        }
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Remove the condition of `type_`; whether it was there.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_flip() {
        let t0 = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let t1 = Timestamp::from_second(2_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let t2 = Timestamp::from_second(3_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let mut c = Vec::new();
        assert!(set_condition_at(
            &mut c,
            new("Ready", false, "Creating", "0/3").observed_generation(Some(1)),
            t0
        ));
        // Same status, new message and generation: changed, time kept.
        assert!(set_condition_at(
            &mut c,
            new("Ready", false, "Creating", "1/3").observed_generation(Some(2)),
            t1
        ));
        assert_eq!(c[0].last_transition_time.0, t0);
        assert_eq!(c[0].observed_generation, Some(2));
        assert_eq!(c[0].message, "1/3");
        // Nothing new: unchanged.
        assert!(!set_condition_at(
            &mut c,
            new("Ready", false, "Creating", "1/3").observed_generation(Some(2)),
            t1
        ));
        // Flip: time moves.
        assert!(set_condition_at(
            &mut c,
            new("Ready", true, "Ready", "3/3").observed_generation(Some(2)),
            t2
        ));
        assert_eq!(c[0].last_transition_time.0, t2);
        assert!(is_true(&c, "Ready"));
        assert_eq!(c.len(), 1);
        assert!(remove(&mut c, "Ready"));
        assert!(find(&c, "Ready").is_none());
    }
}
