//! Owner references: the controller reference that makes an object's
//! children garbage-collected with it and routes their changes back to it
//! ([`ControllerBuilder::owns`](crate::ControllerBuilder::owns)).
//!
//! ```
//! use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
//! use kubeforge_runtime::owner;
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("web".into());
//! cm.metadata.namespace = Some("default".into());
//! cm.metadata.uid = Some("0b6c…".into());
//! let mut dep = Deployment::default();
//! dep.metadata.namespace = Some("default".into());
//! owner::set_controller_reference(&cm, &mut dep.metadata)?;
//! assert!(owner::is_controlled_by(&dep.metadata, &cm));
//! # Ok::<(), owner::OwnerError>(())
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

/// Why an owner reference could not be set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnerError {
    /// The owner has no name or uid yet (it was never created).
    #[error("the owner has no name or uid; create it first")]
    OwnerNotPersisted,
    /// Another object already controls the child.
    #[error("the object is already controlled by {kind} {name}")]
    AlreadyOwned {
        /// The current controller's kind.
        kind: String,
        /// The current controller's name.
        name: String,
    },
    /// A namespaced owner can only own objects in its own namespace.
    #[error(
        "cross-namespace owner references are not allowed: owner in {owner:?}, object in {object:?}"
    )]
    CrossNamespace {
        /// The owner's namespace.
        owner: String,
        /// The object's namespace.
        object: Option<String>,
    },
}

/// The controller owner reference (`controller: true`,
/// `blockOwnerDeletion: true`) pointing at `owner`.
pub fn controller_owner_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    owner.controller_owner_ref(&())
}

/// Make `owner` the controller of the object with metadata `child`, as
/// controller-runtime's `SetControllerReference`: refused when another
/// object controls it or when the namespaces do not allow it; an existing
/// reference to the same owner is replaced.
pub fn set_controller_reference<K: Resource<DynamicType = ()>>(
    owner: &K,
    child: &mut ObjectMeta,
) -> Result<(), OwnerError> {
    let r = controller_owner_ref(owner).ok_or(OwnerError::OwnerNotPersisted)?;
    if let Some(ns) = owner.meta().namespace.as_deref()
        && child.namespace.as_deref() != Some(ns)
    {
        return Err(OwnerError::CrossNamespace {
            owner: ns.to_string(),
            object: child.namespace.clone(),
        });
    }
    let refs = child.owner_references.get_or_insert_with(Vec::new);
    if let Some(other) = refs
        .iter()
        .find(|o| o.controller == Some(true) && o.uid != r.uid)
    {
        return Err(OwnerError::AlreadyOwned {
            kind: other.kind.clone(),
            name: other.name.clone(),
        });
    }
    refs.retain(|o| o.uid != r.uid);
    refs.push(r);
    Ok(())
}

/// Whether `owner` is the controller of the object with metadata `child`.
pub fn is_controlled_by<K: Resource<DynamicType = ()>>(child: &ObjectMeta, owner: &K) -> bool {
    let Some(uid) = owner.meta().uid.as_deref() else {
        return false;
    };
    child
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, ns: &str, uid: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some(ns.into());
        c.metadata.uid = Some(uid.into());
        c
    }

    #[test]
    fn one_controller_same_namespace() {
        let a = cm("a", "ns", "u1");
        let b = cm("b", "ns", "u2");
        let mut child = ObjectMeta {
            namespace: Some("ns".into()),
            ..Default::default()
        };
        assert_eq!(set_controller_reference(&a, &mut child), Ok(()));
        assert_eq!(set_controller_reference(&a, &mut child), Ok(()));
        assert_eq!(child.owner_references.as_ref().map(Vec::len), Some(1));
        assert!(is_controlled_by(&child, &a));
        assert!(matches!(
            set_controller_reference(&b, &mut child),
            Err(OwnerError::AlreadyOwned { .. })
        ));
        let mut elsewhere = ObjectMeta {
            namespace: Some("other".into()),
            ..Default::default()
        };
        assert!(matches!(
            set_controller_reference(&a, &mut elsewhere),
            Err(OwnerError::CrossNamespace { .. })
        ));
        assert_eq!(
            set_controller_reference(&ConfigMap::default(), &mut elsewhere),
            Err(OwnerError::OwnerNotPersisted)
        );
    }
}
