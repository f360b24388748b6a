//! The access-policy bench's policies (`crates/authz/benches/access.rs`:
//! 10k roles in parent chains of depth 5; bindings over 1,000 namespaces,
//! each naming one user and one of 1,000 groups; a third with a weekday
//! time window, a quarter with source CIDRs, a tenth Deny) decided by
//! kubeforge's `AccessAuthorizer` and, in the same run, by `cedar-policy`.
//!
//! The Cedar form: one policy per binding (`permit`, or `forbid` for Deny)
//! whose condition is the binding's subjects, its namespace, the effective
//! rules of its role (its own and its parents', as a disjunction), and its
//! conditions — the client address with Cedar's `ip().isInRange()`, the
//! time as `context.day`/`context.minute` in the window's zone, computed by
//! the caller (Cedar has no time zones). Users are entities in their group.
//! Each decision is timed alone; prints p50/p99 in nanoseconds.

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::str::FromStr;
use std::time::Instant;

use cedar_policy::{
    Authorizer, Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, PolicySet, Request,
};
use kubeforge_authz::access::{AccessAuthorizer, AccessPolicy, BindingObject, RoleObject};
use kubeforge_authz::rbac::RbacPolicy;
use kubeforge_authz::{Attributes, Authorizer as _, UserInfo};
use serde_json::json;

const ROLES: usize = 10_000;
const DEPTH: usize = 5;
const NAMESPACES: usize = 1_000;
const GROUPS: usize = 1_000;
const RESOURCES: [&str; 5] = ["pods", "configmaps", "secrets", "services", "deployments"];

struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn resource_of(i: usize) -> &'static str {
    RESOURCES[i % RESOURCES.len()]
}

/// The role chain of role `i`: itself and its parents.
fn chain(i: usize) -> Vec<usize> {
    let first = i - i % DEPTH;
    (first..=i).collect()
}

fn window(i: usize) -> Option<(&'static str, &'static str)> {
    (i % 3 == 0).then(|| {
        if i % 2 == 0 {
            ("09:00", "17:00")
        } else {
            ("00:00", "24:00")
        }
    })
}

fn kubeforge(n: usize) -> AccessAuthorizer {
    let roles: Vec<RoleObject> = (0..ROLES)
        .map(|i| {
            let r = resource_of(i);
            let group = if r == "deployments" { "apps" } else { "" };
            let parents = if i % DEPTH == 0 { json!([]) } else { json!([{"name": format!("role-{}", i - 1)}]) };
            RoleObject::from_value(
                &json!({"metadata": {"name": format!("role-{i}")}, "spec": {
                    "rules": [{"apiGroups": [group], "resources": [r], "verbs": ["get", "list", "watch"]}],
                    "parents": parents}}),
                false,
            )
            .expect("role")
        })
        .collect();
    let bindings: Vec<BindingObject> = (0..n)
        .map(|i| {
            let mut conditions = json!({});
            if let Some((start, end)) = window(i) {
                conditions["timeWindows"] = json!([{"days": ["Mon", "Tue", "Wed", "Thu", "Fri"],
                    "start": start, "end": end, "timeZone": "Europe/Berlin"}]);
            }
            if i % 4 == 0 {
                conditions["sourceCIDRs"] = json!(["10.0.0.0/8", "192.168.0.0/16"]);
            }
            BindingObject::from_value(
                &json!({"metadata": {"name": format!("b-{i}"), "namespace": format!("ns-{}", i % NAMESPACES)},
                    "spec": {"roleRef": {"kind": "ClusterAccessRole", "name": format!("role-{}", i % ROLES)},
                        "effect": if i % 10 == 0 { "Deny" } else { "Allow" },
                        "subjects": [{"kind": "User", "name": format!("user-{i}")},
                                     {"kind": "Group", "name": format!("group-{}", i % GROUPS)}],
                        "conditions": conditions}}),
                true,
            )
            .expect("binding")
        })
        .collect();
    AccessAuthorizer::new(AccessPolicy::build(
        &roles,
        &bindings,
        &[],
        &RbacPolicy::default(),
    ))
}

fn minutes(s: &str) -> u32 {
    let (h, m) = s.split_once(':').expect("HH:MM");
    h.parse::<u32>().expect("h") * 60 + m.parse::<u32>().expect("m")
}

