//! Container-node clusters that coexist and clean up after a crash, as a
//! user sees them: a cluster killed with SIGKILL leaves its containerd,
//! shims, pods, bridge, tables and cgroups behind; a second cluster in
//! another data directory runs beside those leftovers; `kubeforge clean`
//! removes the dead one's and only those; a test that panics midway leaves
//! nothing. Needs root and the Debian packages scripts/test-all.sh
//! installs.
//!
//! Every check here looks for one cluster's own id and data directory, so
//! a foreign cluster on the machine neither fails it nor is touched.

#![allow(missing_docs, clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Cluster, default_kubectl, leftovers};
use kubeforge_node::footprint::ClusterId;

/// `kubeforge clean --data-dir DIR`: (exit code, stdout, stderr).
fn clean(state: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["clean", "--data-dir"])
        .arg(state)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run a pod sleeping on the cluster and wait until it is Ready.
fn run_pod(c: &Cluster, k: &Path, name: &str) {
    c.ok(
        k,
        &["run", name, "--image=busybox:1.36", "--", "sleep", "3600"],
    );
    c.ok(
        k,
        &[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=90s",
        ],
    );
}

#[test]
fn a_killed_cluster_is_cleaned_and_another_beside_it_runs_on() {
    let k = default_kubectl();
    let mut a = Cluster::start(&["--container-nodes", "1", "--memory"]);
    let a_state = a.dir.0.join("state");
    run_pod(&a, &k, "a-pod");
    // SIGKILL: none of up's own clean-up runs.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let left = leftovers(&a_state);
    for what in ["process", "link", "table", "cgroup"] {
        assert!(
            left.iter().any(|l| l.starts_with(what)),
            "a killed cluster leaves a {what} behind (else this test proves nothing): {left:#?}"
        );
    }

    // Another cluster runs beside the leftovers, on ranges of its own.
    let b = Cluster::start(&["--container-nodes", "1", "--memory"]);
    let b_state = b.dir.0.join("state");
    assert_ne!(ClusterId::of(&a_state), ClusterId::of(&b_state));
    run_pod(&b, &k, "b-pod");
    assert_eq!(b.ok(&k, &["exec", "b-pod", "--", "echo", "hi"]), "hi\n");

    // The dead one is removed, and only it.
    let (code, out, err) = clean(&a_state);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed process"), "{out}");
    assert!(out.contains("removed link"), "{out}");
    let left = leftovers(&a_state);
    assert!(left.is_empty(), "left of the killed cluster: {left:#?}");
    let (code, out, err) = clean(&a_state);
    assert_eq!(
        (code, out.trim()),
        (
            0,
            format!("{}: nothing to clean", a_state.display()).as_str()
        ),
        "{err}"
    );
    assert_eq!(b.ok(&k, &["exec", "b-pod", "--", "echo", "hi"]), "hi\n");

    // A live cluster is refused, naming its pid, and not touched.
    let (code, _, err) = clean(&b_state);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("pid {}", b.child.id())), "{err}");
    assert_eq!(b.ok(&k, &["exec", "b-pod", "--", "echo", "hi"]), "hi\n");

    // Stopping the other leaves nothing of it.
    b.stop();
    let left = leftovers(&b_state);
    assert!(left.is_empty(), "left after stopping: {left:#?}");
}

#[test]
fn a_test_that_panics_midway_leaves_nothing() {
    let k = default_kubectl();
    let (tx, rx) = std::sync::mpsc::channel::<PathBuf>();
    let panicked = std::thread::spawn(move || {
        let c = Cluster::start(&["--container-nodes", "1", "--memory"]);
        tx.send(c.dir.0.join("state")).unwrap();
        run_pod(&c, &k, "doomed");
        panic!("a test fails midway, its cluster running a pod");
    })
    .join();
    assert!(panicked.is_err());
    let state = rx.recv().unwrap();
    let left = leftovers(&state);
    assert!(left.is_empty(), "left by the failed test: {left:#?}");
}
