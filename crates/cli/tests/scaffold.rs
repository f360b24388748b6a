//! The seed's sequence, in kubeforge's form, in an empty folder:
//! `kubeforge init`, `create api`, `create webhook`, `make manifests`,
//! `cargo test` (the generated tests pass as generated, the controller's
//! running as the operator's ServiceAccount under the RBAC generated from
//! its code, and failing once a declaration is removed), then `make run`
//! against `kubeforge up` (the sample becomes Ready, the webhooks default
//! and refuse), `kubectl kustomize` and `kubectl apply -k config/default`.
//! Also: bad input exits 2 and writes nothing, re-running never touches
//! user code, and a second kind and a second version work.
//!
//! The generated project builds in `target/scaffold-e2e` (its own feature
//! set; offline, from the workspace's Cargo.lock).

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Cluster, TempDir, default_kubectl};

fn kubeforge(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run kubeforge")
}

fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn usage_error(out: Output, want: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit code 2 expected: {err}");
    assert!(err.contains(want), "{want:?} not in: {err}");
}

/// Every file under `dir` with its content (to show nothing changed).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).expect("read file"));
            }
        }
    }
    out
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/scaffold-e2e")
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO_NET_OFFLINE", "true")
        .env_remove("RUSTFLAGS");
    c
}

fn make(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("make");
    c.args(args)
        .arg(format!("KUBEFORGE={}", env!("CARGO_BIN_EXE_kubeforge")))
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir())
        .env("CARGO_NET_OFFLINE", "true");
    c
}

