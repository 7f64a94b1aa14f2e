use super::*;

pub(super) fn obj(etag: &str, size: u64) -> ObjectRecord {
    ObjectRecord {
        size,
        etag: etag.to_string(),
        modified_ms: 1,
        content_type: None,
        user_meta: Default::default(),
        headers: Default::default(),
        checksum: None,
        extents: vec![Extent {
            id: size as u128 + 1,
            size,
            layout: Layout::Replicated {
                drives: vec![0],
                sum: None,
                tag: None,
            },
            sealed: None,
        }],
        part_checksums: Vec::new(),
        tags: Default::default(),
        version: Default::default(),
        lock: Default::default(),
    }
}

fn store() -> (tempfile::TempDir, MetaStore) {
    let dir = tempfile::tempdir().unwrap();
    let s = MetaStore::open(&dir.path().join("meta.redb")).unwrap();
    (dir, s)
}

async fn put(s: &MetaStore, b: &str, k: &str) {
    s.apply(Mutation::PutObject {
        bucket: b.into(),
        key: k.into(),
        record: obj("e", 1),
        cond: Precondition::default(),
        written_in: None,
    })
    .await
    .unwrap();
}

async fn mkbucket(s: &MetaStore, b: &str) {
    s.apply(Mutation::CreateBucket {
        name: b.into(),
        record: BucketRecord {
            tenant: 1,
            created_ms: 0,
            location: None,
            ..Default::default()
        },
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn bucket_lifecycle_and_conditions() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    assert!(matches!(
        s.apply(Mutation::CreateBucket {
            name: "b".into(),
            record: BucketRecord {
                tenant: 1,
                created_ms: 0,
                location: None,
                ..Default::default()
            }
        })
        .await,
        Err(MetaError::BucketExists(_))
    ));
    put(&s, "b", "k").await;
    let cond = Precondition {
        if_none_match_any: true,
        ..Default::default()
    };
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            record: obj("f", 2),
            cond,
            written_in: None,
        })
        .await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)));
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            record: obj("f", 2),
            cond: Precondition {
                if_match: Some("\"e\"".into()),
                ..Default::default()
            },
            written_in: None,
        })
        .await
        .unwrap();
    assert_eq!(
        r.freed.len(),
        1,
        "the overwritten version's extent is freed"
    );
    assert!(matches!(
        s.apply(Mutation::DeleteBucket { name: "b".into() }).await,
        Err(MetaError::BucketNotEmpty(_))
    ));
    s.apply(Mutation::DeleteObject {
        bucket: "b".into(),
        key: "k".into(),
        cond: Default::default(),
        version_id: None,
        modified_ms: 0,
        bypass_governance: false,
    })
    .await
    .unwrap();
    s.apply(Mutation::DeleteBucket { name: "b".into() })
        .await
        .unwrap();
    assert!(s.bucket("b").unwrap().is_none());
}

#[tokio::test]
async fn listing_with_delimiter_and_pages() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    mkbucket(&s, "c").await;
    for k in ["a/1", "a/2", "a/3", "b", "c/x/y", "d", "e/"] {
        put(&s, "b", k).await;
    }
    put(&s, "c", "zzz").await;
    let l = s.list("b", "", None, Some("/"), 1000).unwrap();
    let keys: Vec<_> = l.objects.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b", "d"]);
    assert_eq!(l.prefixes, ["a/", "c/", "e/"]);
    assert!(l.next.is_none());

    // Page through, two entries at a time; the union is the full listing.
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let l = s.list("b", "", after.clone(), Some("/"), 2).unwrap();
        seen.extend(l.objects.iter().map(|(k, _)| k.clone()));
        seen.extend(l.prefixes.iter().cloned());
        match l.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, ["a/", "b", "c/", "d", "e/"]);

    let l = s.list("b", "a/", None, None, 1000).unwrap();
    assert_eq!(l.objects.len(), 3);
    assert!(matches!(
        s.list("nope", "", None, None, 10),
        Err(MetaError::NoSuchBucket(_))
    ));
    assert_eq!(s.object_count().unwrap(), 8);
}

