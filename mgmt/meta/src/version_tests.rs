//! Versioning in the metadata: versions kept, delete markers, deletes by id,
//! the suspended `null` version, listings, and what the collector, usage and
//! snapshots see.

use super::*;

/// An object whose one extent has id `id` (so which bytes a version holds
/// shows in `freed` and in the collector's walk).
pub(super) fn obj(id: u128, size: u64) -> ObjectRecord {
    let mut o = super::tests::obj(&format!("e{id}"), size);
    o.extents[0].id = id;
    o
}

pub(super) async fn setup(state: Option<Versioning>) -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    s.apply(Mutation::CreateBucket {
        name: "b".into(),
        record: BucketRecord {
            tenant: 1,
            ..Default::default()
        },
    })
    .await
    .unwrap();
    if let Some(v) = state {
        set(&s, v).await;
    }
    (dir, s)
}

async fn set(s: &MetaStore, v: Versioning) {
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Versioning(v),
    })
    .await
    .unwrap();
}

pub(super) async fn put(s: &MetaStore, k: &str, id: u128) -> Applied {
    s.apply(Mutation::PutObject {
        bucket: "b".into(),
        key: k.into(),
        record: obj(id, 10),
        cond: Precondition::default(),
        written_in: None,
    })
    .await
    .unwrap()
}

pub(super) async fn delete(s: &MetaStore, k: &str, version: Option<&str>) -> Applied {
    s.apply(Mutation::DeleteObject {
        bucket: "b".into(),
        key: k.into(),
        cond: Default::default(),
        version_id: version.map(str::to_string),
        modified_ms: 7,
        bypass_governance: false,
    })
    .await
    .unwrap()
}

fn kept(s: &MetaStore) -> Vec<u128> {
    let mut ids = Vec::new();
    s.for_each_extent(|e| ids.push(e.id)).unwrap();
    ids.sort();
    ids
}

/// (key, version id, latest, is a marker) of a whole listing.
fn listed(s: &MetaStore) -> Vec<(String, String, bool, bool)> {
    let l = s.list_versions("b", "", None, None, None, 1000).unwrap();
    assert!(l.next.is_none());
    l.entries
        .into_iter()
        .map(|e| {
            let id = e.version.stamp().shown().to_string();
            (e.key, id, e.latest, e.version.object().is_none())
        })
        .collect()
}

#[tokio::test]
async fn enabled_keeps_every_version_and_deletes_make_markers() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    let a = put(&s, "k", 1).await;
    let b = put(&s, "k", 2).await;
    assert!(a.freed.is_empty() && b.freed.is_empty(), "nothing freed");
    let (va, vb) = (a.object.unwrap().version, b.object.unwrap().version);
    assert!(
        va.id.is_some() && vb.id.is_some() && va.seq < vb.seq,
        "{va:?} {vb:?}"
    );
    assert_eq!(s.object("b", "k").unwrap().unwrap().extents[0].id, 2);
    assert_eq!(kept(&s), vec![1, 2], "the collector keeps both");
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 20,
            objects: 2
        }
    );
    // The old version reads by its id.
    let (v, latest) = s.object_version("b", "k", va.shown()).unwrap().unwrap();
    assert_eq!((v.object().unwrap().extents[0].id, latest), (1, false));

    // A delete makes a marker; the key reads as deleted, nothing is freed.
    let d = delete(&s, "k", None).await;
    let marker = d.deleted.clone().unwrap();
    assert!(marker.marker && d.freed.is_empty());
    assert!(s.object("b", "k").unwrap().is_none());
    assert_eq!(
        s.latest_marker("b", "k").unwrap(),
        Some(marker.version.clone())
    );
    assert_eq!(
        s.version_count().unwrap(),
        2,
        "markers hold no bytes to scrub"
    );
    assert_eq!(kept(&s), vec![1, 2]);
    let m = marker.version.shown().to_string();
    assert_eq!(
        listed(&s),
        vec![
            ("k".into(), m.clone(), true, true),
            ("k".into(), vb.shown().into(), false, false),
            ("k".into(), va.shown().into(), false, false),
        ]
    );
    assert!(matches!(
        s.apply(Mutation::DeleteBucket { name: "b".into() }).await,
        Err(MetaError::BucketNotEmpty(_))
    ));

    // Deleting the marker brings the object back.
    let d = delete(&s, "k", Some(&m)).await;
    assert!(d.deleted.unwrap().marker && d.freed.is_empty());
    assert_eq!(s.object("b", "k").unwrap().unwrap().version, vb);
    // Deleting the current version by id frees it; the one before is current.
    let d = delete(&s, "k", Some(vb.shown())).await;
    assert_eq!(d.freed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(s.object("b", "k").unwrap().unwrap().version, va);
    assert_eq!(kept(&s), vec![1]);
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 10,
            objects: 1
        }
    );
    // A version that is not there: nothing happens.
    let d = delete(&s, "k", Some("00000000000000009999")).await;
    assert!(d.deleted.is_none() && d.freed.is_empty());
    let d = delete(&s, "k", Some(va.shown())).await;
    assert_eq!(d.freed.len(), 1);
    assert!(listed(&s).is_empty());
    s.apply(Mutation::DeleteBucket { name: "b".into() })
        .await
        .unwrap();
}

