//! Durable write throughput and latency: kubeforge-store against etcd 3.4
//! (Debian's `etcd-server`, started here on loopback and driven through its
//! v3 JSON gateway over keep-alive HTTP/1.1) and against redb (one durable
//! commit per write), with the memory backend for reference; then watch
//! fan-out latency to 1,000 watchers.
//!
//! Run: `cargo bench -p kubeforge-store --bench store_vs_etcd`.
//! Needs `/usr/bin/etcd` (`apt-get install -y etcd-server`), or `ETCD_BIN`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kubeforge_store::{DurableOptions, Store};

const VALUE_SIZE: usize = 1024;
/// (writers, writes per writer)
const CONFIGS: [(usize, usize); 2] = [(1, 2000), (8, 1000)];
const ETCD_CLIENT: &str = "127.0.0.1:23790";
const ETCD_PEER: &str = "127.0.0.1:23800";
const MEMORY: &str = "kubeforge-store memory";
const DURABLE: &str = "kubeforge-store durable";
const REDB: &str = "redb 4 (commit per write)";
const ETCD: &str = "etcd 3.4 (v3 JSON gateway)";

struct Row {
    backend: &'static str,
    writers: usize,
    writes: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Row {
    fn rate(&self) -> f64 {
        self.writes as f64 / self.elapsed.as_secs_f64()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e3)
}

fn value() -> Bytes {
    // JSON-ish, not trivially compressible content.
    let mut v = Vec::with_capacity(VALUE_SIZE);
    v.extend_from_slice(b"{\"data\":\"");
    let mut x: u32 = 0x2545_F491;
    while v.len() < VALUE_SIZE - 2 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push(b'a' + (x % 26) as u8);
    }
    v.extend_from_slice(b"\"}");
    Bytes::from(v)
}

fn key(writer: usize, i: usize) -> String {
    format!("/registry/bench/ns{writer}/obj-{i:07}")
}

// ---------------------------------------------------------------- our store