#[tokio::test]
async fn multipart_complete_checks_parts() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    s.apply(Mutation::CreateUpload {
        bucket: "b".into(),
        upload_id: "u1".into(),
        record: UploadRecord {
            key: "big".into(),
            created_ms: 0,
            content_type: None,
            user_meta: Default::default(),
            headers: Default::default(),
            checksum_algorithm: None,
            full_object_checksum: false,
            tags: Default::default(),
            lock: Default::default(),
        },
    })
    .await
    .unwrap();
    let md5a = hex::encode(Md5::digest(b"a"));
    let md5b = hex::encode(Md5::digest(b"b"));
    for (n, e, size) in [(1, &md5a, 10u64), (2, &md5b, 3), (3, &md5b, 3)] {
        s.apply(Mutation::PutPart {
            bucket: "b".into(),
            upload_id: "u1".into(),
            part: n,
            record: PartRecord {
                etag: e.clone(),
                modified_ms: 0,
                extent: Extent {
                    id: n as u128,
                    size,
                    layout: Layout::Replicated {
                        drives: vec![0],
                        sum: None,
                        tag: None,
                    },
                    sealed: None,
                },
                checksum: None,
            },
            written_in: None,
        })
        .await
        .unwrap();
    }
    let complete = |parts: Vec<(u32, String)>| Mutation::CompleteUpload {
        bucket: "b".into(),
        upload_id: "u1".into(),
        parts,
        min_part_size: 5,
        modified_ms: 7,
        cond: Precondition::default(),
        checksum: None,
    };
    assert!(matches!(
        s.apply(complete(vec![(2, md5b.clone()), (1, md5a.clone())]))
            .await,
        Err(MetaError::InvalidPartOrder)
    ));
    assert!(matches!(
        s.apply(complete(vec![(1, md5b.clone())])).await,
        Err(MetaError::InvalidPart(1))
    ));
    assert!(matches!(
        s.apply(complete(vec![(2, md5b.clone()), (3, md5b.clone())]))
            .await,
        Err(MetaError::EntityTooSmall { part: 2, .. })
    ));
    let r = s
        .apply(complete(vec![(1, md5a.clone()), (2, md5b.clone())]))
        .await
        .unwrap();
    let o = r.object.unwrap();
    let mut want = Md5::new();
    want.update(Md5::digest(b"a"));
    want.update(Md5::digest(b"b"));
    assert_eq!(o.etag, format!("{}-2", hex::encode(want.finalize())));
    assert_eq!(o.size, 13);
    assert_eq!(r.freed.len(), 1, "part 3 was not used and is freed");
    assert!(s.upload("b", "u1").unwrap().is_none());
    assert!(s.parts("u1").unwrap().is_empty());
    let mut refs = std::collections::HashSet::new();
    s.for_each_extent(|e| {
        refs.insert(e.id);
    })
    .unwrap();
    assert!(refs.contains(&1) && refs.contains(&2) && !refs.contains(&3));
}

/// Opens the database at `p` again once the last store's committer thread,
/// which holds it until its channel closes, has let go (a loaded machine may
/// take more than a moment).
fn reopen(p: &std::path::Path) -> MetaStore {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        match MetaStore::open(p) {
            Ok(s) => return s,
            Err(MetaError::Db(e)) if e.contains("already open") => {
                assert!(std::time::Instant::now() < deadline, "{e}");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test]
async fn survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.redb");
    {
        let s = MetaStore::open(&p).unwrap();
        mkbucket(&s, "b").await;
        put(&s, "b", "k").await;
    }
    let s = reopen(&p);
    assert!(s.object("b", "k").unwrap().is_some());
}

fn put_m(k: &str, rec: ObjectRecord) -> Mutation {
    Mutation::PutObject {
        bucket: "b".into(),
        key: k.into(),
        record: rec,
        cond: Precondition::default(),
        written_in: None,
    }
}

/// A retried proposal is applied once: the repeat gets the first outcome, and in
/// particular never reports the live extents it wrote as freed.
#[tokio::test]
async fn a_retried_proposal_applies_once() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    put(&s, "b", "k").await; // extent id 2
    let p = Proposal::new(put_m("k", obj("new", 41))); // extent id 42
    let Commit::Committed(first) = s.propose(p.clone()).await else {
        panic!("first proposal not committed")
    };
    assert_eq!(first.freed.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
    let Commit::Committed(again) = s.propose(p.clone()).await else {
        panic!("repeat not answered as committed")
    };
    assert_eq!(again.freed.iter().map(|e| e.id).collect::<Vec<_>>(), [2]);
    assert_eq!(s.object("b", "k").unwrap().unwrap().etag, "new");
    // A fence after the fact reports the original outcome.
    let Commit::Committed(f) = s.propose(Proposal::fence(p.request)).await else {
        panic!("fence of a committed proposal must say committed")
    };
    assert_eq!(f.object.unwrap().etag, "new");
    // Without request ids, applying the same record twice still frees only what it
    // replaced: never the extents the record itself holds.
    let a = s.apply(put_m("k", obj("new", 41))).await.unwrap();
    assert!(a.freed.is_empty(), "freed its own extents: {:?}", a.freed);
}

/// A fence that arrives first bars the proposal for good.
#[tokio::test]
async fn a_fence_bars_a_late_proposal() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    let p = Proposal::new(put_m("late", obj("x", 5)));
    assert!(matches!(
        s.propose(Proposal::fence(p.request)).await,
        Commit::Rejected(MetaError::Fenced)
    ));
    assert!(matches!(
        s.propose(p.clone()).await,
        Commit::Rejected(MetaError::Fenced)
    ));
    assert!(s.object("b", "late").unwrap().is_none());
    // A rejected proposal's outcome is remembered as such, too.
    let q = Proposal::new(Mutation::DeleteBucket {
        name: "nope".into(),
    });
    assert!(matches!(
        s.propose(q.clone()).await,
        Commit::Rejected(MetaError::NoSuchBucket(_))
    ));
    assert!(matches!(
        s.propose(Proposal::fence(q.request)).await,
        Commit::Rejected(MetaError::NoSuchBucket(_))
    ));
}

