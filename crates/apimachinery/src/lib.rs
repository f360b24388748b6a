//! Pure Kubernetes API-machinery algorithms, with no I/O.
//!
//! This crate is the room for the parts of `k8s.io/apimachinery` (and the
//! strategic-merge-patch metadata of `k8s.io/api`) that are plain functions of
//! their input: parsing and matching label and field selectors, applying a
//! strategic merge patch to a JSON object, and validating object names and
//! metadata with the same messages the Kubernetes API server returns. It is
//! shared by the embedded API server and, later, by controllers and the
//! scheduler, so nothing here touches storage, the network or the clock; every
//! function works on `&str` or on `serde_json::Value` and returns a value or a
//! typed error.
//!
//! - [`labels`]: label selectors (`app=web,tier in (a,b),!canary`).
//! - [`fields`]: field selectors (`spec.nodeName=node-1,status.phase!=Failed`).
//! - [`strategic`]: strategic merge patch for the built-in kinds.
//! - [`names`]: name and object-metadata validation.
//! - [`quantity`]: resource quantities (`100m`, `500Mi`, `2e3`).
//! - [`gofmt`]: Go's `%q` quoting, as Kubernetes messages print values.
//! - [`disruption`]: PodDisruptionBudget conditions (eviction and the
//!   disruption controller).
//!
//! ```
//! use kubeforge_apimachinery::labels::Selector;
//! use kubeforge_apimachinery::strategic::strategic_merge_patch;
//! use serde_json::json;
//!
//! let pod = json!({
//!     "metadata": {"name": "web", "labels": {"app": "web", "tier": "frontend"}},
//!     "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}
//! });
//! let selector = Selector::parse("app=web, tier in (frontend,backend)").unwrap();
//! assert!(selector.matches(&pod.pointer("/metadata/labels")));
//!
//! // Containers merge by name: only the image of "app" changes.
//! let patch = json!({"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
//! let patched = strategic_merge_patch(&pod, &patch, "", "Pod").unwrap();
//! assert_eq!(patched["spec"]["containers"][0]["image"], "nginx:1.27");
//! assert_eq!(patched["spec"]["containers"].as_array().map(Vec::len), Some(1));
//! ```

pub mod disruption;
pub mod expansion;
pub mod fields;
pub mod gofmt;
pub mod labels;
pub mod names;
pub mod net;
pub mod quantity;
pub mod strategic;

mod error;

pub use error::SelectorError;
