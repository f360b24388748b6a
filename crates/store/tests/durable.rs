//! The durable backend: reopen, torn tails, compaction, locking and a real
//! `kill -9` crash of a writer process.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{log_file, temp_dir, val};
use kubeforge_store::{DurableOptions, KeyValue, Store, StoreError};

fn opts() -> DurableOptions {
    DurableOptions::default()
}

fn dump(s: &Store) -> Vec<KeyValue> {
    s.range("", None, 0).kvs
}

/// A mix of creates, updates and deletes; returns the expected live state.
async fn workload(s: &Store, n: usize) -> Vec<KeyValue> {
    for i in 0..n {
        let key = format!("/registry/things/ns{}/k{}", i % 3, i % 17);
        match s.get(&key) {
            None => {
                s.create(&key, |r| val(&key, r)).await.unwrap();
            }
            Some(kv) if i % 5 == 0 => {
                s.delete(&key, Some(kv.mod_revision), |_, _| {
                    Bytes::from_static(b"gone")
                })
                .await
                .unwrap();
            }
            Some(kv) => {
                s.update(&key, Some(kv.mod_revision), |r| val(&key, r))
                    .await
                    .unwrap();
            }
        }
    }
    dump(s)
}

#[tokio::test]
async fn reopen_restores_state_and_revision() {
    let dir = temp_dir("reopen");
    let s = Store::open(&dir, opts()).await.unwrap();
    assert!(s.is_durable());
    assert_eq!(s.current_revision(), 0);
    let expected = workload(&s, 200).await;
    let rev = s.current_revision();
    assert_eq!(rev, 200);
    s.close().await;
    s.close().await;
    assert!(matches!(
        s.create("/x", |_| Bytes::new()).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(s.compact(1).await, Err(StoreError::Closed)));

    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), rev);
    assert_eq!(s.compacted_revision(), rev);
    assert_eq!(dump(&s), expected);
    assert!(matches!(
        s.watch("/", rev - 1),
        Err(StoreError::Compacted { .. })
    ));
    let mut w = s.watch("/", rev).unwrap();
    let kv = s.create("/after", |r| val("/after", r)).await.unwrap();
    assert_eq!(kv.mod_revision, rev + 1);
    assert_eq!(w.next().await.unwrap().unwrap().kv, kv);
    s.close().await;

    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), rev + 1);
    assert_eq!(s.get("/after"), Some(kv));
    s.close().await;
}

#[tokio::test]
async fn revision_survives_a_trailing_delete() {
    let dir = temp_dir("trailing-delete");
    let s = Store::open(&dir, opts()).await.unwrap();
    s.create("/a", |r| val("/a", r)).await.unwrap();
    s.delete("/a", None, |_, _| Bytes::new()).await.unwrap();
    s.close().await;
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), 2);
    assert!(s.get("/a").is_none());
    s.close().await;
}

#[tokio::test]
async fn torn_tail_is_truncated_and_later_writes_survive() {
    let dir = temp_dir("torn");
    let s = Store::open(&dir, opts()).await.unwrap();
    let expected = workload(&s, 50).await;
    s.close().await;

    let log = log_file(&dir);
    let good_len = std::fs::metadata(&log).unwrap().len();
    // Garbage, then a plausible-looking but truncated record header.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(b"\x13\x37garbage that is not a record")
        .unwrap();
    f.write_all(&[40, 0, 0, 0, 1, 2]).unwrap();
    drop(f);

    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(dump(&s), expected);
    assert_eq!(s.current_revision(), 50);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        good_len,
        "tail truncated"
    );
    // Records written after recovery must not sit behind the garbage.
    s.create("/later", |r| val("/later", r)).await.unwrap();
    s.close().await;
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), 51);
    assert!(s.get("/later").is_some());
    s.close().await;
}

#[tokio::test]
async fn zero_filled_tail_is_the_end_of_the_log() {
    // What a crash leaves behind: records, then preallocated zeros.
    let dir = temp_dir("zeros");
    let s = Store::open(&dir, opts()).await.unwrap();
    let expected = workload(&s, 30).await;
    s.close().await;
    let log = log_file(&dir);
    let good_len = std::fs::metadata(&log).unwrap().len();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(&vec![0u8; 3 << 20]).unwrap();
    drop(f);
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(dump(&s), expected);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), good_len);
    workload(&s, 30).await;
    let expected = dump(&s);
    s.close().await;
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(dump(&s), expected);
    assert_eq!(s.current_revision(), 60);
    s.close().await;
}

