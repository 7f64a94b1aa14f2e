//! SSH console keys managed through the admin API (`/v1/ssh/keys`): kept in the
//! replicated metadata, so a key added on one node logs in on every node, and a
//! removed one is refused at its next login anywhere. They add to the node's
//! authorized-keys files (node.toml's, and `state/ssh/authorized_keys`).

use crate::access::Principal;
use crate::admin::{App, Body, Failure};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use cairn_adminapi::{ErrorKind, NewSshKey, SshKeyView};
use cairn_meta::{AdminChange, SshKeyRecord};
use sha2::{Digest, Sha256};

fn view(id: String, r: SshKeyRecord) -> SshKeyView {
    SshKeyView {
        id,
        name: r.name,
        role: r.role,
        fingerprint: r.fingerprint,
        key_type: r
            .public_key
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string(),
        added_ms: r.added_ms,
        added_by: r.added_by,
    }
}

/// `GET /v1/ssh/keys`.
pub(crate) async fn list(State(app): State<App>) -> Result<Json<Vec<SshKeyView>>, Failure> {
    let store = crate::tenants::current(&app).await?;
    let mut out: Vec<_> = store
        .meta()
        .ssh_keys()?
        .into_iter()
        .map(|(id, r)| view(id, r))
        .collect();
    out.sort_by_key(|k| k.added_ms);
    Ok(Json(out))
}

/// `POST /v1/ssh/keys`.
pub(crate) async fn add(
    State(app): State<App>,
    Extension(by): Extension<Principal>,
    body: Body<NewSshKey>,
) -> Result<Json<SshKeyView>, Failure> {
    let Json(req) = body?;
    // As tokens' names: they show in lists, logs and the audit.
    let fits = |c: char| c.is_ascii_alphanumeric() || "._@:+-".contains(c);
    if req.name.is_empty() || req.name.len() > 64 || !req.name.chars().all(fits) {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a key's name is 1 to 64 of A-Z a-z 0-9 . _ @ : + -",
        ));
    }
    let line = req.public_key.trim();
    if line.contains('\n') || line.starts_with("role=") {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "one OpenSSH public key line (the role is given apart)",
        ));
    }
    // Kept without its comment: the name given is what names it.
    let (fingerprint, public_key) = cairn_console::check_public_key(line)
        .map_err(|e| Failure::new(ErrorKind::Invalid, e.to_string()))?;
    let id = hex::encode(&Sha256::digest(public_key.as_bytes())[..8]);
    let store = app.store()?;
    if store.meta().ssh_keys()?.iter().any(|(i, _)| *i == id) {
        return Err(Failure::new(
            ErrorKind::Conflict,
            format!("this key is already added (id {id})"),
        ));
    }
    let record = SshKeyRecord {
        name: req.name,
        role: req.role,
        public_key,
        fingerprint,
        added_ms: cairn_meta::now_ms(),
        added_by: by.who,
    };
    store
        .change_admin(AdminChange::AddSshKey {
            id: id.clone(),
            record: record.clone(),
        })
        .await?;
    Ok(Json(view(id, record)))
}

/// `DELETE /v1/ssh/keys/{id}`.
pub(crate) async fn remove(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Json<bool>, Failure> {
    app.store()?
        .change_admin(AdminChange::RemoveSshKey { id })
        .await?;
    Ok(Json(true))
}
