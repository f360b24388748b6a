//! The in-tree plugins, one module each, and their registration by name.

pub(crate) mod helper;

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_resources;
pub mod pod_topology_spread;
pub mod simple;
pub mod taint_toleration;

pub use helper::{decode_args, default_normalize_score, min_max_normalize};

use std::sync::Arc;

use crate::framework::{Plugin, Registry};

fn ok<P: Plugin>(p: P) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(p))
}

fn no_args(name: &str, args: Option<&serde_json::Value>) -> Result<(), String> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::Object(m))
            if m.keys().all(|k| k == "apiVersion" || k == "kind") =>
        {
            Ok(())
        }
        Some(_) => Err(format!("{name} takes no args")),
    }
}

type Factory =
    fn(Option<&serde_json::Value>, &crate::framework::Handle) -> Result<Arc<dyn Plugin>, String>;

pub(crate) fn register_in_tree(r: &mut Registry) {
    // Names are unique here; a duplicate would be a bug caught by the tests.
    let mut reg = |name: &'static str, f: Factory| {
        let _ = r.register(name, f);
    };
    reg("PrioritySort", |a, _| {
        no_args("PrioritySort", a)?;
        ok(simple::PrioritySort)
    });
    reg("SchedulingGates", |a, _| {
        no_args("SchedulingGates", a)?;
        ok(simple::SchedulingGates)
    });
    reg("NodeUnschedulable", |a, _| {
        no_args("NodeUnschedulable", a)?;
        ok(simple::NodeUnschedulable)
    });
    reg("NodeName", |a, _| {
        no_args("NodeName", a)?;
        ok(simple::NodeName)
    });
    reg("NodePorts", |a, _| {
        no_args("NodePorts", a)?;
        ok(simple::NodePorts)
    });
    reg("TaintToleration", |a, _| {
        no_args("TaintToleration", a)?;
        ok(taint_toleration::TaintToleration)
    });
    reg("NodeAffinity", |_, _| ok(node_affinity::NodeAffinity));
    reg("NodeResourcesFit", |a, h| {
        ok(node_resources::NodeResourcesFit::new(
            a,
            h.extender_ignored_resources.clone(),
        )?)
    });
    reg("NodeResourcesBalancedAllocation", |a, _| {
        ok(node_resources::BalancedAllocation::new(a)?)
    });
    reg("ImageLocality", |a, _| {
        no_args("ImageLocality", a)?;
        ok(image_locality::ImageLocality)
    });
    reg("PodTopologySpread", |_, _| {
        ok(pod_topology_spread::PodTopologySpread)
    });
    reg("InterPodAffinity", |a, _| {
        ok(inter_pod_affinity::InterPodAffinity::new(a)?)
    });
    reg("DefaultPreemption", |a, h| {
        ok(default_preemption::DefaultPreemption::new(a, h)?)
    });
    reg("Coscheduling", |a, h| {
        ok(coscheduling::Coscheduling::new(a, h)?)
    });
    reg("DefaultBinder", |a, h| {
        no_args("DefaultBinder", a)?;
        ok(default_binder::DefaultBinder::new(h.client.clone()))
    });
}
