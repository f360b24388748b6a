//! The durable backend's on-disk layout and recovery.
//!
//! A store directory holds `LOCK` (held with an advisory lock while a store
//! has it open) and one live log file `wal-<seq>.log` of records (see
//! [`crate::record`]), written by [`crate::writer`]. A compaction writes
//! `wal-<seq+1>.log.tmp` and renames it into place once it is complete and
//! synced, so recovery uses the highest-numbered log, removes the others
//! and any `.tmp`, replays it, and truncates a torn or corrupt tail (or the
//! zero-filled preallocated space after the last record).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::record::{
    FRAME_HEADER, MAGIC, Next, OP_DELETE, OP_PUT, OP_SNAPSHOT, OP_SNAPSHOT_PUT, Record, read_full,
    read_record,
};
use crate::state::State;
use crate::{KeyValue, StoreError};

pub(crate) fn log_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log"))
}

pub(crate) fn tmp_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("wal-{seq:020}.log.tmp"))
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Applies one replayed record to `state`.
fn apply(state: &mut State, rec: Record, offset: u64) -> Result<(), StoreError> {
    let corrupt = |what: &str| {
        Err(StoreError::Corrupt(format!(
            "record at byte {offset}: {what}"
        )))
    };
    match rec.op {
        OP_PUT | OP_DELETE if rec.revision <= state.revision() => corrupt(&format!(
            "revision {} does not follow {}",
            rec.revision,
            state.revision()
        )),
        OP_PUT | OP_SNAPSHOT_PUT => {
            if rec.op == OP_SNAPSHOT_PUT && rec.revision > state.revision() {
                return corrupt("snapshot entry newer than its snapshot");
            }
            if rec.version == 0 || rec.create_revision == 0 || rec.create_revision > rec.revision {
                return corrupt("inconsistent key revisions");
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
                corrupt(&format!("delete of absent key {}", rec.key))
            }
        }
        OP_SNAPSHOT => {
            if offset != MAGIC.len() as u64 {
                return corrupt("snapshot header in the middle of a log");
            }
            state.replay_revision(rec.revision);
            Ok(())
        }
        other => corrupt(&format!("unknown record type {other}")),
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
    /// The live log, positioned at its end.
    pub(crate) file: File,
    /// Length of the valid log; the file is truncated to it.
    pub(crate) len: u64,
    /// The locked `LOCK` file; dropping it unlocks the directory.
    pub(crate) lock: File,
}

/// Opens (creating if needed) the store directory, takes its lock, replays
/// the live log and truncates a torn tail. Blocking: run it off the runtime.
pub(crate) fn recover(dir: &Path) -> Result<Recovered, StoreError> {
    fs::create_dir_all(dir)?;
    let lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join("LOCK"))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(StoreError::Io(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is already open in another store", dir.display()),
            )));
        }
        Err(fs::TryLockError::Error(e)) => return Err(e.into()),
    }

    let mut logs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("wal-") && name.ends_with(".log.tmp") {
            // An unfinished compaction: the old log is still complete.
            fs::remove_file(entry.path())?;
        } else if let Some(seq) = name
            .strip_prefix("wal-")
            .and_then(|s| s.strip_suffix(".log"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            logs.push(seq);
        }
    }
    logs.sort_unstable();
    let Some(&seq) = logs.last() else {
        let path = log_path(dir, 1);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        file.write_all(MAGIC)?;
        file.sync_all()?;
        sync_dir(dir)?;
        let len = MAGIC.len() as u64;
        return Ok(Recovered {
            state: State::default(),
            dir: dir.to_owned(),
            seq: 1,
            file,
            len,
            lock,
        });
    };
    for &old in &logs[..logs.len() - 1] {
        // Superseded by a completed compaction.
        fs::remove_file(log_path(dir, old))?;
    }

    let path = log_path(dir, seq);
    let mut file = OpenOptions::new().read(true).write(true).open(&path)?;
    let file_len = file.metadata()?.len();
    let mut state = State::default();
    let mut good = MAGIC.len() as u64;
    if file_len < MAGIC.len() as u64 {
        // Only the very first log is ever created in place: a crash while
        // writing its magic leaves it short and empty of records.
        file.set_len(0)?;
        file.write_all(MAGIC)?;
        file.sync_all()?;
    } else {
        let mut reader = BufReader::with_capacity(1 << 20, &mut file);
        let mut magic = [0u8; 8];
        reader.read_exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(StoreError::Corrupt(format!(
                "{} is not a kubeforge log",
                path.display()
            )));
        }
        let mut payload = Vec::new();
        let mut records = 0u64;
        let mut torn = None;
        loop {
            match read_record(&mut reader, &mut payload)? {
                Next::Record(rec) => {
                    let len = (FRAME_HEADER + payload.len()) as u64;
                    apply(&mut state, rec, good)?;
                    good += len;
                    records += 1;
                }
                Next::End => break,
                Next::Torn(why) => {
                    torn = Some(why);
                    break;
                }
            }
        }
        drop(reader);
        if let Some(why) = torn {
            if zeros_from(&mut file, good)? {
                tracing::debug!(log = %path.display(), offset = good, "log ends in preallocated space");
            } else {
                tracing::warn!(
                    log = %path.display(),
                    offset = good,
                    dropped_bytes = file_len - good,
                    "{why}: truncating the log's tail"
                );
            }
        }
        if good < file_len {
            file.set_len(good)?;
            file.sync_all()?;
        }
        tracing::debug!(log = %path.display(), records, revision = state.revision(), keys = state.len(), "replayed log");
    }
    file.seek(SeekFrom::Start(good))?;
    Ok(Recovered {
        state,
        dir: dir.to_owned(),
        seq,
        file,
        len: good,
        lock,
    })
}

/// Whether `file` holds only zero bytes from `offset` to its end.
fn zeros_from(file: &mut File, offset: u64) -> io::Result<bool> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = read_full(file, &mut buf)?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        if n < buf.len() {
            return Ok(true);
        }
    }
}
