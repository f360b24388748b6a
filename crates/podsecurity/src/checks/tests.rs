//! Each check's decisions and wording, at the versions where they change,
//! as kube's policy tests pin them.

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

use super::*;
use crate::{LevelVersion, Version, evaluate};

fn lv(s: &str) -> LevelVersion {
    let (level, version) = s.split_once(':').expect("level:version");
    LevelVersion {
        level: Level::parse(level).expect("level"),
        version: Version::parse(version).expect("version"),
    }
}

/// The detail a pod gets at `level_version` ("" when allowed).
fn detail(level_version: &str, pod: Value) -> String {
    let meta: ObjectMeta =
        serde_json::from_value(pod.get("metadata").cloned().unwrap_or(json!({}))).expect("meta");
    let spec: PodSpec = serde_json::from_value(pod["spec"].clone()).expect("spec");
    evaluate(lv(level_version), &meta, &spec).forbidden_detail()
}

/// A restricted-compliant container named `name`, with `extra` merged into
/// its securityContext.
fn good(name: &str, extra: Value) -> Value {
    let mut sc = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let (Some(sc), Some(extra)) = (sc.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            sc.insert(k.clone(), v.clone());
        }
    }
    json!({"name": name, "image": "i", "securityContext": sc})
}

fn pod(spec: Value) -> Value {
    json!({ "spec": spec })
}

#[test]
fn a_restricted_pod_passes_every_level_and_version() {
    let p = pod(json!({"containers": [good("a", json!({}))],
                      "initContainers": [good("i", json!({}))]}));
    for v in [
        "v1.0", "v1.8", "v1.19", "v1.22", "v1.23", "v1.25", "v1.32", "v1.40", "latest",
    ] {
        assert_eq!(detail(&format!("restricted:{v}"), p.clone()), "", "{v}");
        assert_eq!(detail(&format!("baseline:{v}"), p.clone()), "", "{v}");
    }
}

