//! What one container-node cluster owns on this machine, and how a dead
//! run's leftovers are found and removed — as the kubelet and containerd
//! recover from a crash, by their own record and by labels.
//!
//! Every machine-wide name a cluster uses carries its [`ClusterId`], eight
//! hex digits derived from its data directory: bridges `kf<id>-<i>`,
//! nftables tables `kubeforge-<id>-egress` and `kubeforge-<id>-proxy`, the
//! cgroup parent `/kubeforge-<id>`. Everything else (containerd's root,
//! state and socket, the registry's storage, pod volumes, netns mounts)
//! lives under the data directory. So two clusters with different data
//! directories never share a name, and one cluster's leftovers are told
//! apart from another's.
//!
//! While containers run, the data directory holds:
//!
//! ```text
//! kubeforge.lock    held (flock) by the live process; its pid inside
//! footprint.json    the Record: id, pid, bridges, tables, cgroup parent
//! ```
//!
//! and `/run/kubeforge/clusters/<id>` names the data directory, so that
//! `kubeforge clean --all` finds every cluster on the machine. A lock that
//! nobody holds means a dead run: [`clean`] then kills what it left
//! running (processes of its containerd, shims and registry, found by the
//! data directory in their command lines; containers, found in its cgroups),
//! unmounts what is mounted under the data directory, deletes its links,
//! tables and cgroups, and restores IPv4 forwarding when no other cluster
//! needs it. A live run is never touched.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::error::NodeError;

/// Where machine-wide records live (tmpfs: gone with a reboot, as every
/// process, link and table they describe is).
pub const RUN_DIR: &str = "/run/kubeforge";

/// The file a live run keeps locked in its data directory.
pub const LOCK_FILE: &str = "kubeforge.lock";

/// The record of what a run started, in its data directory.
pub const RECORD_FILE: &str = "footprint.json";

/// The programs a run starts that outlive it when it is killed: only
/// these are ended by their command line naming the data directory.
const OWN_PROGRAMS: [&str; 5] = [
    "containerd",
    "containerd-shim-runc-v2",
    "containerd-shim",
    "docker-registry",
    "kubeforge",
];

/// A container-node cluster's id on this machine: eight lowercase hex
/// digits (FNV-1a of its data directory's canonical path).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClusterId(String);

impl TryFrom<String> for ClusterId {
    type Error = String;
    fn try_from(s: String) -> Result<ClusterId, String> {
        ClusterId::parse(&s).ok_or_else(|| format!("{s:?} is not a cluster id"))
    }
}

impl From<ClusterId> for String {
    fn from(id: ClusterId) -> String {
        id.0
    }
}

