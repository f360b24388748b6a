//! The resolv.conf a pod gets, as the kubelet's `dns.Configurer`
//! (pkg/kubelet/network/dns/dns.go) computes it for the CRI sandbox.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;

use crate::cri::api;

/// At most this many nameservers (kube's `MaxDNSNameservers`).
const MAX_NAMESERVERS: usize = 3;
/// At most this many search domains (`MaxDNSSearchPaths`, 1.28+).
const MAX_SEARCH_PATHS: usize = 32;
/// At most this many characters on the search line (`MaxDNSSearchListChars`).
const MAX_SEARCH_CHARS: usize = 2048;
/// A search domain longer than a DNS-1123 subdomain is dropped (glibc
/// aborts on them).
const MAX_SEARCH_LEN: usize = 253;

/// The host's resolv.conf as the kubelet reads it: nameserver lines
/// accumulate, the last `search` and the last `options` line win, a
/// search domain's trailing dot is dropped, `#` lines are comments.
fn parse_resolv_conf(text: &str) -> api::DnsConfig {
    let mut cfg = api::DnsConfig::default();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("nameserver") => {
                if let Some(ns) = fields.next() {
                    cfg.servers.push(ns.to_string());
                }
            }
            Some("search") => {
                cfg.searches = fields
                    .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                    .collect();
            }
            Some("options") => cfg.options = fields.map(str::to_string).collect(),
            _ => {}
        }
    }
    cfg
}

