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

/// A kubeconfig for an HTTPS server at `addr` (an unspecified address is
/// written as loopback) trusting `ca` and logging in with the client
/// certificate `cert` and its `key` (all PEM).
pub fn kubeconfig_tls_yaml(addr: SocketAddr, ca: &str, cert: &str, key: &str) -> String {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let host = if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kubeforge\n  cluster:\n    server: https://{host}\n    certificate-authority-data: {}\ncontexts:\n- name: kubeforge\n  context:\n    cluster: kubeforge\n    user: kubernetes-admin\n    namespace: default\ncurrent-context: kubeforge\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        b64(ca),
        b64(cert),
        b64(key)
    )
}