/// The window of applied requests travels in snapshots and is bounded.
#[tokio::test]
async fn the_request_window_survives_a_snapshot() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    let p = Proposal::new(put_m("k", obj("v", 7)));
    assert!(matches!(s.propose(p.clone()).await, Commit::Committed(_)));
    let (snap, _) = s.export().unwrap();
    let (_d2, t) = store();
    t.import(&snap).unwrap();
    t.apply(Mutation::DeleteObject {
        bucket: "b".into(),
        key: "k".into(),
        cond: Default::default(),
        version_id: None,
        modified_ms: 0,
        bypass_governance: false,
    })
    .await
    .unwrap();
    // The repeat is recognised on the restored node: it does not recreate the key.
    assert!(matches!(t.propose(p).await, Commit::Committed(_)));
    assert!(t.object("b", "k").unwrap().is_none());
}

#[tokio::test]
async fn objects_after_walks_every_object_in_pages() {
    let (_d, s) = store();
    mkbucket(&s, "a").await;
    mkbucket(&s, "b").await;
    for k in ["x", "y", "z"] {
        put(&s, "a", k).await;
        put(&s, "b", k).await;
    }
    let mut seen = Vec::new();
    let mut after: Option<(String, String)> = None;
    loop {
        let page = s
            .objects_after(after.as_ref().map(|(b, k)| (b.as_str(), k.as_str())), 4)
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some((last.0.clone(), last.1.clone()));
        seen.extend(page.into_iter().map(|(b, k, _)| format!("{b}/{k}")));
    }
    assert_eq!(seen, ["a/x", "a/y", "a/z", "b/x", "b/y", "b/z"]);
}

#[test]
fn manifests_without_checksums_still_read() {
    // A manifest written before per-fragment checksums were kept.
    let old = r#"{"size":5,"etag":"e","modified_ms":1,"extents":[
        {"id":7,"size":5,"layout":{"kind":"replicated","drives":[0,1]}},
        {"id":8,"size":9,"layout":{"kind":"erasure","k":2,"m":1,"shard":8,
         "stripes":[{"len":9,"drives":[0,1,2]}]}}]}"#;
    let r: ObjectRecord = serde_json::from_str(old).unwrap();
    assert_eq!(
        r.extents[0].layout,
        Layout::Replicated {
            drives: vec![0, 1],
            sum: None,
            tag: None,
        }
    );
    let Layout::Erasure { stripes, .. } = &r.extents[1].layout else {
        panic!("erasure")
    };
    assert!(stripes[0].sums.is_empty());
    assert_eq!(stripes[0].sum(0), None);
    assert!(matches_sum(None, b"anything"));
    assert!(matches_sum(Some(crc32c::crc32c(b"abc")), b"abc"));
    assert!(!matches_sum(Some(crc32c::crc32c(b"abc")), b"abd"));
}

