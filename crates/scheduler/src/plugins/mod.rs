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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! The default plugins take part in every point they implement, as
    //! kube-scheduler's do (a PreFilter/PreScore that is not wired is never
    //! asked whether its Filter/Score can be skipped).

    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use serde_json::json;

    use crate::{CycleOutcome, Input, SchedulerBuilder};

    fn names(list: &[(&'static str, Vec<(String, i64)>)], point: &str) -> Vec<String> {
        list.iter()
            .find(|(p, _)| *p == point)
            .map(|(_, v)| v.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default()
    }

    /// A scheduler core with the default profile, and the runtime it needs.
    fn default_core() -> (tokio::runtime::Runtime, crate::scheduler::SchedulerCore) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let core = SchedulerBuilder::without_client()
            .build_core(rt.handle().clone())
            .unwrap();
        (rt, core)
    }

    #[test]
    fn skippable_points_are_wired_and_still_decide() {
        let (_rt, mut core) = default_core();
        let enabled = core.profile("default-scheduler").unwrap().enabled();
        let pre_filter = names(&enabled, "preFilter");
        let pre_score = names(&enabled, "preScore");
        for p in ["NodePorts", "NodeAffinity", "NodeName"] {
            assert!(pre_filter.contains(&p.to_string()), "{pre_filter:?}");
        }
        for p in ["NodeAffinity", "TaintToleration"] {
            assert!(pre_score.contains(&p.to_string()), "{pre_score:?}");
        }
        let node = |name: &str, extra: serde_json::Value| {
            let mut n = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}});
            if let Some(spec) = extra.get("spec") {
                n["spec"] = spec.clone();
            }
            let n: Node = serde_json::from_value(n).unwrap();
            Input::NodeApply(Arc::new(n))
        };
        let pod = |name: &str, spec: serde_json::Value| {
            let mut spec = spec;
            spec["containers"] = json!([{"name": "c"}]);
            if let Some(ports) = spec.get("ports").cloned() {
                spec["containers"][0]["ports"] = ports;
                spec.as_object_mut().unwrap().remove("ports");
            }
            let p: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "d", "uid": name}, "spec": spec}))
            .unwrap();
            Input::PodApply(Arc::new(p))
        };
        // a PreferNoSchedule taint still steers pods away (PreScore wired)
        core.handle_input(node(
            "soft-tainted",
            json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]}}),
        ));
        core.handle_input(node("clean", json!({})));
        for i in 0..4 {
            core.handle_input(pod(&format!("p{i}"), json!({})));
            assert_eq!(
                core.schedule_one(),
                Some(CycleOutcome::Assumed("clean".into()))
            );
        }
        // a host port in use still rejects the node (NodePorts' PreFilter
        // only skips pods without host ports)
        core.handle_input(pod(
            "web1",
            json!({"nodeName": "clean", "ports": [{"containerPort": 80, "hostPort": 8080}]}),
        ));
        core.handle_input(pod(
            "web2",
            json!({"ports": [{"containerPort": 80, "hostPort": 8080}],
            "tolerations": [{"key": "k", "operator": "Exists"}]}),
        ));
        assert_eq!(
            core.schedule_one(),
            Some(CycleOutcome::Assumed("soft-tainted".into()))
        );
    }

    #[test]
    fn passes_agrees_with_filter() {
        use crate::framework::{CycleState, PodInfo};
        let (_rt, mut core) = default_core();
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for i in 0..24 {
            let mut n = json!({"metadata": {"name": format!("n{i}"), "labels": {
                    "kubernetes.io/hostname": format!("n{i}")}},
                "status": {"allocatable": {"cpu": format!("{}", 1 + next(3)), "memory": "4Gi",
                    "pods": format!("{}", 2 + next(4)), "example.com/gpu": format!("{}", next(2))}}});
            if next(4) > 0 {
                n["metadata"]["labels"]["topology.kubernetes.io/zone"] =
                    json!(format!("z{}", next(3)));
            }
            if next(3) == 0 {
                let effect = ["NoSchedule", "PreferNoSchedule", "NoExecute"][next(3) as usize];
                n["spec"] = json!({"taints": [{"key": "k", "value": "v", "effect": effect}]});
            }
            let n: Node = serde_json::from_value(n).unwrap();
            core.handle_input(Input::NodeApply(Arc::new(n)));
            for j in 0..next(4) {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("e{i}-{j}"), "namespace": "d", "uid": format!("e{i}-{j}"), "labels": {"app": "a"}},
                    "spec": {"nodeName": format!("n{i}"), "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}})).unwrap();
                core.handle_input(Input::PodApply(Arc::new(p)));
            }
        }
        let fw = core.profile("default-scheduler").unwrap().clone();
        let snapshot = core.cache().snapshot();
        let mut checked = [0usize; 2];
        for k in 0..60 {
            let mut spec = json!({"containers": [{"name": "c", "resources": {"requests": {
                "cpu": format!("{}m", 200 * (1 + next(8))), "memory": format!("{}Gi", next(3))}}}]});
            if next(3) == 0 {
                spec["containers"][0]["resources"]["requests"]["example.com/gpu"] = json!("1");
            }
            if next(2) == 0 {
                spec["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
            }
            match next(4) {
                0 => {
                    spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}}])
                }
                1 => {
                    spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z0", "z2"]}]}]}}})
                }
                2 => spec["nodeSelector"] = json!({"topology.kubernetes.io/zone": "z1"}),
                _ => {}
            }
            let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p{k}"), "namespace": "d", "uid": format!("p{k}"), "labels": {"app": "a"}}, "spec": spec})).unwrap();
            let pod = PodInfo::new(Arc::new(p));
            let mut state = CycleState::default();
            let _ = fw.run_pre_filter(&mut state, &pod, snapshot);
            for name in [
                "NodeUnschedulable",
                "TaintToleration",
                "NodeAffinity",
                "NodeResourcesFit",
                "PodTopologySpread",
                "InterPodAffinity",
            ] {
                let f = fw.plugin(name).unwrap().as_filter().unwrap();
                for node in snapshot.nodes() {
                    let full = f.filter(&state, &pod, node);
                    assert_eq!(
                        f.passes(&state, &pod, node).unwrap(),
                        full.is_success(),
                        "{name} on {} for p{k}: {full:?}",
                        node.name
                    );
                    checked[usize::from(full.is_success())] += 1;
                }
            }
        }
        assert!(checked[0] > 500 && checked[1] > 500, "{checked:?}");
    }
}
