//! The KV pool routes (`/v1/tenants/{tenant}/kv/pools...`, `/v1/kv/stats`),
//! behind `nodectl kv`. A pool is a bucket with KV settings (`BucketRecord::kv`):
//! made, listed and removed through the metadata log like any bucket; its RAM
//! figures are this node's.

use crate::admin::{App, Body};
use crate::cluster::{id_hex, resolve_node};
use crate::failure::Failure;
use crate::tenants::{current, find_tenant_or_root, tenant_name};
use axum::extract::{Path, State};
use axum::Json;
use cairn_adminapi::{ErrorKind, KvPoolView, KvStats, NewKvPool};
use cairn_meta::{BucketRecord, KvDurability, KvPool, Quota};
use cairn_objects::ObjectStore;

/// The pool a bucket holds: its KV settings, or the default keyspace's.
pub(crate) fn pool_of(name: &str, b: &BucketRecord) -> Option<KvPool> {
    match &b.kv {
        Some(kv) => Some(kv.clone()),
        None if name.starts_with("_resp.") => Some(KvPool {
            name: "default".into(),
            index: 0,
            ttl_ms: None,
            evict: false,
            ram_bytes: None,
            nodes: Vec::new(),
            durability: KvDurability::Durable,
        }),
        None => None,
    }
}

fn view(store: &ObjectStore, id: &str, b: &BucketRecord) -> Result<Option<KvPoolView>, Failure> {
    let bucket = cairn_meta::bucket_name(id).to_string();
    let Some(kv) = pool_of(&bucket, b) else {
        return Ok(None);
    };
    let meta = store.meta();
    let used = meta.bucket_usage(id)?;
    let ram = store.ram().group(id);
    Ok(Some(KvPoolView {
        tenant: tenant_name(meta, b.tenant),
        name: kv.name,
        index: kv.index,
        s3: !bucket.starts_with('_'),
        bucket,
        capacity: b.quota.max_bytes,
        ram_capacity: kv.ram_bytes,
        ttl_secs: kv.ttl_ms.map(|ms| (ms / 1000) as u64),
        evict: kv.evict,
        nodes: kv.nodes.iter().map(|&n| id_hex(n)).collect(),
        durability: durability_name(kv.durability).into(),
        values: used.objects,
        bytes: used.bytes,
        ram_bytes: ram.bytes,
        ram_hits: ram.hits,
        ram_misses: ram.misses,
        ram_evicted: ram.evicted,
        dropped: ram.dropped,
        bytes_in: ram.bytes_in,
        bytes_out: ram.bytes_out,
    }))
}

/// Every pool of `tenant` (all tenants: `None`), by tenant and index.
fn views(store: &ObjectStore, tenant: Option<u64>) -> Result<Vec<KvPoolView>, Failure> {
    let mut out = Vec::new();
    for (id, b) in store.meta().buckets()? {
        if tenant.is_none_or(|t| t == b.tenant) {
            out.extend(view(store, &id, &b)?);
        }
    }
    out.sort_by(|a, b| (&a.tenant, a.index).cmp(&(&b.tenant, b.index)));
    Ok(out)
}

/// `GET /v1/tenants/{tenant}/kv/pools`.
pub(crate) async fn pools(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<Vec<KvPoolView>>, Failure> {
    let store = current(&app).await?;
    let (t, _) = find_tenant_or_root(store.meta(), &named)?;
    Ok(Json(views(&store, Some(t))?))
}

fn invalid(msg: String) -> Failure {
    Failure::new(ErrorKind::Invalid, msg)
}

fn durability_name(d: KvDurability) -> &'static str {
    match d {
        KvDurability::Durable => "durable",
        KvDurability::WriteBack => "write-back",
    }
}