fn cedar_policies(n: usize) -> PolicySet {
    let mut text = String::new();
    for i in 0..n {
        let role = i % ROLES;
        let rules: Vec<String> = chain(role)
            .into_iter()
            .map(|k| {
                let r = resource_of(k);
                let group = if r == "deployments" { "apps" } else { "" };
                format!(r#"(resource.group == "{group}" && resource.kind == "{r}")"#)
            })
            .collect();
        let mut when = vec![
            format!(
                r#"(principal == User::"user-{i}" || principal in Group::"group-{}")"#,
                i % GROUPS
            ),
            format!(r#"resource.namespace == "ns-{}""#, i % NAMESPACES),
            format!("({})", rules.join(" || ")),
        ];
        if let Some((start, end)) = window(i) {
            when.push(format!(
                "context.day < 5 && context.minute >= {} && context.minute < {}",
                minutes(start),
                minutes(end)
            ));
        }
        if i % 4 == 0 {
            when.push(
                r#"(context.source.isInRange(ip("10.0.0.0/8")) || context.source.isInRange(ip("192.168.0.0/16")))"#
                    .into(),
            );
        }
        let effect = if i % 10 == 0 { "forbid" } else { "permit" };
        text.push_str(&format!(
            "@id(\"b-{i}\")\n{effect}(principal, action in [Action::\"get\", Action::\"list\", Action::\"watch\"], resource) when {{ {} }};\n",
            when.join(" && ")
        ));
    }
    PolicySet::from_str(&text).expect("cedar policies")
}

fn uid(ty: &str, id: &str) -> EntityUid {
    EntityUid::from_type_name_and_id(
        EntityTypeName::from_str(ty).expect("type"),
        EntityId::new(id),
    )
}

struct Ask {
    kubeforge: Attributes,
    cedar: Request,
    entities: Entities,
}

fn requests(n: usize) -> Vec<Ask> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let now =
        jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::get("Europe/Berlin").expect("zone"));
    let day = i64::from(now.weekday().to_monday_zero_offset());
    let minute = i64::from(now.hour()) * 60 + i64::from(now.minute());
    (0..256)
        .map(|_| {
            let i = rng.next(n);
            let ns = if rng.next(2) == 0 { i % NAMESPACES } else { rng.next(NAMESPACES) };
            let group = format!("group-{}", rng.next(GROUPS));
            let resource = RESOURCES[rng.next(4)];
            let source = if rng.next(2) == 0 { "10.1.2.3" } else { "172.16.0.9" };
            let user = UserInfo::new(&format!("user-{i}"), [group.clone(), "system:authenticated".into()]);
            let mut a = Attributes::resource(user, "list", &format!("ns-{ns}"), "", "v1", resource, "", "");
            a.source = Some(source.parse().expect("ip"));
            let principal = uid("User", &format!("user-{i}"));
            let object = uid("Resource", &format!("ns-{ns}/{resource}"));
            let entities = Entities::from_entities(
                [
                    Entity::new_no_attrs(principal.clone(), [uid("Group", &group)].into_iter().collect()),
                    Entity::new(
                        object.clone(),
                        [
                            ("namespace".to_string(), cedar_policy::RestrictedExpression::new_string(format!("ns-{ns}"))),
                            ("group".to_string(), cedar_policy::RestrictedExpression::new_string(String::new())),
                            ("kind".to_string(), cedar_policy::RestrictedExpression::new_string(resource.into())),
                        ]
                        .into_iter()
                        .collect(),
                        Default::default(),
                    )
                    .expect("resource entity"),
                ],
                None,
            )
            .expect("entities");
            let context = Context::from_json_value(
                json!({"day": day, "minute": minute, "source": {"__extn": {"fn": "ip", "arg": source}}}),
                None,
            )
            .expect("context");
            let cedar = Request::new(principal, uid("Action", "list"), object, context, None).expect("request");
            Ask { kubeforge: a, cedar, entities }
        })
        .collect()
}

fn percentiles(mut samples: Vec<u64>) -> (u64, u64) {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    (at(0.5), at(0.99))
}

fn main() {
    println!("bindings  kubeforge_p50  kubeforge_p99  cedar_p50  cedar_p99  cedar_rounds  agree");
    for n in [1_000, 10_000, 50_000] {
        let z = kubeforge(n);
        let policies = cedar_policies(n);
        let cedar = Authorizer::new();
        let asks = requests(n);
        let mut agree = 0;
        for a in &asks {
            let ours = z.authorize(&a.kubeforge).allowed();
            let theirs = cedar
                .is_authorized(&a.cedar, &policies, &a.entities)
                .decision()
                == cedar_policy::Decision::Allow;
            agree += usize::from(ours == theirs);
        }
        // Timed apart, so neither evicts the other's working set; Cedar
        // walks every policy per decision, so it gets fewer rounds.
        let mut ours = Vec::new();
        for k in 0..200_000 {
            let a = &asks[k % asks.len()];
            let t = Instant::now();
            black_box(z.authorize(black_box(&a.kubeforge)));
            ours.push(t.elapsed().as_nanos() as u64);
        }
        let rounds = (2_000_000 / n).clamp(40, 2_000);
        let mut theirs = Vec::new();
        for k in 0..rounds {
            let a = &asks[k % asks.len()];
            let t = Instant::now();
            black_box(cedar.is_authorized(black_box(&a.cedar), &policies, &a.entities));
            theirs.push(t.elapsed().as_nanos() as u64);
        }
        let (o50, o99) = percentiles(ours);
        let (c50, c99) = percentiles(theirs);
        println!(
            "{n:>8}  {o50:>13}  {o99:>13}  {c50:>9}  {c99:>9}  {rounds:>12}  {agree}/{}",
            asks.len()
        );
    }
}
