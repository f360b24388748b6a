//! A simulated disk for the store's [`Vfs`]: it keeps only what was synced
//! — file data once `sync_data` returned, directory entries (created,
//! renamed, removed files and directories) once `sync_dir` of their
//! directory returned — and forgets the rest at a [`SimFs::crash`], where an
//! unsynced write may survive as a prefix (a torn write). Any counted call
//! (every `create_dir`, `create`, `rename`, `remove`, `sync_dir`,
//! `write_at`, `sync_data`, `set_len`) can be made the crash point, after
//! which the "process" is gone and every call fails, or can fail with EIO
//! or ENOSPC, or write short. Syncs can be held until released.
//!
//! In the spirit of FoundationDB's simulation and of ALICE/CrashMonkey.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use kubeforge_store::{Vfs, VfsFile};

/// What a counted call was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    CreateDir,
    Create,
    Rename,
    Remove,
    SyncDir,
    Write,
    SyncData,
    SetLen,
}

/// An injected failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with EIO and has no effect.
    Eio,
    /// The call fails with ENOSPC and has no effect.
    Enospc,
    /// A write writes only half of its bytes (and says so).
    Short,
}

/// What to do at which counted call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Plan {
    /// The process dies at this call (before it takes effect).
    pub crash_at: Option<u64>,
    /// This call fails so.
    pub fault_at: Option<(u64, Fault)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir,
}

#[derive(Default)]
struct Dir {
    entries: BTreeMap<String, Entry>,
    durable: BTreeMap<String, Entry>,
}

#[derive(Default)]
struct Inode {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Range where `data` may differ from `durable`.
    dirty: Option<(usize, usize)>,
}

impl Inode {
    fn touch(&mut self, from: usize, to: usize) {
        self.dirty = Some(match self.dirty {
            None => (from, to),
            Some((a, b)) => (a.min(from), b.max(to)),
        });
    }
    fn sync(&mut self) {
        if let Some((a, b)) = self.dirty.take() {
            self.durable.resize(self.data.len(), 0);
            let b = b.min(self.data.len());
            if a < b {
                self.durable[a..b].copy_from_slice(&self.data[a..b]);
            }
        }
    }
}

struct Sim {
    /// Bumped at each crash: handles from before are dead.
    generation: u64,
    /// The process died at its crash point: every call fails.
    dead: bool,
    calls: u64,
    log: Vec<Call>,
    plan: Plan,
    hold_syncs: bool,
    held: usize,
    dirs: HashMap<PathBuf, Dir>,
    inodes: HashMap<u64, Inode>,
    next_inode: u64,
    locks: Vec<PathBuf>,
    rng: u64,
}

/// The simulated disk; clones share it.
#[derive(Clone)]
pub struct SimFs {
    shared: Arc<(Mutex<Sim>, Condvar)>,
}

impl std::fmt::Debug for SimFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimFs")
    }
}

fn eio(what: &str) -> io::Error {
    io::Error::other(format!("simulated EIO: {what}"))
}

fn split(path: &Path) -> io::Result<(PathBuf, String)> {
    let parent = path.parent().ok_or_else(|| eio("no parent"))?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| eio("no name"))?;
    Ok((parent.to_owned(), name.to_owned()))
}

impl SimFs {
    /// An empty disk whose root directories `/` and `/sim` exist durably.
    pub fn new(seed: u64) -> SimFs {
        let mut dirs = HashMap::new();
        let mut root = Dir::default();
        root.entries.insert("sim".into(), Entry::Dir);
        root.durable = root.entries.clone();
        dirs.insert(PathBuf::from("/"), root);
        dirs.insert(PathBuf::from("/sim"), Dir::default());
        SimFs {
            shared: Arc::new((
                Mutex::new(Sim {
                    generation: 0,
                    dead: false,
                    calls: 0,
                    log: Vec::new(),
                    plan: Plan::default(),
                    hold_syncs: false,
                    held: 0,
                    dirs,
                    inodes: HashMap::new(),
                    next_inode: 1,
                    locks: Vec::new(),
                    rng: seed | 1,
                }),
                Condvar::new(),
            )),
        }
    }

    fn sim(&self) -> MutexGuard<'_, Sim> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets what happens at which counted call (counting from now on).
    pub fn set_plan(&self, plan: Plan) {
        let mut sim = self.sim();
        sim.plan = plan;
        sim.calls = 0;
        sim.log.clear();
    }

    /// The counted calls made since the plan was set.
    pub fn calls(&self) -> Vec<Call> {
        self.sim().log.clone()
    }

    /// Whether the process died at its crash point.
    pub fn is_dead(&self) -> bool {
        self.sim().dead
    }

