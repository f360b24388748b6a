//! kube-apiserver's `ServiceAccount` admission plugin for pods on create:
//! the pod runs as `default` unless it names an account, and unless the
//! pod (or else its ServiceAccount) turns `automountServiceAccountToken`
//! off, every container and init container mounts a projected
//! `kube-api-access-<suffix>` volume at
//! `/var/run/secrets/kubernetes.io/serviceaccount` holding a bound token,
//! the cluster CA (`kube-root-ca.crt`) and the namespace — what
//! `rest.InClusterConfig`, kube-rs's `Config::incluster` and the Python
//! client's `load_incluster_config` read.
//!
//! The mounting is on when the server is told its pods can use it
//! ([`crate::ApiServer::set_service_account_tokens`]; `kubeforge up` with
//! HTTPS), and off otherwise, as envtest runs kube-apiserver without the
//! plugin: without a published CA the volume could never be set up.
//!
//! One difference, on purpose: kube refuses a pod whose ServiceAccount does
//! not exist yet (403 `error looking up service account …`); here the pod
//! is admitted, and the node retries the token until the account exists,
//! so a namespace's first pods need not race its `default` account.

use serde_json::{Value, json};

use crate::context::Ctx;

/// Where the token volume is mounted (kube's `DefaultAPITokenMountPath`).
pub(crate) const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The prefix of the token volume's name (kube's `ServiceAccountVolumeName`).
const VOLUME_PREFIX: &str = "kube-api-access-";

/// The letters kube's name generator draws suffixes from.
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The projected source kube's `TokenVolumeSource` builds.
fn token_volume_source() -> Value {
    json!({
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    })
}

/// Admit a pod being created in `ctx`'s namespace.
pub(crate) fn admit_pod(ctx: &Ctx<'_>, pod: &mut Value) {
    // Mirror pods (a kubelet's static pods) are left alone, as kube does.
    if pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some()
    {
        return;
    }
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => {
            spec.insert("serviceAccountName".into(), json!("default"));
            "default".to_string()
        }
    };
    let automount = match spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
    {
        Some(b) => b,
        None => service_account(ctx, &account)
            .and_then(|sa| {
                sa.get("automountServiceAccountToken")
                    .and_then(Value::as_bool)
            })
            .unwrap_or(true),
    };
    if automount {
        mount_token(spec, &random_suffix());
    }
}

/// The ServiceAccount `name` in the request's namespace, if stored.
fn service_account(ctx: &Ctx<'_>, name: &str) -> Option<Value> {
    let def = ctx.server.registry().get("", "v1", "serviceaccounts")?;
    let kv = ctx.server.store().get(&def.key(ctx.ns.as_deref(), name))?;
    serde_json::from_slice(&kv.value).ok()
}

fn random_suffix() -> String {
    let random = uuid::Uuid::new_v4();
    random.as_bytes()[..5]
        .iter()
        .map(|b| char::from(SUFFIX_ALPHABET[usize::from(*b) % SUFFIX_ALPHABET.len()]))
        .collect()
}

/// kube's `mountServiceAccountToken`: an existing `kube-api-access-*`
/// volume is reused; each container (init containers first) without a
/// mount at the token path gets one; the volume is added when a container
/// needs it.
fn mount_token(spec: &mut serde_json::Map<String, Value>, suffix: &str) {
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(str::to_string);
    let volume = existing
        .clone()
        .unwrap_or_else(|| format!("{VOLUME_PREFIX}{suffix}"));
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for key in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in containers.iter_mut().filter_map(Value::as_object_mut) {
            let mounts = c.entry("volumeMounts").or_insert_with(|| json!([]));
            let Some(mounts) = mounts.as_array_mut() else {
                continue;
            };
            if mounts
                .iter()
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH))
            {
                continue;
            }
            mounts.push(mount.clone());
            needed = true;
        }
    }
    if needed && existing.is_none() {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(v) = volumes.as_array_mut() {
            v.push(json!({"name": volume, "projected": token_volume_source()}));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn every_container_mounts_the_token_volume() {
        let mut s = spec(json!({
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a", "volumeMounts": [{"name": "data", "mountPath": "/data"}]}, {"name": "b"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }));
        mount_token(&mut s, "x7k2p");
        let want = json!({"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
        assert_eq!(s["initContainers"][0]["volumeMounts"], json!([want]));
        assert_eq!(s["containers"][0]["volumeMounts"][1], want);
        assert_eq!(s["containers"][1]["volumeMounts"], json!([want]));
        assert_eq!(s["volumes"][1]["name"], "kube-api-access-x7k2p");
        assert_eq!(
            s["volumes"][1]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(s["volumes"][1]["projected"]["defaultMode"], 420);
    }

    #[test]
    fn a_mount_at_the_token_path_or_an_existing_volume_is_kept() {
        let mut s = spec(json!({
            "containers": [{"name": "a", "volumeMounts": [{"name": "mine", "mountPath": TOKEN_MOUNT_PATH}]}],
            "volumes": [{"name": "mine", "emptyDir": {}}],
        }));
        let before = s.clone();
        mount_token(&mut s, "abcde");
        assert_eq!(s, before, "nothing to add");

        let mut s = spec(json!({
            "containers": [{"name": "a"}],
            "volumes": [{"name": "kube-api-access-old12", "projected": {}}],
        }));
        mount_token(&mut s, "abcde");
        assert_eq!(
            s["containers"][0]["volumeMounts"][0]["name"],
            "kube-api-access-old12"
        );
        assert_eq!(s["volumes"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn suffixes_use_kube_s_alphabet() {
        for _ in 0..50 {
            let s = random_suffix();
            assert_eq!(s.len(), 5);
            assert!(s.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)), "{s}");
        }
    }
}
