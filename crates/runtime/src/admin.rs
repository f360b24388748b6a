//! The admin server: `/metrics` (OpenMetrics text), `/healthz` (the process
//! serves) and `/readyz` (every shared cache has synced), on axum.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::informer::ErasedInformer;
use crate::metrics::{Metrics, OPENMETRICS_CONTENT_TYPE};
use tokio_util::sync::CancellationToken;

pub(crate) struct AdminState {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) informers: Vec<Arc<dyn ErasedInformer>>,
}

async fn metrics(State(s): State<Arc<AdminState>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        s.metrics.encode(),
    )
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(s): State<Arc<AdminState>>) -> (StatusCode, String) {
    let waiting: Vec<&str> = s
        .informers
        .iter()
        .filter(|i| !i.synced())
        .map(|i| i.kind())
        .collect();
    if waiting.is_empty() {
        (StatusCode::OK, "ok".to_string())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("caches not synced: {}", waiting.join(", ")),
        )
    }
}

/// Serve until `stop`.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    stop: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(state));
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
    {
        tracing::warn!(error = %e, "admin server failed");
    }
}
