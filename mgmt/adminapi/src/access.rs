//! Who may do what: the admin API's whole surface as one closed set of
//! [`Action`]s, each with its route and the least [`Role`] that may take it, and
//! the admin tokens and audit entries that go with them.
//!
//! mgmtd resolves every request to an action before any handler runs, and
//! authorizes and audits there, in one layer: a route missing from
//! [`Action::ALL`] is not served at all.

use crate::routes;
use serde::{Deserialize, Serialize};

/// What an admin identity may do. Ordered: each role may do all the lesser ones
/// may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Status, figures and metrics; nothing that changes the node or reveals a
    /// secret.
    Reader,
    /// A reader who also runs the node: scrub, collector, drain and remove
    /// nodes, KV pools. No tenants, users, keys or tokens.
    Operator,
    /// Everything: tenants, users, access keys, admin tokens, cluster tokens.
    Admin,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        [Role::Reader, Role::Operator, Role::Admin]
            .into_iter()
            .find(|r| r.name() == s)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`: widths in a table's format string apply.
        f.pad(self.name())
    }
}

/// An HTTP method of the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

macro_rules! actions {
    ($($(#[$doc:meta])* $name:ident = $method:ident $route:expr, $role:ident;)*) => {
        /// Every action of the admin API (`/healthz` aside, which needs no one).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Action {
            $($(#[$doc])* $name,)*
        }

        impl Action {
            /// Every action, in the order the API lists them.
            pub const ALL: &'static [Action] = &[$(Action::$name,)*];

            /// Its method and route (with `{name}` placeholders).
            pub fn route(self) -> (Method, &'static str) {
                match self {
                    $(Action::$name => (Method::$method, $route),)*
                }
            }

            /// The least role that may take it.
            pub fn role(self) -> Role {
                match self {
                    $(Action::$name => Role::$role,)*
                }
            }
        }
    };
}

actions! {
    Metrics = Get routes::METRICS, Reader;
    Status = Get routes::STATUS, Reader;
    Drives = Get routes::DRIVES, Reader;
    ScrubStatus = Get routes::SCRUB, Reader;
    ScrubStart = Post routes::SCRUB_START, Operator;
    ScrubPause = Post routes::SCRUB_PAUSE, Operator;
    GcStatus = Get routes::GC, Reader;
    GcRun = Post routes::GC_RUN, Operator;
    ClusterInit = Post routes::CLUSTER_INIT, Admin;
    ClusterJoin = Post routes::CLUSTER_JOIN, Admin;
    ClusterStatus = Get routes::CLUSTER_STATUS, Reader;
    /// A join token is a secret that admits a node.
    ClusterToken = Get routes::CLUSTER_TOKEN, Admin;
    ClusterDrain = Post routes::CLUSTER_DRAIN, Operator;
    ClusterRemove = Post routes::CLUSTER_REMOVE, Operator;
    TenantList = Get routes::TENANTS, Reader;
    TenantCreate = Post routes::TENANTS, Admin;
    TenantShow = Get routes::TENANT, Reader;
    TenantSetDisabled = Patch routes::TENANT, Admin;
    TenantDelete = Delete routes::TENANT, Admin;
    UserList = Get routes::USERS, Reader;
    UserCreate = Post routes::USERS, Admin;
    UserSetDisabled = Patch routes::USER, Admin;
    UserDelete = Delete routes::USER, Admin;
    KeyCreate = Post routes::USER_KEYS, Admin;
    KeyList = Get routes::KEYS, Admin;
    KeyRevoke = Delete routes::KEY, Admin;
    TenantSetQuota = Put routes::TENANT_QUOTA, Admin;
    TenantSetQos = Put routes::TENANT_QOS, Admin;
    BucketList = Get routes::BUCKETS, Reader;
    BucketSetQuota = Put routes::BUCKET_QUOTA, Admin;
    SnapshotList = Get routes::SNAPSHOTS, Reader;
    SnapshotCreate = Post routes::SNAPSHOTS, Operator;
    /// Deleting a snapshot gives up the only copy of what it kept.
    SnapshotDelete = Delete routes::SNAPSHOT, Admin;
    ReplicationShow = Get routes::REPLICATION, Reader;
    /// Where a bucket's data is sent, with whose credentials.
    ReplicationSet = Put routes::REPLICATION, Admin;
    ReplicationRemove = Delete routes::REPLICATION, Admin;
    ExportList = Get routes::EXPORTS, Reader;
    /// Which networks reach a bucket's data over NFS, where clients are known
    /// by their address alone.
    ExportSet = Put routes::BUCKET_EXPORT, Admin;
    ExportRemove = Delete routes::BUCKET_EXPORT, Admin;
    KvPoolList = Get routes::KV_POOLS, Reader;
    KvPoolCreate = Post routes::KV_POOLS, Operator;
    KvPoolDelete = Delete routes::KV_POOL, Operator;
    KvStats = Get routes::KV_STATS, Reader;
    AdminTokenList = Get routes::ADMIN_TOKENS, Admin;
    AdminTokenCreate = Post routes::ADMIN_TOKENS, Admin;
    AdminTokenRevoke = Delete routes::ADMIN_TOKEN, Admin;
    AuditList = Get routes::AUDIT, Operator;
    AdminCertList = Get routes::ADMIN_CERTS, Admin;
    AdminCertIssue = Post routes::ADMIN_CERTS, Admin;
    AdminCertRevoke = Delete routes::ADMIN_CERT, Admin;
    SshKeyList = Get routes::SSH_KEYS, Reader;
    SshKeyAdd = Post routes::SSH_KEYS, Admin;
    SshKeyRemove = Delete routes::SSH_KEY, Admin;
    StatusPage = Get routes::PAGE, Reader;
    BmcList = Get routes::BMCS, Reader;
    BmcShow = Get routes::NODE_BMC, Reader;
    /// Holds a BMC password: what can power nodes off.
    BmcSet = Put routes::NODE_BMC, Admin;
    BmcClear = Delete routes::NODE_BMC, Admin;
    PowerStatus = Get routes::NODE_POWER, Reader;
    PowerControl = Post routes::NODE_POWER, Operator;
    SensorList = Get routes::NODE_SENSORS, Reader;
}

impl Action {
    /// Whether a tenant's token may take it (within its own tenant: the route's
    /// `{tenant}`, or the tenant of the access key it names).
    pub fn tenant_scoped(self) -> bool {
        matches!(
            self,
            Action::TenantShow
                | Action::UserList
                | Action::UserCreate
                | Action::UserSetDisabled
                | Action::UserDelete
                | Action::KeyCreate
                | Action::KeyList
                | Action::KeyRevoke
                | Action::BucketList
                | Action::BucketSetQuota
                | Action::KvPoolList
                | Action::KvPoolCreate
                | Action::KvPoolDelete
        )
    }

    /// The action a request names by its method and matched route.
    pub fn of(method: &str, route: &str) -> Option<Action> {
        Action::ALL.iter().copied().find(|a| {
            let (m, r) = a.route();
            m.as_str() == method && r == route
        })
    }

    /// Whether it changes anything (and is therefore audited).
    pub fn mutates(self) -> bool {
        self.route().0 != Method::Get
    }

    /// Its name as serialized (`tenant_create`).
    pub fn name(self) -> String {
        let mut out = String::new();
        for (i, c) in format!("{self:?}").chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        }
        out
    }
}

/// `POST /v1/admin/certs`: a client certificate for the admin API's mutual
/// TLS, over a key pair the caller made (only its public half is sent).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewAdminCert {
    pub name: String,
    pub role: Role,
    /// Uncompressed P-256 public key, hex (130 digits).
    pub public_key_hex: String,
    /// Days it is valid (default 365).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
}

/// An admin certificate as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminCertView {
    /// The first 16 hex digits of its SHA-256 (what `revoke` takes).
    pub id: String,
    pub sha256: String,
    pub name: String,
    pub role: Role,
    pub not_after_ms: i64,
    pub created_ms: i64,
    pub created_by: String,
}

/// The answer to [`NewAdminCert`]: the certificate and the cluster CA (PEM).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IssuedAdminCert {
    #[serde(flatten)]
    pub view: AdminCertView,
    pub cert_pem: String,
    pub ca_pem: String,
}

/// `POST /v1/ssh/keys`: a key that may log in to the SSH console.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewSshKey {
    /// Whose key (shown in lists and, as `ssh:NAME`, in the audit log).
    pub name: String,
    pub role: Role,
    /// An OpenSSH public key line: `ssh-ed25519 AAAA... [comment]`.
    pub public_key: String,
}

/// An SSH console key added through the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshKeyView {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// `SHA256:...`, as `ssh-keygen -l` shows it.
    pub fingerprint: String,
    /// `ssh-ed25519`, `ssh-rsa`, ...
    pub key_type: String,
    pub added_ms: i64,
    pub added_by: String,
}

/// `POST /v1/admin/tokens`: a new admin token.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NewAdminToken {
    /// What the token is for (shown in lists and the audit log).
    pub name: String,
    pub role: Role,
    /// Seconds it stays valid; none: until revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// A tenant (name or id): the token then acts only within it, with its role
    /// there (reader: read it; operator: also its KV pools; admin: also its
    /// users, keys and buckets' quotas), and on nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// An admin token as listed (never its secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminTokenView {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    /// Who created it.
    pub created_by: String,
    /// The tenant it is limited to (its name), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The answer to [`NewAdminToken`]: the token itself, shown this once (the
/// cluster keeps only its SHA-256).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CreatedAdminToken {
    #[serde(flatten)]
    pub view: AdminTokenView,
    pub token: String,
}

/// One audited call: who, what, when, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub at_ms: i64,
    /// `token:<id> (<name>)`, or `local` for the node's own token file.
    pub who: String,
    pub role: Role,
    pub action: Action,
    /// The request's path (what it named).
    pub path: String,
    /// The HTTP status it was answered with.
    pub status: u16,
    /// The node that served it.
    pub node: String,
    /// How many more refusals of the same caller and action, within the minute
    /// before this one, this entry stands for (a refused call is recorded once
    /// a minute per caller and action, so refusals cannot push other entries
    /// out of the bounded table). Zero for every allowed call.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated: u32,
    /// The tenant the caller's token is limited to (its name), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `GET /v1/audit?limit=N`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AuditQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_one_route_and_method() {
        for (i, a) in Action::ALL.iter().enumerate() {
            for b in &Action::ALL[i + 1..] {
                assert_ne!(a.route(), b.route(), "{a:?} and {b:?}");
            }
            let (m, r) = a.route();
            assert_eq!(Action::of(m.as_str(), r), Some(*a));
        }
        assert_eq!(Action::of("GET", "/v1/nope"), None);
        assert_eq!(Action::of("DELETE", routes::STATUS), None);
    }

    #[test]
    fn roles_are_ordered_and_named() {
        assert!(Role::Reader < Role::Operator && Role::Operator < Role::Admin);
        for r in [Role::Reader, Role::Operator, Role::Admin] {
            assert_eq!(Role::parse(r.name()), Some(r));
        }
        assert_eq!(Action::TenantCreate.name(), "tenant_create");
        // Nothing a reader may do changes anything.
        for a in Action::ALL {
            if a.role() == Role::Reader {
                assert!(!a.mutates(), "{a:?}");
            }
        }
    }
}
