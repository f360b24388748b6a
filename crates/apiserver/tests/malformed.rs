//! No input crashes the server: a seeded mutational campaign of malformed
//! bodies (JSON, YAML, protobuf, the three patch types and apply),
//! selectors, names, continue tokens and watch parameters, sent over real
//! loopback sockets. Every answer is a `Status` for a refusal (4xx, never a
//! 5xx), the connection stays usable, the server stays up, and nothing a
//! rejected request sent is stored.
//!
//! The seed is fixed (`KUBEFORGE_MALFORMED_SEED` overrides it, and
//! `KUBEFORGE_MALFORMED_ROUNDS` the number of requests) so a failure
//! replays exactly.

use std::collections::BTreeMap;

use kubeforge_apiserver::ApiServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// splitmix64: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// One HTTP/1.1 connection, written and read by hand so that a closed
/// connection or a reset is seen as what it is.
struct Conn {
    addr: std::net::SocketAddr,
    io: BufReader<TcpStream>,
}

/// An answer: status code, headers (lowercased names), body.
struct Answer {
    code: u16,
    body: Vec<u8>,
}

impl Conn {
    async fn open(addr: std::net::SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        Conn {
            addr,
            io: BufReader::new(s),
        }
    }

    /// Send one request and read its answer; `head_only` stops after the
    /// status line and headers of a 200 (a watch streams) and reopens the
    /// connection. An error means the connection failed mid-request.
    async fn call(
        &mut self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: &[u8],
        head_only: bool,
    ) -> Result<Answer, String> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: kubeforge\r\n");
        if let Some(ct) = content_type {
            req.push_str(&format!("content-type: {ct}\r\n"));
        }
        req.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
        let s = self.io.get_mut();
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write head: {e}"))?;
        s.write_all(body)
            .await
            .map_err(|e| format!("write body: {e}"))?;
        let mut line = String::new();
        let n = self
            .io
            .read_line(&mut line)
            .await
            .map_err(|e| format!("read status: {e}"))?;
        if n == 0 {
            return Err("connection closed without an answer".into());
        }
        let code: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        loop {
            line.clear();
            self.io
                .read_line(&mut line)
                .await
                .map_err(|e| format!("read header: {e}"))?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (k, v) = l.split_once(':').unwrap_or((l, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse::<usize>().ok(),
                "transfer-encoding" => chunked = v.trim().eq_ignore_ascii_case("chunked"),
                "connection" => close = v.trim().eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        if head_only && code == 200 {
            *self = Conn::open(self.addr).await;
            return Ok(Answer {
                code,
                body: Vec::new(),
            });
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.io
                    .read_line(&mut line)
                    .await
                    .map_err(|e| format!("read chunk: {e}"))?;
                let size = usize::from_str_radix(line.trim(), 16)
                    .map_err(|_| format!("bad chunk size {line:?}"))?;
                let mut chunk = vec![0; size + 2];
                self.io
                    .read_exact(&mut chunk)
                    .await
                    .map_err(|e| format!("read chunk: {e}"))?;
                if size == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..size]);
            }
        } else if let Some(n) = length {
            body.resize(n, 0);
            self.io
                .read_exact(&mut body)
                .await
                .map_err(|e| format!("read body: {e}"))?;
        }
        if close {
            *self = Conn::open(self.addr).await;
        }
        Ok(Answer { code, body })
    }
}

async fn serve() -> (ApiServer, std::net::SocketAddr) {
    let server = ApiServer::in_memory().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.clone().serve(listener, std::future::pending()));
    (server, addr)
}

/// The resources the campaign writes, each with a valid object to mutate.
struct Kind {
    base: &'static str,
    plural: &'static str,
    object: fn(&str) -> Value,
}

