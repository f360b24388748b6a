//! The group-commit writer thread of the durable backend.
//!
//! Writers order a change under the store's lock (it waits in the state's
//! pending set) and queue its event here, in revision order. The thread
//! drains whatever has queued, encodes it into one buffer, writes it, calls
//! `fdatasync` once, then — under the state's write lock — commits the
//! events to the state that reads see and publishes them to the watch hub,
//! and acknowledges the callers: an acknowledged, read or watched write is
//! on disk. With a commit gap ([`crate::DurableOptions::commit_gap`]), while
//! the log is busy a batch waits up to that long after the previous sync for
//! more writes to join it.
//!
//! The file is extended ahead of the records in zero-filled steps (4 MiB)
//! (synced), so that a commit's `fdatasync` overwrites allocated blocks
//! instead of growing the file; recovery reads zeros as the end of the log,
//! and a clean close trims the unused space.
//!
//! A failed write or sync stops the log: before anything else the file is
//! cut back to the end of the last synced batch (and that synced), so bytes
//! that only reached the page cache are never replayed; the batch is failed,
//! later writes get an error and watches end. Reads keep serving the
//! durable state. Reopen the store to write again.
//!
//! Compaction ([`write_snapshot`], run off this thread) writes the live keys
//! as of a published revision to `wal-<seq+1>.log.tmp` and syncs it while
//! writes go on; then [`Command::Switch`] has this thread append the records
//! logged since that revision, sync, rename the file into place, sync the
//! directory and only then write to it and delete the old log.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::hub::Hub;
use crate::record::{MAGIC, OP_SNAPSHOT, OP_SNAPSHOT_PUT, encode, encode_event};
use crate::state::{LogPos, State};
use crate::vfs::{Vfs, VfsFile, read_full_at, write_all_at};
use crate::wal::{Recovered, log_path, tmp_path};
use crate::{Event, KeyValue, Revision, StoreError};

/// Stop draining the queue into one batch past this many buffered bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;

/// Acknowledgement of one logged write.
pub(crate) type Ack = oneshot::Sender<Result<(), StoreError>>;

/// What the store asks of the writer thread.
pub(crate) enum Command {
    /// Log this event, then publish it and acknowledge.
    Write { event: Arc<Event>, done: Ack },
    /// Move to the compacted log `file` (`len` bytes, synced, still named
    /// `.tmp`), a snapshot taken when log `base_seq` ended at `from`.
    Switch {
        file: Box<dyn VfsFile>,
        len: u64,
        base_seq: u64,
        from: u64,
        done: Ack,
    },
    /// Flush, release the files, close the hub and stop.
    Close { done: oneshot::Sender<()> },
}

/// A fresh copy of an I/O error (they are not `Clone`).
fn copy_io(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}

/// The writer thread's state.
struct Writer {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    seq: u64,
    file: Box<dyn VfsFile>,
    /// End of the log's last synced batch.
    pos: u64,
    /// File length: `pos..allocated` is zero-filled preallocated space.
    allocated: u64,
    _lock: Box<dyn Send + Sync>,
    fsync: bool,
    /// Preallocation granularity of the log file.
    prealloc_step: u64,
    state: Arc<RwLock<State>>,
    hub: Arc<Hub>,
    failed: Arc<AtomicBool>,
    buf: Vec<u8>,
    pending: Vec<(Arc<Event>, Ack)>,
    /// Whether the log is a snapshot with nothing appended after it.
    fresh: bool,
    /// See [`crate::DurableOptions::commit_gap`].
    commit_gap: Duration,
    /// When the last batch's sync ended.
    last_sync: Option<Instant>,
    /// Batch syncs so far ([`crate::Store::log_syncs`]).
    syncs: Arc<AtomicU64>,
}

/// What the writer thread shares with the store.
pub(crate) struct Shared {
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) state: Arc<RwLock<State>>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) failed: Arc<AtomicBool>,
    pub(crate) syncs: Arc<AtomicU64>,
}