fn bench_store(
    rt: &tokio::runtime::Runtime,
    backend: &'static str,
    make: impl AsyncFnOnce() -> Store,
    writers: usize,
    per: usize,
) -> Row {
    rt.block_on(async {
        let store = make().await;
        let value = value();
        let start = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let store = store.clone();
            let value = value.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for i in 0..per {
                    let k = key(w, i);
                    let t = Instant::now();
                    store.create(&k, |_| value.clone()).await.expect("create");
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut latencies = Vec::new();
        for t in tasks {
            latencies.extend(t.await.expect("writer task"));
        }
        let elapsed = start.elapsed();
        assert_eq!(store.count("/registry/bench/"), writers * per);
        store.close().await;
        Row {
            backend,
            writers,
            writes: writers * per,
            elapsed,
            latencies,
        }
    })
}

// ---------------------------------------------------------------- redb

fn bench_redb(dir: &Path, writers: usize, per: usize) -> Row {
    const TABLE: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("kv");
    let path = dir.join(format!("redb-{writers}.redb"));
    let _ = std::fs::remove_file(&path);
    let db = Arc::new(redb::Database::create(&path).expect("redb create"));
    let value = value();
    let start_line = Arc::new(Barrier::new(writers + 1));
    let mut threads = Vec::new();
    for w in 0..writers {
        let db = db.clone();
        let value = value.clone();
        let start_line = start_line.clone();
        threads.push(std::thread::spawn(move || {
            start_line.wait();
            let mut lat = Vec::with_capacity(per);
            for i in 0..per {
                let k = key(w, i);
                let t = Instant::now();
                // Default durability: Immediate (fsync before commit returns).
                let txn = db.begin_write().expect("begin_write");
                {
                    let mut table = txn.open_table(TABLE).expect("open_table");
                    table.insert(k.as_str(), &value[..]).expect("insert");
                }
                txn.commit().expect("commit");
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    start_line.wait();
    let start = Instant::now();
    let mut latencies = Vec::new();
    for t in threads {
        latencies.extend(t.join().expect("redb writer"));
    }
    let elapsed = start.elapsed();
    drop(db);
    let _ = std::fs::remove_file(&path);
    Row {
        backend: "redb 4 (commit per write)",
        writers,
        writes: writers * per,
        elapsed,
        latencies,
    }
}

// ---------------------------------------------------------------- etcd

struct Etcd {
    child: Child,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn etcd_binary() -> PathBuf {
    let bin = std::env::var_os("ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/etcd".into());
    if !bin.is_file() {
        eprintln!(
            "error: etcd not found at {} -- this benchmark compares against etcd 3.4 and does not skip it.\n\
             Install it with: apt-get update && apt-get install -y etcd-server etcd-client\n\
             (or point ETCD_BIN at an etcd binary)",
            bin.display()
        );
        std::process::exit(2);
    }
    bin
}

fn etcd_version(bin: &Path) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| "etcd (unknown version)".into())
}

fn start_etcd(bin: &Path, dir: &Path) -> Etcd {
    for addr in [ETCD_CLIENT, ETCD_PEER] {
        if TcpStream::connect(addr).is_ok() {
            eprintln!(
                "error: {addr} is already in use; stop whatever listens there (another etcd?)"
            );
            std::process::exit(2);
        }
    }
    let data = dir.join("etcd-data");
    let _ = std::fs::remove_dir_all(&data);
    let log = std::fs::File::create(dir.join("etcd.log")).expect("etcd log file");
    let client = format!("http://{ETCD_CLIENT}");
    let peer = format!("http://{ETCD_PEER}");
    let child = Command::new(bin)
        .arg("--name=bench")
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=bench={peer}"))
        .arg("--initial-cluster-state=new")
        .arg("--logger=zap")
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn etcd");
    let mut etcd = Etcd { child };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = etcd.child.try_wait() {
            let log = std::fs::read_to_string(dir.join("etcd.log")).unwrap_or_default();
            panic!("etcd exited with {status}:\n{log}");
        }
        if let Ok(mut c) = Http::connect(ETCD_CLIENT)
            && let Ok((200, body)) = c.request("GET", "/health", b"")
            && String::from_utf8_lossy(&body).contains("true")
        {
            return etcd;
        }
        assert!(
            Instant::now() < deadline,
            "etcd did not become healthy in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A minimal keep-alive HTTP/1.1 client.
struct Http {
    host: String,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    out: Vec<u8>,
}

impl Http {
    fn connect(addr: &str) -> std::io::Result<Http> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Http {
            host: addr.to_owned(),
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            out: Vec::new(),
        })
    }

    fn request(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Vec<u8>)> {
        self.out.clear();
        write!(
            self.out,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        )?;
        self.out.extend_from_slice(body);
        self.writer.write_all(&self.out)?;

        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_owned());
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(&line))?;
        let mut content_length = None;
        let mut chunked = false;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(bad("eof in headers"));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((name, value)) = l.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.parse::<usize>().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding")
                    && value.eq_ignore_ascii_case("chunked")
                {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.reader.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad("chunk size"))?;
                let start = body.len();
                body.resize(start + size + 2, 0);
                self.reader.read_exact(&mut body[start..])?;
                body.truncate(start + size);
                if size == 0 {
                    break;
                }
            }
        } else if let Some(n) = content_length {
            body.resize(n, 0);
            self.reader.read_exact(&mut body)?;
        } else {
            return Err(bad("response without length"));
        }
        Ok((status, body))
    }
}

fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for c in input.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            A[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            A[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// `tag` keeps each run's keys distinct.
fn bench_etcd(writers: usize, per: usize, tag: usize) -> Row {
    let value_b64 = Arc::new(base64(&value()));
    let start_line = Arc::new(Barrier::new(writers + 1));
    let mut threads = Vec::new();
    for w in 0..writers {
        let value_b64 = value_b64.clone();
        let start_line = start_line.clone();
        threads.push(std::thread::spawn(move || {
            let mut http = Http::connect(ETCD_CLIENT).expect("connect to etcd");
            let bodies: Vec<Vec<u8>> = (0..per)
                .map(|i| {
                    let k = format!("{}-{writers}-{tag}", key(w, i));
                    format!(
                        "{{\"key\":\"{}\",\"value\":\"{value_b64}\"}}",
                        base64(k.as_bytes())
                    )
                    .into_bytes()
                })
                .collect();
            start_line.wait();
            let mut lat = Vec::with_capacity(per);
            for body in &bodies {
                let t = Instant::now();
                let (status, resp) = http.request("POST", "/v3/kv/put", body).expect("etcd put");
                assert_eq!(
                    status,
                    200,
                    "etcd put failed: {}",
                    String::from_utf8_lossy(&resp)
                );
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    start_line.wait();
    let start = Instant::now();
    let mut latencies = Vec::new();
    for t in threads {
        latencies.extend(t.join().expect("etcd writer"));
    }
    Row {
        backend: "etcd 3.4 (v3 JSON gateway)",
        writers,
        writes: writers * per,
        elapsed: start.elapsed(),
        latencies,
    }
}

// ---------------------------------------------------------------- watch fan-out

/// `watchers` watchers on one prefix; `rounds` times one write, timing
/// how long each watcher takes to receive it.
fn bench_fanout(
    rt: &tokio::runtime::Runtime,
    store: Store,
    watchers: usize,
    rounds: usize,
) -> Vec<Duration> {
    rt.block_on(async move {
        let (tx, _) = tokio::sync::broadcast::channel::<Instant>(16);
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Duration>();
        let mut tasks = Vec::new();
        for _ in 0..watchers {
            let mut w = store
                .watch("/registry/pods/", store.current_revision())
                .expect("watch");
            let mut sent_rx = tx.subscribe();
            let done_tx = done_tx.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let ev = w.next().await.expect("open").expect("event");
                    let at = Instant::now();
                    let sent = sent_rx.recv().await.expect("send time");
                    let _ = ev;
                    let _ = done_tx.send(at.duration_since(sent));
                }
            }));
        }
        let value = value();
        let mut lat = Vec::with_capacity(watchers * rounds);
        for r in 0..rounds {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let t = Instant::now();
            let _ = tx.send(t);
            store
                .create(&format!("/registry/pods/default/p{r}"), |_| value.clone())
                .await
                .expect("create");
            for _ in 0..watchers {
                lat.push(done_rx.recv().await.expect("latency"));
            }
        }
        for t in tasks {
            t.await.expect("watcher");
        }
        store.close().await;
        lat
    })
}

// ---------------------------------------------------------------- main

/// Rounds of the whole write matrix (env `STORE_BENCH_ROUNDS`, default 3):
/// a shared VM's fsync latency drifts, so backends are interleaved and the
/// median round is reported.
fn rounds() -> usize {
    std::env::var("STORE_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3)
}

fn main() {
    let etcd_bin = etcd_binary();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("store_vs_etcd");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let rounds = rounds();

    println!(
        "store_vs_etcd: {VALUE_SIZE}-byte values, fsync before every acknowledgement, {rounds} interleaved rounds"
    );
    println!("data dir: {}", dir.display());
    println!("etcd: {}", etcd_version(&etcd_bin));
    let etcd = start_etcd(&etcd_bin, &dir);
    let _ = bench_etcd(1, 100, 0); // warm-up
    let mut rows = Vec::new();
    for round in 0..rounds {
        for (n, &(writers, per)) in CONFIGS.iter().enumerate() {
            rows.push(bench_store(
                &rt,
                MEMORY,
                async || Store::memory(),
                writers,
                per,
            ));
            let d = dir.join(format!("durable-{round}-{n}"));
            rows.push(bench_store(
                &rt,
                DURABLE,
                async || {
                    Store::open(&d, DurableOptions::default())
                        .await
                        .expect("open")
                },
                writers,
                per,
            ));
            let _ = std::fs::remove_dir_all(&d);
            rows.push(bench_redb(&dir, writers, per));
            rows.push(bench_etcd(writers, per, round + 1));
        }
    }
    drop(etcd);

    println!();
    println!(
        "| backend | writers | writes/round | writes/s (median) | writes/s (min-max) | p50 ms | p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut medians = Vec::new();
    for backend in [MEMORY, DURABLE, REDB, ETCD] {
        for &(writers, per) in &CONFIGS {
            let mut runs: Vec<&Row> = rows
                .iter()
                .filter(|r| r.backend == backend && r.writers == writers)
                .collect();
            runs.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
            let median = runs[runs.len() / 2];
            let mut lat: Vec<Duration> = runs
                .iter()
                .flat_map(|r| r.latencies.iter().copied())
                .collect();
            lat.sort();
            println!(
                "| {backend} | {writers} | {} | {:.0} | {:.0}-{:.0} | {} | {} |",
                writers * per,
                median.rate(),
                runs[0].rate(),
                runs[runs.len() - 1].rate(),
                ms(percentile(&lat, 0.50)),
                ms(percentile(&lat, 0.99)),
            );
            medians.push((backend, writers, median.rate()));
        }
    }
    println!("(p50/p99 over the latencies of all rounds)");
    println!();
    for &(writers, _) in &CONFIGS {
        let rate = |b: &str| {
            medians
                .iter()
                .find(|m| m.0 == b && m.1 == writers)
                .map_or(0.0, |m| m.2)
        };
        println!(
            "durable store vs etcd at {writers} writer(s): {:.1}x (vs redb: {:.1}x)",
            rate(DURABLE) / rate(ETCD),
            rate(DURABLE) / rate(REDB)
        );
    }

    println!();
    println!(
        "| watch fan-out: 1000 watchers x 20 events, write to delivery | p50 ms | p99 ms | max ms |"
    );
    println!("|---|---:|---:|---:|");
    let d = dir.join("fanout");
    let fan: [(&str, Store); 2] = [
        ("memory", Store::memory()),
        (
            "durable (includes the write's fsync)",
            rt.block_on(Store::open(&d, DurableOptions::default()))
                .expect("open"),
        ),
    ];
    for (name, store) in fan {
        let mut lat = bench_fanout(&rt, store, 1000, 20);
        lat.sort();
        println!(
            "| {name} | {} | {} | {} |",
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
            ms(lat.last().copied().unwrap_or_default())
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
