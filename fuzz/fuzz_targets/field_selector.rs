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
        // The printed selector parses to the same terms. (Not necessarily in
        // the same order: Go's ParseSelector sorts the terms' source text,
        // so `e==f,e=d` prints as `e=f,e=d`, which parses as `e=d,e=f`.)
        let printed = sel.to_string();
        let again = FieldSelector::parse(&printed)
            .unwrap_or_else(|e| panic!("{printed:?} (printed from {s:?}) does not parse: {e}"));
        let terms = |f: &FieldSelector| {
            let mut t: Vec<String> = f.requirements().iter().map(|r| r.to_string()).collect();
            t.sort();
            t
        };
        assert_eq!(terms(&again), terms(&sel), "selector print round trip");
    }
    let _ = json_field(&obj, s);
});
