//! `range_at` reads the keys as they were at a past revision (within the
//! history), matching what `range` returned at that time.

use kubeforge_store::{DurableOptions, Store, StoreError};

async fn exercise(store: Store) {
    let mut snapshots = Vec::new();
    // A deterministic mix of creates, updates and deletes over 20 keys.
    let mut seed: u64 = 42;
    for step in 0..300u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let key = format!("/p/k{:02}", (seed >> 33) % 20);
        let op = (seed >> 20) % 3;
        let v = format!("v{step}");
        let _ = match op {
            0 => store.create(&key, |_| v.clone().into()).await.map(|_| ()),
            1 => store
                .update(&key, None, |_| v.clone().into())
                .await
                .map(|_| ()),
            _ => store
                .delete(&key, None, |_, _| "gone".into())
                .await
                .map(|_| ()),
        };
        let now = store.range("/p/", None, 0);
        snapshots.push(now);
    }
    for snap in &snapshots {
        let past = store
            .range_at("/p/", None, 0, snap.revision)
            .await
            .expect("within history");
        assert_eq!(past.revision, snap.revision);
        assert_eq!(past.kvs, snap.kvs, "state at revision {}", snap.revision);
        // Paging at a past revision.
        let first = store
            .range_at("/p/", None, 3, snap.revision)
            .await
            .expect("page");
        assert_eq!(
            first.kvs,
            snap.kvs.iter().take(3).cloned().collect::<Vec<_>>()
        );
        assert_eq!(first.more, snap.kvs.len() > 3);
        if let Some(last) = first.kvs.last() {
            let rest = store
                .range_at("/p/", Some(&last.key), 0, snap.revision)
                .await
                .expect("rest");
            assert_eq!(
                rest.kvs,
                snap.kvs.iter().skip(3).cloned().collect::<Vec<_>>()
            );
        }
    }
}

#[tokio::test]
async fn memory_range_at_matches_past_ranges() {
    exercise(Store::memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_range_at_matches_past_ranges() {
    let dir = std::env::temp_dir().join(format!("kubeforge-range-at-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(
        &dir,
        DurableOptions {
            fsync: false,
            ..Default::default()
        },
    )
    .await
    .expect("open");
    exercise(store.clone()).await;
    store.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn range_at_before_the_history_is_compacted() {
    let store = Store::memory_with_history(5);
    for i in 0..20 {
        store
            .create(&format!("/p/{i:02}"), |_| "x".into())
            .await
            .expect("create");
    }
    match store.range_at("/p/", None, 0, 3).await {
        Err(StoreError::Compacted { .. }) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
}