impl std::fmt::Display for ClusterId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ClusterId {
    /// The id of the cluster whose data directory is `dir` (resolved to
    /// its canonical path when it exists, else made absolute).
    pub fn of(dir: &Path) -> ClusterId {
        let path = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .unwrap_or_else(|_| dir.to_path_buf());
        let mut h: u32 = 0x811c_9dc5;
        for b in path.as_os_str().as_encoded_bytes() {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
        ClusterId(format!("{h:08x}"))
    }

    /// `s` when it is an id (eight lowercase hex digits).
    pub fn parse(s: &str) -> Option<ClusterId> {
        (s.len() == 8
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| ClusterId(s.to_string()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The prefix of its links' names (`kf<id>-`): a bridge is this and
    /// the node's index, at most 15 bytes for up to 9999 nodes.
    pub fn link_prefix(&self) -> String {
        format!("kf{}-", self.0)
    }

    /// The prefix of its nftables tables' names.
    pub fn table_prefix(&self) -> String {
        format!("kubeforge-{}-", self.0)
    }

    /// Its egress guard's table (family `inet`).
    pub fn guard_table(&self) -> String {
        format!("{}egress", self.table_prefix())
    }

    /// Its Service proxy's table (family `ip`).
    pub fn proxy_table(&self) -> String {
        format!("{}proxy", self.table_prefix())
    }

    /// The cgroup its nodes' pods go under.
    pub fn cgroup_parent(&self) -> String {
        format!("/kubeforge-{}", self.0)
    }

    /// The id in a name made by one of the methods above, if any.
    fn in_name(name: &str) -> Option<ClusterId> {
        let rest = name
            .strip_prefix("kubeforge-")
            .or_else(|| name.strip_prefix("kf"))?;
        let id = ClusterId::parse(rest.get(..8)?)?;
        matches!(rest.as_bytes().get(8), Some(b'-') | None).then_some(id)
    }
}

/// What a run started that lives outside its data directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The cluster's id.
    pub id: Option<ClusterId>,
    /// The data directory (absolute).
    pub data_dir: PathBuf,
    /// The process that started it.
    pub pid: u32,
    /// Its bridges.
    pub links: Vec<String>,
    /// Its nftables tables: (family, name).
    pub tables: Vec<(String, String)>,
    /// Its cgroup parent.
    pub cgroup_parent: String,
    /// Its image registry's `127.0.0.1:PORT` while it runs.
    #[serde(default)]
    pub registry: Option<String>,
}

impl Record {
    /// Read the record in `dir`, if there is one.
    pub fn read(dir: &Path) -> Option<Record> {
        let text = std::fs::read(dir.join(RECORD_FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// Write it into its data directory and name the directory in the
    /// machine's index.
    pub fn write(&self) -> Result<(), NodeError> {
        let path = self.data_dir.join(RECORD_FILE);
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| NodeError::io(format!("writing {}", path.display()), e))?;
        if let Some(id) = &self.id {
            let index = index_dir();
            std::fs::create_dir_all(&index)
                .and_then(|()| {
                    std::fs::write(
                        index.join(id.as_str()),
                        self.data_dir.as_os_str().as_encoded_bytes(),
                    )
                })
                .map_err(|e| NodeError::io(format!("writing {}", index.display()), e))?;
        }
        Ok(())
    }

    /// Forget it: the record and the index entry.
    fn remove(&self) {
        let _ = std::fs::remove_file(self.data_dir.join(RECORD_FILE));
        if let Some(id) = &self.id {
            forget_index(id, &self.data_dir);
        }
    }
}

/// The machine's index of clusters: a file per id naming its data
/// directory.
fn index_dir() -> PathBuf {
    Path::new(RUN_DIR).join("clusters")
}

/// Remove `id`'s index entry if it still names `dir`.
fn forget_index(id: &ClusterId, dir: &Path) {
    let entry = index_dir().join(id.as_str());
    if std::fs::read(&entry).is_ok_and(|d| d == dir.as_os_str().as_encoded_bytes()) {
        let _ = std::fs::remove_file(entry);
    }
}

/// The lock a live run holds on its data directory.
#[derive(Debug)]
pub struct DirLock {
    dir: PathBuf,
    _lock: Flock<File>,
}

impl DirLock {
    /// Take `dir`'s lock (creating the directory), recording this
    /// process's id in it; [`NodeError::InUse`] naming the holder when a
    /// live process has it.
    pub fn acquire(dir: &Path) -> Result<DirLock, NodeError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| NodeError::io(format!("creating {}", dir.display()), e))?;
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| NodeError::io(format!("opening {}", path.display()), e))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(NodeError::InUse {
                    dir: dir.to_path_buf(),
                    pid: pid.trim().to_string(),
                });
            }
            Err((_, e)) => {
                return Err(NodeError::io(
                    format!("locking {}", path.display()),
                    std::io::Error::from(e),
                ));
            }
        };
        let _ = lock.set_len(0);
        let _ = lock.rewind();
        let _ = write!(lock, "{}", std::process::id());
        let dir = std::fs::canonicalize(dir)
            .map_err(|e| NodeError::io(format!("resolving {}", dir.display()), e))?;
        Ok(DirLock { dir, _lock: lock })
    }

