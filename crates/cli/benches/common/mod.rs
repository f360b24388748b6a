//! What the benches on `kubeforge up --container-nodes` share: starting
//! `up` in a directory of their own and driving it with the kubectl on
//! PATH.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Start `kubeforge up --memory --listen 127.0.0.1:0 --data-dir DIR` with
/// `extra` arguments; returns it and its kubeconfig once it serves.
pub fn up(dir: &Path, extra: &[&str]) -> (Child, PathBuf) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["up", "--memory", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kubeforge (as root, with containerd)");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
    let kubeconfig: PathBuf = lines
        .by_ref()
        .find_map(|l| l.strip_prefix("export KUBECONFIG=").map(PathBuf::from))
        .expect("kubeforge up started");
    std::thread::spawn(move || lines.for_each(drop));
    (child, kubeconfig)
}

/// kubectl with `args`.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("kubectl on PATH")
}

/// kubectl with `args`, which must succeed; its stdout.
pub fn ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
