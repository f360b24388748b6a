//! A pod's spec in CRI's terms, as the kubelet's `kuberuntime` writes
//! them: the sandbox config (metadata, hostname, log directory, DNS, host
//! ports, namespaces), each container's config (image, command and args
//! with `$(VAR)` expanded, env, mounts, log path, resources) and the labels
//! and annotations by which a restarted agent finds its pods again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use kubeforge_apimachinery::expansion;

use crate::cri::api;

/// Sandbox and container label: the pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// Sandbox and container label: the pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// Sandbox and container label: the pod's UID.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// Container label: the container's name.
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// Container annotation: how many times the container restarted.
pub const RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
/// Container annotation: the pod's termination grace period.
pub const GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
/// Sandbox label and annotation marking what kubeforge's agent made.
pub const MANAGED_BY: &str = "io.kubeforge.node";

/// The pod's name, namespace and UID.
pub fn identity(pod: &Pod) -> (&str, &str, &str) {
    let m = &pod.metadata;
    (
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or("default"),
        m.uid.as_deref().unwrap_or_default(),
    )
}

/// `/var/log/pods/<ns>_<pod>_<uid>`'s counterpart under `log_root`.
pub fn log_directory(log_root: &Path, pod: &Pod) -> PathBuf {
    let (name, ns, uid) = identity(pod);
    log_root.join(format!("{ns}_{name}_{uid}"))
}

/// A container's log file relative to the sandbox's log directory:
/// `<container>/<restartCount>.log`.
pub fn log_path(container: &str, restart_count: u32) -> String {
    format!("{container}/{restart_count}.log")
}

/// The DNS the sandbox gets (kube's `ClusterFirst` when `servers` is a
/// cluster DNS address; the pod's own `dnsConfig` merged last).
#[derive(Clone, Debug, Default)]
pub struct DnsSettings {
    /// The cluster DNS servers (the kubelet's `clusterDNS`).
    pub servers: Vec<String>,
    /// The cluster domain (`cluster.local`).
    pub domain: String,
}

/// The sandbox's DNS config, as the kubelet's `dns.Configurer` computes it
/// ([`crate::dns::pod_dns_config`]) from the cluster DNS settings and this
/// machine's `/etc/resolv.conf` (the node's, whose search list a
/// `ClusterFirst` pod inherits and a `Default` pod takes whole).
pub fn dns_config(pod: &Pod, dns: &DnsSettings) -> Option<api::DnsConfig> {
    let servers: Vec<std::net::IpAddr> =
        dns.servers.iter().filter_map(|s| s.parse().ok()).collect();
    let host = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    crate::dns::pod_dns_config(pod, &servers, &dns.domain, &host)
}

/// The pod's `terminationGracePeriodSeconds` (kube's default 30).
pub fn termination_grace(pod: &Pod) -> i64 {
    pod.spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30)
}

/// The pod's hostname: `spec.hostname`, else its name (truncated to 63).
pub fn hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let name = spec
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| identity(pod).0.to_string());
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// The pod's cgroup under the node's `root` (`/kubeforge/<node>`), by
/// QoS class as the kubelet's cgroupfs driver lays them out:
/// `kubepods/pod<uid>` (Guaranteed), `kubepods/burstable/pod<uid>`,
/// `kubepods/besteffort/pod<uid>`.
pub fn cgroup_parent(root: &str, pod: &Pod) -> String {
    let (_, _, uid) = identity(pod);
    let qos = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .unwrap_or("BestEffort");
    match qos {
        "Guaranteed" => format!("{root}/kubepods/pod{uid}"),
        "Burstable" => format!("{root}/kubepods/burstable/pod{uid}"),
        _ => format!("{root}/kubepods/besteffort/pod{uid}"),
    }
}

