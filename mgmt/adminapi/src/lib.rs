//! mgmtd's admin API as a contract, shared by the server and its clients so the
//! two cannot drift: the routes ([`routes`]), the bodies each route takes and
//! answers (one type each, serialized by mgmtd's handlers and read by the client),
//! the error body every failed route answers ([`ErrorBody`], [`ErrorKind`]), and
//! with the `client` feature (on by default) a typed client, [`AdminClient`], that
//! `nodectl` uses for every command that talks to a node.
//!
//! The API is HTTP/1.1 with JSON bodies; every route but `/healthz` needs a
//! bearer token: the node's own (`admin.token` in its state directory, see
//! `cairn-credentials`; the admin role) or one made with `nodectl token create`
//! (any [`Role`]). Which role each route needs is [`Action`]'s table.
//!
//! The crate is light so that every layer can name these types: the status types
//! of the scrubber, the collector and protection are defined here and filled by
//! cairn-objects directly. The workspace takes it with `default-features = false`;
//! only the client pulls in an HTTP client.

mod access;
mod bmc;
mod cluster;
mod error;
mod exports;
mod gc;
mod kv;
mod node;
mod protection;
mod replication;
mod scrub;
mod snapshots;
mod tenants;

#[cfg(feature = "client")]
mod client;

pub use access::{
    Action, AdminCertView, AdminTokenView, AuditEntry, AuditQuery, CreatedAdminToken,
    IssuedAdminCert, Method, NewAdminCert, NewAdminToken, NewSshKey, Role, SshKeyView,
};
pub use bmc::{
    BmcSettings, BmcView, PowerAction, PowerRequest, PowerState, PowerView, SensorLevel,
    SensorView, SensorsView,
};
pub use cluster::{
    ClusterStatus, InitRequest, JoinRequest, NodeRequest, NodeView, RepairView, TokenReply,
};
pub use error::{ErrorBody, ErrorKind};
pub use exports::{ExportSpec, ExportView, NOBODY};
pub use gc::{GcRound, GcRunQuery, GcStatus};
pub use kv::{KvPoolView, KvStats, NewKvPool};
pub use node::{DamageAtOpen, DriveStatus, LifecycleStatus, NodeDrives, NodeStatus, ReactorLoad};
pub use protection::{ProtectionReport, ProtectionReportView};
pub use replication::{ReplicationRuleSpec, ReplicationRuleView, ReplicationSpec, ReplicationView};
pub use scrub::{ScrubPass, ScrubState, ScrubStatus};
pub use snapshots::{NewSnapshot, SnapshotView, SnapshotsView};
pub use tenants::{
    BucketView, DeleteTenant, KeyView, NewKey, NewTenant, NewUser, QosFigures, QosSpec, QuotaSpec,
    SetDisabled, TenantView, UserView,
};

#[cfg(feature = "client")]
pub use client::{AdminClient, AdminError};

