//! Replication in the metadata: rules need versioning, versions and markers are
//! queued in the transaction that makes them (in version order, not the ones
//! made before the rules, not replicas), a shipped batch leaves the queue, a
//! failed one stays with its error, and removing the rules drops the backlog.

use super::version_tests::{delete, obj, put, setup};
use super::*;

fn rules(delete_markers: bool) -> Replication {
    Replication {
        rules: vec![ReplicationRule {
            id: "r".into(),
            prefix: "p/".into(),
            delete_markers,
            target: ReplicationTarget {
                endpoint: "http://127.0.0.1:1".into(),
                bucket: "dst".into(),
                region: "us-east-1".into(),
                access_key: "AK".into(),
                sealed_secret: "00".into(),
            },
        }],
        since_seq: 0,
    }
}

async fn set(s: &MetaStore, r: Option<Replication>) -> Result<Applied, MetaError> {
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Replication(r),
    })
    .await
}

fn queued(s: &MetaStore) -> Vec<(String, bool)> {
    let q = s.replication_pending("b", 100).unwrap();
    assert!(q.windows(2).all(|w| w[0].0 < w[1].0), "in version order");
    q.into_iter().map(|(_, p)| (p.key, p.marker)).collect()
}

#[tokio::test]
async fn versions_are_queued_with_the_write_and_leave_when_shipped() {
    let (_d, s) = setup(None).await;
    let r = set(&s, Some(rules(true))).await;
    assert!(matches!(r, Err(MetaError::LockState(_))), "{r:?}");
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    put(&s, "p/before", 1).await;
    set(&s, Some(rules(true))).await.unwrap();
    let r = s
        .apply(Mutation::ChangeBucket {
            name: "b".into(),
            change: BucketChange::Versioning(Versioning::Suspended),
        })
        .await;
    assert!(matches!(r, Err(MetaError::LockState(_))), "{r:?}");
    put(&s, "p/a", 2).await;
    put(&s, "other/x", 3).await;
    put(&s, "p/a", 4).await;
    delete(&s, "p/a", None).await;
    // A replica arriving here is not shipped on.
    let mut replica = obj(5, 10);
    replica.user_meta.insert(REPLICA_OF.into(), "x".into());
    s.apply(Mutation::PutObject {
        bucket: "b".into(),
        key: "p/replica".into(),
        record: replica,
        cond: Precondition::default(),
        written_in: None,
    })
    .await
    .unwrap();
    let want = [("p/a", false), ("p/a", false), ("p/a", true)];
    let want: Vec<(String, bool)> = want.iter().map(|(k, m)| (k.to_string(), *m)).collect();
    assert_eq!(queued(&s), want);
    // A batch takes each key's oldest version only.
    let batch = s.replication_batch("b", 10, 100).unwrap();
    assert_eq!(batch.len(), 1);
    assert!(!batch[0].1.marker);
    let r = s.bucket("b").unwrap().unwrap().replication.unwrap();
    let before = s.object_version("b", "p/before", "null").unwrap();
    assert!(before.is_none(), "versioned from the start");
    let cur = s.object("b", "p/before").unwrap().unwrap();
    assert_eq!(
        s.ship_state("b", &r, "p/before", &cur.version).unwrap(),
        None
    );

    let q = s.replication_pending("b", 100).unwrap();
    let seqs: Vec<u64> = q.iter().map(|(n, _)| *n).collect();
    s.apply(Mutation::ReplicationDone {
        bucket: "b".into(),
        done: vec![seqs[0]],
        failed: vec![(seqs[1], "HTTP 403 AccessDenied".into())],
        bytes: 10,
        elapsed_ms: 5,
        now_ms: 99,
    })
    .await
    .unwrap();
    let st = s.replication_status("b").unwrap();
    assert_eq!((st.backlog, st.failing), (2, 1));
    assert_eq!(st.last_error.as_deref(), Some("HTTP 403 AccessDenied"));
    assert_eq!(
        (st.shipped.versions, st.shipped.bytes, st.shipped.last_ms),
        (1, 10, 99)
    );
    let stamp = |seq| VersionStamp {
        id: Some(format!("{seq:020}")),
        seq,
        unversioned: false,
    };
    let state = |seq| s.ship_state("b", &r, "p/a", &stamp(seq)).unwrap();
    assert_eq!(state(seqs[0]), Some(ShipState::Completed));
    assert_eq!(state(seqs[1]), Some(ShipState::Failed));
    assert_eq!(state(seqs[2]), Some(ShipState::Pending));

    // Without delete markers, a marker is not queued; rules removed, the
    // backlog goes.
    set(&s, Some(rules(false))).await.unwrap();
    delete(&s, "p/b", None).await;
    assert_eq!(s.replication_status("b").unwrap().backlog, 2);
    set(&s, None).await.unwrap();
    assert_eq!(
        s.replication_status("b").unwrap(),
        ReplicationStatus::default()
    );
}

#[tokio::test]
async fn a_key_with_many_versions_waiting_does_not_hide_the_others() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    set(&s, Some(rules(true))).await.unwrap();
    for i in 0..300 {
        put(&s, "p/stuck", 1000 + i).await;
    }
    put(&s, "p/other", 5000).await;
    let batch = s.replication_batch("b", 256, 10_000).unwrap();
    let keys: Vec<&str> = batch.iter().map(|(_, p)| p.key.as_str()).collect();
    assert_eq!(keys, ["p/stuck", "p/other"]);
}
