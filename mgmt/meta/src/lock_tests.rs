//! Object lock in the metadata: the bucket's configuration, default retention
//! given at apply, deletes by version refused while retained or held (the
//! lifecycle's too), GOVERNANCE lifted only by a bypass, COMPLIANCE never
//! before its date.

use super::version_tests::{obj, setup};
use super::*;

const DAY: i64 = 24 * 60 * 60 * 1000;

async fn lock_bucket(s: &MetaStore, default: Option<DefaultRetention>) {
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::ObjectLock(BucketLock { default }),
    })
    .await
    .unwrap();
}

/// Puts `k` written at `at_ms` with `lock`; returns its version id.
async fn put_at(s: &MetaStore, k: &str, id: u128, at_ms: i64, lock: ObjectLock) -> String {
    let mut record = obj(id, 10);
    record.modified_ms = at_ms;
    record.lock = lock;
    let a = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: k.into(),
            record,
            cond: Precondition::default(),
            written_in: None,
        })
        .await
        .unwrap();
    a.object.unwrap().version.id.unwrap()
}

async fn delete_at(
    s: &MetaStore,
    k: &str,
    id: Option<&str>,
    now_ms: i64,
    bypass: bool,
) -> Result<Applied, MetaError> {
    s.apply(Mutation::DeleteObject {
        bucket: "b".into(),
        key: k.into(),
        cond: Default::default(),
        version_id: id.map(str::to_string),
        modified_ms: now_ms,
        bypass_governance: bypass,
    })
    .await
}

async fn set_lock(
    s: &MetaStore,
    id: &str,
    change: LockChange,
    now_ms: i64,
    bypass: bool,
) -> Result<Applied, MetaError> {
    s.apply(Mutation::SetObjectLock {
        bucket: "b".into(),
        key: "k".into(),
        version_id: Some(id.into()),
        change,
        bypass_governance: bypass,
        now_ms,
    })
    .await
}

fn retained(mode: LockMode, until_ms: i64) -> ObjectLock {
    ObjectLock {
        retention: Some(Retention { mode, until_ms }),
        legal_hold: false,
    }
}

#[tokio::test]
async fn lock_needs_versioning_enabled_and_then_keeps_it() {
    let (_d, s) = setup(None).await;
    let r = s
        .apply(Mutation::ChangeBucket {
            name: "b".into(),
            change: BucketChange::ObjectLock(BucketLock::default()),
        })
        .await;
    assert!(matches!(r, Err(MetaError::LockState(_))), "{r:?}");
    // A lock asked of a bucket without object lock is refused, not dropped.
    let mut record = obj(1, 10);
    record.lock.legal_hold = true;
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            record,
            cond: Precondition::default(),
            written_in: None,
        })
        .await;
    assert!(matches!(r, Err(MetaError::NoObjectLock)), "{r:?}");
    assert!(s.object("b", "k").unwrap().is_none(), "nothing written");

    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    lock_bucket(&s, None).await;
    let r = s
        .apply(Mutation::ChangeBucket {
            name: "b".into(),
            change: BucketChange::Versioning(Versioning::Suspended),
        })
        .await;
    assert!(matches!(r, Err(MetaError::LockState(_))), "{r:?}");
    let b = s.bucket("b").unwrap().unwrap();
    assert_eq!(b.versioning, Some(Versioning::Enabled));
    assert!(b.object_lock.is_some());
    // A default period of 0 days, or past 100 years, is refused.
    for period in [LockPeriod::Days(0), LockPeriod::Years(101)] {
        let r = s
            .apply(Mutation::ChangeBucket {
                name: "b".into(),
                change: BucketChange::ObjectLock(BucketLock {
                    default: Some(DefaultRetention {
                        mode: LockMode::Governance,
                        period,
                    }),
                }),
            })
            .await;
        assert!(matches!(r, Err(MetaError::InvalidLock(_))), "{r:?}");
    }
}

#[tokio::test]
async fn default_retention_is_given_at_apply_and_refuses_deletes_until_it_ends() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    lock_bucket(
        &s,
        Some(DefaultRetention {
            mode: LockMode::Compliance,
            period: LockPeriod::Days(2),
        }),
    )
    .await;
    let v1 = put_at(&s, "k", 1, 1000, ObjectLock::default()).await;
    let cur = s.object("b", "k").unwrap().unwrap();
    assert_eq!(cur.lock, retained(LockMode::Compliance, 1000 + 2 * DAY));
    // A delete of the latest makes a marker: allowed, the version stays.
    let d = delete_at(&s, "k", None, 2000, false).await.unwrap();
    let marker = d.deleted.unwrap();
    assert!(marker.marker);
    // The version itself: refused, with or without a bypass (COMPLIANCE).
    for bypass in [false, true] {
        let r = delete_at(&s, "k", Some(&v1), 2000, bypass).await;
        assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    }
    assert!(s.object_version("b", "k", &v1).unwrap().is_some());
    // Shortening or removing COMPLIANCE retention is refused, even bypassing.
    let shorter = LockChange::Retention(Some(Retention {
        mode: LockMode::Compliance,
        until_ms: 1000 + DAY,
    }));
    for change in [shorter, LockChange::Retention(None)] {
        let r = set_lock(&s, &v1, change, 2000, true).await;
        assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    }
    // Extending it is allowed.
    let longer = Retention {
        mode: LockMode::Compliance,
        until_ms: 1000 + 3 * DAY,
    };
    set_lock(&s, &v1, LockChange::Retention(Some(longer)), 2000, false)
        .await
        .unwrap();
    let (v, _) = s.object_version("b", "k", &v1).unwrap().unwrap();
    assert_eq!(v.object().unwrap().lock.retention, Some(longer));
    // Past the date, by the proposer's clock, the version goes.
    let r = delete_at(&s, "k", Some(&v1), 1000 + 3 * DAY - 1, false).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    let d = delete_at(&s, "k", Some(&v1), 1000 + 3 * DAY, false)
        .await
        .unwrap();
    assert_eq!(d.freed.len(), 1, "its bytes are freed");
}