/// Every prefix of a log recovers to the state after some prefix of the
/// writes: never an error, never a half-applied record.
#[tokio::test]
async fn every_truncation_point_recovers_a_prefix() {
    let dir = temp_dir("cuts");
    let s = Store::open(&dir, opts()).await.unwrap();
    let mut states = vec![(0u64, Vec::new())];
    for i in 0..12 {
        let key = format!("/k{}", i % 4);
        match s.get(&key) {
            None => drop(s.create(&key, |r| val(&key, r)).await.unwrap()),
            Some(_) if i % 3 == 0 => drop(s.delete(&key, None, |_, _| Bytes::new()).await.unwrap()),
            Some(_) => drop(s.update(&key, None, |r| val(&key, r)).await.unwrap()),
        }
        states.push((s.current_revision(), dump(&s)));
    }
    s.close().await;
    let full = std::fs::read(log_file(&dir)).unwrap();
    let name = log_file(&dir).file_name().unwrap().to_owned();
    for cut in 0..=full.len() {
        let d = temp_dir("cut");
        std::fs::write(d.join(&name), &full[..cut]).unwrap();
        let s = Store::open(
            &d,
            DurableOptions {
                fsync: false,
                ..opts()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let rev = s.current_revision();
        assert_eq!(dump(&s), states[rev as usize].1, "cut at {cut}");
        if cut == full.len() {
            assert_eq!(rev, 12);
        }
        s.close().await;
    }
}

#[tokio::test]
async fn corrupt_magic_is_an_error_not_a_reset() {
    let dir = temp_dir("magic");
    let s = Store::open(&dir, opts()).await.unwrap();
    s.create("/a", |r| val("/a", r)).await.unwrap();
    s.close().await;
    let log = log_file(&dir);
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[0] = b'X';
    std::fs::write(&log, bytes).unwrap();
    assert!(matches!(
        Store::open(&dir, opts()).await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test]
async fn compaction_rewrites_the_log_and_reopens() {
    let dir = temp_dir("compact");
    let s = Store::open(&dir, opts()).await.unwrap();
    // Many updates of few keys: the log is mostly dead history.
    for i in 0..400 {
        let key = format!("/c/k{}", i % 8);
        if i < 8 {
            s.create(&key, |r| val(&key, r)).await.unwrap();
        } else {
            s.update(&key, None, |r| val(&key, r)).await.unwrap();
        }
    }
    s.delete("/c/k7", None, |_, _| Bytes::new()).await.unwrap();
    let mut w = s.watch("/c/", 390).unwrap();
    s.compact(395).await.unwrap();
    assert_eq!(s.compacted_revision(), 395);
    assert!(matches!(
        s.watch("/c/", 394),
        Err(StoreError::Compacted { .. })
    ));
    // 401 records of ~90 bytes became a snapshot of 7 keys.
    let after = std::fs::metadata(log_file(&dir)).unwrap().len();
    assert!(after < 1500, "snapshot log is {after} bytes");
    // Writes continue into the new log; the running watch is unaffected.
    s.update("/c/k0", None, |r| val("/c/k0", r)).await.unwrap();
    for rev in 391..=402 {
        assert_eq!(w.next().await.unwrap().unwrap().kv.mod_revision, rev);
    }
    let expected = dump(&s);
    s.compact(402).await.unwrap(); // again, with one record since the last one
    s.compact(402).await.unwrap(); // and with none
    s.create("/c/new", |r| val("/c/new", r)).await.unwrap();
    let expected_rev = s.current_revision();
    s.close().await;
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries.len(), 2, "LOCK and one log: {entries:?}");

    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), expected_rev);
    let mut got = dump(&s);
    got.retain(|kv| &*kv.key != "/c/new");
    assert_eq!(got, expected);
    s.close().await;
}

#[tokio::test]
async fn leftovers_of_an_interrupted_compaction_are_ignored() {
    let dir = temp_dir("leftover");
    let s = Store::open(&dir, opts()).await.unwrap();
    let expected = workload(&s, 30).await;
    s.close().await;
    let log = log_file(&dir);
    let name = log.file_name().unwrap().to_str().unwrap().to_owned();
    // A half-written snapshot of the next generation.
    let next = name.replace("wal-00000000000000000001", "wal-00000000000000000002");
    assert_ne!(next, name);
    std::fs::write(dir.join(format!("{next}.tmp")), b"KFWAL\0\0\x01partial").unwrap();
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(dump(&s), expected);
    s.close().await;
    assert!(!dir.join(format!("{next}.tmp")).exists());
}

#[tokio::test]
async fn a_directory_is_opened_once() {
    let dir = temp_dir("lock");
    let s = Store::open(&dir, opts()).await.unwrap();
    match Store::open(&dir, opts()).await {
        Err(StoreError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
        other => panic!("second open: {other:?}"),
    }
    s.close().await;
    let s = Store::open(&dir, opts()).await.unwrap();
    s.close().await;
}

#[tokio::test]
async fn dropping_without_close_still_logs_queued_writes() {
    let dir = temp_dir("drop");
    let s = Store::open(&dir, opts()).await.unwrap();
    let expected = workload(&s, 40).await;
    drop(s);
    // The writer thread releases the lock once it has drained its queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        match Store::open(&dir, opts()).await {
            Ok(s) => break s,
            Err(StoreError::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(dump(&s), expected);
    s.close().await;
}

const CRASH_DIR: &str = "KUBEFORGE_STORE_CRASH_DIR";
const CRASH_ROUND: &str = "KUBEFORGE_STORE_CRASH_ROUND";

/// Not a test on its own: the child process of `kill_9_loses_no_acknowledged_write`.
/// Writes from 4 tasks (and compacts now and then) until killed, printing
/// `ACK <key>` once each write is acknowledged.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CRASH_DIR) else {
        return;
    };
    let round = std::env::var(CRASH_ROUND).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let s = Store::open(Path::new(&dir), opts()).await.unwrap();
        let compactor = {
            let s = s.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    s.compact(s.current_revision()).await.unwrap();
                }
            })
        };
        let mut tasks = Vec::new();
        for t in 0..4 {
            let s = s.clone();
            let round = round.clone();
            tasks.push(tokio::spawn(async move {
                let started = Instant::now();
                for i in 0..1_000_000u64 {
                    let key = format!("/crash/r{round}/t{t}/k{i:07}");
                    let body = Bytes::from(vec![b'x'; 200 + (i as usize % 800)]);
                    s.create(&key, |_| body).await.unwrap();
                    if i % 2 == 1 {
                        let prev = format!("/crash/r{round}/t{t}/k{:07}", i - 1);
                        s.update(&prev, None, |r| val(&prev, r)).await.unwrap();
                        println!("ACK {prev} v2");
                    }
                    println!("ACK {key} v1");
                    if started.elapsed() > Duration::from_secs(60) {
                        break; // never outlive a parent that forgot us
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        compactor.abort();
    });
}

#[test]
fn kill_9_loses_no_acknowledged_write() {
    let dir = temp_dir("crash");
    let exe = std::env::current_exe().unwrap();
    let mut acked: BTreeMap<String, u64> = BTreeMap::new();
    for round in 0..3 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_DIR, dir.as_os_str())
            .env(CRASH_ROUND, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while n < 1500 + round * 500 {
            let Some(line) = lines.next() else {
                panic!("child exited early after {n} acks")
            };
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (key, v) = rest.split_once(" v").unwrap();
                let v: u64 = v.parse().unwrap();
                let e = acked.entry(key.to_owned()).or_insert(0);
                *e = (*e).max(v);
                n += 1;
            }
            assert!(Instant::now() < deadline, "child too slow");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Acks still buffered in the pipe were acknowledged before the kill.
        for line in lines.map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (key, v) = rest.split_once(" v").unwrap();
                let e = acked.entry(key.to_owned()).or_insert(0);
                *e = (*e).max(v.parse().unwrap());
            }
        }

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let s = Store::open(&dir, opts()).await.unwrap();
            for (key, v) in &acked {
                let kv = s
                    .get(key)
                    .unwrap_or_else(|| panic!("round {round}: acknowledged {key} lost"));
                assert!(
                    kv.version >= *v,
                    "round {round}: {key} at version {} < acked {v}",
                    kv.version
                );
                if kv.version == 1 {
                    assert!(kv.value.iter().all(|&b| b == b'x'));
                } else {
                    assert_eq!(kv.value, val(key, kv.mod_revision));
                }
            }
            // Revisions are dense: every key's mod_revision is within range.
            assert!(
                s.range("", None, 0)
                    .kvs
                    .iter()
                    .all(|kv| kv.mod_revision <= s.current_revision())
            );
            s.close().await;
        });
    }
}

