//! Tests of the protobuf decoder: bodies captured from kubectl 1.33/1.32
//! (`tests/fixtures/protobuf/*.bin`) and hand-built edge cases.

use serde_json::json;

use super::*;

macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/protobuf/",
            $name,
            ".bin"
        ))
    };
}

fn ok(bytes: &[u8]) -> Value {
    match decode(bytes) {
        Ok(v) => v,
        Err(e) => panic!("decode failed: {e}"),
    }
}

// ------------------------------------------------------------ a tiny encoder

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn key(number: u32, wire: u8) -> Vec<u8> {
    varint(u64::from(number) << 3 | u64::from(wire))
}

fn vint(number: u32, v: u64) -> Vec<u8> {
    [key(number, 0), varint(v)].concat()
}

fn bytes(number: u32, payload: &[u8]) -> Vec<u8> {
    [
        key(number, 2),
        varint(payload.len() as u64),
        payload.to_vec(),
    ]
    .concat()
}

fn s(number: u32, text: &str) -> Vec<u8> {
    bytes(number, text.as_bytes())
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [s(1, api_version), s(2, kind)].concat();
    [MAGIC.to_vec(), bytes(1, &type_meta), bytes(2, raw)].concat()
}

fn message(name: &str) -> usize {
    match find_message(name) {
        Some(i) => i,
        None => panic!("no message {name}"),
    }
}

fn decode_as(name: &str, buf: &[u8]) -> Result<Value, String> {
    decode_message(buf, message(name), 1)
}

// ------------------------------------------------------------ captured bodies

#[test]
fn kubectl_create_namespace() {
    let want = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}});
    assert_eq!(ok(fixture!("namespace")), want);
    let want = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo132"}});
    assert_eq!(ok(fixture!("namespace-1.32")), want);
}

#[test]
fn kubectl_create_configmap_keeps_empty_values() {
    assert_eq!(
        ok(fixture!("configmap")),
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "default"},
            "data": {"a": "b", "empty": ""}
        })
    );
}

#[test]
fn kubectl_create_deployment() {
    let v = ok(fixture!("deployment"));
    assert_eq!(
        v,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "nginx",
                        "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}]
                    }]}
                }
            }
        })
    );
    let multi = ok(fixture!("deployment-multi"));
    assert_eq!(
        multi["spec"]["template"]["spec"]["containers"],
        json!([{"name": "nginx", "image": "nginx"}, {"name": "redis", "image": "redis"}])
    );
}

#[test]
fn pointer_zero_survives() {
    // kubectl 1.32 `create deployment --replicas=0`: `replicas` is *int32.
    let v = ok(fixture!("deployment-zero-replicas-1.32"));
    assert_eq!(v["spec"]["replicas"], json!(0));
    assert_eq!(v["metadata"]["name"], json!("web132"));
}

#[test]
fn kubectl_create_secrets_are_base64() {
    assert_eq!(
        ok(fixture!("secret")),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}})
    );
    let v = ok(fixture!("secret-docker-registry"));
    assert_eq!(v["type"], json!("kubernetes.io/dockerconfigjson"));
    let encoded = v["data"][".dockerconfigjson"].as_str().unwrap_or_default();
    let decoded = BASE64.decode(encoded).unwrap_or_default();
    let config: Value = serde_json::from_slice(&decoded).unwrap_or_default();
    assert_eq!(config["auths"]["r.io"]["username"], json!("u"));
}

#[test]
fn kubectl_create_job_and_cronjob() {
    assert_eq!(
        ok(fixture!("job")),
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {
                "containers": [{"name": "j", "image": "busybox"}],
                "restartPolicy": "Never"
            }}}
        })
    );
    let cj = ok(fixture!("cronjob"));
    assert_eq!(cj["spec"]["schedule"], json!("*/5 * * * *"));
    assert_eq!(
        cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["echo", "hi"])
    );
}

