//! The admin API's bucket snapshots: made, listed and deleted by operators (a
//! snapshot's kept versions count in no quota, so tenants do not make their
//! own); read by the bucket's tenant through S3 under `.snapshot/NAME/`.

use crate::admin::{App, Body};
use crate::failure::Failure;
use crate::tenants::{current, find_tenant_or_root};
use axum::extract::{Path, State};
use axum::Json;
use cairn_adminapi::{NewSnapshot, SnapshotView, SnapshotsView};
use cairn_meta::Snapshot;

fn view(name: &str, s: &Snapshot) -> SnapshotView {
    SnapshotView {
        name: name.to_string(),
        created_ms: s.created_ms,
        seq: s.seq,
        prefix: format!("{}{name}/", cairn_objects::SNAPSHOT_DIR),
    }
}

/// `GET /v1/tenants/{tenant}/buckets/{bucket}/snapshots`.
pub(crate) async fn list(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
) -> Result<Json<SnapshotsView>, Failure> {
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    let (snaps, (kept_versions, kept_bytes)) = store.snapshots(tenant, &bucket).await?;
    let mut snapshots: Vec<SnapshotView> = snaps.iter().map(|(n, s)| view(n, s)).collect();
    snapshots.sort_by_key(|s| s.seq);
    Ok(Json(SnapshotsView {
        bucket,
        snapshots,
        kept_versions,
        kept_bytes,
    }))
}

/// `POST /v1/tenants/{tenant}/buckets/{bucket}/snapshots`.
pub(crate) async fn create(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
    body: Body<NewSnapshot>,
) -> Result<Json<SnapshotView>, Failure> {
    let Json(new) = body?;
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    let s = store.create_snapshot(tenant, &bucket, &new.name).await?;
    Ok(Json(view(&new.name, &s)))
}

/// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/snapshots/{snapshot}`.
pub(crate) async fn delete(
    State(app): State<App>,
    Path((named, bucket, name)): Path<(String, String, String)>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    store.delete_snapshot(tenant, &bucket, &name).await?;
    Ok(Json(true))
}