const NS: &str = "fuzz";

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            base: "/api/v1",
            plural: "configmaps",
            object: |n| {
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": n, "labels": {"app": "web"}, "annotations": {"a": "b"}},
                    "data": {"k": "v", "other": "x"}})
            },
        },
        Kind {
            base: "/api/v1",
            plural: "services",
            object: |n| {
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": n},
                    "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]}})
            },
        },
        Kind {
            base: "/api/v1",
            plural: "pods",
            object: |n| {
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": n, "labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}],
                        "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}],
                        "tolerations": [{"key": "k", "operator": "Exists"}]}})
            },
        },
        Kind {
            base: "/apis/apps/v1",
            plural: "deployments",
            object: |n| {
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": n},
                    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                            "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
            },
        },
        Kind {
            base: "/api/v1",
            plural: "secrets",
            object: |n| {
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": n},
                    "type": "Opaque", "data": {"k": "dmFsdWU="}})
            },
        },
        Kind {
            base: "/apis/batch/v1",
            plural: "jobs",
            object: |n| {
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": n},
                    "spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}]}}}})
            },
        },
    ]
}

fn collection(k: &Kind) -> String {
    format!("{}/namespaces/{NS}/{}", k.base, k.plural)
}

/// Values of every JSON type and the edge cases of each.
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(22) {
        0 => json!(5),
        1 => json!("x"),
        2 => json!([1, "a", null]),
        3 => json!(true),
        4 => json!(false),
        5 => Value::Null,
        6 => json!({}),
        7 => json!({"nested": {"deeper": [{}]}}),
        8 => json!(-1),
        9 => json!(i64::MAX),
        10 => json!(u64::MAX),
        11 => json!(i64::MIN),
        12 => json!(1e308),
        13 => json!(-0.5),
        14 => json!(""),
        15 => json!("a".repeat(70_000)),
        16 => json!("ünï\u{0}cødé\u{202e}"),
        17 => json!([[[[[]]]]]),
        18 => json!({"": ""}),
        19 => json!("1Gi"),
        20 => json!(vec!["x"; 50]),
        _ => json!("../../etc"),
    }
}

/// Names that break some rule (and a few that don't).
fn odd_name(rng: &mut Rng) -> String {
    let names = [
        "",
        "-a",
        "a-",
        "UPPER",
        "a_b",
        "a.b",
        "..",
        ".",
        "a/b",
        "a%2Fb",
        "%00",
        "ünïcode",
        " sp ace",
        "x",
        "ok-name",
    ];
    match rng.below(names.len() + 2) {
        i if i < names.len() => names[i].to_string(),
        i if i == names.len() => "a".repeat(64 + rng.below(300)),
        _ => format!("m{}", rng.next() % 1000),
    }
}

/// Walk to a random node of `v` and replace it (or a key of it) with an
/// odd value, delete it, or add a stray key.
fn mutate_value(rng: &mut Rng, v: &mut Value, depth: usize) {
    let go_deeper = depth < 6 && rng.chance(70);
    match v {
        Value::Object(m) if !m.is_empty() && go_deeper => {
            let keys: Vec<String> = m.keys().cloned().collect();
            let k = rng.pick(&keys).clone();
            if rng.chance(80) {
                if let Some(child) = m.get_mut(&k) {
                    mutate_value(rng, child, depth + 1);
                }
            } else if rng.chance(50) {
                m.remove(&k);
            } else {
                m.insert(k, odd_value(rng));
            }
        }
        Value::Array(a) if !a.is_empty() && go_deeper => {
            let i = rng.below(a.len());
            mutate_value(rng, &mut a[i], depth + 1);
        }
        Value::Object(m) if rng.chance(30) => {
            m.insert(format!("stray{}", rng.below(5)), odd_value(rng));
        }
        _ => *v = odd_value(rng),
    }
}

/// Byte-level damage to an encoded body.
fn mutate_bytes(rng: &mut Rng, b: &mut Vec<u8>) {
    if b.is_empty() {
        b.push(rng.next() as u8);
        return;
    }
    for _ in 0..=rng.below(4) {
        let i = rng.below(b.len());
        match rng.below(5) {
            0 => b.truncate(i),
            1 => b[i] ^= 1 << rng.below(8),
            2 => b.insert(i, *rng.pick(b"{}[]\",:\\\0\xff\n-#&*!")),
            3 => {
                let end = (i + rng.below(16)).min(b.len());
                let seg = b[i..end].to_vec();
                b.splice(i..i, seg);
            }
            _ => {
                if i < b.len() {
                    b.remove(i);
                }
            }
        }
        if b.is_empty() {
            break;
        }
    }
}

