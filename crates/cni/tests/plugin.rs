//! The built `kubeforge-cni` binary run for real against namespaces and
//! bridges the tests make themselves (names `kfcni…`, subnets 10.250.x.0/24
//! that exist only on those bridges), as root.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{Value, json};

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn add_check_del_two_namespaces_and_ping() {
    let mut f = Fixture::new("pair", 2);
    f.own_link("kfcni0");
    let conf = netconf(
        "kubeforge-cni",
        "1.0.0",
        "kfpair",
        "kfcni0",
        "10.250.0.0/24",
        f.dir(),
    );

    let a = cni(OURS, "ADD", "c0", &f.path(0), "eth0", &conf);
    assert_eq!(a.code, 0, "{}", a.json);
    let b = cni(OURS, "ADD", "c1", &f.path(1), "eth0", &conf);
    assert_eq!(b.code, 0, "{}", b.json);

    let r = &a.json;
    assert_eq!(r["cniVersion"], "1.0.0");
    let ifaces = r["interfaces"].as_array().expect("interfaces");
    assert_eq!(ifaces.len(), 3);
    assert_eq!(ifaces[0]["name"], "kfcni0");
    assert!(
        ifaces[1]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("veth") && n.len() == 12),
        "{r}"
    );
    assert_eq!(ifaces[2]["name"], "eth0");
    assert_eq!(ifaces[2]["sandbox"], f.path(0));
    assert_eq!(r["ips"][0]["address"], "10.250.0.2/24");
    assert_eq!(r["ips"][0]["gateway"], "10.250.0.1");
    assert_eq!(r["ips"][0]["interface"], 2);
    assert!(r["ips"][0].get("version").is_none());
    assert_eq!(
        r["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.250.0.1"}])
    );
    assert_eq!(b.json["ips"][0]["address"], "10.250.0.3/24");
    // host-local's store layout.
    assert_eq!(
        f.store_files("kfpair"),
        ["10.250.0.2", "10.250.0.3", "last_reserved_ip.0", "lock"]
    );
    let content =
        std::fs::read_to_string(f.dir().join("kfpair/10.250.0.2")).expect("allocation file");
    assert_eq!(content, "c0\r\neth0");
    // The kernel agrees with the result.
    let addrs = sh(
        "ip",
        &[
            "netns",
            "exec",
            &f.netns[0],
            "ip",
            "-o",
            "addr",
            "show",
            "dev",
            "eth0",
        ],
    );
    assert!(addrs.contains("10.250.0.2/24"), "{addrs}");
    let routes = sh("ip", &["netns", "exec", &f.netns[0], "ip", "route"]);
    assert!(
        routes.contains("default via 10.250.0.1 dev eth0"),
        "{routes}"
    );
    let hairpin = std::fs::read_to_string(format!(
        "/sys/class/net/{}/brport/hairpin_mode",
        ifaces[1]["name"].as_str().unwrap_or_default()
    ));
    assert_eq!(
        hairpin.map(|s| s.trim().to_string()).ok(),
        Some("1".to_string())
    );

    assert!(
        ping(&f.netns[0], "10.250.0.3"),
        "netns 0 cannot reach netns 1"
    );
    assert!(
        ping(&f.netns[1], "10.250.0.2"),
        "netns 1 cannot reach netns 0"
    );
    assert!(
        ping(&f.netns[0], "10.250.0.1"),
        "netns 0 cannot reach the gateway"
    );

    let check = cni(
        OURS,
        "CHECK",
        "c0",
        &f.path(0),
        "eth0",
        &with_prev(&conf, &a.json),
    );
    assert_eq!((check.code, &check.json), (0, &Value::Null));
    // CHECK notices a missing address.
    sh(
        "ip",
        &[
            "netns",
            "exec",
            &f.netns[1],
            "ip",
            "addr",
            "flush",
            "dev",
            "eth0",
        ],
    );
    let check = cni(
        OURS,
        "CHECK",
        "c1",
        &f.path(1),
        "eth0",
        &with_prev(&conf, &b.json),
    );
    assert_ne!(check.code, 0);
    assert_eq!(check.json["code"], 102, "{}", check.json);

    for (i, prev) in [(0, &a.json), (1, &b.json)] {
        for _ in 0..2 {
            let d = cni(
                OURS,
                "DEL",
                &format!("c{i}"),
                &f.path(i),
                "eth0",
                &with_prev(&conf, prev),
            );
            assert_eq!(
                (d.code, &d.json),
                (0, &Value::Null),
                "DEL must be idempotent"
            );
        }
    }
    assert_eq!(f.store_files("kfpair"), ["last_reserved_ip.0", "lock"]);
    let links = sh("ip", &["netns", "exec", &f.netns[0], "ip", "-o", "link"]);
    assert!(!links.contains("eth0"), "{links}");
    // DEL of a path that is not a namespace, of one that no longer exists, and without one, still succeeds.
    let not_ns = f.dir().join("not-a-netns");
    std::fs::write(&not_ns, "").expect("writing a plain file");
    let d = cni(OURS, "DEL", "c0", &not_ns.to_string_lossy(), "eth0", &conf);
    assert_eq!(d.code, 0, "{}", d.json);
    let d = cni(
        OURS,
        "DEL",
        "c0",
        "/var/run/netns/kfcni-test-gone",
        "eth0",
        &conf,
    );
    assert_eq!(d.code, 0, "{}", d.json);
    let d = cni_env(
        OURS,
        &[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c0"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/usr/lib/cni"),
        ],
        conf.to_string().as_bytes(),
    );
    assert_eq!(d.code, 0, "{}", d.json);
}

