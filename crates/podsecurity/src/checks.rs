//! Every check of the Pod Security Standards, at every version, worded as
//! `k8s.io/pod-security-admission/policy` words it (the library Kubernetes
//! 1.33 ships, whose newest revision of the standards is v1.32: `latest`
//! and any newer version are evaluated as v1.32).
//!
//! A check has one variant per revision of its rule; the variant in effect
//! at version N is the newest one at or before N, and a check none of whose
//! variants is that old does not run. At `restricted`, a restricted check's
//! variant may replace baseline checks (restricted volumes replace the
//! hostPath check; the restricted seccomp and capabilities checks, from
//! 1.19 and 1.22, their baseline forms). Checks run baseline first, then
//! restricted, each set in the byte order of their IDs, as kube orders
//! them; containers are visited init, regular, then ephemeral.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{ContainerPort, PodSpec, SecurityContext, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kubeforge_apimachinery::gofmt::quote;

use crate::api::Level;

/// The newest revision of the standards these checks know (`v1.32`).
pub const NEWEST_MINOR: u32 = 32;

/// A failed check: kube's `ForbiddenReason` and `ForbiddenDetail`.
pub type Failure = (&'static str, String);

/// One revision of a check's rule.
pub struct Variant {
    /// The first version (`v1.N`, holding N) it applies to.
    pub since: u32,
    /// The rule: `None` when the pod passes.
    pub check: fn(&Pod<'_>) -> Option<Failure>,
    /// Baseline checks this variant replaces at `restricted`.
    pub overrides: &'static [&'static str],
}

/// A check of the standards.
pub struct Check {
    /// kube's check ID.
    pub id: &'static str,
    /// The level it belongs to.
    pub level: Level,
    /// Its revisions, oldest first.
    pub variants: &'static [Variant],
}

impl Check {
    /// The variant in effect at `v1.<minor>`, if any.
    pub fn at(&self, minor: u32) -> Option<&Variant> {
        self.variants.iter().rev().find(|v| v.since <= minor)
    }
}

/// The checks that run at `level`, version `v1.<minor>`, in kube's order.
pub fn for_level(level: Level, minor: u32) -> impl Iterator<Item = &'static Variant> {
    let restricted = level == Level::Restricted;
    let overridden = move |id: &str| {
        restricted
            && RESTRICTED
                .iter()
                .any(|c| c.at(minor).is_some_and(|v| v.overrides.contains(&id)))
    };
    let baseline = BASELINE
        .iter()
        .filter(move |c| !overridden(c.id))
        .filter_map(move |c| c.at(minor));
    let stricter = RESTRICTED
        .iter()
        .filter(move |_| restricted)
        .filter_map(move |c| c.at(minor));
    baseline.chain(stricter)
}

/// The baseline checks, sorted by ID.
pub static BASELINE: &[Check] = &[
    check(
        "appArmorProfile",
        Level::Baseline,
        &[variant(0, app_armor_profile)],
    ),
    check(
        "capabilities_baseline",
        Level::Baseline,
        &[variant(0, capabilities_baseline)],
    ),
    check(
        "hostNamespaces",
        Level::Baseline,
        &[variant(0, host_namespaces)],
    ),
    check(
        "hostPathVolumes",
        Level::Baseline,
        &[variant(0, host_path_volumes)],
    ),
    check("hostPorts", Level::Baseline, &[variant(0, host_ports)]),
    check("privileged", Level::Baseline, &[variant(0, privileged)]),
    check("procMount", Level::Baseline, &[variant(0, proc_mount)]),
    check(
        "seLinuxOptions",
        Level::Baseline,
        &[
            variant(0, se_linux_options_1_0),
            variant(31, se_linux_options_1_31),
        ],
    ),
    check(
        "seccompProfile_baseline",
        Level::Baseline,
        &[
            variant(0, seccomp_annotations),
            variant(19, seccomp_baseline_fields),
        ],
    ),
    check(
        "sysctls",
        Level::Baseline,
        &[
            variant(0, sysctls_1_0),
            variant(27, sysctls_1_27),
            variant(29, sysctls_1_29),
            variant(32, sysctls_1_32),
        ],
    ),
    check(
        "windowsHostProcess",
        Level::Baseline,
        &[variant(0, windows_host_process)],
    ),
];

