//! What the node needs from this machine: root, installed programs, free
//! loopback ports, and cleaning up the mounts a runtime left under a
//! directory.

use std::path::{Path, PathBuf};

use crate::error::NodeError;

/// The Debian packages that provide the programs container nodes run.
pub const PACKAGES: &str = "containerd runc containernetworking-plugins docker-registry";

/// Whether this process runs as root.
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The path of `program` on `PATH` (or in /usr/sbin, /sbin, where Debian
/// puts runc), or a [`NodeError::Missing`] naming the package to install.
pub fn find_program(program: &str, package: &str) -> Result<PathBuf, NodeError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| NodeError::Missing {
            program: program.to_string(),
            hint: format!(
                "install it with `apt-get install {package}` (container nodes need {PACKAGES})"
            ),
        })
}

/// Check that this machine can run container nodes: root, containerd,
/// runc and the reference CNI plugins.
pub fn check_container_host(cni_bin_dir: &Path) -> Result<(), NodeError> {
    if !is_root() {
        return Err(NodeError::NotRoot);
    }
    find_program("containerd", "containerd")?;
    find_program("runc", "runc")?;
    for plugin in ["loopback", "bridge", "host-local"] {
        if !cni_bin_dir.join(plugin).is_file() {
            return Err(NodeError::Missing {
                program: format!("the CNI plugin {}", cni_bin_dir.join(plugin).display()),
                hint: "install it with `apt-get install containernetworking-plugins`".into(),
            });
        }
    }
    Ok(())
}

/// A free TCP port on 127.0.0.1 (bound and released: the caller binds it
/// again at once).
pub fn free_loopback_port() -> Result<u16, NodeError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| NodeError::io("finding a free loopback port", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| NodeError::io("finding a free loopback port", e))
}

/// Mount points at or under `dir`, deepest first (from
/// /proc/self/mountinfo; octal escapes decoded).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_mount_path(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

/// Undo mountinfo's `\040`-style escapes.
fn unescape_mount_path(p: &str) -> String {
    let bytes = p.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmount (lazily) everything mounted at or under `dir`; returns how many
/// mounts there were.
pub fn unmount_all(dir: &Path) -> usize {
    let mounts = mounts_under(dir);
    for m in &mounts {
        if let Err(e) = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(mount = %m.display(), error = %e, "cannot unmount");
        }
    }
    mounts.len()
}

/// The processes whose command line mentions `needle` (a containerd's
/// socket path names its shims), from /proc.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    processes_where(|cmdline| {
        cmdline.split(|&b| b == 0).any(|arg| {
            arg == needle.as_bytes() || arg.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
    })
}

/// The processes but this one whose command line (NUL-separated, from
/// /proc) satisfies `keep`.
pub fn processes_where(keep: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| keep(&c)))
        .collect()
}

/// The cgroup hierarchies mounted under /sys/fs/cgroup (v1 controllers,
/// the v2 `unified` one, or the v2 root itself).
pub(crate) fn cgroup_roots() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect()
}

/// Remove the cgroup `path` (`/kubeforge/n1/kubepods/pod<uid>`) and every
/// empty cgroup below it, in each hierarchy; cgroups still holding
/// processes stay (and are reported by the returned count).
pub fn remove_cgroup(path: &str) -> usize {
    fn remove_tree(dir: &Path) -> bool {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() && !p.is_symlink() {
                    remove_tree(&p);
                }
            }
        }
        std::fs::remove_dir(dir).is_ok() || !dir.exists()
    }
    let rel = path.trim_start_matches('/');
    let mut left = 0;
    for root in cgroup_roots() {
        let dir = root.join(rel);
        if dir.exists() && !remove_tree(&dir) {
            left += 1;
        }
    }
    left
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path(r"/end\"), r"/end\");
    }
}