#[test]
fn result_format_follows_the_requested_version() {
    let mut f = Fixture::new("ver", 1);
    f.own_link("kfcni1");
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let conf = netconf(
            "kubeforge-cni",
            version,
            "kfver",
            "kfcni1",
            "10.250.1.0/24",
            f.dir(),
        );
        let a = cni(OURS, "ADD", "c0", &f.path(0), "eth0", &conf);
        assert_eq!(a.code, 0, "{version}: {}", a.json);
        assert_eq!(a.json["cniVersion"], version);
        let ip = &a.json["ips"][0];
        assert_eq!(ip["interface"], 2);
        if version.starts_with("0.") {
            assert_eq!(ip["version"], "4", "{version}: {ip}");
        } else {
            assert!(ip.get("version").is_none(), "{version}: {ip}");
        }
        let mtu = a.json["interfaces"][2].get("mtu");
        assert_eq!(mtu.is_some(), version == "1.1.0", "{version}");
        let check = cni(
            OURS,
            "CHECK",
            "c0",
            &f.path(0),
            "eth0",
            &with_prev(&conf, &a.json),
        );
        if version.starts_with("0.3") {
            assert_eq!(check.json["code"], 1, "CHECK is not in {version}");
        } else {
            assert_eq!(check.code, 0, "{version}: {}", check.json);
        }
        let d = cni(
            OURS,
            "DEL",
            "c0",
            &f.path(0),
            "eth0",
            &with_prev(&conf, &a.json),
        );
        assert_eq!(d.code, 0, "{}", d.json);
    }
}

