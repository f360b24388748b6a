//! Fault injection in front of the API server, so an operator's convergence
//! can be tested: a share of API requests answered with 500 `InternalError`,
//! 409 `Conflict` or 429 `TooManyRequests` (real `Status` bodies, and a
//! `Retry-After` header on 429), added latency, and watches whose streams end
//! after a while so reflectors must watch again.
//!
//! [`Faults`] describes what to inject; a [`FaultHandle`] holds the current
//! setting (switchable at runtime with [`FaultHandle::set`]) and counts what
//! was injected ([`FaultStats`]); [`FaultLayer`] is the tower layer that
//! applies it to a service answering with the server's [`ApiBody`].
//!
//! Only resource requests are eligible (`/api/v1/…`, `/apis/{g}/{v}/…`):
//! discovery, OpenAPI, `/version` and health checks always pass, as they do
//! not exercise an operator's retry logic and failing them only breaks
//! client start-up. The one exception is [`Faults::unavailable_groups`]:
//! every request under `/apis/{group}` — discovery included — answered as
//! kube-aggregator answers for an APIService whose backend is down, so a
//! client's handling of partial discovery can be tested. [`Faults::verbs`] and [`Faults::resources`] narrow the
//! eligible requests further. 409 `Conflict` is injected only into updates
//! and patches, where a real server returns it for a stale resourceVersion.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body::{Body, Frame, SizeHint};
use kubeforge_apiserver::ApiError;
use kubeforge_apiserver::body::ApiBody;
use kubeforge_apiserver::error::GroupResource;
use kubeforge_apiserver::request::{Query, Route, route};
use tokio::sync::watch;

/// An API verb, as Kubernetes' authorization names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `GET` of one object (also of a subresource).
    Get,
    /// `GET` of a collection.
    List,
    /// `GET` of a collection with `watch=true`.
    Watch,
    /// `POST`.
    Create,
    /// `PUT` (also of `status` and `scale`).
    Update,
    /// `PATCH`, server-side apply included.
    Patch,
    /// `DELETE` of one object.
    Delete,
    /// `DELETE` of a collection.
    DeleteCollection,
}

impl Verb {
    /// Every verb.
    pub const ALL: [Verb; 8] = [
        Verb::Get,
        Verb::List,
        Verb::Watch,
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
    ];

    /// The verbs that change objects.
    pub const WRITES: [Verb; 5] = [
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::DeleteCollection,
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A kind of error answer to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InjectedError {
    /// 500 with reason `InternalError` (any verb).
    InternalError,
    /// 409 with reason `Conflict`, "the object has been modified" (updates
    /// and patches only).
    Conflict,
    /// 429 with reason `TooManyRequests` and a `Retry-After` header (any
    /// verb), as kube-apiserver's max-in-flight and priority-and-fairness
    /// filters answer.
    TooManyRequests,
}

impl InjectedError {
    /// Every kind.
    pub const ALL: [InjectedError; 3] = [
        InjectedError::InternalError,
        InjectedError::Conflict,
        InjectedError::TooManyRequests,
    ];

    fn applies_to(self, verb: Verb) -> bool {
        match self {
            InjectedError::Conflict => matches!(verb, Verb::Update | Verb::Patch),
            InjectedError::InternalError | InjectedError::TooManyRequests => true,
        }
    }
}

/// What to inject; the default injects nothing.
///
/// ```
/// use std::time::Duration;
/// use kubeforge_testenv::{Faults, Verb};
/// let faults = Faults::new()
///     .error_rate(0.05)
///     .latency(Duration::from_millis(2))
///     .drop_watches_after(Duration::from_secs(1))
///     .verbs(Verb::ALL)
///     .seed(7);
/// assert!(faults.is_active());
/// ```
#[derive(Clone, PartialEq)]
#[must_use]
pub struct Faults {
    error_rate: f64,
    errors: Vec<InjectedError>,
    retry_after_secs: u32,
    latency: Duration,
    latency_jitter: Duration,
    drop_watches: Option<(Duration, Duration)>,
    verbs: u8,
    resources: Option<Vec<String>>,
    unavailable_groups: Vec<String>,
    seed: Option<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            error_rate: 0.0,
            errors: InjectedError::ALL.to_vec(),
            retry_after_secs: 1,
            latency: Duration::ZERO,
            latency_jitter: Duration::ZERO,
            drop_watches: None,
            verbs: Verb::ALL.iter().fold(0, |m, v| m | v.bit()),
            resources: None,
            unavailable_groups: Vec::new(),
            seed: None,
        }
    }
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verbs: Vec<Verb> = Verb::ALL
            .into_iter()
            .filter(|v| self.verbs & v.bit() != 0)
            .collect();
        f.debug_struct("Faults")
            .field("error_rate", &self.error_rate)
            .field("errors", &self.errors)
            .field("retry_after_secs", &self.retry_after_secs)
            .field("latency", &self.latency)
            .field("latency_jitter", &self.latency_jitter)
            .field("drop_watches", &self.drop_watches)
            .field("verbs", &verbs)
            .field("resources", &self.resources)
            .field("unavailable_groups", &self.unavailable_groups)
            .field("seed", &self.seed)
            .finish()
    }
}

