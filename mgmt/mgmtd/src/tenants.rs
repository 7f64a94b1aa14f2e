//! The tenant routes (`/v1/tenants...`, `/v1/keys/...`), behind `nodectl tenant`,
//! `nodectl user` and `nodectl key`: tenants, their users with roles, and the
//! users' access keys. Every change goes through the metadata log, so it holds
//! on every node once answered; reads follow a read barrier.

use crate::admin::{App, Body};
use crate::failure::Failure;
use axum::extract::{Path, Query, State};
use axum::Json;
use cairn_adminapi::{
    BucketView, DeleteTenant, ErrorKind, ExportSpec, ExportView, KeyView, NewKey, NewTenant,
    NewUser, QosFigures, QosSpec, QuotaSpec, SetDisabled, TenantView, UserView, NOBODY,
};
use cairn_meta::{
    BucketChange, IdentityChange, KeyRecord, MetaStore, NfsExport, Quota, Role, TenantRecord,
    UserRecord, ROOT_TENANT,
};
use cairn_objects::ObjectStore;
use rand::distr::{Alphanumeric, SampleString};
use std::sync::Arc;

/// Names of tenants and users: what S3 and the CLI can carry unquoted.
fn check_name(what: &str, name: &str) -> Result<(), Failure> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(Failure::new(
            ErrorKind::Invalid,
            format!("invalid {what} name {name:?}: 1 to 64 letters, digits, '-', '_', '.', '@', starting with a letter or digit"),
        ))
    }
}

/// The store, made current (a read barrier), for a consistent read.
pub(crate) async fn current(app: &App) -> Result<Arc<ObjectStore>, Failure> {
    let store = app.store()?;
    store.sync().await?;
    Ok(store)
}

/// The tenant a path names: by name, else by hex id.
pub(crate) fn find_tenant(meta: &MetaStore, named: &str) -> Result<(u64, TenantRecord), Failure> {
    if let Some(t) = meta.tenant_named(named)? {
        return Ok(t);
    }
    if let Ok(id) = u64::from_str_radix(named, 16) {
        if let Some(t) = meta.tenant(id)? {
            return Ok((id, t));
        }
    }
    Err(Failure::new(
        ErrorKind::NotFound,
        format!("no such tenant: {named}"),
    ))
}

/// The tenant a path names, and its name: by name or hex id, and `root` for
/// the root key's (no tenant may be named `root`).
pub(crate) fn find_tenant_or_root(meta: &MetaStore, named: &str) -> Result<(u64, String), Failure> {
    if named == "root" {
        return Ok((ROOT_TENANT, "root".into()));
    }
    let (id, t) = find_tenant(meta, named)?;
    Ok((id, t.name))
}

/// How the API names tenant `id`: its name, `root` for the root key's, its hex
/// id if it is gone.
pub(crate) fn tenant_name(meta: &MetaStore, id: u64) -> String {
    match meta.tenant(id) {
        _ if id == ROOT_TENANT => "root".into(),
        Ok(Some(t)) => t.name,
        _ => format!("{id:016x}"),
    }
}

fn spec(q: Quota) -> QuotaSpec {
    QuotaSpec {
        max_bytes: q.max_bytes,
        max_objects: q.max_objects,
    }
}

fn quota(q: QuotaSpec) -> Quota {
    Quota {
        max_bytes: q.max_bytes,
        max_objects: q.max_objects,
    }
}

fn qos_spec(q: cairn_qos::Limits) -> QosSpec {
    QosSpec {
        weight: q.weight,
        read_bytes_per_sec: q.read_bytes_per_sec,
        write_bytes_per_sec: q.write_bytes_per_sec,
        read_requests_per_sec: q.read_requests_per_sec,
        write_requests_per_sec: q.write_requests_per_sec,
    }
}

fn qos_limits(q: QosSpec) -> Result<cairn_qos::Limits, Failure> {
    let rates = [
        q.read_bytes_per_sec,
        q.write_bytes_per_sec,
        q.read_requests_per_sec,
        q.write_requests_per_sec,
    ];
    // A stripe (up to 8 MiB) is taken whole from its tenant's byte rate: below
    // 1 MiB/s one stripe would hold the tenant's next request for many seconds.
    let bytes_too_low = [q.read_bytes_per_sec, q.write_bytes_per_sec]
        .iter()
        .any(|r| r.is_some_and(|r| r < 1 << 20));
    if q.weight == Some(0)
        || q.weight.is_some_and(|w| w > 10_000)
        || rates.contains(&Some(0))
        || bytes_too_low
    {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a weight is 1 to 10000, a request rate at least 1 a second, a byte rate at \
             least 1 MiB a second (null lifts a limit)",
        ));
    }
    Ok(cairn_qos::Limits {
        weight: q.weight,
        read_bytes_per_sec: q.read_bytes_per_sec,
        write_bytes_per_sec: q.write_bytes_per_sec,
        read_requests_per_sec: q.read_requests_per_sec,
        write_requests_per_sec: q.write_requests_per_sec,
    })
}

