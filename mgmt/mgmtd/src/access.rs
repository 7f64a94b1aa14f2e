//! Authentication, authorization and audit of the admin API, as one layer in
//! front of every route: the request is resolved to its [`Action`] (cairn-adminapi
//! lists them all, with the role each needs), the bearer token to a
//! [`Principal`], and only a principal whose role suffices reaches the handler.
//! Every mutating call, allowed or refused, is audited: a log line (target
//! `cairn_audit`) and an entry in the cluster's bounded audit table (refusals
//! folded, see [`crate::audit`]).
//!
//! Tokens: the node's own (`admin.token` in its state directory, role admin,
//! shown as `local`), and tokens made through the API, `cairn_<id>_<secret>`,
//! of which the cluster keeps the SHA-256 of the secret only.

use crate::admin::{App, Body};
use crate::failure::Failure;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use cairn_adminapi::{
    routes, Action, AdminTokenView, AuditEntry, AuditQuery, CreatedAdminToken, ErrorKind,
    NewAdminToken, Role,
};
use cairn_meta::{AdminChange, AdminTokenRecord, AUDIT_KEEP};
use sha2::{Digest, Sha256};

/// Who is calling, once authenticated.
#[derive(Clone, Debug)]
pub(crate) struct Principal {
    pub who: String,
    pub role: Role,
    /// A tenant's token: its role holds within that tenant only.
    pub tenant: Option<u64>,
}

/// Tokens the SSH console minted for its sessions, each standing for the
/// session's key and role while it lasts (in memory: a session ends with the
/// process).
/// Also where the console reads the keys added through the API.
#[derive(Debug)]
pub(crate) struct SessionTokens {
    tokens: std::sync::Mutex<std::collections::HashMap<String, Principal>>,
    meta: cairn_meta::MetaStore,
}

impl SessionTokens {
    pub(crate) fn new(meta: cairn_meta::MetaStore) -> SessionTokens {
        SessionTokens {
            tokens: Default::default(),
            meta,
        }
    }

    fn get(&self, token: &str) -> Option<Principal> {
        let map = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .find(|(t, _)| same(t.as_bytes(), token.as_bytes()))
            .map(|(_, p)| p.clone())
    }
}

impl cairn_console::Sessions for SessionTokens {
    fn open(&self, who: String, role: Role) -> String {
        let token = format!("session_{}", hex::encode(rand::random::<[u8; 32]>()));
        let mut map = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        map.insert(
            token.clone(),
            Principal {
                who,
                role,
                tenant: None,
            },
        );
        token
    }

    fn close(&self, token: &str) {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token);
    }

    fn keys(&self) -> Vec<String> {
        match self.meta.ssh_keys() {
            Ok(keys) => keys
                .into_iter()
                .map(|(_, k)| format!("role={} {} {}", k.role.name(), k.public_key, k.name))
                .collect(),
            Err(e) => {
                tracing::warn!("SSH keys added through the API unreadable: {e}");
                Vec::new()
            }
        }
    }
}