/// `POST /v1/tenants/{tenant}/kv/pools`.
pub(crate) async fn create(
    State(app): State<App>,
    Path(named): Path<String>,
    body: Body<NewKvPool>,
) -> Result<Json<KvPoolView>, Failure> {
    let Json(p) = body?;
    let ok_name = (1..=32).contains(&p.name.len())
        && p.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b))
        && p.name != "default";
    if !ok_name {
        return Err(invalid(format!(
            "invalid pool name {:?}: 1 to 32 of a-z, 0-9, '-', '_' (and not 'default')",
            p.name
        )));
    }
    if let Some(b) = &p.s3_bucket {
        let ok_bucket = (3..=63).contains(&b.len())
            && b.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-.".contains(&c))
            && b.as_bytes()[0].is_ascii_alphanumeric();
        if !ok_bucket {
            return Err(invalid(format!("invalid S3 bucket name {b:?}")));
        }
    }
    let durability = match p.durability.as_str() {
        "write-back" => KvDurability::WriteBack,
        "durable" => KvDurability::Durable,
        d => {
            return Err(invalid(format!(
                "invalid durability {d:?}: write-back or durable"
            )))
        }
    };
    let map = app.cluster_map();
    let mut nodes = Vec::new();
    for n in &p.nodes {
        let id = resolve_node(&map, n).map_err(|e| invalid(e.to_string()))?;
        if !nodes.contains(&id) {
            nodes.push(id);
        }
    }
    nodes.sort_unstable();
    if p.capacity == Some(0) || p.ttl_secs == Some(0) || p.ram == Some(0) {
        return Err(invalid("capacity, ram and ttl must be more than 0".into()));
    }
    // A hundred years: beyond it an expiry in ms would overflow what is kept.
    if p.ttl_secs.is_some_and(|t| t > 100 * 365 * 86_400) {
        return Err(invalid("ttl is at most 100 years (3153600000 s)".into()));
    }
    let store = current(&app).await?;
    let (t, _) = find_tenant_or_root(store.meta(), &named)?;
    let existing = views(&store, Some(t))?;
    if existing.iter().any(|v| v.name == p.name) {
        return Err(Failure::new(
            ErrorKind::Conflict,
            format!("pool {} exists", p.name),
        ));
    }
    let index = match p.index {
        Some(0) => return Err(invalid("index 0 is the tenant's default keyspace".into())),
        Some(i) if existing.iter().any(|v| v.index == i) => {
            return Err(Failure::new(
                ErrorKind::Conflict,
                format!("index {i} is taken"),
            ))
        }
        Some(i) => i,
        None => (1..)
            .find(|i| existing.iter().all(|v| v.index != *i))
            .unwrap_or(1),
    };
    let bucket = p.s3_bucket.clone().unwrap_or(format!("_kv.{}", p.name));
    let record = BucketRecord {
        tenant: t,
        created_ms: cairn_meta::now_ms(),
        location: None,
        quota: Quota {
            max_bytes: p.capacity,
            max_objects: None,
        },
        kv: Some(KvPool {
            name: p.name.clone(),
            index,
            ttl_ms: p.ttl_secs.map(|s| s.saturating_mul(1000) as i64),
            evict: p.evict,
            ram_bytes: p.ram,
            nodes,
            durability,
        }),
        ..Default::default()
    };
    store.create_bucket_as(t, &bucket, record).await?;
    let id = cairn_meta::bucket_id(t, &bucket);
    let b = store
        .meta()
        .bucket(&id)?
        .ok_or_else(|| Failure::new(ErrorKind::Internal, "the pool's bucket vanished"))?;
    view(&store, &id, &b)?
        .map(Json)
        .ok_or_else(|| Failure::new(ErrorKind::Internal, "not a pool"))
}

/// `DELETE /v1/tenants/{tenant}/kv/pools/{pool}`: its values, then its bucket.
pub(crate) async fn delete(
    State(app): State<App>,
    Path((named, pool)): Path<(String, String)>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (t, _) = find_tenant_or_root(store.meta(), &named)?;
    let found = views(&store, Some(t))?
        .into_iter()
        .find(|v| v.name == pool && v.index != 0)
        .ok_or_else(|| Failure::new(ErrorKind::NotFound, format!("no such pool: {pool}")))?;
    loop {
        let page = store
            .list_objects(t, &found.bucket, "", None, None, 1000)
            .await?;
        if page.objects.is_empty() {
            break;
        }
        for (key, _) in page.objects {
            store
                .delete_object(t, &found.bucket, &key, Default::default())
                .await?;
        }
    }
    store.delete_bucket(t, &found.bucket).await?;
    Ok(Json(true))
}

/// `GET /v1/kv/stats`.
pub(crate) async fn stats(State(app): State<App>) -> Result<Json<KvStats>, Failure> {
    let store = current(&app).await?;
    let ram = store.ram();
    let c = ram.counters();
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Json(KvStats {
        ram_capacity: ram.capacity(),
        ram_bytes: ram.bytes(),
        ram_bytes_out: get(&c.bytes_out),
        ram_bytes_in: get(&c.bytes_in),
        pools: views(&store, None)?,
    }))
}