impl Faults {
    /// No faults: every request passes untouched.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// The share of eligible requests answered with an error, from 0.0 to
    /// 1.0 (values outside are clamped; NaN counts as 0).
    pub fn error_rate(mut self, rate: f64) -> Faults {
        self.error_rate = if rate.is_nan() {
            0.0
        } else {
            rate.clamp(0.0, 1.0)
        };
        self
    }

    /// Which errors to inject (default: all three). For each failing
    /// request one is picked at random among those that apply to its verb;
    /// when none applies (only `Conflict` chosen, and the request is a GET)
    /// the request passes.
    pub fn errors(mut self, kinds: impl IntoIterator<Item = InjectedError>) -> Faults {
        self.errors = kinds.into_iter().collect();
        self.errors.dedup();
        self
    }

    /// The `Retry-After` of injected 429 answers (whole seconds, at least
    /// 1; default 1 s).
    pub fn retry_after(mut self, after: Duration) -> Faults {
        self.retry_after_secs = u32::try_from(after.as_secs()).unwrap_or(u32::MAX).max(1);
        self
    }

    /// Delay every eligible request by `latency` before it reaches the
    /// server.
    pub fn latency(mut self, latency: Duration) -> Faults {
        self.latency = latency;
        self
    }

    /// Add a random delay in `[0, jitter)` on top of [`Self::latency`].
    pub fn latency_jitter(mut self, jitter: Duration) -> Faults {
        self.latency_jitter = jitter;
        self
    }

    /// End the response stream of every eligible watch `after` it started
    /// (a clean end, as when a real server's watch times out), so the
    /// client must watch again from its last resourceVersion.
    pub fn drop_watches_after(self, after: Duration) -> Faults {
        self.drop_watches_between(after, after)
    }

    /// End every eligible watch after a random time in `[min, max]`.
    pub fn drop_watches_between(mut self, min: Duration, max: Duration) -> Faults {
        self.drop_watches = Some((min.min(max), max.max(min)));
        self
    }

    /// Only requests with these verbs are eligible (default: all).
    pub fn verbs(mut self, verbs: impl IntoIterator<Item = Verb>) -> Faults {
        self.verbs = verbs.into_iter().fold(0, |m, v| m | v.bit());
        self
    }

    /// Only requests for these resources are eligible, by plural name
    /// (`configmaps`, `memcacheds`; default: all). Subresources count as
    /// their resource.
    pub fn resources<S: Into<String>>(mut self, plurals: impl IntoIterator<Item = S>) -> Faults {
        self.resources = Some(plurals.into_iter().map(Into::into).collect());
        self
    }

    /// Answer every request under `/apis/{group}` for these API groups —
    /// their discovery documents (`/apis/{group}`, `/apis/{group}/{version}`)
    /// and their resources — with 503 and the plain-text body
    /// `service unavailable`, as kube-aggregator answers for an APIService
    /// whose backend is unavailable; `/apis` still lists the groups. Not
    /// random: every such request fails while set.
    pub fn unavailable_groups<S: Into<String>>(
        mut self,
        groups: impl IntoIterator<Item = S>,
    ) -> Faults {
        self.unavailable_groups = groups.into_iter().map(Into::into).collect();
        self
    }

