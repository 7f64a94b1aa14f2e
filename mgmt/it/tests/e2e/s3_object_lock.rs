//! S3 object lock through `aws-sdk-s3` against a real node, with a tenant's
//! admin and read-write users: a bucket made with object lock (versioned, never
//! suspended), retention and legal hold asked on PUT and multipart, the
//! bucket's default retention, deletes by version refused (a bypass only for
//! GOVERNANCE and only by a tenant admin), retention only ever extended, a
//! delete marker still allowed, the lifecycle worker passing locked versions
//! by, and every lock still in force after mgmtd is killed and started again.

use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, BucketVersioningStatus, CompletedMultipartUpload, CompletedPart,
    DefaultRetention, Delete, LifecycleRule, LifecycleRuleFilter, NoncurrentVersionExpiration,
    ObjectIdentifier, ObjectLockConfiguration, ObjectLockEnabled, ObjectLockLegalHold,
    ObjectLockLegalHoldStatus, ObjectLockMode, ObjectLockRetention, ObjectLockRetentionMode,
    ObjectLockRule, VersioningConfiguration,
};
use aws_sdk_s3::Client;
use cairn_it::tenant::{key_client, nodectl_json};
use cairn_it::{code, Node, NodeOptions};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const B: &str = "vault";

fn in_secs(s: i64) -> DateTime {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    DateTime::from_secs(now + s)
}

async fn put_locked(c: &Client, key: &str, mode: Option<ObjectLockMode>, hold: bool) -> String {
    let mut p = c
        .put_object()
        .bucket(B)
        .key(key)
        .body(ByteStream::from(key.as_bytes().to_vec()));
    if let Some(m) = mode {
        p = p
            .object_lock_mode(m)
            .object_lock_retain_until_date(in_secs(3600));
    }
    if hold {
        p = p.object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On);
    }
    p.send().await.unwrap().version_id().unwrap().to_string()
}

async fn delete(c: &Client, key: &str, id: &str, bypass: bool) -> Result<(), String> {
    let mut d = c.delete_object().bucket(B).key(key).version_id(id);
    if bypass {
        d = d.bypass_governance_retention(true);
    }
    d.send().await.map(|_| ()).map_err(|e| {
        use aws_sdk_s3::error::ProvideErrorMetadata;
        e.code().unwrap_or("?").to_string()
    })
}

async fn version_exists(c: &Client, key: &str, id: &str) -> bool {
    c.head_object()
        .bucket(B)
        .key(key)
        .version_id(id)
        .send()
        .await
        .is_ok()
}

fn hold(on: bool) -> ObjectLockLegalHold {
    let s = match on {
        true => ObjectLockLegalHoldStatus::On,
        false => ObjectLockLegalHoldStatus::Off,
    };
    ObjectLockLegalHold::builder().status(s).build()
}

