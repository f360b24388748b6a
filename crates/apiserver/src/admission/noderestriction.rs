//! The NodeRestriction admission plugin, as kube-apiserver's
//! (`plugin/pkg/admission/noderestriction`): what the Node authorizer lets
//! a node write, narrowed to its own things. A node may
//! - create and update only its own Node, never set or change its taints,
//!   `node-restriction.kubernetes.io/` labels, or `kubernetes.io`/`k8s.io`
//!   labels other than the kubelet's own (hostname, os, arch, zone, …);
//! - create only mirror pods (none here: the agent creates none), update
//!   the status of, delete and evict only pods bound to it, and not change
//!   their labels through status;
//! - create its own Lease only;
//! - ask only for ServiceAccount tokens bound to a pod on it.
//!
//! Refusals are 403 `<resource> "<name>" is forbidden: <why>` in kube's
//! words.

use std::collections::{BTreeMap, BTreeSet};

use kubeforge_authz::node::{NODE_LEASE_NAMESPACE, node_identity};
use serde_json::Value;

use super::{Operation, Request, labels_of};
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult, GroupResource};

const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The label keys a kubelet may set on its Node (kube's
/// `kubeletapis.IsKubeletLabel`), besides any in the
/// `kubelet.kubernetes.io` and `node.kubernetes.io` namespaces.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "kubernetes.io/os",
    "kubernetes.io/arch",
];

fn forbidden(ctx: &Ctx<'_>, name: &str, why: String) -> ApiError {
    ApiError::forbidden(
        GroupResource {
            group: &ctx.def.group,
            resource: &ctx.def.plural,
        },
        name,
        &why,
    )
}

/// The requesting node's name, when the user is one.
fn requesting_node<'a>(ctx: &'a Ctx<'_>) -> Option<&'a str> {
    node_identity(&ctx.user).filter(|n| !n.is_empty())
}

fn node_name_of(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The stored pod `name` in the request's namespace.
fn stored_pod(ctx: &Ctx<'_>, name: &str) -> ApiResult<Value> {
    let key = format!(
        "/registry/core/pods/{}/{name}",
        ctx.ns.as_deref().unwrap_or_default()
    );
    let kv = ctx.server.store().get(&key).ok_or_else(|| {
        ApiError::not_found(
            GroupResource {
                group: "",
                resource: "pods",
            },
            name,
        )
    })?;
    serde_json::from_slice(&kv.value).map_err(|e| ApiError::internal(e.to_string()))
}

/// Creates and updates.
pub(super) fn validate(ctx: &Ctx<'_>, r: &Request<'_>, obj: Option<&Value>) -> ApiResult<()> {
    let Some(node) = requesting_node(ctx) else {
        return Ok(());
    };
    let Some(obj) = obj else {
        return Ok(());
    };
    match (
        ctx.def.group.as_str(),
        ctx.def.plural.as_str(),
        r.subresource,
    ) {
        ("", "pods", "") => match r.operation {
            Operation::Create => {
                let mirror = obj
                    .pointer("/metadata/annotations")
                    .and_then(|a| a.get(MIRROR_POD_ANNOTATION))
                    .is_some();
                if !mirror {
                    return Err(forbidden(
                        ctx,
                        r.name,
                        format!(
                            "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
                        ),
                    ));
                }
                // Mirror pods come from static pod manifests, which the
                // agent does not read: refuse what kube would have to
                // check further.
                Err(forbidden(
                    ctx,
                    r.name,
                    format!(
                        "node {node:?} can only create pods with an owner reference set to itself"
                    ),
                ))
            }
            _ => Err(forbidden(
                ctx,
                r.name,
                format!(
                    "unexpected operation \"UPDATE\", node {node:?} can only create and delete mirror pods"
                ),
            )),
        },
        ("", "pods", "status") => {
            let old = r.old.unwrap_or(&Value::Null);
            if node_name_of(old) != node {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!(
                        "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                    ),
                ));
            }
            if old.pointer("/metadata/labels") != obj.pointer("/metadata/labels") {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!("node {node:?} cannot update labels through pod status"),
                ));
            }
            Ok(())
        }
        ("", "nodes", _) => admit_node(ctx, r, obj, node),
        ("coordination.k8s.io", "leases", "")
            if r.operation == Operation::Create
                && (ctx.ns.as_deref() != Some(NODE_LEASE_NAMESPACE) || r.name != node) =>
        {
            Err(forbidden(
                ctx,
                r.name,
                "can only access node lease with the same name as the requesting node".into(),
            ))
        }
        _ => Ok(()),
    }
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn in_domain(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

fn is_kubelet_label(key: &str) -> bool {
    let ns = label_namespace(key);
    KUBELET_LABELS.contains(&key)
        || in_domain(ns, "kubelet.kubernetes.io")
        || in_domain(ns, "node.kubernetes.io")
}

/// kube's `getForbiddenLabels` over the keys added, removed or changed.
fn forbidden_labels(new: &BTreeMap<String, String>, old: &BTreeMap<String, String>) -> Vec<String> {
    let changed: BTreeSet<&String> = new
        .keys()
        .chain(old.keys())
        .filter(|k| new.get(*k) != old.get(*k))
        .collect();
    changed
        .into_iter()
        .filter(|k| {
            let ns = label_namespace(k);
            let restricted = in_domain(ns, "node-restriction.kubernetes.io");
            let kubernetes = in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io");
            restricted || (kubernetes && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

fn admit_node(ctx: &Ctx<'_>, r: &Request<'_>, obj: &Value, node: &str) -> ApiResult<()> {
    if r.name != node {
        return Err(forbidden(
            ctx,
            r.name,
            format!("node {node:?} is not allowed to modify node {:?}", r.name),
        ));
    }
    match r.operation {
        Operation::Create => {
            if obj
                .pointer("/spec/configSource")
                .is_some_and(|c| !c.is_null())
            {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!(
                        "node {node:?} is not allowed to create pods with a non-nil configSource"
                    ),
                ));
            }
            let bad = forbidden_labels(&labels_of(obj).unwrap_or_default(), &BTreeMap::new());
            if !bad.is_empty() {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!(
                        "node {node:?} is not allowed to set the following labels: {}",
                        bad.join(", ")
                    ),
                ));
            }
            Ok(())
        }
        Operation::Update => {
            let old = r.old.unwrap_or(&Value::Null);
            let taints = |v: &Value| {
                v.pointer("/spec/taints")
                    .filter(|t| !t.as_array().is_some_and(Vec::is_empty))
                    .cloned()
                    .unwrap_or(Value::Null)
            };
            if taints(obj) != taints(old) {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!("node {node:?} is not allowed to modify taints"),
                ));
            }
            let bad = forbidden_labels(
                &labels_of(obj).unwrap_or_default(),
                &r.old.and_then(labels_of).unwrap_or_default(),
            );
            if !bad.is_empty() {
                return Err(forbidden(
                    ctx,
                    r.name,
                    format!("is not allowed to modify labels: {}", bad.join(", ")),
                ));
            }
            Ok(())
        }
        Operation::Delete => Ok(()),
    }
}