/// The restricted checks, sorted by ID.
pub static RESTRICTED: &[Check] = &[
    check(
        "allowPrivilegeEscalation",
        Level::Restricted,
        &[
            variant(8, allow_privilege_escalation),
            variant(25, allow_privilege_escalation_1_25),
        ],
    ),
    check(
        "capabilities_restricted",
        Level::Restricted,
        &[
            replacing(22, capabilities_restricted, &["capabilities_baseline"]),
            replacing(25, capabilities_restricted_1_25, &["capabilities_baseline"]),
        ],
    ),
    check(
        "restrictedVolumes",
        Level::Restricted,
        &[replacing(0, restricted_volumes, &["hostPathVolumes"])],
    ),
    check(
        "runAsNonRoot",
        Level::Restricted,
        &[variant(0, run_as_non_root)],
    ),
    check("runAsUser", Level::Restricted, &[variant(23, run_as_user)]),
    check(
        "seccompProfile_restricted",
        Level::Restricted,
        &[
            replacing(19, seccomp_restricted, &["seccompProfile_baseline"]),
            replacing(25, seccomp_restricted_1_25, &["seccompProfile_baseline"]),
        ],
    ),
];

const fn check(id: &'static str, level: Level, variants: &'static [Variant]) -> Check {
    Check {
        id,
        level,
        variants,
    }
}

const fn variant(since: u32, check: fn(&Pod<'_>) -> Option<Failure>) -> Variant {
    Variant {
        since,
        check,
        overrides: &[],
    }
}

const fn replacing(
    since: u32,
    check: fn(&Pod<'_>) -> Option<Failure>,
    overrides: &'static [&'static str],
) -> Variant {
    Variant {
        since,
        check,
        overrides,
    }
}

/// A pod (or a template) as the checks read it.
pub struct Pod<'a> {
    meta: &'a ObjectMeta,
    spec: &'a PodSpec,
}

/// What the checks read of one container, of whichever list.
struct Container<'a> {
    name: &'a str,
    sc: Option<&'a SecurityContext>,
    ports: &'a [ContainerPort],
}

impl<'a> Pod<'a> {
    /// The pod to check.
    pub fn new(meta: &'a ObjectMeta, spec: &'a PodSpec) -> Pod<'a> {
        Pod { meta, spec }
    }

    /// Init containers, then containers, then ephemeral containers.
    fn containers(&self) -> impl Iterator<Item = Container<'a>> {
        let spec = self.spec;
        let plain = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| Container {
                name: &c.name,
                sc: c.security_context.as_ref(),
                ports: c.ports.as_deref().unwrap_or_default(),
            });
        let ephemeral = spec
            .ephemeral_containers
            .iter()
            .flatten()
            .map(|c| Container {
                name: &c.name,
                sc: c.security_context.as_ref(),
                ports: c.ports.as_deref().unwrap_or_default(),
            });
        plain.chain(ephemeral)
    }

    /// Names of the containers for which `bad` holds, in visit order.
    fn containers_where(&self, mut bad: impl FnMut(&Container<'a>) -> bool) -> Vec<&'a str> {
        self.containers()
            .filter(|c| bad(c))
            .map(|c| c.name)
            .collect()
    }

    fn pod_sc(&self) -> Option<&'a k8s_openapi::api::core::v1::PodSecurityContext> {
        self.spec.security_context.as_ref()
    }

    fn annotations(&self) -> impl Iterator<Item = (&'a String, &'a String)> {
        self.meta.annotations.iter().flatten()
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.meta.annotations.as_ref()?.get(key).map(String::as_str)
    }

    fn is_windows(&self) -> bool {
        self.spec.os.as_ref().is_some_and(|os| os.name == "windows")
    }
}

fn plural(singular: &'static str, plural: &'static str, n: usize) -> &'static str {
    if n == 1 { singular } else { plural }
}

/// kube's `joinQuote`: `"a", "b"` (no escaping), empty for none.
fn join_quote<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let mut out = String::new();
    for (i, s) in items.into_iter().enumerate() {
        out.push_str(if i == 0 { "\"" } else { "\", \"" });
        out.push_str(s.as_ref());
    }
    if !out.is_empty() {
        out.push('"');
    }
    out
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[&str]) -> String {
    format!(
        "{} {}",
        plural("container", "containers", names.len()),
        join_quote(names)
    )
}