    /// Makes every later `sync_data` wait until [`SimFs::release_syncs`].
    pub fn hold_syncs(&self) {
        self.sim().hold_syncs = true;
    }

    /// Lets held syncs go on.
    pub fn release_syncs(&self) {
        self.sim().hold_syncs = false;
        self.shared.1.notify_all();
    }

    /// Waits until a `sync_data` is being held.
    pub fn wait_for_held_sync(&self) {
        let mut sim = self.sim();
        while sim.held == 0 {
            sim = self.shared.1.wait(sim).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Power loss: every handle dies, directories keep their synced
    /// entries, files their synced data plus, at random, a prefix of their
    /// unsynced changes (a torn write); locks are released.
    pub fn crash(&self) {
        let mut sim = self.sim();
        sim.generation += 1;
        sim.dead = false;
        sim.plan = Plan::default();
        sim.locks.clear();
        for dir in sim.dirs.values_mut() {
            dir.entries = dir.durable.clone();
        }
        // Directories no longer reachable are gone.
        loop {
            let paths: Vec<PathBuf> = sim.dirs.keys().cloned().collect();
            let mut gone = Vec::new();
            for p in paths {
                if p == Path::new("/") {
                    continue;
                }
                let Ok((parent, name)) = split(&p) else {
                    continue;
                };
                let there = sim
                    .dirs
                    .get(&parent)
                    .is_some_and(|d| d.entries.get(&name) == Some(&Entry::Dir));
                if !there {
                    gone.push(p);
                }
            }
            if gone.is_empty() {
                break;
            }
            for p in gone {
                sim.dirs.remove(&p);
            }
        }
        let ids: Vec<u64> = sim.inodes.keys().copied().collect();
        for id in ids {
            let r = sim.next_random();
            let inode = sim.inodes.get_mut(&id).expect("inode");
            let mut kept = inode.durable.clone();
            if let Some((a, b)) = inode.dirty.take() {
                let b = b.min(inode.data.len());
                if a < b {
                    // Keep a prefix of the unsynced range (often none).
                    let n = if r.is_multiple_of(3) {
                        0
                    } else {
                        (r >> 8) as usize % (b - a + 1)
                    };
                    for j in a..a + n {
                        if j < kept.len() {
                            kept[j] = inode.data[j];
                        } else {
                            kept.push(inode.data[j]);
                        }
                    }
                }
            }
            inode.data = kept.clone();
            inode.durable = kept;
        }
    }
}

impl Sim {
    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Counts a call; Err if the process is gone or this is the crash
    /// point; Ok(fault) to inject.
    fn tick(&mut self, call: Call) -> io::Result<Option<Fault>> {
        if self.dead {
            return Err(eio("the process is gone"));
        }
        let n = self.calls;
        self.calls += 1;
        self.log.push(call);
        if self.plan.crash_at == Some(n) {
            self.dead = true;
            return Err(eio("crash point"));
        }
        match self.plan.fault_at {
            Some((at, fault)) if at == n => Ok(Some(fault)),
            _ => Ok(None),
        }
    }

    fn fail(fault: Option<Fault>, call: Call) -> io::Result<()> {
        match fault {
            Some(Fault::Eio) => Err(eio(&format!("{call:?}"))),
            Some(Fault::Enospc) => Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!("simulated ENOSPC: {call:?}"),
            )),
            Some(Fault::Short) | None => Ok(()),
        }
    }

    fn lookup(&self, path: &Path) -> io::Result<Entry> {
        if path == Path::new("/") {
            return Ok(Entry::Dir);
        }
        let (parent, name) = split(path)?;
        self.dirs
            .get(&parent)
            .and_then(|d| d.entries.get(&name).copied())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{} not found", path.display()),
                )
            })
    }

    fn parent_mut(&mut self, path: &Path) -> io::Result<(&mut Dir, String)> {
        let (parent, name) = split(path)?;
        let dir = self
            .dirs
            .get_mut(&parent)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no parent directory"))?;
        Ok((dir, name))
    }
}

struct SimFile {
    fs: SimFs,
    inode: u64,
    generation: u64,
}

impl SimFile {
    fn sim(&self) -> io::Result<MutexGuard<'_, Sim>> {
        let sim = self.fs.sim();
        if sim.generation != self.generation || sim.dead {
            return Err(eio("stale handle"));
        }
        Ok(sim)
    }
}

