//! Decision latency of the RBAC authorizer as bindings grow: 1k, 10k and
//! 100k RoleBindings over 10k Roles (5 rules each) in 1,000 namespaces,
//! each binding naming one user and one of 1,000 groups. Each decision is
//! a random user's request in a random namespace (allowed about half the
//! time), timed one by one; prints p50/p99/max in nanoseconds.
//!
//! Run: `cargo bench -p kubeforge-authz --bench decide`

// The allocator the kubeforge binary runs with.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::time::Instant;

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeforge_authz::rbac::{RbacAuthorizer, RbacPolicy};
use kubeforge_authz::{Attributes, Authorizer, UserInfo};

const ROLES: usize = 10_000;
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

fn meta(name: String, ns: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(ns),
        ..ObjectMeta::default()
    }
}

fn policy(bindings: usize) -> RbacPolicy {
    let resources = ["pods", "configmaps", "secrets", "services", "deployments"];
    let roles: Vec<Role> = (0..ROLES)
        .map(|i| Role {
            metadata: meta(format!("role-{i}"), format!("ns-{}", i % NAMESPACES)),
            rules: Some(
                resources
                    .iter()
                    .enumerate()
                    .map(|(k, r)| PolicyRule {
                        api_groups: Some(vec![if k == 4 { "apps" } else { "" }.into()]),
                        resources: Some(vec![(*r).into()]),
                        verbs: vec!["get".into(), "list".into(), "watch".into()],
                        ..PolicyRule::default()
                    })
                    .collect(),
            ),
        })
        .collect();
    let rbs: Vec<RoleBinding> = (0..bindings)
        .map(|i| {
            let role = i % ROLES;
            RoleBinding {
                metadata: meta(format!("rb-{i}"), format!("ns-{}", role % NAMESPACES)),
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: format!("role-{role}"),
                },
                subjects: Some(vec![
                    Subject {
                        kind: "User".into(),
                        name: format!("user-{i}"),
                        ..Subject::default()
                    },
                    Subject {
                        kind: "Group".into(),
                        name: format!("group-{}", i % GROUPS),
                        ..Subject::default()
                    },
                ]),
            }
        })
        .collect();
    RbacPolicy::build(&roles, &[], &rbs, &[])
}

fn main() {
    println!("bindings  build_ms  p50_ns  p99_ns  max_ns  allowed");
    for bindings in [1_000, 10_000, 100_000] {
        let t = Instant::now();
        let z = RbacAuthorizer::new(policy(bindings));
        let build = t.elapsed();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let requests: Vec<Attributes> = (0..1024)
            .map(|_| {
                let i = rng.next(bindings);
                let role = i % ROLES;
                // Half in the binding's namespace, half elsewhere.
                let ns = if rng.next(2) == 0 {
                    role % NAMESPACES
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
                Attributes::resource(
                    user,
                    "list",
                    &format!("ns-{ns}"),
                    "",
                    "v1",
                    "secrets",
                    "",
                    "",
                )
            })
            .collect();
        let mut samples = Vec::with_capacity(DECISIONS);
        let mut allowed = 0usize;
        for k in 0..DECISIONS {
            let a = &requests[k % requests.len()];
            let t = Instant::now();
            let d = black_box(z.authorize(black_box(a)));
            samples.push(t.elapsed().as_nanos() as u64);
            allowed += usize::from(d.allowed());
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
        println!(
            "{bindings:>8}  {:>8}  {:>6}  {:>6}  {:>6}  {:.2}",
            build.as_millis(),
            at(0.50),
            at(0.99),
            samples[samples.len() - 1],
            allowed as f64 / DECISIONS as f64
        );
    }
}
