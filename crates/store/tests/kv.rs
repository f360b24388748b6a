//! Compare-and-swap semantics, versions, revisions, range and count.

#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use bytes::Bytes;
use common::val;
use kubeforge_store::{Store, StoreError};

#[tokio::test]
async fn create_update_delete_cas() {
    let s = Store::memory();
    assert_eq!(s.current_revision(), 0);
    assert!(s.get("/a").is_none());

    let a = s.create("/a", |rev| val("/a", rev)).await.unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (1, 1, 1));
    assert_eq!(a.value, val("/a", 1));
    assert_eq!(&*a.key, "/a");
    assert_eq!(s.current_revision(), 1);
    assert_eq!(s.get("/a"), Some(a.clone()));

    let err = s.create("/a", |_| Bytes::new()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::AlreadyExists { ref key } if key == "/a"),
        "{err}"
    );
    assert_eq!(s.current_revision(), 1, "a failed write takes no revision");

    let b = s.create("/b", |rev| val("/b", rev)).await.unwrap();
    assert_eq!(b.mod_revision, 2);

    let a2 = s.update("/a", Some(1), |rev| val("/a", rev)).await.unwrap();
    assert_eq!((a2.create_revision, a2.mod_revision, a2.version), (1, 3, 2));
    let err = s.update("/a", Some(1), |_| Bytes::new()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { ref key, expected: 1, actual: 3 } if key == "/a"),
        "{err}"
    );
    let a3 = s.update("/a", None, |rev| val("/a", rev)).await.unwrap();
    assert_eq!((a3.mod_revision, a3.version), (4, 3));
    let err = s.update("/nope", None, |_| Bytes::new()).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound { ref key } if key == "/nope"));

    let err = s
        .delete("/a", Some(3), |_, _| Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        StoreError::Conflict {
            expected: 3,
            actual: 4,
            ..
        }
    ));
    let err = s
        .delete("/zz", None, |_, _| Bytes::new())
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NotFound { .. }));
    let mut seen = None;
    let gone = s
        .delete("/a", Some(4), |rev, prev| {
            seen = Some((rev, prev.clone()));
            Bytes::from_static(b"tomb")
        })
        .await
        .unwrap();
    assert_eq!(gone, a3);
    assert_eq!(seen, Some((5, a3)));
    assert!(s.get("/a").is_none());
    assert_eq!(s.current_revision(), 5);

    // Re-creating starts a new life: version 1, new create_revision.
    let a4 = s.create("/a", |rev| val("/a", rev)).await.unwrap();
    assert_eq!((a4.create_revision, a4.mod_revision, a4.version), (6, 6, 1));
}

#[tokio::test]
async fn value_closure_sees_the_revision_it_gets() {
    let s = Store::memory();
    for i in 0..10 {
        let key = format!("/k{i}");
        let kv = s
            .create(&key, |rev| Bytes::from(rev.to_string()))
            .await
            .unwrap();
        assert_eq!(kv.value, Bytes::from(kv.mod_revision.to_string()));
    }
    let kv = s
        .update("/k3", None, |rev| Bytes::from(rev.to_string()))
        .await
        .unwrap();
    assert_eq!(kv.value, Bytes::from("11"));
}

#[tokio::test]
async fn closure_panics_leave_the_store_usable() {
    let s = Store::memory();
    s.create("/a", |rev| val("/a", rev)).await.unwrap();
    let s2 = s.clone();
    let r = tokio::spawn(async move { s2.update("/a", None, |_| panic!("boom")).await }).await;
    assert!(r.is_err());
    assert_eq!(s.current_revision(), 1);
    assert_eq!(s.get("/a").unwrap().version, 1);
    s.update("/a", None, |rev| val("/a", rev)).await.unwrap();
    assert_eq!(s.current_revision(), 2);
}

async fn seeded() -> Store {
    let s = Store::memory();
    for key in [
        "/registry/pods/default/a",
        "/registry/pods/default/b",
        "/registry/pods/default/c",
        "/registry/pods/kube-system/x",
        "/registry/pods/kube-system/y",
        "/registry/services/default/a",
        "/registry/podsx/default/z",
    ] {
        s.create(key, |rev| val(key, rev)).await.unwrap();
    }
    s
}

