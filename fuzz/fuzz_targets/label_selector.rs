//! Label selectors (`?labelSelector=`, `matchLabels`/`matchExpressions`):
//! parsing, matching, and printing back. Input: the selector text; when it
//! is also JSON, it is read as a `metav1.LabelSelector` object too.
#![no_main]
use std::collections::HashMap;

use kubeforge_apimachinery::labels::Selector;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let labels: HashMap<String, String> = [("app", "web"), ("tier", "1"), ("a.b/c", "")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(sel) = Selector::parse(s) {
        let _ = sel.matches(&labels);
        let _ = sel.requires_exact_match("app");
        // kube's String() of a parsed selector parses to the same selector.
        let printed = sel.to_string();
        let again = Selector::parse(&printed)
            .unwrap_or_else(|e| panic!("{printed:?} (printed from {s:?}) does not parse: {e}"));
        assert_eq!(again.to_string(), printed, "selector print round trip");
        assert_eq!(again.matches(&labels), sel.matches(&labels));
    }
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(s) {
        if let Ok(sel) = Selector::from_label_selector(&v) {
            let _ = sel.matches(&labels);
            let _ = sel.to_string();
        }
    }
});
