//! Predicates: which updates of the primary kind start a reconcile.
//!
//! As in controller-runtime, a predicate looks at an update (old and new
//! object) and answers whether it is worth reconciling; creations always
//! pass (nothing to compare with) and deletions never reach the primary's
//! reconciler (the object is gone; use a finalizer to act on deletion).
//! Predicates look at metadata only, so they work for every kind, and they
//! compose with [`Predicate::and`], [`Predicate::or`] and [`Predicate::not`].
//!
//! ```
//! use kubeforge_runtime::predicates::{generation_changed, labels_changed};
//! let p = generation_changed().or(labels_changed());
//! ```

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

type UpdateFn = dyn Fn(&ObjectMeta, &ObjectMeta) -> bool + Send + Sync;

/// A filter on updates: `(old, new) -> reconcile?`.
#[derive(Clone)]
pub struct Predicate(Arc<UpdateFn>);

impl std::fmt::Debug for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Predicate")
    }
}

impl Predicate {
    /// A predicate from a function of the old and new metadata.
    pub fn new(f: impl Fn(&ObjectMeta, &ObjectMeta) -> bool + Send + Sync + 'static) -> Predicate {
        Predicate(Arc::new(f))
    }

    /// Whether an update from `old` to `new` passes.
    pub fn update(&self, old: &ObjectMeta, new: &ObjectMeta) -> bool {
        (self.0)(old, new)
    }

    /// Passes when both pass.
    #[must_use]
    pub fn and(self, other: Predicate) -> Predicate {
        Predicate::new(move |o, n| self.update(o, n) && other.update(o, n))
    }

    /// Passes when either passes.
    #[must_use]
    pub fn or(self, other: Predicate) -> Predicate {
        Predicate::new(move |o, n| self.update(o, n) || other.update(o, n))
    }

    /// Passes when `self` does not.
    #[allow(clippy::should_implement_trait)]
    #[must_use]
    pub fn not(self) -> Predicate {
        Predicate::new(move |o, n| !self.update(o, n))
    }
}

/// Passes when `metadata.generation` changed (a spec change for kinds with a
/// status subresource), or when deletion started (`deletionTimestamp` set),
/// so finalizers still run; status-only and metadata-only updates are
/// filtered out. controller-runtime's `GenerationChangedPredicate`.
pub fn generation_changed() -> Predicate {
    Predicate::new(|o, n| {
        o.generation != n.generation
            || (o.deletion_timestamp.is_none() && n.deletion_timestamp.is_some())
    })
}

/// Passes when `metadata.labels` changed (`LabelChangedPredicate`).
pub fn labels_changed() -> Predicate {
    Predicate::new(|o, n| o.labels != n.labels)
}

/// Passes when `metadata.annotations` changed (`AnnotationChangedPredicate`).
pub fn annotations_changed() -> Predicate {
    Predicate::new(|o, n| o.annotations != n.annotations)
}

/// Passes when `metadata.resourceVersion` changed: drops the no-op updates a
/// relist produces (`ResourceVersionChangedPredicate`).
pub fn resource_version_changed() -> Predicate {
    Predicate::new(|o, n| o.resource_version != n.resource_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(generation: i64, label: &str) -> ObjectMeta {
        ObjectMeta {
            generation: Some(generation),
            labels: Some([("app".to_string(), label.to_string())].into()),
            ..Default::default()
        }
    }

    #[test]
    fn predicates_compare_old_and_new_and_compose() {
        let g = generation_changed();
        assert!(!g.update(&meta(1, "a"), &meta(1, "b")));
        assert!(g.update(&meta(1, "a"), &meta(2, "a")));
        let l = labels_changed();
        assert!(l.update(&meta(1, "a"), &meta(1, "b")));
        assert!(!l.update(&meta(1, "a"), &meta(2, "a")));
        let either = generation_changed().or(labels_changed());
        assert!(either.update(&meta(1, "a"), &meta(1, "b")));
        assert!(!either.update(&meta(1, "a"), &meta(1, "a")));
        let both = generation_changed().and(labels_changed());
        assert!(!both.update(&meta(1, "a"), &meta(2, "a")));
        assert!(both.update(&meta(1, "a"), &meta(2, "b")));
        assert!(
            generation_changed()
                .not()
                .update(&meta(1, "a"), &meta(1, "a"))
        );
        let mut deleting = meta(1, "a");
        deleting.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(g.update(&meta(1, "a"), &deleting));
        assert!(
            annotations_changed()
                .not()
                .update(&meta(1, "a"), &meta(1, "b"))
        );
    }
}
