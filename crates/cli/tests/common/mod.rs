//! Shared helpers for the CLI's integration tests: start `kubeforge up` on a
//! free loopback port in a temporary directory, and run real kubectl
//! binaries against it.

#![allow(dead_code, missing_docs)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("kubeforge-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `kubeforge up`.
pub struct Cluster {
    pub child: Child,
    pub dir: TempDir,
    pub kubeconfig: PathBuf,
    pub url: String,
    /// The state metrics' URL, with `--state-metrics`.
    pub state_metrics: Option<String>,
}

impl Cluster {
    /// Start `kubeforge up` with extra arguments; waits for the export line.
    pub fn start(extra: &[&str]) -> Cluster {
        let dir = TempDir::new("up");
        Self::start_in(dir, extra)
    }

    pub fn start_in(dir: TempDir, extra: &[&str]) -> Cluster {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .arg("up")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.0.join("state"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kubeforge");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut kubeconfig = None;
        let mut url = None;
        let mut state_metrics = None;
        for line in lines.by_ref() {
            let line = line.expect("read stdout");
            if let Some(u) = line.trim().strip_prefix("API server: ") {
                url = Some(u.to_string());
            }
            if let Some(s) = line.trim().strip_prefix("state:") {
                state_metrics = s.split_whitespace().next().map(String::from);
            }
            if let Some(k) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(k));
                break;
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Cluster {
            child,
            dir,
            kubeconfig: kubeconfig.expect("kubeforge printed the export line"),
            url: url.expect("kubeforge printed its URL"),
            state_metrics,
        }
    }

    /// Run a kubectl binary (`None` = the one on PATH).
    pub fn kubectl(&self, bin: &Path, args: &[&str]) -> Output {
        self.kubectl_stdin(bin, args, None)
    }

    pub fn kubectl_stdin(&self, bin: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let cache = self.dir.0.join(format!(
            "cache-{}",
            bin.file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("kubectl")
        ));
        let mut child = Command::new(bin)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &cache)
            .env("HOME", &self.dir.0)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }

    /// Run kubectl and require success; returns stdout.
    pub fn ok(&self, bin: &Path, args: &[&str]) -> String {
        let out = self.kubectl(bin, args);
        assert!(
            out.status.success(),
            "{} {:?} failed:\nstdout: {}\nstderr: {}",
            bin.display(),
            args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run kubectl and require failure; returns stderr.
    pub fn fails(&self, bin: &Path, args: &[&str]) -> String {
        let out = self.kubectl(bin, args);
        assert!(
            !out.status.success(),
            "{} {:?} unexpectedly succeeded: {}",
            bin.display(),
            args,
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-INT")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // A test that failed still stops `up` the way a user does (Ctrl-C),
        // so what it started (container nodes' runtimes, their pods) is
        // removed too; a kill follows only if it hangs.
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(self.child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kubectl on PATH.
pub fn default_kubectl() -> PathBuf {
    which("kubectl").expect("kubectl must be on PATH for these tests")
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// `kubectl.1.NN` beside the real kubectl binary; the test fails when it is
/// missing (it never skips).
pub fn versioned_kubectl(minor: u32) -> PathBuf {
    let real = std::fs::canonicalize(default_kubectl()).expect("resolve kubectl");
    let p = real.with_file_name(format!("kubectl.1.{minor}"));
    assert!(
        p.is_file(),
        "{} is missing: the tests need kubectl 1.27-1.33 beside kubectl",
        p.display()
    );
    p
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}