/// Under a steady stream of writes, syncs are spaced by the commit gap
/// (2 ms here): each batch waits for the writes arriving after the
/// previous sync instead of syncing whatever came first, so the log syncs
/// at most ~500 times a second however many writes arrive. Every write is
/// still acknowledged only once durable. (Without the gap this stream
/// syncs every ~1 ms on this machine's disk.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_writers_share_spaced_syncs_and_every_write_survives() {
    let dir = temp_dir("commit-gap");
    let gap = DurableOptions {
        commit_gap: Duration::from_millis(2),
        ..opts()
    };
    let s = Store::open(&dir, gap).await.unwrap();
    // An idle log syncs a lone write at once.
    s.create("/registry/things/ns/first", |r| val("first", r))
        .await
        .unwrap();
    assert_eq!(s.log_syncs(), 1);
    let (writers, each) = (16usize, 40usize);
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let s = s.clone();
            tokio::spawn(async move {
                let key = format!("/registry/things/ns/w{w}");
                for i in 0..each {
                    // A trickle, not one burst: writers out of step.
                    tokio::time::sleep(Duration::from_micros(100 * (1 + (w + i) as u64 % 7))).await;
                    match s.get(&key) {
                        None => s.create(&key, |r| val(&key, r)).await.unwrap(),
                        Some(kv) => s
                            .update(&key, Some(kv.mod_revision), |r| val(&key, r))
                            .await
                            .unwrap(),
                    };
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let writes = (writers * each) as u64;
    let syncs = s.log_syncs() - 1;
    let spaced = elapsed.as_micros() as u64 / 2_000 + 2;
    assert!(
        syncs <= spaced,
        "{syncs} syncs for {writes} writes in {elapsed:?}: closer than the 2 ms gap"
    );
    let expected = dump(&s);
    let rev = s.current_revision();
    assert_eq!(rev, writes + 1);
    s.close().await;
    let s = Store::open(&dir, opts()).await.unwrap();
    assert_eq!(s.current_revision(), rev);
    assert_eq!(dump(&s), expected);
    s.close().await;
}
