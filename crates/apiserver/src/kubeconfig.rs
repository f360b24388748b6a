//! The kubeconfig that points a client (kubectl, kube-rs, the Python
//! client) at a server listening on loopback: one cluster, one context in
//! the `default` namespace, and an anonymous user (the embedded server
//! authenticates nobody over plain HTTP on loopback).

use std::net::SocketAddr;

/// Kubeconfig YAML for a server at `http://{addr}`, context `kubeforge`.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubeforge\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: kubeforge\n  context:\n    cluster: kubeforge\n    user: kubeforge\n    namespace: default\ncurrent-context: kubeforge\nusers:\n- name: kubeforge\n  user: {{}}\n"
    )
}
