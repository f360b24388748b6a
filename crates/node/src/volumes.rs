//! A pod's volumes as directories on the node, bind-mounted into its
//! containers as CRI mounts, as the kubelet's volume plugins lay them out
//! under `pods/<uid>/volumes/<plugin>/<name>`: emptyDir (a directory, or
//! tmpfs for `medium: Memory`), configMap, secret, downwardAPI, projected
//! (with a ServiceAccount token bound to the pod, rotated before it
//! expires) and hostPath.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::cri::api;
use crate::env::{EnvContext, field_value, resource_value};

/// Why a volume cannot be set up (the kubelet reports `FailedMount`).
#[derive(Debug, thiserror::Error)]
#[error("MountVolume.SetUp failed for volume {volume:?} : {reason}")]
pub struct VolumeError {
    /// The volume.
    pub volume: String,
    /// Why.
    pub reason: String,
}

/// A pod's volume directories and when its tokens need renewing.
#[derive(Debug, Default)]
pub struct PodVolumes {
    /// Volume name → directory on the node.
    pub dirs: BTreeMap<String, PathBuf>,
    /// When the soonest projected token is due for renewal.
    pub renew_at: Option<Instant>,
    /// tmpfs mounts to undo.
    tmpfs: Vec<PathBuf>,
}

/// Where `pod`'s volumes live under `root`.
pub fn pod_dir(root: &Path, uid: &str) -> PathBuf {
    root.join("pods").join(uid)
}

fn plugin_dir(v: &Volume) -> Option<&'static str> {
    Some(if v.empty_dir.is_some() {
        "kubernetes.io~empty-dir"
    } else if v.config_map.is_some() {
        "kubernetes.io~configmap"
    } else if v.secret.is_some() {
        "kubernetes.io~secret"
    } else if v.projected.is_some() {
        "kubernetes.io~projected"
    } else if v.downward_api.is_some() {
        "kubernetes.io~downward-api"
    } else {
        return None;
    })
}

/// Refuse a pod whose volume or container names are not DNS-1123 labels
/// before any of them is joined onto a host path. The API server refuses
/// such pods; a pod from another server, or stored before it did, must
/// not make this agent write outside its directories (a volume named `/`
/// would otherwise replace the base directory).
fn check_names(spec: &k8s_openapi::api::core::v1::PodSpec) -> Result<(), VolumeError> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| ("container", c.name.as_str()));
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| ("volume", v.name.as_str()));
    for (what, name) in volumes.chain(containers) {
        if !kubeforge_apimachinery::names::is_dns1123_label(name).is_empty() {
            return Err(VolumeError {
                volume: name.to_string(),
                reason: format!(
                    "{what} name {name:?} is not a DNS-1123 label; it is not used in a host path"
                ),
            });
        }
    }
    Ok(())
}

/// `dir` joined with the relative `sub`, refusing a `sub` that is
/// absolute, has a `..`, or passes through a symbolic link inside `dir`
/// (one a container planted would lead the bind mount anywhere on the
/// host, CVE-2017-1002101). Missing directories are made, each checked
/// as it is reached.
fn beneath(dir: &Path, sub: &str) -> Result<PathBuf, String> {
    if !kubeforge_apimachinery::names::is_local_descending_path(sub).is_empty() {
        return Err(format!(
            "subPath {sub:?} must be a relative path without '..'"
        ));
    }
    let mut at = dir.to_path_buf();
    for part in sub.split('/').filter(|p| !p.is_empty() && *p != ".") {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "subPath {sub:?} passes through a symbolic link ({}); refusing to follow it",
                    at.display()
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&at).map_err(|e| e.to_string())?;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(at)
}

/// Write `files` (relative path → content, mode) into `dir`, replacing
/// what was there: each file is written beside and renamed, so a reader
/// sees the old content or the new.
fn write_files(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    for (rel, (content, mode)) in files {
        if rel.split('/').any(|p| p == ".." || p.is_empty()) {
            continue;
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = path.with_extension("kubeforge-tmp");
        std::fs::write(&tmp, content)?;
        // Never setuid, setgid or sticky, whatever the mode asked (the API
        // refuses modes past 0777; this holds for objects it did not check).
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode & 0o777))?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

fn items_or_all(
    data: BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    what: &str,
    optional: bool,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mut out = BTreeMap::new();
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                match data.get(&it.key) {
                    Some(v) => {
                        let mode = it.mode.map_or(default_mode, |m| m as u32);
                        out.insert(it.path.clone(), (v.clone(), mode));
                    }
                    None if optional => {}
                    None => {
                        return Err(format!(
                            "configmap references non-existent config key: {}",
                            it.key
                        )
                        .replace("configmap", what));
                    }
                }
            }
        }
        _ => {
            for (k, v) in data {
                out.insert(k, (v, default_mode));
            }
        }
    }
    Ok(out)
}