/// The pod-level setter (`pod`) and the containers, as the checks that
/// name both word it: `pod and containers "a", "b"`.
fn setters(pod: bool, containers: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !containers.is_empty() {
        out.push(containers_phrase(containers));
    }
    out
}

fn privileged(pod: &Pod<'_>) -> Option<Failure> {
    let bad = pod.containers_where(|c| c.sc.and_then(|s| s.privileged) == Some(true));
    (!bad.is_empty()).then(|| {
        (
            "privileged",
            format!(
                "{} must not set securityContext.privileged=true",
                containers_phrase(&bad)
            ),
        )
    })
}

fn host_namespaces(pod: &Pod<'_>) -> Option<Failure> {
    let s = pod.spec;
    let mut set = Vec::new();
    if s.host_network == Some(true) {
        set.push("hostNetwork=true");
    }
    if s.host_pid == Some(true) {
        set.push("hostPID=true");
    }
    if s.host_ipc == Some(true) {
        set.push("hostIPC=true");
    }
    (!set.is_empty()).then(|| ("host namespaces", set.join(", ")))
}

fn volumes<'a>(pod: &Pod<'a>) -> &'a [Volume] {
    pod.spec.volumes.as_deref().unwrap_or_default()
}

fn host_path_volumes(pod: &Pod<'_>) -> Option<Failure> {
    let bad: Vec<&str> = volumes(pod)
        .iter()
        .filter(|v| v.host_path.is_some())
        .map(|v| v.name.as_str())
        .collect();
    (!bad.is_empty()).then(|| {
        (
            "hostPath volumes",
            format!(
                "{} {}",
                plural("volume", "volumes", bad.len()),
                join_quote(&bad)
            ),
        )
    })
}

fn host_ports(pod: &Pod<'_>) -> Option<Failure> {
    let mut ports = BTreeSet::new();
    let bad = pod.containers_where(|c| {
        let mut uses = false;
        for p in c.ports {
            if let Some(hp) = p.host_port.filter(|hp| *hp != 0) {
                uses = true;
                ports.insert(hp.to_string());
            }
        }
        uses
    });
    (!bad.is_empty()).then(|| {
        let ports: Vec<String> = ports.into_iter().collect();
        (
            "hostPort",
            format!(
                "{} {} {} {}",
                containers_phrase(&bad),
                plural("uses", "use", bad.len()),
                plural("hostPort", "hostPorts", ports.len()),
                ports.join(", ")
            ),
        )
    })
}