/// The layer (an axum route layer: it runs once the route is matched).
pub(crate) async fn guard(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_default();
    if route == routes::HEALTHZ {
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    // HEAD is a GET without its body (axum serves it with the GET handler).
    let method = match req.method().as_str() {
        "HEAD" => "GET",
        m => m,
    };
    let Some(action) = Action::of(method, &route) else {
        // A method the route does not serve (PUT on a GET route, OPTIONS,
        // TRACE), or a route missing from the table: never let through
        // unchecked, and not the server's error to log.
        return Failure::new(
            ErrorKind::NotFound,
            format!("no such action: {} {route}", req.method()),
        )
        .into_response();
    };
    let cert = req
        .extensions()
        .get::<crate::certs::PeerCert>()
        .and_then(|c| c.0.clone());
    let principal = match authenticate(&app, req.headers(), !action.mutates(), cert) {
        Ok(p) => p,
        Err(f) => {
            if action.mutates() && app.refusals().log_now("unauthenticated", action) {
                tracing::warn!(target: "cairn_audit", action = %action.name(), path = %cut(&path), "admin call refused: not authenticated (once a minute per action)");
            }
            let mut resp = f.into_response();
            if !action.mutates() {
                // A browser asks for a user and password: the token is the password.
                resp.headers_mut().insert(
                    axum::http::header::WWW_AUTHENTICATE,
                    axum::http::HeaderValue::from_static(
                        "Basic realm=\"Cairn admin (any user, an admin token as password)\", charset=\"UTF-8\"",
                    ),
                );
            }
            return resp;
        }
    };
    let out_of_scope = match principal.tenant {
        Some(t) => out_of_tenant(&app, &req, action, t),
        None => None,
    };
    let resp = if let Some(why) = out_of_scope {
        Failure::new(
            ErrorKind::Forbidden,
            format!("{} may not {}: {why}", principal.who, action.name()),
        )
        .into_response()
    } else if principal.role < action.role() {
        Failure::new(
            ErrorKind::Forbidden,
            format!(
                "{} (role {}) may not {}: it needs the {} role",
                principal.who,
                principal.role,
                action.name(),
                action.role()
            ),
        )
        .into_response()
    } else {
        req.extensions_mut().insert(principal.clone());
        next.run(req).await
    };
    if action.mutates() {
        crate::audit::record(&app, &principal, action, path, resp.status().as_u16());
    } else if resp.status() == axum::http::StatusCode::FORBIDDEN
        && app.refusals().log_now(&principal.who, action)
    {
        // A refused read goes to the log (not the table: reads never do), once
        // a minute per caller and action.
        tracing::warn!(target: "cairn_audit", who = %principal.who, action = %action.name(), path = %cut(&path), "admin read refused (once a minute per caller and action)");
    }
    resp
}

/// Why a tenant's token may not take this request (none: it may): only the
/// tenant-scoped actions, and only on its own tenant.
fn out_of_tenant(app: &App, req: &Request, action: Action, tenant: u64) -> Option<String> {
    if !action.tenant_scoped() {
        return Some("a tenant's token acts only within its tenant".into());
    }
    let Ok(store) = app.store() else {
        return Some("the node is not serving yet".into());
    };
    let meta = store.meta();
    // The route's `{tenant}` (a name or an id), or the tenant of the access key
    // `/v1/keys/{access_key}` names.
    let path = req.uri().path();
    let segment = |after: &str| -> Option<String> {
        let rest = path.strip_prefix(after)?;
        let seg = rest.split('/').next()?;
        Some(
            percent_encoding::percent_decode_str(seg)
                .decode_utf8_lossy()
                .into_owned(),
        )
    };
    let theirs = if let Some(named) = segment("/v1/tenants/") {
        // As the KV routes read it: `root` is the root key's own namespace,
        // never a tenant's.
        if named == "root" {
            Some(cairn_meta::ROOT_TENANT)
        } else {
            crate::tenants::find_tenant(meta, &named)
                .ok()
                .map(|(id, _)| id)
        }
    } else if let Some(key) = segment("/v1/keys/") {
        meta.key_holder(&key)
            .ok()
            .flatten()
            .map(|(k, _, _)| k.tenant)
    } else {
        None
    };
    if theirs == Some(tenant) {
        None
    } else {
        Some("that is not its tenant's".into())
    }
}

/// The credentials of an `Authorization` value of `name`'s scheme (the scheme
/// name is case-insensitive, RFC 9110).
fn scheme<'a>(value: &'a str, name: &str) -> Option<&'a str> {
    let (s, rest) = value.split_once(' ')?;
    s.eq_ignore_ascii_case(name).then_some(rest)
}

/// The token of a Basic `Authorization` value: its password (any user name).
fn basic_password(v: &str) -> Option<String> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(scheme(v, "Basic")?.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    Some(text.split_once(':')?.1.to_string())
}

/// The principal the request's token stands for: a bearer token, or for reads
/// (`basic_ok`) also the password of HTTP Basic authentication, which is what a
/// browser can send (see crate::page on why reads only).
fn authenticate(
    app: &App,
    headers: &axum::http::HeaderMap,
    basic_ok: bool,
    cert: Option<String>,
) -> Result<Principal, Failure> {
    let unauthorized = |why: &str| Failure::new(ErrorKind::Unauthorized, why.to_string());
    let value = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A client certificate (TLS listener) without a token: the table decides.
    if let (Some(sha256), "") = (&cert, value) {
        return crate::certs::principal(app, sha256).ok_or_else(|| {
            unauthorized(
                "this client certificate is not an admin certificate, or it was revoked or expired",
            )
        });
    }
    let basic = if basic_ok {
        basic_password(value)
    } else {
        None
    };
    let token = scheme(value, "Bearer")
        .or(basic.as_deref())
        .ok_or_else(|| unauthorized("missing admin token (Authorization: Bearer …)"))?;
    if same(token.as_bytes(), app.local_token().as_bytes()) {
        return Ok(Principal {
            who: "local".into(),
            role: Role::Admin,
            tenant: None,
        });
    }
    if let Some(p) = app.sessions().get(token) {
        return Ok(p);
    }
    let wrong = || unauthorized("wrong, revoked or expired admin token");
    let (id, secret) = token
        .strip_prefix("cairn_")
        .and_then(|t| t.split_once('_'))
        .ok_or_else(wrong)?;
    let store = app.store().map_err(|_| wrong())?;
    let rec = store
        .meta()
        .admin_token(id)
        .map_err(Failure::from)?
        .ok_or_else(wrong)?;
    if !same(hash(secret).as_bytes(), rec.sha256.as_bytes()) {
        return Err(wrong());
    }
    if rec.expires_ms.is_some_and(|e| e <= cairn_meta::now_ms()) {
        return Err(wrong());
    }
    Ok(Principal {
        who: format!("token:{id} ({})", rec.name),
        role: rec.role,
        tenant: rec.tenant,
    })
}