    /// The locked directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pid recorded by the live process holding `dir`, if one does.
    pub fn holder(dir: &Path) -> Option<String> {
        if !dir.join(LOCK_FILE).exists() {
            return None;
        }
        match DirLock::acquire(dir) {
            Err(NodeError::InUse { pid, .. }) => Some(pid),
            _ => None,
        }
    }
}

/// What a clean found and did.
#[derive(Debug, Default)]
pub struct CleanReport {
    /// What was removed, one line each.
    pub removed: Vec<String>,
    /// What could not be removed, and why.
    pub failed: Vec<(String, String)>,
}

impl CleanReport {
    /// Whether there was nothing to do.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.failed.is_empty()
    }
}

/// Remove what a dead run in `dir` left on this machine. A live run's
/// directory is refused with [`NodeError::InUse`] and nothing is touched.
pub fn clean(dir: &Path) -> Result<CleanReport, NodeError> {
    let dir = std::fs::canonicalize(dir)
        .or_else(|_| std::path::absolute(dir))
        .map_err(|e| NodeError::io(format!("resolving {}", dir.display()), e))?;
    if !dir.is_dir() {
        return Ok(clean_dead(&ClusterId::of(&dir), &dir, None));
    }
    // Held for the clean: an `up` started meanwhile waits its turn.
    let _lock = DirLock::acquire(&dir)?;
    let record = Record::read(&dir);
    let id = record
        .as_ref()
        .and_then(|r| r.id.clone())
        .unwrap_or_else(|| ClusterId::of(&dir));
    Ok(clean_dead(&id, &dir, record.as_ref()))
}

/// One cluster `clean --all` looked at.
#[derive(Debug)]
pub struct Found {
    /// Its id.
    pub id: ClusterId,
    /// Its data directory, when the index names it.
    pub dir: Option<PathBuf>,
    /// The live process's pid when it is live (then nothing was done), or
    /// what the clean did.
    pub outcome: Result<CleanReport, String>,
}

/// Clean every dead cluster on this machine: those the index names, and
/// any id found only in links, tables or cgroups (a run whose index entry
/// is gone). Live ones are listed and left alone.
pub fn clean_all() -> Vec<Found> {
    let mut ids: std::collections::BTreeMap<ClusterId, Option<PathBuf>> = Default::default();
    for e in std::fs::read_dir(index_dir())
        .into_iter()
        .flatten()
        .flatten()
    {
        let Some(id) = e.file_name().to_str().and_then(ClusterId::parse) else {
            continue;
        };
        let dir = std::fs::read(e.path())
            .ok()
            .map(|b| PathBuf::from(String::from_utf8_lossy(&b).into_owned()));
        ids.insert(id, dir);
    }
    let labelled = links()
        .into_iter()
        .chain(tables().into_iter().map(|(_, t)| t))
        .chain(cgroup_top_names())
        .filter_map(|n| ClusterId::in_name(&n));
    for id in labelled {
        ids.entry(id).or_insert(None);
    }
    ids.into_iter()
        .map(|(id, dir)| {
            let outcome = match &dir {
                Some(d) if d.is_dir() => match clean(d) {
                    Err(NodeError::InUse { pid, .. }) => Err(format!("live (pid {pid})")),
                    Err(e) => Err(e.to_string()),
                    Ok(r) => Ok(r),
                },
                Some(d) => Ok(clean_dead(&id, d, None)),
                None => Ok(clean_dead(&id, Path::new(""), None)),
            };
            Found { id, dir, outcome }
        })
        .collect()
}

