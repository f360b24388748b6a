//! Shared helpers for the CLI's integration tests: start `kubeforge up` on a
//! free loopback port in a temporary directory, and run real kubectl
//! binaries against it. Every wait here is bounded: a hung `up` or kubectl
//! fails the test with what it printed, and never hangs the suite.

#![allow(dead_code, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// How long one kubectl call may take before it is killed and the test fails.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `kubeforge up` may take to print its `export KUBECONFIG=` line.
pub const UP_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `up` has to stop on Ctrl-C before it is killed and cleaned after.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `kubeforge clean` may take.
const CLEAN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a killed process has to be reaped (it may be stuck in the kernel).
const REAP_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// Start `kubeforge up` with its state in `dir/state`; waits (at most
    /// [`UP_TIMEOUT`]) for the export line.
    pub fn start_in(dir: TempDir, extra: &[&str]) -> Cluster {
        let state = dir.0.join("state");
        // util-linux's setpriv sets a parent-death signal and execs `up`
        // (same pid): when the test's thread ends without stopping it —
        // the test binary killed, say — `up` gets SIGTERM and stops
        // everything it started, instead of running on as a leftover.
        let mut child = Command::new("setpriv")
            .args(["--pdeathsig", "TERM", "--"])
            .arg(env!("CARGO_BIN_EXE_kubeforge"))
            .arg("up")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(&state)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start kubeforge");
        let stdout = child.stdout.take().expect("stdout");
        // One thread reads every line, for as long as `up` runs, so the child
        // never blocks on a full pipe; the lines before the export line come
        // here, with a deadline.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Once the receiver is gone the lines are only drained.
                let _ = tx.send(line);
            }
        });
        let mut printed = String::new();
        let mut kubeconfig = None;
        let mut url = None;
        let mut state_metrics = None;
        let deadline = Instant::now() + UP_TIMEOUT;
        while kubeconfig.is_none() {
            let line = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => fail_start(
                    child,
                    &state,
                    format!(
                        "kubeforge up {extra:?} did not print its export KUBECONFIG= line within {UP_TIMEOUT:?} (killed); its stdout so far:\n{printed}"
                    ),
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = match wait_within(&mut child, REAP_TIMEOUT) {
                        Some(s) => s.to_string(),
                        None => format!("still running {REAP_TIMEOUT:?} after closing its stdout"),
                    };
                    fail_start(
                        child,
                        &state,
                        format!(
                            "kubeforge up {extra:?} exited before printing its export KUBECONFIG= line ({status}); its stdout:\n{printed}"
                        ),
                    )
                }
            };
            printed.push_str(&line);
            printed.push('\n');
            if let Some(u) = line.trim().strip_prefix("API server: ") {
                url = Some(u.to_string());
            }
            if let Some(s) = line.trim().strip_prefix("state:") {
                state_metrics = s.split_whitespace().next().map(String::from);
            }
            if let Some(k) = line.strip_prefix("export KUBECONFIG=") {
                kubeconfig = Some(PathBuf::from(k));
            }
        }
        let Some(url) = url else {
            fail_start(
                child,
                &state,
                format!(
                    "kubeforge up {extra:?} printed no `API server: ` line before its export line:\n{printed}"
                ),
            )
        };
        Cluster {
            child,
            dir,
            kubeconfig: kubeconfig.expect("the loop ends on the export line"),
            url,
            state_metrics,
        }
    }

    /// Run a kubectl binary (`None` = the one on PATH).
    pub fn kubectl(&self, bin: &Path, args: &[&str]) -> Output {
        self.kubectl_stdin(bin, args, None)
    }

    /// Run a kubectl binary with `stdin` as its input; it is killed, and the
    /// test fails naming it, if it takes longer than [`KUBECTL_TIMEOUT`].
    pub fn kubectl_stdin(&self, bin: &Path, args: &[&str], stdin: Option<&str>) -> Output {
        let cache = self.dir.0.join(format!(
            "cache-{}",
            bin.file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("kubectl")
        ));
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &cache)
            .env("HOME", &self.dir.0);
        match run_within(&mut cmd, stdin, KUBECTL_TIMEOUT) {
            Ok(Run::Exited(out)) => out,
            Ok(Run::TimedOut { stdout, stderr }) => panic!(
                "{} {:?} did not finish within {KUBECTL_TIMEOUT:?} (killed):\nstdout so far: {}\nstderr so far: {}",
                bin.display(),
                args,
                String::from_utf8_lossy(&stdout),
                String::from_utf8_lossy(&stderr)
            ),
            Err(e) => panic!("running {}: {e}", bin.display()),
        }
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

    /// Stop `up` as a user does (Ctrl-C), bounded as on drop (below).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Cluster {
    /// A test that failed still stops `up` the way a user does (Ctrl-C), so
    /// what it started (container nodes' runtimes, their pods) is removed
    /// too. If it does not exit within [`STOP_TIMEOUT`] it is killed, and
    /// `kubeforge clean` removes what it left; so it is when `up` ended by a
    /// signal or with an error. Never panics.
    fn drop(&mut self) {
        let state = self.dir.0.join("state");
        let status = match self.child.try_wait() {
            Ok(Some(s)) => Some(s),
            Ok(None) => {
                let _ = Command::new("kill")
                    .arg("-INT")
                    .arg(self.child.id().to_string())
                    .status();
                wait_within(&mut self.child, STOP_TIMEOUT)
            }
            Err(_) => None,
        };
        match status {
            Some(s) if s.success() => {}
            Some(s) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "kubeforge up ended with {s}: cleaning {}",
                    state.display()
                );
                clean(&state);
            }
            None => {
                let _ = writeln!(
                    std::io::stderr(),
                    "kubeforge up did not stop within {STOP_TIMEOUT:?} of Ctrl-C: killing it and cleaning {}",
                    state.display()
                );
                kill(&mut self.child);
                clean(&state);
            }
        }
    }
}

