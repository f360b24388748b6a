//! Object names and metadata: every name rule (with and without the
//! `generateName` prefix allowance), qualified names and label values, and
//! `validate_object_meta` on a metadata object. Input: a name; when it is
//! JSON, also a metadata object.
#![no_main]
use kubeforge_apimachinery::names::{self, NameRule};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for rule in [
        NameRule::Subdomain,
        NameRule::Label,
        NameRule::Dns1035Label,
        NameRule::PathSegment,
    ] {
        let _ = rule.check(s, false);
        let _ = rule.check(s, true);
    }
    let _ = names::is_qualified_name(s);
    let _ = names::is_label_value(s);
    let _ = names::is_dns1123_subdomain(s);
    let _ = names::is_path_segment_name(s, true);
    if let Ok(meta) = serde_json::from_str::<serde_json::Value>(s) {
        for rule in [NameRule::Subdomain, NameRule::PathSegment] {
            let _ = names::validate_object_meta(&meta, rule, true);
            let _ = names::validate_object_meta(&meta, rule, false);
        }
        let mut causes = Vec::new();
        names::validate_labels(meta.get("labels"), "metadata.labels", &mut causes);
        names::validate_annotations(meta.get("annotations"), "metadata.annotations", &mut causes);
    }
});
