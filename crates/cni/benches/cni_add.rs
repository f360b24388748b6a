//! ADD+DEL latency of kubeforge-cni against Debian's reference `bridge`
//! plugin (with `host-local`), same netconf shape, same run, alternating
//! rounds on one test-made netns each. Run as root:
//! `cargo bench -p kubeforge-cni --bench cni_add` (`ROUNDS=N` to change 200).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let mut f = Fixture::new("bench", 2);
    f.own_link("kfcnib0");
    f.own_link("kfcnib1");
    let plugins = [
        (
            "kubeforge-cni",
            OURS,
            netconf(
                "kubeforge-cni",
                "1.0.0",
                "kfbench",
                "kfcnib0",
                "10.250.200.0/24",
                f.dir(),
            ),
        ),
        (
            "reference bridge",
            REFERENCE_BRIDGE,
            netconf(
                "bridge",
                "1.0.0",
                "kfbenchref",
                "kfcnib1",
                "10.250.201.0/24",
                f.dir(),
            ),
        ),
    ];
    let mut add = [Vec::new(), Vec::new()];
    let mut del = [Vec::new(), Vec::new()];
    // One warm-up round each creates the bridges, so every measured ADD finds its bridge.
    for round in 0..=rounds {
        for (i, (name, bin, conf)) in plugins.iter().enumerate() {
            let t = Instant::now();
            let a = cni(bin, "ADD", "bench", &f.path(i), "eth0", conf);
            let ta = t.elapsed();
            assert_eq!(a.code, 0, "{name} ADD: {}", a.json);
            let t = Instant::now();
            let d = cni(
                bin,
                "DEL",
                "bench",
                &f.path(i),
                "eth0",
                &with_prev(conf, &a.json),
            );
            let td = t.elapsed();
            assert_eq!(d.code, 0, "{name} DEL: {}", d.json);
            if round > 0 {
                add[i].push(ta);
                del[i].push(td);
            }
        }
    }
    println!(
        "ADD+DEL latency, {rounds} rounds each, alternating (ms, wall time of the plugin process)"
    );
    println!(
        "{:<18} {:>9} {:>9} {:>9} {:>9}",
        "plugin", "ADD p50", "ADD p99", "DEL p50", "DEL p99"
    );
    for (i, (name, _, _)) in plugins.iter().enumerate() {
        add[i].sort();
        del[i].sort();
        println!(
            "{:<18} {:>9} {:>9} {:>9} {:>9}",
            name,
            ms(percentile(&add[i], 0.5)),
            ms(percentile(&add[i], 0.99)),
            ms(percentile(&del[i], 0.5)),
            ms(percentile(&del[i], 0.99))
        );
    }
}
