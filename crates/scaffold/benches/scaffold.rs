//! How long the scaffolding commands take (target: ≤ 100 ms each): init,
//! create api and create webhook into a fresh folder, N rounds, as the
//! library calls them (the `kubeforge` process adds its own start-up,
//! measured with `time` in docs/BENCHMARKS.md).
//!
//! `cargo bench -p kubeforge-scaffold --bench scaffold`

use std::time::{Duration, Instant};

use kubeforge_scaffold::{ApiOptions, InitOptions, Source, WebhookOptions};

fn main() {
    let rounds = 50;
    let root = std::env::temp_dir().join(format!("kf-scaffold-bench-{}", std::process::id()));
    let mut times: [Vec<Duration>; 3] = Default::default();
    for i in 0..rounds {
        let dir = root.join(i.to_string());
        std::fs::create_dir_all(&dir).expect("mkdir");
        let t = Instant::now();
        let init = InitOptions {
            domain: "example.com".into(),
            repo: "example.com/memcached-operator".into(),
            name: None,
            kubeforge: Source::Path("/opt/kubeforge".into()),
            lockfile: None,
        };
        kubeforge_scaffold::init(&dir, &init)
            .and_then(|p| p.apply())
            .expect("init");
        times[0].push(t.elapsed());
        let t = Instant::now();
        let api = ApiOptions {
            group: "cache".into(),
            version: "v1alpha1".into(),
            kind: "Memcached".into(),
            namespaced: true,
            resource: true,
            controller: true,
        };
        kubeforge_scaffold::create_api(&dir, &api)
            .and_then(|p| p.apply())
            .expect("create api");
        times[1].push(t.elapsed());
        let t = Instant::now();
        let hook = WebhookOptions {
            group: "cache".into(),
            version: "v1alpha1".into(),
            kind: "Memcached".into(),
            defaulting: true,
            validation: true,
        };
        kubeforge_scaffold::create_webhook(&dir, &hook)
            .and_then(|p| p.apply())
            .expect("create webhook");
        times[2].push(t.elapsed());
    }
    let _ = std::fs::remove_dir_all(&root);
    for (name, mut t) in ["init", "create api", "create webhook"]
        .into_iter()
        .zip(times)
    {
        t.sort();
        println!(
            "{name:<15} median {:>7.2} ms  p99 {:>7.2} ms  ({rounds} rounds)",
            t[t.len() / 2].as_secs_f64() * 1e3,
            t[t.len() * 99 / 100].as_secs_f64() * 1e3
        );
    }
}
