//! Container probes as the kubelet's prober runs them: startup, readiness
//! and liveness, each `exec` (CRI ExecSync), `httpGet` (success on
//! 200–399) or `tcpSocket`, every `periodSeconds` after
//! `initialDelaySeconds`, with `successThreshold`/`failureThreshold`
//! consecutive results deciding; a startup probe holds off the others,
//! readiness starts as failure and liveness as success.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cri::{Cri, api};

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `startupProbe`.
    Startup,
    /// `readinessProbe`.
    Readiness,
    /// `livenessProbe`.
    Liveness,
}

impl Kind {
    /// `Startup`, `Readiness`, `Liveness`, as kube's messages name them.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Readiness => "Readiness",
            Kind::Liveness => "Liveness",
        }
    }
}

/// One probe's running state.
#[derive(Clone, Debug)]
struct Worker {
    kind: Kind,
    probe: Probe,
    ok: bool,
    successes: i32,
    failures: i32,
    next: Instant,
}

/// The probes of one container run.
#[derive(Clone, Debug)]
pub struct ContainerProbes {
    /// The run (container id) these belong to.
    pub id: String,
    workers: Vec<Worker>,
}

/// What a round of probing found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The startup probe has succeeded (or there is none).
    pub started: bool,
    /// The readiness probe passes (or there is none).
    pub ready: bool,
    /// The liveness or startup probe failed `failureThreshold` times: the
    /// container must be restarted, with this message.
    pub kill: Option<String>,
    /// Probe failures to report (`Unhealthy` events).
    pub failures: Vec<String>,
    /// When the next probe is due.
    pub next: Option<Instant>,
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(0) as u64)
}

impl ContainerProbes {
    /// The probes of container `c`'s run `id`, which started `age` ago.
    pub fn new(c: &Container, id: &str, age: Duration) -> ContainerProbes {
        let started = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        let mut workers = Vec::new();
        for (kind, probe) in [
            (Kind::Startup, &c.startup_probe),
            (Kind::Readiness, &c.readiness_probe),
            (Kind::Liveness, &c.liveness_probe),
        ] {
            if let Some(p) = probe {
                workers.push(Worker {
                    kind,
                    probe: p.clone(),
                    ok: kind == Kind::Liveness,
                    successes: 0,
                    failures: 0,
                    next: started + secs(p.initial_delay_seconds, 0),
                });
            }
        }
        ContainerProbes {
            id: id.to_string(),
            workers,
        }
    }

    /// Run the probes that are due against `c` (running as `id` in a pod
    /// at `pod_ip`).
    pub async fn run(&mut self, cri: &Cri, c: &Container, pod_ip: &str) -> Verdict {
        let now = Instant::now();
        let started = self
            .workers
            .iter()
            .find(|w| w.kind == Kind::Startup)
            .is_none_or(|w| w.ok);
        let mut verdict = Verdict {
            started,
            ..Default::default()
        };
        for w in &mut self.workers {
            // A startup probe holds off the others; once it passed it stops.
            let holds_off = w.kind != Kind::Startup && !started;
            let done = w.kind == Kind::Startup && w.ok;
            if !holds_off && !done && w.next <= now {
                let period = secs(w.probe.period_seconds, 10).max(Duration::from_secs(1));
                w.next = now + period;
                let result = probe_once(cri, &self.id, c, &w.probe, pod_ip).await;
                match result {
                    Ok(()) => {
                        w.failures = 0;
                        w.successes += 1;
                        if w.successes >= w.probe.success_threshold.unwrap_or(1).max(1) {
                            w.ok = true;
                        }
                    }
                    Err(msg) => {
                        w.successes = 0;
                        w.failures += 1;
                        verdict
                            .failures
                            .push(format!("{} probe failed: {msg}", w.kind.name()));
                        if w.failures >= w.probe.failure_threshold.unwrap_or(3).max(1) {
                            w.ok = false;
                            if w.kind != Kind::Readiness {
                                let what = if w.kind == Kind::Liveness {
                                    "liveness"
                                } else {
                                    "startup"
                                };
                                verdict.kill = Some(format!(
                                    "Container {} failed {what} probe, will be restarted",
                                    c.name
                                ));
                            }
                        }
                    }
                }
            }
            if !holds_off && !done {
                verdict.next = Some(verdict.next.map_or(w.next, |n: Instant| n.min(w.next)));
            }
        }
        verdict.started = self
            .workers
            .iter()
            .find(|w| w.kind == Kind::Startup)
            .is_none_or(|w| w.ok);
        verdict.ready = verdict.started
            && self
                .workers
                .iter()
                .find(|w| w.kind == Kind::Readiness)
                .is_none_or(|w| w.ok);
        verdict
    }
}

/// The port a probe names: a number, or a container port's name.
fn port(c: &Container, p: &IntOrString) -> Result<u16, String> {
    match p {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|cp| cp.name.as_deref() == Some(name.as_str()))
            .and_then(|cp| u16::try_from(cp.container_port).ok())
            .ok_or_else(|| format!("couldn't find port {name:?} in the container")),
    }
}