async fn config_map_files(
    client: &kube::Client,
    ns: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    optional: bool,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await.map_err(|e| e.to_string())? {
        Some(cm) => {
            let mut data: BTreeMap<String, Vec<u8>> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            for (k, v) in cm.binary_data.unwrap_or_default() {
                data.insert(k, v.0);
            }
            items_or_all(data, items, default_mode, "configmap", optional)
        }
        None if optional => Ok(BTreeMap::new()),
        None => Err(format!("configmap \"{name}\" not found")),
    }
}

async fn secret_files(
    client: &kube::Client,
    ns: &str,
    name: &str,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    optional: bool,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await.map_err(|e| e.to_string())? {
        Some(s) => {
            let data = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            items_or_all(data, items, default_mode, "secret", optional)
        }
        None if optional => Ok(BTreeMap::new()),
        None => Err(format!("secret \"{name}\" not found")),
    }
}

fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
    ctx: &EnvContext,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mut out = BTreeMap::new();
    for it in items {
        let mode = it.mode.map_or(default_mode, |m| m as u32);
        let value = if let Some(f) = &it.field_ref {
            match f.field_path.as_str() {
                "metadata.labels" | "metadata.annotations" => {
                    let map = if f.field_path == "metadata.labels" {
                        pod.metadata.labels.clone()
                    } else {
                        pod.metadata.annotations.clone()
                    };
                    map.unwrap_or_default()
                        .iter()
                        .map(|(k, v)| {
                            format!("{k}={}\n", serde_json::to_string(v).unwrap_or_default())
                        })
                        .collect::<String>()
                }
                path => field_value(pod, path, ctx).map_err(|e| e.0)?,
            }
        } else if let Some(r) = &it.resource_field_ref {
            let spec = pod.spec.clone().unwrap_or_default();
            let name = r.container_name.clone().unwrap_or_default();
            let c = spec
                .containers
                .iter()
                .find(|c| c.name == name)
                .ok_or_else(|| format!("container {name:?} not found"))?;
            resource_value(
                c,
                &r.resource,
                r.divisor.as_ref().map(|d| d.0.as_str()),
                ctx,
            )
            .map_err(|e| e.0)?
        } else {
            continue;
        };
        out.insert(it.path.clone(), (value.into_bytes(), mode));
    }
    Ok(out)
}

/// Request a token for the pod's ServiceAccount, bound to the pod.
async fn token(
    client: &kube::Client,
    pod: &Pod,
    audience: Option<&str>,
    seconds: i64,
) -> Result<(String, i64), String> {
    let (name, ns, uid) = crate::pod::identity(pod);
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let mut spec = json!({
        "expirationSeconds": seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid},
    });
    if let Some(a) = audience.filter(|a| !a.is_empty()) {
        spec["audiences"] = json!([a]);
    }
    let body =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let tr: serde_json::Value = api
        .create_subresource("token", &account, &PostParams::default(), &body)
        .await
        .map_err(|e| e.to_string())?;
    let token = tr["status"]["token"]
        .as_str()
        .ok_or("the token request answered without a token")?
        .to_string();
    let expires = tr["status"]["expirationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(seconds, |t| {
            t.as_second() - jiff::Timestamp::now().as_second()
        });
    Ok((token, expires.max(1)))
}

