//! `kubeforge clean` of a dead cluster: `kubeforge up --container-nodes 2`
//! (root, Debian's containerd) runs 20 pods, is killed with SIGKILL (its
//! containerd, shims, pods, mounts, bridges, tables and cgroups stay), and
//! `kubeforge clean --data-dir` removes them; timed over the whole command.
//! The target is 5 s. Run with
//! `cargo bench -p kubeforge --bench clean`.

mod common;

use std::process::Command;
use std::time::Instant;

use common::ok;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return; // `cargo test` runs bench targets without --bench: nothing to do.
    }
    let dir = std::env::temp_dir().join(format!("kubeforge-clean-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (mut child, kubeconfig) = common::up(&dir, &["--container-nodes", "2"]);
    let k = kubeconfig.as_path();
    ok(
        k,
        &[
            "create",
            "deployment",
            "load",
            "--image=busybox:1.36",
            "--replicas=20",
            "--",
            "sleep",
            "3600",
        ],
    );
    ok(k, &["rollout", "status", "deploy/load", "--timeout=300s"]);
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");

    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["clean", "--data-dir"])
        .arg(&dir)
        .output()
        .expect("kubeforge clean");
    let took = t.elapsed();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let processes = said
        .lines()
        .filter(|l| l.contains("removed process"))
        .count();
    println!(
        "kubeforge clean of a killed 2-node cluster with 20 running pods: {:.2} s ({processes} processes ended, {} lines of removals)",
        took.as_secs_f64(),
        said.lines().count()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
