//! WATCH: newline-delimited JSON events (ADDED, MODIFIED, DELETED, BOOKMARK,
//! ERROR) streamed from the store's watch, filtered by label and field
//! selectors the way kube-apiserver filters them (an object leaving the
//! selection is reported as DELETED, one entering it as ADDED).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode, header};
use kubeforge_apimachinery::{fields::FieldSelector, labels::Selector};
use kubeforge_store::{Event, EventKind, StoreError};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::body::ApiBody;
use crate::codec::Accept;
use crate::context::Ctx;
use crate::error::{ApiError, ApiResult};
use crate::projection::Projection;
use crate::registry::ResourceDef;
use crate::rest::matches;
use crate::table::{self, IncludeObject};

/// How often a bookmark is sent when the client allows them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// Default and largest watch duration.
const MAX_TIMEOUT: u64 = 1800;

/// The watch's channel to its response body, counting what it sends
/// (`apiserver_watch_events_total`) and open while the task runs
/// (`apiserver_longrunning_requests`).
struct Counted {
    tx: mpsc::Sender<Bytes>,
    open: crate::metrics::OpenWatch,
}

impl Counted {
    async fn send(&self, b: Bytes) -> Result<(), mpsc::error::SendError<Bytes>> {
        self.tx.send(b).await?;
        self.open.sent();
        Ok(())
    }

    async fn closed(&self) {
        self.tx.closed().await;
    }
}

struct Renderer {
    def: Arc<ResourceDef>,
    accept: Accept,
    include: IncludeObject,
    labels: Selector,
    fields: FieldSelector,
    filtering: bool,
    /// The fields the selectors read, when objects are selected as stored
    /// (no conversion): only those are decoded per event.
    projection: Option<Projection>,
}

impl Renderer {
    /// The object as served. `memo`: the store event's shared derived form,
    /// which holds the object without managedFields when served as stored
    /// (cut once per event, not once per watcher asking for it).
    fn object(&self, bytes: &Bytes, memo: Option<&OnceLock<Bytes>>) -> Bytes {
        match memo {
            Some(m) if self.accept.omit_managed_fields && !self.def.reshapes() => m
                .get_or_init(|| crate::object::without_managed_fields(bytes))
                .clone(),
            _ => self.def.present_to(bytes, self.accept.omit_managed_fields),
        }
    }

