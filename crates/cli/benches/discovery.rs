//! `kubectl api-resources` with a cold discovery cache, aggregated discovery
//! against legacy discovery, on the same `kubeforge up`.
//!
//! kubectl talks to the server through a small proxy in this process that
//! counts requests. In the `legacy` pass the proxy rewrites each Accept
//! header to plain `application/json`, so the server answers `/api` and
//! `/apis` with the legacy documents and kubectl fetches every group-version
//! after them, as it did before aggregated discovery was served; in the
//! `aggregated` pass it forwards requests untouched. Each run gets an empty
//! `--cache-dir`. Run with `cargo bench -p kubeforge --bench discovery`
//! (`KUBECTL=/path/to/kubectl` to pick a binary; default: the one on PATH).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Forward one client connection to `upstream`, counting requests and
/// rewriting Accept when `legacy` is set. Requests are GETs without bodies
/// (all kubectl sends for discovery); a body announced by Content-Length is
/// forwarded as is.
fn proxy(client: TcpStream, upstream: &str, legacy: bool, count: &AtomicUsize) {
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(mut to_client), Ok(mut from_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_server, &mut to_client);
        let _ = to_client.shutdown(std::net::Shutdown::Both);
    });
    let mut reader = BufReader::new(client);
    let mut to_server = server;
    loop {
        let mut head = String::new();
        let mut body_len = 0usize;
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                body_len = v.trim().parse().unwrap_or(0);
            }
            if legacy && lower.starts_with("accept:") {
                line = "Accept: application/json\r\n".to_string();
            }
            let end = line == "\r\n";
            head.push_str(&line);
            if end {
                break;
            }
        }
        count.fetch_add(1, Ordering::Relaxed);
        let mut body = vec![0u8; body_len];
        if reader.read_exact(&mut body).is_err()
            || to_server.write_all(head.as_bytes()).is_err()
            || to_server.write_all(&body).is_err()
        {
            return;
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let runs = 15;
    let dir =
        std::env::temp_dir().join(format!("kubeforge-discovery-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("state"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kubeforge");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut upstream = None;
    for line in lines.by_ref() {
        let line = line.expect("stdout");
        if let Some(u) = line.trim().strip_prefix("API server: http://") {
            upstream = Some(u.trim_end_matches('/').to_string());
        }
        if line.starts_with("export KUBECONFIG=") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    let upstream = upstream.expect("kubeforge printed its URL");

    for legacy in [true, false] {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (count, stop, upstream) = (count.clone(), stop.clone(), upstream.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (count, upstream) = (count.clone(), upstream.clone());
                    std::thread::spawn(move || proxy(conn, &upstream, legacy, &count));
                }
            });
        }
        let mut times = Vec::new();
        let mut requests = Vec::new();
        for i in 0..runs {
            let cache = dir.join(format!("cache-{legacy}-{i}"));
            let before = count.load(Ordering::Relaxed);
            let t = Instant::now();
            let out = Command::new(&kubectl)
                .args(["api-resources", "--server"])
                .arg(format!("http://{addr}"))
                .arg("--cache-dir")
                .arg(&cache)
                .env("HOME", &dir)
                .env("KUBECONFIG", "/dev/null")
                .output()
                .expect("run kubectl");
            times.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            requests.push((count.load(Ordering::Relaxed) - before) as f64);
        }
        stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(100));
        let name = if legacy { "legacy" } else { "aggregated" };
        println!(
            "{name:>10}: requests median {:.0} (min {:.0}, max {:.0}), wall time median {:.1} ms (min {:.1}, max {:.1}) over {runs} runs",
            median(&mut requests.clone()),
            requests.iter().cloned().fold(f64::MAX, f64::min),
            requests.iter().cloned().fold(0.0, f64::max),
            median(&mut times.clone()),
            times.iter().cloned().fold(f64::MAX, f64::min),
            times.iter().cloned().fold(0.0, f64::max),
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
