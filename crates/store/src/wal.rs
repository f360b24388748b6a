//! The durable backend's on-disk layout and recovery.
//!
//! A store directory holds `LOCK` (held with an advisory lock while a store
//! has it open) and one live log file `wal-<seq>.log` of records (see
//! [`crate::record`]), written by [`crate::writer`]. Log 1 is created in
//! place; every later log is written by a compaction as
//! `wal-<seq>.log.tmp`, synced, renamed into place and the directory synced,
//! so a log numbered above 1 is complete from its first byte: it starts with
//! a snapshot header whose `version` field counts the snapshot entries that
//! follow it.
//!
//! Recovery replays the highest-numbered log and only once it has checked
//! out removes the others and any `.tmp`. A bad record (checksum, length, or
//! the file ends inside it) is a torn tail — the remains of a write that was
//! never acknowledged — only when no intact record follows it: the rest of
//! the file is zeros (preallocated space) or debris of that write. The log
//! is then cut back to the bad record. Anything else is corruption, and
//! opening fails with [`StoreError::Corrupt`] naming the file and offset,
//! as etcd's WAL does with `ErrCRCMismatch`: a bad record with intact ones
//! after it, a bad snapshot header or entry, a log above 1 shorter than its
//! magic. Acknowledged data is never truncated.

use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::record::{
    FRAME_HEADER, MAGIC, Next, OP_DELETE, OP_PUT, OP_SNAPSHOT, OP_SNAPSHOT_PUT, Record,
    intact_record_at, read_record,
};
use crate::state::State;
use crate::vfs::{Reader, Vfs, VfsFile, read_full_at, write_all_at};
use crate::{KeyValue, StoreError};

pub(crate) fn log_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log"))
}

pub(crate) fn tmp_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log.tmp"))
}

/// A [`StoreError::Corrupt`] naming the file and offset.
fn corrupt(path: &Path, offset: u64, what: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("{} at byte {offset}: {what}", path.display()))
}

/// Applies one replayed record to `state`; `index` = its position in the
/// log (0 = first record); `in_snapshot` = whether that position is inside
/// the log's counted snapshot (None: not known, a log written before the
/// header counted its entries).
fn apply(
    state: &mut State,
    rec: Record,
    index: u64,
    in_snapshot: Option<bool>,
) -> Result<(), String> {
    match rec.op {
        OP_PUT | OP_DELETE if in_snapshot == Some(true) => {
            Err("a log record inside the snapshot".into())
        }
        OP_SNAPSHOT_PUT if in_snapshot == Some(false) => {
            Err("a snapshot entry outside the snapshot".into())
        }
        OP_PUT | OP_DELETE if rec.revision <= state.revision() => Err(format!(
            "revision {} does not follow {}",
            rec.revision,
            state.revision()
        )),
        OP_PUT | OP_SNAPSHOT_PUT => {
            if rec.op == OP_SNAPSHOT_PUT && rec.revision > state.revision() {
                return Err("snapshot entry newer than its snapshot".into());
            }
            if rec.version == 0 || rec.create_revision == 0 || rec.create_revision > rec.revision {
                return Err("inconsistent key revisions".into());
            }
            state.replay_put(KeyValue {
                key: Arc::from(rec.key),
                value: rec.value,
                create_revision: rec.create_revision,
                mod_revision: rec.revision,
                version: rec.version,
            });
            Ok(())
        }
        OP_DELETE => {
            if state.replay_delete(&rec.key, rec.revision) {
                Ok(())
            } else {
                Err(format!("delete of absent key {}", rec.key))
            }
        }
        OP_SNAPSHOT => {
            if index != 0 {
                return Err("snapshot header in the middle of a log".into());
            }
            state.replay_revision(rec.revision);
            Ok(())
        }
        other => Err(format!("unknown record type {other}")),
    }
}

/// What [`recover`] found on disk, ready for [`crate::writer::spawn_writer`].
pub(crate) struct Recovered {
    /// The replayed state.
    pub(crate) state: State,
    /// The store directory.
    pub(crate) dir: PathBuf,
    /// Sequence number of the live log.
    pub(crate) seq: u64,
    /// The live log.
    pub(crate) file: Box<dyn VfsFile>,
    /// Length of the valid log; the file is cut back to it.
    pub(crate) len: u64,
    /// Whether the log is a snapshot with nothing after it.
    pub(crate) fresh: bool,
    /// The directory lock; dropping it unlocks the directory.
    pub(crate) lock: Box<dyn Send + Sync>,
}

