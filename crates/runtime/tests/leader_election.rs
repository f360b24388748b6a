//! Leader election between managers on one Lease, against the embedded API
//! server: exactly one reconciles; a leader that dies without releasing is
//! replaced within the lease duration; a released Lease is taken at once; a
//! leader that cannot renew stops its controllers.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{admin_listener, eventually, http_get, sample};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use kubeforge_apiserver::ApiServer;
use kubeforge_runtime::{Action, Error, LeaderElection, Manager, ShutdownHandle};
use tokio::task::JoinHandle;

const LEASE: &str = "test-lock";

struct Replica {
    reconciles: Arc<AtomicUsize>,
    stop: ShutdownHandle,
    run: JoinHandle<Result<(), Error>>,
    admin: std::net::SocketAddr,
}

fn election(identity: &str, lease: Duration) -> LeaderElection {
    LeaderElection::new(LEASE, "default")
        .identity(identity)
        .lease_duration(lease)
        .renew_deadline(lease.mul_f64(0.75))
        .retry_period(Duration::from_millis(200))
}

fn replica(client: &Client, election: LeaderElection) -> Replica {
    let (listener, admin) = admin_listener();
    let mgr = Manager::builder(client.clone())
        .metrics_listener(listener)
        .handle_signals(false)
        .leader_election_with(election)
        .build();
    let reconciles = Arc::new(AtomicUsize::new(0));
    let r = reconciles.clone();
    mgr.controller::<ConfigMap, _>("cms", ())
        .register(move |_cm: Arc<ConfigMap>, _| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(Action::await_change())
            }
        });
    let stop = mgr.shutdown_handle();
    Replica {
        reconciles,
        stop,
        run: tokio::spawn(mgr.run()),
        admin,
    }
}

async fn create_cm(client: &Client, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap");
}

/// Someone else takes the Lease over (as a partitioned leader would find).
async fn steal_lease(client: &Client) {
    let api = Api::<Lease>::namespaced(client.clone(), "default");
    let mut l = api.get(LEASE).await.expect("lease");
    if let Some(spec) = l.spec.as_mut() {
        spec.holder_identity = Some("intruder".into());
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    }
    api.replace(LEASE, &PostParams::default(), &l)
        .await
        .expect("steal lease");
}

async fn lease(client: &Client) -> Option<Lease> {
    Api::<Lease>::namespaced(client.clone(), "default")
        .get_opt(LEASE)
        .await
        .expect("get lease")
}

