//! Bucket snapshots in the metadata: what a snapshot sees after overwrites,
//! deletes, renames and deletes by version id; what is kept, spared from
//! freeing, moved by repair, carried by a Raft snapshot, and dropped with the
//! last snapshot that sees it.

use super::version_tests::{delete, put, setup};
use super::*;

async fn snap(s: &MetaStore, name: &str) -> Result<Applied, MetaError> {
    s.apply(Mutation::CreateSnapshot {
        bucket: "b".into(),
        name: name.into(),
        created_ms: 5,
    })
    .await
}

async fn drop_snap(s: &MetaStore, name: &str) -> Result<Applied, MetaError> {
    s.apply(Mutation::DeleteSnapshot {
        bucket: "b".into(),
        name: name.into(),
    })
    .await
}

/// Renames `from` (holding `rec`) to `to`.
async fn rename(s: &MetaStore, rec: &ObjectRecord) {
    s.apply(Mutation::RenameObject {
        bucket: "b".into(),
        from: "from".into(),
        to: "to".into(),
        of: WriteId::of(rec),
    })
    .await
    .unwrap();
}

/// The extent id `k` reads as in snapshot `name`, if any.
fn seen(s: &MetaStore, name: &str, k: &str) -> Option<u128> {
    s.snapshot_object("b", name, k)
        .unwrap()
        .map(|o| o.extents[0].id)
}

fn referenced(s: &MetaStore) -> Vec<u128> {
    let mut ids = Vec::new();
    s.for_each_extent(|e| ids.push(e.id)).unwrap();
    ids.sort();
    ids.dedup();
    ids
}