    /// Seed the random choices, for reproducible runs (the same requests in
    /// the same order then meet the same faults). Setting faults with a
    /// seed restarts the sequence.
    pub fn seed(mut self, seed: u64) -> Faults {
        self.seed = Some(seed);
        self
    }

    /// Whether anything would be injected.
    pub fn is_active(&self) -> bool {
        (self.error_rate > 0.0 && !self.errors.is_empty())
            || !self.latency.is_zero()
            || !self.latency_jitter.is_zero()
            || self.drop_watches.is_some()
            || !self.unavailable_groups.is_empty()
    }

    /// Whether `path` is under an unavailable group.
    fn unavailable(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix("/apis/") else {
            return false;
        };
        let group = rest.split('/').next().unwrap_or_default();
        self.unavailable_groups.iter().any(|g| g == group)
    }

    fn eligible(&self, req: &Target) -> bool {
        self.verbs & req.verb.bit() != 0
            && self
                .resources
                .as_ref()
                .is_none_or(|rs| rs.contains(&req.plural))
    }
}

/// Counts of what was injected since the handle was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Requests answered with 500 `InternalError`.
    pub internal_errors: u64,
    /// Requests answered with 409 `Conflict`.
    pub conflicts: u64,
    /// Requests answered with 429 `TooManyRequests`.
    pub too_many_requests: u64,
    /// Requests delayed by added latency.
    pub delayed: u64,
    /// Watch requests that reached the server (each re-watch counts).
    pub watches: u64,
    /// Watch streams ended by fault injection.
    pub watches_dropped: u64,
    /// Requests answered 503 because their API group is unavailable.
    pub unavailable: u64,
}

impl FaultStats {
    /// All injected error answers.
    pub fn errors(&self) -> u64 {
        self.internal_errors + self.conflicts + self.too_many_requests
    }
}

#[derive(Default)]
struct Counters {
    internal_errors: AtomicU64,
    conflicts: AtomicU64,
    too_many_requests: AtomicU64,
    delayed: AtomicU64,
    watches: AtomicU64,
    watches_dropped: AtomicU64,
    unavailable: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared {
    faults: watch::Sender<Arc<Faults>>,
    rng: Mutex<fastrand::Rng>,
    counters: Counters,
}

impl Shared {
    fn with_rng<T>(&self, f: impl FnOnce(&mut fastrand::Rng) -> T) -> T {
        // A poisoned lock only means another request panicked mid-draw; the
        // generator is still usable.
        let mut rng = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut rng)
    }

    fn between(&self, min: Duration, max: Duration) -> Duration {
        if max <= min {
            return min;
        }
        let span = (max - min).as_nanos().min(u128::from(u64::MAX)) as u64;
        min + Duration::from_nanos(self.with_rng(|r| r.u64(0..=span)))
    }
}

/// The live fault setting of a test environment: switch faults on and off
/// at runtime and read what was injected. Cheap to clone; every clone and
/// every [`FaultLayer`] made from it share the setting.
#[derive(Clone)]
pub struct FaultHandle {
    shared: Arc<Shared>,
}

impl Default for FaultHandle {
    fn default() -> Self {
        FaultHandle::new(Faults::new())
    }
}

impl std::fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultHandle")
            .field("faults", &self.get())
            .field("stats", &self.stats())
            .finish()
    }
}

impl FaultHandle {
    /// A handle starting with `faults`.
    pub fn new(faults: Faults) -> FaultHandle {
        let rng = match faults.seed {
            Some(s) => fastrand::Rng::with_seed(s),
            None => fastrand::Rng::new(),
        };
        FaultHandle {
            shared: Arc::new(Shared {
                faults: watch::channel(Arc::new(faults)).0,
                rng: Mutex::new(rng),
                counters: Counters::default(),
            }),
        }
    }

    /// Replace the setting; it applies to the next request. Watches already
    /// open pick up a new watch-drop setting at once (their age counts from
    /// when they started).
    pub fn set(&self, faults: Faults) {
        if let Some(seed) = faults.seed {
            self.shared.with_rng(|r| r.seed(seed));
        }
        tracing::debug!(?faults, "fault injection set");
        self.shared.faults.send_replace(Arc::new(faults));
    }

