//! The group-commit writer thread of the durable backend.
//!
//! Writers apply a change to the in-memory state under the store's lock and
//! queue its event here, in revision order. The thread drains whatever has
//! queued, encodes it into one buffer, writes it with one `write_all`, calls
//! `fdatasync` once, then publishes the events to the watch hub and
//! acknowledges the callers: an acknowledged write is on disk, and watchers
//! only ever see durable writes. With a commit gap
//! ([`crate::DurableOptions::commit_gap`]), while the log is busy a batch
//! waits up to that long after the previous sync for more writes to join it.
//!
//! The file is extended ahead of the records in zero-filled 4 MiB steps, so
//! that a commit's `fdatasync` overwrites allocated blocks instead of
//! growing the file; recovery reads a zero header as the end of the log, and
//! a clean close trims the unused space.
//!
//! Compaction rewrites the log as a snapshot of the live keys into
//! `wal-<seq+1>.log.tmp`, fsyncs it, renames it to `wal-<seq+1>.log`, fsyncs
//! the directory and deletes the old file; records then go to the new file.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::hub::Hub;
use crate::record::{MAGIC, OP_SNAPSHOT, OP_SNAPSHOT_PUT, encode, encode_event};
use crate::wal::{Recovered, log_path, sync_dir, tmp_path};
use crate::{Event, KeyValue, Revision, StoreError};

/// Stop draining the queue into one batch past this many buffered bytes.
const MAX_BATCH_BYTES: usize = 8 << 20;
/// Preallocation granularity of the log file.
const PREALLOC_STEP: u64 = 4 << 20;

/// Acknowledgement of one logged write.
pub(crate) type Ack = oneshot::Sender<Result<(), StoreError>>;