#[tokio::test]
async fn object_lock_keeps_versions_from_everyone_it_should() {
    // A lifecycle day lasts a second here (retention days do not: they are real).
    let mut node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_LIFECYCLE_DAY", "1"), ("CAIRN_LIFECYCLE_EVERY", "1")],
        ..NodeOptions::default()
    });
    nodectl_json(&node, &["tenant", "create", "acme"]);
    nodectl_json(
        &node,
        &["user", "create", "acme", "alice", "--role", "admin"],
    );
    nodectl_json(&node, &["user", "create", "acme", "bob"]);
    let (alice, _) = key_client(&node, "acme", "alice");
    let (bob, _) = key_client(&node, "acme", "bob");

    // Object lock asked of a bucket without it: refused, never ignored.
    bob.create_bucket().bucket("plain").send().await.unwrap();
    let r = bob
        .put_object()
        .bucket("plain")
        .key("k")
        .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "InvalidRequest");
    let r = bob
        .get_object_lock_configuration()
        .bucket("plain")
        .send()
        .await;
    assert_eq!(code(r), "ObjectLockConfigurationNotFoundError");
    let enabled = ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .build();
    let r = bob
        .put_object_lock_configuration()
        .bucket("plain")
        .object_lock_configuration(enabled.clone())
        .send()
        .await;
    assert_eq!(code(r), "InvalidBucketState", "an unversioned bucket");

    // A bucket made with object lock is versioned, and stays so.
    bob.create_bucket()
        .bucket(B)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap();
    let v = bob.get_bucket_versioning().bucket(B).send().await.unwrap();
    assert_eq!(v.status(), Some(&BucketVersioningStatus::Enabled));
    let conf = bob
        .get_object_lock_configuration()
        .bucket(B)
        .send()
        .await
        .unwrap();
    let conf = conf.object_lock_configuration().unwrap();
    assert_eq!(
        conf.object_lock_enabled(),
        Some(&ObjectLockEnabled::Enabled)
    );
    assert!(conf.rule().is_none());
    let suspend = VersioningConfiguration::builder()
        .status(BucketVersioningStatus::Suspended)
        .build();
    let r = bob
        .put_bucket_versioning()
        .bucket(B)
        .versioning_configuration(suspend)
        .send()
        .await;
    assert_eq!(code(r), "InvalidBucketState");

    // A retention date in the past, or a mode without a date: refused.
    let r = bob
        .put_object()
        .bucket(B)
        .key("past")
        .object_lock_mode(ObjectLockMode::Governance)
        .object_lock_retain_until_date(in_secs(-60))
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");
    let r = bob
        .put_object()
        .bucket(B)
        .key("past")
        .object_lock_mode(ObjectLockMode::Governance)
        .body(ByteStream::from_static(b"x"))
        .send()
        .await;
    assert_eq!(code(r), "InvalidArgument");

    // GOVERNANCE: bob (read-write) cannot delete the version, nor bypass;
    // alice (tenant admin) bypasses.
    let gov = put_locked(&bob, "gov", Some(ObjectLockMode::Governance), false).await;
    let h = bob.head_object().bucket(B).key("gov").send().await.unwrap();
    assert_eq!(h.object_lock_mode(), Some(&ObjectLockMode::Governance));
    assert!(h.object_lock_retain_until_date().is_some());
    assert_eq!(
        delete(&bob, "gov", &gov, false).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        delete(&bob, "gov", &gov, true).await,
        Err("AccessDenied".into())
    );
    assert_eq!(
        delete(&alice, "gov", &gov, false).await,
        Err("AccessDenied".into())
    );
    assert!(version_exists(&bob, "gov", &gov).await);
    delete(&alice, "gov", &gov, true).await.unwrap();
    assert!(!version_exists(&bob, "gov", &gov).await);

    // COMPLIANCE: no one deletes it, no one shortens it; extending is allowed.
    let comp = put_locked(&bob, "comp", Some(ObjectLockMode::Compliance), false).await;
    assert_eq!(
        delete(&alice, "comp", &comp, true).await,
        Err("AccessDenied".into())
    );
    let shorter = ObjectLockRetention::builder()
        .mode(ObjectLockRetentionMode::Compliance)
        .retain_until_date(in_secs(600))
        .build();
    let r = alice
        .put_object_retention()
        .bucket(B)
        .key("comp")
        .version_id(&comp)
        .retention(shorter)
        .bypass_governance_retention(true)
        .send()
        .await;
    assert_eq!(code(r), "AccessDenied");
    let until = in_secs(7200);
    let longer = ObjectLockRetention::builder()
        .mode(ObjectLockRetentionMode::Compliance)
        .retain_until_date(until)
        .build();
    bob.put_object_retention()
        .bucket(B)
        .key("comp")
        .version_id(&comp)
        .retention(longer)
        .send()
        .await
        .unwrap();
    let r = bob
        .get_object_retention()
        .bucket(B)
        .key("comp")
        .version_id(&comp)
        .send()
        .await
        .unwrap();
    let r = r.retention().unwrap();
    assert_eq!(r.mode(), Some(&ObjectLockRetentionMode::Compliance));
    assert_eq!(r.retain_until_date().unwrap().secs(), until.secs());
    // A DELETE without a version id makes a marker: allowed, the version stays.
    let d = bob
        .delete_object()
        .bucket(B)
        .key("comp")
        .send()
        .await
        .unwrap();
    assert_eq!(d.delete_marker(), Some(true));
    assert!(version_exists(&bob, "comp", &comp).await);
    // DeleteObjects by version: refused for that key, in the answer.
    let batch = Delete::builder()
        .objects(
            ObjectIdentifier::builder()
                .key("comp")
                .version_id(&comp)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let out = alice
        .delete_objects()
        .bucket(B)
        .delete(batch)
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    assert_eq!(out.errors().len(), 1);
    assert_eq!(out.errors()[0].code(), Some("AccessDenied"));
    assert!(version_exists(&bob, "comp", &comp).await);

    // A legal hold: nothing lifts it but taking it off.
    let held = put_locked(&bob, "held", None, true).await;
    let h = bob
        .get_object_legal_hold()
        .bucket(B)
        .key("held")
        .send()
        .await
        .unwrap();
    assert_eq!(
        h.legal_hold().and_then(|h| h.status()),
        Some(&ObjectLockLegalHoldStatus::On)
    );
    assert_eq!(
        delete(&alice, "held", &held, true).await,
        Err("AccessDenied".into())
    );
    bob.put_object_legal_hold()
        .bucket(B)
        .key("held")
        .version_id(&held)
        .legal_hold(hold(false))
        .send()
        .await
        .unwrap();
    delete(&bob, "held", &held, false).await.unwrap();

    // The bucket's default retention reaches plain PUTs and multipart uploads.
    let rule = ObjectLockRule::builder()
        .default_retention(
            DefaultRetention::builder()
                .mode(ObjectLockRetentionMode::Governance)
                .days(1)
                .build(),
        )
        .build();
    let conf = ObjectLockConfiguration::builder()
        .object_lock_enabled(ObjectLockEnabled::Enabled)
        .rule(rule)
        .build();
    bob.put_object_lock_configuration()
        .bucket(B)
        .object_lock_configuration(conf)
        .send()
        .await
        .unwrap();
    let plain = put_locked(&bob, "plain", None, false).await;
    let r = bob
        .get_object_retention()
        .bucket(B)
        .key("plain")
        .send()
        .await
        .unwrap();
    let r = r.retention().unwrap();
    assert_eq!(r.mode(), Some(&ObjectLockRetentionMode::Governance));
    let ahead = r.retain_until_date().unwrap().secs() - in_secs(0).secs();
    assert!((86_300..=86_400).contains(&ahead), "{ahead} s");
    assert_eq!(
        delete(&bob, "plain", &plain, false).await,
        Err("AccessDenied".into())
    );
    let up = bob
        .create_multipart_upload()
        .bucket(B)
        .key("big")
        .object_lock_mode(ObjectLockMode::Compliance)
        .object_lock_retain_until_date(in_secs(3600))
        .send()
        .await
        .unwrap();
    let part = bob
        .upload_part()
        .bucket(B)
        .key("big")
        .upload_id(up.upload_id().unwrap())
        .part_number(1)
        .body(ByteStream::from(vec![7u8; 1 << 20]))
        .send()
        .await
        .unwrap();
    let done = bob
        .complete_multipart_upload()
        .bucket(B)
        .key("big")
        .upload_id(up.upload_id().unwrap())
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    let big = done.version_id().unwrap().to_string();
    let h = bob.head_object().bucket(B).key("big").send().await.unwrap();
    assert_eq!(h.object_lock_mode(), Some(&ObjectLockMode::Compliance));
    assert_eq!(
        delete(&alice, "big", &big, true).await,
        Err("AccessDenied".into())
    );

    // The lifecycle passes locked versions by: of two noncurrent versions,
    // the held one stays. (Both had the default retention, taken off here by
    // the admin, so that the legal hold alone tells them apart.)
    let old_held = put_locked(&bob, "aging", None, true).await;
    alice
        .put_object_retention()
        .bucket(B)
        .key("aging")
        .version_id(&old_held)
        .retention(ObjectLockRetention::builder().build())
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    let old_free = put_locked(&bob, "aging", None, false).await;
    alice
        .put_object_retention()
        .bucket(B)
        .key("aging")
        .version_id(&old_free)
        .retention(ObjectLockRetention::builder().build())
        .bypass_governance_retention(true)
        .send()
        .await
        .unwrap();
    put_locked(&bob, "aging", None, false).await;
    let rule = LifecycleRule::builder()
        .id("nc")
        .status(aws_sdk_s3::types::ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("aging").build())
        .noncurrent_version_expiration(
            NoncurrentVersionExpiration::builder()
                .noncurrent_days(1)
                .build(),
        )
        .build()
        .unwrap();
    bob.put_bucket_lifecycle_configuration()
        .bucket(B)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(rule)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let mut gone = false;
    for _ in 0..150 {
        if !version_exists(&bob, "aging", &old_free).await {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the unlocked noncurrent version expired");
    assert!(
        version_exists(&bob, "aging", &old_held).await,
        "the held one stays"
    );

    // Every lock holds after kill -9 and a restart.
    node.kill_mgmtd();
    node.start_mgmtd();
    for (key, id) in [("comp", &comp), ("plain", &plain), ("big", &big)] {
        assert!(version_exists(&bob, key, id).await, "{key}");
        assert_eq!(
            delete(&alice, key, id, false).await,
            Err("AccessDenied".into())
        );
    }
    let h = bob
        .get_object_legal_hold()
        .bucket(B)
        .key("aging")
        .version_id(&old_held)
        .send()
        .await
        .unwrap();
    assert_eq!(
        h.legal_hold().and_then(|h| h.status()),
        Some(&ObjectLockLegalHoldStatus::On)
    );
}