/// The kubelet's OOM score adjustment for a container of `pod`
/// (`qos.GetContainerOOMScoreAdjust`): -997 Guaranteed, 1000 BestEffort,
/// and for Burstable `1000 - 1000 * memoryRequest / machineMemory` kept in
/// 2..=999.
pub fn oom_score_adj(pod: &Pod, c: &Container, machine_memory: i64) -> i64 {
    let qos = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .unwrap_or("BestEffort");
    match qos {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let request = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory"))
                .and_then(|q| kubeforge_apimachinery::quantity::parse_value(&q.0).ok())
                .unwrap_or(0);
            if machine_memory <= 0 {
                return 999;
            }
            (1000 - 1000 * request / machine_memory).clamp(2, 999)
        }
    }
}

/// Where a node runs its pods: its name and its cgroup root
/// (`/kubeforge/<node>`).
#[derive(Clone, Copy, Debug)]
pub struct NodePlace<'a> {
    /// The Node's name.
    pub name: &'a str,
    /// Its cgroup root.
    pub cgroup: &'a str,
}

/// The sandbox config of attempt `attempt` of `pod` on `node`.
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    log_root: &Path,
    dns: &DnsSettings,
    node: NodePlace<'_>,
) -> api::PodSandboxConfig {
    let node_cgroup = node.cgroup;
    let node = node.name;
    let cgroups = cgroup_parent(node_cgroup, pod);
    let (name, ns, uid) = identity(pod);
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(POD_NAME.into(), name.into());
    labels.insert(POD_NAMESPACE.into(), ns.into());
    labels.insert(POD_UID.into(), uid.into());
    labels.insert(MANAGED_BY.into(), node.into());
    let annotations = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.unwrap_or(0) > 0)
        .map(|p| api::PortMapping {
            protocol: protocol(p.protocol.as_deref()) as i32,
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let host_mode = |on: Option<bool>| {
        if on.unwrap_or(false) {
            api::NamespaceMode::Node
        } else {
            api::NamespaceMode::Pod
        }
    };
    let pid = if spec.host_pid.unwrap_or(false) {
        api::NamespaceMode::Node
    } else if spec.share_process_namespace.unwrap_or(false) {
        api::NamespaceMode::Pod
    } else {
        api::NamespaceMode::Container
    };
    let sc = spec.security_context.clone().unwrap_or_default();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt,
        }),
        hostname: if spec.host_network.unwrap_or(false) {
            String::new()
        } else {
            hostname(pod)
        },
        log_directory: log_directory(log_root, pod).to_string_lossy().into_owned(),
        dns_config: dns_config(pod, dns),
        port_mappings,
        labels,
        annotations,
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: cgroups,
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(api::NamespaceOption {
                    network: host_mode(spec.host_network) as i32,
                    pid: pid as i32,
                    ipc: host_mode(spec.host_ipc) as i32,
                    ..Default::default()
                }),
                run_as_user: sc.run_as_user.map(|v| api::Int64Value { value: v }),
                run_as_group: sc.run_as_group.map(|v| api::Int64Value { value: v }),
                supplemental_groups: sc.supplemental_groups.clone().unwrap_or_default(),
                ..Default::default()
            }),
            sysctls: sc
                .sysctls
                .iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
            ..Default::default()
        }),
        windows: None,
    }
}

fn protocol(p: Option<&str>) -> api::Protocol {
    match p {
        Some("UDP") => api::Protocol::Udp,
        Some("SCTP") => api::Protocol::Sctp,
        _ => api::Protocol::Tcp,
    }
}

/// `command` and `args` with `$(VAR)` expanded from `env`, as the kubelet
/// passes them (an empty `command` keeps the image's entrypoint).
pub fn command_and_args(c: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let expand = |s: &String| expansion::expand(s, |n| map.get(n).map(|v| v.to_string()));
    (
        c.command.iter().flatten().map(expand).collect(),
        c.args.iter().flatten().map(expand).collect(),
    )
}