fn tenant_view(store: &ObjectStore, id: u64, t: TenantRecord) -> Result<TenantView, Failure> {
    let meta = store.meta();
    let here = store
        .qos()
        .stats()
        .into_iter()
        .find(|(t, _)| *t == id)
        .map(|(_, s)| QosFigures {
            busy: s.busy,
            waiting: s.waiting,
            queued: s.queued,
            slowed_down: s.slowed_down,
            shaped_ms: s.shaped_ms,
        })
        .unwrap_or_default();
    let buckets = meta
        .buckets()?
        .iter()
        .filter(|(_, b)| b.tenant == id)
        .count();
    let usage = meta.tenant_usage(id)?;
    Ok(TenantView {
        bytes: usage.bytes,
        objects: usage.objects,
        quota: spec(t.quota),
        qos: qos_spec(t.qos),
        qos_here: here,
        id: format!("{id:016x}"),
        name: t.name,
        created_ms: t.created_ms,
        disabled: t.disabled,
        key_id: meta.tenant_key(id)?.map(|k| k.key_id),
        users: meta.users(id)?.len(),
        keys: meta.access_keys(id, None)?.len(),
        buckets,
    })
}

fn user_view(
    meta: &MetaStore,
    tenant: u64,
    name: &str,
    u: UserRecord,
) -> Result<UserView, Failure> {
    Ok(UserView {
        name: name.to_string(),
        role: u.role.as_str().to_string(),
        created_ms: u.created_ms,
        disabled: u.disabled,
        keys: meta.access_keys(tenant, Some(name))?.len(),
    })
}

/// `GET /v1/tenants`.
pub(crate) async fn list(State(app): State<App>) -> Result<Json<Vec<TenantView>>, Failure> {
    let store = current(&app).await?;
    let mut out = Vec::new();
    for (id, t) in store.meta().tenants()? {
        out.push(tenant_view(&store, id, t)?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(out))
}

/// `POST /v1/tenants`.
pub(crate) async fn create(
    State(app): State<App>,
    body: Body<NewTenant>,
) -> Result<Json<TenantView>, Failure> {
    let Json(req) = body?;
    check_name("tenant", &req.name)?;
    // `root` names the root key's own namespace in the API's paths (its KV
    // pools): a tenant of that name would be reached as the root.
    if req.name.eq_ignore_ascii_case("root") {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "invalid tenant name \"root\": it names the root key's own namespace",
        ));
    }
    // Paths name tenants by name or by id: a name that reads as an id would let
    // one tenant's name shadow another's id.
    if req.name.len() == 16 && req.name.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Failure::new(
            ErrorKind::Invalid,
            format!(
                "invalid tenant name {:?}: 16 hex digits is how tenant ids are written",
                req.name
            ),
        ));
    }
    let store = app.store()?;
    // Random, so that ids never repeat after a delete (an old key or bucket
    // record can never name a new tenant); 0 and the root's are reserved.
    let id = loop {
        let id = rand::random::<u64>();
        if id > cairn_meta::ROOT_TENANT {
            break id;
        }
    };
    let record = TenantRecord {
        name: req.name,
        created_ms: cairn_meta::now_ms(),
        disabled: false,
        quota: Default::default(),
        qos: Default::default(),
    };
    let key = match req.encrypted {
        true => Some(store.new_tenant_key(id)?),
        false => None,
    };
    store
        .change_identity(IdentityChange::CreateTenant {
            id,
            record: record.clone(),
            key,
        })
        .await?;
    Ok(Json(tenant_view(&store, id, record)?))
}

/// `GET /v1/tenants/{tenant}`.
pub(crate) async fn show(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<TenantView>, Failure> {
    let store = current(&app).await?;
    let (id, t) = find_tenant(store.meta(), &named)?;
    Ok(Json(tenant_view(&store, id, t)?))
}

/// `PATCH /v1/tenants/{tenant}`: enable or disable.
pub(crate) async fn set_disabled(
    State(app): State<App>,
    Path(named): Path<String>,
    body: Body<SetDisabled>,
) -> Result<Json<TenantView>, Failure> {
    let Json(req) = body?;
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::SetTenantDisabled {
            id,
            disabled: req.disabled,
        })
        .await?;
    let (id, t) = find_tenant(store.meta(), &named)?;
    Ok(Json(tenant_view(&store, id, t)?))
}