/// The collector's epoch advances only from the value the proposer saw and not
/// sooner than the interval it names; a write whose chunks date from two epochs
/// back is refused and changes nothing, one from the epoch before still commits.
#[tokio::test]
async fn gc_epoch_fences_writes_that_took_too_long() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    assert_eq!(s.gc_epoch().unwrap(), GcEpoch::default());
    let adv = |from, now_ms| Mutation::AdvanceGcEpoch {
        from,
        now_ms,
        min_interval_ms: 1000,
    };
    s.apply(adv(0, 5000)).await.unwrap();
    assert_eq!(
        s.gc_epoch().unwrap(),
        GcEpoch {
            epoch: 1,
            advanced_ms: 5000
        }
    );
    // Too soon, and from a stale epoch: both change nothing.
    assert!(matches!(
        s.apply(adv(1, 5500)).await,
        Err(MetaError::PreconditionFailed)
    ));
    assert!(matches!(
        s.apply(adv(0, 9000)).await,
        Err(MetaError::PreconditionFailed)
    ));
    s.apply(adv(1, 6000)).await.unwrap();
    assert_eq!(s.gc_epoch().unwrap().epoch, 2);

    let put = |k: &str, w| Mutation::PutObject {
        bucket: "b".into(),
        key: k.into(),
        record: obj("e", 1),
        cond: Precondition::default(),
        written_in: w,
    };
    let r = s.apply(put("old", Some(0))).await;
    assert!(
        matches!(
            r,
            Err(MetaError::WriteExpired {
                written_in: 0,
                epoch: 2
            })
        ),
        "{r:?}"
    );
    assert!(s.object("b", "old").unwrap().is_none());
    s.apply(put("recent", Some(1))).await.unwrap();
    s.apply(put("current", Some(2))).await.unwrap();
    s.apply(put("unstamped", None)).await.unwrap();
    let r = s
        .apply(Mutation::MoveFragments {
            bucket: "b".into(),
            key: "recent".into(),
            extent: 2,
            moves: vec![],
            written_in: Some(0),
        })
        .await;
    assert!(matches!(r, Err(MetaError::WriteExpired { .. })), "{r:?}");
}

/// A kill -9 while a new node creates its database could leave a file of zeros
/// that no start could open ("invalid data"); such a file holds nothing and is
/// made again, and a database with data is never taken for one.
#[tokio::test]
async fn a_database_file_of_zeros_is_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("meta.redb");
    std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
    let s = MetaStore::open(&p).unwrap();
    mkbucket(&s, "b").await;
    put(&s, "b", "k").await;
    drop(s);
    let s = reopen(&p);
    assert!(s.object("b", "k").unwrap().is_some());
    assert!(!dir.path().join("meta.redb.creating").exists());
}

/// Usage follows every put, overwrite and delete, is rebuilt the same from a
/// snapshot, and a quota refuses growth inside the apply.
#[tokio::test]
async fn usage_is_exact_and_quotas_refuse_growth() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    put(&s, "b", "k1").await;
    put(&s, "b", "k2").await;
    put(&s, "b", "k2").await;
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 2,
            objects: 2
        }
    );
    assert_eq!(
        s.tenant_usage(1).unwrap(),
        Usage {
            bytes: 2,
            objects: 2
        }
    );
    s.apply(Mutation::DeleteObject {
        bucket: "b".into(),
        key: "k1".into(),
        cond: Default::default(),
        version_id: None,
        modified_ms: 0,
        bypass_governance: false,
    })
    .await
    .unwrap();
    assert_eq!(
        s.bucket_usage("b").unwrap(),
        Usage {
            bytes: 1,
            objects: 1
        }
    );
    s.apply(Mutation::SetBucketQuota {
        name: "b".into(),
        quota: Quota {
            max_bytes: None,
            max_objects: Some(1),
        },
    })
    .await
    .unwrap();
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k3".into(),
            record: obj("e", 1),
            cond: Precondition::default(),
            written_in: None,
        })
        .await;
    assert!(matches!(r, Err(MetaError::QuotaExceeded(_))), "{r:?}");
    assert!(s.object("b", "k3").unwrap().is_none());
    put(&s, "b", "k2").await; // an overwrite does not grow the count
    let (snap, _) = s.export().unwrap();
    let (_d2, t) = store();
    t.import(&snap).unwrap();
    assert_eq!(
        t.bucket_usage("b").unwrap(),
        Usage {
            bytes: 1,
            objects: 1
        }
    );
    assert_eq!(
        t.tenant_usage(1).unwrap(),
        Usage {
            bytes: 1,
            objects: 1
        }
    );
}