/// Creates `dir` and any missing parents, syncing each new entry's parent.
fn create_dirs(vfs: &dyn Vfs, dir: &Path) -> io::Result<()> {
    if vfs.exists(dir)? {
        return Ok(());
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        create_dirs(vfs, parent)?;
    }
    match vfs.create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(e),
    }
    vfs.sync_dir(parent.unwrap_or(Path::new(".")))
}

/// Creates log 1 holding only the magic, durably (data and entry).
fn create_first_log(vfs: &dyn Vfs, dir: &Path) -> io::Result<Box<dyn VfsFile>> {
    let path = log_path(dir, 1);
    let mut file = match vfs.create(&path) {
        Ok(f) => f,
        // A short log 1 left by a crash while it was being created.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => vfs.open(&path)?,
        Err(e) => return Err(e),
    };
    file.set_len(0)?;
    write_all_at(&mut *file, MAGIC, 0)?;
    file.sync_data()?;
    vfs.sync_dir(dir)?;
    Ok(file)
}

/// Opens (creating if needed) the store directory, takes its lock, replays
/// the live log and cuts back a torn tail. Blocking: run it off the runtime.
pub(crate) fn recover(vfs: &dyn Vfs, dir: &Path) -> Result<Recovered, StoreError> {
    create_dirs(vfs, dir)?;
    // Also when the directory existed: an earlier open may have created it
    // and failed before its entry was durable.
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
    vfs.sync_dir(parent.unwrap_or(Path::new(".")))?;
    let lock = vfs.lock(dir)?;
    let mut logs = Vec::new();
    let mut tmps = Vec::new();
    for name in vfs.list(dir)? {
        if name.starts_with("wal-") && name.ends_with(".log.tmp") {
            tmps.push(dir.join(name));
        } else if let Some(seq) = name
            .strip_prefix("wal-")
            .and_then(|s| s.strip_suffix(".log"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            logs.push(seq);
        }
    }
    logs.sort_unstable();
    let (seq, file, state, len, fresh) = match logs.last() {
        None => {
            let file = create_first_log(vfs, dir)?;
            (1, file, State::default(), MAGIC.len() as u64, false)
        }
        Some(&seq) => {
            let path = log_path(dir, seq);
            let mut file = vfs.open(&path)?;
            let file_len = file.size()?;
            if file_len < MAGIC.len() as u64 {
                if seq != 1 || logs.len() > 1 {
                    return Err(corrupt(
                        &path,
                        file_len,
                        "the log is shorter than its header, yet it was renamed into place complete",
                    ));
                }
                // Only log 1 is created in place: a crash while writing its
                // magic leaves it short and empty of records.
                drop(file);
                let file = create_first_log(vfs, dir)?;
                (1, file, State::default(), MAGIC.len() as u64, false)
            } else {
                let (state, len, fresh) = replay(&mut *file, &path, seq, file_len)?;
                (seq, file, state, len, fresh)
            }
        }
    };
    // Only now that the newest log checked out: the others were superseded
    // by a completed compaction, a `.tmp` is an unfinished one.
    for &old in logs.iter().filter(|&&s| s != seq) {
        vfs.remove(&log_path(dir, old))?;
    }
    for tmp in tmps {
        vfs.remove(&tmp)?;
    }
    // Always: the live log's entry may not be durable yet if an earlier
    // open failed right after creating it.
    vfs.sync_dir(dir)?;
    Ok(Recovered {
        state,
        dir: dir.to_owned(),
        seq,
        file,
        len,
        fresh,
        lock,
    })
}

/// Replays the live log; returns the state, the valid length (the file is
/// cut back to it) and whether the log is a bare snapshot.
fn replay(
    file: &mut dyn VfsFile,
    path: &Path,
    seq: u64,
    file_len: u64,
) -> Result<(State, u64, bool), StoreError> {
    let mut reader = BufReader::with_capacity(
        1 << 20,
        Reader {
            file: &*file,
            pos: 0,
        },
    );
    let mut magic = [0u8; 8];
    reader.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(corrupt(path, 0, "not a kubeforge log (bad magic)"));
    }
    let mut state = State::default();
    let mut good = MAGIC.len() as u64;
    let mut payload = Vec::new();
    let mut index = 0u64;
    // Snapshot entries after the header (logs above 1 start with one):
    // its `version` field is 1 + their number (0 in logs written before it
    // counted them).
    let mut snapshot_len: Option<u64> = None;
    let mut bad = None;
    loop {
        match read_record(&mut reader, &mut payload) {
            Ok(Next::Record(rec)) => {
                if index == 0 && seq > 1 && rec.op != OP_SNAPSHOT {
                    return Err(corrupt(
                        path,
                        good,
                        "a compacted log without a snapshot header",
                    ));
                }
                if index == 0 && rec.op == OP_SNAPSHOT {
                    snapshot_len = rec.version.checked_sub(1);
                }
                let len = (FRAME_HEADER + payload.len()) as u64;
                let in_snapshot = snapshot_len.map(|n| index >= 1 && index <= n);
                apply(&mut state, rec, index, in_snapshot).map_err(|e| corrupt(path, good, e))?;
                good += len;
                index += 1;
            }
            Ok(Next::End) => break,
            Ok(Next::Bad(why)) => {
                bad = Some(why);
                break;
            }
            Err(StoreError::Corrupt(e)) => return Err(corrupt(path, good, e)),
            Err(e) => return Err(e),
        }
    }
    drop(reader);
    if bad.is_none() && seq > 1 && index == 0 {
        return Err(corrupt(
            path,
            good,
            "a compacted log without a snapshot header",
        ));
    }
    if let Some(n) = snapshot_len.filter(|&n| bad.is_none() && index <= n) {
        return Err(corrupt(
            path,
            good,
            format!(
                "the log ends after {} of its {n} snapshot entries",
                index - 1
            ),
        ));
    }
    let fresh = index > 0 && snapshot_len == Some(index - 1);
    if let Some(why) = bad {
        if seq > 1 && index == 0 {
            return Err(corrupt(path, good, format!("bad snapshot header ({why})")));
        }
        if snapshot_len.is_some_and(|n| index <= n) {
            return Err(corrupt(path, good, format!("bad snapshot entry ({why})")));
        }
        let tail = read_tail(file, good, file_len)?;
        if let Some(at) = intact_record_after(&tail) {
            return Err(corrupt(
                path,
                good,
                format!(
                    "{why}, yet an intact record follows at byte {}",
                    good + at as u64
                ),
            ));
        }
        if tail.iter().all(|&b| b == 0) {
            tracing::debug!(log = %path.display(), offset = good, "log ends in preallocated space");
        } else {
            tracing::warn!(
                log = %path.display(),
                offset = good,
                dropped_bytes = file_len - good,
                "{why}: cutting off the log's torn tail (a write that was never acknowledged)"
            );
        }
    }
    if good < file_len {
        file.set_len(good)?;
        file.sync_data()?;
    }
    tracing::debug!(log = %path.display(), records = index, revision = state.revision(), keys = state.len(), "replayed log");
    Ok((state, good, fresh))
}

/// The offset of the first intact record in `tail` after its first byte.
fn intact_record_after(tail: &[u8]) -> Option<usize> {
    let mut at = 1;
    while at < tail.len() {
        // A record's length is at least its fixed fields: one of its four
        // bytes is not zero, so zero runs (preallocated space) are skipped.
        let first = at + tail[at..].iter().position(|&b| b != 0)?;
        let from = first.saturating_sub(3).max(at);
        if let Some(found) = (from..=first).find(|&c| intact_record_at(tail, c)) {
            return Some(found);
        }
        at = first + 1;
    }
    None
}

/// The bytes of `file` from `offset` to `len`.
fn read_tail(file: &dyn VfsFile, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let n = usize::try_from(len - offset)
        .map_err(|_| io::Error::other("log tail does not fit in memory"))?;
    let mut buf = vec![0u8; n];
    let got = read_full_at(file, &mut buf, offset)?;
    buf.truncate(got);
    Ok(buf)
}