#[test]
fn kubectl_create_service_int_or_string() {
    assert_eq!(
        ok(fixture!("service")),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "svc", "labels": {"app": "svc"}},
            "spec": {
                "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                "selector": {"app": "svc"},
                "type": "ClusterIP"
            }
        })
    );
    let pdb = ok(fixture!("pdb-max-unavailable"));
    assert_eq!(pdb["spec"]["maxUnavailable"], json!("50%"));
    let pdb = ok(fixture!("pdb-min-available"));
    assert_eq!(pdb["spec"]["minAvailable"], json!(1));
    assert_eq!(
        pdb["spec"]["selector"],
        json!({"matchLabels": {"app": "api"}})
    );
}

#[test]
fn kubectl_create_misc() {
    let quota = ok(fixture!("resourcequota"));
    assert_eq!(
        quota["spec"]["hard"],
        json!({"cpu": "1", "memory": "1Gi", "pods": "10"})
    );

    let sa = ok(fixture!("serviceaccount"));
    assert_eq!(
        sa,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}})
    );

    let role = ok(fixture!("role"));
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}])
    );
    let rb = ok(fixture!("rolebinding"));
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"})
    );
    assert_eq!(
        rb["subjects"],
        json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}])
    );

    let pc = ok(fixture!("priorityclass"));
    assert_eq!(pc["value"], json!(1000));
    assert_eq!(pc["description"], json!("d"));

    // IngressRule.IngressRuleValue is inlined: `http` sits beside `host`.
    let ing = ok(fixture!("ingress"));
    assert_eq!(
        ing["spec"]["rules"],
        json!([{"host": "foo.com", "http": {"paths": [{
            "path": "/bar",
            "pathType": "Prefix",
            "backend": {"service": {"name": "svc", "port": {"number": 8080}}}
        }]}}])
    );

    let ssar = ok(fixture!("selfsubjectaccessreview"));
    assert_eq!(ssar["apiVersion"], json!("authorization.k8s.io/v1"));
    assert_eq!(
        ssar["spec"]["resourceAttributes"],
        json!({"namespace": "default", "verb": "get", "resource": "pods"})
    );
    let token = ok(fixture!("tokenrequest"));
    assert_eq!(token["kind"], json!("TokenRequest"));
}

#[test]
fn every_prefix_of_a_fixture_is_handled() {
    let full = fixture!("deployment");
    for n in 0..full.len() {
        let _ = decode(&full[..n]); // must not panic
    }
    assert!(decode(&full[..full.len() - 1]).is_err());
    assert!(decode(&full[..full.len() / 2]).is_err());
    assert!(decode(&full[..3]).is_err());
    assert!(decode(&[]).is_err());
}

// ------------------------------------------------------------ edge cases

#[test]
fn wrong_magic() {
    let mut bad = fixture!("namespace").to_vec();
    bad[0] = b'K';
    assert!(decode(&bad).is_err());
    assert!(decode(b"{\"kind\":\"Namespace\"}").is_err());
}

#[test]
fn unknown_kind() {
    let body = envelope("apps/v9", "Foo", &[]);
    assert_eq!(
        decode(&body),
        Err("no protobuf schema for apps/v9 Foo".to_string())
    );
    // A CRD group never maps onto a built-in package.
    let body = envelope("apps.example.com/v1", "Deployment", &[]);
    assert!(decode(&body).is_err());
    assert!(decode(&envelope("v1", "", &[])).is_err());
    assert!(decode(&envelope("v1", "../Pod", &[])).is_err());
}

#[test]
fn meta_kinds_resolve_in_any_group() {
    let raw = [vint(1, 30), s(4, "Foreground")].concat();
    let v = ok(&envelope("v1", "DeleteOptions", &raw));
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30, "propagationPolicy": "Foreground"})
    );
    let v = ok(&envelope("apps/v1", "DeleteOptions", &raw));
    assert_eq!(v["propagationPolicy"], json!("Foreground"));
}

