//! The admin API's bucket replication: rules set and removed by admins (they
//! name where a tenant's data goes and with whose credentials), the backlog and
//! what was shipped shown to readers. The shipping is `cairn_replication`'s.

use crate::admin::{App, Body};
use crate::failure::Failure;
use crate::tenants::{current, find_tenant_or_root};
use axum::extract::{Path, State};
use axum::Json;
use cairn_adminapi::{ReplicationRuleView, ReplicationSpec, ReplicationView};
use cairn_meta::{Replication, ReplicationRule, ReplicationTarget};

async fn view(app: &App, named: &str, bucket: &str) -> Result<ReplicationView, Failure> {
    let store = current(app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), named)?;
    let (rules, status) = store.replication(tenant, bucket).await?;
    let rules = rules.map(|r| r.rules).unwrap_or_default();
    let now = cairn_meta::now_ms();
    Ok(ReplicationView {
        bucket: bucket.to_string(),
        rules: rules
            .into_iter()
            .map(|r| ReplicationRuleView {
                id: r.id,
                prefix: r.prefix,
                endpoint: r.target.endpoint,
                bucket: r.target.bucket,
                region: r.target.region,
                access_key: r.target.access_key,
                delete_markers: r.delete_markers,
            })
            .collect(),
        backlog: status.backlog,
        backlog_bytes: status.backlog_bytes,
        lag_ms: status.oldest_ms.map_or(0, |o| (now - o).max(0) as u64),
        failing: status.failing,
        last_error: status.last_error,
        shipped_versions: status.shipped.versions,
        shipped_bytes: status.shipped.bytes,
        rate_bps: status.shipped.rate_bps,
        last_shipped_ms: status.shipped.last_ms,
    })
}

/// `GET /v1/tenants/{tenant}/buckets/{bucket}/replication`.
pub(crate) async fn show(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
) -> Result<Json<ReplicationView>, Failure> {
    Ok(Json(view(&app, &named, &bucket).await?))
}

/// `PUT /v1/tenants/{tenant}/buckets/{bucket}/replication`.
pub(crate) async fn set(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
    body: Body<ReplicationSpec>,
) -> Result<Json<ReplicationView>, Failure> {
    let Json(spec) = body?;
    let bad = |why: String| Failure::new(cairn_adminapi::ErrorKind::Invalid, why);
    if spec.rules.is_empty() {
        return Err(bad("a replication configuration needs a rule".into()));
    }
    let mut rules = Vec::new();
    for r in spec.rules {
        if !(r.endpoint.starts_with("http://") || r.endpoint.starts_with("https://")) {
            return Err(bad(format!(
                "{}: not an http:// or https:// URL",
                r.endpoint
            )));
        }
        if r.id.is_empty() || r.bucket.is_empty() || r.access_key.is_empty() {
            return Err(bad("a rule needs an id, a bucket and an access key".into()));
        }
        if rules.iter().any(|o: &ReplicationRule| o.id == r.id) {
            return Err(bad(format!("two rules are named {}", r.id)));
        }
        rules.push(ReplicationRule {
            id: r.id,
            prefix: r.prefix,
            delete_markers: r.delete_markers,
            target: ReplicationTarget {
                endpoint: r.endpoint,
                bucket: r.bucket,
                region: r.region,
                access_key: r.access_key,
                // Wrapped by the store before it is kept.
                sealed_secret: r.secret_key,
            },
        });
    }
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    let r = Replication {
        rules,
        since_seq: 0,
    };
    store.set_replication(tenant, &bucket, Some(r)).await?;
    Ok(Json(view(&app, &named, &bucket).await?))
}

/// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/replication`.
pub(crate) async fn remove(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    store.set_replication(tenant, &bucket, None).await?;
    Ok(Json(true))
}
