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

/// What a rule must be to be kept: a destination that can be reached and
/// credentials that can be sent (refused now rather than failing at every
/// shipment).
fn check_rule(r: &cairn_adminapi::ReplicationRuleSpec) -> Result<(), String> {
    // (TLS to a destination is not built yet: refused, not tried and failed.)
    let url = reqwest::Url::parse(&r.endpoint).map_err(|e| format!("{}: {e}", r.endpoint))?;
    if url.scheme() != "http" {
        return Err(format!("{}: not an http:// URL", r.endpoint));
    }
    let bare = url.host_str().is_some_and(|h| !h.is_empty())
        && matches!(url.path(), "" | "/")
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !bare {
        return Err(format!(
            "{}: the endpoint is http://HOST[:PORT] only (no path, query or user)",
            r.endpoint
        ));
    }
    let name_ok = (3..=63).contains(&r.bucket.len())
        && r.bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !r.bucket.contains("..");
    if !name_ok {
        return Err(format!("{:?}: not an S3 bucket name", r.bucket));
    }
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic());
    if r.id.is_empty() || r.id.len() > 255 || !r.id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("a rule needs an id of printable characters".into());
    }
    if !token(&r.access_key) || !token(&r.secret_key) {
        return Err("the access key and secret key must be printable, without spaces".into());
    }
    let region_ok = !r.region.is_empty()
        && r.region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !region_ok {
        return Err(format!("{:?}: not a region name", r.region));
    }
    Ok(())
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
        check_rule(&r).map_err(bad)?;
        if rules.iter().any(|o: &ReplicationRule| o.id == r.id) {
            return Err(bad(format!("two rules are named {}", r.id)));
        }
        // The first rule whose prefix a key has takes it: a rule under an
        // earlier one's prefix would never take a key.
        if let Some(o) = rules.iter().find(|o| r.prefix.starts_with(&o.prefix)) {
            return Err(bad(format!(
                "rule {} (prefix {:?}) would never apply: rule {} (prefix {:?}) takes its keys first",
                r.id, r.prefix, o.id, o.prefix
            )));
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

#[cfg(test)]
mod tests {
    use super::check_rule;
    use cairn_adminapi::ReplicationRuleSpec;

    fn rule() -> ReplicationRuleSpec {
        ReplicationRuleSpec {
            id: "r".into(),
            prefix: String::new(),
            endpoint: "http://10.0.0.2:9000".into(),
            bucket: "dest".into(),
            region: "us-east-1".into(),
            access_key: "AK".into(),
            secret_key: "secret".into(),
            delete_markers: true,
        }
    }

    #[test]
    fn rules_that_could_never_ship_are_refused() {
        assert_eq!(check_rule(&rule()), Ok(()));
        let bad: [fn(&mut ReplicationRuleSpec); 9] = [
            |r| r.endpoint = "https://10.0.0.2:9000".into(),
            |r| r.endpoint = "http://".into(),
            |r| r.endpoint = "http://h/evil?x=".into(),
            |r| r.endpoint = "http://u:p@h:1".into(),
            |r| r.secret_key = String::new(),
            |r| r.access_key = "AK\r\nX-Evil: 1".into(),
            |r| r.region = String::new(),
            |r| r.bucket = "a/b/../c".into(),
            |r| r.id = String::new(),
        ];
        for f in bad {
            let mut r = rule();
            f(&mut r);
            assert!(check_rule(&r).is_err(), "{r:?}");
        }
    }
}