fn read(dir: &Path, rel: &str) -> String {
    std::fs::read_to_string(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn scaffolded_operator_builds_tests_runs_and_deploys() {
    let tmp = TempDir::new("scaffold");
    let dir = tmp.0.join("memcached-operator");
    std::fs::create_dir_all(&dir).expect("mkdir");

    // Bad input before anything exists: exit 2, nothing written.
    usage_error(
        kubeforge(
            &dir,
            &[
                "init",
                "--domain",
                "Example.com",
                "--repo",
                "example.com/memcached-operator",
            ],
        ),
        "--domain \"Example.com\" is not valid",
    );
    usage_error(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Memcached",
                "--resource",
            ],
        ),
        "no PROJECT file",
    );
    assert!(snapshot(&dir).is_empty(), "bad input wrote files");

    step("init, create api, create webhook");
    // The seed's sequence.
    ok(
        kubeforge(
            &dir,
            &[
                "init",
                "--domain",
                "example.com",
                "--repo",
                "example.com/memcached-operator",
            ],
        ),
        "kubeforge init",
    );
    ok(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Memcached",
                "--resource",
                "--controller",
            ],
        ),
        "kubeforge create api",
    );
    ok(
        kubeforge(
            &dir,
            &[
                "create",
                "webhook",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Memcached",
                "--defaulting",
                "--programmatic-validation",
            ],
        ),
        "kubeforge create webhook",
    );

    // Bad input on the project: exit 2, nothing changed.
    let before = snapshot(&dir);
    usage_error(
        kubeforge(
            &dir,
            &["init", "--domain", "example.com", "--repo", "example.com/x"],
        ),
        "is not empty",
    );
    usage_error(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Memcached",
                "--resource",
            ],
        ),
        "exists already",
    );
    usage_error(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1",
                "--kind",
                "memcached",
                "--resource",
            ],
        ),
        "--kind \"memcached\" is not valid",
    );
    usage_error(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "1.0",
                "--kind",
                "Backup",
                "--resource",
            ],
        ),
        "--version \"1.0\" is not valid",
    );
    usage_error(
        kubeforge(
            &dir,
            &[
                "create",
                "webhook",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Memcached",
                "--defaulting",
            ],
        ),
        "has webhooks already",
    );
    let out = kubeforge(
        &dir,
        &["create", "api", "--group", "cache", "--kind", "Backup"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing flag is a usage error"
    );
    assert_eq!(snapshot(&dir), before, "a refused command changed files");

    // Re-running never touches user code: a second version of the kind and
    // a second kind regenerate the module lists only.
    let controller = dir.join("src/controllers/memcached.rs");
    let mut mine = read(&dir, "src/controllers/memcached.rs");
    mine.push_str("\n// my own note: kept by later kubeforge commands\n");
    std::fs::write(&controller, &mine).expect("edit the controller");
    ok(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1",
                "--kind",
                "Memcached",
                "--resource",
            ],
        ),
        "create api (second version)",
    );
    ok(
        kubeforge(
            &dir,
            &[
                "create",
                "api",
                "--group",
                "cache",
                "--version",
                "v1alpha1",
                "--kind",
                "Backup",
                "--resource",
                "--controller",
            ],
        ),
        "create api (second kind)",
    );
    assert_eq!(
        read(&dir, "src/controllers/memcached.rs"),
        mine,
        "user code was rewritten"
    );
    let controllers = read(&dir, "src/controllers/mod.rs");
    assert!(
        controllers.contains("pub mod memcached;") && controllers.contains("pub mod backup;"),
        "{controllers}"
    );

    step("make manifests");
    // make manifests: CRDs from the types (two versions, v1alpha1 stored),
    // RBAC from the controllers' declarations, webhook configurations.
    let out = make(&dir, &["manifests"]).output().expect("make manifests");
    ok(out, "make manifests");
    let crd = read(&dir, "config/crd/bases/cache.example.com_memcacheds.yaml");
    let crd_json: serde_json::Value =
        serde_saphyr::from_str(crd.split_once("---\n").map_or(crd.as_str(), |(_, b)| b))
            .expect("CRD YAML");
    let versions: Vec<(String, bool)> = crd_json["spec"]["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default().to_string(),
                v["storage"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [("v1alpha1".to_string(), true), ("v1".to_string(), false)],
        "{crd}"
    );
    let role = read(&dir, "config/rbac/role.yaml");
    for want in [
        "memcacheds/status",
        "backups/status",
        "mutatingwebhookconfigurations",
        "events.k8s.io",
    ] {
        assert!(
            role.contains(want),
            "{want} missing from the generated role:\n{role}"
        );
    }
    let webhooks = read(&dir, "config/webhook/manifests.yaml");
    assert!(
        webhooks.contains("/mutate-cache-example-com-v1alpha1-memcached"),
        "{webhooks}"
    );
    assert!(
        webhooks.contains("/validate-cache-example-com-v1alpha1-memcached"),
        "{webhooks}"
    );

    step("cargo test (first build of the generated project)");
    // cargo test: the generated tests pass as generated.
    let out = cargo()
        .arg("test")
        .current_dir(&dir)
        .output()
        .expect("cargo test");
    let report = ok(out, "the generated project's cargo test");
    assert!(
        report.contains("memcached_becomes_ready_under_the_generated_rbac ... ok"),
        "{report}"
    );
    assert!(
        report.contains("memcached_v1alpha1_webhooks_answer_the_api_server ... ok"),
        "{report}"
    );

    step("cargo test without writes_status");
    // Without the status declaration the operator may not write status: the
    // test (as the ServiceAccount) fails.
    let without = mine.replace("        .writes_status()\n", "");
    assert_ne!(without, mine, "the template declares writes_status");
    std::fs::write(&controller, &without).expect("drop the declaration");
    let out = cargo()
        .args(["test", "--test", "memcached"])
        .current_dir(&dir)
        .output()
        .expect("cargo test");
    assert!(
        !out.status.success(),
        "the test passed without the status rule:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    std::fs::write(&controller, &mine).expect("restore the declaration");

    step("make run against kubeforge up");
    // make run against kubeforge up: the sample becomes Ready; the webhooks
    // default and refuse.
    let cluster = Cluster::start(&["--nodes", "1"]);
    let kubectl = default_kubectl();
    let mut run = make(&dir, &["run"])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map(Group)
        .expect("make run");
    // The webhooks are installed once the manager serves them.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let out = cluster.kubectl(
            &kubectl,
            &["get", "validatingwebhookconfigurations", "-o", "name"],
        );
        if String::from_utf8_lossy(&out.stdout).contains("validating-memcached-v1alpha1") {
            break;
        }
        if let Ok(Some(status)) = run.0.try_wait() {
            let mut err = String::new();
            use std::io::Read as _;
            if let Some(mut e) = run.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("make run exited ({status}):\n{err}");
        }
        assert!(
            Instant::now() < deadline,
            "make run never installed its webhooks"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    cluster.ok(
        &kubectl,
        &[
            "apply",
            "-k",
            &dir.join("config/samples").display().to_string(),
        ],
    );
    step("wait for the sample to be Ready");
    let ready = "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}";
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.ok(
        &kubectl,
        &["get", "memcached", "memcached-sample", "-o", ready],
    ) != "True"
    {
        assert!(Instant::now() < deadline, "the sample never became Ready");
        std::thread::sleep(Duration::from_millis(200));
    }
    step("the webhooks");
    let defaulted = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: defaulted\nspec: {}\n";
    cluster.ok(
        &kubectl,
        &[
            "create",
            "-f",
            &write_tmp(&tmp, "defaulted.yaml", defaulted),
        ],
    );
    assert_eq!(
        cluster.ok(
            &kubectl,
            &[
                "get",
                "memcached",
                "defaulted",
                "-o",
                "jsonpath={.spec.size}"
            ]
        ),
        "1"
    );
    let big = "apiVersion: cache.example.com/v1alpha1\nkind: Memcached\nmetadata:\n  name: big\nspec:\n  size: 50\n";
    let err = cluster.fails(
        &kubectl,
        &["create", "-f", &write_tmp(&tmp, "big.yaml", big)],
    );
    assert!(
        err.contains("denied the request") && err.contains("is more than 10"),
        "{err}"
    );
    run.stop();

    step("kustomize");
    // The kustomize layout renders and applies.
    let rendered = ok(
        Command::new(&kubectl)
            .args(["kustomize", "config/default"])
            .current_dir(&dir)
            .output()
            .expect("kubectl kustomize"),
        "kubectl kustomize config/default",
    );
    for want in [
        "name: memcached-operator-controller-manager",
        "namespace: memcached-operator-system",
        "name: memcached-operator-webhook-service",
        "name: memcached-operator-manager-role",
    ] {
        assert!(rendered.contains(want), "{want} not rendered:\n{rendered}");
    }
    ok(
        Command::new(&kubectl)
            .args(["kustomize", "config/overlays/cert-manager"])
            .current_dir(&dir)
            .output()
            .expect("kubectl kustomize"),
        "kubectl kustomize config/overlays/cert-manager",
    );
    cluster.ok(
        &kubectl,
        &[
            "apply",
            "-k",
            &dir.join("config/default").display().to_string(),
        ],
    );
    let sa = cluster.ok(
        &kubectl,
        &["get", "sa", "-n", "memcached-operator-system", "-o", "name"],
    );
    assert!(sa.contains("memcached-operator-controller-manager"), "{sa}");

    step("docker-build");
    // docker-build without Docker: a clear message, exit 2.
    let out = make(&dir, &["docker-build"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("make docker-build");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("docker-build needs Docker"),
        "{err}"
    );
    cluster.stop();
}

/// A process group (`make run`: make, cargo, the manager), stopped with
/// SIGINT as a terminal would, and killed if the test fails first.
struct Group(std::process::Child);

impl Group {
    fn signal(&self, sig: &str) {
        // `--` so that the negative (group) id is not read as an option.
        let _ = Command::new("kill")
            .args(["-s", sig, "--", &format!("-{}", self.0.id())])
            .status();
    }

    fn stop(mut self) {
        self.signal("INT");
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            self.signal("KILL");
            let _ = self.0.wait();
        }
    }
}

/// Say which step runs (shown with --nocapture and when the test fails).
fn step(what: &str) {
    eprintln!("scaffold e2e: {what}");
}

fn write_tmp(tmp: &TempDir, name: &str, text: &str) -> String {
    let p = tmp.0.join(name);
    std::fs::write(&p, text).expect("write");
    p.display().to_string()
}