    /// Inject nothing from now on.
    pub fn clear(&self) {
        self.set(Faults::new());
    }

    /// The current setting.
    pub fn get(&self) -> Faults {
        Faults::clone(&self.shared.faults.borrow())
    }

    /// What was injected so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultStats {
            internal_errors: l(&c.internal_errors),
            conflicts: l(&c.conflicts),
            too_many_requests: l(&c.too_many_requests),
            delayed: l(&c.delayed),
            watches: l(&c.watches),
            watches_dropped: l(&c.watches_dropped),
            unavailable: l(&c.unavailable),
        }
    }

    /// A tower layer applying this handle's setting to a service.
    pub fn layer(&self) -> FaultLayer {
        FaultLayer {
            shared: self.shared.clone(),
        }
    }
}

/// Tower layer injecting faults in front of a service that answers with
/// [`ApiBody`] (the API server's [`kubeforge_apiserver::InProcess`]).
#[derive(Clone)]
pub struct FaultLayer {
    shared: Arc<Shared>,
}

impl<S> tower::Layer<S> for FaultLayer {
    type Service = FaultService<S>;

    fn layer(&self, inner: S) -> FaultService<S> {
        FaultService {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service made by [`FaultLayer`].
#[derive(Clone)]
pub struct FaultService<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The resource request a fault may hit.
#[derive(Debug)]
struct Target {
    verb: Verb,
    group: String,
    plural: String,
    name: Option<String>,
}

fn target(method: &Method, uri: &http::Uri) -> Option<Target> {
    // Only namespaces have cluster-scoped subresources that look like a
    // namespaced collection (`namespaces/{name}/status`, `…/finalize`).
    let Route::Resource(p) = route(uri.path(), |_, _, r| !matches!(r, "status" | "finalize"))
    else {
        return None;
    };
    let collection = p.name.is_none();
    let verb = match *method {
        Method::GET | Method::HEAD if collection => {
            if Query::parse(uri.query()).flag("watch") {
                Verb::Watch
            } else {
                Verb::List
            }
        }
        Method::GET | Method::HEAD => Verb::Get,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if collection => Verb::DeleteCollection,
        Method::DELETE => Verb::Delete,
        _ => return None,
    };
    Some(Target {
        verb,
        group: p.group,
        plural: p.plural,
        name: p.name,
    })
}

/// What to do to one request, decided before it is sent on.
struct Decision {
    delay: Duration,
    error: Option<InjectedError>,
}

impl Shared {
    fn decide(&self, faults: &Faults, t: &Target) -> Decision {
        let mut d = Decision {
            delay: faults.latency,
            error: None,
        };
        if !faults.latency_jitter.is_zero() {
            d.delay += self.between(Duration::ZERO, faults.latency_jitter);
        }
        if faults.error_rate > 0.0 {
            let kinds: Vec<InjectedError> = faults
                .errors
                .iter()
                .copied()
                .filter(|k| k.applies_to(t.verb))
                .collect();
            if !kinds.is_empty() {
                d.error = self.with_rng(|r| {
                    (r.f64() < faults.error_rate).then(|| kinds[r.usize(..kinds.len())])
                });
            }
        }
        d
    }

    fn error_response(
        &self,
        kind: InjectedError,
        t: &Target,
        retry_after: u32,
    ) -> Response<ApiBody> {
        let c = &self.counters;
        let gr = GroupResource {
            group: &t.group,
            resource: &t.plural,
        };
        let e = match kind {
            InjectedError::InternalError => {
                bump(&c.internal_errors);
                ApiError::internal("injected by kubeforge-testenv fault injection")
            }
            InjectedError::Conflict => {
                bump(&c.conflicts);
                ApiError::stale(gr, t.name.as_deref().unwrap_or_default())
            }
            InjectedError::TooManyRequests => {
                bump(&c.too_many_requests);
                ApiError::too_many_requests(
                    "Too many requests, please try again later.",
                    retry_after,
                )
            }
        };
        tracing::debug!(verb = ?t.verb, resource = %gr, code = e.code, reason = e.reason, "injected API error");
        kubeforge_apiserver::codec::respond_error(&e)
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Resolves when the watch that started at `started` must end under the
/// current setting (re-read whenever the setting changes).
async fn watch_deadline(shared: Arc<Shared>, target: Target, started: tokio::time::Instant) {
    let mut rx = shared.faults.subscribe();
    loop {
        let after = {
            let faults = rx.borrow_and_update();
            if faults.eligible(&target) {
                faults.drop_watches
            } else {
                None
            }
        };
        let after = after.map(|(min, max)| shared.between(min, max));
        match after {
            Some(after) => tokio::select! {
                () = tokio::time::sleep_until(started + after) => return,
                r = rx.changed() => if r.is_err() { std::future::pending::<()>().await },
            },
            None => {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

impl<S, B> tower::Service<Request<B>> for FaultService<S>
where
    S: tower::Service<Request<B>, Response = Response<ApiBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response<FaultBody>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response<FaultBody>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The ready clone answers this request; a fresh clone waits for the
        // next poll_ready.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let shared = self.shared.clone();
        let faults = Arc::clone(&shared.faults.borrow());
        if faults.unavailable(req.uri().path()) {
            bump(&shared.counters.unavailable);
            tracing::debug!(path = %req.uri().path(), "API group unavailable by fault injection");
            return Box::pin(std::future::ready(Ok(service_unavailable())));
        }
        let target = target(req.method(), req.uri());
        Box::pin(async move {
            let Some(target) = target else {
                let resp = inner.call(req).await?;
                return Ok(resp.map(FaultBody::plain));
            };
            if faults.is_active() && faults.eligible(&target) {
                let d = shared.decide(&faults, &target);
                if !d.delay.is_zero() {
                    bump(&shared.counters.delayed);
                    tokio::time::sleep(d.delay).await;
                }
                if let Some(kind) = d.error {
                    let resp = shared.error_response(kind, &target, faults.retry_after_secs);
                    return Ok(resp.map(FaultBody::plain));
                }
            }
            if target.verb != Verb::Watch {
                let resp = inner.call(req).await?;
                return Ok(resp.map(FaultBody::plain));
            }
            let started = tokio::time::Instant::now();
            bump(&shared.counters.watches);
            let resp = inner.call(req).await?;
            if !resp.status().is_success() {
                return Ok(resp.map(FaultBody::plain));
            }
            let deadline: BoxFuture<()> = Box::pin(watch_deadline(shared.clone(), target, started));
            Ok(resp.map(|b| FaultBody {
                inner: Some(b),
                deadline: Some(deadline),
                shared: Some(shared),
            }))
        })
    }
}

/// kube-aggregator's answer for an unavailable APIService (`http.Error`
/// with "service unavailable").
fn service_unavailable() -> Response<FaultBody> {
    let mut r = Response::new(FaultBody::plain(ApiBody::full(Bytes::from_static(
        b"service unavailable\n",
    ))));
    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut().insert(
        "x-content-type-options",
        http::HeaderValue::from_static("nosniff"),
    );
    r
}

/// Response body of a [`FaultService`]: the server's body, or a watch
/// stream that fault injection may end early.
pub struct FaultBody {
    inner: Option<ApiBody>,
    deadline: Option<BoxFuture<()>>,
    shared: Option<Arc<Shared>>,
}

impl FaultBody {
    fn plain(b: ApiBody) -> FaultBody {
        FaultBody {
            inner: Some(b),
            deadline: None,
            shared: None,
        }
    }
}

impl std::fmt::Debug for FaultBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBody")
            .field("inner", &self.inner)
            .field("may_drop", &self.deadline.is_some())
            .finish()
    }
}

impl Body for FaultBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if let Some(d) = this.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            this.deadline = None;
            // Dropping the server's stream ends its watch.
            if this.inner.take().is_some() {
                if let Some(s) = &this.shared {
                    bump(&s.counters.watches_dropped);
                }
                tracing::debug!("watch dropped by fault injection");
            }
        }
        match this.inner.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(b) if self.deadline.is_none() => b.size_hint(),
            Some(_) => SizeHint::default(),
            None => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(method: Method, uri: &str) -> Option<Target> {
        target(&method, &uri.parse().expect("uri"))
    }

    #[test]
    fn classifies_requests() {
        let v = |m, u| t(m, u).map(|t| t.verb);
        assert_eq!(
            v(Method::GET, "/api/v1/namespaces/a/pods"),
            Some(Verb::List)
        );
        assert_eq!(
            v(
                Method::GET,
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1"
            ),
            Some(Verb::Watch)
        );
        assert_eq!(v(Method::GET, "/api/v1/pods?watch=1"), Some(Verb::Watch));
        assert_eq!(
            v(Method::GET, "/api/v1/namespaces/a/pods/p"),
            Some(Verb::Get)
        );
        assert_eq!(v(Method::GET, "/api/v1/namespaces/a"), Some(Verb::Get));
        assert_eq!(
            v(Method::PUT, "/api/v1/namespaces/a/status"),
            Some(Verb::Update)
        );
        assert_eq!(
            v(Method::PUT, "/api/v1/namespaces/a/finalize"),
            Some(Verb::Update)
        );
        assert_eq!(
            v(Method::POST, "/apis/apps/v1/namespaces/a/deployments"),
            Some(Verb::Create)
        );
        assert_eq!(
            v(
                Method::PATCH,
                "/apis/apps/v1/namespaces/a/deployments/d/scale"
            ),
            Some(Verb::Patch)
        );
        assert_eq!(
            v(Method::DELETE, "/api/v1/namespaces/a/configmaps"),
            Some(Verb::DeleteCollection)
        );
        assert_eq!(
            v(Method::DELETE, "/api/v1/namespaces/a/configmaps/c"),
            Some(Verb::Delete)
        );
        for u in [
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps/v1",
            "/openapi/v2",
            "/version",
            "/healthz",
        ] {
            assert!(t(Method::GET, u).is_none(), "{u}");
        }
        let d = t(Method::PATCH, "/apis/apps/v1/namespaces/a/deployments/d").expect("resource");
        assert_eq!(
            (d.group.as_str(), d.plural.as_str(), d.name.as_deref()),
            ("apps", "deployments", Some("d"))
        );
    }

    #[test]
    fn eligibility_follows_verbs_and_resources() {
        let f = Faults::new()
            .verbs([Verb::Update])
            .resources(["configmaps"]);
        let get = t(Method::GET, "/api/v1/namespaces/a/configmaps/c").expect("get");
        let put = t(Method::PUT, "/api/v1/namespaces/a/configmaps/c").expect("put");
        let put_secret = t(Method::PUT, "/api/v1/namespaces/a/secrets/c").expect("put");
        assert!(!f.eligible(&get));
        assert!(f.eligible(&put));
        assert!(!f.eligible(&put_secret));
    }

    #[test]
    fn conflict_only_on_updates_and_patches() {
        let h = FaultHandle::new(Faults::new());
        let f = Faults::new()
            .error_rate(1.0)
            .errors([InjectedError::Conflict]);
        let get = t(Method::GET, "/api/v1/namespaces/a/configmaps/c").expect("get");
        let patch = t(Method::PATCH, "/api/v1/namespaces/a/configmaps/c").expect("patch");
        assert_eq!(h.shared.decide(&f, &get).error, None);
        assert_eq!(
            h.shared.decide(&f, &patch).error,
            Some(InjectedError::Conflict)
        );
    }

    #[test]
    fn seeded_choices_repeat() {
        let f = Faults::new().error_rate(0.5).seed(42);
        let get = t(Method::GET, "/api/v1/namespaces/a/configmaps/c").expect("get");
        let run = || {
            let h = FaultHandle::new(f.clone());
            (0..64)
                .map(|_| h.shared.decide(&f, &get).error)
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        assert!(a.iter().any(Option::is_some) && a.iter().any(Option::is_none));
    }

    #[test]
    fn debug_names_the_verbs() {
        let d = format!("{:?}", Faults::new().verbs([Verb::Patch, Verb::Watch]));
        assert!(d.contains("verbs: [Watch, Patch]"), "{d}");
    }

    #[test]
    fn rates_are_clamped() {
        assert_eq!(Faults::new().error_rate(7.0).error_rate, 1.0);
        assert_eq!(Faults::new().error_rate(-1.0).error_rate, 0.0);
        assert_eq!(Faults::new().error_rate(f64::NAN).error_rate, 0.0);
        assert!(!Faults::new().is_active());
        assert!(!Faults::new().errors([]).error_rate(1.0).is_active());
    }
}