/// A protobuf body: the `k8s\0` magic and a damaged `runtime.Unknown`
/// envelope (lengths past the end, huge varints, wrong wire types).
fn protobuf_body(rng: &mut Rng) -> Vec<u8> {
    let mut b = b"k8s\0".to_vec();
    // typeMeta { apiVersion: "v1", kind: "ConfigMap" }
    let tm = [
        0x0a, 0x02, b'v', b'1', 0x12, 0x09, b'C', b'o', b'n', b'f', b'i', b'g', b'M', b'a', b'p',
    ];
    b.push(0x0a);
    b.push(tm.len() as u8);
    b.extend_from_slice(&tm);
    // raw: a ConfigMap message with metadata { name }
    let raw = [
        0x0a, 0x06, 0x0a, 0x04, b'p', b'b', b'c', b'm', 0x12, 0x04, 0x0a, 0x01, b'k', 0x12,
    ];
    b.push(0x12);
    b.push(raw.len() as u8 + 1);
    b.extend_from_slice(&raw);
    b.push(0x00);
    match rng.below(4) {
        0 => mutate_bytes(rng, &mut b),
        1 => {
            // A length far past the end.
            b.extend_from_slice(&[0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        }
        2 => {
            // An endless varint.
            b.extend(std::iter::repeat_n(0xff, 12));
        }
        _ => {
            let n = rng.below(64);
            b.extend((0..n).map(|_| rng.next() as u8));
        }
    }
    b
}

/// Bodies that stress parsers rather than rules.
fn parser_stress(rng: &mut Rng) -> (Vec<u8>, &'static str) {
    match rng.below(6) {
        0 => {
            let d = [100, 127, 129, 1000, 20_000][rng.below(5)];
            (
                format!("{}{}", "[".repeat(d), "]".repeat(d)).into_bytes(),
                "application/json",
            )
        }
        1 => {
            let d = [100, 500, 5000][rng.below(3)];
            (
                format!("a: {}{}", "[".repeat(d), "]".repeat(d)).into_bytes(),
                "application/yaml",
            )
        }
        2 => (
            // Aliases that expand (a small "billion laughs").
            b"a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\ne: [*d, *d, *d, *d, *d, *d, *d, *d]\n".to_vec(),
            "application/yaml",
        ),
        3 => (
            b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: y, labels: !!binary aGk=}\n".to_vec(),
            "application/yaml",
        ),
        4 => (
            b"--- \n!!python/object:os.system [ls]\n---\nkind: x\n".to_vec(),
            "application/yaml",
        ),
        _ => (
            format!("{{\"metadata\":{{\"name\":\"n\"}},\"data\":{{\"k\":\"\\ud800{}\"}}}}", "\\u0000".repeat(rng.below(50))).into_bytes(),
            "application/json",
        ),
    }
}

fn selector(rng: &mut Rng, fields: bool) -> String {
    let keys: &[&str] = if fields {
        &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
            "spec.unschedulable",
            "no.such.field",
            "",
        ]
    } else {
        &[
            "app",
            "a.b/c",
            "x",
            "-bad",
            "k8s.io/",
            "a".repeat(70).leak(),
            "",
        ]
    };
    let ops = ["=", "==", "!=", " in ", " notin ", "", "!", ">", "<"];
    let mut out = String::new();
    for i in 0..=rng.below(3) {
        if i > 0 {
            out.push(*rng.pick(&[',', ',', ' ', ';']));
        }
        let k = rng.pick(keys);
        let op = rng.pick(&ops);
        match *op {
            "!" => out.push_str(&format!("!{k}")),
            " in " | " notin " => {
                let vals = ["(a,b)", "()", "(a", "a,b)", "((a))", "(a b)"];
                out.push_str(&format!("{k}{op}{}", rng.pick(&vals)));
            }
            _ => {
                let vals = ["web", "", "a\\,b", "(", "ü", "true", "false", "1"];
                out.push_str(&format!("{k}{op}{}", rng.pick(&vals)));
            }
        }
    }
    out
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn continue_token(rng: &mut Rng) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    match rng.below(6) {
        0 => "garbage!!".into(),
        1 => b64.encode(b"{not json"),
        2 => b64.encode(json!({"k": "/registry/other/x", "rv": 1}).to_string()),
        3 => b64.encode(
            json!({"k": format!("/registry/core/configmaps/{NS}/a"), "rv": u64::MAX}).to_string(),
        ),
        4 => b64.encode(json!({"k": 5, "rv": "x"}).to_string()),
        _ => b64.encode(
            (0..rng.below(40))
                .map(|_| rng.next() as u8)
                .collect::<Vec<u8>>(),
        ),
    }
}