/// A pod DELETE (or eviction): a node deletes only its own pods.
pub(crate) fn admit_pod_removal(ctx: &Ctx<'_>, name: &str, eviction: bool) -> ApiResult<()> {
    let Some(node) = requesting_node(ctx) else {
        return Ok(());
    };
    if !(ctx.def.group.is_empty() && ctx.def.plural == "pods") {
        return Ok(());
    }
    let pod = stored_pod(ctx, name)?;
    if node_name_of(&pod) == node {
        return Ok(());
    }
    let why = if eviction {
        format!("node {node} can only evict pods with spec.nodeName set to itself")
    } else {
        format!("node {node:?} can only delete pods with spec.nodeName set to itself")
    };
    Err(forbidden(ctx, name, why))
}

/// A TokenRequest from a node must be bound to a pod on that node.
pub(crate) fn admit_token_request(ctx: &Ctx<'_>, name: &str, request: &Value) -> ApiResult<()> {
    let Some(node) = requesting_node(ctx) else {
        return Ok(());
    };
    let bound = request.pointer("/spec/boundObjectRef");
    let field = |f: &str| {
        bound
            .and_then(|b| b.get(f))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    if bound.is_none_or(Value::is_null)
        || field("apiVersion") != "v1"
        || field("kind") != "Pod"
        || field("name").is_empty()
    {
        return Err(forbidden(
            ctx,
            name,
            "node requested token not bound to a pod".into(),
        ));
    }
    if field("uid").is_empty() {
        return Err(forbidden(
            ctx,
            name,
            "node requested token with a pod binding without a uid".into(),
        ));
    }
    let pod = stored_pod(ctx, field("name"))?;
    let uid = pod
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if field("uid") != uid {
        return Err(forbidden(
            ctx,
            name,
            format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                field("uid")
            ),
        ));
    }
    if node_name_of(&pod) != node {
        return Err(forbidden(
            ctx,
            name,
            "node requested token bound to a pod scheduled on a different node".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn nodes_keep_to_the_kubelets_labels() {
        let old = pairs(&[("kubernetes.io/hostname", "n1"), ("team", "a")]);
        let new = pairs(&[
            ("kubernetes.io/hostname", "n1"),
            ("team", "b"),
            ("topology.kubernetes.io/zone", "z"),
            (
                "node.kubernetes.io/exclude-from-external-load-balancers",
                "",
            ),
            ("node-restriction.kubernetes.io/dedicated", "db"),
            ("node-role.kubernetes.io/control-plane", ""),
            ("example.k8s.io/x", "1"),
        ]);
        assert_eq!(
            forbidden_labels(&new, &old),
            [
                "example.k8s.io/x",
                "node-restriction.kubernetes.io/dedicated",
                "node-role.kubernetes.io/control-plane",
            ]
        );
        // Removing one is changing it.
        assert_eq!(
            forbidden_labels(
                &BTreeMap::new(),
                &pairs(&[("node-restriction.kubernetes.io/x", "")])
            ),
            ["node-restriction.kubernetes.io/x"]
        );
    }
}