#[test]
fn unknown_fields_are_skipped() {
    let meta = s(1, "demo");
    let raw = [
        vint(99, 7),
        bytes(1, &meta),
        bytes(100, b"junk"),
        // a group (wire types 3/4) holding a varint
        key(101, 3),
        vint(1, 5),
        key(101, 4),
        [key(102, 5), vec![1, 2, 3, 4]].concat(),
        [key(103, 1), vec![1, 2, 3, 4, 5, 6, 7, 8]].concat(),
    ]
    .concat();
    assert_eq!(
        ok(&envelope("v1", "Namespace", &raw)),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}})
    );
}

#[test]
fn packed_and_unpacked_repeated_scalars() {
    let name = "k8s.io.api.batch.v1.PodFailurePolicyOnExitCodesRequirement";
    let packed = [varint(1), varint(2), varint(u64::MAX), varint(300)].concat();
    let buf = [s(2, "In"), bytes(3, &packed)].concat();
    assert_eq!(
        decode_as(name, &buf),
        Ok(json!({"operator": "In", "values": [1, 2, -1, 300]}))
    );
    let buf = [s(2, "In"), vint(3, 1), vint(3, 2), vint(3, 3)].concat();
    assert_eq!(
        decode_as(name, &buf),
        Ok(json!({"operator": "In", "values": [1, 2, 3]}))
    );
    let buf = [vint(3, 1), bytes(3, &[2, 3]), vint(3, 4)].concat();
    assert_eq!(
        decode_as(name, &buf),
        Ok(json!({"values": [1, 2, 3, 4]})),
        "absent fields stay absent"
    );
    // A truncated packed varint is an error.
    assert!(decode_as(name, &bytes(3, &[0x80])).is_err());
}

#[test]
fn wrong_wire_type_is_an_error() {
    // Namespace.metadata as a varint.
    assert!(decode(&envelope("v1", "Namespace", &vint(1, 1))).is_err());
    // ObjectMeta.name as a varint.
    assert!(decode(&envelope("v1", "Namespace", &bytes(1, &vint(1, 1)))).is_err());
}

#[test]
fn nesting_is_bounded() {
    // ControllerRevision.data is a RawExtension, which may hold another
    // protobuf object: nest them far deeper than allowed.
    let mut body = envelope("apps/v1", "ControllerRevision", &[]);
    for _ in 0..100 {
        let raw_extension = bytes(1, &body);
        body = envelope("apps/v1", "ControllerRevision", &bytes(2, &raw_extension));
    }
    let err = decode(&body).err().unwrap_or_default();
    assert!(err.contains("deeper"), "{err}");

    let mut body = envelope("apps/v1", "ControllerRevision", &vint(3, 7));
    for _ in 0..3 {
        let raw_extension = bytes(1, &body);
        body = envelope("apps/v1", "ControllerRevision", &bytes(2, &raw_extension));
    }
    let v = ok(&body);
    assert_eq!(v["data"]["data"]["data"]["revision"], json!(7));
    assert_eq!(v["data"]["kind"], json!("ControllerRevision"));
    assert_eq!(v.get("revision"), None, "absent on the wire");
    // `revision` is not omitempty: a zero written on the wire is kept.
    let v = ok(&envelope("apps/v1", "ControllerRevision", &vint(3, 0)));
    assert_eq!(v["revision"], json!(0));
}