fn freed(a: &Applied) -> Vec<u128> {
    a.freed.iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn an_unversioned_bucket_snapshot_keeps_what_overwrites_and_deletes_replace() {
    let (_d, s) = setup(None).await;
    put(&s, "k", 1).await;
    put(&s, "gone", 2).await;
    snap(&s, "s1").await.unwrap();
    assert_eq!(seen(&s, "s1", "k"), Some(1));

    let a = put(&s, "k", 3).await;
    assert!(a.freed.is_empty(), "the snapshot holds extent 1: {a:?}");
    assert!(!a.object.unwrap().version.has_id(), "no version id shown");
    assert!(delete(&s, "gone", None).await.freed.is_empty());
    assert_eq!(s.object("b", "k").unwrap().unwrap().extents[0].id, 3);
    assert!(s.object("b", "gone").unwrap().is_none());
    assert_eq!(
        (seen(&s, "s1", "k"), seen(&s, "s1", "gone")),
        (Some(1), Some(2))
    );
    assert_eq!(
        referenced(&s),
        vec![1, 2, 3],
        "the collector keeps all three"
    );
    assert_eq!(s.snapshot_kept("b").unwrap(), (2, 20));
    // Kept versions are not the bucket's.
    assert_eq!(s.bucket_usage("b").unwrap().objects, 1);

    // A later snapshot sees the key deleted, and the newer write.
    snap(&s, "s2").await.unwrap();
    put(&s, "gone", 4).await;
    let a = put(&s, "k", 5).await;
    assert!(a.freed.is_empty(), "s2 holds extent 3");
    assert_eq!(
        (seen(&s, "s2", "k"), seen(&s, "s2", "gone")),
        (Some(3), None)
    );
    assert_eq!(
        (seen(&s, "s1", "k"), seen(&s, "s1", "gone")),
        (Some(1), Some(2))
    );
    // A write made after every snapshot is freed as before.
    assert_eq!(freed(&put(&s, "gone", 6).await), vec![4]);

    // Deleting s1 drops what only it saw; s2's stays.
    drop_snap(&s, "s1").await.unwrap();
    assert_eq!(referenced(&s), vec![3, 5, 6]);
    assert_eq!(seen(&s, "s2", "k"), Some(3));
    assert!(matches!(
        s.snapshot_object("b", "s1", "k"),
        Err(MetaError::NoSuchSnapshot(_))
    ));
    drop_snap(&s, "s2").await.unwrap();
    assert_eq!(referenced(&s), vec![5, 6]);
    assert_eq!(s.snapshot_kept("b").unwrap(), (0, 0));
}

#[tokio::test]
async fn a_snapshot_lists_as_the_bucket_did() {
    let (_d, s) = setup(None).await;
    for (i, k) in ["a", "d/x", "d/y", "e", "f"].iter().enumerate() {
        put(&s, k, i as u128 + 1).await;
    }
    snap(&s, "s").await.unwrap();
    delete(&s, "a", None).await;
    delete(&s, "f", None).await;
    delete(&s, "d/x", None).await;
    put(&s, "e", 10).await;
    put(&s, "c", 11).await;
    put(&s, "g/z", 12).await;

    let l = s.snapshot_list("b", "s", "", None, Some("/"), 100).unwrap();
    let keys: Vec<_> = l
        .objects
        .iter()
        .map(|(k, o)| (k.as_str(), o.extents[0].id))
        .collect();
    assert_eq!(keys, vec![("a", 1), ("e", 4), ("f", 5)]);
    assert_eq!(l.prefixes, vec!["d/"]);
    assert!(l.next.is_none());
    // Within the prefix only the key the snapshot sees.
    let l = s.snapshot_list("b", "s", "d/", None, None, 100).unwrap();
    assert_eq!(l.objects.len(), 2, "{:?}", l.objects);

    // Page by page, one entry each.
    let mut after = None;
    let mut got = Vec::new();
    loop {
        let l = s.snapshot_list("b", "s", "", after, Some("/"), 1).unwrap();
        got.extend(l.objects.iter().map(|(k, _)| k.clone()));
        got.extend(l.prefixes.iter().cloned());
        match l.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(got, vec!["a", "d/", "e", "f"]);
    // The bucket itself lists as it is now.
    let l = s.list("b", "", None, Some("/"), 100).unwrap();
    let now: Vec<_> = l.objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        (now, l.prefixes),
        (vec!["c", "e"], vec!["d/".to_string(), "g/".to_string()])
    );
}

#[tokio::test]
async fn a_versioned_bucket_snapshot_survives_deletes_by_version_id() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    let v1 = put(&s, "k", 1).await.object.unwrap().version;
    let v2 = put(&s, "k", 2).await.object.unwrap().version;
    put(&s, "m", 3).await;
    let marker = delete(&s, "m", None).await.deleted.unwrap().version;
    snap(&s, "s").await.unwrap();
    assert_eq!((seen(&s, "s", "k"), seen(&s, "s", "m")), (Some(2), None));

    // The version the snapshot sees, deleted for good: kept, not freed.
    let a = delete(&s, "k", Some(v2.shown())).await;
    assert!(a.freed.is_empty(), "{a:?}");
    assert_eq!(s.object("b", "k").unwrap().unwrap().extents[0].id, 1);
    assert_eq!(seen(&s, "s", "k"), Some(2));
    // The marker it sees, deleted: the key stays deleted in the snapshot.
    delete(&s, "m", Some(marker.shown())).await;
    assert_eq!(s.object("b", "m").unwrap().unwrap().extents[0].id, 3);
    assert_eq!(seen(&s, "s", "m"), None);
    // A delete marker made after the snapshot hides nothing in it.
    delete(&s, "k", None).await;
    assert_eq!(seen(&s, "s", "k"), Some(2));
    // v1, which the snapshot never showed (v2 was newer), goes as it would.
    let a = delete(&s, "k", Some(v1.shown())).await;
    assert_eq!(freed(&a), vec![1]);
    drop_snap(&s, "s").await.unwrap();
    assert_eq!(referenced(&s), vec![3]);
}

#[tokio::test]
async fn a_suspended_buckets_null_version_is_kept_for_a_snapshot() {
    let (_d, s) = setup(Some(Versioning::Suspended)).await;
    put(&s, "k", 1).await;
    delete(&s, "n", None).await;
    snap(&s, "s").await.unwrap();
    let a = put(&s, "k", 2).await;
    assert!(a.freed.is_empty(), "{a:?}");
    put(&s, "n", 3).await;
    assert_eq!((seen(&s, "s", "k"), seen(&s, "s", "n")), (Some(1), None));
}

#[tokio::test]
async fn a_rename_keeps_the_source_for_the_snapshot_and_its_extents_are_never_freed() {
    let (_d, s) = setup(None).await;
    let rec = put(&s, "from", 1).await.object.unwrap();
    snap(&s, "s").await.unwrap();
    rename(&s, &rec).await;
    assert_eq!(
        (seen(&s, "s", "from"), seen(&s, "s", "to")),
        (Some(1), None)
    );
    // The renamed object goes; the kept source still holds its extent.
    let a = delete(&s, "to", None).await;
    assert!(
        a.freed.is_empty(),
        "extent 1 freed under the snapshot: {a:?}"
    );
    assert_eq!(referenced(&s), vec![1]);
    assert_eq!(seen(&s, "s", "from"), Some(1));
}

