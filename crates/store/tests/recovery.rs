//! What recovery refuses and what it repairs, and what reads see while a
//! write is not yet durable: corruption is an error naming the file and
//! offset, a torn tail is cut off, a failed sync leaves nothing behind, and
//! no read returns an unacknowledged write.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use common::simfs::{Fault, Plan, SimFs};
use common::{log_file, temp_dir, val};
use kubeforge_store::{DurableOptions, Store, StoreError};

async fn fill(dir: &Path, n: u64) -> Store {
    let s = Store::open(dir, DurableOptions::default()).await.unwrap();
    for i in 0..n {
        let key = format!("/k{i}");
        s.create(&key, |r| val(&key, r)).await.unwrap();
    }
    s
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x04;
    std::fs::write(path, bytes).unwrap();
}

fn corrupt_message(res: Result<Store, StoreError>) -> String {
    match res {
        Err(StoreError::Corrupt(msg)) => msg,
        Err(e) => panic!("expected Corrupt, got {e}"),
        Ok(_) => panic!("expected Corrupt, the store opened"),
    }
}

#[tokio::test]
async fn a_flipped_bit_in_the_middle_of_the_log_refuses_to_open() {
    let dir = temp_dir("flip-middle");
    let s = fill(&dir, 40).await;
    s.close().await;
    let log = log_file(&dir);
    let len = std::fs::metadata(&log).unwrap().len();
    let before = std::fs::read(&log).unwrap();
    flip(&log, len / 2);
    let msg = corrupt_message(Store::open(&dir, DurableOptions::default()).await);
    assert!(msg.contains(&log.display().to_string()), "{msg}");
    assert!(msg.contains("at byte"), "{msg}");
    // A length that points past the end of the file is no torn write
    // either while intact records follow it.
    let mut long = before.clone();
    long[8 + 2] ^= 0x40;
    std::fs::write(&log, &long).unwrap();
    let msg = corrupt_message(Store::open(&dir, DurableOptions::default()).await);
    assert!(msg.contains("at byte 8:"), "{msg}");
    // Nothing was cut off: restoring the bit opens every write.
    assert_eq!(std::fs::metadata(&log).unwrap().len(), len);
    std::fs::write(&log, before).unwrap();
    let s = Store::open(&dir, DurableOptions::default()).await.unwrap();
    assert_eq!((s.current_revision(), s.count("")), (40, 40));
    s.close().await;
}

#[tokio::test]
async fn a_flipped_bit_in_a_compacted_logs_header_refuses_to_open() {
    let dir = temp_dir("flip-header");
    let s = fill(&dir, 10).await;
    s.compact(10).await.unwrap();
    s.close().await;
    let log = log_file(&dir);
    assert!(
        log.display().to_string().ends_with("02.log"),
        "{}",
        log.display()
    );
    // Byte 8 starts the snapshot header record (after the magic): flip a
    // bit of its revision.
    flip(&log, 8 + 8 + 2);
    let msg = corrupt_message(Store::open(&dir, DurableOptions::default()).await);
    assert!(msg.contains("snapshot"), "{msg}");

    // Also when the snapshot is empty and is the whole log.
    let dir = temp_dir("flip-empty-snapshot");
    let s = fill(&dir, 1).await;
    s.delete("/k0", None, |_, _| Bytes::new()).await.unwrap();
    s.compact(2).await.unwrap();
    s.close().await;
    let log = log_file(&dir);
    flip(&log, 8 + 8 + 2);
    corrupt_message(Store::open(&dir, DurableOptions::default()).await);
}

#[tokio::test]
async fn a_short_compacted_log_is_corrupt_not_reset() {
    let dir = temp_dir("short-compacted");
    let s = fill(&dir, 5).await;
    s.compact(5).await.unwrap();
    s.close().await;
    let log = log_file(&dir);
    std::fs::write(&log, b"KFW").unwrap();
    corrupt_message(Store::open(&dir, DurableOptions::default()).await);
    assert_eq!(std::fs::read(&log).unwrap(), b"KFW", "left as found");
}