/// What the store asks of the writer thread.
pub(crate) enum Command {
    /// Log this event, then publish it and acknowledge.
    Write { event: Arc<Event>, done: Ack },
    /// Rewrite the log as this snapshot (the live keys as of `revision`,
    /// taken in queue order, so it covers exactly the writes queued before).
    Compact {
        snapshot: Vec<KeyValue>,
        revision: Revision,
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
    dir: PathBuf,
    seq: u64,
    file: File,
    /// End of the valid log (the file's cursor).
    pos: u64,
    /// File length: `pos..allocated` is zero-filled preallocated space.
    allocated: u64,
    _lock: File,
    fsync: bool,
    hub: Arc<Hub>,
    failed: Arc<AtomicBool>,
    buf: Vec<u8>,
    pending: Vec<(Arc<Event>, Ack)>,
    /// Records appended since the log was last (re)written as a snapshot.
    appended: u64,
    /// See [`crate::DurableOptions::commit_gap`].
    commit_gap: Duration,
    /// When the last batch's sync ended.
    last_sync: Option<Instant>,
    /// Batch syncs so far ([`crate::Store::log_syncs`]).
    syncs: Arc<AtomicU64>,
}

/// Starts the writer thread over a recovered log; returns the queue to it.
/// The thread stops after [`Command::Close`] or once every sender is gone.
pub(crate) fn spawn_writer(
    rec: Recovered,
    opts: &crate::DurableOptions,
    hub: Arc<Hub>,
    failed: Arc<AtomicBool>,
    syncs: Arc<AtomicU64>,
) -> io::Result<mpsc::Sender<Command>> {
    let (tx, rx) = mpsc::channel();
    let writer = Writer {
        dir: rec.dir,
        seq: rec.seq,
        file: rec.file,
        pos: rec.len,
        allocated: rec.len,
        _lock: rec.lock,
        fsync: opts.fsync,
        commit_gap: opts.commit_gap,
        hub,
        failed,
        buf: Vec::with_capacity(1 << 20),
        pending: Vec::new(),
        appended: u64::MAX,
        last_sync: None,
        syncs,
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
                        Command::Compact {
                            snapshot,
                            revision,
                            done,
                        } => {
                            self.flush();
                            let _ = done.send(self.rewrite(snapshot, revision));
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
        let res = self.append().and_then(|()| {
            if self.fsync {
                self.syncs.fetch_add(1, Ordering::Relaxed);
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        self.last_sync = Some(Instant::now());
        self.buf.clear();
        if self.buf.capacity() > 4 * MAX_BATCH_BYTES {
            self.buf.shrink_to(1 << 20);
        }
        match res {
            Ok(()) => {
                self.appended = self.appended.saturating_add(self.pending.len() as u64);
                self.hub
                    .publish(self.pending.iter().map(|(e, _)| e.clone()));
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

    /// Writes the batch buffer at the end of the log, first extending the
    /// preallocated space if it does not fit.
    fn append(&mut self) -> io::Result<()> {
        let end = self.pos + self.buf.len() as u64;
        if end > self.allocated {
            self.preallocate(end)?;
        }
        self.file.write_all(&self.buf)?;
        self.pos = end;
        Ok(())
    }

    /// Zero-fills the file up to past `end`. Overwriting blocks that are
    /// already allocated and written lets each commit's `fdatasync` skip
    /// the file-size journal update an append needs (as etcd's WAL does);
    /// real zeros rather than `fallocate`, whose unwritten extents would
    /// still need a metadata update on first write. Recovery reads zeros as
    /// the end of the log.
    fn preallocate(&mut self, end: u64) -> io::Result<()> {
        let target = end
            .div_ceil(PREALLOC_STEP)
            .saturating_add(1)
            .saturating_mul(PREALLOC_STEP);
        self.file.seek(SeekFrom::Start(self.allocated))?;
        let zeros = vec![0u8; 256 << 10];
        let mut at = self.allocated;
        while at < target {
            let n = zeros.len().min((target - at) as usize);
            self.file.write_all(&zeros[..n])?;
            at += n as u64;
        }
        if self.fsync {
            self.file.sync_data()?;
        }
        self.allocated = target;
        self.file.seek(SeekFrom::Start(self.pos))?;
        Ok(())
    }

    /// Cuts the preallocated space off (on close), so a closed log ends
    /// with its last record.
    fn trim(&mut self) {
        if self.allocated > self.pos && !self.failed.load(Ordering::Acquire) {
            let res = self
                .file
                .set_len(self.pos)
                .and_then(|()| self.file.sync_all());
            if let Err(e) = res {
                tracing::warn!(error = %e, "could not trim the log's preallocated tail");
            }
            self.allocated = self.pos;
        }
    }

    /// After a failed write the log's tail is unknown and the in-memory
    /// state is ahead of it: refuse every later write and end the watches.
    fn fail(&mut self, e: &io::Error) {
        tracing::error!(error = %e, "write-ahead log failed; the store refuses writes until reopened");
        self.failed.store(true, Ordering::Release);
        self.hub.close();
    }

    /// Replaces the log with a snapshot of `snapshot` at `revision`.
    fn rewrite(&mut self, snapshot: Vec<KeyValue>, revision: Revision) -> Result<(), StoreError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(failed_error());
        }
        if self.appended == 0 {
            return Ok(()); // Already a snapshot with nothing after it.
        }
        let next = self.seq + 1;
        let tmp = tmp_path(&self.dir, next);
        let written = (|| -> io::Result<File> {
            let mut file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)?;
            let mut out = BufWriter::with_capacity(1 << 20, &mut file);
            out.write_all(MAGIC)?;
            let mut buf = Vec::with_capacity(64 << 10);
            encode(&mut buf, OP_SNAPSHOT, revision, 0, 0, "", &[]);
            for kv in &snapshot {
                encode(
                    &mut buf,
                    OP_SNAPSHOT_PUT,
                    kv.mod_revision,
                    kv.create_revision,
                    kv.version,
                    &kv.key,
                    &kv.value,
                );
                if buf.len() >= 64 << 10 {
                    out.write_all(&buf)?;
                    buf.clear();
                }
            }
            out.write_all(&buf)?;
            out.flush()?;
            drop(out);
            // Always synced, even without fsync for writes: the old log is
            // deleted once this one is in place.
            file.sync_all()?;
            Ok(file)
        })();
        let file = match written {
            Ok(file) => file,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                tracing::warn!(error = %e, "log compaction failed; keeping the old log");
                return Err(e.into());
            }
        };
        let old = log_path(&self.dir, self.seq);
        let new = log_path(&self.dir, next);
        if let Err(e) = fs::rename(&tmp, &new) {
            let _ = fs::remove_file(&tmp);
            return Err(e.into());
        }
        // From here on the new log is (or may be, after a crash) the one
        // recovery uses, so it must receive every later record.
        let len = file.metadata().map(|m| m.len());
        self.file = file;
        self.seq = next;
        self.appended = 0;
        match len {
            Ok(len) => {
                self.pos = len;
                self.allocated = len;
            }
            Err(e) => {
                self.fail(&e);
                return Err(e.into());
            }
        }
        if let Err(e) = sync_dir(&self.dir) {
            self.fail(&e);
            return Err(e.into());
        }
        if let Err(e) = fs::remove_file(&old) {
            tracing::warn!(error = %e, log = %old.display(), "could not remove the superseded log");
        }
        tracing::debug!(revision, keys = snapshot.len(), log = %new.display(), "log rewritten as a snapshot");
        Ok(())
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
        Command::Write { done, .. } | Command::Compact { done, .. } => {
            let _ = done.send(Err(StoreError::Closed));
        }
        Command::Close { done } => {
            let _ = done.send(());
        }
    }
}
