//! The mutations a file view of a bucket makes (NFS): a rename in one step,
//! and an object rebuilt from part of an earlier one's extents.

use super::*;

use super::version_tests::{obj, setup as versioned};

async fn setup() -> (tempfile::TempDir, MetaStore) {
    versioned(None).await
}

async fn put(
    s: &MetaStore,
    key: &str,
    rec: ObjectRecord,
    cond: Precondition,
) -> Result<Applied, MetaError> {
    s.apply(Mutation::PutObject {
        bucket: "b".into(),
        key: key.into(),
        record: rec,
        cond,
        written_in: None,
    })
    .await
}

async fn rename(
    s: &MetaStore,
    from: &str,
    to: &str,
    of: &ObjectRecord,
) -> Result<Applied, MetaError> {
    s.apply(Mutation::RenameObject {
        bucket: "b".into(),
        from: from.into(),
        to: to.into(),
        of: WriteId::of(of),
    })
    .await
}

#[tokio::test]
async fn a_rename_moves_the_object_and_frees_only_what_it_replaced() {
    let (_d, s) = setup().await;
    let a = put(&s, "dir/a", obj(1, 10), Precondition::default())
        .await
        .unwrap();
    let a = *a.object.unwrap();
    put(&s, "dir/b", obj(2, 30), Precondition::default())
        .await
        .unwrap();
    let r = rename(&s, "dir/a", "dir/b", &a).await.unwrap();
    assert_eq!(
        r.freed.iter().map(|e| e.id).collect::<Vec<_>>(),
        [2],
        "the replaced object's extent"
    );
    assert!(
        s.object("b", "dir/a").unwrap().is_none(),
        "the old name is gone"
    );
    let moved = s.object("b", "dir/b").unwrap().unwrap();
    assert_eq!(moved.extents[0].id, 1, "the same bytes, not a copy");
    assert_eq!(
        moved.modified_ms, a.modified_ms,
        "a rename keeps the modification time"
    );
    let u = s.bucket_usage("b").unwrap();
    assert_eq!(
        (u.bytes, u.objects),
        (10, 1),
        "usage counts the moved object once"
    );

    // A rename of a write that is no longer there is refused, and changes nothing.
    let err = rename(&s, "dir/a", "dir/c", &a).await.unwrap_err();
    assert!(matches!(err, MetaError::NoSuchKey(_)), "{err:?}");
    put(&s, "dir/b", obj(3, 5), Precondition::default())
        .await
        .unwrap();
    let err = rename(&s, "dir/b", "dir/c", &moved).await.unwrap_err();
    assert!(matches!(err, MetaError::PreconditionFailed), "{err:?}");
    assert!(s.object("b", "dir/c").unwrap().is_none());
}

#[tokio::test]
async fn a_rename_is_refused_in_a_versioned_bucket() {
    let (_d, s) = setup().await;
    s.apply(Mutation::ChangeBucket {
        name: "b".into(),
        change: BucketChange::Versioning(Versioning::Enabled),
    })
    .await
    .unwrap();
    let a = *put(&s, "a", obj(1, 10), Precondition::default())
        .await
        .unwrap()
        .object
        .unwrap();
    let err = rename(&s, "a", "b", &a).await.unwrap_err();
    assert!(matches!(err, MetaError::Versioned { .. }), "{err:?}");
    assert!(s.object("b", "a").unwrap().is_some());
}

#[tokio::test]
async fn an_object_rebuilt_from_an_earlier_ones_extents_keeps_them_only_while_it_is_current() {
    let (_d, s) = setup().await;
    let first = *put(&s, "f", obj(1, 10), Precondition::default())
        .await
        .unwrap()
        .object
        .unwrap();
    // Appending: the old extent and a new one.
    let mut grown = obj(2, 4);
    grown.extents.insert(0, first.extents[0].clone());
    grown.size = 14;
    let when = Precondition {
        if_write: Some(WriteId::of(&first)),
        ..Default::default()
    };
    let r = put(&s, "f", grown.clone(), when.clone()).await.unwrap();
    assert!(
        r.freed.is_empty(),
        "the kept extent is not freed: {:?}",
        r.freed
    );
    let u = s.bucket_usage("b").unwrap();
    assert_eq!((u.bytes, u.objects), (14, 1));
    // The same rebuild again, against a write that is gone, is refused: its
    // extents may have been freed.
    let err = put(&s, "f", grown, when).await.unwrap_err();
    assert!(matches!(err, MetaError::PreconditionFailed), "{err:?}");
}