fn omit_duplicates(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// The sandbox's DNS config for `pod`, as the kubelet computes it:
///
/// - `ClusterFirst` (the default; a hostNetwork pod falls back to
///   `Default`) and `ClusterFirstWithHostNet`: nameservers `cluster_dns`
///   only, search `<ns>.svc.<zone> svc.<zone> <zone>` then the host's,
///   deduplicated, options `ndots:5` only. With no `cluster_dns` the kubelet
///   falls back to `Default` (and records the event `MissingClusterDNS`,
///   which is the caller's to do).
/// - `Default`: the host's resolv.conf (`host_resolv_conf` is its text).
/// - `None`: nothing but the pod's `dnsConfig`.
///
/// The pod's `dnsConfig` is merged last (nameservers and searches appended
/// and deduplicated, options replacing those of the same name; sorted by
/// name here, where Go's map order makes kube's random), then kube's limits
/// apply: 3 nameservers, 32 search domains, each at most 253 characters,
/// 2048 characters on the line (dropped from the end).
///
/// `None` when there is nothing to write: containerd then copies the
/// host's resolv.conf, as it does for an empty config.
pub fn pod_dns_config(
    pod: &Pod,
    cluster_dns: &[IpAddr],
    zone: &str,
    host_resolv_conf: &str,
) -> Option<api::DnsConfig> {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let cluster = match policy {
        "None" => None,
        "Default" => Some(false),
        "ClusterFirstWithHostNet" => Some(true),
        "ClusterFirst" => Some(!host_network),
        // The API server rejects others; the kubelet then uses ClusterFirst.
        _ => Some(true),
    };
    let mut cfg = match cluster {
        None => api::DnsConfig::default(),
        Some(true) if !cluster_dns.is_empty() => {
            let host = parse_resolv_conf(host_resolv_conf);
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let searches = if zone.is_empty() {
                host.searches
            } else {
                let mut s = vec![
                    format!("{ns}.svc.{zone}"),
                    format!("svc.{zone}"),
                    zone.to_string(),
                ];
                s.extend(host.searches);
                omit_duplicates(s)
            };
            api::DnsConfig {
                servers: cluster_dns.iter().map(IpAddr::to_string).collect(),
                searches,
                options: vec!["ndots:5".to_string()],
            }
        }
        Some(_) => parse_resolv_conf(host_resolv_conf),
    };
    if let Some(extra) = spec.and_then(|s| s.dns_config.as_ref()) {
        cfg.servers
            .extend(extra.nameservers.iter().flatten().cloned());
        cfg.servers = omit_duplicates(std::mem::take(&mut cfg.servers));
        cfg.searches
            .extend(extra.searches.iter().flatten().cloned());
        cfg.searches = omit_duplicates(std::mem::take(&mut cfg.searches));
        let mut options: BTreeMap<String, String> = BTreeMap::new();
        for o in &cfg.options {
            match o.split_once(':') {
                Some((k, v)) => options.insert(k.to_string(), v.to_string()),
                None => options.insert(o.clone(), String::new()),
            };
        }
        for o in extra.options.iter().flatten() {
            options.insert(
                o.name.clone().unwrap_or_default(),
                o.value.clone().unwrap_or_default(),
            );
        }
        cfg.options = options
            .into_iter()
            .map(|(k, v)| if v.is_empty() { k } else { format!("{k}:{v}") })
            .collect();
    }
    cfg.servers.truncate(MAX_NAMESERVERS);
    cfg.searches = fit_search_limits(std::mem::take(&mut cfg.searches));
    if cfg.servers.is_empty() && cfg.searches.is_empty() && cfg.options.is_empty() {
        return None;
    }
    Some(cfg)
}

/// kube's `formDNSSearchFitsLimits`.
fn fit_search_limits(mut searches: Vec<String>) -> Vec<String> {
    searches.truncate(MAX_SEARCH_PATHS);
    searches.retain(|s| s.len() <= MAX_SEARCH_LEN);
    let line = searches.join(" ").len();
    if line > MAX_SEARCH_CHARS {
        let mut cut = 0;
        let mut keep = searches.len();
        while keep > 0 {
            keep -= 1;
            cut += searches[keep].len() + 1;
            if line.saturating_sub(cut) <= MAX_SEARCH_CHARS {
                break;
            }
        }
        searches.truncate(keep);
    }
    searches
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    const HOST: &str = "# written by hand\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n\
        search old.example\nsearch corp.example. cluster.local\noptions timeout:2\noptions edns0 attempts:3\n";

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "team"}, "spec": spec}),
        )
        .unwrap()
    }

    fn dns() -> Vec<IpAddr> {
        vec!["10.96.0.10".parse().unwrap()]
    }

    #[test]
    fn cluster_first() {
        let cfg = pod_dns_config(
            &pod(json!({"containers": []})),
            &dns(),
            "cluster.local",
            HOST,
        )
        .unwrap();
        assert_eq!(cfg.servers, ["10.96.0.10"]);
        assert_eq!(
            cfg.searches,
            [
                "team.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example"
            ],
            "the host's last search line, trailing dot dropped, deduplicated"
        );
        assert_eq!(cfg.options, ["ndots:5"], "the host's options are dropped");
        // ClusterFirstWithHostNet on the host network is still ClusterFirst.
        let hn = pod(
            json!({"containers": [], "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}),
        );
        assert_eq!(
            pod_dns_config(&hn, &dns(), "cluster.local", HOST)
                .unwrap()
                .servers,
            ["10.96.0.10"]
        );
    }

    #[test]
    fn default_and_fallbacks_use_the_host() {
        let host = |p: &Pod, cluster: &[IpAddr]| {
            pod_dns_config(p, cluster, "cluster.local", HOST).unwrap()
        };
        for p in [
            pod(json!({"containers": [], "dnsPolicy": "Default"})),
            pod(json!({"containers": [], "hostNetwork": true})),
        ] {
            let cfg = host(&p, &dns());
            assert_eq!(cfg.servers, ["192.0.2.53", "192.0.2.54"]);
            assert_eq!(cfg.searches, ["corp.example", "cluster.local"]);
            assert_eq!(
                cfg.options,
                ["edns0", "attempts:3"],
                "the last options line"
            );
        }
        // No cluster DNS: ClusterFirst falls back to Default.
        let cfg = host(&pod(json!({"containers": []})), &[]);
        assert_eq!(cfg.servers, ["192.0.2.53", "192.0.2.54"]);
        // Nothing at all: containerd copies the host's file.
        assert!(
            pod_dns_config(&pod(json!({"containers": []})), &[], "cluster.local", "").is_none()
        );
    }

    #[test]
    fn none_and_the_pods_dns_config() {
        let p = pod(json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1", "1.1.1.1"], "searches": ["a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "rotate"}]}}));
        let cfg = pod_dns_config(&p, &dns(), "cluster.local", HOST).unwrap();
        assert_eq!(cfg.servers, ["1.1.1.1"]);
        assert_eq!(cfg.searches, ["a.example"]);
        assert_eq!(cfg.options, ["ndots:2", "rotate"]);
        // Merged last over ClusterFirst: appended, deduplicated, options replaced by name.
        let p = pod(json!({"containers": [], "dnsConfig": {
            "nameservers": ["10.96.0.10", "1.1.1.1", "8.8.8.8", "9.9.9.9"],
            "searches": ["svc.cluster.local", "b.example"],
            "options": [{"name": "ndots", "value": "1"}, {"name": "edns0"}]}}));
        let cfg = pod_dns_config(&p, &dns(), "cluster.local", HOST).unwrap();
        assert_eq!(
            cfg.servers,
            ["10.96.0.10", "1.1.1.1", "8.8.8.8"],
            "at most 3"
        );
        assert_eq!(cfg.searches.last().unwrap(), "b.example");
        assert_eq!(cfg.searches.len(), 5);
        assert_eq!(cfg.options, ["edns0", "ndots:1"]);
    }

    #[test]
    fn search_limits_are_kubes() {
        // 40 domains: 32 kept. One over 253 characters: dropped.
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let host = format!("search {} {}\n", "x".repeat(254), many.join(" "));
        let cfg = pod_dns_config(
            &pod(json!({"containers": [], "dnsPolicy": "Default"})),
            &[],
            "",
            &host,
        )
        .unwrap();
        assert_eq!(
            cfg.searches.len(),
            31,
            "32 first, then the long one dropped"
        );
        assert_eq!(cfg.searches[0], "d0.example");
        // 2048 characters at most on the line, cut from the end.
        let long: Vec<String> = (0..20)
            .map(|i| format!("{i:02}{}", "y".repeat(150)))
            .collect();
        let cfg = pod_dns_config(
            &pod(json!({"containers": [], "dnsPolicy": "Default"})),
            &[],
            "",
            &format!("search {}\n", long.join(" ")),
        )
        .unwrap();
        assert!(cfg.searches.join(" ").len() <= 2048);
        assert_eq!(
            cfg.searches.len(),
            13,
            "13 × 152 + 12 = 1988 fits, 14 do not"
        );
    }
}