#[test]
fn raw_extension_json_and_bytes() {
    let raw = bytes(2, &bytes(1, br#"{"a":[1,2]}"#));
    let v = ok(&envelope("apps/v1", "ControllerRevision", &raw));
    assert_eq!(v["data"], json!({"a": [1, 2]}));
    let raw = bytes(2, &bytes(1, &[0xff, 0x00]));
    let v = ok(&envelope("apps/v1", "ControllerRevision", &raw));
    assert_eq!(v["data"], json!("/wA="));
}

#[test]
fn pod_inlines_and_pointers() {
    // Volume{name: "scratch", volumeSource: {emptyDir: {}}}
    let volume = [s(1, "scratch"), bytes(2, &bytes(2, &[]))].concat();
    // Probe{handler: {httpGet: {path: "/", port: {type: 1, strVal: "http"}}}, periodSeconds: 0}
    let port = [vint(1, 1), vint(2, 0), s(3, "http")].concat();
    let http_get = [s(1, "/"), bytes(2, &port)].concat();
    let probe = [bytes(1, &bytes(2, &http_get)), vint(4, 0)].concat();
    let container = [s(1, "c"), s(2, "busybox"), bytes(10, &probe), vint(16, 0)].concat();
    let spec = [
        bytes(1, &volume),
        bytes(2, &container),
        vint(21, 0), // automountServiceAccountToken: false (pointer)
        vint(11, 0), // hostNetwork: false (omitempty, dropped)
        vint(5, 0),  // activeDeadlineSeconds: 0 (pointer)
    ]
    .concat();
    let meta = [
        s(1, "p"),
        bytes(8, &[]), // creationTimestamp: zero time
        bytes(11, &[s(1, "app"), s(2, "")].concat()),
    ]
    .concat();
    let v = ok(&envelope(
        "v1",
        "Pod",
        &[bytes(1, &meta), bytes(2, &spec)].concat(),
    ));
    assert_eq!(
        v,
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"app": ""}},
            "spec": {
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [{
                    "name": "c",
                    "image": "busybox",
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"}}
                }],
                "automountServiceAccountToken": false,
                "activeDeadlineSeconds": 0
            }
        })
    );
}

#[test]
fn times_durations_and_managed_fields() {
    let first = [vint(1, 1_704_164_645), vint(2, 999_999_999)].concat();
    let event_time = [vint(1, 1_704_164_645), vint(2, 123_456_789)].concat();
    let raw = [
        bytes(6, &first),
        bytes(7, &[]), // lastTimestamp: zero
        bytes(10, &event_time),
        vint(8, (-1_i64) as u64), // count: -1 (int32 sign-extended)
    ]
    .concat();
    let v = ok(&envelope("v1", "Event", &raw));
    assert_eq!(v["firstTimestamp"], json!("2024-01-02T03:04:05Z"));
    assert_eq!(v["eventTime"], json!("2024-01-02T03:04:05.123456Z"));
    assert_eq!(v.get("lastTimestamp"), None);
    assert_eq!(v["count"], json!(-1));

    // Epoch 0 written explicitly is a real time, not the zero time.
    let t = decode_as("k8s.io.apimachinery.pkg.apis.meta.v1.Time", &vint(1, 0));
    assert_eq!(t, Ok(json!("1970-01-01T00:00:00Z")));
    let t = decode_as(
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
        &vint(1, u64::MAX - 1_000_000_000_000),
    );
    assert!(t.is_err());

    let d = |nanos: i64| {
        decode_as(
            "k8s.io.apimachinery.pkg.apis.meta.v1.Duration",
            &vint(1, nanos as u64),
        )
    };
    assert_eq!(d(3_600_000_000_000), Ok(json!("1h0m0s")));
    assert_eq!(d(30_000_000_000), Ok(json!("30s")));

    let entry = [
        s(1, "kubectl"),
        s(2, "Update"),
        s(6, "FieldsV1"),
        bytes(7, &bytes(1, br#"{"f:data":{".":{}}}"#)),
    ]
    .concat();
    let meta = [s(1, "x"), bytes(17, &entry)].concat();
    let v = ok(&envelope("v1", "ConfigMap", &bytes(1, &meta)));
    assert_eq!(
        v["metadata"]["managedFields"],
        json!([{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {".": {}}}}])
    );
    let bad = [s(1, "x"), bytes(17, &bytes(7, &bytes(1, b"{nope")))].concat();
    assert!(decode(&envelope("v1", "ConfigMap", &bytes(1, &bad))).is_err());
}

#[test]
fn go_duration_strings() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1), "1ns");
    assert_eq!(go_duration(1_500), "1.5µs");
    assert_eq!(go_duration(2_000_000), "2ms");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(-90_000_000_000), "-1m30s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(go_duration(3_661_000_000_001), "1h1m1.000000001s");
    assert_eq!(go_duration(i64::MIN), "-2562047h47m16.854775808s");
}