fn keys(r: &kubeforge_store::RangeResult) -> Vec<&str> {
    r.kvs.iter().map(|kv| &*kv.key).collect()
}

#[tokio::test]
async fn range_and_count() {
    let s = seeded().await;
    let all = s.range("/registry/pods/", None, 0);
    assert_eq!(
        keys(&all),
        [
            "/registry/pods/default/a",
            "/registry/pods/default/b",
            "/registry/pods/default/c",
            "/registry/pods/kube-system/x",
            "/registry/pods/kube-system/y"
        ]
    );
    assert!(!all.more);
    assert_eq!(all.revision, 7);
    assert_eq!(s.count("/registry/pods/"), 5);
    assert_eq!(s.count("/registry/pods"), 6);
    assert_eq!(s.count(""), 7);
    assert_eq!(s.count("/nothing"), 0);

    let page = s.range("/registry/pods/", None, 2);
    assert_eq!(
        keys(&page),
        ["/registry/pods/default/a", "/registry/pods/default/b"]
    );
    assert!(page.more);
    let page = s.range("/registry/pods/", Some("/registry/pods/default/b"), 2);
    assert_eq!(
        keys(&page),
        ["/registry/pods/default/c", "/registry/pods/kube-system/x"]
    );
    assert!(page.more);
    let page = s.range("/registry/pods/", Some("/registry/pods/kube-system/x"), 2);
    assert_eq!(keys(&page), ["/registry/pods/kube-system/y"]);
    assert!(!page.more);
    // Exactly `limit` left: no more.
    let page = s.range("/registry/pods/", Some("/registry/pods/default/c"), 2);
    assert_eq!(
        keys(&page),
        [
            "/registry/pods/kube-system/x",
            "/registry/pods/kube-system/y"
        ]
    );
    assert!(!page.more);
    // A start_after that is not an existing key, or before the prefix.
    let page = s.range("/registry/pods/", Some("/registry/pods/default/bb"), 0);
    assert_eq!(page.kvs.len(), 3);
    let page = s.range("/registry/pods/", Some("/a"), 1);
    assert_eq!(keys(&page), ["/registry/pods/default/a"]);
    assert!(page.more);
    // Past the prefix.
    let page = s.range("/registry/pods/", Some("/registry/pods/zzz"), 0);
    assert!(page.kvs.is_empty() && !page.more);
    // Empty prefix = everything.
    assert_eq!(s.range("", None, 0).kvs.len(), 7);
}

#[tokio::test]
async fn writes_after_close_are_refused() {
    let s = Store::memory();
    s.create("/a", |rev| val("/a", rev)).await.unwrap();
    s.close().await;
    s.close().await;
    assert!(matches!(
        s.create("/b", |_| Bytes::new()).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(
        s.update("/a", None, |_| Bytes::new()).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(
        s.delete("/a", None, |_, _| Bytes::new()).await,
        Err(StoreError::Closed)
    ));
    assert!(matches!(s.watch("/", 0), Err(StoreError::Closed)));
    // Reads still work.
    assert_eq!(s.get("/a").unwrap().version, 1);
}

#[test]
fn handles_are_send_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    fn assert_send_unpin<T: Send + Unpin + 'static>() {}
    assert_send_sync::<Store>();
    assert_send_sync::<kubeforge_store::Watcher>();
    assert_send_unpin::<kubeforge_store::Watcher>();
    assert_send_sync::<StoreError>();
    fn assert_send<T: Send>(_: &T) {}
    let s = Store::memory();
    assert_send(&s.create("/a", |_| Bytes::new()));
    assert_send(&s.update("/a", None, |_| Bytes::new()));
    assert_send(&s.delete("/a", None, |_, _| Bytes::new()));
    assert_send(&s.compact(0));
    assert_send(&s.close());
    let mut w = s.watch("/", 0).unwrap();
    assert_send(&w.next());
}