#[test]
fn an_unhardened_pod_at_restricted_latest_reads_as_kube_words_it() {
    let p = pod(json!({"containers": [{"name": "nginx", "image": "nginx"}]}));
    assert_eq!(
        detail("restricted:latest", p.clone()),
        "allowPrivilegeEscalation != false (container \"nginx\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"nginx\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"nginx\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"nginx\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
    // Before 1.8 only runAsNonRoot existed at restricted.
    assert_eq!(
        detail("restricted:v1.7", p.clone()),
        "runAsNonRoot != true (pod or container \"nginx\" must set securityContext.runAsNonRoot=true)"
    );
    assert_eq!(detail("baseline:latest", p.clone()), "");
    assert_eq!(detail("privileged:latest", p), "");
}

#[test]
fn baseline_checks_word_what_they_find() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "baseline:latest",
            json!({"containers": [
                {"name": "a", "image": "i", "securityContext": {"privileged": true}},
                {"name": "b", "image": "i", "securityContext": {"privileged": false}},
                {"name": "c", "image": "i", "securityContext": {"privileged": true}}]}),
            "privileged (containers \"a\", \"c\" must not set securityContext.privileged=true)",
        ),
        (
            "baseline:latest",
            json!({"hostPID": true, "hostIPC": true, "containers": [{"name": "a", "image": "i"}]}),
            "host namespaces (hostPID=true, hostIPC=true)",
        ),
        (
            "baseline:v1.0",
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}},
                               {"name": "g", "hostPath": {"path": "/etc"}}],
                   "containers": [{"name": "a", "image": "i"}]}),
            "hostPath volumes (volumes \"h\", \"g\")",
        ),
        (
            // Ports sort as text, not numbers.
            "baseline:latest",
            json!({"containers": [
                {"name": "a", "image": "i", "ports": [{"containerPort": 1, "hostPort": 9},
                                                      {"containerPort": 2, "hostPort": 8080}]},
                {"name": "b", "image": "i", "ports": [{"containerPort": 3}]},
                {"name": "c", "image": "i", "ports": [{"containerPort": 4, "hostPort": 10}]}]}),
            "hostPort (containers \"a\", \"c\" use hostPorts 10, 8080, 9)",
        ),
        (
            "baseline:latest",
            json!({"containers": [{"name": "a", "image": "i", "securityContext":
                {"capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN", "NET_ADMIN"], "drop": ["ALL"]}}}]}),
            "non-default capabilities (container \"a\" must not include \"NET_ADMIN\", \"SYS_ADMIN\" in securityContext.capabilities.add)",
        ),
        (
            "baseline:latest",
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}},
                   "containers": [{"name": "a", "image": "i", "securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}},
                                  {"name": "b", "image": "i", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}),
            "forbidden AppArmor profile (pod and container \"b\" must not set AppArmor profile type to \"Unconfined\")",
        ),
        (
            "baseline:latest",
            json!({"containers": [{"name": "x", "image": "i"}]}),
            "",
        ),
        (
            "baseline:v1.30",
            json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "u"}},
                   "containers": [{"name": "a", "image": "i", "securityContext": {"seLinuxOptions": {"type": "container_engine_t", "role": "r"}}}]}),
            "seLinuxOptions (pod and container \"a\" set forbidden securityContext.seLinuxOptions: types \"container_engine_t\", \"spc_t\"; user may not be set; role may not be set)",
        ),
        (
            // container_engine_t is allowed from 1.31.
            "baseline:v1.31",
            json!({"containers": [{"name": "a", "image": "i", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}}]}),
            "",
        ),
        (
            "baseline:latest",
            json!({"containers": [{"name": "a", "image": "i", "securityContext": {"procMount": "Unmasked"}},
                                  {"name": "b", "image": "i", "securityContext": {"procMount": "Default"}}]}),
            "procMount (container \"a\" must not set securityContext.procMount to \"Unmasked\")",
        ),
        (
            "baseline:latest",
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                   "containers": [{"name": "c", "image": "i", "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
                                  {"name": "d", "image": "i"}]}),
            "seccompProfile (pod and container \"c\" must not set securityContext.seccompProfile.type to \"Unconfined\")",
        ),
        (
            // Sysctls keep spec order and are not quoted; the 1.27 one is
            // forbidden before 1.27.
            "baseline:v1.26",
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                                   {"name": "net.ipv4.ip_local_reserved_ports", "value": "1"},
                                                   {"name": "net.ipv4.tcp_syncookies", "value": "1"}]},
                   "containers": [{"name": "a", "image": "i"}]}),
            "forbidden sysctls (kernel.msgmax, net.ipv4.ip_local_reserved_ports)",
        ),
        (
            "baseline:v1.31",
            json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"},
                                                   {"name": "net.ipv4.tcp_keepalive_time", "value": "1"}]},
                   "containers": [{"name": "a", "image": "i"}]}),
            "forbidden sysctls (net.ipv4.tcp_rmem)",
        ),
        (
            "baseline:latest",
            json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"},
                                                   {"name": "net/ipv4/tcp_wmem", "value": "1"}]},
                   "containers": [{"name": "a", "image": "i"}]}),
            "forbidden sysctls (net/ipv4/tcp_wmem)",
        ),
        (
            "baseline:latest",
            json!({"securityContext": {"windowsOptions": {"hostProcess": true}},
                   "containers": [{"name": "e", "image": "i", "securityContext": {"windowsOptions": {"hostProcess": true}}},
                                  {"name": "f", "image": "i", "securityContext": {"windowsOptions": {"hostProcess": true}}}]}),
            "hostProcess (pod and containers \"e\", \"f\" must not set securityContext.windowsOptions.hostProcess=true)",
        ),
    ];
    for (at, spec, want) in cases {
        assert_eq!(detail(at, pod(spec.clone())), want, "{at} {spec}");
    }
}