/// Starts the writer thread over a recovered log; returns the queue to it.
/// The thread stops after [`Command::Close`] or once every sender is gone.
pub(crate) fn spawn_writer(
    rec: Recovered,
    opts: &crate::DurableOptions,
    shared: Shared,
) -> io::Result<mpsc::Sender<Command>> {
    let (tx, rx) = mpsc::channel();
    let writer = Writer {
        vfs: shared.vfs,
        dir: rec.dir,
        seq: rec.seq,
        file: rec.file,
        pos: rec.len,
        allocated: rec.len,
        _lock: rec.lock,
        fsync: opts.fsync,
        prealloc_step: opts.preallocate.max(4096),
        commit_gap: opts.commit_gap,
        state: shared.state,
        hub: shared.hub,
        failed: shared.failed,
        buf: Vec::with_capacity(1 << 20),
        pending: Vec::new(),
        fresh: rec.fresh,
        last_sync: None,
        syncs: shared.syncs,
    };
    std::thread::Builder::new()
        .name("kubeforge-wal".into())
        .spawn(move || writer.run(rx))?;
    Ok(tx)
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        while let Ok(first) = rx.recv() {
            // Take everything already queued (bounded), in queue order.
            let mut next = Some(first);
            loop {
                while let Some(cmd) = next {
                    match cmd {
                        Command::Write { event, done } => self.stage(event, done),
                        Command::Switch {
                            file,
                            len,
                            base_seq,
                            from,
                            done,
                        } => {
                            self.flush();
                            let _ = done.send(self.switch(file, len, base_seq, from));
                        }
                        Command::Close { done } => {
                            self.flush();
                            self.trim();
                            self.hub.close();
                            while let Ok(cmd) = rx.try_recv() {
                                reject(cmd);
                            }
                            // Release the log and the directory lock before
                            // acknowledging, so the directory can be reopened.
                            drop(self);
                            let _ = done.send(());
                            return;
                        }
                    }
                    next = if self.buf.len() < MAX_BATCH_BYTES {
                        rx.try_recv().ok()
                    } else {
                        None
                    };
                }
                // Busy: gather what arrives until the commit gap after the
                // last sync, so one sync covers it. Sleep, then take what
                // came: a receiver waiting on the queue is woken by every
                // send (a syscall on each side, thousands a second); a
                // sleeping one is not.
                let Some(until) = self.gather_until() else {
                    break;
                };
                std::thread::sleep(until.saturating_duration_since(Instant::now()));
                next = rx.try_recv().ok();
                if next.is_none() {
                    break;
                }
            }
            self.flush();
        }
        // Every Store handle is gone: everything queued has been logged.
        self.trim();
        self.hub.close();
    }

    /// Until when a staged batch waits for more writes before its sync:
    /// the commit gap after the previous sync ended, when that is still
    /// ahead (the log is busy) and the batch is not full. An idle log syncs
    /// at once.
    fn gather_until(&self) -> Option<Instant> {
        if !self.fsync
            || self.commit_gap.is_zero()
            || self.pending.is_empty()
            || self.buf.len() >= MAX_BATCH_BYTES
        {
            return None;
        }
        let until = self.last_sync? + self.commit_gap;
        (until > Instant::now()).then_some(until)
    }

    /// Encodes a write into the batch buffer (or fails it after an error).
    fn stage(&mut self, event: Arc<Event>, done: Ack) {
        if self.failed.load(Ordering::Acquire) {
            let _ = done.send(Err(failed_error()));
            return;
        }
        encode_event(&mut self.buf, &event);
        self.pending.push((event, done));
    }

    /// Writes and syncs the batch, then publishes and acknowledges it.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let end = self.pos + self.buf.len() as u64;
        let res = self.append(end);
        self.last_sync = Some(Instant::now());
        self.buf.clear();
        if self.buf.capacity() > 4 * MAX_BATCH_BYTES {
            self.buf.shrink_to(1 << 20);
        }
        match res {
            Ok(()) => {
                self.pos = end;
                self.fresh = false;
                {
                    let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
                    for (event, _) in &self.pending {
                        state.commit(event);
                    }
                    state.log = LogPos {
                        seq: self.seq,
                        offset: self.pos,
                        fresh: false,
                    };
                    // Under the state lock, so a reader sees the hub at the
                    // state's revision.
                    self.hub
                        .publish(self.pending.iter().map(|(e, _)| e.clone()));
                }
                for (_, done) in self.pending.drain(..) {
                    let _ = done.send(Ok(()));
                }
            }
            Err(e) => {
                self.fail(&e);
                for (_, done) in self.pending.drain(..) {
                    let _ = done.send(Err(StoreError::Io(copy_io(&e))));
                }
            }
        }
    }

    /// Writes the batch buffer at the end of the log (first extending the
    /// preallocated space if it does not fit) and syncs it.
    fn append(&mut self, end: u64) -> io::Result<()> {
        if end > self.allocated {
            self.preallocate(end)?;
        }
        write_all_at(&mut *self.file, &self.buf, self.pos)?;
        if self.fsync {
            self.syncs.fetch_add(1, Ordering::Relaxed);
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Zero-fills the file up to past `end`. Overwriting blocks that are
    /// already allocated and written lets each commit's `fdatasync` skip
    /// the file-size journal update an append needs (as etcd's WAL does);
    /// real zeros rather than `fallocate`, whose unwritten extents would
    /// still need a metadata update on first write. Recovery reads zeros as
    /// the end of the log.
    fn preallocate(&mut self, end: u64) -> io::Result<()> {
        let step = self.prealloc_step;
        let target = end.div_ceil(step).saturating_add(1).saturating_mul(step);
        let zeros = vec![0u8; 256 << 10];
        let mut at = self.allocated;
        while at < target {
            let n = zeros.len().min((target - at) as usize);
            write_all_at(&mut *self.file, &zeros[..n], at)?;
            at += n as u64;
        }
        if self.fsync {
            self.file.sync_data()?;
        }
        self.allocated = target;
        Ok(())
    }

    /// Cuts the preallocated space off (on close), so a closed log ends
    /// with its last record.
    fn trim(&mut self) {
        if self.allocated > self.pos && !self.failed.load(Ordering::Acquire) {
            let res = self
                .file
                .set_len(self.pos)
                .and_then(|()| self.file.sync_data());
            if let Err(e) = res {
                tracing::warn!(error = %e, "could not trim the log's preallocated tail");
            }
            self.allocated = self.pos;
        }
    }

    /// After a failed write or sync: cut the log back to the last synced
    /// batch before anything else, so that what only reached the page cache
    /// is never replayed, then refuse every later write and end the watches.
    fn fail(&mut self, e: &io::Error) {
        self.failed.store(true, Ordering::Release);
        let cut = self
            .file
            .set_len(self.pos)
            .and_then(|()| self.file.sync_data());
        match cut {
            Ok(()) => {
                self.allocated = self.pos;
                tracing::error!(error = %e, offset = self.pos, "write-ahead log failed; cut back to its last synced record; the store refuses writes until reopened");
            }
            Err(cut) => tracing::error!(
                error = %e,
                cut_error = %cut,
                offset = self.pos,
                "write-ahead log failed and could not be cut back to its last synced record; the store refuses writes until reopened"
            ),
        }
        self.hub.close();
    }

    /// Finishes a compaction: appends to `file` what was logged after
    /// `from`, syncs it, renames it into place, syncs the directory, and
    /// writes to it from then on.
    fn switch(
        &mut self,
        mut file: Box<dyn VfsFile>,
        len: u64,
        base_seq: u64,
        from: u64,
    ) -> Result<(), StoreError> {
        let next = base_seq + 1;
        let tmp = tmp_path(&self.dir, next);
        if self.failed.load(Ordering::Acquire) || base_seq != self.seq {
            let _ = self.vfs.remove(&tmp);
            return Err(if base_seq != self.seq {
                StoreError::Io(io::Error::other("the log changed during its compaction"))
            } else {
                failed_error()
            });
        }
        let new = log_path(&self.dir, next);
        let copied = (|| -> io::Result<u64> {
            let mut chunk = vec![0u8; 1 << 20];
            let mut at = from;
            let mut out = len;
            while at < self.pos {
                let want = chunk.len().min((self.pos - at) as usize);
                let n = read_full_at(&*self.file, &mut chunk[..want], at)?;
                if n < want {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the log is shorter than its records",
                    ));
                }
                write_all_at(&mut *file, &chunk[..n], out)?;
                at += n as u64;
                out += n as u64;
            }
            file.sync_data()?;
            self.vfs.rename(&tmp, &new)?;
            Ok(out)
        })();
        let new_len = match copied {
            Ok(n) => n,
            Err(e) => {
                let _ = self.vfs.remove(&tmp);
                tracing::warn!(error = %e, "log compaction failed; keeping the old log");
                return Err(e.into());
            }
        };
        // From here on the new log is (or may be, after a crash) the one
        // recovery uses: neither log is safe to write to until the rename is
        // durable.
        if let Err(e) = self.vfs.sync_dir(&self.dir) {
            self.fail(&e);
            return Err(e.into());
        }
        let old = log_path(&self.dir, self.seq);
        self.file = file;
        self.seq = next;
        self.fresh = new_len == len;
        self.pos = new_len;
        self.allocated = new_len;
        {
            let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
            state.log = LogPos {
                seq: self.seq,
                offset: self.pos,
                fresh: self.fresh,
            };
        }
        if let Err(e) = self
            .vfs
            .remove(&old)
            .and_then(|()| self.vfs.sync_dir(&self.dir))
        {
            tracing::warn!(error = %e, log = %old.display(), "could not remove the superseded log");
        }
        tracing::debug!(log = %new.display(), "log rewritten as a snapshot");
        Ok(())
    }
}