impl VfsFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let sim = self.sim()?;
        let data = &sim.inodes[&self.inode].data;
        let start = (offset as usize).min(data.len());
        let n = buf.len().min(data.len() - start);
        buf[..n].copy_from_slice(&data[start..start + n]);
        Ok(n)
    }

    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        let mut sim = self.sim()?;
        let fault = sim.tick(Call::Write)?;
        Sim::fail(fault, Call::Write)?;
        let n = if fault == Some(Fault::Short) {
            buf.len().div_ceil(2)
        } else {
            buf.len()
        };
        let inode = sim.inodes.get_mut(&self.inode).expect("inode");
        let at = offset as usize;
        if inode.data.len() < at + n {
            inode.data.resize(at + n, 0);
        }
        inode.data[at..at + n].copy_from_slice(&buf[..n]);
        inode.touch(at, at + n);
        Ok(n)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        let mut sim = self.sim()?;
        while sim.hold_syncs {
            sim.held += 1;
            self.fs.shared.1.notify_all();
            sim = self
                .fs
                .shared
                .1
                .wait(sim)
                .unwrap_or_else(|e| e.into_inner());
            sim.held -= 1;
        }
        if sim.generation != self.generation || sim.dead {
            return Err(eio("stale handle"));
        }
        let fault = sim.tick(Call::SyncData)?;
        Sim::fail(fault, Call::SyncData)?;
        sim.inodes.get_mut(&self.inode).expect("inode").sync();
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut sim = self.sim()?;
        let fault = sim.tick(Call::SetLen)?;
        Sim::fail(fault, Call::SetLen)?;
        let inode = sim.inodes.get_mut(&self.inode).expect("inode");
        let (old, new) = (inode.data.len(), len as usize);
        inode.data.resize(new, 0);
        inode.touch(old.min(new), old.max(new));
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.sim()?.inodes[&self.inode].data.len() as u64)
    }
}

struct SimLock {
    fs: SimFs,
    dir: PathBuf,
    generation: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut sim = self.fs.sim();
        if sim.generation == self.generation {
            sim.locks.retain(|d| d != &self.dir);
        }
    }
}

impl Vfs for SimFs {
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        let mut sim = self.sim();
        let fault = sim.tick(Call::CreateDir)?;
        Sim::fail(fault, Call::CreateDir)?;
        if sim.lookup(dir).is_ok() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"));
        }
        let (parent, name) = sim.parent_mut(dir)?;
        parent.entries.insert(name, Entry::Dir);
        sim.dirs.insert(dir.to_owned(), Dir::default());
        Ok(())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let sim = self.sim();
        if sim.dead {
            return Err(eio("the process is gone"));
        }
        Ok(sim.lookup(path).is_ok())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let sim = self.sim();
        if sim.dead {
            return Err(eio("the process is gone"));
        }
        let d = sim
            .dirs
            .get(dir)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such directory"))?;
        Ok(d.entries.keys().cloned().collect())
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let sim = self.sim();
        if sim.dead {
            return Err(eio("the process is gone"));
        }
        match sim.lookup(path)? {
            Entry::File(inode) => Ok(Box::new(SimFile {
                fs: self.clone(),
                inode,
                generation: sim.generation,
            })),
            Entry::Dir => Err(io::Error::other("is a directory")),
        }
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let mut sim = self.sim();
        let fault = sim.tick(Call::Create)?;
        Sim::fail(fault, Call::Create)?;
        if sim.lookup(path).is_ok() {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "exists"));
        }
        let inode = sim.next_inode;
        sim.next_inode += 1;
        sim.inodes.insert(inode, Inode::default());
        let (parent, name) = sim.parent_mut(path)?;
        parent.entries.insert(name, Entry::File(inode));
        Ok(Box::new(SimFile {
            fs: self.clone(),
            inode,
            generation: sim.generation,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut sim = self.sim();
        let fault = sim.tick(Call::Rename)?;
        Sim::fail(fault, Call::Rename)?;
        let entry = sim.lookup(from)?;
        sim.parent_mut(from).map(|(d, n)| d.entries.remove(&n))?;
        let (parent, name) = sim.parent_mut(to)?;
        parent.entries.insert(name, entry);
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut sim = self.sim();
        let fault = sim.tick(Call::Remove)?;
        Sim::fail(fault, Call::Remove)?;
        sim.lookup(path)?;
        sim.parent_mut(path).map(|(d, n)| d.entries.remove(&n))?;
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut sim = self.sim();
        let fault = sim.tick(Call::SyncDir)?;
        Sim::fail(fault, Call::SyncDir)?;
        let d = sim
            .dirs
            .get_mut(dir)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such directory"))?;
        d.durable = d.entries.clone();
        Ok(())
    }

    fn lock(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>> {
        let mut sim = self.sim();
        if sim.dead {
            return Err(eio("the process is gone"));
        }
        if sim.locks.iter().any(|d| d == dir) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "locked"));
        }
        sim.locks.push(dir.to_owned());
        Ok(Box::new(SimLock {
            fs: self.clone(),
            dir: dir.to_owned(),
            generation: sim.generation,
        }))
    }
}