/// Remove everything of cluster `id` (data directory `dir`, or none when
/// empty), whose run is known to be dead, guided by `record` when there is
/// one and by labels always. Also what a live run calls once it stopped
/// its parts in order, to catch what they left.
pub fn clean_dead(id: &ClusterId, dir: &Path, record: Option<&Record>) -> CleanReport {
    let mut report = CleanReport::default();
    let cgroup = record
        .map(|r| r.cgroup_parent.clone())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| id.cgroup_parent());
    kill_leftovers(dir, &cgroup, &mut report);
    if !dir.as_os_str().is_empty() {
        let mounts = crate::host::mounts_under(dir);
        for m in &mounts {
            match nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH) {
                Ok(()) => {}
                Err(e) => report
                    .failed
                    .push((format!("mount {}", m.display()), e.to_string())),
            }
        }
        if !mounts.is_empty() {
            report.removed.push(format!("{} mounts", mounts.len()));
        }
        // Addresses the dead run's pods held stay reserved in the IPAM
        // store otherwise; the next start allocates afresh.
        for e in std::fs::read_dir(dir.join("containerd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = std::fs::remove_dir_all(e.path().join("ipam"));
        }
    }
    let prefix = id.link_prefix();
    for link in links().into_iter().filter(|l| l.starts_with(&prefix)) {
        match crate::network::ip(&["link", "delete", &link]) {
            Ok(()) => report.removed.push(format!("link {link}")),
            Err(e) => report.failed.push((format!("link {link}"), e.to_string())),
        }
    }
    let prefix = id.table_prefix();
    for (family, table) in tables().into_iter().filter(|(_, t)| t.starts_with(&prefix)) {
        match crate::network::nft(&["delete", "table", &family, &table], None) {
            Ok(()) => report.removed.push(format!("nft table {family} {table}")),
            Err(e) => report
                .failed
                .push((format!("nft table {family} {table}"), e.to_string())),
        }
    }
    if cgroup_exists(&cgroup) {
        if crate::host::remove_cgroup(&cgroup) == 0 {
            report.removed.push(format!("cgroup {cgroup}"));
        } else {
            report.failed.push((
                format!("cgroup {cgroup}"),
                "still holds processes".to_string(),
            ));
        }
    }
    if !other_clusters_route() {
        restore_forwarding();
    }
    if let Some(r) = record {
        if report.failed.is_empty() {
            r.remove();
        }
    } else if report.failed.is_empty() && !dir.as_os_str().is_empty() {
        forget_index(id, dir);
    }
    report
}

/// Where the first cluster to start notes whether IPv4 forwarding was on
/// before (`0` or `1`), for the last one to stop.
fn forwarding_note() -> PathBuf {
    Path::new(RUN_DIR).join("ip_forward_before")
}

/// Note IPv4 forwarding's state unless a cluster already routes (then
/// the note of the first one stands).
pub fn note_forwarding() {
    if other_clusters_route() || forwarding_note().exists() {
        return;
    }
    let on = crate::network::forwarding_is_on();
    let _ = std::fs::create_dir_all(RUN_DIR);
    let _ = std::fs::write(forwarding_note(), if on { "1" } else { "0" });
}

/// Put IPv4 forwarding back as the note says, once no cluster routes.
fn restore_forwarding() {
    let note = forwarding_note();
    if let Ok(before) = std::fs::read_to_string(&note) {
        if before.trim() == "0" {
            let _ = std::fs::write(crate::network::IP_FORWARD, "0");
        }
        let _ = std::fs::remove_file(note);
    }
}

/// Whether any cluster's egress guard is installed (it routes between its
/// bridges, so forwarding stays on).
pub fn other_clusters_route() -> bool {
    tables()
        .iter()
        .any(|(_, t)| t.starts_with("kubeforge-") && t.ends_with("-egress"))
}