async fn probe_once(
    cri: &Cri,
    id: &str,
    c: &Container,
    p: &Probe,
    pod_ip: &str,
) -> Result<(), String> {
    let timeout = secs(p.timeout_seconds, 1).max(Duration::from_secs(1));
    if let Some(e) = &p.exec {
        let mut rt = cri.runtime.clone();
        let r = rt
            .exec_sync(api::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: e.command.clone().unwrap_or_default(),
                timeout: timeout.as_secs() as i64,
            })
            .await
            .map_err(|s| s.message().to_string())?
            .into_inner();
        return if r.exit_code == 0 {
            Ok(())
        } else {
            let mut out = String::from_utf8_lossy(&r.stdout).into_owned();
            out.push_str(&String::from_utf8_lossy(&r.stderr));
            Err(if out.trim().is_empty() {
                format!(
                    "command {:?} exited with {}",
                    e.command.clone().unwrap_or_default().join(" "),
                    r.exit_code
                )
            } else {
                out.trim_end().to_string()
            })
        };
    }
    if let Some(t) = &p.tcp_socket {
        let host = t
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let port = port(c, &t.port)?;
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: connect: {}", io_words(&e))),
            Err(_) => Err(format!("dial tcp {host}:{port}: i/o timeout")),
        };
    }
    if let Some(h) = &p.http_get {
        let host = h
            .host
            .clone()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| pod_ip.to_string());
        let port = port(c, &h.port)?;
        let path = h
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "/".into());
        let url = format!("http://{host}:{port}{path}");
        if h.scheme.as_deref() == Some("HTTPS") {
            return Err(format!(
                "Get {url:?}: HTTPS probes are not supported by this node"
            ));
        }
        let get = async {
            let mut s = tokio::net::TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|e| {
                    format!(
                        "Get {url:?}: dial tcp {host}:{port}: connect: {}",
                        io_words(&e)
                    )
                })?;
            let mut req = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
            );
            for hd in h.http_headers.iter().flatten() {
                req.push_str(&format!("{}: {}\r\n", hd.name, hd.value));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes())
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?;
            let mut head = vec![0u8; 64];
            let n = s
                .read(&mut head)
                .await
                .map_err(|e| format!("Get {url:?}: {e}"))?;
            let line = String::from_utf8_lossy(&head[..n]).into_owned();
            let code: u16 = line
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("Get {url:?}: malformed HTTP response"))?;
            if (200..400).contains(&code) {
                Ok(())
            } else {
                Err(format!("HTTP probe failed with statuscode: {code}"))
            }
        };
        return match tokio::time::timeout(timeout, get).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "Get {url:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if p.grpc.is_some() {
        return Err("gRPC probes are not supported by this node".into());
    }
    Err("the probe has no handler".into())
}

/// Run a container's lifecycle hook (`postStart`, `preStop`) as the
/// kubelet's handler runner does: `exec` in the container (CRI
/// ExecSync), `httpGet` and `tcpSocket` against the pod (its IP unless
/// the hook names a host), or `sleep`; `timeout` bounds all of them.
/// `Err` carries the failure in the kubelet's words.
pub async fn run_hook(
    cri: &Cri,
    id: &str,
    c: &Container,
    hook: &k8s_openapi::api::core::v1::LifecycleHandler,
    pod_ip: &str,
    timeout: Duration,
) -> Result<(), String> {
    if let Some(s) = &hook.sleep {
        tokio::time::sleep(Duration::from_secs(u64::try_from(s.seconds).unwrap_or(0)).min(timeout))
            .await;
        return Ok(());
    }
    let probe = Probe {
        exec: hook.exec.clone(),
        http_get: hook.http_get.clone(),
        tcp_socket: hook.tcp_socket.clone(),
        timeout_seconds: Some(i32::try_from(timeout.as_secs()).unwrap_or(i32::MAX).max(1)),
        ..Probe::default()
    };
    match tokio::time::timeout(timeout, probe_once(cri, id, c, &probe, pod_ip)).await {
        Ok(r) => r,
        Err(_) => Err(format!("hook did not finish within {}s", timeout.as_secs())),
    }
}

fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_ports_resolve_to_the_containers() {
        let c: Container = serde_json::from_value(
            json!({"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}),
        )
        .unwrap();
        assert_eq!(port(&c, &IntOrString::String("http".into())).unwrap(), 8080);
        assert_eq!(port(&c, &IntOrString::Int(81)).unwrap(), 81);
        assert!(port(&c, &IntOrString::String("nope".into())).is_err());
    }

    #[tokio::test]
    async fn tcp_and_http_probes_follow_thresholds() {
        // A server answering 200 once, then 500.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let code = if n == 0 {
                    "200 OK"
                } else {
                    "500 Internal Server Error"
                };
                n += 1;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let c: Container = serde_json::from_value(json!({"name": "web",
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 1, "failureThreshold": 2},
            "livenessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1}})).unwrap();
        let cri = Cri::connect(std::path::Path::new("/nonexistent.sock"));
        let mut probes = ContainerProbes::new(&c, "id", Duration::from_secs(0));
        let v = probes.run(&cri, &c, "127.0.0.1").await;
        assert!(v.ready && v.started && v.kill.is_none(), "{v:?}");
        // The next failure alone does not make it unready (threshold 2).
        for w in &mut probes.workers {
            w.next = Instant::now();
        }
        let v = probes.run(&cri, &c, "127.0.0.1").await;
        assert!(v.ready, "{v:?}");
        assert_eq!(
            v.failures,
            ["Readiness probe failed: HTTP probe failed with statuscode: 500"]
        );
        for w in &mut probes.workers {
            w.next = Instant::now();
        }
        let v = probes.run(&cri, &c, "127.0.0.1").await;
        assert!(!v.ready && v.kill.is_none(), "{v:?}");
    }
}
