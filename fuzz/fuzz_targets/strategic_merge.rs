//! Strategic merge patch (`application/strategic-merge-patch+json`) of the
//! built-in kinds, straight on the apimachinery implementation: directives
//! (`$patch`, `$retainKeys`, `$deleteFromPrimitiveList/`,
//! `$setElementOrder/`), merge keys, and patches of the wrong JSON type.
//! Input: one byte choosing the kind, then two JSON values (the original
//! object and the patch) one after the other.
#![no_main]
use kubeforge_apimachinery::strategic::strategic_merge_patch;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const KINDS: [(&str, &str); 10] = [
    ("", "Pod"),
    ("", "Service"),
    ("apps", "Deployment"),
    ("", "ConfigMap"),
    ("", "Node"),
    ("apps", "StatefulSet"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "Ingress"),
    ("rbac.authorization.k8s.io", "Role"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let (group, kind) = KINDS[sel as usize % KINDS.len()];
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
    let (Some(Ok(original)), Some(Ok(patch))) = (values.next(), values.next()) else {
        return;
    };
    if let Ok(merged) = strategic_merge_patch(&original, &patch, group, kind) {
        // Patching the result with an empty patch changes nothing.
        let again = strategic_merge_patch(&merged, &serde_json::json!({}), group, kind)
            .expect("an empty patch applies to a patch result");
        assert_eq!(again, merged, "empty patch changed the object");
    }
});