async fn holder(client: &Client) -> Option<String> {
    lease(client)
        .await
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

async fn master_status(r: &Replica) -> Option<f64> {
    let (_, text) = http_get(r.admin, "/metrics").await;
    sample(
        &text,
        &format!("leader_election_master_status{{name=\"{LEASE}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_two_replicas_reconciles_and_a_dead_leader_is_replaced() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    let lease_duration = Duration::from_secs(2);
    let a = replica(&server.client(), election("replica-a", lease_duration));
    eventually("a leads", Duration::from_secs(10), || async {
        holder(&user).await.as_deref() == Some("replica-a")
    })
    .await;
    let b = replica(&server.client(), election("replica-b", lease_duration));
    for i in 0..5 {
        create_cm(&user, &format!("cm-{i}")).await;
    }
    eventually("leader reconciled all", Duration::from_secs(10), || async {
        a.reconciles.load(Ordering::SeqCst) >= 5
    })
    .await;
    // Give the follower every chance to (wrongly) reconcile.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(
        b.reconciles.load(Ordering::SeqCst),
        0,
        "the follower reconciled"
    );
    eventually(
        "follower's cache is synced anyway",
        Duration::from_secs(5),
        || async { http_get(b.admin, "/readyz").await.0 == 200 },
    )
    .await;
    assert_eq!(master_status(&a).await, Some(1.0));
    assert_eq!(master_status(&b).await, Some(0.0));

    let l = lease(&user).await.and_then(|l| l.spec).expect("lease spec");
    assert_eq!(l.lease_duration_seconds, Some(2));
    assert_eq!(l.lease_transitions, Some(0));
    let acquired = l.acquire_time.clone().expect("acquireTime");
    let renewed = l.renew_time.clone().expect("renewTime");
    assert!(
        renewed.0 > acquired.0,
        "renewTime {renewed:?} did not move past acquireTime {acquired:?}"
    );

    // Kill the leader: no release, no graceful anything.
    a.run.abort();
    let killed = Instant::now();
    eventually("b takes over", Duration::from_secs(10), || async {
        holder(&user).await.as_deref() == Some("replica-b")
    })
    .await;
    let took = killed.elapsed();
    // The follower waits out the lease from when it last saw a renewal:
    // at most lease duration + one jittered retry period after the kill.
    assert!(
        took <= lease_duration
            + Duration::from_millis(200).mul_f64(2.2)
            + Duration::from_millis(1500),
        "takeover took {took:?}"
    );
    let l = lease(&user).await.and_then(|l| l.spec).expect("lease spec");
    assert_eq!(l.lease_transitions, Some(1));
    // The new leader reconciles what exists and what comes.
    eventually(
        "b reconciles the existing five",
        Duration::from_secs(10),
        || async { b.reconciles.load(Ordering::SeqCst) >= 5 },
    )
    .await;
    create_cm(&user, "after").await;
    eventually(
        "b reconciles new objects",
        Duration::from_secs(10),
        || async { b.reconciles.load(Ordering::SeqCst) >= 6 },
    )
    .await;
    assert_eq!(master_status(&b).await, Some(1.0));
    b.stop.shutdown();
    assert!(matches!(b.run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_on_shutdown_hands_over_at_once() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    // A long lease: without the release the follower would wait 10 s.
    let long = Duration::from_secs(10);
    let a = replica(
        &server.client(),
        election("replica-a", long).release_on_cancel(true),
    );
    eventually("a leads", Duration::from_secs(10), || async {
        holder(&user).await.as_deref() == Some("replica-a")
    })
    .await;
    let b = replica(&server.client(), election("replica-b", long));
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.stop.shutdown();
    assert!(matches!(a.run.await, Ok(Ok(()))));
    let released = Instant::now();
    eventually("b takes over", Duration::from_secs(10), || async {
        holder(&user).await.as_deref() == Some("replica-b")
    })
    .await;
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "took {:?} despite the release",
        released.elapsed()
    );
    b.stop.shutdown();
    assert!(matches!(b.run.await, Ok(Ok(()))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_with_an_error() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    let a = replica(
        &server.client(),
        election("replica-a", Duration::from_secs(2)),
    );
    eventually("a leads", Duration::from_secs(10), || async {
        holder(&user).await.as_deref() == Some("replica-a")
    })
    .await;
    // Someone else takes the Lease over (as a partitioned leader would find).
    steal_lease(&user).await;
    let r = tokio::time::timeout(Duration::from_secs(10), a.run).await;
    match r {
        Ok(Ok(Err(Error::LeaderElectionLost { name, .. }))) => assert_eq!(name, LEASE),
        other => panic!("expected LeaderElectionLost, got {other:?}"),
    }
    // Its controllers are gone: new objects are not reconciled.
    let before = a.reconciles.load(Ordering::SeqCst);
    create_cm(&user, "late").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(a.reconciles.load(Ordering::SeqCst), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_leader_election_settings_are_refused() {
    let server = ApiServer::in_memory().await;
    let mgr = Manager::builder(server.client())
        .handle_signals(false)
        .leader_election_with(
            LeaderElection::new(LEASE, "default").renew_deadline(Duration::from_secs(30)),
        )
        .build();
    let err = mgr.run().await.expect_err("invalid settings accepted");
    assert!(
        err.to_string()
            .contains("lease duration must be greater than the renew deadline"),
        "{err}"
    );
}

/// Sets its flag when dropped: the reconcile future holding it is gone.
struct Dropped(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A replica that loses its Lease stops the reconcile it is running at
/// once (another replica may lead already), not after the shutdown grace:
/// when `run` reports the loss, the reconcile is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_reconciles_in_flight_at_once() {
    let server = ApiServer::in_memory().await;
    let user = server.client();
    let mgr = Manager::builder(server.client())
        .handle_signals(false)
        .leader_election_with(election("replica-a", Duration::from_secs(2)))
        // Far longer than the test may take: the grace must not apply.
        .graceful_shutdown_timeout(Duration::from_secs(3600))
        .build();
    let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let started = Arc::new(tokio::sync::Notify::new());
    let (d, s) = (dropped.clone(), started.clone());
    mgr.controller::<ConfigMap, _>("slow", ())
        .register(move |_cm: Arc<ConfigMap>, _| {
            let guard = Dropped(d.clone());
            let s = s.clone();
            async move {
                let _guard = guard;
                s.notify_one();
                // A reconcile stuck on a slow call.
                std::future::pending::<()>().await;
                Ok(Action::await_change())
            }
        });
    let run = tokio::spawn(mgr.run());
    create_cm(&user, "work").await;
    started.notified().await;
    steal_lease(&user).await;
    // Bounded only so a regression fails rather than hangs for the hour.
    let r = tokio::time::timeout(Duration::from_secs(60), run).await;
    assert!(
        matches!(r, Ok(Ok(Err(Error::LeaderElectionLost { .. })))),
        "expected LeaderElectionLost before the grace period, got {r:?}"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the reconcile was still running when run() returned"
    );
}