/// A condition on user metadata tells two writes of the same bytes apart (their
/// ETags are equal): RESP's expiry deletes only the write whose expiry passed.
#[tokio::test]
async fn a_metadata_condition_tells_equal_writes_apart() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    let mut expiring = obj("same", 1);
    expiring.user_meta.insert("exp".into(), "1".into());
    s.apply(put_m("k", expiring)).await.unwrap();
    // Written again, same bytes (same ETag), no expiry.
    s.apply(put_m("k", obj("same", 1))).await.unwrap();
    let cond = Precondition {
        if_match: Some("same".into()),
        if_meta: Some(("exp".into(), "1".into())),
        ..Default::default()
    };
    let r = s
        .apply(Mutation::DeleteObject {
            bucket: "b".into(),
            key: "k".into(),
            cond: cond.clone(),
            version_id: None,
            modified_ms: 0,
            bypass_governance: false,
        })
        .await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    assert!(s.object("b", "k").unwrap().is_some());
}

fn key_record(master: &str) -> TenantKeyRecord {
    TenantKeyRecord {
        key_id: 1,
        wrapped: "00".repeat(60),
        master: master.into(),
        created_ms: 0,
    }
}

#[tokio::test]
async fn a_purged_tenant_goes_with_its_key_buckets_and_objects() {
    let (_d, s) = store();
    let id = 7;
    s.apply(Mutation::Identity(IdentityChange::CreateTenant {
        id,
        record: TenantRecord {
            name: "acme".into(),
            created_ms: 0,
            disabled: false,
            quota: Default::default(),
            qos: Default::default(),
        },
        key: Some(key_record("m1")),
    }))
    .await
    .unwrap();
    // A second key is not given: the first stays (two nodes racing agree).
    s.apply(Mutation::Identity(IdentityChange::SetTenantKey {
        id,
        key: key_record("m2"),
    }))
    .await
    .unwrap();
    assert_eq!(s.tenant_key(id).unwrap().unwrap().master, "m1");
    for b in ["0000000000000007:one", "0000000000000007:two"] {
        s.apply(Mutation::CreateBucket {
            name: b.into(),
            record: BucketRecord {
                tenant: id,
                created_ms: 0,
                location: None,
                ..Default::default()
            },
        })
        .await
        .unwrap();
        put(&s, b, "k1").await;
        put(&s, b, "k2").await;
    }
    mkbucket(&s, "other").await;
    put(&s, "other", "k").await;
    // Survives a snapshot round trip (a node restored from one has the key).
    let (snap, _) = s.export().unwrap();
    let (_d2, s2) = store();
    s2.import(&snap).unwrap();
    assert_eq!(s2.tenant_key(id).unwrap().unwrap().master, "m1");

    let e = s
        .apply(Mutation::Identity(IdentityChange::DeleteTenant {
            id,
            purge: false,
        }))
        .await
        .unwrap_err();
    assert!(matches!(e, MetaError::TenantNotEmpty(_)), "{e}");
    assert!(
        s.tenant_key(id).unwrap().is_some(),
        "a refused delete keeps the key"
    );
    let a = s
        .apply(Mutation::Identity(IdentityChange::DeleteTenant {
            id,
            purge: true,
        }))
        .await
        .unwrap();
    assert_eq!(a.freed.len(), 4, "the purged objects' extents are freed");
    assert!(s.tenant_key(id).unwrap().is_none());
    assert!(s.tenant(id).unwrap().is_none());
    assert!(s.buckets().unwrap().iter().all(|(_, b)| b.tenant != id));
    assert_eq!(s.tenant_usage(id).unwrap(), Usage::default());
    // Another tenant's bucket is untouched; a purge of no tenant is refused.
    assert!(s.object("other", "k").unwrap().is_some());
    let e = s
        .apply(Mutation::Identity(IdentityChange::DeleteTenant {
            id,
            purge: true,
        }))
        .await
        .unwrap_err();
    assert!(matches!(e, MetaError::NoSuchTenant(_)), "{e}");
}

#[tokio::test]
async fn the_master_key_is_recorded_once() {
    let (_d, s) = store();
    assert_eq!(s.master_key().unwrap(), None);
    let offer = |fp: &str| {
        Mutation::Identity(IdentityChange::SetMasterKey {
            fingerprint: fp.into(),
        })
    };
    s.apply(offer("aaaa")).await.unwrap();
    // The same again: a no-op (every node offers its key at each start).
    s.apply(offer("aaaa")).await.unwrap();
    match s.apply(offer("bbbb")).await {
        Err(MetaError::MasterKeyMismatch { cluster, offered }) => {
            assert_eq!((cluster.as_str(), offered.as_str()), ("aaaa", "bbbb"))
        }
        other => panic!("another key was taken: {other:?}"),
    }
    assert_eq!(s.master_key().unwrap().as_deref(), Some("aaaa"));
    // It travels with snapshots, as every system record.
    let (snap, _) = s.export().unwrap();
    let (_d2, t) = store();
    t.import(&snap).unwrap();
    assert_eq!(t.master_key().unwrap().as_deref(), Some("aaaa"));
}