/// Kill `up` when it failed to start, remove what it left, then fail the test
/// with `msg`.
fn fail_start(mut child: Child, state: &Path, msg: String) -> ! {
    kill(&mut child);
    clean(state);
    panic!("{msg}");
}

/// SIGKILL the child and reap it (bounded: a process stuck in the kernel is
/// left behind, with a note).
fn kill(child: &mut Child) {
    let _ = child.kill();
    if wait_within(child, REAP_TIMEOUT).is_none() {
        let _ = writeln!(
            std::io::stderr(),
            "process {} was not reaped within {REAP_TIMEOUT:?} of SIGKILL",
            child.id()
        );
    }
}

/// Run `kubeforge clean --data-dir <state>`: removes what a killed `up` left
/// (containerd, shims, bridges…). Its exit status is ignored (1: something
/// could not be removed); its output goes to stderr. Never panics.
fn clean(state: &Path) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubeforge"));
    cmd.arg("clean").arg("--data-dir").arg(state);
    let mut err = std::io::stderr();
    match run_within(&mut cmd, None, CLEAN_TIMEOUT) {
        Ok(Run::Exited(out)) => {
            let _ = writeln!(
                err,
                "kubeforge clean --data-dir {}: {}",
                state.display(),
                out.status
            );
            let _ = err.write_all(&out.stdout);
            let _ = err.write_all(&out.stderr);
        }
        Ok(Run::TimedOut { stdout, stderr }) => {
            let _ = writeln!(
                err,
                "kubeforge clean --data-dir {} did not finish within {CLEAN_TIMEOUT:?} (killed)",
                state.display()
            );
            let _ = err.write_all(&stdout);
            let _ = err.write_all(&stderr);
        }
        Err(e) => {
            let _ = writeln!(err, "running kubeforge clean: {e}");
        }
    }
}

/// Poll the child until it exits or `within` passes.
fn wait_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How a bounded run ended.
enum Run {
    Exited(Output),
    /// Killed at the deadline, with what it had printed.
    TimedOut {
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    },
}

/// `cmd.output()` with `stdin` as input and a deadline: stdin is written and
/// stdout/stderr are read on threads, and the child is killed at the deadline.
fn run_within(cmd: &mut Command, stdin: Option<&str>, within: Duration) -> std::io::Result<Run> {
    let deadline = Instant::now() + within;
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let input = input.to_owned();
        // A child that does not read its input must not block us on a full
        // pipe; a write error (it exited early) shows in its output.
        std::thread::spawn(move || {
            let _ = pipe.write_all(input.as_bytes());
        });
    }
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = collect(child.stdout.take(), done_tx.clone());
    let stderr = collect(child.stderr.take(), done_tx);
    let taken = |b: &Arc<Mutex<Vec<u8>>>| {
        std::mem::take(&mut *b.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    };
    // Both pipes reach end-of-file when the child exits (or closes them)...
    let mut open = 2;
    while open > 0 {
        match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => open -= 1,
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                kill(&mut child);
                return Ok(Run::TimedOut {
                    stdout: taken(&stdout),
                    stderr: taken(&stderr),
                });
            }
        }
    }
    // ...and then it has exited, or soon will.
    match wait_within(
        &mut child,
        deadline.saturating_duration_since(Instant::now()),
    ) {
        Some(status) => Ok(Run::Exited(Output {
            status,
            stdout: taken(&stdout),
            stderr: taken(&stderr),
        })),
        None => {
            kill(&mut child);
            Ok(Run::TimedOut {
                stdout: taken(&stdout),
                stderr: taken(&stderr),
            })
        }
    }
}

/// Read `pipe` to its end on a thread into the returned buffer (readable at
/// any time: a timed-out run reports what it printed so far); signals `done`
/// at the end.
fn collect(
    pipe: Option<impl Read + Send + 'static>,
    done: mpsc::Sender<()>,
) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let out = buf.clone();
    std::thread::spawn(move || {
        if let Some(mut pipe) = pipe {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => out
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        let _ = done.send(());
    });
    buf
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

/// What of the container-node cluster with data directory `state` is on
/// this machine, by its own id and directory only: live processes naming
/// the directory (a zombie's command line is empty), mounts under it, its
/// links, nftables tables and cgroups (a process left in one keeps it).
pub fn leftovers(state: &Path) -> Vec<String> {
    let id = kubeforge_node::footprint::ClusterId::of(state);
    let dir = state.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(&dir) {
            out.push(format!("process {pid}: {cmdline}"));
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    out.extend(
        mounts
            .lines()
            .filter(|l| l.contains(&dir))
            .map(|l| format!("mount {l}")),
    );
    out.extend(
        kubeforge_node::footprint::links()
            .into_iter()
            .filter(|l| l.starts_with(&id.link_prefix()))
            .map(|l| format!("link {l}")),
    );
    out.extend(
        kubeforge_node::footprint::tables()
            .into_iter()
            .filter(|(_, t)| t.starts_with(&id.table_prefix()))
            .map(|(f, t)| format!("table {f} {t}")),
    );
    let cgroup = id.cgroup_parent();
    for h in std::fs::read_dir("/sys/fs/cgroup")
        .expect("read /sys/fs/cgroup")
        .flatten()
    {
        let c = h.path().join(cgroup.trim_start_matches('/'));
        if c.exists() {
            out.push(format!("cgroup {}", c.display()));
        }
    }
    out
}