#[tokio::test]
async fn suspended_replaces_only_the_null_version() {
    let (_d, s) = setup(None).await;
    put(&s, "k", 1).await; // before versioning: the null version, seq 0
    set(&s, Versioning::Enabled).await;
    let v2 = put(&s, "k", 2).await.object.unwrap().version;
    assert_eq!(
        kept(&s),
        vec![1, 2],
        "the null version is kept as noncurrent"
    );
    set(&s, Versioning::Suspended).await;
    // A write while suspended is the null version: the old null one goes.
    let a = put(&s, "k", 3).await;
    assert_eq!(a.freed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(a.object.unwrap().version.id, None);
    assert_eq!(kept(&s), vec![2, 3]);
    // Again: the current null version is replaced and freed.
    let a = put(&s, "k", 4).await;
    assert_eq!(a.freed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![3]);
    // A delete while suspended: a null marker replaces the null version.
    let d = delete(&s, "k", None).await;
    assert_eq!(d.freed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![4]);
    assert_eq!(d.deleted.unwrap().version.id, None);
    assert_eq!(
        listed(&s),
        vec![
            ("k".into(), "null".into(), true, true),
            ("k".into(), v2.shown().into(), false, false),
        ]
    );
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 10,
            objects: 1
        }
    );
}

#[tokio::test]
async fn listings_page_through_every_version_in_order() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    for (k, id) in [
        ("a", 1),
        ("b/x", 2),
        ("a", 3),
        ("c", 4),
        ("b/y", 5),
        ("a", 6),
    ] {
        put(&s, k, id).await;
    }
    delete(&s, "c", None).await;
    let whole = listed(&s);
    assert_eq!(whole.len(), 7);
    let keys: Vec<&str> = whole.iter().map(|e| e.0.as_str()).collect();
    assert_eq!(keys, ["a", "a", "a", "b/x", "b/y", "c", "c"]);
    // One entry per page, resuming from the markers each page gives.
    let mut paged = Vec::new();
    let (mut km, mut vm) = (None::<String>, None::<String>);
    for _ in 0..20 {
        let l = s
            .list_versions("b", "", km.as_deref(), vm.as_deref(), None, 1)
            .unwrap();
        paged.extend(l.entries.into_iter().map(|e| {
            let id = e.version.stamp().shown().to_string();
            (e.key, id, e.latest, e.version.object().is_none())
        }));
        match l.next {
            Some((k, v)) => (km, vm) = (Some(k), v),
            None => break,
        }
    }
    assert_eq!(paged, whole);
    // With a delimiter, `b/` rolls up once; resuming after it skips its keys.
    let l = s.list_versions("b", "", None, None, Some("/"), 4).unwrap();
    assert_eq!(l.prefixes, vec!["b/".to_string()]);
    assert_eq!(l.entries.len(), 3);
    assert_eq!(l.next, Some(("b/".to_string(), None)));
    let l = s
        .list_versions("b", "", Some("b/"), None, Some("/"), 4)
        .unwrap();
    assert!(l.prefixes.is_empty());
    assert_eq!(
        l.entries.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
        ["c", "c"]
    );
}