fn query(rng: &mut Rng) -> String {
    let mut q: Vec<String> = Vec::new();
    if rng.chance(50) {
        q.push(format!("labelSelector={}", enc(&selector(rng, false))));
    }
    if rng.chance(50) {
        q.push(format!("fieldSelector={}", enc(&selector(rng, true))));
    }
    if rng.chance(30) {
        q.push(format!("continue={}", enc(&continue_token(rng))));
    }
    if rng.chance(30) {
        let rvs = [
            "",
            "0",
            "1",
            "-1",
            "abc",
            "99999999999",
            "18446744073709551616",
            " 1",
        ];
        let rv: &&str = rng.pick(&rvs);
        q.push(format!("resourceVersion={}", enc(rv)));
    }
    if rng.chance(20) {
        let m = ["Exact", "NotOlderThan", "exact", "", "Bogus"];
        q.push(format!("resourceVersionMatch={}", rng.pick(&m)));
    }
    if rng.chance(30) {
        let l = ["1", "0", "-5", "abc", "9223372036854775808", "2"];
        q.push(format!("limit={}", rng.pick(&l)));
    }
    q.join("&")
}

/// What the campaign expects to find stored at the end: name → the
/// resourceVersion the last accepted write left, per collection.
type Expected = BTreeMap<String, BTreeMap<String, String>>;

fn rv_of(body: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    Some((
        v.pointer("/metadata/name")?.as_str()?.to_string(),
        v.pointer("/metadata/resourceVersion")?
            .as_str()?
            .to_string(),
    ))
}

/// The answer's checks: never a 5xx, a refusal is a `Status` with its
/// code. The one 5xx kube-apiserver itself answers to a well-formed
/// request is allowed: 504 for a list at a resourceVersion the store has
/// not reached.
fn check(a: &Answer, what: &str) {
    let too_large = a.code == 504
        && String::from_utf8_lossy(&a.body).contains("\"message\":\"Too large resource version");
    assert!(
        a.code < 500 || too_large,
        "{what}: {} {}",
        a.code,
        String::from_utf8_lossy(&a.body)
    );
    if a.code >= 400 {
        let s: Value = serde_json::from_slice(&a.body).unwrap_or_else(|e| {
            panic!(
                "{what}: {} is not a Status ({e}): {}",
                a.code,
                String::from_utf8_lossy(&a.body)
            )
        });
        assert_eq!(s["kind"], "Status", "{what}: {s}");
        assert_eq!(s["code"], json!(a.code), "{what}: {s}");
    }
}

/// name → resourceVersion of everything in a collection.
async fn stored(conn: &mut Conn, coll: &str) -> BTreeMap<String, String> {
    let a = conn
        .call("GET", coll, None, b"", false)
        .await
        .expect("list");
    assert_eq!(a.code, 200);
    let list: Value = serde_json::from_slice(&a.body).expect("list json");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| rv_of(o.to_string().as_bytes()))
        .collect()
}

