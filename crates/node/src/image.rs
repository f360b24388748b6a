//! Images without the internet: OCI images built from this machine's own
//! programs (each binary with its shared-library closure, as `ldd` reports
//! it) and pushed to the local registry under the repository path a
//! runtime asks for, so unmodified names (`busybox:1.36`,
//! `docker.io/library/memcached:1.6`, `registry.k8s.io/pause:3.6`) resolve.
//!
//! An image is one uncompressed layer (files, directories and symlinks in
//! path order, owned by root, mtime 0: the same inputs give the same
//! digest) and an OCI image config.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::error::NodeError;
use crate::registry::RegistryClient;

/// An image name as a runtime resolves it: `busybox:1.36` is
/// `docker.io/library/busybox:1.36`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// `docker.io`, `registry.k8s.io`, `127.0.0.1:5000`.
    pub domain: String,
    /// The repository path (`library/busybox`).
    pub path: String,
    /// The tag (`latest` when none is given).
    pub tag: String,
    /// `sha256:…` when the name pins a digest.
    pub digest: Option<String>,
}

/// Why a name is not an image reference (the kubelet's `InvalidImageName`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid image name {name:?}: {reason}")]
pub struct InvalidImageName {
    /// The name.
    pub name: String,
    /// What is wrong.
    pub reason: &'static str,
}

fn path_component_ok(c: &str) -> bool {
    // distribution's grammar: [a-z0-9]+ joined by '.', '_', '__' or '-'+.
    let b = c.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_lowercase() | b[0].is_ascii_digit()
        && b[b.len() - 1].is_ascii_lowercase() | b[b.len() - 1].is_ascii_digit()
        && b.iter()
            .all(|&x| x.is_ascii_lowercase() || x.is_ascii_digit() || b"._-".contains(&x))
}

impl ImageRef {
    /// Parse `name` with Docker's normalisation.
    pub fn parse(name: &str) -> Result<ImageRef, InvalidImageName> {
        let bad = |reason| InvalidImageName {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() || name.len() > 255 + 128 {
            return Err(bad("must be 1 to 383 characters"));
        }
        let (rest, digest) = match name.split_once('@') {
            Some((r, d)) => {
                let hex = d
                    .strip_prefix("sha256:")
                    .ok_or_else(|| bad("only sha256 digests"))?;
                if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad("a sha256 digest is 64 hex digits"));
                }
                (r, Some(d.to_string()))
            }
            None => (name, None),
        };
        // A tag follows the last ':' after the last '/'.
        let slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (repo, tag) = match rest[slash..].rfind(':') {
            Some(i) => (&rest[..slash + i], &rest[slash + i + 1..]),
            None => (rest, "latest"),
        };
        if tag.is_empty()
            || tag.len() > 128
            || tag.starts_with(['.', '-'])
            || !tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(bad(
                "a tag is up to 128 of [A-Za-z0-9_.-], not starting with . or -",
            ));
        }
        let (domain, path) = match repo.split_once('/') {
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first != first.to_lowercase() =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => ("docker.io".to_string(), repo.to_string()),
        };
        let path = if domain == "docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if !path.split('/').all(path_component_ok) {
            return Err(bad(
                "a repository is lowercase letters, digits and separators",
            ));
        }
        Ok(ImageRef {
            domain,
            path,
            tag: tag.to_string(),
            digest,
        })
    }

    /// The fully qualified name (`docker.io/library/busybox:1.36`).
    pub fn full(&self) -> String {
        match &self.digest {
            Some(d) => format!("{}/{}@{d}", self.domain, self.path),
            None => format!("{}/{}:{}", self.domain, self.path, self.tag),
        }
    }
}

/// A file in an image: its content and mode.
#[derive(Clone, Debug)]
enum Entry {
    Dir(u32),
    File(Vec<u8>, u32),
    Link(String),
}

/// An image being assembled: one layer and its config.
#[derive(Clone, Debug)]
pub struct ImageBuilder {
    entries: BTreeMap<String, Entry>,
    config: Value,
}

impl Default for ImageBuilder {
    fn default() -> Self {
        ImageBuilder::new()
    }
}

impl ImageBuilder {
    /// An empty image with `/tmp`, `/etc/passwd` (root, nobody) and `PATH`.
    pub fn new() -> ImageBuilder {
        let mut b = ImageBuilder {
            entries: BTreeMap::new(),
            config: json!({
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            }),
        };
        b.dir("/tmp", 0o1777);
        b.users(&[("root", 0, "/root"), ("nobody", 65534, "/nonexistent")]);
        b.dir("/root", 0o700);
        b
    }

