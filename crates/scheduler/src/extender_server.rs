//! A small library for writing a scheduler extender in Rust: implement
//! [`ExtenderHandler`] and [`serve`] it; kube-scheduler (or kubeforge's
//! scheduler) then POSTs `{urlPrefix}/filter`, `/prioritize` and `/bind` to it
//! with the extender JSON (PascalCase keys).
//!
//! ```no_run
//! use kubeforge_scheduler::extender::{ExtenderArgs, ExtenderFilterResult, HostPriority};
//! use kubeforge_scheduler::extender_server::{ExtenderHandler, serve};
//!
//! struct OnlyEven;
//! impl ExtenderHandler for OnlyEven {
//!     fn filter(&self, args: ExtenderArgs) -> ExtenderFilterResult {
//!         let names = args.node_names.unwrap_or_default();
//!         ExtenderFilterResult {
//!             node_names: Some(names.into_iter().filter(|n| n.ends_with(['0', '2', '4', '6', '8'])).collect()),
//!             ..Default::default()
//!         }
//!     }
//! }
//! # async fn run() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8888").await?;
//! serve(listener, std::sync::Arc::new(OnlyEven), std::future::pending()).await
//! # }
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::extender::{
    ExtenderArgs, ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult, HostPriority,
};

/// What an extender does; every verb has a pass-through default.
pub trait ExtenderHandler: Send + Sync + 'static {
    /// `filter`: which nodes fit (default: all of them).
    fn filter(&self, args: ExtenderArgs) -> ExtenderFilterResult {
        ExtenderFilterResult {
            node_names: args.node_names,
            nodes: args.nodes,
            ..Default::default()
        }
    }
    /// `prioritize`: 0–10 per node (default: none).
    fn prioritize(&self, _args: ExtenderArgs) -> Vec<HostPriority> {
        Vec::new()
    }
    /// `bind`: bind the pod (default: an error, as binding is opt-in).
    fn bind(&self, _args: ExtenderBindingArgs) -> ExtenderBindingResult {
        ExtenderBindingResult {
            error: Some("this extender does not bind".into()),
        }
    }
}

fn reply(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// Decode args case-insensitively (as Go's encoding/json does).
fn decode_args(v: &Value) -> ExtenderArgs {
    use crate::extender::get_ci;
    ExtenderArgs {
        pod: get_ci(v, "Pod").cloned().unwrap_or(Value::Null),
        nodes: get_ci(v, "Nodes").cloned(),
        node_names: get_ci(v, "NodeNames").and_then(|n| serde_json::from_value(n.clone()).ok()),
    }
}

async fn handle<H: ExtenderHandler>(
    h: Arc<H>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let verb = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return Ok(reply(StatusCode::BAD_REQUEST, e.to_string().into_bytes())),
    };
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return Ok(reply(
                StatusCode::BAD_REQUEST,
                format!("{{\"Error\":{:?}}}", e.to_string()).into_bytes(),
            ));
        }
    };
    let out = match verb.as_str() {
        "filter" => serde_json::to_vec(&h.filter(decode_args(&v))),
        "prioritize" => serde_json::to_vec(&h.prioritize(decode_args(&v))),
        "bind" => {
            use crate::extender::get_ci;
            let s = |k: &str| {
                get_ci(&v, k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let args = ExtenderBindingArgs {
                pod_name: s("PodName"),
                pod_namespace: s("PodNamespace"),
                pod_uid: s("PodUID"),
                node: s("Node"),
            };
            serde_json::to_vec(&h.bind(args))
        }
        _ => {
            return Ok(reply(
                StatusCode::NOT_FOUND,
                b"{\"Error\":\"unknown verb\"}".to_vec(),
            ));
        }
    };
    Ok(match out {
        Ok(b) => reply(StatusCode::OK, b),
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string().into_bytes(),
        ),
    })
}

/// Serve an extender on a listener until `shutdown` completes. The verb is
/// the last path segment, so any `urlPrefix` path works.
pub async fn serve<H: ExtenderHandler>(
    listener: tokio::net::TcpListener,
    handler: Arc<H>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => r?,
            _ = &mut shutdown => return Ok(()),
        };
        let h = handler.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| handle(h.clone(), req));
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                tracing::debug!(error = %e, "extender connection ended");
            }
        });
    }
}