/// After an accepted write, read the object back to learn what is stored.
async fn record(conn: &mut Conn, expected: &mut Expected, coll: &str, name: &str) {
    if name.is_empty() || name.contains(['/', '?', '%', '#']) {
        return;
    }
    let a = conn
        .call("GET", &format!("{coll}/{name}"), None, b"", false)
        .await
        .expect("read back");
    let entry = expected.entry(coll.to_string()).or_default();
    match a.code {
        200 => {
            if let Some((n, rv)) = rv_of(&a.body) {
                entry.insert(n, rv);
            }
        }
        _ => {
            entry.remove(name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutational_campaign_gets_only_status_refusals_and_stores_nothing_refused() {
    let seed = std::env::var("KUBEFORGE_MALFORMED_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6b75_6265_666f_7267_u64);
    let rounds: usize = std::env::var("KUBEFORGE_MALFORMED_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000);
    let (server, addr) = serve().await;
    let mut conn = Conn::open(addr).await;
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}).to_string();
    let a = conn
        .call(
            "POST",
            "/api/v1/namespaces",
            Some("application/json"),
            ns.as_bytes(),
            false,
        )
        .await
        .expect("namespace");
    assert_eq!(a.code, 201);
    let kinds = kinds();
    let mut expected: Expected = BTreeMap::new();
    for k in &kinds {
        let coll = collection(k);
        let body = (k.object)("base").to_string();
        let a = conn
            .call(
                "POST",
                &coll,
                Some("application/json"),
                body.as_bytes(),
                false,
            )
            .await
            .expect("base object");
        assert_eq!(a.code, 201, "{}", String::from_utf8_lossy(&a.body));
        record(&mut conn, &mut expected, &coll, "base").await;
    }
    let mut rng = Rng(seed);
    let mut codes: BTreeMap<u16, usize> = BTreeMap::new();
    let mut previous = String::new();
    for round in 0..rounds {
        let k = rng.pick(&kinds);
        let coll = collection(k);
        let what = format!("seed {seed:#x} round {round}");
        let op = rng.below(10);
        let (method, path, ct, body, head_only): (&str, String, Option<&str>, Vec<u8>, bool) =
            match op {
                // Create a mutated object, in any content type.
                0 | 1 => {
                    let mut obj = (k.object)(&odd_name(&mut rng));
                    for _ in 0..=rng.below(3) {
                        mutate_value(&mut rng, &mut obj, 0);
                    }
                    let (ct, mut body) = match rng.below(5) {
                        0 => ("application/yaml", obj.to_string().into_bytes()),
                        1 => (
                            "application/vnd.kubernetes.protobuf",
                            protobuf_body(&mut rng),
                        ),
                        2 => (
                            *rng.pick(&[
                                "text/plain",
                                "application/xml",
                                "",
                                "application/json;charset=ü",
                            ]),
                            obj.to_string().into_bytes(),
                        ),
                        _ => ("application/json", obj.to_string().into_bytes()),
                    };
                    if rng.chance(25) {
                        mutate_bytes(&mut rng, &mut body);
                    }
                    ("POST", coll.clone(), Some(ct), body, false)
                }
                // Replace the base object with a mutated one.
                2 => {
                    let mut obj = (k.object)("base");
                    if rng.chance(50)
                        && let Some(rv) = expected.get(&coll).and_then(|m| m.get("base"))
                        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
                    {
                        meta.insert("resourceVersion".into(), json!(rv));
                    }
                    mutate_value(&mut rng, &mut obj, 0);
                    let mut body = obj.to_string().into_bytes();
                    if rng.chance(20) {
                        mutate_bytes(&mut rng, &mut body);
                    }
                    (
                        "PUT",
                        format!("{coll}/base"),
                        Some("application/json"),
                        body,
                        false,
                    )
                }
                // Patch the base object: merge, strategic, JSON patch, apply.
                3..=5 => {
                    let (ct, mut doc) = match rng.below(4) {
                        0 => {
                            let mut p = serde_json::Map::new();
                            for _ in 0..=rng.below(2) {
                                let top = rng
                                    .pick(&[
                                        "spec",
                                        "metadata",
                                        "data",
                                        "status",
                                        "kind",
                                        "apiVersion",
                                        "type",
                                    ])
                                    .to_string();
                                p.insert(top, odd_value(&mut rng));
                            }
                            let mut p = Value::Object(p);
                            if rng.chance(50) {
                                p = (k.object)("base");
                                mutate_value(&mut rng, &mut p, 0);
                            }
                            ("application/merge-patch+json", p)
                        }
                        1 => {
                            let mut p = (k.object)("base");
                            mutate_value(&mut rng, &mut p, 0);
                            if rng.chance(40)
                                && let Some(m) = p.as_object_mut()
                            {
                                m.insert("spec".into(), json!({"$patch": *rng.pick(&["delete", "replace", "merge", "bogus"]),
                                    "$setElementOrder/containers": odd_value(&mut rng),
                                    "$retainKeys": odd_value(&mut rng)}));
                            }
                            ("application/strategic-merge-patch+json", p)
                        }
                        2 => {
                            let ops = ["add", "remove", "replace", "move", "copy", "test", "bogus"];
                            let paths = [
                                "/spec",
                                "/spec/ports/0",
                                "/metadata/name",
                                "/data/k",
                                "",
                                "/",
                                "/a~2b",
                                "/spec/containers/-",
                                "/spec/containers/99999999999999999999",
                            ];
                            let p: Vec<Value> = (0..=rng.below(3))
                                .map(|_| {
                                    let mut op = json!({"op": rng.pick(&ops), "path": rng.pick(&paths), "value": odd_value(&mut rng)});
                                    if rng.chance(30) {
                                        op["from"] = json!(rng.pick(&paths));
                                    }
                                    if rng.chance(20) {
                                        mutate_value(&mut rng, &mut op, 0);
                                    }
                                    op
                                })
                                .collect();
                            let p = if rng.chance(10) {
                                odd_value(&mut rng)
                            } else {
                                Value::Array(p)
                            };
                            ("application/json-patch+json", p)
                        }
                        _ => {
                            let mut p = (k.object)("base");
                            mutate_value(&mut rng, &mut p, 0);
                            ("application/apply-patch+yaml", p)
                        }
                    };
                    if rng.chance(5) {
                        doc = odd_value(&mut rng);
                    }
                    let mut body = doc.to_string().into_bytes();
                    if rng.chance(15) {
                        mutate_bytes(&mut rng, &mut body);
                    }
                    let mut path = format!("{coll}/base");
                    if rng.chance(10) {
                        path.push_str("/status");
                    }
                    let manager = match rng.below(4) {
                        0 => String::new(),
                        1 => "m".repeat(129),
                        _ => "fuzzer".into(),
                    };
                    path.push_str(&format!("?fieldManager={}", enc(&manager)));
                    if rng.chance(20) {
                        path.push_str("&force=true");
                    }
                    if rng.chance(10) {
                        path.push_str(&format!(
                            "&fieldValidation={}",
                            rng.pick(&["Strict", "Warn", "Ignore", "bogus"])
                        ));
                    }
                    ("PATCH", path, Some(ct), body, false)
                }
                // List with odd selectors, tokens, versions and limits.
                6 => (
                    "GET",
                    format!("{coll}?{}", query(&mut rng)),
                    None,
                    Vec::new(),
                    false,
                ),
                // Watch with odd parameters (only the head is read).
                7 => {
                    let mut q = query(&mut rng);
                    q.push_str("&watch=true");
                    let t = ["0", "-1", "abc", "1", "99999999999999999999"];
                    q.push_str(&format!("&timeoutSeconds={}", rng.pick(&t)));
                    if rng.chance(30) {
                        q.push_str(&format!(
                            "&sendInitialEvents={}",
                            rng.pick(&["true", "false", "x"])
                        ));
                    }
                    if rng.chance(30) {
                        q.push_str("&allowWatchBookmarks=true");
                    }
                    ("GET", format!("{coll}?{q}"), None, Vec::new(), true)
                }
                // Names in paths, DeleteOptions bodies.
                8 => {
                    let name = enc(&odd_name(&mut rng));
                    let mut opts = json!({"kind": "DeleteOptions", "apiVersion": "v1"});
                    if let Some(m) = opts.as_object_mut() {
                        m.insert(
                            "propagationPolicy".into(),
                            json!(rng.pick(&["Foreground", "Orphan", "bogus", "Background"])),
                        );
                        if rng.chance(50) {
                            m.insert("gracePeriodSeconds".into(), odd_value(&mut rng));
                        }
                        if rng.chance(50) {
                            m.insert(
                                "preconditions".into(),
                                json!({"uid": odd_value(&mut rng), "resourceVersion": "1"}),
                            );
                        }
                    }
                    mutate_value(&mut rng, &mut opts, 0);
                    // An Eviction wrapping the options (pods/eviction; a
                    // 404 for the other kinds).
                    if rng.chance(25) {
                        let evicted = if rng.chance(70) {
                            json!("base")
                        } else {
                            odd_value(&mut rng)
                        };
                        let mut ev = json!({"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": evicted}, "deleteOptions": opts});
                        mutate_value(&mut rng, &mut ev, 0);
                        let target = if rng.chance(70) {
                            "base".to_string()
                        } else {
                            name
                        };
                        (
                            "POST",
                            format!("{coll}/{target}/eviction"),
                            Some("application/json"),
                            ev.to_string().into_bytes(),
                            false,
                        )
                    } else {
                        let method = *rng.pick(&["GET", "DELETE", "DELETE", "PUT"]);
                        let path = match rng.below(3) {
                            0 => format!("{coll}/{name}"),
                            1 => format!(
                                "{coll}/{name}/{}",
                                rng.pick(&["status", "scale", "binding", "bogus", "finalize"])
                            ),
                            _ => format!("{}/namespaces/{name}/{}", k.base, k.plural),
                        };
                        (
                            method,
                            path,
                            Some("application/json"),
                            opts.to_string().into_bytes(),
                            false,
                        )
                    }
                }
                // Parser stress: deep nesting, aliases, odd tags, raw garbage.
                _ => {
                    let (body, ct) = parser_stress(&mut rng);
                    let method = *rng.pick(&["POST", "PATCH", "PUT"]);
                    let path = if method == "POST" {
                        coll.clone()
                    } else {
                        format!("{coll}/base?fieldManager=f")
                    };
                    let ct = if method == "PATCH" {
                        *rng.pick(&[
                            "application/merge-patch+json",
                            "application/apply-patch+yaml",
                            "application/strategic-merge-patch+json",
                        ])
                    } else {
                        ct
                    };
                    (method, path, Some(ct), body, false)
                }
            };
        let a = conn
            .call(method, &path, ct, &body, head_only)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{what}: {method} {path} ({ct:?}): {e}; body: {}; after {previous}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                )
            });
        previous = format!("{method} {path} ({ct:?}) -> {}", a.code);
        check(&a, &format!("{what}: {method} {path} ({ct:?})"));
        *codes.entry(a.code).or_default() += 1;
        if (200..300).contains(&a.code) && method != "GET" {
            let name = rv_of(&a.body)
                .map(|(n, _)| n)
                .unwrap_or_else(|| "base".into());
            record(&mut conn, &mut expected, &coll, &name).await;
            // An accepted DELETE may have been a deletecollection (a name
            // that is empty in the path), and an eviction deletes the pod
            // it names: take the collection as it is.
            if method == "DELETE" || path.ends_with("/eviction") {
                let now = stored(&mut conn, &coll).await;
                expected.insert(coll.clone(), now);
            }
        }
    }
    eprintln!("answers by code: {codes:?}");
    assert!(
        codes.keys().filter(|c| **c >= 400).count() >= 5,
        "the campaign reached few refusals: {codes:?}"
    );

    // Nothing refused was stored: each collection holds exactly what the
    // accepted writes left, at the revisions they left.
    for k in &kinds {
        let coll = collection(k);
        let got = stored(&mut conn, &coll).await;
        let want = expected.get(&coll).cloned().unwrap_or_default();
        assert_eq!(got, want, "{coll}");
    }
    // The server is up: health and a typed client.
    let a = conn
        .call("GET", "/healthz", None, b"", false)
        .await
        .expect("healthz");
    assert_eq!(a.code, 200);
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(server.client(), NS);
    cms.get("base").await.expect("base configmap");
}

