//! `kubeforge up` to the first successful `GET /api/v1/namespaces` (what
//! `kubectl get ns` asks for), excluding kubectl's own start-up. Fresh data
//! directory each run (durable store, fsync on). Run with
//! `cargo bench -p kubeforge --bench up`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn get_ok(addr: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(addr) else {
        return false;
    };
    let req =
        format!("GET /api/v1/namespaces HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") && buf.contains("\"default\"")
}

fn main() {
    let runs = 20;
    let mut times = Vec::new();
    for i in 0..runs {
        let dir =
            std::env::temp_dir().join(format!("kubeforge-up-bench-{}-{i}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let t = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubeforge"))
            .args([
                "up",
                "--insecure-http",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kubeforge");
        let stdout = child.stdout.take().expect("stdout");
        let mut addr = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(u) = line.trim().strip_prefix("API server: http://") {
                addr = Some(u.to_string());
                break;
            }
        }
        let addr = addr.expect("address line");
        while !get_ok(&addr) {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "kubeforge did not answer"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        times.push(t.elapsed());
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }
    times.sort();
    println!(
        "kubeforge up to first successful GET /api/v1/namespaces: median {:.1} ms, max {:.1} ms ({runs} runs, fresh durable data dir)",
        times[runs / 2].as_secs_f64() * 1e3,
        times[runs - 1].as_secs_f64() * 1e3
    );
}