#[test]
fn annotations_are_judged_as_kube_judges_them() {
    // AppArmor annotations: every key under the prefix, sorted as
    // `key="value"` strings; "" is allowed.
    let p = json!({
        "metadata": {"annotations": {
            "container.apparmor.security.beta.kubernetes.io/a": "unconfined",
            "container.apparmor.security.beta.kubernetes.io/a-b": "bogus",
            "container.apparmor.security.beta.kubernetes.io/ok": "",
            "container.apparmor.security.beta.kubernetes.io/lh": "localhost/x",
        }},
        "spec": {"containers": [{"name": "a", "image": "i"}]}
    });
    assert_eq!(
        detail("baseline:latest", p),
        "forbidden AppArmor profiles (annotations must not set AppArmor profile type to \
         \"container.apparmor.security.beta.kubernetes.io/a-b=\"bogus\"\", \
         \"container.apparmor.security.beta.kubernetes.io/a=\"unconfined\"\")"
    );
    // Seccomp annotations count only before 1.19, and only for containers
    // that exist; "" is not a valid profile there.
    let p = json!({
        "metadata": {"annotations": {
            "seccomp.security.alpha.kubernetes.io/pod": "",
            "container.seccomp.security.alpha.kubernetes.io/a": "unconfined",
            "container.seccomp.security.alpha.kubernetes.io/ghost": "unconfined",
        }},
        "spec": {"containers": [{"name": "a", "image": "i"}]}
    });
    assert_eq!(
        detail("baseline:v1.18", p.clone()),
        "seccompProfile (forbidden annotations container.seccomp.security.alpha.kubernetes.io/a=\"unconfined\", \
         seccomp.security.alpha.kubernetes.io/pod=\"\")"
    );
    assert_eq!(detail("baseline:v1.19", p), "");
}

#[test]
fn restricted_checks_word_what_they_find() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "restricted:latest",
            json!({"volumes": [{"name": "b1", "hostPath": {"path": "/"}}, {"name": "ok", "secret": {"secretName": "s"}},
                               {"name": "c1", "nfs": {"server": "s", "path": "/"}}],
                   "containers": [good("a", json!({}))]}),
            "restricted volume types (volumes \"b1\", \"c1\" use restricted volume types \"hostPath\", \"nfs\")",
        ),
        (
            // hostPath is reported once at restricted: restrictedVolumes
            // replaces the baseline hostPath check.
            "restricted:v1.0",
            json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}],
                   "containers": [good("a", json!({}))]}),
            "restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")",
        ),
        (
            "restricted:latest",
            json!({"containers": [good("a", json!({"capabilities": {"add": ["SYS_ADMIN", "NET_BIND_SERVICE"]}})),
                                  good("b", json!({"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}))]}),
            "unrestricted capabilities (container \"a\" must set securityContext.capabilities.drop=[\"ALL\"]; \
             containers \"a\", \"b\" must not include \"CHOWN\", \"SYS_ADMIN\" in securityContext.capabilities.add)",
        ),
        (
            // Before 1.22 the baseline capabilities check runs instead.
            "restricted:v1.21",
            json!({"containers": [good("a", json!({"capabilities": {"add": ["CHOWN", "SYS_ADMIN"]}}))]}),
            "non-default capabilities (container \"a\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)",
        ),
        (
            // An explicit false wins over the unset containers' message.
            "restricted:latest",
            json!({"securityContext": {"runAsNonRoot": false},
                   "containers": [good("a", json!({"runAsNonRoot": null})), good("c", json!({"runAsNonRoot": false}))]}),
            "runAsNonRoot != true (pod and container \"c\" must not set securityContext.runAsNonRoot=false)",
        ),
        (
            "restricted:latest",
            json!({"securityContext": {"runAsNonRoot": true},
                   "containers": [good("a", json!({"runAsNonRoot": null}))]}),
            "",
        ),
        (
            "restricted:latest",
            json!({"securityContext": {"runAsUser": 0},
                   "containers": [good("a", json!({"runAsUser": 0})), good("b", json!({"runAsUser": 1000}))]}),
            "runAsUser=0 (pod and container \"a\" must not set runAsUser=0)",
        ),
        (
            // runAsUser came with 1.23.
            "restricted:v1.22",
            json!({"securityContext": {"runAsUser": 0}, "containers": [good("a", json!({}))]}),
            "",
        ),
        (
            "restricted:latest",
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}},
                   "containers": [good("c", json!({"seccompProfile": {"type": "Unconfined"}})),
                                  good("e", json!({"seccompProfile": null}))]}),
            "seccompProfile (pod and container \"c\" must not set securityContext.seccompProfile.type to \"Unconfined\")",
        ),
        (
            "restricted:latest",
            json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
                   "containers": [good("a", json!({"seccompProfile": null}))]}),
            "",
        ),
        (
            // Windows pods skip three restricted checks from 1.25 (but not
            // runAsNonRoot).
            "restricted:latest",
            json!({"os": {"name": "windows"}, "containers": [{"name": "w", "image": "i"}]}),
            "runAsNonRoot != true (pod or container \"w\" must set securityContext.runAsNonRoot=true)",
        ),
        (
            "restricted:v1.24",
            json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true},
                   "containers": [{"name": "w", "image": "i"}]}),
            "allowPrivilegeEscalation != false (container \"w\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"w\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             seccompProfile (pod or container \"w\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
        ),
        (
            // Ephemeral containers are checked too, after the others.
            "restricted:latest",
            json!({"containers": [good("a", json!({}))],
                   "ephemeralContainers": [{"name": "debug", "image": "i", "securityContext": {"privileged": true}}]}),
            "privileged (container \"debug\" must not set securityContext.privileged=true), \
             allowPrivilegeEscalation != false (container \"debug\" must set securityContext.allowPrivilegeEscalation=false), \
             unrestricted capabilities (container \"debug\" must set securityContext.capabilities.drop=[\"ALL\"]), \
             runAsNonRoot != true (pod or container \"debug\" must set securityContext.runAsNonRoot=true), \
             seccompProfile (pod or container \"debug\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
        ),
    ];
    for (at, spec, want) in cases {
        assert_eq!(detail(at, pod(spec.clone())), want, "{at} {spec}");
    }
}