/// The capabilities baseline pods may add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(pod: &Pod<'_>) -> Option<Failure> {
    let mut caps = BTreeSet::new();
    let bad = pod.containers_where(|c| {
        let add =
            c.sc.and_then(|s| s.capabilities.as_ref())
                .and_then(|caps| caps.add.as_deref())
                .unwrap_or_default();
        let mut found = false;
        for cap in add {
            if !BASELINE_CAPABILITIES.contains(&cap.as_str()) {
                found = true;
                caps.insert(cap.as_str());
            }
        }
        found
    });
    (!bad.is_empty()).then(|| {
        (
            "non-default capabilities",
            format!(
                "{} must not include {} in securityContext.capabilities.add",
                containers_phrase(&bad),
                join_quote(&caps)
            ),
        )
    })
}

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(pod: &Pod<'_>) -> Option<Failure> {
    let allowed_type = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut bad_values: BTreeSet<&str> = BTreeSet::new();
    let mut pod_bad = false;
    if let Some(p) = pod.pod_sc().and_then(|s| s.app_armor_profile.as_ref())
        && !allowed_type(&p.type_)
    {
        pod_bad = true;
        bad_values.insert(&p.type_);
    }
    let bad = pod.containers_where(|c| match c.sc.and_then(|s| s.app_armor_profile.as_ref()) {
        Some(p) if !allowed_type(&p.type_) => {
            bad_values.insert(&p.type_);
            true
        }
        _ => false,
    });
    let mut setters = setters(pod_bad, &bad);
    let mut annotations: Vec<String> = pod
        .annotations()
        .filter(|(k, v)| {
            k.starts_with(APPARMOR_ANNOTATION_PREFIX)
                && !(v.is_empty() || v.as_str() == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect();
    annotations.sort();
    if !annotations.is_empty() {
        setters.push(plural("annotation", "annotations", annotations.len()).to_string());
    }
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = bad_values
        .into_iter()
        .map(str::to_string)
        .chain(annotations)
        .collect();
    Some((
        plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            values.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    ))
}

fn se_linux_options<'a>(pod: &Pod<'a>, types: &[&str]) -> Option<Failure> {
    let mut bad_types: BTreeSet<&'a str> = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |o: &'a k8s_openapi::api::core::v1::SELinuxOptions| {
        let mut ok = true;
        let t = o.type_.as_deref().unwrap_or_default();
        if !types.contains(&t) {
            bad_types.insert(t);
            ok = false;
        }
        if o.user.as_deref().is_some_and(|u| !u.is_empty()) {
            set_user = true;
            ok = false;
        }
        if o.role.as_deref().is_some_and(|r| !r.is_empty()) {
            set_role = true;
            ok = false;
        }
        ok
    };
    let pod_bad = pod
        .pod_sc()
        .and_then(|s| s.se_linux_options.as_ref())
        .is_some_and(|o| !valid(o));
    let bad = pod.containers_where(|c| {
        c.sc.and_then(|s| s.se_linux_options.as_ref())
            .is_some_and(|o| !valid(o))
    });
    let setters = setters(pod_bad, &bad);
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        data.push(format!(
            "{} {}",
            plural("type", "types", bad_types.len()),
            join_quote(&bad_types)
        ));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    Some((
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    ))
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];
const SELINUX_TYPES_1_31: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux_options_1_0(pod: &Pod<'_>) -> Option<Failure> {
    se_linux_options(pod, SELINUX_TYPES_1_0)
}

fn se_linux_options_1_31(pod: &Pod<'_>) -> Option<Failure> {
    se_linux_options(pod, SELINUX_TYPES_1_31)
}

fn proc_mount(pod: &Pod<'_>) -> Option<Failure> {
    let mut values = BTreeSet::new();
    let bad = pod.containers_where(|c| match c.sc.and_then(|s| s.proc_mount.as_deref()) {
        Some(m) if m != "Default" => {
            values.insert(m);
            true
        }
        _ => false,
    });
    (!bad.is_empty()).then(|| {
        (
            "procMount",
            format!(
                "{} must not set securityContext.procMount to {}",
                containers_phrase(&bad),
                join_quote(&values)
            ),
        )
    })
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Before 1.19 seccomp was set by annotations.
fn seccomp_annotations(pod: &Pod<'_>) -> Option<Failure> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let mut forbidden = BTreeSet::new();
    if let Some(v) = pod.annotation(SECCOMP_POD_ANNOTATION)
        && !valid(v)
    {
        forbidden.insert(format!("{SECCOMP_POD_ANNOTATION}={}", quote(v)));
    }
    for c in pod.containers() {
        let key = format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name);
        if let Some(v) = pod.annotation(&key)
            && !valid(v)
        {
            forbidden.insert(format!("{key}={}", quote(v)));
        }
    }
    (!forbidden.is_empty()).then(|| {
        let list: Vec<String> = forbidden.iter().cloned().collect();
        (
            "seccompProfile",
            format!(
                "forbidden {} {}",
                plural("annotation", "annotations", list.len()),
                list.join(", ")
            ),
        )
    })
}

fn valid_seccomp_type(t: &str) -> bool {
    t == "RuntimeDefault" || t == "Localhost"
}

/// What a pod and its containers set as seccomp profile types: whether
/// the pod's is a forbidden type, the containers that set a forbidden
/// one, the forbidden types, whether the pod set an allowed one, and the
/// containers that set none.
struct SeccompSetters<'a> {
    pod_bad: bool,
    bad: Vec<&'a str>,
    types: BTreeSet<&'a str>,
    unset: Vec<&'a str>,
}

fn seccomp_setters<'a>(pod: &Pod<'a>) -> SeccompSetters<'a> {
    let mut types = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(p) = pod.pod_sc().and_then(|s| s.seccomp_profile.as_ref()) {
        if valid_seccomp_type(&p.type_) {
            pod_set = true;
        } else {
            pod_bad = true;
            types.insert(p.type_.as_str());
        }
    }
    let mut bad = Vec::new();
    let mut unset = Vec::new();
    for c in pod.containers() {
        match c.sc.and_then(|s| s.seccomp_profile.as_ref()) {
            Some(p) if !valid_seccomp_type(&p.type_) => {
                bad.push(c.name);
                types.insert(p.type_.as_str());
            }
            Some(_) => {}
            None if !pod_set => unset.push(c.name),
            None => {}
        }
    }
    SeccompSetters {
        pod_bad,
        bad,
        types,
        unset,
    }
}