/// CPU shares, quota and period and the memory limit from a container's
/// requests and limits (kube's `milliCPUToShares` / `milliCPUToQuota`).
pub fn linux_resources(c: &Container) -> api::LinuxContainerResources {
    use kubeforge_apimachinery::quantity::{parse_milli, parse_value};
    let res = c.resources.clone().unwrap_or_default();
    let get =
        |m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone());
    let cpu_request = get(&res.requests, "cpu")
        .or_else(|| get(&res.limits, "cpu"))
        .and_then(|q| parse_milli(&q).ok());
    let cpu_limit = get(&res.limits, "cpu").and_then(|q| parse_milli(&q).ok());
    let memory_limit = get(&res.limits, "memory").and_then(|q| parse_value(&q).ok());
    const PERIOD: i64 = 100_000;
    let shares = match cpu_request {
        None | Some(0) => 2,
        Some(m) => (m * 1024 / 1000).max(2),
    };
    api::LinuxContainerResources {
        cpu_shares: shares,
        cpu_period: if cpu_limit.is_some() { PERIOD } else { 0 },
        cpu_quota: cpu_limit.map_or(0, |m| (m * PERIOD / 1000).max(1000)),
        memory_limit_in_bytes: memory_limit.unwrap_or(0),
        ..Default::default()
    }
}

/// Everything a container's config is made from besides the spec.
#[derive(Debug, Default)]
pub struct ContainerInputs {
    /// Resolved environment, in the pod's order.
    pub env: Vec<(String, String)>,
    /// Volume mounts as CRI mounts.
    pub mounts: Vec<api::Mount>,
    /// The image reference to run (what the pull returned).
    pub image: String,
    /// The OOM score adjustment ([`oom_score_adj`]).
    pub oom_score_adj: i64,
}

