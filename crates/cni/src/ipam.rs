//! host-local IPAM, in-process: one file per allocated address in
//! `<dataDir>/<network>/` holding `containerID\r\nifname`, a
//! `last_reserved_ip.<rangeset>` file for round-robin, and a `lock` file
//! taken with `flock` around every change, so our plugin, concurrent copies
//! of it and the reference `host-local` can share one store.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::error::CniError;
use crate::ip::{self, IpPrefix};
use crate::netconf::{Attachment, Range};
use crate::result::IpConfig;

const LAST_RESERVED: &str = "last_reserved_ip.";
const LINE_BREAK: &str = "\r\n";

/// A network's allocation directory, locked while this value lives.
pub struct Store {
    dir: PathBuf,
    _lock: Flock<File>,
}

impl Store {
    /// Creates `dir` if needed and takes its lock (blocking until other holders finish).
    pub fn lock(dir: &Path) -> Result<Self, CniError> {
        fs::create_dir_all(dir)
            .map_err(|e| CniError::io(format!("creating IPAM directory {}", dir.display()), e))?;
        let path = dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| CniError::io(format!("opening {}", path.display()), e))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| {
            CniError::io(format!("locking {}", path.display()), errno.into())
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            _lock: lock,
        })
    }

    /// Every allocation: address and the file's content (container id, ifname).
    pub fn allocations(&self) -> Result<Vec<(IpAddr, String, String)>, CniError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CniError::io(format!("reading {}", self.dir.display()), e)),
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ip) = name.to_str().and_then(|n| n.parse::<IpAddr>().ok()) else {
                continue;
            };
            let Ok(content) = fs::read_to_string(entry.path()) else {
                continue;
            };
            let content = content.trim();
            let (id, ifname) = match content
                .split_once(LINE_BREAK)
                .or_else(|| content.split_once('\n'))
            {
                Some((id, ifname)) => (id.trim().to_string(), ifname.trim().to_string()),
                // Files written by old host-local versions hold only the id.
                None => (content.to_string(), String::new()),
            };
            out.push((ip, id, ifname));
        }
        out.sort();
        Ok(out)
    }

    fn owned_by(&self, id: &str, ifname: &str) -> Result<Vec<IpAddr>, CniError> {
        Ok(self
            .allocations()?
            .into_iter()
            .filter(|(_, i, f)| i == id.trim() && (f == ifname || f.is_empty()))
            .map(|(ip, _, _)| ip)
            .collect())
    }

    fn reserve(&self, ip: IpAddr, id: &str, ifname: &str, set: usize) -> Result<bool, CniError> {
        let path = self.dir.join(ip.to_string());
        let mut f = match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(CniError::io(format!("reserving {ip}"), e)),
        };
        if let Err(e) = f.write_all(format!("{}{LINE_BREAK}{ifname}", id.trim()).as_bytes()) {
            let _ = fs::remove_file(&path);
            return Err(CniError::io(format!("reserving {ip}"), e));
        }
        fs::write(
            self.dir.join(format!("{LAST_RESERVED}{set}")),
            ip.to_string(),
        )
        .map_err(|e| CniError::io("writing the last reserved address", e))?;
        Ok(true)
    }

    fn last_reserved(&self, set: usize) -> Option<IpAddr> {
        fs::read_to_string(self.dir.join(format!("{LAST_RESERVED}{set}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Allocates one address from each range set for `id`/`ifname`, round-robin after the last one handed out.
    ///
    /// Fails (code 101) when a set is exhausted or the attachment already holds an address in it;
    /// addresses taken before a failure are given back.
    pub fn allocate(
        &self,
        range_sets: &[Vec<Range>],
        id: &str,
        ifname: &str,
    ) -> Result<Vec<IpConfig>, CniError> {
        let owned = self.owned_by(id, ifname)?;
        let mut got: Vec<IpConfig> = Vec::new();
        let result = (|| {
            for (set_index, set) in range_sets.iter().enumerate() {
                if let Some(ip) = owned.iter().find(|ip| set.iter().any(|r| r.contains(**ip))) {
                    return Err(CniError::Allocation(format!(
                        "{ip} has been allocated to {id}, duplicate allocation is not allowed"
                    )));
                }
                let mut found = None;
                for (range, ip) in RangeIter::new(set, self.last_reserved(set_index)) {
                    if self.reserve(ip, id, ifname, set_index)? {
                        found = Some((range, ip));
                        break;
                    }
                }
                let Some((range, ip)) = found else {
                    return Err(CniError::Allocation(format!(
                        "no IP addresses available in range set: {}",
                        describe(set)
                    )));
                };
                got.push(IpConfig {
                    address: IpPrefix {
                        addr: ip,
                        prefix: range.subnet.prefix,
                    },
                    gateway: Some(range.gateway),
                    interface: None,
                });
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(got),
            Err(e) => {
                for c in &got {
                    let _ = fs::remove_file(self.dir.join(c.address.addr.to_string()));
                }
                Err(e)
            }
        }
    }

    /// Releases every address held by `id`/`ifname`; releasing nothing is fine (DEL is idempotent).
    pub fn release(&self, id: &str, ifname: &str) -> Result<(), CniError> {
        for ip in self.owned_by(id, ifname)? {
            match fs::remove_file(self.dir.join(ip.to_string())) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(CniError::io(format!("releasing {ip}"), e)),
            }
        }
        Ok(())
    }

    /// GC: releases every allocation whose attachment is not in `valid`; returns what was released.
    pub fn gc(&self, valid: &[Attachment]) -> Result<Vec<IpAddr>, CniError> {
        let mut released = Vec::new();
        for (ip, id, ifname) in self.allocations()? {
            let keep = valid
                .iter()
                .any(|a| a.container_id == id && (a.ifname == ifname || ifname.is_empty()));
            if !keep {
                fs::remove_file(self.dir.join(ip.to_string()))
                    .map_err(|e| CniError::io(format!("releasing {ip}"), e))?;
                released.push(ip);
            }
        }
        Ok(released)
    }

    /// CHECK: whether `ip` is allocated to `id`/`ifname`.
    pub fn holds(&self, ip: IpAddr, id: &str, ifname: &str) -> Result<bool, CniError> {
        Ok(self.owned_by(id, ifname)?.contains(&ip))
    }

    /// STATUS: the index of the first range set with no free address, if any.
    pub fn exhausted_set(&self, range_sets: &[Vec<Range>]) -> Result<Option<usize>, CniError> {
        let taken: Vec<IpAddr> = self
            .allocations()?
            .into_iter()
            .map(|(ip, _, _)| ip)
            .collect();
        for (i, set) in range_sets.iter().enumerate() {
            let free = RangeIter::new(set, None).any(|(_, ip)| !taken.contains(&ip));
            if !free {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}

fn describe(set: &[Range]) -> String {
    set.iter()
        .map(|r| format!("{}-{}", r.start, r.end))
        .collect::<Vec<_>>()
        .join(",")
}

/// host-local's iteration order: from the address after the last reserved one
/// (or the first range's start), through every range of the set once, skipping gateways.
struct RangeIter<'a> {
    set: &'a [Range],
    range: usize,
    cur: Option<IpAddr>,
    start: Option<IpAddr>,
    done: bool,
}

impl<'a> RangeIter<'a> {
    fn new(set: &'a [Range], last: Option<IpAddr>) -> Self {
        let mut it = Self {
            set,
            range: 0,
            cur: None,
            start: None,
            done: set.is_empty(),
        };
        if let Some(last) = last
            && let Some(i) = set.iter().position(|r| r.contains(last))
        {
            it.range = i;
            it.cur = Some(last);
        }
        it
    }
}

impl Iterator for RangeIter<'_> {
    type Item = (Range, IpAddr);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return None;
            }
            let r = self.set[self.range];
            let next = match self.cur {
                None => r.start,
                Some(cur) if cur == r.end => {
                    self.range = (self.range + 1) % self.set.len();
                    self.set[self.range].start
                }
                Some(cur) => ip::next(cur),
            };
            self.cur = Some(next);
            match self.start {
                None => self.start = Some(next),
                Some(s) if s == next => {
                    self.done = true;
                    return None;
                }
                Some(_) => {}
            }
            let r = self.set[self.range];
            if next != r.gateway {
                return Some((r, next));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::netconf::{parse_netconf, validate};

    fn ranges(json: &str) -> Vec<Vec<Range>> {
        let n = validate(
            parse_netconf(
                format!(r#"{{"name":"n","ipam":{{"type":"host-local",{json}}}}}"#).as_bytes(),
            )
            .unwrap(),
        )
        .unwrap();
        n.range_sets
    }

    #[test]
    fn allocates_round_robin_and_skips_the_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let sets = ranges(r#""subnet":"10.250.0.0/29""#);
        let s = Store::lock(dir.path()).unwrap();
        let a = s.allocate(&sets, "c1", "eth0").unwrap();
        assert_eq!(a[0].address.to_string(), "10.250.0.2/29");
        assert_eq!(a[0].gateway.unwrap().to_string(), "10.250.0.1");
        assert_eq!(
            fs::read_to_string(dir.path().join("10.250.0.2")).unwrap(),
            "c1\r\neth0"
        );
        assert_eq!(
            fs::read_to_string(dir.path().join("last_reserved_ip.0")).unwrap(),
            "10.250.0.2"
        );
        let b = s.allocate(&sets, "c2", "eth0").unwrap();
        assert_eq!(b[0].address.addr.to_string(), "10.250.0.3");
        s.release("c1", "eth0").unwrap();
        // Round-robin: the released .2 comes back only after the rest of the range.
        let c = s.allocate(&sets, "c3", "eth0").unwrap();
        assert_eq!(c[0].address.addr.to_string(), "10.250.0.4");
        // Duplicates are refused.
        assert_eq!(s.allocate(&sets, "c3", "eth0").unwrap_err().code(), 101);
        for id in ["c4", "c5", "c6"] {
            s.allocate(&sets, id, "eth0").unwrap();
        }
        // .2-.6 all taken (.7 is broadcast, .1 the gateway): exhausted.
        assert_eq!(s.exhausted_set(&sets).unwrap(), Some(0));
        assert_eq!(s.allocate(&sets, "c7", "eth0").unwrap_err().code(), 101);
        // Release is idempotent.
        s.release("c2", "eth0").unwrap();
        s.release("c2", "eth0").unwrap();
        assert_eq!(s.exhausted_set(&sets).unwrap(), None);
    }

    #[test]
    fn gc_keeps_only_valid_attachments() {
        let dir = tempfile::tempdir().unwrap();
        let sets =
            ranges(r#""ranges":[[{"subnet":"10.250.0.0/24"}],[{"subnet":"fd00:250::/64"}]]"#);
        let s = Store::lock(dir.path()).unwrap();
        for id in ["a", "b", "c"] {
            assert_eq!(s.allocate(&sets, id, "eth0").unwrap().len(), 2);
        }
        let valid = [Attachment {
            container_id: "b".into(),
            ifname: "eth0".into(),
        }];
        assert_eq!(s.gc(&valid).unwrap().len(), 4);
        let left: Vec<_> = s
            .allocations()
            .unwrap()
            .into_iter()
            .map(|(_, id, _)| id)
            .collect();
        assert_eq!(left, ["b", "b"]);
        assert!(s.holds("10.250.0.3".parse().unwrap(), "b", "eth0").unwrap());
    }

    #[test]
    fn iterates_every_range_once() {
        let sets = ranges(
            r#""ranges":[[{"subnet":"10.0.0.0/30"},{"subnet":"10.0.1.0/24","rangeStart":"10.0.1.5","rangeEnd":"10.0.1.6"}]]"#,
        );
        let all: Vec<String> = RangeIter::new(&sets[0], None)
            .map(|(_, ip)| ip.to_string())
            .collect();
        assert_eq!(all, ["10.0.0.2", "10.0.1.5", "10.0.1.6"]);
        let from: Vec<String> = RangeIter::new(&sets[0], Some("10.0.1.5".parse().unwrap()))
            .map(|(_, ip)| ip.to_string())
            .collect();
        assert_eq!(from, ["10.0.1.6", "10.0.0.2", "10.0.1.5"]);
    }

    #[test]
    fn concurrent_threads_never_share_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let sets = ranges(r#""subnet":"10.250.0.0/24""#);
        let got: Vec<IpAddr> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|t| {
                    let (dir, sets) = (dir.path(), &sets);
                    s.spawn(move || {
                        (0..20)
                            .map(|i| {
                                // Each allocation opens and locks the store, as separate processes do.
                                let store = Store::lock(dir).unwrap();
                                store.allocate(sets, &format!("c{t}-{i}"), "eth0").unwrap()[0]
                                    .address
                                    .addr
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 160);
    }
}
