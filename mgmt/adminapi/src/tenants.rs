//! Tenants, their users and the users' access keys: the bodies of the
//! `/v1/tenants` routes (see [`routes`](crate::routes)). Tenants are named by
//! their name or their hex id in paths; roles are `admin`, `read-write` and
//! `read-only`.

use serde::{Deserialize, Serialize};

/// `POST /v1/tenants`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewTenant {
    pub name: String,
    /// Whether the tenant's data is encrypted at rest under a key of its own
    /// (on unless asked otherwise).
    #[serde(default = "on")]
    pub encrypted: bool,
}

fn on() -> bool {
    true
}

/// The query of `DELETE /v1/tenants/{tenant}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DeleteTenant {
    /// Delete its buckets and objects too (crypto-shredding: its key goes
    /// first, so no byte of its data can be decrypted from then on).
    #[serde(default)]
    pub purge: bool,
}

/// A tenant as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TenantView {
    /// 16 hex digits; the tenant's canonical id in S3 (`Owner`).
    pub id: String,
    pub name: String,
    pub created_ms: i64,
    pub disabled: bool,
    /// Its data is sealed under a key of its own (the id of that key).
    #[serde(default)]
    pub key_id: Option<u32>,
    pub users: usize,
    pub keys: usize,
    pub buckets: usize,
    /// What the tenant's buckets hold (completed objects).
    pub bytes: u64,
    pub objects: u64,
    pub quota: QuotaSpec,
    #[serde(default)]
    pub qos: QosSpec,
    /// What this node's sharing has done to the tenant since the node started
    /// (the node that answered).
    #[serde(default)]
    pub qos_here: QosFigures,
}

/// A tenant's rates (none: no limit) and its weight on a busy node (none: 1).
/// The body of `PUT /v1/tenants/{tenant}/qos` (nulls lift the limits), and how
/// views show it. Rates are per node: each node shapes the requests it serves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosSpec {
    #[serde(default)]
    pub weight: Option<u32>,
    #[serde(default)]
    pub read_bytes_per_sec: Option<u64>,
    #[serde(default)]
    pub write_bytes_per_sec: Option<u64>,
    #[serde(default)]
    pub read_requests_per_sec: Option<u64>,
    #[serde(default)]
    pub write_requests_per_sec: Option<u64>,
}

/// What a node's sharing has done to a tenant since the node started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QosFigures {
    /// Units of data work (stripes, small objects) running and waiting now.
    pub busy: usize,
    pub waiting: usize,
    /// Units that waited for a slot while other tenants held them.
    pub queued: u64,
    /// Requests refused over the request rate (S3 `503 SlowDown`).
    pub slowed_down: u64,
    /// Milliseconds requests and transfers waited for the tenant's rates.
    pub shaped_ms: u64,
}

/// A quota: the most bytes and objects; none is no limit. The body of the
/// quota routes (`PUT`), and how views show one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaSpec {
    #[serde(default)]
    pub max_bytes: Option<u64>,
    #[serde(default)]
    pub max_objects: Option<u64>,
}

/// A tenant's bucket as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BucketView {
    pub name: String,
    pub created_ms: i64,
    pub bytes: u64,
    pub objects: u64,
    pub quota: QuotaSpec,
}

/// `POST /v1/tenants/{tenant}/users`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewUser {
    pub name: String,
    /// `admin`, `read-write` or `read-only`.
    pub role: String,
}

/// A user as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct UserView {
    pub name: String,
    pub role: String,
    pub created_ms: i64,
    pub disabled: bool,
    pub keys: usize,
}

/// An access key as the API lists it: never its secret.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyView {
    pub access_key: String,
    pub user: String,
    pub created_ms: i64,
}

/// A key just made: the only answer that carries its secret.
#[derive(Clone, Serialize, Deserialize)]
pub struct NewKey {
    pub access_key: String,
    pub secret_key: String,
    pub tenant: String,
    pub user: String,
}

impl std::fmt::Debug for NewKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NewKey({}, secret=<redacted>)", self.access_key)
    }
}

/// The body of the enable/disable routes.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct SetDisabled {
    pub disabled: bool,
}
