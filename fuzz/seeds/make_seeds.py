#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/corpus/<target>/.

Seeds are real requests: the kubectl protobuf bodies the API server's tests
replay, the repository's CRDs and samples, the bodies kubectl and kube-rs
send (creates, apply, the three patch types), and logs framed as the store
writes them. The committed corpora are these seeds plus what the campaigns
found, minimized with `cargo fuzz cmin` (see docs/guide/fuzzing.md).
Run from anywhere: python3 fuzz/seeds/make_seeds.py
"""
import glob
import hashlib
import json
import os
import struct
import zlib

import yaml

FUZZ = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(FUZZ)


def put(target, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(FUZZ, "corpus", target)
    os.makedirs(d, exist_ok=True)
    name = "seed-" + hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def j(v):
    return json.dumps(v, separators=(",", ":"))


protobufs = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(ROOT, "crates/apiserver/tests/fixtures/protobuf/*.bin")))]
crds = []
for p in sorted(glob.glob(os.path.join(ROOT, "config/crd/bases/*.yaml")) + glob.glob(os.path.join(ROOT, "crates/cli/tests/fixtures/*crd*.yaml"))):
    for doc in yaml.safe_load_all(open(p)):
        if doc:
            crds.append(doc)
samples = []
for p in sorted(glob.glob(os.path.join(ROOT, "config/samples/*.yaml")) + [os.path.join(ROOT, "crates/cli/tests/fixtures/deployment.yaml")]):
    for doc in yaml.safe_load_all(open(p)):
        if doc:
            samples.append(doc)

cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm2", "namespace": "default", "labels": {"app": "web"}}, "data": {"k": "v"}}
pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p2", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}}]}}
svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s2"},
       "spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}], "selector": {"app": "web"}}}
dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d2"},
       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
objects = [cm, pod, svc, dep] + samples

# body_decode: selector byte (content type) + body
for o in objects:
    put("body_decode", b"\x00" + j(o).encode())
    put("body_decode", b"\x01" + yaml.safe_dump(o).encode())
    put("body_decode", b"\x05" + yaml.safe_dump(o).encode())
put("body_decode", b"\x02" + j([{"op": "replace", "path": "/spec/replicas", "value": 3}, {"op": "remove", "path": "/metadata/labels/app"}]).encode())
put("body_decode", b"\x01" + b"a: &x [1, 2]\nb: *x\nc: !!binary aGVsbG8=\nd: ~\ne: 0x1F\nf: .inf\n")
put("body_decode", b"\x01---\nkind: A\n---\nkind: B\n")
for pb in protobufs:
    put("body_decode", b"\x06" + pb)
    put("protobuf_decode", pb)

# label_selector
for s in ["app=web", "!n", "z=1,a in (x),m", "", "a===b", "a!=b", "a==b", "a notin (b)", "x in (a,b),y notin (c)",
          "tier!=1,app", "a.b/c", "a<3", "a>10", "k8s.io/name in (a,b,c),!k8s.io/gone", "app in ()",
          j({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["1", "2"]},
                                                                {"key": "x", "operator": "DoesNotExist"}]})]:
    put("label_selector", s)

# field_selector
for s in ["metadata.name=n", "metadata.namespace!=default", "spec.nodeName==node-1,status.phase=Running",
          "spec.unschedulable=false", r"metadata.name=a\,b\=c\\d", "", "metadata.name", "a=b,c!=d,e==f"]:
    put("field_selector", s)

# names
for s in ["my-app", "a.b.c", "-bad", "UPPER", "x" * 64, "a" * 254, "example.com/name", "kube-", "..", "a%b",
          j({"name": "n", "namespace": "default", "generateName": "web-", "labels": {"app": "web", "bad key": "v"},
             "annotations": {"a": "b"}, "finalizers": ["example.com/f"], "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]})]:
    put("names", s)

# quantity
for s in ["100m", "1", "0.5", "1Gi", "500Mi", "2e3", "1E-3", "1.5k", "+1Ki", "-2", "12345678901234567890123456789012", "0.000000001n", "1Ei", ".5", "5."]:
    put("quantity", s)

# strategic_merge: kind byte + original + patch
dep_full = json.loads(j(dep))
pairs = [
    (0, pod, {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}),
    (0, pod, {"spec": {"containers": [{"name": "c", "$patch": "delete"}]}}),
    (0, pod, {"spec": {"$setElementOrder/containers": [{"name": "c"}], "containers": [{"name": "d", "image": "x"}]}}),
    (0, pod, {"metadata": {"finalizers": ["a"], "$deleteFromPrimitiveList/finalizers": ["b"]}}),
    (1, svc, {"spec": {"ports": [{"port": 80, "protocol": "UDP"}]}}),
    (1, svc, {"spec": 5}),
    (2, dep_full, {"spec": {"template": {"spec": {"$retainKeys": ["containers"], "containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}}}}),
    (2, dep_full, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
    (3, cm, {"data": {"k": None, "n": "v"}}),
    (3, cm, {"$patch": "replace", "data": {}}),
    (4, {"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}, {"spec": {"taints": [{"key": "a", "effect": "NoExecute"}]}}),
]
for k, o, p in pairs:
    put("strategic_merge", bytes([k]) + (j(o) + " " + j(p)).encode())

# crd_schema: schema + object + old object
for crd in crds:
    for v in crd["spec"]["versions"]:
        s = v.get("schema", {}).get("openAPIV3Schema")
        if s:
            put("crd_schema", j(s))
            for smp in samples:
                if smp.get("kind") == crd["spec"]["names"]["kind"]:
                    put("crd_schema", j(s) + "\n" + j(smp) + "\n" + j(smp))
widget_schema = {"type": "object", "properties": {"spec": {"type": "object",
                 "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.replicas", "message": "m"}],
                 "properties": {"replicas": {"type": "integer", "default": 1, "minimum": 0},
                                "minReplicas": {"type": "integer", "default": 0},
                                "maxSurge": {"x-kubernetes-int-or-string": True, "default": "25%"},
                                "class": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]},
                                "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                                "any": {"anyOf": [{"type": "string"}, {"type": "integer"}], "x-kubernetes-int-or-string": True},
                                "meta": {"type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True},
                                "p": {"type": "string", "pattern": "^[a-z]+$", "format": "date-time", "enum": ["a", "b"]}}}}}
put("crd_schema", j(widget_schema) + "\n" + j({"spec": {"replicas": 2, "minReplicas": 3, "class": "x", "tags": ["a", "a"]}}) + "\n" + j({"spec": {"class": "y"}}))

# cel_rules: rule [\n messageExpression]
for r in ["self.spec.replicas >= self.spec.minReplicas", "self.replicas >= self.minReplicas",
          "self.tags.all(t, t.size() < 10)", "self.ports.exists(p, p.port == 80)", "self == oldSelf",
          "has(self.name) && self.name.startsWith('w')", "self.limits.cpu <= 4", "self.ratio * 2.0 < 1.5",
          "self.name.matches('^[a-z]+$')", "size(self.tags) == 2\n'tags: ' + string(size(self.tags))",
          "oldSelf.replicas <= self.replicas", "self.surge == '25%' || self.surge == 3",
          "timestamp(self.when) > timestamp('2000-01-01T00:00:00Z')", "self.data == b'hello'",
          "self.free.x[0] == 1", "int(self.name) > 0", "self.replicas / 0 == 1", "self.minReplicas + 1 > 0",
          "[1,2,3].map(x, x * 2)[1] == 4", "self.tags.filter(t, t == 'a').size() == 1", "{'a': 1}['b'] == 1",
          "self.name.split(',').size() > 0", "quantity('1Gi').isGreaterThan(quantity('1Mi'))"]:
    put("cel_rules", r)

# wal_restart: raw logs as the store frames them (flags byte 0 or 4), and
# structured inputs (flags 8/12, with zero fill 16, damage 32).
MAGIC = b"KFWAL\0\0\x01"


def rec(op, rev, create, version, key, value):
    p = bytes([op]) + struct.pack("<QQQ", rev, create, version) + struct.pack("<I", len(key)) + key + struct.pack("<I", len(value)) + value
    return struct.pack("<II", len(p), zlib.crc32(p)) + p


log = MAGIC + rec(1, 1, 1, 1, b"/registry/configmaps/default/a", j(cm).encode()) + rec(1, 2, 1, 2, b"/registry/configmaps/default/a", b"v2") \
    + rec(1, 3, 3, 1, b"/registry/pods/default/p", b"pod") + rec(2, 4, 0, 0, b"/registry/pods/default/p", b"")
snap = MAGIC + rec(3, 7, 0, 0, b"", b"") + rec(4, 5, 2, 3, b"/registry/a", b"x") + rec(1, 8, 8, 1, b"/registry/b", b"y")
for flags in (0, 4):
    put("wal_restart", bytes([flags]) + log)
    put("wal_restart", bytes([flags]) + log[:-5])
    put("wal_restart", bytes([flags]) + log + b"\0" * 100)
    put("wal_restart", bytes([flags | 1]) + snap)
    put("wal_restart", bytes([flags | 3]) + snap)
put("wal_restart", bytes([0]) + MAGIC)
put("wal_restart", bytes([5]) + MAGIC[:3])


def srec(op, rev, create, version, key, value):
    return bytes([op]) + struct.pack("<HHB", rev, create, version) + bytes([len(key)]) + key + bytes([len(value)]) + value


structured = srec(1, 1, 1, 1, b"/a", b"x") + srec(1, 2, 2, 1, b"/b", b"y") + srec(1, 3, 1, 2, b"/a", b"z") + srec(2, 4, 0, 0, b"/b", b"")
put("wal_restart", bytes([12]) + structured)
put("wal_restart", bytes([28]) + structured)
put("wal_restart", bytes([44]) + struct.pack("<HB", 40, 0x10) + structured)
put("wal_restart", bytes([13]) + srec(3, 9, 0, 0, b"", b"") + srec(4, 5, 2, 3, b"/a", b"x") + srec(1, 10, 10, 1, b"/c", b"y"))

# server_request: text requests separated by \n@@@\n
def req(method, uri, body=b"", ct=None, extra=()):
    head = f"{method} {uri}\n"
    if ct:
        head += f"Content-Type: {ct}\n"
    for h in extra:
        head += h + "\n"
    if isinstance(body, str):
        body = body.encode()
    return head.encode() + b"\n" + body


def seq(*rs):
    return b"\n@@@\n".join(rs)


put("server_request", seq(req("POST", "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create", j(cm), "application/json"),
                          req("GET", "/api/v1/namespaces/default/configmaps/cm2"),
                          req("PUT", "/api/v1/namespaces/default/configmaps/cm2", j(cm), "application/json"),
                          req("DELETE", "/api/v1/namespaces/default/configmaps/cm2", j({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}), "application/json")))
put("server_request", seq(req("POST", "/api/v1/namespaces/default/pods", j(pod), "application/json"),
                          req("PATCH", "/api/v1/namespaces/default/pods/p2", j({"metadata": {"labels": {"a": "b"}}}), "application/strategic-merge-patch+json"),
                          req("POST", "/api/v1/namespaces/default/pods/p2/binding", j({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p2"}, "target": {"kind": "Node", "name": "n1"}}), "application/json"),
                          req("POST", "/api/v1/namespaces/default/pods/p2/eviction", j({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p2"}}), "application/json")))
put("server_request", seq(req("POST", "/api/v1/namespaces/default/services", j(svc), "application/json"),
                          req("PATCH", "/api/v1/namespaces/default/services/s2", j({"spec": 5}), "application/merge-patch+json"),
                          req("PATCH", "/api/v1/namespaces/default/services/s2", j({"spec": [1]}), "application/strategic-merge-patch+json")))
put("server_request", seq(req("PATCH", "/apis/apps/v1/namespaces/default/deployments/d2?fieldManager=kubectl&force=true", yaml.safe_dump(dep), "application/apply-patch+yaml"),
                          req("PATCH", "/apis/apps/v1/namespaces/default/deployments/d2/scale", j([{"op": "replace", "path": "/spec/replicas", "value": 5}]), "application/json-patch+json"),
                          req("GET", "/apis/apps/v1/namespaces/default/deployments/d2", extra=["Accept: application/json;as=Table;v=v1;g=meta.k8s.io"])))
for crd in crds[:2]:
    put("server_request", seq(req("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", j(crd), "application/json"),
                              *[req("POST", f"/apis/{s['apiVersion']}/namespaces/default/{crd['spec']['names']['plural']}", yaml.safe_dump(s), "application/yaml")
                                for s in samples if s.get("kind") == crd["spec"]["names"]["kind"]]))
for pb in protobufs[:8]:
    put("server_request", req("POST", "/api/v1/namespaces/default/configmaps", pb, "application/vnd.kubernetes.protobuf"))
put("server_request", seq(req("POST", "/api/v1/namespaces", j({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}}), "application/json"),
                          req("DELETE", "/api/v1/namespaces/ns1"),
                          req("PUT", "/api/v1/namespaces/ns1/finalize", j({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}, "spec": {"finalizers": []}}), "application/json")))
put("server_request", seq(req("DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=app%3Dweb"),
                          req("GET", "/apis"), req("GET", "/api/v1"), req("GET", "/openapi/v3"), req("GET", "/version")))
put("server_request", req("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", j({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}}), "application/json"))
put("server_request", req("POST", "/api/v1/namespaces/default/serviceaccounts/default/token", j({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": ["x"]}}), "application/json"))

# server_patch: target byte + kind byte + body (see the target's tables)
patches = [
    (0, 1, {"spec": {"replicas": 5}}), (0, 3, {"apiVersion": "fuzz.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 1, "labels": None}}),
    (0, 0, [{"op": "add", "path": "/spec/tags/-", "value": "c"}]), (1, 1, {"status": {"replicas": 2}}),
    (2, 1, {"spec": {"replicas": 7}}), (3, 1, {"data": {"k": None}}), (3, 7, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "labels": None}, "data": {"k": "other"}}),
    (4, 2, {"spec": 1}), (4, 1, {"spec": "x"}), (4, 2, {"spec": {"ports": [{"port": 80, "protocol": "UDP", "$patch": "delete"}]}}),
    (5, 2, {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}}}),
    (5, 3, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"}, "spec": {"replicas": 3}}),
    (6, 0, [{"op": "replace", "path": "/spec/replicas", "value": 1}]), (7, 1, {"status": {"replicas": "x"}}),
    (8, 2, {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}),
    (8, 0, [{"op": "test", "path": "/metadata/name", "value": "pod"}, {"op": "copy", "from": "/spec", "path": "/metadata/x"}]),
    (9, 2, {"spec": {"unschedulable": True, "taints": None}}), (10, 1, {"metadata": {"labels": {"kubernetes.io/metadata.name": "kube-system"}}}),
    (11, 1, {"spec": {"versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}),
]
for t, k, p in patches:
    body = yaml.safe_dump(p).encode() if (k & 3) == 3 and t % 2 else j(p).encode()
    put("server_patch", bytes([t, k]) + body)

# server_query: path/accept byte + query [\0 + raw continue token]
for sel, q in [(0, "limit=1"), (1, "labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dnode-1"), (2, "fieldSelector=spec.unschedulable%3Dfalse"),
               (3, "watch=true&resourceVersion=0&allowWatchBookmarks=true"), (4, "resourceVersion=1&resourceVersionMatch=NotOlderThan"),
               (5, "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"), (16, "limit=2"),
               (26, "limit=1&labelSelector=app"), (7, "timeoutSeconds=1&watch=true"), (0, "resourceVersion=99999&resourceVersionMatch=Exact"),
               (8, "fieldSelector=involvedObject.name%3Dpod"), (9, "limit=500&resourceVersion=0")]:
    put("server_query", bytes([sel]) + q.encode())
put("server_query", bytes([0]) + b"limit=1\0" + j({"k": "/registry/core/configmaps/default/cm", "rv": 5}).encode())
put("server_query", bytes([1]) + b"limit=1\0" + j({"k": "/registry/core/pods/default/pod", "rv": 1}).encode())
print("seeds written")
