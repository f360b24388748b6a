//! Decision latency of kubeforge's access-policy authorizer: 10k
//! ClusterAccessRoles in inheritance chains of depth 5 (each role's parent
//! is the one before it, five to a chain), and 1k, 10k, 50k and 100k
//! AccessBindings over 1,000 namespaces, each naming one user and one of
//! 1,000 groups; a third carry a time window (09:00–17:00 or all day, in
//! Europe/Berlin), a quarter a source CIDR, a tenth deny. Each decision is
//! a random user's request (through `Authorizer::authorize`, so it reads
//! the clock) from a random address, timed one by one; prints p50/p99/max
//! in nanoseconds.
//!
//! Run: `cargo bench -p kubeforge-authz --bench access`

// The allocator the kubeforge binary runs with.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use kubeforge_authz::access::{AccessAuthorizer, AccessPolicy, BindingObject, RoleObject};
use kubeforge_authz::rbac::RbacPolicy;
use kubeforge_authz::{Attributes, Authorizer, UserInfo};
use serde_json::json;

const ROLES: usize = 10_000;
const DEPTH: usize = 5;
const NAMESPACES: usize = 1_000;
const GROUPS: usize = 1_000;
const DECISIONS: usize = 200_000;

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn roles() -> Vec<RoleObject> {
    let resources = ["pods", "configmaps", "secrets", "services", "deployments"];
    (0..ROLES)
        .map(|i| {
            let r = resources[i % resources.len()];
            let group = if r == "deployments" { "apps" } else { "" };
            let parents = if i % DEPTH == 0 {
                json!([])
            } else {
                json!([{"name": format!("role-{}", i - 1)}])
            };
            let obj = json!({"metadata": {"name": format!("role-{i}")}, "spec": {
                "rules": [{"apiGroups": [group], "resources": [r], "verbs": ["get", "list", "watch"]}],
                "parents": parents}});
            RoleObject::from_value(&obj, false).expect("role")
        })
        .collect()
}

fn bindings(n: usize) -> Vec<BindingObject> {
    (0..n)
        .map(|i| {
            let mut conditions = json!({});
            if i % 3 == 0 {
                let (start, end) = if i % 2 == 0 { ("09:00", "17:00") } else { ("00:00", "24:00") };
                conditions["timeWindows"] = json!([{"days": ["Mon", "Tue", "Wed", "Thu", "Fri"],
                    "start": start, "end": end, "timeZone": "Europe/Berlin"}]);
            }
            if i % 4 == 0 {
                conditions["sourceCIDRs"] = json!(["10.0.0.0/8", "192.168.0.0/16"]);
            }
            let obj = json!({"metadata": {"name": format!("b-{i}"), "namespace": format!("ns-{}", i % NAMESPACES)},
                "spec": {
                    "roleRef": {"kind": "ClusterAccessRole", "name": format!("role-{}", i % ROLES)},
                    "effect": if i % 10 == 0 { "Deny" } else { "Allow" },
                    "subjects": [{"kind": "User", "name": format!("user-{i}")},
                                 {"kind": "Group", "name": format!("group-{}", i % GROUPS)}],
                    "conditions": conditions}});
            BindingObject::from_value(&obj, true).expect("binding")
        })
        .collect()
}

fn main() {
    let roles = roles();
    println!("bindings  build_ms  p50_ns  p99_ns  max_ns  allowed  denied");
    for n in [1_000, 10_000, 50_000, 100_000] {
        let bs = bindings(n);
        let t = Instant::now();
        let z = AccessAuthorizer::new(AccessPolicy::build(
            &roles,
            &bs,
            &[],
            &RbacPolicy::default(),
        ));
        let build = t.elapsed();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let resources = ["pods", "configmaps", "secrets", "services"];
        let requests: Vec<Attributes> = (0..1024)
            .map(|_| {
                let i = rng.next(n);
                let ns = if rng.next(2) == 0 {
                    i % NAMESPACES
                } else {
                    rng.next(NAMESPACES)
                };
                let user = UserInfo::new(
                    &format!("user-{i}"),
                    [
                        format!("group-{}", rng.next(GROUPS)),
                        "system:authenticated".into(),
                    ],
                );
                let mut a = Attributes::resource(
                    user,
                    "list",
                    &format!("ns-{ns}"),
                    "",
                    "v1",
                    resources[rng.next(resources.len())],
                    "",
                    "",
                );
                a.source = Some(if rng.next(2) == 0 {
                    std::net::Ipv4Addr::new(10, 1, 2, 3).into()
                } else {
                    std::net::Ipv4Addr::new(172, 16, 0, 9).into()
                });
                a
            })
            .collect();
        let mut samples = Vec::with_capacity(DECISIONS);
        let (mut allowed, mut denied) = (0usize, 0usize);
        for k in 0..DECISIONS {
            let a = &requests[k % requests.len()];
            let t = Instant::now();
            let d = black_box(z.authorize(black_box(a)));
            samples.push(t.elapsed().as_nanos() as u64);
            allowed += usize::from(d.allowed());
            denied += usize::from(matches!(d, kubeforge_authz::Decision::Deny { .. }));
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
        println!(
            "{n:>8}  {:>8}  {:>6}  {:>6}  {:>6}  {:.2}     {:.2}",
            build.as_millis(),
            at(0.50),
            at(0.99),
            samples[samples.len() - 1],
            allowed as f64 / DECISIONS as f64,
            denied as f64 / DECISIONS as f64,
        );
    }
}