/// End the processes a dead run left: those in its cgroups (containers)
/// and its own programs naming `dir`; waits up to 5 s for them to go.
fn kill_leftovers(dir: &Path, cgroup: &str, report: &mut CleanReport) {
    let find = || {
        let mut pids = cgroup_pids(cgroup);
        if !dir.as_os_str().is_empty() {
            pids.extend(own_programs_naming(dir));
        }
        pids.sort_unstable();
        pids.dedup();
        pids
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut killed = std::collections::BTreeSet::new();
    loop {
        let left = find();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for pid in left {
                report.failed.push((
                    format!("process {pid} ({})", program_name(pid)),
                    "did not end after SIGKILL".to_string(),
                ));
            }
            break;
        }
        for pid in left {
            if killed.insert(pid) {
                report
                    .removed
                    .push(format!("process {pid} ({})", program_name(pid)));
            }
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A process's program name (its `comm`).
fn program_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The processes (but this one) running one of the programs a run starts
/// (by argv\[0\]'s file name, which a zombie no longer has) with an
/// argument that is `dir` or a path under it.
fn own_programs_naming(dir: &Path) -> Vec<i32> {
    let exact = dir.as_os_str().as_encoded_bytes().to_vec();
    let mut under = exact.clone();
    under.push(b'/');
    crate::host::processes_where(|cmdline| {
        let mut args = cmdline.split(|&b| b == 0);
        let argv0 = args.next().unwrap_or_default();
        let name = argv0.rsplit(|&b| b == b'/').next().unwrap_or_default();
        OWN_PROGRAMS.iter().any(|p| p.as_bytes() == name)
            && args.any(|a| a == exact || a.windows(under.len()).any(|w| w == under))
    })
}

/// The live processes in cgroup `path` and below, in every hierarchy.
fn cgroup_pids(path: &str) -> Vec<i32> {
    fn walk(dir: &Path, out: &mut Vec<i32>) {
        if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    for root in crate::host::cgroup_roots() {
        walk(&root.join(path.trim_start_matches('/')), &mut out);
    }
    out
}

/// Whether cgroup `path` exists in any hierarchy.
fn cgroup_exists(path: &str) -> bool {
    crate::host::cgroup_roots()
        .iter()
        .any(|r| r.join(path.trim_start_matches('/')).is_dir())
}

/// The names of the top-level cgroups, in every hierarchy.
fn cgroup_top_names() -> Vec<String> {
    crate::host::cgroup_roots()
        .iter()
        .flat_map(|r| std::fs::read_dir(r).into_iter().flatten().flatten())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect()
}

/// The names of this network namespace's links.
pub fn links() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect()
}

/// The nftables tables: (family, name); none when nft is missing.
pub fn tables() -> Vec<(String, String)> {
    let Ok(out) = crate::network::nft_output(&["list", "tables"]) else {
        return Vec::new();
    };
    out.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "table").then_some(())?;
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_id_and_fit_the_kernels_limits() {
        let id = ClusterId::of(Path::new("/nonexistent/a"));
        assert_eq!(id.as_str().len(), 8);
        assert_ne!(id, ClusterId::of(Path::new("/nonexistent/b")));
        assert_eq!(id, ClusterId::of(Path::new("/nonexistent/a")));
        let bridge = format!("{}{}", id.link_prefix(), 9999);
        assert!(bridge.len() <= 15, "{bridge}");
        for name in [
            bridge,
            id.guard_table(),
            id.proxy_table(),
            id.cgroup_parent(),
        ] {
            let name = name.trim_start_matches('/');
            assert_eq!(ClusterId::in_name(name), Some(id.clone()), "{name}");
        }
        assert_eq!(ClusterId::in_name("kubeforge-egress"), None);
        assert_eq!(ClusterId::in_name("kf-br0"), None);
        assert_eq!(ClusterId::in_name("kubeforge"), None);
        assert_eq!(ClusterId::parse("0123456G"), None);
    }

    #[test]
    fn a_held_directory_names_its_holder_and_a_released_one_is_free() {
        let dir = std::env::temp_dir().join(format!("kf-footprint-{}", std::process::id()));
        let lock = DirLock::acquire(&dir).unwrap();
        let err = DirLock::acquire(&dir).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        assert_eq!(DirLock::holder(&dir), Some(std::process::id().to_string()));
        drop(lock);
        assert_eq!(DirLock::holder(&dir), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            id: Some(ClusterId::of(Path::new("/x"))),
            data_dir: "/x".into(),
            pid: 7,
            links: vec!["kfabc-0".into()],
            tables: vec![("inet".into(), "kubeforge-x-egress".into())],
            cgroup_parent: "/kubeforge-x".into(),
            registry: Some("127.0.0.1:5000".into()),
        };
        let back: Record = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