/// The routes: method, path, what they take and answer.
pub mod routes {
    /// `GET`, no token: `ok` (text) while mgmtd serves.
    pub const HEALTHZ: &str = "/healthz";
    /// Prometheus text format, behind the admin token.
    pub const METRICS: &str = "/metrics";
    /// `GET` → [`NodeStatus`](crate::NodeStatus).
    pub const STATUS: &str = "/v1/status";
    /// `GET` → [`NodeDrives`](crate::NodeDrives): the node's own drives, from its
    /// own datapathd.
    pub const DRIVES: &str = "/v1/drives";
    /// `GET` → [`ScrubStatus`](crate::ScrubStatus).
    pub const SCRUB: &str = "/v1/scrub";
    /// `POST` (no body) → [`ScrubStatus`](crate::ScrubStatus): a pass now, or the
    /// paused one resumed.
    pub const SCRUB_START: &str = "/v1/scrub/start";
    /// `POST` (no body) → [`ScrubStatus`](crate::ScrubStatus).
    pub const SCRUB_PAUSE: &str = "/v1/scrub/pause";
    /// `GET` → [`GcStatus`](crate::GcStatus).
    pub const GC: &str = "/v1/gc";
    /// `POST ?`[`GcRunQuery`](crate::GcRunQuery) (no body) →
    /// [`GcStatus`](crate::GcStatus) from before the round, which runs in the
    /// background (queued behind one already running): follow [`GC`] until
    /// `rounds` moves on.
    pub const GC_RUN: &str = "/v1/gc/run";
    /// `POST` [`InitRequest`](crate::InitRequest) →
    /// [`TokenReply`](crate::TokenReply).
    pub const CLUSTER_INIT: &str = "/v1/cluster/init";
    /// `POST` [`JoinRequest`](crate::JoinRequest) →
    /// [`TokenReply`](crate::TokenReply), once this node is in the map.
    pub const CLUSTER_JOIN: &str = "/v1/cluster/join";
    /// `GET` → [`ClusterStatus`](crate::ClusterStatus).
    pub const CLUSTER_STATUS: &str = "/v1/cluster/status";
    /// `GET` → [`TokenReply`](crate::TokenReply): a join token for more nodes.
    pub const CLUSTER_TOKEN: &str = "/v1/cluster/token";
    /// `POST` [`NodeRequest`](crate::NodeRequest) → the map epoch (a number).
    pub const CLUSTER_DRAIN: &str = "/v1/cluster/drain";
    /// `POST` [`NodeRequest`](crate::NodeRequest) → `true`.
    pub const CLUSTER_REMOVE: &str = "/v1/cluster/remove";
    /// `GET` → `Vec<`[`TenantView`](crate::TenantView)`>`; `POST`
    /// [`NewTenant`](crate::NewTenant) → [`TenantView`](crate::TenantView).
    pub const TENANTS: &str = "/v1/tenants";
    /// `GET` → [`TenantView`](crate::TenantView); `DELETE` → `true` (refused while
    /// the tenant owns buckets); `PATCH` [`SetDisabled`](crate::SetDisabled) →
    /// [`TenantView`](crate::TenantView). `{tenant}`: its name or hex id.
    pub const TENANT: &str = "/v1/tenants/{tenant}";
    /// `GET` → `Vec<`[`UserView`](crate::UserView)`>`; `POST`
    /// [`NewUser`](crate::NewUser) → [`UserView`](crate::UserView).
    pub const USERS: &str = "/v1/tenants/{tenant}/users";
    /// `DELETE` → `true` (with its keys); `PATCH`
    /// [`SetDisabled`](crate::SetDisabled) → [`UserView`](crate::UserView).
    pub const USER: &str = "/v1/tenants/{tenant}/users/{user}";
    /// `POST` (no body) → [`NewKey`](crate::NewKey): a key for the user, its
    /// secret shown this once.
    pub const USER_KEYS: &str = "/v1/tenants/{tenant}/users/{user}/keys";
    /// `GET` → `Vec<`[`KeyView`](crate::KeyView)`>`: every key of the tenant.
    pub const KEYS: &str = "/v1/tenants/{tenant}/keys";
    /// `DELETE` → `true`: the key is revoked at once on every node.
    pub const KEY: &str = "/v1/keys/{access_key}";
    /// `PUT` [`QuotaSpec`](crate::QuotaSpec) → [`TenantView`](crate::TenantView):
    /// what all the tenant's buckets may hold (nulls lift the limits).
    pub const TENANT_QUOTA: &str = "/v1/tenants/{tenant}/quota";
    /// `PUT` [`QosSpec`](crate::QosSpec) → [`TenantView`](crate::TenantView):
    /// the tenant's rates and weight (nulls lift the limits).
    pub const TENANT_QOS: &str = "/v1/tenants/{tenant}/qos";
    /// `GET` → `Vec<`[`BucketView`](crate::BucketView)`>`: the tenant's buckets
    /// with their usage and quotas.
    pub const BUCKETS: &str = "/v1/tenants/{tenant}/buckets";
    /// `PUT` [`QuotaSpec`](crate::QuotaSpec) → [`BucketView`](crate::BucketView).
    pub const BUCKET_QUOTA: &str = "/v1/tenants/{tenant}/buckets/{bucket}/quota";
    /// `PUT` [`ExportSpec`](crate::ExportSpec) →
    /// [`ExportView`](crate::ExportView): the bucket exported over NFS (its
    /// export replaced); `DELETE` → `true`: not exported (also when it was
    /// not). `{tenant}` may be `root`.
    pub const BUCKET_EXPORT: &str = "/v1/tenants/{tenant}/buckets/{bucket}/export";
    /// `GET` → [`SnapshotsView`](crate::SnapshotsView); `POST`
    /// [`NewSnapshot`](crate::NewSnapshot) → [`SnapshotView`](crate::SnapshotView).
    /// `{tenant}` may be `root`.
    pub const SNAPSHOTS: &str = "/v1/tenants/{tenant}/buckets/{bucket}/snapshots";
    /// `GET` → [`ReplicationView`](crate::ReplicationView); `PUT`
    /// [`ReplicationSpec`](crate::ReplicationSpec) → the view; `DELETE` →
    /// `true`: no longer replicated (the backlog dropped). `{tenant}` may be
    /// `root`.
    pub const REPLICATION: &str = "/v1/tenants/{tenant}/buckets/{bucket}/replication";
    /// `DELETE` → `true`: the snapshot and what only it kept go.
    pub const SNAPSHOT: &str = "/v1/tenants/{tenant}/buckets/{bucket}/snapshots/{snapshot}";
    /// `GET` → `Vec<`[`ExportView`](crate::ExportView)`>`: every tenant's NFS
    /// exports, by path.
    pub const EXPORTS: &str = "/v1/exports";

