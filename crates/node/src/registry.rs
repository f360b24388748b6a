//! The local image registry: Debian's `docker-registry` (the CNCF
//! distribution registry) on loopback with its storage under one
//! directory, and a client for the OCI distribution API's push side
//! (blob upload, manifest put) and its existence checks.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::process::{Child, Command};

use crate::error::NodeError;
use crate::host;

/// A running registry this process started.
#[derive(Debug)]
pub struct LocalRegistry {
    child: Child,
    addr: String,
}

/// The registry's configuration: filesystem storage under `dir`, HTTP on
/// `addr` only, no auth (loopback only), deletes allowed.
pub fn config_yaml(dir: &Path, addr: &str) -> String {
    format!(
        "# Written by kubeforge: the local image registry.\n\
         version: 0.1\n\
         log:\n  level: warn\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: {addr}\n",
        dir.join("data").display()
    )
}

impl LocalRegistry {
    /// Start the registry with storage under `dir` on 127.0.0.1:`port`
    /// (0: a free port); returns once `/v2/` answers.
    pub async fn start(dir: &Path, port: u16) -> Result<LocalRegistry, NodeError> {
        let program = host::find_program("docker-registry", "docker-registry")?;
        let port = if port == 0 {
            host::free_loopback_port()?
        } else {
            port
        };
        let addr = format!("127.0.0.1:{port}");
        std::fs::create_dir_all(dir)
            .map_err(|e| NodeError::io(format!("creating {}", dir.display()), e))?;
        let config = dir.join("config.yml");
        std::fs::write(&config, config_yaml(dir, &addr))
            .map_err(|e| NodeError::io(format!("writing {}", config.display()), e))?;
        let log_path = dir.join("registry.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| NodeError::io(format!("creating {}", log_path.display()), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| NodeError::io("duplicating the log file", e))?;
        let mut child = Command::new(&program)
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            // Its own process group: a terminal's Ctrl-C reaches only us,
            // and we stop it after the pods it runs.
            .process_group(0)
            .spawn()
            .map_err(|e| NodeError::io(format!("starting {}", program.display()), e))?;
        let client = RegistryClient::new(&addr);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child
                .try_wait()
                .map_err(|e| NodeError::io("waiting for the registry", e))?
            {
                return Err(NodeError::Exited {
                    program: "docker-registry".into(),
                    status: status.to_string(),
                    log: log_path,
                });
            }
            if client.ping().await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill().await;
                return Err(NodeError::Exited {
                    program: "docker-registry".into(),
                    status: format!("no answer on {addr} within 20s"),
                    log: log_path,
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        tracing::info!(%addr, "local registry started");
        Ok(LocalRegistry { child, addr })
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stop the registry (its storage stays).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The storage directory of a registry started under `dir`.
pub fn data_dir(dir: &Path) -> PathBuf {
    dir.join("data")
}

/// A client of a registry's distribution API over plain HTTP (loopback).
#[derive(Clone, Debug)]
pub struct RegistryClient {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl RegistryClient {
    /// A client of the registry at `addr` (`127.0.0.1:5000`).
    pub fn new(addr: &str) -> RegistryClient {
        RegistryClient {
            base: format!("http://{addr}"),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn call(
        &self,
        method: Method,
        url: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(StatusCode, http::HeaderMap, Bytes), NodeError> {
        let url = if url.starts_with("http") {
            url.to_string()
        } else {
            format!("{}{url}", self.base)
        };
        let mut req = Request::builder().method(method).uri(&url);
        if let Some(ct) = content_type {
            req = req.header(http::header::CONTENT_TYPE, ct);
        }
        let req = req
            .header(http::header::CONTENT_LENGTH, body.len())
            .body(Full::new(body))
            .map_err(|e| NodeError::Registry(format!("{url}: {e}")))?;
        let resp = self
            .http
            .request(req)
            .await
            .map_err(|e| NodeError::Registry(format!("{url}: {e}")))?;
        let (parts, body) = resp.into_parts();
        let bytes = body
            .collect()
            .await
            .map_err(|e| NodeError::Registry(format!("{url}: {e}")))?
            .to_bytes();
        Ok((parts.status, parts.headers, bytes))
    }

    /// `GET /v2/`: whether the registry answers.
    pub async fn ping(&self) -> Result<(), NodeError> {
        let (status, _, _) = self.call(Method::GET, "/v2/", None, Bytes::new()).await?;
        if status.is_success() {
            Ok(())
        } else {
            Err(NodeError::Registry(format!("GET /v2/ answered {status}")))
        }
    }

    /// Whether `repo` has the blob `digest`.
    pub async fn has_blob(&self, repo: &str, digest: &str) -> Result<bool, NodeError> {
        let url = format!("/v2/{repo}/blobs/{digest}");
        let (status, _, _) = self.call(Method::HEAD, &url, None, Bytes::new()).await?;
        Ok(status == StatusCode::OK)
    }

    /// Upload `data` as blob `digest` of `repo` (one monolithic upload),
    /// unless the registry already has it.
    pub async fn put_blob(&self, repo: &str, digest: &str, data: Bytes) -> Result<(), NodeError> {
        if self.has_blob(repo, digest).await? {
            return Ok(());
        }
        let (status, headers, body) = self
            .call(
                Method::POST,
                &format!("/v2/{repo}/blobs/uploads/"),
                None,
                Bytes::new(),
            )
            .await?;
        if status != StatusCode::ACCEPTED {
            return Err(refused("starting an upload", status, &body));
        }
        let location = headers
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| NodeError::Registry("an upload answered without a Location".into()))?;
        let sep = if location.contains('?') { '&' } else { '?' };
        let url = format!("{location}{sep}digest={digest}");
        let (status, _, body) = self
            .call(Method::PUT, &url, Some("application/octet-stream"), data)
            .await?;
        if status != StatusCode::CREATED {
            return Err(refused("uploading a layer", status, &body));
        }
        Ok(())
    }

    /// Put `manifest` (of `media_type`) as `repo:tag`.
    pub async fn put_manifest(
        &self,
        repo: &str,
        tag: &str,
        media_type: &str,
        manifest: Bytes,
    ) -> Result<(), NodeError> {
        let url = format!("/v2/{repo}/manifests/{tag}");
        let (status, _, body) = self
            .call(Method::PUT, &url, Some(media_type), manifest)
            .await?;
        if status != StatusCode::CREATED {
            return Err(refused("putting the manifest", status, &body));
        }
        Ok(())
    }

    /// Whether `repo:tag` exists.
    pub async fn has_manifest(&self, repo: &str, tag: &str) -> Result<bool, NodeError> {
        let url = format!("/v2/{repo}/manifests/{tag}");
        let (status, _, _) = self.call(Method::HEAD, &url, None, Bytes::new()).await?;
        Ok(status == StatusCode::OK)
    }
}

fn refused(what: &str, status: StatusCode, body: &[u8]) -> NodeError {
    NodeError::Registry(format!(
        "{what}: {status}: {}",
        String::from_utf8_lossy(body).trim()
    ))
}