#[test]
fn string_list_wrappers_and_maps() {
    // APIResource.verbs is metav1.Verbs ([]string) → a JSON array.
    let verbs = [s(1, "get"), s(1, "list")].concat();
    let resource = [s(1, "pods"), vint(2, 0), s(8, ""), bytes(4, &verbs)].concat();
    let v = decode_as(
        "k8s.io.apimachinery.pkg.apis.meta.v1.APIResource",
        &resource,
    );
    // `namespaced` has no omitempty (kept); `group` has (dropped).
    assert_eq!(
        v,
        Ok(json!({"name": "pods", "namespaced": false, "verbs": ["get", "list"]}))
    );
    // Secret.data map<string, bytes> with a missing value; a ConfigMap's
    // binaryData likewise.
    let raw = [
        bytes(2, &s(1, "empty")),
        bytes(2, &[s(1, "k"), bytes(2, b"v")].concat()),
    ]
    .concat();
    let v = ok(&envelope("v1", "Secret", &raw));
    assert_eq!(v["data"], json!({"empty": "", "k": "dg=="}));
    // Quantity values in a ResourceList.
    let hard = bytes(1, &[s(1, "cpu"), bytes(2, &s(1, "500m"))].concat());
    let v = ok(&envelope("v1", "ResourceQuota", &bytes(2, &hard)));
    assert_eq!(v["spec"], json!({"hard": {"cpu": "500m"}}));
}

#[test]
fn repeated_singular_message_occurrences_merge() {
    let raw = [bytes(1, &s(1, "a")), bytes(1, &s(3, "ns"))].concat();
    let v = ok(&envelope("v1", "ConfigMap", &raw));
    assert_eq!(v["metadata"], json!({"name": "a", "namespace": "ns"}));
}

#[test]
fn envelope_content_type_and_encoding() {
    let type_meta = [s(1, "v1"), s(2, "Namespace")].concat();
    let json_body = [
        MAGIC.to_vec(),
        bytes(1, &type_meta),
        bytes(2, br#"{"kind":"Namespace"}"#),
        s(4, "application/json"),
    ]
    .concat();
    assert_eq!(decode(&json_body), Ok(json!({"kind": "Namespace"})));
    let gz = [MAGIC.to_vec(), bytes(1, &type_meta), s(3, "gzip")].concat();
    assert!(decode(&gz).is_err());
}

// ------------------------------------------------------------ the table

#[test]
fn descriptor_table_is_consistent() {
    assert!(MESSAGES.len() > 500);
    for pair in MESSAGES.windows(2) {
        assert!(
            pair[0].name < pair[1].name,
            "{} >= {}",
            pair[0].name,
            pair[1].name
        );
    }
    for msg in MESSAGES {
        let mut numbers: Vec<u32> = msg.fields.iter().map(|f| f.num).collect();
        numbers.sort_unstable();
        numbers.dedup();
        assert_eq!(numbers.len(), msg.fields.len(), "{}", msg.name);
        for field in msg.fields {
            if let Ty::Msg(i) = field.ty {
                assert!(
                    usize::from(i) < MESSAGES.len(),
                    "{}.{}",
                    msg.name,
                    field.name
                );
            }
        }
    }
    for (group, _) in GROUPS {
        let api_version = if group.is_empty() {
            "v1".to_string()
        } else {
            format!("{group}/v1")
        };
        let found = [
            "Pod",
            "Deployment",
            "Job",
            "Role",
            "Lease",
            "PriorityClass",
            "NetworkPolicy",
            "StorageClass",
            "PodDisruptionBudget",
            "HorizontalPodAutoscaler",
            "ValidatingWebhookConfiguration",
            "EndpointSlice",
            "Event",
            "TokenReview",
            "SubjectAccessReview",
            "CertificateSigningRequest",
            "RuntimeClass",
            "FlowSchema",
        ]
        .iter()
        .any(|kind| message_for(&api_version, kind).is_some());
        assert!(found, "no kind found for {api_version}");
    }
    assert!(message_for("autoscaling/v2", "HorizontalPodAutoscaler").is_some());
}