    /// `GET` → `Vec<`[`KvPoolView`](crate::KvPoolView)`>`; `POST`
    /// [`NewKvPool`](crate::NewKvPool) → [`KvPoolView`](crate::KvPoolView).
    /// `{tenant}` may be `root`.
    pub const KV_POOLS: &str = "/v1/tenants/{tenant}/kv/pools";
    /// `DELETE` → `true`: the pool and every value in it.
    pub const KV_POOL: &str = "/v1/tenants/{tenant}/kv/pools/{pool}";
    /// `GET` → [`KvStats`](crate::KvStats).
    pub const KV_STATS: &str = "/v1/kv/stats";

    /// `GET` → `Vec<`[`AdminTokenView`](crate::AdminTokenView)`>`; `POST`
    /// [`NewAdminToken`](crate::NewAdminToken) →
    /// [`CreatedAdminToken`](crate::CreatedAdminToken).
    pub const ADMIN_TOKENS: &str = "/v1/admin/tokens";
    /// `DELETE` → `true`: the token is refused at once on every node.
    pub const ADMIN_TOKEN: &str = "/v1/admin/tokens/{id}";
    /// `GET ?`[`AuditQuery`](crate::AuditQuery) →
    /// `Vec<`[`AuditEntry`](crate::AuditEntry)`>`, oldest first.
    pub const AUDIT: &str = "/v1/audit";
    /// `GET` → the status page (HTML, for a browser: Basic authentication with
    /// a token as the password is taken for it, as for every read).
    pub const PAGE: &str = "/ui";
    /// `GET` → `Vec<`[`AdminCertView`](crate::AdminCertView)`>`; `POST`
    /// [`NewAdminCert`](crate::NewAdminCert) →
    /// [`IssuedAdminCert`](crate::IssuedAdminCert).
    pub const ADMIN_CERTS: &str = "/v1/admin/certs";
    /// `DELETE` (an id or the whole SHA-256) → `true`: refused at once.
    pub const ADMIN_CERT: &str = "/v1/admin/certs/{id}";
    /// `GET` → `Vec<`[`SshKeyView`](crate::SshKeyView)`>`; `POST`
    /// [`NewSshKey`](crate::NewSshKey) → [`SshKeyView`](crate::SshKeyView): keys
    /// that may log in to the SSH console, besides the node's authorized-keys files.
    pub const SSH_KEYS: &str = "/v1/ssh/keys";
    /// `DELETE` → `true`: refused at the next login on every node.
    pub const SSH_KEY: &str = "/v1/ssh/keys/{id}";
    /// `GET` → `Vec<`[`BmcView`](crate::BmcView)`>`: every node's BMC.
    pub const BMCS: &str = "/v1/bmcs";
    /// `GET` → [`BmcView`](crate::BmcView); `PUT`
    /// [`BmcSettings`](crate::BmcSettings) → [`BmcView`](crate::BmcView) (the
    /// BMC is reached first: wrong credentials are refused, nothing kept);
    /// `DELETE` → `true`. `{node}` is a node id or a unique prefix of one.
    pub const NODE_BMC: &str = "/v1/nodes/{node}/bmc";
    /// `GET` → [`PowerView`](crate::PowerView): the power state its BMC reports;
    /// `POST` [`PowerRequest`](crate::PowerRequest) → [`PowerView`](crate::PowerView).
    pub const NODE_POWER: &str = "/v1/nodes/{node}/power";
    /// `GET` → [`SensorsView`](crate::SensorsView): the node's threshold
    /// sensors, read now (in-band on the node itself when it has `/dev/ipmi0`,
    /// else through its BMC over the LAN).
    pub const NODE_SENSORS: &str = "/v1/nodes/{node}/sensors";

    /// `path` with its `{name}` placeholders filled, in order.
    pub fn fill(path: &str, values: &[&str]) -> String {
        let mut out = String::new();
        let mut rest = path;
        let mut values = values.iter();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
            out.push_str(&percent(values.next().copied().unwrap_or("")));
            rest = &rest[close..];
        }
        out.push_str(rest);
        out
    }

    /// A path segment, percent-encoded but for unreserved characters.
    fn percent(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    }
}