/// The admin tables travel in a Raft snapshot: a node restored from one knows
/// the tokens, the audit, the BMCs, the SSH keys and the admin certificates.
#[tokio::test]
async fn admin_records_survive_a_snapshot() {
    use cairn_adminapi::{Action, AuditEntry, Role};
    let (_d, s) = store();
    let changes = [
        AdminChange::CreateToken {
            id: "t1".into(),
            record: AdminTokenRecord {
                name: "ops".into(),
                role: Role::Operator,
                sha256: "ab".into(),
                created_ms: 1,
                expires_ms: None,
                created_by: "local".into(),
                tenant: None,
            },
        },
        AdminChange::Audit {
            entry: AuditEntry {
                at_ms: 2,
                who: "local".into(),
                role: Role::Admin,
                action: Action::AdminTokenCreate,
                path: "/v1/admin/tokens".into(),
                status: 200,
                node: "n".into(),
                repeated: 0,
                tenant: None,
            },
        },
        AdminChange::SetBmc {
            node: 7,
            record: BmcRecord {
                address: "10.0.0.7:623".into(),
                user: "admin".into(),
                password_sealed: vec![1, 2, 3],
                fence: true,
                set_ms: 3,
                set_by: "local".into(),
                fenced_ms: None,
            },
        },
        AdminChange::AddSshKey {
            id: "k1".into(),
            record: SshKeyRecord {
                name: "alice".into(),
                role: Role::Reader,
                public_key: "ssh-ed25519 AAAA".into(),
                fingerprint: "SHA256:x".into(),
                added_ms: 4,
                added_by: "local".into(),
            },
        },
        AdminChange::CreateCert {
            sha256: "cd".into(),
            record: AdminCertRecord {
                name: "bob".into(),
                role: Role::Admin,
                not_after_ms: 5,
                created_ms: 5,
                created_by: "local".into(),
            },
        },
    ];
    for c in changes {
        s.apply(Mutation::Admin(c)).await.unwrap();
    }
    let (snap, _) = s.export().unwrap();
    let (_d2, t) = store();
    // Whatever the restored node had is replaced.
    t.apply(Mutation::Admin(AdminChange::AddSshKey {
        id: "stale".into(),
        record: s.ssh_keys().unwrap()[0].1.clone(),
    }))
    .await
    .unwrap();
    t.import(&snap).unwrap();
    assert_eq!(t.admin_tokens().unwrap(), s.admin_tokens().unwrap());
    assert_eq!(t.audit(10).unwrap().len(), 1);
    assert_eq!(t.bmcs().unwrap(), s.bmcs().unwrap());
    assert_eq!(t.ssh_keys().unwrap(), s.ssh_keys().unwrap());
    assert_eq!(t.admin_certs().unwrap(), s.admin_certs().unwrap());
}

/// The audit's three tables: a tenant's token or a lower cluster role fills its
/// own, never the administrators'; reading merges them by time.
#[tokio::test]
async fn audit_tables_keep_callers_apart() {
    use cairn_adminapi::{Action, AuditEntry, Role};
    let (_d, s) = store();
    let entry = |at_ms: i64, role: Role, tenant: Option<&str>| AuditEntry {
        at_ms,
        who: format!("w{at_ms}"),
        role,
        action: Action::AdminTokenCreate,
        path: "/p".into(),
        status: 200,
        node: "n".into(),
        repeated: 0,
        tenant: tenant.map(str::to_string),
    };
    for e in [
        entry(1, Role::Admin, None),
        entry(2, Role::Admin, Some("acme")),
        entry(3, Role::Operator, None),
        entry(4, Role::Operator, Some("acme")),
        entry(5, Role::Admin, None),
    ] {
        s.apply(Mutation::Admin(AdminChange::Audit { entry: e }))
            .await
            .unwrap();
    }
    let at = |v: Vec<AuditEntry>| v.iter().map(|e| e.at_ms).collect::<Vec<_>>();
    assert_eq!(at(s.audit(10).unwrap()), [1, 2, 3, 4, 5]);
    assert_eq!(at(s.audit(2).unwrap()), [4, 5]);
    let tx = s.db.begin_read().unwrap();
    let len = |t| tx.open_table(t).unwrap().len().unwrap();
    assert_eq!(
        (
            len(admin::AUDIT),
            len(admin::AUDIT_STAFF),
            len(admin::AUDIT_TENANTS)
        ),
        (2, 1, 2)
    );
}