impl PodVolumes {
    /// Make (or refresh) every volume of `pod` under `root`.
    pub async fn set_up(
        &mut self,
        client: &kube::Client,
        root: &Path,
        pod: &Pod,
        ctx: &EnvContext,
    ) -> Result<(), VolumeError> {
        let (_, ns, uid) = crate::pod::identity(pod);
        let spec = pod.spec.clone().unwrap_or_default();
        check_names(&spec)?;
        // The pod's directory is the agent's: 0750, as the kubelet makes
        // it, so other users on the host cannot read its secrets.
        {
            use std::os::unix::fs::PermissionsExt;
            let dir = pod_dir(root, uid);
            std::fs::create_dir_all(&dir)
                .and_then(|()| {
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750))
                })
                .map_err(|e| VolumeError {
                    volume: String::new(),
                    reason: format!("making {}: {e}", dir.display()),
                })?;
        }
        let base = pod_dir(root, uid).join("volumes");
        let mut renew: Option<Instant> = None;
        for v in spec.volumes.iter().flatten() {
            let err = |reason: String| VolumeError {
                volume: v.name.clone(),
                reason,
            };
            if let Some(hp) = &v.host_path {
                let path = PathBuf::from(&hp.path);
                match hp.type_.as_deref().unwrap_or("") {
                    "DirectoryOrCreate" => std::fs::create_dir_all(&path)
                        .map_err(|e| err(format!("creating {}: {e}", path.display())))?,
                    "Directory" if !path.is_dir() => {
                        return Err(err(format!(
                            "hostPath type check failed: {} is not a directory",
                            hp.path
                        )));
                    }
                    "File" if !path.is_file() => {
                        return Err(err(format!(
                            "hostPath type check failed: {} is not a file",
                            hp.path
                        )));
                    }
                    "FileOrCreate" if !path.exists() => std::fs::write(&path, b"")
                        .map_err(|e| err(format!("creating {}: {e}", path.display())))?,
                    _ => {}
                }
                self.dirs.insert(v.name.clone(), path);
                continue;
            }
            let Some(plugin) = plugin_dir(v) else {
                return Err(err("this node supports emptyDir, configMap, secret, downwardAPI, projected and hostPath volumes".into()));
            };
            let dir = base.join(plugin).join(&v.name);
            let mut files = BTreeMap::new();
            if let Some(ed) = &v.empty_dir {
                if !dir.exists() {
                    std::fs::create_dir_all(&dir).map_err(|e| err(e.to_string()))?;
                    if ed.medium.as_deref() == Some("Memory") {
                        let size = ed
                            .size_limit
                            .as_ref()
                            .and_then(|q| kubeforge_apimachinery::quantity::parse_value(&q.0).ok());
                        let opts = size.map(|s| format!("size={s}"));
                        nix::mount::mount(
                            Some("tmpfs"),
                            &dir,
                            Some("tmpfs"),
                            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                            opts.as_deref(),
                        )
                        .map_err(|e| err(format!("mounting tmpfs: {e}")))?;
                        self.tmpfs.push(dir.clone());
                    }
                }
            } else if let Some(cm) = &v.config_map {
                let mode = cm.default_mode.map_or(0o644, |m| m as u32);
                files = config_map_files(
                    client,
                    ns,
                    &cm.name,
                    cm.items.as_ref(),
                    mode,
                    cm.optional.unwrap_or(false),
                )
                .await
                .map_err(err)?;
            } else if let Some(s) = &v.secret {
                let mode = s.default_mode.map_or(0o644, |m| m as u32);
                let name = s.secret_name.clone().unwrap_or_default();
                files = secret_files(
                    client,
                    ns,
                    &name,
                    s.items.as_ref(),
                    mode,
                    s.optional.unwrap_or(false),
                )
                .await
                .map_err(err)?;
            } else if let Some(d) = &v.downward_api {
                let mode = d.default_mode.map_or(0o644, |m| m as u32);
                files = downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, ctx)
                    .map_err(err)?;
            } else if let Some(p) = &v.projected {
                let mode = p.default_mode.map_or(0o644, |m| m as u32);
                for src in p.sources.iter().flatten() {
                    if let Some(t) = &src.service_account_token {
                        let seconds = t.expiration_seconds.unwrap_or(3607);
                        let (tok, ttl) = token(client, pod, t.audience.as_deref(), seconds)
                            .await
                            .map_err(err)?;
                        // Renewed at 80% of its life, as the kubelet's token manager.
                        let at = Instant::now() + Duration::from_secs((ttl as u64) * 8 / 10);
                        renew = Some(renew.map_or(at, |r| r.min(at)));
                        files.insert(t.path.clone(), (tok.into_bytes(), 0o600.min(mode | 0o600)));
                    }
                    if let Some(cm) = &src.config_map {
                        files.extend(
                            config_map_files(
                                client,
                                ns,
                                &cm.name,
                                cm.items.as_ref(),
                                mode,
                                cm.optional.unwrap_or(false),
                            )
                            .await
                            .map_err(err)?,
                        );
                    }
                    if let Some(s) = &src.secret {
                        files.extend(
                            secret_files(
                                client,
                                ns,
                                &s.name,
                                s.items.as_ref(),
                                mode,
                                s.optional.unwrap_or(false),
                            )
                            .await
                            .map_err(err)?,
                        );
                    }
                    if let Some(d) = &src.downward_api {
                        files.extend(
                            downward_files(pod, d.items.as_deref().unwrap_or_default(), mode, ctx)
                                .map_err(err)?,
                        );
                    }
                }
            }
            if !files.is_empty() || !dir.exists() {
                write_files(&dir, &files)
                    .map_err(|e| err(format!("writing {}: {e}", dir.display())))?;
            }
            self.dirs.insert(v.name.clone(), dir);
        }
        self.renew_at = renew;
        Ok(())
    }

    /// The CRI mounts of container `c`.
    pub fn mounts(&self, c: &Container) -> Result<Vec<api::Mount>, VolumeError> {
        let mut out = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let dir = self.dirs.get(&m.name).ok_or_else(|| VolumeError {
                volume: m.name.clone(),
                reason: format!("volume {:?} is not defined in the pod", m.name),
            })?;
            let mut host = dir.clone();
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                host = beneath(dir, sub).map_err(|reason| VolumeError {
                    volume: m.name.clone(),
                    reason,
                })?;
            }
            let propagation = match m.mount_propagation.as_deref() {
                Some("HostToContainer") => api::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => api::MountPropagation::PropagationBidirectional,
                _ => api::MountPropagation::PropagationPrivate,
            };
            out.push(api::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: m.read_only.unwrap_or(false),
                propagation: propagation as i32,
                ..Default::default()
            });
        }
        Ok(out)
    }

    /// Undo the tmpfs mounts and remove the pod's directory.
    pub fn tear_down(&mut self, root: &Path, uid: &str) {
        for t in self.tmpfs.drain(..) {
            let _ = nix::mount::umount2(&t, nix::mount::MntFlags::MNT_DETACH);
        }
        let dir = pod_dir(root, uid);
        crate::host::unmount_all(&dir);
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the pod's volumes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (subPath, what is planted in the volume first, whether it is
    /// refused): a symlink a container made, anywhere on the way, is never
    /// followed.
    #[test]
    fn sub_paths_stay_beneath_their_volume() {
        let root = std::env::temp_dir().join(format!("kubeforge-subpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let host = root.join("host");
        std::fs::create_dir_all(&host).expect("host dir");
        let cases: &[(&str, Option<&str>, bool)] = &[
            ("data", None, false),
            ("a/b/c", None, false),
            ("escape", Some("escape"), true),
            ("x/escape/y", Some("x/escape"), true),
            ("../up", None, true),
            ("/abs", None, true),
        ];
        for (i, (sub, link, refused)) in cases.iter().enumerate() {
            let vol = root.join(format!("vol-{i}"));
            std::fs::create_dir_all(&vol).expect("volume dir");
            if let Some(l) = link {
                let at = vol.join(l);
                std::fs::create_dir_all(at.parent().expect("parent")).expect("parents");
                std::os::unix::fs::symlink(&host, &at).expect("plant a symlink");
            }
            let got = beneath(&vol, sub);
            assert_eq!(got.is_err(), *refused, "{sub}: {got:?}");
            if let Ok(p) = got {
                assert!(p.starts_with(&vol) && p.is_dir(), "{}", p.display());
            }
        }
        assert_eq!(
            std::fs::read_dir(&host).expect("host").count(),
            0,
            "nothing was made in the host directory"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn names_that_are_not_labels_never_reach_a_path() {
        let spec: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(serde_json::json!({
            "volumes": [{"name": "/", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "i"}]}))
        .expect("spec");
        let e = check_names(&spec).expect_err("refused");
        assert_eq!(e.volume, "/");
        let spec: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "../../x", "image": "i"}]}))
        .expect("spec");
        assert!(check_names(&spec).is_err());
    }
}