#[test]
fn gc_and_status() {
    let mut f = Fixture::new("gc", 2);
    f.own_link("kfcni2");
    f.own_link("kfcni2x");
    // A /29: .2-.6 allocatable (.1 is the gateway, .7 broadcast).
    let conf = netconf(
        "kubeforge-cni",
        "1.1.0",
        "kfgc",
        "kfcni2",
        "10.250.2.0/29",
        f.dir(),
    );
    for i in 0..2 {
        let a = cni(OURS, "ADD", &format!("c{i}"), &f.path(i), "eth0", &conf);
        assert_eq!(a.code, 0, "{}", a.json);
    }
    let status = cni_env(
        OURS,
        &[("CNI_COMMAND", "STATUS")],
        conf.to_string().as_bytes(),
    );
    assert_eq!((status.code, &status.json), (0, &Value::Null));
    // A stale allocation, as a crashed runtime leaves behind.
    std::fs::write(f.dir().join("kfgc/10.250.2.6"), "stale\r\neth0")
        .expect("writing a stale allocation");
    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] = json!([{"containerID": "c0", "ifname": "eth0"}]);
    let gc = cni_env(
        OURS,
        &[("CNI_COMMAND", "GC"), ("CNI_PATH", "/usr/lib/cni")],
        gc_conf.to_string().as_bytes(),
    );
    assert_eq!((gc.code, &gc.json), (0, &Value::Null));
    assert_eq!(
        f.store_files("kfgc"),
        ["10.250.2.2", "last_reserved_ip.0", "lock"]
    );
    // GC is 1.1.0 only.
    gc_conf["cniVersion"] = json!("1.0.0");
    let gc = cni_env(
        OURS,
        &[("CNI_COMMAND", "GC")],
        gc_conf.to_string().as_bytes(),
    );
    assert_eq!(gc.json["code"], 1);

    // Fill the range: STATUS says 50.
    for ip in [3, 4, 5, 6] {
        std::fs::write(
            f.dir().join(format!("kfgc/10.250.2.{ip}")),
            format!("x{ip}\r\neth0"),
        )
        .expect("filling");
    }
    let status = cni_env(
        OURS,
        &[("CNI_COMMAND", "STATUS")],
        conf.to_string().as_bytes(),
    );
    assert_eq!(status.json["code"], 50, "{}", status.json);
    let full = cni(OURS, "ADD", "c9", &f.path(1), "eth1", &conf);
    assert_eq!(full.json["code"], 101, "{}", full.json);
    assert!(
        !sh("ip", &["netns", "exec", &f.netns[1], "ip", "-o", "link"]).contains("eth1"),
        "a failed ADD leaves nothing behind"
    );

    // A bridge name taken by another kind of link: STATUS 50, ADD refused.
    sh(
        "ip",
        &[
            "link", "add", "kfcni2x", "type", "veth", "peer", "name", "kfcni2y",
        ],
    );
    let taken = netconf(
        "kubeforge-cni",
        "1.1.0",
        "kfgc2",
        "kfcni2x",
        "10.250.12.0/24",
        f.dir(),
    );
    let status = cni_env(
        OURS,
        &[("CNI_COMMAND", "STATUS")],
        taken.to_string().as_bytes(),
    );
    assert_eq!(status.json["code"], 50, "{}", status.json);
    let add = cni(OURS, "ADD", "c5", &f.path(1), "eth2", &taken);
    assert_eq!(add.json["code"], 103, "{}", add.json);
    assert_eq!(
        f.store_files("kfgc2"),
        ["lock"],
        "the allocation is not taken before the bridge check"
    );
}

