//! The durable store opening a damaged log on restart: torn and corrupt
//! tails, flipped bits, records that check out but make no sense (revisions
//! out of order, deletes of absent keys, misplaced snapshots), leftover
//! older logs and unfinished compactions. Whatever the log holds, opening
//! either fails with an error or gives a store that takes a write and
//! reopens with everything it had.
//!
//! Input: a flags byte, then either the log file's bytes as they are (raw)
//! or a list of records the harness frames with valid checksums
//! (structured: each `[op][rev u16][create u16][version u8][key_len u8][key]
//! [value_len u8][value]`), optionally followed by zero fill and one
//! damaged byte. Flags: 1 = the log is `wal-2` (a compacted one), 2 = an
//! older log and a `.tmp` lie beside it, 4 = write, close and reopen after
//! opening, 8 = structured, 16 = zero fill after the records, 32 = damage
//! one byte (a u16 offset and a xor mask follow the flags).
#![no_main]
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bytes::Bytes;
use kubeforge_store::{DurableOptions, Store};
use libfuzzer_sys::fuzz_target;

const MAGIC: &[u8; 8] = b"KFWAL\0\0\x01";

fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        base.join(format!("kubeforge-fuzz-wal-{}", std::process::id()))
    })
}

fn log_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Frames the structured records of `data`; returns the log and the rest.
fn structured(mut data: &[u8]) -> Vec<u8> {
    let mut log = MAGIC.to_vec();
    let take = |n: usize, data: &mut &[u8]| -> Option<Vec<u8>> {
        if data.len() < n {
            return None;
        }
        let (a, b) = data.split_at(n);
        *data = b;
        Some(a.to_vec())
    };
    while let Some(h) = take(7, &mut data) {
        let op = h[0] % 5;
        let rev = u64::from(u16::from_le_bytes([h[1], h[2]]));
        let create = u64::from(u16::from_le_bytes([h[3], h[4]]));
        let version = u64::from(h[5]);
        let Some(key) = take(usize::from(h[6] % 32), &mut data) else {
            break;
        };
        let Some(vl) = take(1, &mut data) else { break };
        let Some(value) = take(usize::from(vl[0] % 64), &mut data) else {
            break;
        };
        let mut p = vec![op];
        p.extend_from_slice(&rev.to_le_bytes());
        p.extend_from_slice(&create.to_le_bytes());
        p.extend_from_slice(&version.to_le_bytes());
        p.extend_from_slice(&(key.len() as u32).to_le_bytes());
        p.extend_from_slice(&key);
        p.extend_from_slice(&(value.len() as u32).to_le_bytes());
        p.extend_from_slice(&value);
        frame(&mut log, &p);
    }
    log
}

async fn contents(store: &Store) -> Vec<(String, Bytes, u64)> {
    store
        .range("", None, 0)
        .kvs
        .into_iter()
        .map(|kv| (kv.key.to_string(), kv.value, kv.mod_revision))
        .collect()
}

fn opts() -> DurableOptions {
    DurableOptions {
        fsync: false,
        history: 1000,
        ..DurableOptions::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut damage = None;
    if flags & 32 != 0 {
        if rest.len() < 3 {
            return;
        }
        damage = Some((u16::from_le_bytes([rest[0], rest[1]]), rest[2]));
        rest = &rest[3..];
    }
    let mut log = if flags & 8 != 0 {
        structured(rest)
    } else {
        rest.to_vec()
    };
    if flags & 16 != 0 {
        log.extend_from_slice(&[0; 64]);
    }
    if let Some((at, mask)) = damage
        && !log.is_empty()
    {
        let i = usize::from(at) % log.len();
        log[i] ^= mask;
    }
    let dir = dir();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("fuzz dir");
    let seq = if flags & 1 != 0 { 2 } else { 1 };
    std::fs::write(dir.join(log_name(seq)), &log).expect("write log");
    if flags & 2 != 0 && seq == 2 {
        std::fs::write(dir.join(log_name(1)), MAGIC).expect("write old log");
        std::fs::write(dir.join(format!("{}.tmp", log_name(3))), &log).expect("write tmp");
    }
    kubeforge_fuzz::runtime().block_on(async {
        let Ok(store) = Store::open(dir, opts()).await else {
            return;
        };
        let before = contents(&store).await;
        let rev = store.current_revision();
        assert!(
            before.iter().all(|(_, _, r)| *r <= rev),
            "a key is newer than the store's revision {rev}"
        );
        if flags & 4 == 0 {
            store.close().await;
            return;
        }
        let put = store
            .create("/fuzz/new-key", |_| Bytes::from_static(b"fresh"))
            .await;
        store.close().await;
        drop(store);
        let again = Store::open(dir, opts())
            .await
            .unwrap_or_else(|e| panic!("a store that opened does not reopen: {e}"));
        let after = contents(&again).await;
        match put {
            Ok(kv) => {
                assert!(kv.mod_revision > rev, "revision reused after restart");
                let mut expected = before.clone();
                expected.retain(|(k, _, _)| k != "/fuzz/new-key");
                expected.push((
                    "/fuzz/new-key".into(),
                    Bytes::from_static(b"fresh"),
                    kv.mod_revision,
                ));
                expected.sort_by(|a, b| a.0.cmp(&b.0));
                assert_eq!(after, expected, "reopen lost or changed data");
            }
            Err(_) => assert_eq!(after, before, "reopen after a refused write changed data"),
        }
        again.close().await;
    });
    let _ = std::fs::remove_dir_all(dir);
});