/// `DELETE /v1/tenants/{tenant}`.
pub(crate) async fn delete(
    State(app): State<App>,
    Path(named): Path<String>,
    Query(q): Query<DeleteTenant>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::DeleteTenant { id, purge: q.purge })
        .await?;
    Ok(Json(true))
}

/// `GET /v1/tenants/{tenant}/users`.
pub(crate) async fn users(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<Vec<UserView>>, Failure> {
    let store = current(&app).await?;
    let meta = store.meta();
    let (id, _) = find_tenant(meta, &named)?;
    let mut out = Vec::new();
    for (name, u) in meta.users(id)? {
        out.push(user_view(meta, id, &name, u)?);
    }
    Ok(Json(out))
}

/// `POST /v1/tenants/{tenant}/users`.
pub(crate) async fn create_user(
    State(app): State<App>,
    Path(named): Path<String>,
    body: Body<NewUser>,
) -> Result<Json<UserView>, Failure> {
    let Json(req) = body?;
    check_name("user", &req.name)?;
    let role = Role::parse(&req.role).ok_or_else(|| {
        Failure::new(
            ErrorKind::Invalid,
            format!(
                "unknown role {:?}: admin, read-write or read-only",
                req.role
            ),
        )
    })?;
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    let record = UserRecord {
        role,
        created_ms: cairn_meta::now_ms(),
        disabled: false,
    };
    store
        .change_identity(IdentityChange::CreateUser {
            tenant: id,
            name: req.name.clone(),
            record: record.clone(),
        })
        .await?;
    Ok(Json(user_view(store.meta(), id, &req.name, record)?))
}

/// `PATCH /v1/tenants/{tenant}/users/{user}`: enable or disable.
pub(crate) async fn set_user_disabled(
    State(app): State<App>,
    Path((named, user)): Path<(String, String)>,
    body: Body<SetDisabled>,
) -> Result<Json<UserView>, Failure> {
    let Json(req) = body?;
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::SetUserDisabled {
            tenant: id,
            name: user.clone(),
            disabled: req.disabled,
        })
        .await?;
    let u = store
        .meta()
        .user(id, &user)?
        .ok_or_else(|| Failure::new(ErrorKind::NotFound, format!("no such user: {user}")))?;
    Ok(Json(user_view(store.meta(), id, &user, u)?))
}

/// `DELETE /v1/tenants/{tenant}/users/{user}`.
pub(crate) async fn delete_user(
    State(app): State<App>,
    Path((named, user)): Path<(String, String)>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::DeleteUser {
            tenant: id,
            name: user,
        })
        .await?;
    Ok(Json(true))
}

/// `POST /v1/tenants/{tenant}/users/{user}/keys`: a new key pair; the secret is
/// in this answer and nowhere else the API shows.
pub(crate) async fn create_key(
    State(app): State<App>,
    Path((named, user)): Path<(String, String)>,
) -> Result<Json<NewKey>, Failure> {
    let store = current(&app).await?;
    let (id, t) = find_tenant(store.meta(), &named)?;
    // AWS's shapes: 20 upper-case characters, a 40-character secret.
    let (access_key, secret_key) = {
        let mut rng = rand::rng();
        (
            format!(
                "CK{}",
                Alphanumeric
                    .sample_string(&mut rng, 18)
                    .to_ascii_uppercase()
            ),
            Alphanumeric.sample_string(&mut rng, 40),
        )
    };
    store
        .change_identity(IdentityChange::CreateKey {
            access_key: access_key.clone(),
            record: KeyRecord {
                tenant: id,
                user: user.clone(),
                secret: String::new(),
                sealed_secret: store.seal_secret(&access_key, &secret_key)?,
                created_ms: cairn_meta::now_ms(),
            },
        })
        .await?;
    Ok(Json(NewKey {
        access_key,
        secret_key,
        tenant: t.name,
        user,
    }))
}

