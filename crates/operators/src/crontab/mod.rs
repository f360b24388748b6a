//! The CronTab controller: creates a `batch/v1` Job owned by the `CronTab`
//! at each time `spec.cronSpec` names, with CronJob's concurrency policies,
//! missed-schedule handling and history limits.

pub mod controller;
pub mod jobs;
pub mod schedule;
pub mod types;

pub use types::{ConcurrencyPolicy, CronTab, CronTabSpec, CronTabStatus};
