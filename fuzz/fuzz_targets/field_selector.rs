//! Field selectors (`?fieldSelector=`): parsing, escaping, matching against
//! an object's fields, and printing back. Input: the selector text.
#![no_main]
use kubeforge_apimachinery::fields::{FieldSelector, escape_value, json_field};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let obj = json!({"metadata": {"name": "n", "namespace": "default"},
                     "spec": {"nodeName": "node-1", "unschedulable": true},
                     "status": {"phase": "Running"}});
    let escaped = escape_value(s);
    let sel = FieldSelector::parse(&format!("metadata.name={escaped}"))
        .unwrap_or_else(|e| panic!("an escaped value {escaped:?} does not parse: {e}"));
    assert_eq!(sel.exact("metadata.name"), Some(s), "escape round trip");
    if let Ok(sel) = FieldSelector::parse(s) {
        let _ = sel.matches(|f| json_field(&obj, f));
        let printed = sel.to_string();
        let again = FieldSelector::parse(&printed)
            .unwrap_or_else(|e| panic!("{printed:?} (printed from {s:?}) does not parse: {e}"));
        assert_eq!(again.to_string(), printed, "selector print round trip");
    }
    let _ = json_field(&obj, s);
});