/// `GET /v1/tenants/{tenant}/keys`.
pub(crate) async fn keys(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<Vec<KeyView>>, Failure> {
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    let out = store
        .meta()
        .access_keys(id, None)?
        .into_iter()
        .map(|(access_key, k)| KeyView {
            access_key,
            user: k.user,
            created_ms: k.created_ms,
        })
        .collect();
    Ok(Json(out))
}

/// `DELETE /v1/keys/{access_key}`.
pub(crate) async fn revoke_key(
    State(app): State<App>,
    Path(access_key): Path<String>,
) -> Result<Json<bool>, Failure> {
    let store = app.store()?;
    store
        .change_identity(IdentityChange::DeleteKey { access_key })
        .await?;
    Ok(Json(true))
}

/// `PUT /v1/tenants/{tenant}/quota`.
pub(crate) async fn set_quota(
    State(app): State<App>,
    Path(named): Path<String>,
    body: Body<QuotaSpec>,
) -> Result<Json<TenantView>, Failure> {
    let Json(q) = body?;
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::SetTenantQuota {
            id,
            quota: quota(q),
        })
        .await?;
    let (id, t) = find_tenant(store.meta(), &named)?;
    Ok(Json(tenant_view(&store, id, t)?))
}

/// `PUT /v1/tenants/{tenant}/qos`.
pub(crate) async fn set_qos(
    State(app): State<App>,
    Path(named): Path<String>,
    body: Body<QosSpec>,
) -> Result<Json<TenantView>, Failure> {
    let Json(q) = body?;
    let qos = qos_limits(q)?;
    let store = current(&app).await?;
    let (id, _) = find_tenant(store.meta(), &named)?;
    store
        .change_identity(IdentityChange::SetTenantQos { id, qos })
        .await?;
    store.qos().reread(id);
    let (id, t) = find_tenant(store.meta(), &named)?;
    Ok(Json(tenant_view(&store, id, t)?))
}

fn bucket_view(
    meta: &MetaStore,
    id: &str,
    b: &cairn_meta::BucketRecord,
) -> Result<BucketView, Failure> {
    let u = meta.bucket_usage(id)?;
    Ok(BucketView {
        name: cairn_meta::bucket_name(id).to_string(),
        created_ms: b.created_ms,
        bytes: u.bytes,
        objects: u.objects,
        quota: spec(b.quota),
    })
}

/// `GET /v1/tenants/{tenant}/buckets`.
pub(crate) async fn buckets(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<Vec<BucketView>>, Failure> {
    let store = current(&app).await?;
    let meta = store.meta();
    let (tenant, _) = find_tenant_or_root(meta, &named)?;
    let mut out = Vec::new();
    for (id, b) in meta.buckets()? {
        if b.tenant == tenant {
            out.push(bucket_view(meta, &id, &b)?);
        }
    }
    Ok(Json(out))
}

/// `PUT /v1/tenants/{tenant}/buckets/{bucket}/quota`.
pub(crate) async fn set_bucket_quota(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
    body: Body<QuotaSpec>,
) -> Result<Json<BucketView>, Failure> {
    let Json(q) = body?;
    let store = current(&app).await?;
    // The root key's buckets (`root`) take quotas too: an NFS client could
    // otherwise grow a sparse file in one without bound.
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    store.set_bucket_quota(tenant, &bucket, quota(q)).await?;
    let id = cairn_meta::bucket_id(tenant, &bucket);
    let b = store
        .meta()
        .bucket(&id)?
        .ok_or_else(|| Failure::new(ErrorKind::NotFound, format!("no such bucket: {bucket}")))?;
    Ok(Json(bucket_view(store.meta(), &id, &b)?))
}

/// One client network of an export in CIDR form: a network (its host bits
/// cleared, `10.1.2.3/8` is `10.0.0.0/8`), or one address (`/32`, `/128`).
fn client_network(given: &str) -> Result<String, Failure> {
    let s = given.trim();
    let net = match s.parse::<ipnet::IpNet>() {
        Ok(n) => n.trunc(),
        Err(_) => match s.parse::<std::net::IpAddr>() {
            Ok(a) => ipnet::IpNet::from(a),
            Err(_) => {
                return Err(Failure::new(
                    ErrorKind::Invalid,
                    format!(
                        "{given:?} is not a client network: a CIDR network (10.0.0.0/8, \
                         fd00::/64) or one address"
                    ),
                ))
            }
        },
    };
    Ok(net.to_string())
}

/// The export a spec asks for, its clients in CIDR form (each once).
fn nfs_export(spec: ExportSpec) -> Result<NfsExport, Failure> {
    if spec.clients.is_empty() {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "an export needs at least one client network (10.0.0.0/8, 192.0.2.7)",
        ));
    }
    let mut clients: Vec<String> = Vec::with_capacity(spec.clients.len());
    for c in &spec.clients {
        let net = client_network(c)?;
        if !clients.contains(&net) {
            clients.push(net);
        }
    }
    Ok(NfsExport {
        clients,
        uid: spec.uid.unwrap_or(NOBODY),
        gid: spec.gid.unwrap_or(NOBODY),
        read_only: spec.read_only,
    })
}