    fn dir(&mut self, path: &str, mode: u32) {
        self.parents(path);
        self.entries.insert(path.to_string(), Entry::Dir(mode));
    }

    fn parents(&mut self, path: &str) {
        let mut at = String::new();
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for p in &parts[..parts.len().saturating_sub(1)] {
            at.push('/');
            at.push_str(p);
            self.entries.entry(at.clone()).or_insert(Entry::Dir(0o755));
        }
    }

    /// Put `content` at `path` with `mode`.
    pub fn file(&mut self, path: &str, content: impl Into<Vec<u8>>, mode: u32) -> &mut Self {
        self.parents(path);
        self.entries
            .insert(path.to_string(), Entry::File(content.into(), mode));
        self
    }

    /// A symlink at `path` pointing at `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.parents(path);
        self.entries
            .insert(path.to_string(), Entry::Link(target.to_string()));
        self
    }

    /// `/etc/passwd` and `/etc/group` with these `(name, id, home)` users
    /// (each with a group of the same name and id).
    pub fn users(&mut self, users: &[(&str, u32, &str)]) -> &mut Self {
        let passwd: String = users
            .iter()
            .map(|(n, id, home)| format!("{n}:x:{id}:{id}:{n}:{home}:/bin/sh\n"))
            .collect();
        let group: String = users
            .iter()
            .map(|(n, id, _)| format!("{n}:x:{id}:\n"))
            .collect();
        self.file("/etc/passwd", passwd, 0o644);
        self.file("/etc/group", group, 0o644);
        self
    }

    /// Copy the host file `host` to the same path in the image (symlinks
    /// followed: the image holds the content).
    pub fn host_file(&mut self, host: &Path) -> Result<&mut Self, NodeError> {
        use std::os::unix::fs::PermissionsExt;
        let content = std::fs::read(host)
            .map_err(|e| NodeError::io(format!("reading {}", host.display()), e))?;
        let mode = std::fs::metadata(host)
            .map_err(|e| NodeError::io(format!("reading {}", host.display()), e))?
            .permissions()
            .mode()
            & 0o7777;
        let path = host.to_string_lossy().into_owned();
        Ok(self.file(&path, content, mode))
    }

    /// Copy a program and every shared library it loads (its `ldd`
    /// closure, the dynamic loader at its ABI path included) to the same
    /// paths.
    pub fn binary(&mut self, program: &Path) -> Result<&mut Self, NodeError> {
        for f in library_closure(program)? {
            self.host_file(&f)?;
        }
        self.host_file(program)
    }

    /// Copy the host directory tree `dir` to the same paths: regular files
    /// and symlinks as they are (compiled-bytecode caches left out), and
    /// for every shared object in it (`*.so*`) the libraries it loads.
    pub fn host_tree(&mut self, dir: &Path) -> Result<&mut Self, NodeError> {
        let read = |p: &Path| {
            NodeError::io(
                format!("reading {}", p.display()),
                std::io::Error::other("unreadable"),
            )
        };
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let entries = std::fs::read_dir(&d)
                .map_err(|e| NodeError::io(format!("reading {}", d.display()), e))?;
            for entry in entries {
                let entry =
                    entry.map_err(|e| NodeError::io(format!("reading {}", d.display()), e))?;
                let path = entry.path();
                let kind = entry.file_type().map_err(|_| read(&path))?;
                if kind.is_symlink() {
                    let target = std::fs::read_link(&path).map_err(|_| read(&path))?;
                    self.symlink(&path.to_string_lossy(), &target.to_string_lossy());
                } else if kind.is_dir() {
                    if entry.file_name() != "__pycache__" {
                        stack.push(path);
                    }
                } else if kind.is_file() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.contains(".so") {
                        for lib in library_closure(&path)? {
                            if !self.entries.contains_key(lib.to_string_lossy().as_ref()) {
                                self.host_file(&lib)?;
                            }
                        }
                    }
                    self.host_file(&path)?;
                }
            }
        }
        Ok(self)
    }

    /// Busybox (static) at /bin/busybox with a symlink per applet in /bin.
    pub fn busybox(&mut self) -> Result<&mut Self, NodeError> {
        let busybox = crate::host::find_program("busybox", "busybox-static")?;
        let content = std::fs::read(&busybox)
            .map_err(|e| NodeError::io(format!("reading {}", busybox.display()), e))?;
        self.file("/bin/busybox", content, 0o755);
        let out = std::process::Command::new(&busybox)
            .arg("--list")
            .output()
            .map_err(|e| NodeError::io("listing busybox's applets", e))?;
        for applet in String::from_utf8_lossy(&out.stdout).lines() {
            let applet = applet.trim();
            if !applet.is_empty() && applet != "busybox" && !applet.contains('/') {
                let path = format!("/bin/{applet}");
                if !self.entries.contains_key(&path) {
                    self.symlink(&path, "busybox");
                }
            }
        }
        Ok(self)
    }

    /// Set an image config field (`Entrypoint`, `Cmd`, `User`,
    /// `WorkingDir`, `ExposedPorts`, `StopSignal`).
    pub fn config(&mut self, key: &str, value: Value) -> &mut Self {
        self.config[key] = value;
        self
    }

    /// The layer as an uncompressed tar.
    pub fn layer(&self) -> Result<Vec<u8>, NodeError> {
        let mut tar = tar::Builder::new(Vec::new());
        let io = |e| NodeError::io("writing the image layer", e);
        for (path, entry) in &self.entries {
            let name = path.trim_start_matches('/');
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(0);
            match entry {
                Entry::Dir(mode) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_mode(*mode);
                    h.set_size(0);
                    tar.append_data(&mut h, format!("{name}/"), std::io::empty())
                        .map_err(io)?;
                }
                Entry::File(content, mode) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_mode(*mode);
                    h.set_size(content.len() as u64);
                    tar.append_data(&mut h, name, content.as_slice())
                        .map_err(io)?;
                }
                Entry::Link(target) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_mode(0o777);
                    h.set_size(0);
                    tar.append_link(&mut h, name, target).map_err(io)?;
                }
            }
        }
        tar.into_inner().map_err(io)
    }

    /// Build the image and push it to `registry` as `image`; returns the
    /// manifest's digest.
    pub async fn push(
        &self,
        registry: &RegistryClient,
        image: &ImageRef,
    ) -> Result<String, NodeError> {
        let layer = self.layer()?;
        let diff_id = sha256(&layer);
        let config = json!({
            "architecture": arch(),
            "os": "linux",
            "config": self.config,
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created_by": "kubeforge image build", "comment": image.full()}],
        });
        let config = Bytes::from(serde_json::to_vec(&config).unwrap_or_default());
        let config_digest = sha256(&config);
        let layer_len = layer.len();
        registry
            .put_blob(&image.path, &diff_id, Bytes::from(layer))
            .await?;
        registry
            .put_blob(&image.path, &config_digest, config.clone())
            .await?;
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": diff_id, "size": layer_len}],
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest).unwrap_or_default());
        let digest = sha256(&manifest);
        registry
            .put_manifest(&image.path, &image.tag, MANIFEST, manifest)
            .await?;
        Ok(digest)
    }
}

