//! `kubeforge up` keeps its state: after `kill -9` (and after a clean
//! Ctrl-C stop) a second `up` on the same data directory serves every
//! acknowledged object, CRDs and custom resources included.

mod common;

use common::{Cluster, TempDir, default_kubectl, fixture};

#[test]
fn state_survives_kill_9_and_restart() {
    let kubectl = default_kubectl();
    let dir = TempDir::new("restart");
    let base = dir.0.clone();
    let c = Cluster::start_in(dir, &[]);
    c.ok(
        &kubectl,
        &[
            "apply",
            "-f",
            &fixture("crontab-crd.yaml").to_string_lossy(),
        ],
    );
    c.ok(
        &kubectl,
        &[
            "wait",
            "--for=condition=Established",
            "crd/crontabs.stable.example.com",
        ],
    );
    let ct = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata:\n  name: kept\nspec:\n  cronSpec: \"*/5 * * * *\"\n";
    let out = c.kubectl_stdin(&kubectl, &["apply", "-f", "-"], Some(ct));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..20 {
        c.ok(
            &kubectl,
            &[
                "create",
                "configmap",
                &format!("cm-{i}"),
                "--from-literal=i=x",
            ],
        );
    }
    let rv_before = c.ok(
        &kubectl,
        &[
            "get",
            "cm",
            "cm-19",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );

    // SIGKILL: no chance to flush anything that was not already durable.
    let mut c = c;
    c.child.kill().expect("kill -9");
    let _ = c.child.wait();
    let dir = TempDir(std::mem::replace(
        &mut c.dir.0,
        std::env::temp_dir().join("kubeforge-test-moved"),
    ));
    drop(c);
    assert_eq!(dir.0, base);

    let c = Cluster::start_in(dir, &[]);
    let names = c.ok(&kubectl, &["get", "cm", "-o", "name"]);
    for i in 0..20 {
        assert!(
            names.contains(&format!("configmap/cm-{i}")),
            "cm-{i} lost after kill -9: {names}"
        );
    }
    let rv_after = c.ok(
        &kubectl,
        &[
            "get",
            "cm",
            "cm-19",
            "-o",
            "jsonpath={.metadata.resourceVersion}",
        ],
    );
    assert_eq!(rv_before, rv_after);
    let spec = c.ok(
        &kubectl,
        &["get", "crontab", "kept", "-o", "jsonpath={.spec.cronSpec}"],
    );
    assert_eq!(spec, "*/5 * * * *");
    // New writes continue the revision sequence.
    c.ok(&kubectl, &["create", "configmap", "after"]);
    let rv_new: u64 = c
        .ok(
            &kubectl,
            &[
                "get",
                "cm",
                "after",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
        )
        .parse()
        .expect("rv");
    assert!(rv_new > rv_before.parse::<u64>().expect("rv"));
    c.stop();
}