fn export_view(tenant: &str, bucket: &str, e: &NfsExport) -> ExportView {
    ExportView {
        tenant: tenant.to_string(),
        bucket: bucket.to_string(),
        path: format!("/{tenant}/{bucket}"),
        clients: e.clients.clone(),
        uid: e.uid,
        gid: e.gid,
        read_only: e.read_only,
    }
}

/// `GET /v1/exports`: every tenant's NFS exports, by path.
pub(crate) async fn exports(State(app): State<App>) -> Result<Json<Vec<ExportView>>, Failure> {
    let store = current(&app).await?;
    let meta = store.meta();
    let mut names = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (id, b) in meta.buckets()? {
        let Some(e) = &b.nfs else { continue };
        let tenant = names
            .entry(b.tenant)
            .or_insert_with(|| tenant_name(meta, b.tenant));
        out.push(export_view(tenant, cairn_meta::bucket_name(&id), e));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Json(out))
}

/// `PUT /v1/tenants/{tenant}/buckets/{bucket}/export`: the bucket exported over
/// NFS (its export replaced).
pub(crate) async fn set_export(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
    body: Body<ExportSpec>,
) -> Result<Json<ExportView>, Failure> {
    let Json(spec) = body?;
    let export = nfs_export(spec)?;
    let store = current(&app).await?;
    let (tenant, name) = find_tenant_or_root(store.meta(), &named)?;
    let id = cairn_meta::bucket_id(tenant, &bucket);
    let b = store
        .meta()
        .bucket(&id)?
        .ok_or_else(|| Failure::new(ErrorKind::NotFound, format!("no such bucket: {bucket}")))?;
    // A pool's values are not files: its keys are RESP's, its objects expire.
    if crate::kv::pool_of(&bucket, &b).is_some() {
        return Err(Failure::new(
            ErrorKind::Invalid,
            format!("bucket {bucket} holds a KV pool's values: it cannot be exported over NFS"),
        ));
    }
    let view = export_view(&name, &bucket, &export);
    store
        .change_bucket(tenant, &bucket, BucketChange::Nfs(Some(export)))
        .await?;
    Ok(Json(view))
}

/// `DELETE /v1/tenants/{tenant}/buckets/{bucket}/export`: not exported any more
/// (also when it was not).
pub(crate) async fn remove_export(
    State(app): State<App>,
    Path((named, bucket)): Path<(String, String)>,
) -> Result<Json<bool>, Failure> {
    let store = current(&app).await?;
    let (tenant, _) = find_tenant_or_root(store.meta(), &named)?;
    let b = store
        .meta()
        .bucket(&cairn_meta::bucket_id(tenant, &bucket))?
        .ok_or_else(|| Failure::new(ErrorKind::NotFound, format!("no such bucket: {bucket}")))?;
    if b.nfs.is_some() {
        store
            .change_bucket(tenant, &bucket, BucketChange::Nfs(None))
            .await?;
    }
    Ok(Json(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_stored_as_networks() {
        for (given, stored) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            (" 10.1.2.3/8 ", "10.0.0.0/8"),
            ("127.0.0.1", "127.0.0.1/32"),
            ("::1", "::1/128"),
            ("fd00::1/64", "fd00::/64"),
            ("0.0.0.0/0", "0.0.0.0/0"),
        ] {
            assert_eq!(client_network(given).unwrap(), stored, "{given}");
        }
        for bad in [
            "10.0.0.0/33",
            "nonsense",
            "",
            "10.0.0/8",
            "::1/129",
            "host.example",
        ] {
            let f = client_network(bad).unwrap_err();
            assert_eq!(f.kind(), ErrorKind::Invalid, "{bad}");
        }
    }

    #[test]
    fn an_export_needs_a_client_and_owns_as_nobody_by_default() {
        let spec = |clients: &[&str]| ExportSpec {
            clients: clients.iter().map(|c| c.to_string()).collect(),
            uid: None,
            gid: Some(100),
            read_only: true,
        };
        assert_eq!(
            nfs_export(spec(&[])).unwrap_err().kind(),
            ErrorKind::Invalid
        );
        let e = nfs_export(spec(&["10.0.0.0/8", "10.9.9.9/8", "192.0.2.7"])).unwrap();
        assert_eq!(e.clients, ["10.0.0.0/8", "192.0.2.7/32"]);
        assert_eq!((e.uid, e.gid, e.read_only), (NOBODY, 100, true));
    }
}
