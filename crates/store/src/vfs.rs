//! The file-system calls the durable backend makes, behind a trait.
//!
//! Production uses [`StdVfs`] (`std::fs`, positional reads and writes).
//! Tests put the store over a simulated disk instead (see
//! `tests/common/simfs.rs`): one that keeps only what was synced — file data
//! and directory entries — and can fail any call, so that recovery is
//! checked against every state a crash or an I/O error can leave behind.
//!
//! The backend relies on these rules, which are POSIX's (and what SQLite and
//! etcd assume): data written to a file is durable only once
//! [`VfsFile::sync_data`] returned; a created, renamed or removed directory
//! entry only once [`Vfs::sync_dir`] of its directory returned.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// A file system the store can live on. Paths are absolute or relative to
/// the process's working directory, as with `std::fs`.
pub trait Vfs: Send + Sync + fmt::Debug {
    /// Creates one directory; `AlreadyExists` if it exists, `NotFound` if
    /// its parent does not.
    fn create_dir(&self, dir: &Path) -> io::Result<()>;
    /// Whether `path` exists (file or directory).
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Names of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn VfsFile>>;
    /// Creates a new, empty file for reading and writing (`AlreadyExists`
    /// if it exists).
    fn create(&self, path: &Path) -> io::Result<Box<dyn VfsFile>>;
    /// Renames a file, replacing `to` if it exists.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Makes the entries of `dir` durable (fsync of the directory).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock on the store directory `dir`
    /// (`WouldBlock` if another holder has it), held until the returned
    /// guard is dropped.
    fn lock(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>>;
}

/// An open file of a [`Vfs`].
pub trait VfsFile: Send + Sync {
    /// Reads at `offset`; returns the bytes read (0 at or past the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Writes at `offset`; may write fewer bytes than given (a short write).
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Makes the file's data (and its length) durable (`fdatasync`).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Sets the file's length, cutting or zero-extending it.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// The file's length.
    fn size(&self) -> io::Result<u64>;
}

/// Writes all of `buf` at `offset`, continuing after short writes.
pub(crate) fn write_all_at(
    file: &mut dyn VfsFile,
    mut buf: &[u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, offset) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "write returned 0 bytes",
                ));
            }
            Ok(n) => {
                buf = &buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns
/// the bytes read.
pub(crate) fn read_full_at(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A sequential reader over a [`VfsFile`] from a given offset.
pub(crate) struct Reader<'a> {
    pub(crate) file: &'a dyn VfsFile,
    pub(crate) pos: u64,
}

impl io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The real file system (`std::fs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StdVfs;

struct StdFile(File);

impl VfsFile for StdFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.0.write_at(buf, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Vfs for StdVfs {
    fn create_dir(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir(dir)
    }
    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(StdFile(f)))
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn VfsFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(StdFile(f)))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, dir: &Path) -> io::Result<Box<dyn Send + Sync>> {
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("LOCK"))?;
        match lock.try_lock() {
            Ok(()) => Ok(Box::new(lock)),
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is already open in another store", dir.display()),
            )),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}
