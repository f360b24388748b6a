//! A CRD with defaults, an int-or-string field, a CEL rule, printer columns
//! and scale/status subresources, driven with the real kubectl.

mod common;

use common::{Cluster, default_kubectl, fixture};

#[test]
fn crd_in_depth_with_kubectl() {
    let k = default_kubectl();
    let c = Cluster::start(&[]);
    c.ok(
        &k,
        &["apply", "-f", &fixture("webapp-crd.yaml").to_string_lossy()],
    );
    c.ok(
        &k,
        &[
            "wait",
            "--for=condition=Established",
            "crd/webapps.demo.example.com",
        ],
    );
    let bad = "apiVersion: demo.example.com/v1\nkind: WebApp\nmetadata:\n  name: bad\nspec:\n  replicas: 1\n  minReplicas: 3\n";
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(bad));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("minReplicas must not exceed replicas"),
        "violating object: {err}"
    );
    let good = "apiVersion: demo.example.com/v1\nkind: WebApp\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  maxSurge: 2\n  image: nginx\n";
    let out = c.kubectl_stdin(&k, &["apply", "-f", "-"], Some(good));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Defaults applied; int-or-string kept as an integer.
    let got = c.ok(
        &k,
        &[
            "get",
            "webapp",
            "web",
            "-o",
            "jsonpath={.spec.minReplicas} {.spec.maxSurge}",
        ],
    );
    assert_eq!(got, "1 2");
    // Printer columns.
    let table = c.ok(&k, &["get", "wa"]);
    let header = table.lines().next().unwrap_or_default();
    for col in ["NAME", "REPLICAS", "MIN", "SURGE", "AGE"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("web") && l.contains('3')),
        "{table}"
    );
    // Scale.
    c.ok(&k, &["scale", "webapp", "web", "--replicas=5"]);
    assert_eq!(
        c.ok(
            &k,
            &["get", "webapp", "web", "-o", "jsonpath={.spec.replicas}"]
        ),
        "5"
    );
    // Scaling below minReplicas is refused by the rule.
    let out = c.kubectl(
        &k,
        &[
            "patch",
            "webapp",
            "web",
            "--type=merge",
            "-p",
            "{\"spec\":{\"minReplicas\":9}}",
        ],
    );
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr)
                .contains("minReplicas must not exceed replicas")
    );
    // Status writes through /status do not bump generation; spec writes do.
    let gen_before = c.ok(
        &k,
        &[
            "get",
            "webapp",
            "web",
            "-o",
            "jsonpath={.metadata.generation}",
        ],
    );
    c.ok(
        &k,
        &[
            "patch",
            "webapp",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            "{\"status\":{\"replicas\":5,\"selector\":\"app=web\"}}",
        ],
    );
    let after = c.ok(
        &k,
        &[
            "get",
            "webapp",
            "web",
            "-o",
            "jsonpath={.metadata.generation} {.status.replicas}",
        ],
    );
    assert_eq!(after, format!("{gen_before} 5"));
    c.ok(&k, &["label", "webapp", "web", "team=a"]);
    assert_eq!(
        c.ok(
            &k,
            &[
                "get",
                "webapp",
                "web",
                "-o",
                "jsonpath={.metadata.generation}"
            ]
        ),
        gen_before,
        "metadata-only changes keep generation"
    );
    c.ok(
        &k,
        &[
            "patch",
            "webapp",
            "web",
            "--type=merge",
            "-p",
            "{\"spec\":{\"image\":\"nginx:2\"}}",
        ],
    );
    let gen_after: u64 = c
        .ok(
            &k,
            &[
                "get",
                "webapp",
                "web",
                "-o",
                "jsonpath={.metadata.generation}",
            ],
        )
        .parse()
        .expect("gen");
    assert_eq!(gen_after, gen_before.parse::<u64>().expect("gen") + 1);
    c.stop();
}