#[test]
fn error_codes() {
    let f = Fixture::new("err", 1);
    let conf = netconf(
        "kubeforge-cni",
        "1.0.0",
        "kferr",
        "kfcni5",
        "10.250.5.0/24",
        f.dir(),
    );
    let env = |cmd: &'static str| -> Vec<(&'static str, String)> {
        vec![
            ("CNI_COMMAND", cmd.into()),
            ("CNI_CONTAINERID", "c0".into()),
            ("CNI_NETNS", f.path(0)),
            ("CNI_IFNAME", "eth0".into()),
            ("CNI_PATH", "/usr/lib/cni".into()),
        ]
    };
    let run = |env: &[(&str, String)], stdin: &[u8]| {
        let e: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        cni_env(OURS, &e, stdin)
    };
    let expect = |o: common::Outcome, code: u64, what: &str| {
        assert_ne!(o.code, 0, "{what}");
        assert_eq!(o.json["code"], code, "{what}: {}", o.json);
        assert!(
            o.json["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}"
        );
        assert!(o.json["cniVersion"].is_string(), "{what}");
    };
    expect(run(&env("ADD"), b"{not json"), 6, "undecodable config");
    let mut bad = conf.clone();
    bad["name"] = json!("bad name");
    expect(
        run(&env("ADD"), bad.to_string().as_bytes()),
        7,
        "invalid network name",
    );
    let mut bad = conf.clone();
    bad["ipam"]["ranges"] = json!([[{"subnet": "10.250.5.1/24"}]]);
    expect(
        run(&env("ADD"), bad.to_string().as_bytes()),
        7,
        "host bits set",
    );
    let mut masq = conf.clone();
    masq["ipMasq"] = json!(true);
    expect(run(&env("ADD"), masq.to_string().as_bytes()), 2, "ipMasq");
    for v in ["0.2.0", "2.0.0", ""] {
        let mut old = conf.clone();
        old["cniVersion"] = json!(v);
        expect(
            run(&env("ADD"), old.to_string().as_bytes()),
            1,
            "unsupported version",
        );
    }
    let mut no_netns = env("ADD");
    no_netns.retain(|(k, _)| *k != "CNI_NETNS");
    let o = run(&no_netns, conf.to_string().as_bytes());
    assert!(
        o.json["msg"]
            .as_str()
            .is_some_and(|m| m.contains("CNI_NETNS")),
        "{}",
        o.json
    );
    expect(o, 4, "missing CNI_NETNS");
    expect(
        run(&env("FROB"), conf.to_string().as_bytes()),
        4,
        "unknown command",
    );
    expect(run(&[], conf.to_string().as_bytes()), 4, "no CNI_COMMAND");
    let mut bad_if = env("ADD");
    bad_if[3].1 = "eth0/x".into();
    expect(
        run(&bad_if, conf.to_string().as_bytes()),
        4,
        "invalid CNI_IFNAME",
    );
    let mut gone = env("ADD");
    gone[2].1 = "/var/run/netns/kfcni-test-missing".into();
    expect(run(&gone, conf.to_string().as_bytes()), 5, "missing netns");
    expect(
        run(&env("CHECK"), conf.to_string().as_bytes()),
        7,
        "CHECK without prevResult",
    );

    let v = run(
        &[("CNI_COMMAND", "VERSION".into())],
        br#"{"cniVersion":"1.0.0"}"#,
    );
    assert_eq!(v.code, 0);
    assert_eq!(
        v.json,
        json!({"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    let v = run(&[("CNI_COMMAND", "VERSION".into())], b"");
    assert_eq!(v.json["cniVersion"], "1.1.0");
    // Nothing was made: no bridge, no allocation.
    assert!(!sh("ip", &["-o", "link"]).contains("kfcni5"));
}

#[test]
fn prev_result_is_extended() {
    let mut f = Fixture::new("chain", 1);
    f.own_link("kfcni6");
    let conf = netconf(
        "kubeforge-cni",
        "1.0.0",
        "kfchain",
        "kfcni6",
        "10.250.6.0/24",
        f.dir(),
    );
    let prev = json!({
        "cniVersion": "1.0.0",
        "interfaces": [{"name": "lo", "sandbox": f.path(0)}],
        "ips": [{"address": "127.0.0.1/8", "interface": 0}],
        "dns": {"nameservers": ["10.250.6.1"]}
    });
    let a = cni(
        OURS,
        "ADD",
        "c0",
        &f.path(0),
        "eth0",
        &with_prev(&conf, &prev),
    );
    assert_eq!(a.code, 0, "{}", a.json);
    let ifaces = a.json["interfaces"].as_array().expect("interfaces");
    assert_eq!(ifaces.len(), 4);
    assert_eq!(ifaces[0]["name"], "lo");
    assert_eq!(a.json["ips"][0]["address"], "127.0.0.1/8");
    assert_eq!(a.json["ips"][1]["interface"], 3);
    assert_eq!(a.json["dns"]["nameservers"], json!(["10.250.6.1"]));
    let check = cni(
        OURS,
        "CHECK",
        "c0",
        &f.path(0),
        "eth0",
        &with_prev(&conf, &a.json),
    );
    assert_eq!(check.code, 0, "{}", check.json);
    let d = cni(
        OURS,
        "DEL",
        "c0",
        &f.path(0),
        "eth0",
        &with_prev(&conf, &a.json),
    );
    assert_eq!(d.code, 0, "{}", d.json);
}

#[test]
fn concurrent_adds_from_processes_get_distinct_addresses() {
    let mut f = Fixture::new("conc", 6);
    f.own_link("kfcni7");
    let conf = netconf(
        "kubeforge-cni",
        "1.0.0",
        "kfconc",
        "kfcni7",
        "10.250.7.0/24",
        f.dir(),
    );
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|i| {
                let (f, conf) = (&f, &conf);
                s.spawn(move || cni(OURS, "ADD", &format!("c{i}"), &f.path(i), "eth0", conf))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .map(|o| {
                assert_eq!(o.code, 0, "{}", o.json);
                o.json
            })
            .collect()
    });
    let addrs: BTreeSet<String> = results
        .iter()
        .map(|r| r["ips"][0]["address"].to_string())
        .collect();
    assert_eq!(addrs.len(), 6, "{addrs:?}");
}

#[test]
fn same_shape_and_connectivity_as_the_reference_bridge_plugin() {
    assert!(
        std::path::Path::new(REFERENCE_BRIDGE).exists(),
        "{REFERENCE_BRIDGE} missing: apt-get install -y containernetworking-plugins"
    );
    let mut f = Fixture::new("ref", 4);
    f.own_link("kfcni3");
    f.own_link("kfcni4");
    let theirs = netconf(
        "bridge",
        "1.0.0",
        "kfref",
        "kfcni3",
        "10.250.3.0/24",
        f.dir(),
    );
    let ours = netconf(
        "kubeforge-cni",
        "1.0.0",
        "kfours",
        "kfcni4",
        "10.250.4.0/24",
        f.dir(),
    );
    let t = [
        cni(REFERENCE_BRIDGE, "ADD", "r0", &f.path(0), "eth0", &theirs),
        cni(REFERENCE_BRIDGE, "ADD", "r1", &f.path(1), "eth0", &theirs),
    ];
    let o = [
        cni(OURS, "ADD", "o0", &f.path(2), "eth0", &ours),
        cni(OURS, "ADD", "o1", &f.path(3), "eth0", &ours),
    ];
    for r in t.iter().chain(&o) {
        assert_eq!(r.code, 0, "{}", r.json);
    }
    let (t0, o0) = (&t[0].json, &o[0].json);
    assert_eq!(
        keys(t0),
        keys(o0),
        "top-level keys\nreference: {t0}\nours: {o0}"
    );
    let ti = t0["interfaces"].as_array().expect("reference interfaces");
    let oi = o0["interfaces"].as_array().expect("our interfaces");
    assert_eq!(ti.len(), oi.len());
    for (a, b) in ti.iter().zip(oi) {
        assert_eq!(
            keys(a),
            keys(b),
            "interface keys\nreference: {a}\nours: {b}"
        );
    }
    assert_eq!(ti[2]["name"], oi[2]["name"]);
    assert_eq!(ti[2]["sandbox"], f.path(0));
    assert_eq!(oi[2]["sandbox"], f.path(2));
    let (tip, oip) = (&t0["ips"][0], &o0["ips"][0]);
    assert_eq!(
        keys(tip),
        keys(oip),
        "ips keys\nreference: {tip}\nours: {oip}"
    );
    assert_eq!(tip["address"], "10.250.3.2/24");
    assert_eq!(oip["address"], "10.250.4.2/24");
    assert_eq!(tip["gateway"], "10.250.3.1");
    assert_eq!(oip["gateway"], "10.250.4.1");
    assert_eq!(tip["interface"], oip["interface"]);
    assert_eq!(
        t0["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.250.3.1"}])
    );
    assert_eq!(
        o0["routes"],
        json!([{"dst": "0.0.0.0/0", "gw": "10.250.4.1"}])
    );
    assert_eq!(t0["dns"], o0["dns"]);
    // Same store layout: both wrote host-local's files.
    assert_eq!(
        f.store_files("kfref"),
        ["10.250.3.2", "10.250.3.3", "last_reserved_ip.0", "lock"]
    );
    assert_eq!(
        f.store_files("kfours"),
        ["10.250.4.2", "10.250.4.3", "last_reserved_ip.0", "lock"]
    );
    assert_eq!(
        std::fs::read_to_string(f.dir().join("kfref/10.250.3.2"))
            .ok()
            .as_deref(),
        Some("r0\r\neth0")
    );

    assert!(
        ping(&f.netns[0], "10.250.3.3"),
        "reference: no connectivity"
    );
    assert!(ping(&f.netns[2], "10.250.4.3"), "ours: no connectivity");
    // Each CHECKs its own result.
    assert_eq!(
        cni(
            REFERENCE_BRIDGE,
            "CHECK",
            "r0",
            &f.path(0),
            "eth0",
            &with_prev(&theirs, t0)
        )
        .code,
        0
    );
    assert_eq!(
        cni(
            OURS,
            "CHECK",
            "o0",
            &f.path(2),
            "eth0",
            &with_prev(&ours, o0)
        )
        .code,
        0
    );
    for (i, (plugin, conf, id)) in [
        (REFERENCE_BRIDGE, &theirs, "r0"),
        (REFERENCE_BRIDGE, &theirs, "r1"),
        (OURS, &ours, "o0"),
        (OURS, &ours, "o1"),
    ]
    .into_iter()
    .enumerate()
    {
        let d = cni(plugin, "DEL", id, &f.path(i), "eth0", conf);
        assert_eq!(d.code, 0, "{}", d.json);
    }
}