fn seccomp_forbidden_types(s: &SeccompSetters<'_>) -> Option<Failure> {
    let setters = setters(s.pod_bad, &s.bad);
    (!setters.is_empty()).then(|| {
        (
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&s.types)
            ),
        )
    })
}

/// From 1.19, the fields; an unset profile is fine at baseline.
fn seccomp_baseline_fields(pod: &Pod<'_>) -> Option<Failure> {
    seccomp_forbidden_types(&seccomp_setters(pod))
}

fn seccomp_restricted(pod: &Pod<'_>) -> Option<Failure> {
    let s = seccomp_setters(pod);
    if let Some(f) = seccomp_forbidden_types(&s) {
        return Some(f);
    }
    (!s.unset.is_empty()).then(|| {
        (
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&s.unset)
            ),
        )
    })
}

fn seccomp_restricted_1_25(pod: &Pod<'_>) -> Option<Failure> {
    if pod.is_windows() {
        return None;
    }
    seccomp_restricted(pod)
}

/// The sysctls each revision allows (each adds to the one before).
const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

fn sysctls(pod: &Pod<'_>, allowed: &[&[&str]]) -> Option<Failure> {
    let bad: Vec<&str> = pod
        .pod_sc()
        .and_then(|s| s.sysctls.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|s| s.name.as_str())
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    (!bad.is_empty()).then(|| ("forbidden sysctls", bad.join(", ")))
}

fn sysctls_1_0(pod: &Pod<'_>) -> Option<Failure> {
    sysctls(pod, &[SYSCTLS_1_0])
}