/// The OCI image manifest media type.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let mut s = String::with_capacity(71);
    s.push_str("sha256:");
    for b in d.as_ref() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The shared libraries `program` loads, as `ldd` lists them (empty for
/// a static program).
pub fn library_closure(program: &Path) -> Result<Vec<PathBuf>, NodeError> {
    let out = std::process::Command::new("ldd")
        .arg(program)
        .output()
        .map_err(|e| NodeError::io("running ldd (package libc-bin)", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(parse_ldd(&text))
}

fn parse_ldd(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rhs)) => rhs.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The images `kubeforge image build` knows by name, and what each holds.
pub const PRESETS: &[(&str, &str)] = &[
    (
        "busybox",
        "busybox's applets in /bin (sh, sleep, wget, nc, …)",
    ),
    ("pause", "the pod sandbox image: busybox sleeping forever"),
    (
        "memcached",
        "/usr/bin/memcached as user memcache (11211), busybox's shell",
    ),
    ("redis", "/usr/bin/redis-server, busybox's shell"),
    (
        "python",
        "Debian's /usr/bin/python3 with its standard library and /usr/lib/python3/dist-packages (Debian's python3-* packages, e.g. python3-kubernetes), busybox's shell",
    ),
];

/// Debian's Python: the interpreter, its standard library and the
/// packages Debian installed for it.
const PYTHON: &str = "/usr/bin/python3";
/// Where Debian puts packages for every Python 3 (the standard library is
/// `/usr/lib/<interpreter's name>`).
const PYTHON_PACKAGES: &str = "/usr/lib/python3/dist-packages";

/// The image `preset` (one of [`PRESETS`]) or an error naming them.
pub fn preset(name: &str) -> Result<ImageBuilder, NodeError> {
    let mut b = ImageBuilder::new();
    match name {
        "busybox" => {
            b.busybox()?.config("Cmd", json!(["sh"]));
        }
        "pause" => {
            b.busybox()?
                .config("Entrypoint", json!(["/bin/sleep", "2147483647"]));
        }
        "memcached" => {
            let program = crate::host::find_program("memcached", "memcached")?;
            b.busybox()?.binary(&program)?;
            b.users(&[
                ("root", 0, "/root"),
                ("memcache", 11211, "/home/memcache"),
                ("nobody", 65534, "/nonexistent"),
            ]);
            b.dir("/home/memcache", 0o755);
            b.config("Entrypoint", json!(["memcached"]))
                .config("User", json!("memcache"))
                .config("ExposedPorts", json!({"11211/tcp": {}}));
        }
        "redis" => {
            let program = crate::host::find_program("redis-server", "redis-server")?;
            b.busybox()?.binary(&program)?;
            b.dir("/data", 0o777);
            b.config("Cmd", json!(["redis-server"]))
                .config("WorkingDir", json!("/data"))
                .config("ExposedPorts", json!({"6379/tcp": {}}));
        }
        "python" => {
            let program = std::fs::canonicalize(PYTHON).map_err(|e| {
                NodeError::io(format!("{PYTHON} (install Debian's python3 package)"), e)
            })?;
            b.busybox()?.binary(&program)?;
            b.symlink(PYTHON, &program.to_string_lossy());
            let stdlib = Path::new("/usr/lib").join(program.file_name().unwrap_or_default());
            b.host_tree(&stdlib)?;
            b.host_tree(Path::new(PYTHON_PACKAGES))?;
            b.config("Cmd", json!(["python3"]));
        }
        other => {
            return Err(NodeError::Build {
                image: other.to_string(),
                reason: format!(
                    "no such preset; choose from {} or give --binary",
                    PRESETS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    Ok(b)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_normalise_as_docker_does() {
        let r = ImageRef::parse("busybox:1.36").unwrap();
        assert_eq!(
            (r.domain.as_str(), r.path.as_str(), r.tag.as_str()),
            ("docker.io", "library/busybox", "1.36")
        );
        assert_eq!(r.full(), "docker.io/library/busybox:1.36");
        let r = ImageRef::parse("docker.io/library/redis:7").unwrap();
        assert_eq!(r.full(), "docker.io/library/redis:7");
        let r = ImageRef::parse("registry.k8s.io/pause:3.6").unwrap();
        assert_eq!(
            (r.domain.as_str(), r.path.as_str()),
            ("registry.k8s.io", "pause")
        );
        let r = ImageRef::parse("127.0.0.1:5000/team/app").unwrap();
        assert_eq!(
            (r.domain.as_str(), r.path.as_str(), r.tag.as_str()),
            ("127.0.0.1:5000", "team/app", "latest")
        );
        let r = ImageRef::parse("localhost/app:v1").unwrap();
        assert_eq!(r.domain, "localhost");
        let r = ImageRef::parse("example/app").unwrap();
        assert_eq!(r.full(), "docker.io/example/app:latest");
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "a//b",
            "x@sha256:12",
            "x@md5:00",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ldd_output_is_parsed() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n\tnot a dynamic executable\n";
        assert_eq!(
            parse_ldd(text),
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2")
            ]
        );
    }

    #[test]
    fn layers_are_deterministic_and_hold_parents() {
        let mut a = ImageBuilder::new();
        a.file("/usr/share/x/y", "hi", 0o644)
            .symlink("/bin/sh", "busybox");
        let layer = a.layer().unwrap();
        assert_eq!(sha256(&layer), sha256(&a.clone().layer().unwrap()));
        let mut ar = tar::Archive::new(layer.as_slice());
        let names: Vec<String> = ar
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "usr/",
            "usr/share/",
            "usr/share/x/",
            "usr/share/x/y",
            "bin/sh",
            "etc/passwd",
            "tmp/",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} in {names:?}");
        }
    }
}
