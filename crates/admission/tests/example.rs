//! The ≤ 40-line custom webhook example (examples/team_label.rs), run as a
//! process against the embedded API server on loopback.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_webhook_example_registers_and_denies() {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/team_label.rs"
    ))
    .expect("example source");
    assert!(
        source.lines().count() <= 40,
        "the example stays within 40 lines"
    );
    // cargo test builds examples beside the test binaries' deps directory.
    let exe = std::env::current_exe().expect("test exe");
    let example = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join("team_label");
    assert!(
        example.exists(),
        "{} was not built: run `cargo test -p kubeforge-admission` (which builds the examples)",
        example.display()
    );
    let (server, client) = cluster().await;
    let dir = TempDir::new("example");
    let (_addr, kubeconfig) = serve_loopback(&server, &dir.0).await;
    let mut child = Command::new(&example)
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &dir.0)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the example");
    let stdout = child.stdout.take().expect("stdout");
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("team-label webhook ready on "))
    })
    .await
    .expect("read stdout");
    assert!(ready, "the example printed its ready line");
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let bare: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "bare"}})).expect("cm");
    let (code, msg) = status_of(
        cms.create(&PostParams::default(), &bare)
            .await
            .expect_err("denied"),
    );
    assert_eq!(
        (code, msg.as_str()),
        (
            403,
            "admission webhook \"team.example.com\" denied the request: every ConfigMap needs a team label"
        )
    );
    let owned: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "owned", "labels": {"team": "storage"}}}),
    )
    .expect("cm");
    cms.create(&PostParams::default(), &owned)
        .await
        .expect("admitted");
    let _ = child.kill();
    let _ = child.wait();
}
