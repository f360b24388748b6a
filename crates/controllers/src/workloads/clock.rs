//! Where "now" comes from for the time-driven controllers (CronJob), so
//! tests move time instead of sleeping.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

/// A source of "now".
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// The longest a controller should wait before looking at the clock
    /// again (`None`: sleep until the next event it computed).
    fn max_wait(&self) -> Option<Duration> {
        None
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that moves only when told to; controllers using it look at it
/// every 20 ms of real time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        let span = jiff::SignedDuration::try_from(by).unwrap_or(jiff::SignedDuration::MAX);
        *now = now.saturating_add(span).unwrap_or(*now);
    }

    /// Set the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn max_wait(&self) -> Option<Duration> {
        Some(Duration::from_millis(20))
    }
}
