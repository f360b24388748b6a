//! Small helpers shared by the in-tree plugins (kube-scheduler's
//! `plugins/helper`).

use crate::framework::{MAX_NODE_SCORE, NodeScore};

/// Scale scores to 0..=`max_priority` by the highest one; `reverse` flips
/// them (fewer is better). All zero stays zero (or becomes max when reversed).
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [NodeScore]) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    if max == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max_priority;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let mut v = max_priority * s.score / max;
        if reverse {
            v = max_priority - v;
        }
        s.score = v;
    }
}

/// Min-max scale to 0..=100 (InterPodAffinity's normalization).
pub fn min_max_normalize(scores: &mut [NodeScore]) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
    let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
    let diff = max - min;
    for s in scores.iter_mut() {
        s.score = if diff > 0 {
            MAX_NODE_SCORE * (s.score - min) / diff
        } else {
            0
        };
    }
}

/// Decode plugin args (`None` → defaults) with a message naming the problem.
pub fn decode_args<T: serde::de::DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
) -> Result<T, String> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| e.to_string()),
    }
}

/// Implements `Plugin` for a plugin type: its name and the extension points
/// it takes part in.
macro_rules! plugin {
    ($ty:ty, $name:expr, [$($acc:ident),*] $(, events = $ev:expr)?) => {
        impl $crate::framework::Plugin for $ty {
            fn name(&self) -> &str {
                $name
            }
            $(
                fn events_to_register(&self) -> Vec<$crate::framework::ClusterEvent> {
                    $ev
                }
            )?
            $(plugin!(@acc $acc);)*
        }
    };
    (@acc pre_enqueue) => { fn as_pre_enqueue(&self) -> Option<&dyn $crate::framework::PreEnqueuePlugin> { Some(self) } };
    (@acc queue_sort) => { fn as_queue_sort(&self) -> Option<&dyn $crate::framework::QueueSortPlugin> { Some(self) } };
    (@acc pre_filter) => { fn as_pre_filter(&self) -> Option<&dyn $crate::framework::PreFilterPlugin> { Some(self) } };
    (@acc filter) => { fn as_filter(&self) -> Option<&dyn $crate::framework::FilterPlugin> { Some(self) } };
    (@acc post_filter) => { fn as_post_filter(&self) -> Option<&dyn $crate::framework::PostFilterPlugin> { Some(self) } };
    (@acc pre_score) => { fn as_pre_score(&self) -> Option<&dyn $crate::framework::PreScorePlugin> { Some(self) } };
    (@acc score) => { fn as_score(&self) -> Option<&dyn $crate::framework::ScorePlugin> { Some(self) } };
    (@acc reserve) => { fn as_reserve(&self) -> Option<&dyn $crate::framework::ReservePlugin> { Some(self) } };
    (@acc permit) => { fn as_permit(&self) -> Option<&dyn $crate::framework::PermitPlugin> { Some(self) } };
    (@acc pre_bind) => { fn as_pre_bind(&self) -> Option<&dyn $crate::framework::PreBindPlugin> { Some(self) } };
    (@acc bind) => { fn as_bind(&self) -> Option<&dyn $crate::framework::BindPlugin> { Some(self) } };
    (@acc post_bind) => { fn as_post_bind(&self) -> Option<&dyn $crate::framework::PostBindPlugin> { Some(self) } };
}
pub(crate) use plugin;