/// Writes a compacted log for `seq` to its `.tmp` name: the magic, a
/// snapshot header at `revision` counting the entries, the live keys; then
/// syncs it. Runs off the writer thread, while writes go on. Returns the
/// file and its length.
pub(crate) fn write_snapshot(
    vfs: &dyn Vfs,
    dir: &Path,
    seq: u64,
    snapshot: &[KeyValue],
    revision: Revision,
) -> io::Result<(Box<dyn VfsFile>, u64)> {
    let tmp = tmp_path(dir, seq);
    match vfs.remove(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut file = vfs.create(&tmp)?;
    let written = (|| -> io::Result<u64> {
        let mut buf = Vec::with_capacity(1 << 20);
        buf.extend_from_slice(MAGIC);
        // The header's `version` is 1 + the number of entries, so recovery
        // knows where the snapshot ends (0: not counted, older logs).
        encode(
            &mut buf,
            OP_SNAPSHOT,
            revision,
            0,
            snapshot.len() as u64 + 1,
            "",
            &[],
        );
        let mut at = 0u64;
        for kv in snapshot {
            encode(
                &mut buf,
                OP_SNAPSHOT_PUT,
                kv.mod_revision,
                kv.create_revision,
                kv.version,
                &kv.key,
                &kv.value,
            );
            if buf.len() >= 1 << 20 {
                write_all_at(&mut *file, &buf, at)?;
                at += buf.len() as u64;
                buf.clear();
            }
        }
        write_all_at(&mut *file, &buf, at)?;
        at += buf.len() as u64;
        // Always synced, even without fsync for writes: the old log is
        // deleted once this one is in place.
        file.sync_data()?;
        Ok(at)
    })();
    match written {
        Ok(len) => Ok((file, len)),
        Err(e) => {
            let _ = vfs.remove(&tmp);
            Err(e)
        }
    }
}

fn failed_error() -> StoreError {
    StoreError::Io(io::Error::other(
        "an earlier write-ahead log write failed; reopen the store",
    ))
}

/// Answers a command that arrived after close.
fn reject(cmd: Command) {
    match cmd {
        Command::Write { done, .. } | Command::Switch { done, .. } => {
            let _ = done.send(Err(StoreError::Closed));
        }
        Command::Close { done } => {
            let _ = done.send(());
        }
    }
}
