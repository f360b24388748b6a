//! Resource quantities (`100m`, `1Gi`, `1e3`, ...) as kubeforge-apimachinery
//! parses them for the scheduler and the node config, from pods and nodes
//! users write. Input: the quantity text.
#![no_main]
use kubeforge_apimachinery::quantity::{parse_milli, parse_value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let milli = parse_milli(s);
    let value = parse_value(s);
    if let (Ok(m), Ok(v)) = (&milli, &value) {
        // Values are rounded up from millis: never below a thousandth of them.
        assert!(*v >= m / 1000, "{s:?}: value {v} below milli {m} / 1000");
    }
});