/// Constant-time equality: tokens and their hashes are secrets.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

fn view(meta: &cairn_meta::MetaStore, id: String, r: AdminTokenRecord) -> AdminTokenView {
    let tenant = r.tenant.map(|t| match meta.tenant(t) {
        Ok(Some(rec)) => rec.name,
        _ => format!("{t:016x}"),
    });
    AdminTokenView {
        id,
        name: r.name,
        role: r.role,
        created_ms: r.created_ms,
        expires_ms: r.expires_ms,
        created_by: r.created_by,
        tenant,
    }
}

/// `POST /v1/admin/tokens`.
pub(crate) async fn create_token(
    State(app): State<App>,
    Extension(by): Extension<Principal>,
    body: Body<NewAdminToken>,
) -> Result<Json<CreatedAdminToken>, Failure> {
    let Json(req) = body?;
    // Plain ASCII: names show in lists, logs and the audit, where control or
    // bidirectional characters could disguise one.
    let fits = |c: char| c.is_ascii_alphanumeric() || " ._@:+-".contains(c);
    if req.name.is_empty() || req.name.len() > 64 || !req.name.chars().all(fits) {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a token's name is 1 to 64 of A-Z a-z 0-9 space . _ @ : + -",
        ));
    }
    let store = crate::tenants::current(&app).await?;
    let tenant = match &req.tenant {
        Some(named) => Some(crate::tenants::find_tenant(store.meta(), named)?.0),
        None => None,
    };
    let id = hex::encode(rand::random::<[u8; 8]>());
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let now = cairn_meta::now_ms();
    let record = AdminTokenRecord {
        name: req.name,
        role: req.role,
        sha256: hash(&secret),
        created_ms: now,
        expires_ms: req
            .expires_in_s
            .map(|s| now.saturating_add((s.min(i64::MAX as u64 / 1000) * 1000) as i64)),
        created_by: by.who,
        tenant,
    };
    store
        .change_admin(AdminChange::CreateToken {
            id: id.clone(),
            record: record.clone(),
        })
        .await?;
    prune_expired(&store).await;
    Ok(Json(CreatedAdminToken {
        token: format!("cairn_{id}_{secret}"),
        view: view(store.meta(), id, record),
    }))
}

/// How long an expired token stays listed (so `token list` can still say why a
/// script's token stopped working) before a token creation prunes it.
const EXPIRED_KEPT_MS: i64 = 7 * 24 * 3600 * 1000;

/// Deletes tokens expired for longer than [`EXPIRED_KEPT_MS`]: the table grows
/// only with creations, so each creation prunes. Best effort: a token that
/// stays is refused anyway.
async fn prune_expired(store: &cairn_objects::ObjectStore) {
    let now = cairn_meta::now_ms();
    let Ok(tokens) = store.meta().admin_tokens() else {
        return;
    };
    for (id, rec) in tokens {
        if rec.expires_ms.is_some_and(|e| e + EXPIRED_KEPT_MS <= now) {
            if let Err(e) = store
                .change_admin(AdminChange::DeleteToken { id: id.clone() })
                .await
            {
                tracing::debug!(token = %id, "expired token not pruned: {e}");
            } else {
                tracing::info!(target: "cairn_audit", token = %id, name = %rec.name, "expired admin token pruned");
            }
        }
    }
}

/// `GET /v1/admin/tokens`.
pub(crate) async fn tokens(State(app): State<App>) -> Result<Json<Vec<AdminTokenView>>, Failure> {
    let store = crate::tenants::current(&app).await?;
    let mut out: Vec<_> = store
        .meta()
        .admin_tokens()?
        .into_iter()
        .map(|(id, r)| view(store.meta(), id, r))
        .collect();
    out.sort_by_key(|t| t.created_ms);
    Ok(Json(out))
}

/// `DELETE /v1/admin/tokens/{id}`.
pub(crate) async fn revoke_token(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<bool>, Failure> {
    app.store()?
        .change_admin(AdminChange::DeleteToken { id })
        .await?;
    Ok(Json(true))
}

/// `GET /v1/audit`.
pub(crate) async fn audit_list(
    State(app): State<App>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<AuditEntry>>, Failure> {
    let Query(q) = query?;
    let store = crate::tenants::current(&app).await?;
    let limit = q.limit.unwrap_or(100).min(AUDIT_KEEP as usize);
    Ok(Json(store.meta().audit(limit)?))
}

/// A path as logged: at most 256 characters (a path may be as long as a request
/// line allows, and the log is not the place for it all).
fn cut(path: &str) -> &str {
    match path.char_indices().nth(256) {
        Some((i, _)) => &path[..i],
        None => path,
    }
}
