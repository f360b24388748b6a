//! Crash simulation of the durable store: a seeded, reproducible workload
//! over a simulated disk ([`common::simfs`]) that keeps only what was
//! synced, crashed at every counted file-system call (each write, sync,
//! truncate, create, rename, remove and directory sync) and, separately,
//! failed there with EIO, ENOSPC or a short write. After each run the store
//! is reopened and must hold every acknowledged write, no write that failed,
//! never reuse a revision a client saw, and have delivered a gap-free watch.
//!
//! `KUBEFORGE_CRASH_SEEDS=<n>` runs n seeds instead of the default few.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use common::simfs::{Call, Fault, Plan, SimFs};
use kubeforge_store::{DurableOptions, EventKind, KeyValue, Store, StoreError};

const DIR: &str = "/sim/store";
const OPS: usize = 40;

fn opts() -> DurableOptions {
    DurableOptions {
        // Small steps, so the workload extends its logs several times.
        preallocate: 4096,
        ..DurableOptions::default()
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// One write of the workload.
#[derive(Clone, Debug)]
enum Op {
    Create(String),
    Update(String),
    Delete(String),
    Compact,
}

/// The state clients saw: what acknowledged writes made.
#[derive(Clone, Debug, Default, PartialEq)]
struct Model {
    keys: BTreeMap<String, (Bytes, u64, u64, u64)>,
    revision: u64,
}

impl Model {
    fn apply(&mut self, op: &Op, rev: u64, value: &Bytes) {
        match op {
            Op::Create(k) => {
                self.keys.insert(k.clone(), (value.clone(), rev, rev, 1));
            }
            Op::Update(k) => {
                let e = self.keys.get_mut(k).expect("updated key exists");
                *e = (value.clone(), e.1, rev, e.3 + 1);
            }
            Op::Delete(k) => {
                self.keys.remove(k);
            }
            Op::Compact => return,
        }
        self.revision = rev;
    }
    fn kv(&self, key: &str) -> Option<(Bytes, u64, u64, u64)> {
        self.keys.get(key).cloned()
    }
}

fn value(key: &str, rev: u64, seed: u64) -> Bytes {
    // Values of varied sizes, so records straddle preallocation steps.
    let pad = "x".repeat(((rev * 37 + seed) % 300) as usize);
    Bytes::from(format!(
        "{{\"key\":\"{key}\",\"rv\":{rev},\"pad\":\"{pad}\"}}"
    ))
}

fn seen(kv: &KeyValue) -> (Bytes, u64, u64, u64) {
    (
        kv.value.clone(),
        kv.create_revision,
        kv.mod_revision,
        kv.version,
    )
}

fn dump(s: &Store) -> BTreeMap<String, (Bytes, u64, u64, u64)> {
    s.range("", None, 0)
        .kvs
        .iter()
        .map(|kv| (kv.key.to_string(), seen(kv)))
        .collect()
}

/// What one run saw before recovery.
struct Run {
    /// State after every acknowledged write.
    model: Model,
    /// A write whose answer the crash swallowed: it may or may not be there.
    unknown: Option<(Op, u64, Bytes)>,
    /// Revisions whose writes failed while the process lived: never there.
    failed: Vec<u64>,
}

/// The workload: `OPS` writes (and a compaction now and then) on a few
/// keys, checking after each that reads show exactly the acknowledged ones.
async fn workload(sim: &SimFs, seed: u64) -> Run {
    let mut rng = Rng(seed);
    let mut run = Run {
        model: Model::default(),
        unknown: None,
        failed: Vec::new(),
    };
    let store = match Store::open_with(Arc::new(sim.clone()), Path::new(DIR), opts()).await {
        Ok(s) => s,
        // Crashed or failed while opening: nothing was acknowledged.
        Err(StoreError::Io(_)) => return run,
        Err(e) => panic!("seed {seed}: first open failed: {e}"),
    };
    let mut watcher = store.watch("", 0).expect("watch");
    for _ in 0..OPS {
        let key = format!("/k{}", rng.next() % 5);
        let op = match (rng.next() % 10, run.model.keys.contains_key(&key)) {
            (0, _) => Op::Compact,
            (_, false) => Op::Create(key.clone()),
            (1..=2, true) => Op::Delete(key.clone()),
            (_, true) => Op::Update(key.clone()),
        };
        let rev = run.model.revision + 1;
        let v = value(&key, rev, seed);
        let res = match &op {
            Op::Create(k) => store.create(k, |_| v.clone()).await.map(Some),
            Op::Update(k) => store.update(k, None, |_| v.clone()).await.map(Some),
            Op::Delete(k) => store.delete(k, None, |_, _| Bytes::new()).await.map(Some),
            Op::Compact => store.compact(run.model.revision).await.map(|()| None),
        };
        match res {
            Ok(kv) => {
                if let Some(kv) = kv {
                    if matches!(op, Op::Delete(_)) {
                        // A delete answers with the deleted state.
                        assert_eq!(Some(seen(&kv)), run.model.kv(&key), "seed {seed}: deleted");
                    } else {
                        assert_eq!(kv.mod_revision, rev, "seed {seed}: revision assigned");
                    }
                    run.model.apply(&op, rev, &v);
                }
            }
            Err(_) if sim.is_dead() => {
                if !matches!(op, Op::Compact) && run.failed.is_empty() {
                    run.unknown = Some((op, rev, v));
                }
                break;
            }
            Err(StoreError::Io(_)) => {
                if !matches!(op, Op::Compact) {
                    run.failed.push(rev);
                }
            }
            Err(e) => panic!("seed {seed}: {op:?}: unexpected {e}"),
        }
        // Reads show exactly the acknowledged writes.
        assert_eq!(
            store.current_revision(),
            run.model.revision,
            "seed {seed}: read revision"
        );
        assert_eq!(
            store.get(&key).as_ref().map(seen),
            run.model.kv(&key),
            "seed {seed}: {key} after {op:?}"
        );
    }
    store.close().await;
    // The watch delivered every acknowledged write, in order, no gaps, and
    // nothing else.
    let mut replay = Model::default();
    let mut last = 0;
    while let Some(Ok(e)) = watcher.next().await {
        assert_eq!(e.kv.mod_revision, last + 1, "seed {seed}: watch gap");
        last = e.kv.mod_revision;
        match e.kind {
            EventKind::Put => {
                replay.keys.insert(e.kv.key.to_string(), seen(&e.kv));
            }
            EventKind::Delete => {
                replay.keys.remove(&*e.kv.key);
            }
        }
        replay.revision = last;
    }
    assert_eq!(
        replay, run.model,
        "seed {seed}: watch saw the acknowledged writes"
    );
    run
}

/// Reopens the store and checks it against what the run saw.
async fn check_recovery(sim: &SimFs, run: &Run, seed: u64, what: &str) {
    let store = Store::open_with(Arc::new(sim.clone()), Path::new(DIR), opts())
        .await
        .unwrap_or_else(|e| panic!("seed {seed} {what}: reopen failed: {e}"));
    let r = store.current_revision();
    let mut expected = run.model.clone();
    if let Some((op, rev, v)) = &run.unknown
        && r == *rev
    {
        expected.apply(op, *rev, v);
    }
    assert_eq!(
        r, expected.revision,
        "seed {seed} {what}: recovered revision"
    );
    assert!(
        run.failed.iter().all(|&f| f > r),
        "seed {seed} {what}: a failed write is back"
    );
    assert_eq!(
        dump(&store),
        expected.keys,
        "seed {seed} {what}: recovered keys"
    );
    // Revisions go on from there: never reused.
    let mut w = store.watch("", r).expect("watch after recovery");
    let kv = store
        .create("/after-recovery", |_| Bytes::from_static(b"{}"))
        .await
        .unwrap_or_else(|e| panic!("seed {seed} {what}: write after recovery: {e}"));
    assert_eq!(kv.mod_revision, r + 1);
    let e = w.next().await.expect("event").expect("not compacted");
    assert_eq!(
        e.kv.mod_revision,
        r + 1,
        "seed {seed} {what}: watch after recovery"
    );
    store
        .delete("/after-recovery", None, |_, _| Bytes::new())
        .await
        .expect("delete after recovery");
    store.close().await;
}

/// Runs the workload under `plan`, then recovers: after a crash point from
/// what was synced; after a fault both as the process left the files (a
/// reopen without reboot) and after a power loss.
async fn one_run(seed: u64, plan: Plan) {
    let sim =
        SimFs::new(seed ^ plan.crash_at.unwrap_or(0) ^ (plan.fault_at.map_or(0, |f| f.0) << 20));
    sim.set_plan(plan);
    let mut run = workload(&sim, seed).await;
    let what = format!("{plan:?}");
    if !sim.is_dead() {
        check_recovery(&sim, &run, seed, &format!("{what}, reopened")).await;
        // The check wrote and deleted one key: two more revisions.
        run.model.revision += 2;
        run.failed.clear();
        run.unknown = None;
    }
    sim.crash();
    check_recovery(&sim, &run, seed, &format!("{what}, after power loss")).await;
}

#[test]
fn every_crash_point_and_fault_recovers_every_acknowledged_write() {
    let seeds: u64 = std::env::var("KUBEFORGE_CRASH_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut crashes, mut faults) = (0u64, 0u64);
    for seed in 1..=seeds {
        // A run without faults lists the calls to crash at.
        let sim = SimFs::new(seed);
        let run = rt.block_on(workload(&sim, seed));
        assert!(run.failed.is_empty() && run.unknown.is_none());
        let calls = sim.calls();
        for (i, call) in calls.iter().enumerate() {
            let at = i as u64;
            rt.block_on(one_run(
                seed,
                Plan {
                    crash_at: Some(at),
                    fault_at: None,
                },
            ));
            crashes += 1;
            let kinds: &[Fault] = match call {
                Call::Write => &[Fault::Eio, Fault::Enospc, Fault::Short],
                _ => &[Fault::Eio],
            };
            for &fault in kinds {
                rt.block_on(one_run(
                    seed,
                    Plan {
                        crash_at: None,
                        fault_at: Some((at, fault)),
                    },
                ));
                faults += 1;
            }
        }
    }
    println!(
        "crash simulation: {seeds} seeds, {crashes} crash points and {faults} injected faults explored, every acknowledged write recovered"
    );
    assert!(crashes > 0);
}