#[tokio::test]
async fn a_torn_record_then_zeros_opens_with_everything_before_it() {
    let dir = temp_dir("torn-zeros");
    let s = fill(&dir, 20).await;
    s.close().await;
    let log = log_file(&dir);
    let good = std::fs::metadata(&log).unwrap().len();
    // The first 30 bytes of a record that never finished, then the
    // preallocated zeros it was written into.
    let mut rec = (60u32).to_le_bytes().to_vec();
    rec.extend_from_slice(&[0xAB; 26]);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(&rec).unwrap();
    f.write_all(&vec![0u8; 1 << 16]).unwrap();
    drop(f);
    let s = Store::open(&dir, DurableOptions::default()).await.unwrap();
    assert_eq!((s.current_revision(), s.count("")), (20, 20));
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        good,
        "torn tail cut off"
    );
    s.close().await;
}

fn sim_opts() -> DurableOptions {
    DurableOptions {
        preallocate: 4096,
        ..DurableOptions::default()
    }
}

#[tokio::test]
async fn after_a_failed_fsync_the_unsynced_bytes_are_gone_after_reopen() {
    let sim = SimFs::new(7);
    let vfs = Arc::new(sim.clone());
    let dir = Path::new("/sim/store");
    let s = Store::open_with(vfs.clone(), dir, sim_opts())
        .await
        .unwrap();
    s.create("/a", |r| val("/a", r)).await.unwrap();
    // The next counted call of a write is its write, then its sync.
    sim.set_plan(Plan {
        crash_at: None,
        fault_at: Some((1, Fault::Eio)),
    });
    let err = s.create("/b", |r| val("/b", r)).await.unwrap_err();
    assert!(matches!(err, StoreError::Io(_)), "{err}");
    assert_eq!(sim.calls()[1], common::simfs::Call::SyncData);
    // Later writes get a clear error; reads still serve what is durable.
    let later = s.create("/c", |r| val("/c", r)).await.unwrap_err();
    assert!(later.to_string().contains("reopen"), "{later}");
    assert!(s.get("/a").is_some() && s.get("/b").is_none());
    s.close().await;
    // Reopened without a reboot (the page cache had /b's bytes) and after
    // a power loss: /b is not there, /a is, revision 2 is /b's no more.
    for crash in [false, true] {
        if crash {
            sim.crash();
        }
        let s = Store::open_with(vfs.clone(), dir, sim_opts())
            .await
            .unwrap();
        assert_eq!(s.current_revision(), 1, "crash={crash}");
        assert!(
            s.get("/a").is_some() && s.get("/b").is_none(),
            "crash={crash}"
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_never_returns_an_unacknowledged_write() {
    let sim = SimFs::new(9);
    let dir = Path::new("/sim/store");
    let s = Store::open_with(Arc::new(sim.clone()), dir, sim_opts())
        .await
        .unwrap();
    s.create("/a", |r| val("/a", r)).await.unwrap();
    let mut w = s.watch("", 1).unwrap();
    sim.hold_syncs();
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            s.update("/a", None, |r| val("/a", r)).await.unwrap();
            s.create("/b", |r| val("/b", r)).await
        })
    };
    let held = sim.clone();
    tokio::task::spawn_blocking(move || held.wait_for_held_sync())
        .await
        .unwrap();
    // The update is written but its fsync has not returned: no read shows
    // it, and a write ordered after it is checked against it.
    assert_eq!(s.current_revision(), 1);
    assert_eq!(s.get("/a").unwrap().mod_revision, 1);
    let listed = s.range("", None, 0);
    assert_eq!((listed.revision, listed.kvs.len()), (1, 1));
    assert_eq!(listed.kvs[0].mod_revision, 1);
    assert!(matches!(
        s.update("/a", Some(1), |r| val("/a", r)).await,
        Err(StoreError::Conflict { actual: 2, .. })
    ));
    sim.release_syncs();
    let b = writer.await.unwrap().unwrap();
    assert_eq!(b.mod_revision, 3);
    assert_eq!(s.get("/a").unwrap().mod_revision, 2);
    assert_eq!(s.current_revision(), 3);
    for rev in [2, 3] {
        assert_eq!(w.next().await.unwrap().unwrap().kv.mod_revision, rev);
    }
    s.close().await;
}