#[test]
fn checks_are_listed_in_kubes_order() {
    for list in [BASELINE, RESTRICTED] {
        let ids: Vec<&str> = list.iter().map(|c| c.id).collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted);
        for c in list {
            assert!(
                c.variants.windows(2).all(|w| w[0].since < w[1].since),
                "{}",
                c.id
            );
        }
    }
    let newest = BASELINE
        .iter()
        .chain(RESTRICTED)
        .flat_map(|c| c.variants.iter().map(|v| v.since))
        .max();
    assert_eq!(newest, Some(NEWEST_MINOR));
    // At restricted:latest, 8 baseline checks (3 replaced) and 6
    // restricted ones run.
    assert_eq!(for_level(Level::Restricted, NEWEST_MINOR).count(), 8 + 6);
    assert_eq!(for_level(Level::Baseline, NEWEST_MINOR).count(), 11);
}

/// Every pod of k8s.io/pod-security-admission's conformance fixtures
/// (`test/testdata/<level>/v1.<n>/{pass,fail}/*.yaml` at the v0.33.0 tag,
/// 3,800 pods) decided as kube decides it. The fixtures are not ours to
/// commit: run with `PSA_FIXTURES=<checkout>/test/testdata cargo test -p
/// kubeforge-podsecurity -- --ignored`.
#[test]
#[ignore = "needs PSA_FIXTURES: a checkout of k8s.io/pod-security-admission's test/testdata"]
fn upstream_fixtures() {
    let root = std::env::var("PSA_FIXTURES")
        .expect("set PSA_FIXTURES to pod-security-admission's test/testdata");
    let mut checked = 0;
    let mut wrong = Vec::new();
    for level in ["baseline", "restricted"] {
        let Ok(versions) = std::fs::read_dir(format!("{root}/{level}")) else {
            panic!("{root}/{level} cannot be read");
        };
        for version in versions.flatten() {
            let v = version.file_name().to_string_lossy().to_string();
            for (outcome, allowed) in [("pass", true), ("fail", false)] {
                let Ok(files) = std::fs::read_dir(version.path().join(outcome)) else {
                    continue;
                };
                for f in files.flatten() {
                    let text = std::fs::read_to_string(f.path()).expect("read fixture");
                    let mut pod: Value = serde_saphyr::from_str(&text).expect("fixture YAML");
                    // As kube's fixture test, after v1 defaulting: a
                    // volume without a source is an emptyDir.
                    for v in pod
                        .pointer_mut("/spec/volumes")
                        .and_then(Value::as_array_mut)
                        .into_iter()
                        .flatten()
                    {
                        if v.as_object().is_some_and(|o| o.len() == 1) {
                            v["emptyDir"] = json!({});
                        }
                    }
                    let got = detail(&format!("{level}:{v}"), pod);
                    checked += 1;
                    if got.is_empty() != allowed {
                        wrong.push(format!("{level}/{v}/{outcome}/{:?}: {got}", f.file_name()));
                    }
                }
            }
        }
    }
    assert!(checked > 3000, "only {checked} fixtures found under {root}");
    assert!(
        wrong.is_empty(),
        "{} of {checked} decided otherwise:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
