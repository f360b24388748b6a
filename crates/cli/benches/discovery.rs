//! `kubectl api-resources` with a cold discovery cache, aggregated discovery
//! against legacy discovery, on the same `kubeforge up`.
//!
//! kubectl talks to the server through a small proxy in this process that
//! counts requests. In the `legacy` pass the proxy rewrites each Accept
//! header to plain `application/json`, so the server answers `/api` and
//! `/apis` with the legacy documents and kubectl fetches every group-version
//! after them, as it did before aggregated discovery was served; in the
//! `aggregated` pass it forwards requests untouched. Each run gets an empty
//! `--cache-dir`. Reported per run: the discovery requests (`/api…`; kubectl
//! also asks for `/version` here, in both passes), kubectl's wall time
//! (mostly its own start-up), and the discovery span — from the first
//! discovery request's arrival at the proxy to the last response byte sent
//! back. Run with `cargo bench -p kubeforge --bench discovery`
//! (`KUBECTL=/path/to/kubectl` to pick a binary, default the one on PATH;
//! `RUNS=n`, default 31).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Forward one client connection to `upstream`, counting requests and
/// rewriting Accept when `legacy` is set. Requests are GETs without bodies
/// (all kubectl sends for discovery); a body announced by Content-Length is
/// forwarded as is.
/// What the proxy saw: requests, their paths, and when (µs since start)
/// the first request arrived and the last response byte left.
#[derive(Default)]
struct Seen {
    count: AtomicUsize,
    first_request: AtomicU64,
    last_response: AtomicU64,
    paths: Mutex<Vec<String>>,
}

fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_micros() as u64
}

fn proxy(client: TcpStream, upstream: &str, legacy: bool, seen: Arc<Seen>) {
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(mut to_client), Ok(mut from_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let responses = seen.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from_server.read(&mut buf) {
            if n == 0 || to_client.write_all(&buf[..n]).is_err() {
                break;
            }
            responses.last_response.store(now_us(), Ordering::Relaxed);
        }
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
        let path = head.split(' ').nth(1).unwrap_or("");
        let path = path.split('?').next().unwrap_or(path).to_string();
        // Discovery is /api and /apis and what they lead to (not /version).
        if path.starts_with("/api") {
            let _ = seen.first_request.compare_exchange(
                0,
                now_us(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            seen.count.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(mut paths) = seen.paths.lock() {
            paths.push(path);
        }
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
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(31);
    let dir =
        std::env::temp_dir().join(format!("kubeforge-discovery-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
        .args([
            "up",
            "--insecure-http",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
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
        let seen = Arc::new(Seen::default());
        let stop = Arc::new(AtomicBool::new(false));
        {
            let (seen, stop, upstream) = (seen.clone(), stop.clone(), upstream.clone());
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let (seen, upstream) = (seen.clone(), upstream.clone());
                    std::thread::spawn(move || proxy(conn, &upstream, legacy, seen));
                }
            });
        }
        let mut times = Vec::new();
        let mut spans = Vec::new();
        let mut requests = Vec::new();
        for i in 0..runs {
            let cache = dir.join(format!("cache-{legacy}-{i}"));
            let before = seen.count.load(Ordering::Relaxed);
            seen.first_request.store(0, Ordering::Relaxed);
            if let Ok(mut p) = seen.paths.lock() {
                p.clear();
            }
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
            requests.push((seen.count.load(Ordering::Relaxed) - before) as f64);
            let span = seen
                .last_response
                .load(Ordering::Relaxed)
                .saturating_sub(seen.first_request.load(Ordering::Relaxed));
            spans.push(span as f64 / 1e3);
        }
        stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(100));
        let name = if legacy { "legacy" } else { "aggregated" };
        let range = |v: &[f64]| {
            let mut v = v.to_vec();
            let m = median(&mut v);
            (m, v[0], v[v.len() - 1])
        };
        let (r, rmin, rmax) = range(&requests);
        let (t, tmin, tmax) = range(&times);
        let (d, dmin, dmax) = range(&spans);
        println!(
            "{name:>10}: requests {r:.0} (min {rmin:.0}, max {rmax:.0}); discovery span median {d:.1} ms (min {dmin:.1}, max {dmax:.1}); kubectl wall time median {t:.1} ms (min {tmin:.1}, max {tmax:.1}); {runs} runs"
        );
        if let Ok(p) = seen.paths.lock() {
            println!("{name:>10}: last run's requests: {}", p.join(" "));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