/// The container config of `c`'s `restart_count`th run.
pub fn container_config(
    pod: &Pod,
    c: &Container,
    restart_count: u32,
    inputs: ContainerInputs,
) -> api::ContainerConfig {
    let (name, ns, uid) = identity(pod);
    let (command, args) = command_and_args(c, &inputs.env);
    let labels = HashMap::from([
        (POD_NAME.to_string(), name.to_string()),
        (POD_NAMESPACE.to_string(), ns.to_string()),
        (POD_UID.to_string(), uid.to_string()),
        (CONTAINER_NAME.to_string(), c.name.clone()),
    ]);
    let grace = termination_grace(pod);
    let annotations = HashMap::from([
        (RESTART_COUNT.to_string(), restart_count.to_string()),
        (GRACE_PERIOD.to_string(), grace.to_string()),
    ]);
    let sc = c.security_context.clone().unwrap_or_default();
    let pod_sc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let run_as_user = sc.run_as_user.or(pod_sc.run_as_user);
    let run_as_group = sc.run_as_group.or(pod_sc.run_as_group);
    let pid_shared = pod
        .spec
        .as_ref()
        .is_some_and(|s| s.share_process_namespace.unwrap_or(false));
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt: restart_count,
        }),
        image: Some(api::ImageSpec {
            image: inputs.image,
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: inputs
            .env
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        mounts: inputs.mounts,
        labels,
        annotations,
        log_path: log_path(&c.name, restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(api::LinuxContainerResources {
                oom_score_adj: inputs.oom_score_adj,
                ..linux_resources(c)
            }),
            security_context: Some(api::LinuxContainerSecurityContext {
                privileged: sc.privileged.unwrap_or(false),
                run_as_user: run_as_user.map(|v| api::Int64Value { value: v }),
                run_as_group: run_as_group.map(|v| api::Int64Value { value: v }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: pod_sc.supplemental_groups.clone().unwrap_or_default(),
                no_new_privs: !sc.allow_privilege_escalation.unwrap_or(true),
                namespace_options: Some(api::NamespaceOption {
                    network: if pod
                        .spec
                        .as_ref()
                        .is_some_and(|s| s.host_network.unwrap_or(false))
                    {
                        api::NamespaceMode::Node as i32
                    } else {
                        api::NamespaceMode::Pod as i32
                    },
                    pid: if pod
                        .spec
                        .as_ref()
                        .is_some_and(|s| s.host_pid.unwrap_or(false))
                    {
                        api::NamespaceMode::Node as i32
                    } else if pid_shared {
                        api::NamespaceMode::Pod as i32
                    } else {
                        api::NamespaceMode::Container as i32
                    },
                    ipc: if pod
                        .spec
                        .as_ref()
                        .is_some_and(|s| s.host_ipc.unwrap_or(false))
                    {
                        api::NamespaceMode::Node as i32
                    } else {
                        api::NamespaceMode::Pod as i32
                    },
                    ..Default::default()
                }),
                masked_paths: if sc.privileged.unwrap_or(false) {
                    Vec::new()
                } else {
                    DEFAULT_MASKED.iter().map(|s| s.to_string()).collect()
                },
                readonly_paths: if sc.privileged.unwrap_or(false) {
                    Vec::new()
                } else {
                    DEFAULT_READONLY.iter().map(|s| s.to_string()).collect()
                },
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// The paths the kubelet masks in unprivileged containers
/// (`securitycontext.defaultMaskedPaths`).
const DEFAULT_MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// The paths the kubelet makes read-only in unprivileged containers.
const DEFAULT_READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "team", "uid": "u-1", "labels": {"app": "web"}},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn cluster_first_dns_is_kubes() {
        let p = pod(json!({"containers": [{"name": "c"}]}));
        let dns = DnsSettings {
            servers: vec!["10.96.0.10".into()],
            domain: "cluster.local".into(),
        };
        let cfg = dns_config(&p, &dns).unwrap();
        assert_eq!(cfg.servers, ["10.96.0.10"]);
        // The cluster's search domains first (the host's follow; the
        // rules themselves are pinned in dns::pod_config's tests).
        assert_eq!(
            cfg.searches[..3],
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local"
            ]
        );
        assert_eq!(cfg.options, ["ndots:5"]);
        // The pod's dnsConfig is merged last; an option replaces one of its name.
        let p = pod(json!({"containers": [{"name": "c"}],
            "dnsConfig": {"searches": ["x.example"], "options": [{"name": "ndots", "value": "2"}]}}));
        let cfg = dns_config(&p, &dns).unwrap();
        assert_eq!(cfg.searches.last().unwrap(), "x.example");
        assert_eq!(cfg.options, ["ndots:2"]);
    }

    #[test]
    fn commands_expand_env() {
        let c: Container = serde_json::from_value(json!({
            "name": "c", "command": ["sh", "-c", "echo $(GREETING) $(MISSING) $$(GREETING)"],
            "args": ["$(GREETING)"]}))
        .unwrap();
        let env = vec![("GREETING".to_string(), "hi".to_string())];
        let (cmd, args) = command_and_args(&c, &env);
        assert_eq!(cmd[2], "echo hi $(MISSING) $(GREETING)");
        assert_eq!(args, ["hi"]);
    }

    #[test]
    fn resources_follow_kubes_cpu_and_memory_rules() {
        let c: Container = serde_json::from_value(json!({"name": "c",
            "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}})).unwrap();
        let r = linux_resources(&c);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.cpu_period),
            (256, 50_000, 100_000)
        );
        assert_eq!(r.memory_limit_in_bytes, 64 << 20);
        let none: Container = serde_json::from_value(json!({"name": "c"})).unwrap();
        let r = linux_resources(&none);
        assert_eq!(
            (r.cpu_shares, r.cpu_quota, r.memory_limit_in_bytes),
            (2, 0, 0)
        );
    }

    #[test]
    fn sandbox_carries_the_pods_identity() {
        let p = pod(
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
        );
        let cfg = sandbox_config(
            &p,
            1,
            Path::new("/logs"),
            &DnsSettings::default(),
            NodePlace {
                name: "n1",
                cgroup: "/kubeforge/n1",
            },
        );
        let m = cfg.metadata.unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web", "team", "u-1", 1)
        );
        assert_eq!(cfg.log_directory, "/logs/team_web_u-1");
        assert_eq!(cfg.labels[POD_UID], "u-1");
        assert_eq!(cfg.labels["app"], "web");
        assert_eq!(cfg.port_mappings[0].host_port, 8080);
        assert_eq!(cfg.hostname, "web");
    }
}