#[tokio::test]
async fn tags_go_only_onto_the_write_they_were_read_from() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    put(&s, "b", "k").await;
    let first = s.object("b", "k").unwrap().unwrap();
    let tags: BTreeMap<String, String> = [("a".to_string(), "1".to_string())].into();
    s.apply(Mutation::ReplaceObjectTags {
        bucket: "b".into(),
        key: "k".into(),
        of: WriteId::of(&first),
        tags: tags.clone(),
    })
    .await
    .unwrap();
    let tagged = s.object("b", "k").unwrap().unwrap();
    assert_eq!(tagged.tags, tags);
    assert_eq!(tagged.extents, first.extents, "the bytes are untouched");

    // Overwritten meanwhile: the change names a write the key no longer holds.
    s.apply(Mutation::PutObject {
        bucket: "b".into(),
        key: "k".into(),
        record: ObjectRecord {
            modified_ms: 2,
            ..obj("f", 2)
        },
        cond: Precondition::default(),
        written_in: None,
    })
    .await
    .unwrap();
    let r = s
        .apply(Mutation::ReplaceObjectTags {
            bucket: "b".into(),
            key: "k".into(),
            of: WriteId::of(&first),
            tags: BTreeMap::new(),
        })
        .await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    assert!(s.object("b", "k").unwrap().unwrap().tags.is_empty());
    let r = s
        .apply(Mutation::ReplaceObjectTags {
            bucket: "b".into(),
            key: "gone".into(),
            of: WriteId::of(&first),
            tags,
        })
        .await;
    assert!(matches!(r, Err(MetaError::NoSuchKey(_))), "{r:?}");
}

#[tokio::test]
async fn bucket_changes_touch_one_part_and_survive_a_snapshot() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    let rule = CorsRule {
        allowed_origins: vec!["*".into()],
        allowed_methods: vec!["GET".into()],
        ..Default::default()
    };
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Cors(vec![rule.clone()]),
    })
    .await
    .unwrap();
    let tags: BTreeMap<String, String> = [("team".to_string(), "ops".to_string())].into();
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Tags(tags.clone()),
    })
    .await
    .unwrap();
    let b = s.bucket("b").unwrap().unwrap();
    assert_eq!((b.cors.clone(), b.tags.clone()), (vec![rule], tags));
    let r = s
        .apply(Mutation::ChangeBucket {
            name: "nope".into(),
            change: BucketChange::Tags(BTreeMap::new()),
        })
        .await;
    assert!(matches!(r, Err(MetaError::NoSuchBucket(_))), "{r:?}");

    let (snapshot, _) = s.export().unwrap();
    let (_d2, restored) = store();
    restored.import(&snapshot).unwrap();
    assert_eq!(restored.bucket("b").unwrap().unwrap(), b);
}

#[tokio::test]
async fn an_expiry_spares_a_newer_write_of_the_same_bytes() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Lifecycle(vec![LifecycleRule {
            id: "all".into(),
            enabled: true,
            expiration_days: Some(1),
            ..Default::default()
        }]),
    })
    .await
    .unwrap();
    put(&s, "b", "k").await;
    let found = s.object("b", "k").unwrap().unwrap();
    // Written again: same bytes, same ETag, a later write.
    s.apply(Mutation::PutObject {
        bucket: "b".into(),
        key: "k".into(),
        record: ObjectRecord {
            modified_ms: 5,
            ..obj("e", 1)
        },
        cond: Precondition::default(),
        written_in: None,
    })
    .await
    .unwrap();
    let expire = |rec: &ObjectRecord| Mutation::Expire {
        bucket: "b".into(),
        what: Expiry::Object {
            key: "k".into(),
            of: WriteId::of(rec),
        },
        now_ms: 10_000,
        day_ms: 1000,
    };
    let r = s.apply(expire(&found)).await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    assert!(s.object("b", "k").unwrap().is_some());
    let now = s.object("b", "k").unwrap().unwrap();
    s.apply(expire(&now)).await.unwrap();
    assert!(s.object("b", "k").unwrap().is_none());
}

