//! Per-object exponential backoff after failed reconciles:
//! controller-runtime's default `ItemExponentialFailureRateLimiter`
//! (5 ms doubling per consecutive failure, capped at 1000 s), forgotten on
//! success.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use crate::sync::lock;

/// Base and cap of the per-object backoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// Delay after the first failure.
    pub base: Duration,
    /// Largest delay.
    pub max: Duration,
}

impl Default for BackoffConfig {
    /// 5 ms → 1000 s, as controller-runtime.
    fn default() -> Self {
        BackoffConfig {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
        }
    }
}

impl BackoffConfig {
    /// The delay after `failures` earlier consecutive failures:
    /// `base * 2^failures`, at most `max`.
    pub fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.checked_pow(failures.min(31)).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .map_or(self.max, |d| d.min(self.max))
    }
}

/// Consecutive failures per item.
pub(crate) struct ItemBackoff<T> {
    config: BackoffConfig,
    failures: Mutex<HashMap<T, u32>>,
}

impl<T: Hash + Eq> ItemBackoff<T> {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        ItemBackoff {
            config,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Record a failure of `item`; the delay before its retry.
    pub(crate) fn when(&self, item: T) -> Duration {
        let mut f = lock(&self.failures);
        let n = f.entry(item).or_insert(0);
        let d = self.config.delay(*n);
        *n = n.saturating_add(1);
        d
    }

    /// Forget `item`'s failures (it succeeded, or is gone).
    pub(crate) fn forget(&self, item: &T) {
        lock(&self.failures).remove(item);
    }

    /// Consecutive failures recorded for `item`.
    #[cfg(test)]
    pub(crate) fn failures(&self, item: &T) -> u32 {
        lock(&self.failures).get(item).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_5ms_caps_at_1000s_and_resets() {
        let b = ItemBackoff::new(BackoffConfig::default());
        let ms: Vec<u128> = (0..5).map(|_| b.when("a").as_millis()).collect();
        assert_eq!(ms, [5, 10, 20, 40, 80]);
        assert_eq!(b.when("b"), Duration::from_millis(5));
        for _ in 0..40 {
            b.when("a");
        }
        assert_eq!(b.when("a"), Duration::from_secs(1000));
        b.forget(&"a");
        assert_eq!(b.failures(&"a"), 0);
        assert_eq!(b.when("a"), Duration::from_millis(5));
    }
}