#[tokio::test]
async fn repair_moves_a_kept_versions_fragments_with_the_live_objects() {
    let (_d, s) = setup(None).await;
    let rec = put(&s, "from", 1).await.object.unwrap();
    put(&s, "only", 2).await;
    snap(&s, "s").await.unwrap();
    rename(&s, &rec).await;
    delete(&s, "only", None).await;
    let mv = |key: &str, extent: u128| Mutation::MoveFragments {
        bucket: "b".into(),
        key: key.into(),
        extent,
        moves: vec![FragmentMove {
            stripe: 0,
            frag: 0,
            from: 0,
            to: 4,
        }],
        written_in: None,
    };
    let drive = |o: Option<ObjectRecord>| match &o.unwrap().extents[0].layout {
        Layout::Replicated { drives, .. } => drives[0],
        l => panic!("{l:?}"),
    };
    // Shared by the live `to` and the kept `from`: both move.
    s.apply(mv("to", 1)).await.unwrap();
    assert_eq!(drive(s.object("b", "to").unwrap()), 4);
    assert_eq!(drive(s.snapshot_object("b", "s", "from").unwrap()), 4);
    // Found by the scanner under the kept version's key too: already moved.
    let r = s.apply(mv("from", 1)).await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    // Held only by a kept version.
    s.apply(mv("only", 2)).await.unwrap();
    assert_eq!(drive(s.snapshot_object("b", "s", "only").unwrap()), 4);
    let keys: Vec<_> = s
        .all_objects()
        .unwrap()
        .into_iter()
        .map(|(_, k, _)| k)
        .collect();
    assert_eq!(
        keys,
        vec!["to", "from", "only"],
        "the repair scanner sees kept versions"
    );
}

#[tokio::test]
async fn snapshots_travel_in_a_raft_snapshot() {
    let (_d, s) = setup(None).await;
    put(&s, "k", 1).await;
    snap(&s, "s").await.unwrap();
    put(&s, "k", 2).await;
    let (dump, _) = s.export().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let t = MetaStore::open(&d2.path().join("meta.redb")).unwrap();
    t.import(&dump).unwrap();
    assert_eq!(
        t.snapshot_object("b", "s", "k").unwrap().unwrap().extents[0].id,
        1
    );
    assert_eq!(referenced(&t), vec![1, 2]);
    // The held index came too: a delete there frees nothing the snapshot sees.
    let a = t
        .apply(Mutation::DeleteObject {
            bucket: "b".into(),
            key: "k".into(),
            cond: Default::default(),
            version_id: None,
            modified_ms: 1,
            bypass_governance: false,
        })
        .await
        .unwrap();
    assert_eq!(freed(&a), vec![2]);
}

#[tokio::test]
async fn bad_snapshot_requests_are_refused_and_change_nothing() {
    let (_d, s) = setup(None).await;
    for bad in ["", ".hidden", "-flag", "a/b", "sp ace", &"x".repeat(65)] {
        let r = snap(&s, bad).await;
        assert!(
            matches!(r, Err(MetaError::InvalidSnapshot(_))),
            "{bad:?}: {r:?}"
        );
    }
    snap(&s, "s").await.unwrap();
    assert!(matches!(
        snap(&s, "s").await,
        Err(MetaError::SnapshotExists(_))
    ));
    assert!(matches!(
        drop_snap(&s, "t").await,
        Err(MetaError::NoSuchSnapshot(_))
    ));
    let r = s
        .apply(Mutation::CreateSnapshot {
            bucket: "nope".into(),
            name: "s".into(),
            created_ms: 1,
        })
        .await;
    assert!(matches!(r, Err(MetaError::NoSuchBucket(_))), "{r:?}");
    // An empty bucket with a snapshot is not deleted with it.
    let r = s.apply(Mutation::DeleteBucket { name: "b".into() }).await;
    assert!(matches!(r, Err(MetaError::HasSnapshots(_))), "{r:?}");
    drop_snap(&s, "s").await.unwrap();
    s.apply(Mutation::DeleteBucket { name: "b".into() })
        .await
        .unwrap();
}

#[tokio::test]
async fn the_scrubber_walks_and_mends_kept_versions() {
    let (_d, s) = setup(Some(Versioning::Suspended)).await;
    put(&s, "k", 1).await;
    snap(&s, "s").await.unwrap();
    put(&s, "k", 2).await;
    let mut after = None;
    let mut ids = Vec::new();
    loop {
        let (page, next) = s.manifests_after(after.as_ref(), 1).unwrap();
        ids.extend(page.iter().map(|(_, _, o)| o.extents[0].id));
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(ids, vec![2, 1], "the current object, then the kept one");
    // And the scrubber's fix finds the kept one's manifest again.
    let kept = s.manifest_holding("b", "k", 1).unwrap();
    assert_eq!(kept.map(|o| o.extents[0].id), Some(1));
}