    fn event(&self, ty: &str, bytes: &Bytes, memo: Option<&OnceLock<Bytes>>) -> Bytes {
        let obj = self.object(bytes, memo);
        let mut out = Vec::with_capacity(obj.len() + 32);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(ty.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        if self.accept.metadata_only
            && !self.accept.table
            && let Some(partial) = crate::object::partial_metadata_json(&obj)
        {
            out.extend_from_slice(&partial);
        } else if self.accept.table || self.accept.metadata_only {
            let v: Value = serde_json::from_slice(&obj).unwrap_or(Value::Null);
            let wrapped = if self.accept.table {
                table::single(&self.def.columns, &v, self.include)
            } else {
                crate::context::partial_metadata(&v)
            };
            crate::object::write_json(&mut out, &wrapped);
        } else {
            out.extend_from_slice(&obj);
        }
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    fn selected(&self, bytes: &Bytes) -> bool {
        if !self.filtering {
            return true;
        }
        let v = match &self.projection {
            Some(p) => p.decode(bytes),
            None => self.def.decode_stored(bytes),
        };
        v.is_some_and(|v| matches(&self.def, &v, &self.labels, &self.fields))
    }

    /// The wire event for a store event, if this watcher sees it.
    fn translate(&self, e: &Event) -> Option<Bytes> {
        match e.kind {
            EventKind::Delete => {
                let was = e.prev.as_ref().is_some_and(|p| self.selected(&p.value));
                was.then(|| self.event("DELETED", &e.kv.value, Some(&e.derived)))
            }
            EventKind::Put => {
                let now = self.selected(&e.kv.value);
                let before = e.prev.as_ref().map(|p| self.selected(&p.value));
                match (before, now) {
                    (None, true) | (Some(false), true) => {
                        Some(self.event("ADDED", &e.kv.value, Some(&e.derived)))
                    }
                    (Some(true), true) => {
                        Some(self.event("MODIFIED", &e.kv.value, Some(&e.derived)))
                    }
                    (Some(true), false) => {
                        Some(self.event("DELETED", &e.kv.value, Some(&e.derived)))
                    }
                    _ => None,
                }
            }
        }
    }

    fn bookmark(&self, rev: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rev.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": meta});
        watch_event("BOOKMARK", &crate::object::to_json(&obj))
    }
}

/// One line of a watch stream: `{"type":…,"object":…}` in Go's field
/// order (`metav1.WatchEvent`) and a newline.
fn watch_event(ty: &str, object: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(ty.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn error_event(e: &ApiError) -> Bytes {
    watch_event("ERROR", &e.status_json())
}

/// Serve `?watch=true`.
pub async fn watch(ctx: &Ctx<'_>) -> ApiResult<Response<ApiBody>> {
    let (labels, fields) = ctx.selectors()?;
    let store = ctx.server.store().clone();
    let prefix = ctx.def.collection_prefix(ctx.ns.as_deref());
    let rv = ctx.query.get("resourceVersion").filter(|s| !s.is_empty());
    let send_initial = ctx.query.flag("sendInitialEvents");
    let bookmarks = ctx.query.flag("allowWatchBookmarks");
    let timeout = ctx
        .query
        .int("timeoutSeconds")?
        .map(|t| t.clamp(0, MAX_TIMEOUT as i64) as u64)
        .unwrap_or(MAX_TIMEOUT);
    let renderer = Renderer {
        def: ctx.def.clone(),
        accept: ctx.accept.clone(),
        include: IncludeObject::parse(ctx.query.get("includeObject")),
        filtering: !labels.is_everything() || !fields.is_everything(),
        projection: (!ctx.def.reshapes()).then(|| Projection::for_selectors(&labels, &fields)),
        labels,
        fields,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let parsed = match rv.filter(|rv| *rv != "0") {
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?,
        ),
        None => None,
    };
    // The store only shows durable revisions, so a revision above the
    // current one was never handed out. As in kube-apiserver's cacher, a
    // plain watch from it is accepted (it gets the events past it); one
    // that asks for the initial events at it first is answered with an
    // ERROR event carrying "Too large resource version" (kube waits up to
    // 3 s for its cache first; the store is never behind itself).
    let mut too_large = None;
    let (initial, start) = match parsed {
        Some(rev) if !send_initial => (Vec::new(), rev),
        _ => {
            let r = store.range(&prefix, None, 0);
            if let Some(rev) = parsed.filter(|rev| *rev > r.revision) {
                too_large = Some(ApiError::too_large_resource_version(rev, r.revision));
            }
            (r.kvs, r.revision)
        }
    };
    let watcher = match too_large {
        Some(e) => Err(e),
        None => store.watch(&prefix, start).map_err(ApiError::from),
    };
    let open = ctx
        .server
        .metrics()
        .watch_opened(&ctx.def, ctx.ns.is_some());
    let tx = Counted { tx, open };
    tokio::spawn(async move {
        let mut watcher = match watcher {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(error_event(&e)).await;
                return;
            }
        };
        for kv in &initial {
            if renderer.selected(&kv.value)
                && tx
                    .send(renderer.event("ADDED", &kv.value, None))
                    .await
                    .is_err()
            {
                return;
            }
        }
        if send_initial && tx.send(renderer.bookmark(start, true)).await.is_err() {
            return;
        }
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        // kube-apiserver also sends a bookmark 2 s before a watch times out,
        // so the client resumes from a recent revision.
        let last_call = tokio::time::sleep(Duration::from_secs(timeout.saturating_sub(2)));
        tokio::pin!(last_call);
        let mut last_call_due = timeout > 2;
        let mut ticker = tokio::time::interval(BOOKMARK_EVERY);
        ticker.tick().await;
        loop {
            let ev = tokio::select! {
                () = &mut deadline => return,
                () = &mut last_call, if last_call_due => {
                    last_call_due = false;
                    None
                }
                _ = ticker.tick(), if bookmarks => None,
                () = tx.closed() => return,
                ev = watcher.next() => Some(ev),
            };
            // A bookmark carries the revision through which this watch has
            // delivered everything (kube-apiserver's watch cache sends its
            // current resourceVersion): on a quiet resource it moves with the
            // store, so a client that resumes from it is not sent back to a
            // revision the history has dropped.
            let Some(ev) = ev else {
                if bookmarks
                    && tx
                        .send(renderer.bookmark(watcher.progress(), false))
                        .await
                        .is_err()
                {
                    return;
                }
                continue;
            };
            match ev {
                None => return,
                Some(Err(e)) => {
                    let err = match e {
                        StoreError::Compacted { .. } => {
                            ApiError::expired("too old resource version: the watch fell behind")
                        }
                        other => ApiError::from(other),
                    };
                    let _ = tx.send(error_event(&err)).await;
                    return;
                }
                Some(Ok(e)) => {
                    if let Some(b) = renderer.translate(&e)
                        && tx.send(b).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
    });
    let mut resp = Response::new(ApiBody::Stream(rx));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}