#[test]
fn lifecycle_days_count_to_the_next_day_boundary() {
    const DAY: i64 = 86_400_000;
    // Written at 10:00 on day 3: one day later is day 4 10:00, rounded up to
    // the start of day 5; written at midnight, exactly the days later.
    assert_eq!(lifecycle_due(3 * DAY + 10 * 3_600_000, 1, DAY), 5 * DAY);
    assert_eq!(lifecycle_due(3 * DAY, 2, DAY), 5 * DAY);
    assert_eq!(lifecycle_due(1500, 2, 1000), 4000);
    let rec = ObjectRecord {
        modified_ms: 0,
        ..obj("e", 10)
    };
    let by_age = LifecycleRule {
        enabled: true,
        expiration_days: Some(1),
        ..Default::default()
    };
    assert!(!by_age.expires("k", &rec, DAY - 1, DAY));
    assert!(by_age.expires("k", &rec, DAY, DAY));
    let disabled = LifecycleRule {
        enabled: false,
        ..by_age.clone()
    };
    assert!(!disabled.expires("k", &rec, DAY, DAY));
    let by_date = LifecycleRule {
        enabled: true,
        expiration_date_ms: Some(10 * DAY),
        size_greater_than: Some(10),
        ..Default::default()
    };
    assert!(
        !by_date.expires("k", &rec, 10 * DAY, DAY),
        "size 10 is not > 10"
    );
}

#[tokio::test]
async fn an_expiry_is_checked_again_against_the_rules_and_the_object_as_they_are() {
    let (_d, s) = store();
    mkbucket(&s, "b").await;
    put(&s, "b", "k").await;
    let rule = LifecycleRule {
        id: "r".into(),
        enabled: true,
        tags: [("expire".to_string(), "yes".to_string())].into(),
        expiration_days: Some(1),
        ..Default::default()
    };
    let set_rules = |rules: Vec<LifecycleRule>| Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Lifecycle(rules),
    };
    let rec = s.object("b", "k").unwrap().unwrap();
    let tagged = [("expire".to_string(), "yes".to_string())].into();
    s.apply(Mutation::ReplaceObjectTags {
        bucket: "b".into(),
        key: "k".into(),
        of: WriteId::of(&rec),
        tags: tagged,
    })
    .await
    .unwrap();
    let expire = || Mutation::Expire {
        bucket: "b".into(),
        what: Expiry::Object {
            key: "k".into(),
            of: WriteId::of(&rec),
        },
        now_ms: 10_000,
        day_ms: 1000,
    };
    // No rule (removed after the worker looked): refused.
    let r = s.apply(expire()).await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    // The rule, but the tag taken off: refused.
    s.apply(set_rules(vec![rule.clone()])).await.unwrap();
    s.apply(Mutation::ReplaceObjectTags {
        bucket: "b".into(),
        key: "k".into(),
        of: WriteId::of(&rec),
        tags: BTreeMap::new(),
    })
    .await
    .unwrap();
    let r = s.apply(expire()).await;
    assert!(matches!(r, Err(MetaError::PreconditionFailed)), "{r:?}");
    assert!(s.object("b", "k").unwrap().is_some());
    // Tagged again and due: deleted, its extents freed.
    s.apply(Mutation::ReplaceObjectTags {
        bucket: "b".into(),
        key: "k".into(),
        of: WriteId::of(&rec),
        tags: [("expire".to_string(), "yes".to_string())].into(),
    })
    .await
    .unwrap();
    let applied = s.apply(expire()).await.unwrap();
    assert_eq!(applied.freed.len(), 1);
    assert!(s.object("b", "k").unwrap().is_none());
}

#[tokio::test]
async fn cors_rules_are_gathered_by_name_across_tenants() {
    let (_d, s) = store();
    mkbucket(&s, "web").await;
    mkbucket(&s, "plain").await;
    s.apply(Mutation::CreateBucket {
        name: bucket_id(7, "web"),
        record: BucketRecord {
            tenant: 7,
            ..Default::default()
        },
    })
    .await
    .unwrap();
    let rule = |o: &str| CorsRule {
        allowed_origins: vec![o.into()],
        allowed_methods: vec!["GET".into()],
        ..Default::default()
    };
    for (name, origin) in [
        ("web".to_string(), "https://a"),
        (bucket_id(7, "web"), "https://b"),
    ] {
        s.apply(Mutation::ChangeBucket {
            name,
            change: BucketChange::Cors(vec![rule(origin)]),
        })
        .await
        .unwrap();
    }
    let by_name = s.cors_by_name().unwrap();
    assert_eq!(by_name.len(), 1, "plain has no rules: {by_name:?}");
    let mut origins: Vec<(u64, String)> = by_name["web"]
        .iter()
        .flat_map(|(t, rules)| rules.iter().map(|r| (*t, r.allowed_origins[0].clone())))
        .collect();
    origins.sort();
    assert_eq!(
        origins,
        [(1, "https://a".to_string()), (7, "https://b".to_string())]
    );
}