fn sysctls_1_27(pod: &Pod<'_>) -> Option<Failure> {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

fn sysctls_1_29(pod: &Pod<'_>) -> Option<Failure> {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

fn sysctls_1_32(pod: &Pod<'_>) -> Option<Failure> {
    sysctls(
        pod,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

fn windows_host_process(pod: &Pod<'_>) -> Option<Failure> {
    let pod_bad = pod
        .pod_sc()
        .and_then(|s| s.windows_options.as_ref())
        .and_then(|w| w.host_process)
        == Some(true);
    let bad = pod.containers_where(|c| {
        c.sc.and_then(|s| s.windows_options.as_ref())
            .and_then(|w| w.host_process)
            == Some(true)
    });
    let setters = setters(pod_bad, &bad);
    (!setters.is_empty()).then(|| {
        (
            "hostProcess",
            format!(
                "{} must not set securityContext.windowsOptions.hostProcess=true",
                setters.join(" and ")
            ),
        )
    })
}

fn allow_privilege_escalation(pod: &Pod<'_>) -> Option<Failure> {
    let bad =
        pod.containers_where(|c| c.sc.and_then(|s| s.allow_privilege_escalation) != Some(false));
    (!bad.is_empty()).then(|| {
        (
            "allowPrivilegeEscalation != false",
            format!(
                "{} must set securityContext.allowPrivilegeEscalation=false",
                containers_phrase(&bad)
            ),
        )
    })
}

fn allow_privilege_escalation_1_25(pod: &Pod<'_>) -> Option<Failure> {
    if pod.is_windows() {
        return None;
    }
    allow_privilege_escalation(pod)
}

fn capabilities_restricted(pod: &Pod<'_>) -> Option<Failure> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in pod.containers() {
        let Some(cc) = c.sc.and_then(|s| s.capabilities.as_ref()) else {
            missing_drop.push(c.name);
            continue;
        };
        if !cc.drop.iter().flatten().any(|d| d == "ALL") {
            missing_drop.push(c.name);
        }
        let mut adds = false;
        for cap in cc.add.iter().flatten() {
            if cap != "NET_BIND_SERVICE" {
                adds = true;
                caps.insert(cap.as_str());
            }
        }
        if adds {
            adding.push(c.name);
        }
    }
    let mut parts = Vec::new();
    if !missing_drop.is_empty() {
        parts.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        parts.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    (!parts.is_empty()).then(|| ("unrestricted capabilities", parts.join("; ")))
}

fn capabilities_restricted_1_25(pod: &Pod<'_>) -> Option<Failure> {
    if pod.is_windows() {
        return None;
    }
    capabilities_restricted(pod)
}

/// The volume sources restricted pods may use.
fn restricted_source(v: &Volume) -> bool {
    v.config_map.is_some()
        || v.csi.is_some()
        || v.downward_api.is_some()
        || v.empty_dir.is_some()
        || v.ephemeral.is_some()
        || v.image.is_some()
        || v.persistent_volume_claim.is_some()
        || v.projected.is_some()
        || v.secret.is_some()
}

/// The name kube gives a source restricted pods may not use.
fn forbidden_source(v: &Volume) -> &'static str {
    let sources: [(bool, &'static str); 21] = [
        (v.host_path.is_some(), "hostPath"),
        (v.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (v.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
        (v.git_repo.is_some(), "gitRepo"),
        (v.nfs.is_some(), "nfs"),
        (v.iscsi.is_some(), "iscsi"),
        (v.glusterfs.is_some(), "glusterfs"),
        (v.rbd.is_some(), "rbd"),
        (v.flex_volume.is_some(), "flexVolume"),
        (v.cinder.is_some(), "cinder"),
        (v.cephfs.is_some(), "cephfs"),
        (v.flocker.is_some(), "flocker"),
        (v.fc.is_some(), "fc"),
        (v.azure_file.is_some(), "azureFile"),
        (v.vsphere_volume.is_some(), "vsphereVolume"),
        (v.quobyte.is_some(), "quobyte"),
        (v.azure_disk.is_some(), "azureDisk"),
        (v.photon_persistent_disk.is_some(), "photonPersistentDisk"),
        (v.portworx_volume.is_some(), "portworxVolume"),
        (v.scale_io.is_some(), "scaleIO"),
        (v.storageos.is_some(), "storageos"),
    ];
    sources
        .iter()
        .find(|(set, _)| *set)
        .map_or("unknown", |(_, name)| name)
}

fn restricted_volumes(pod: &Pod<'_>) -> Option<Failure> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(pod) {
        if !restricted_source(v) {
            bad.push(v.name.as_str());
            types.insert(forbidden_source(v));
        }
    }
    (!bad.is_empty()).then(|| {
        (
            "restricted volume types",
            format!(
                "{} {} {} {} {}",
                plural("volume", "volumes", bad.len()),
                join_quote(&bad),
                plural("uses", "use", bad.len()),
                plural(
                    "restricted volume type",
                    "restricted volume types",
                    types.len()
                ),
                join_quote(&types)
            ),
        )
    })
}

fn run_as_non_root(pod: &Pod<'_>) -> Option<Failure> {
    let pod_value = pod.pod_sc().and_then(|s| s.run_as_non_root);
    let pod_true = pod_value == Some(true);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in pod.containers() {
        match c.sc.and_then(|s| s.run_as_non_root) {
            Some(false) => explicit.push(c.name),
            Some(true) => {}
            None if !pod_true => implicit.push(c.name),
            None => {}
        }
    }
    let setters = setters(pod_value == Some(false), &explicit);
    if !setters.is_empty() {
        return Some((
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        ));
    }
    (!implicit.is_empty()).then(|| {
        (
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        )
    })
}

fn run_as_user(pod: &Pod<'_>) -> Option<Failure> {
    let pod_bad = pod.pod_sc().and_then(|s| s.run_as_user) == Some(0);
    let bad = pod.containers_where(|c| c.sc.and_then(|s| s.run_as_user) == Some(0));
    let setters = setters(pod_bad, &bad);
    (!setters.is_empty()).then(|| {
        (
            "runAsUser=0",
            format!("{} must not set runAsUser=0", setters.join(" and ")),
        )
    })
}

#[cfg(test)]
mod tests;