#[tokio::test]
async fn governance_is_lifted_only_by_a_bypass_and_a_legal_hold_by_nothing() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    lock_bucket(&s, None).await;
    let v1 = put_at(&s, "k", 1, 0, retained(LockMode::Governance, DAY)).await;
    let v2 = put_at(&s, "k", 2, 0, ObjectLock::default()).await;
    assert!(s.object("b", "k").unwrap().unwrap().lock.is_none());
    let r = delete_at(&s, "k", Some(&v1), 10, false).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    // Shortening needs the bypass; a GOVERNANCE → COMPLIANCE move does not.
    let shorter = LockChange::Retention(Some(Retention {
        mode: LockMode::Governance,
        until_ms: 100,
    }));
    let r = set_lock(&s, &v1, shorter.clone(), 10, false).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    set_lock(&s, &v1, shorter, 10, true).await.unwrap();
    // A legal hold: no bypass lifts it, taking it off does.
    set_lock(&s, &v1, LockChange::LegalHold(true), 10, false)
        .await
        .unwrap();
    let r = delete_at(&s, "k", Some(&v1), 10, true).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    set_lock(&s, &v1, LockChange::LegalHold(false), 10, false)
        .await
        .unwrap();
    // Retained till 100 still; bypassed, it goes.
    let r = delete_at(&s, "k", Some(&v1), 10, false).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    delete_at(&s, "k", Some(&v1), 10, true).await.unwrap();
    // The unlocked current version goes as it always did.
    delete_at(&s, "k", Some(&v2), 10, false).await.unwrap();
    assert!(s.object("b", "k").unwrap().is_none());
    // A version that is not there, and a lock on an unknown key.
    let r = set_lock(&s, &v2, LockChange::LegalHold(true), 10, false).await;
    assert!(matches!(r, Err(MetaError::NoSuchVersion(_))), "{r:?}");
}

#[tokio::test]
async fn the_lifecycle_never_removes_a_locked_version() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    lock_bucket(&s, None).await;
    let old = put_at(&s, "k", 1, 0, ObjectLock::default()).await;
    set_lock(&s, &old, LockChange::LegalHold(true), 0, false)
        .await
        .unwrap();
    put_at(&s, "k", 2, 0, ObjectLock::default()).await;
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Lifecycle(vec![LifecycleRule {
            id: "nc".into(),
            enabled: true,
            noncurrent_days: Some(1),
            ..Default::default()
        }]),
    })
    .await
    .unwrap();
    let expire = Mutation::Expire {
        bucket: "b".into(),
        what: Expiry::Version {
            key: "k".into(),
            id: old.clone(),
        },
        now_ms: 10_000,
        day_ms: 1000,
    };
    let r = s.apply(expire.clone()).await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    set_lock(&s, &old, LockChange::LegalHold(false), 0, false)
        .await
        .unwrap();
    s.apply(expire).await.unwrap();
    assert!(s.object_version("b", "k", &old).unwrap().is_none());
}

#[tokio::test]
async fn a_write_sharing_a_locked_versions_extents_never_destroys_it() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    lock_bucket(&s, None).await;
    let v1 = put_at(&s, "k", 1, 1000, retained(LockMode::Compliance, 10 * DAY)).await;
    // An NFS client's rebuild over the same extents, made while it took the
    // bucket for unversioned: refused, the locked version stays.
    let mut rebuilt = obj(1, 10);
    rebuilt.modified_ms = 2000;
    let r = s
        .apply(Mutation::PutObject {
            bucket: "b".into(),
            key: "k".into(),
            record: rebuilt,
            cond: Precondition::default(),
            written_in: None,
        })
        .await;
    assert!(matches!(r, Err(MetaError::ObjectLocked(_))), "{r:?}");
    assert!(s.object_version("b", "k", &v1).unwrap().is_some());
    // The very write applied again is still one version.
    put_at(&s, "k", 1, 1000, retained(LockMode::Compliance, 10 * DAY)).await;
    let versions = s.list_versions("b", "", None, None, None, 10).unwrap();
    assert_eq!(versions.entries.len(), 1);
}

#[tokio::test]
async fn an_upload_asking_for_a_lock_needs_a_bucket_with_object_lock() {
    let (_d, s) = setup(Some(Versioning::Enabled)).await;
    let record = UploadRecord {
        key: "k".into(),
        created_ms: 0,
        content_type: None,
        user_meta: Default::default(),
        headers: Default::default(),
        checksum_algorithm: None,
        full_object_checksum: false,
        tags: Default::default(),
        lock: ObjectLock {
            retention: None,
            legal_hold: true,
        },
    };
    let create = Mutation::CreateUpload {
        bucket: "b".into(),
        upload_id: "u".into(),
        record,
    };
    let r = s.apply(create.clone()).await;
    assert!(matches!(r, Err(MetaError::NoObjectLock)), "{r:?}");
    lock_bucket(&s, None).await;
    s.apply(create).await.unwrap();
}