#[tokio::test]
async fn versions_count_against_quotas_and_survive_a_snapshot() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    s.apply(Mutation::SetBucketQuota {
        name: "b".into(),
        quota: Quota {
            max_bytes: None,
            max_objects: Some(2),
        },
    })
    .await
    .unwrap();
    put(&s, "k", 1).await;
    put(&s, "k", 2).await;
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            record: obj(3, 10),
            cond: Precondition::default(),
            written_in: None,
        })
        .await;
    assert!(matches!(r, Err(MetaError::QuotaExceeded(_))), "{r:?}");
    // The refused write left nothing behind: still two versions, 2 current.
    assert_eq!(s.object("b", "k").unwrap().unwrap().extents[0].id, 2);
    assert_eq!(listed(&s).len(), 2);
    delete(&s, "k", None).await;
    let before = listed(&s);
    let (snap, _) = s.export().unwrap();
    let (_d2, t) = setup(None).await;
    t.import(&snap).unwrap();
    assert_eq!(listed(&t), before);
    assert_eq!(
        t.bucket_usage("b").unwrap(),
        Usage {
            bytes: 20,
            objects: 2
        }
    );
    // The quota came with the snapshot; lifted, the sequence goes on from
    // where it was: no version id is given twice.
    t.apply(Mutation::SetBucketQuota {
        name: "b".into(),
        quota: Quota::default(),
    })
    .await
    .unwrap();
    let v = put(&t, "k", 9).await.object.unwrap().version;
    assert!(before.iter().all(|e| e.1 != v.shown()));
    assert_eq!(kept(&t), vec![1, 2, 9]);
}

#[tokio::test]
async fn one_write_applied_twice_is_one_version() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    put(&s, "k", 1).await;
    let again = put(&s, "k", 1).await;
    assert!(again.freed.is_empty());
    assert_eq!(listed(&s).len(), 1, "{:?}", listed(&s));
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 10,
            objects: 1
        }
    );
    let v = again.object.unwrap().version;
    let d = delete(&s, "k", Some(v.shown())).await;
    assert_eq!(d.freed.len(), 1);
    assert!(kept(&s).is_empty());
}

#[tokio::test]
async fn lifecycle_removes_noncurrent_versions_only_when_the_rules_say_so() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    // modified_ms 1 for every version: all noncurrent since t = 1.
    let ids: Vec<String> = {
        let mut v = Vec::new();
        for id in 1..=4 {
            v.push(
                put(&s, "k", id)
                    .await
                    .object
                    .unwrap()
                    .version
                    .shown()
                    .to_string(),
            );
        }
        v
    };
    let all = s.versions_of_key("b", "k").unwrap();
    assert_eq!(
        noncurrent_ages(&all),
        vec![None, Some((1, 0)), Some((1, 1)), Some((1, 2))]
    );
    let expire = |id: &str| Mutation::Expire {
        bucket: "b".into(),
        what: Expiry::Version {
            key: "k".into(),
            id: id.to_string(),
        },
        now_ms: 10_000,
        day_ms: 1000,
    };
    // No rule yet: refused, nothing removed.
    let r = s.apply(expire(&ids[0])).await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    let rule = LifecycleRule {
        id: "nc".into(),
        enabled: true,
        noncurrent_days: Some(1),
        newer_noncurrent_versions: Some(1),
        ..Default::default()
    };
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Lifecycle(vec![rule]),
    })
    .await
    .unwrap();
    // The current version and the newest noncurrent one are kept.
    for id in [&ids[3], &ids[2]] {
        let r = s.apply(expire(id)).await;
        assert!(
            matches!(r, Err(MetaError::PreconditionFailed)),
            "{id}: {r:?}"
        );
    }
    let r = s.apply(expire(&ids[1])).await.unwrap();
    assert_eq!(r.freed.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2]);
    s.apply(expire(&ids[0])).await.unwrap();
    assert_eq!(kept(&s), vec![3, 4]);
}