/// The issue's case: a merge or strategic patch that replaces a Service's
/// `spec` with a scalar or an array is refused with 422 Invalid (it used
/// to panic the handler and close the connection) and changes nothing.
#[tokio::test]
async fn service_spec_replaced_by_a_non_object_is_invalid() {
    let (_server, addr) = serve().await;
    let mut conn = Conn::open(addr).await;
    let coll = "/api/v1/namespaces/default/services";
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"ports": [{"port": 80}]}});
    let a = conn
        .call(
            "POST",
            coll,
            Some("application/json"),
            svc.to_string().as_bytes(),
            false,
        )
        .await
        .expect("create");
    assert_eq!(a.code, 201);
    let before = rv_of(&a.body).expect("rv");
    for ct in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        for spec in [json!(5), json!("x"), json!([1]), json!(true)] {
            let patch = json!({"spec": spec}).to_string();
            let a = conn
                .call(
                    "PATCH",
                    &format!("{coll}/web"),
                    Some(ct),
                    patch.as_bytes(),
                    false,
                )
                .await
                .unwrap_or_else(|e| panic!("{ct} {patch}: {e}"));
            let s: Value = serde_json::from_slice(&a.body).expect("status");
            assert_eq!(
                (a.code, &s["reason"]),
                (422, &json!("Invalid")),
                "{ct} {patch}: {s}"
            );
            assert_eq!(s["details"]["causes"][0]["field"], "spec", "{s}");
        }
    }
    // The same through PUT and JSON patch.
    let mut put = svc.clone();
    put["spec"] = json!(7);
    let a = conn
        .call(
            "PUT",
            &format!("{coll}/web"),
            Some("application/json"),
            put.to_string().as_bytes(),
            false,
        )
        .await
        .expect("put");
    assert_eq!(a.code, 422, "{}", String::from_utf8_lossy(&a.body));
    let a = conn
        .call(
            "PATCH",
            &format!("{coll}/web"),
            Some("application/json-patch+json"),
            br#"[{"op":"replace","path":"/spec","value":[]}]"#,
            false,
        )
        .await
        .expect("json patch");
    assert_eq!(a.code, 422, "{}", String::from_utf8_lossy(&a.body));
    let a = conn
        .call("GET", &format!("{coll}/web"), None, b"", false)
        .await
        .expect("get");
    assert_eq!(rv_of(&a.body), Some(before));
}

/// Bodies over kube's 3 MiB limit, sent by many clients at once over real
/// sockets, each get the 413 `Status`: the server half-closes and drains
/// instead of resetting a client still sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_oversized_posts_all_read_their_413() {
    let (_server, addr) = serve().await;
    let body = std::sync::Arc::new(format!(
        "{{\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}",
        "a".repeat(4 * 1024 * 1024)
    ));
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(addr).await;
            conn.call(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                Some("application/json"),
                body.as_bytes(),
                false,
            )
            .await
        }));
    }
    for t in tasks {
        let a = t.await.expect("join").expect("an answer, not a reset");
        let s: Value = serde_json::from_slice(&a.body).expect("status");
        assert_eq!(a.code, 413);
        assert_eq!(s["reason"], "RequestEntityTooLarge");
        assert_eq!(s["message"], "Request entity too large: limit is 3145728");
    }
}
