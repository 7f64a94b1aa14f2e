//! The admin API's own records, replicated like every other: admin tokens (by
//! id, holding only the SHA-256 of their secret) and the audit, the last
//! [`AUDIT_KEEP`] mutating calls served by any node in each of three tables:
//! the cluster's administrators', the other cluster roles', and tenants'
//! tokens'. Kept apart so that no caller can push a more trusted one's entries
//! out: a tenant's operator looping through real changes (each audited, none
//! folded) fills only the tenants' table.

use crate::{MetaError, MetaStore};
use cairn_adminapi::{AuditEntry, Role};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

pub(crate) const ADMIN_TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("admin_tokens");
/// Audit entries of cluster administrators (role admin, no tenant).
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
/// Audit entries of the other cluster roles (operator, reader).
pub(crate) const AUDIT_STAFF: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_staff");
/// Audit entries of tokens limited to a tenant.
pub(crate) const AUDIT_TENANTS: TableDefinition<u64, &[u8]> = TableDefinition::new("audit_tenants");

/// The table an entry belongs in.
fn audit_table(e: &AuditEntry) -> TableDefinition<'static, u64, &'static [u8]> {
    match (&e.tenant, e.role) {
        (Some(_), _) => AUDIT_TENANTS,
        (None, Role::Admin) => AUDIT,
        (None, _) => AUDIT_STAFF,
    }
}
/// Admin client certificates (mutual TLS), by certificate SHA-256 (hex).
pub(crate) const ADMIN_CERTS: TableDefinition<&str, &[u8]> = TableDefinition::new("admin_certs");
/// SSH console keys added through the admin API, by id.
pub(crate) const SSH_KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("ssh_keys");
/// Each node's BMC, by node id.
pub(crate) const BMCS: TableDefinition<u64, &[u8]> = TableDefinition::new("bmcs");

/// Audit entries kept per table; the oldest go first.
pub const AUDIT_KEEP: u64 = 10_000;

/// An admin token as the cluster keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminTokenRecord {
    pub name: String,
    pub role: Role,
    /// Hex SHA-256 of the token's secret part.
    pub sha256: String,
    pub created_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    pub created_by: String,
    /// The tenant (id) it is limited to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<u64>,
}

/// An admin client certificate the cluster issued: its role lives here, not in
/// the certificate, so deleting the record revokes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminCertRecord {
    pub name: String,
    pub role: Role,
    pub not_after_ms: i64,
    pub created_ms: i64,
    pub created_by: String,
}

/// An SSH console key added through the admin API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshKeyRecord {
    pub name: String,
    pub role: Role,
    /// The OpenSSH public key line (`TYPE BASE64 [COMMENT]`).
    pub public_key: String,
    /// `SHA256:...`, as ssh-keygen -l shows it.
    pub fingerprint: String,
    pub added_ms: i64,
    pub added_by: String,
}

/// How the cluster reaches a node's BMC (RMCP+), for power control and fencing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BmcRecord {
    /// `host:port` of the BMC's RMCP+ service.
    pub address: String,
    pub user: String,
    /// The password, sealed by the cluster's master key (named by node id).
    pub password_sealed: Vec<u8>,
    /// The cluster may power the node off before rebuilding its data.
    #[serde(default)]
    pub fence: bool,
    pub set_ms: i64,
    pub set_by: String,
    /// When the cluster last powered the node off to fence it; cleared once the
    /// node is back up. Counted against the redundancy: never more nodes fenced
    /// at once than the data can lose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_ms: Option<i64>,
}

/// Changes to the admin records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdminChange {
    CreateToken {
        id: String,
        record: AdminTokenRecord,
    },
    DeleteToken {
        id: String,
    },
    Audit {
        entry: AuditEntry,
    },
    SetBmc {
        node: u64,
        record: BmcRecord,
    },
    AddSshKey {
        id: String,
        record: SshKeyRecord,
    },
    CreateCert {
        sha256: String,
        record: AdminCertRecord,
    },
    DeleteCert {
        sha256: String,
    },
    RemoveSshKey {
        id: String,
    },
    ClearBmc {
        node: u64,
    },
    /// Marks a node fenced (`Some`) or back (`None`); a node without a BMC
    /// record is left alone.
    Fenced {
        node: u64,
        at_ms: Option<i64>,
    },
}

pub(crate) fn apply(tx: &redb::WriteTransaction, c: &AdminChange) -> Result<(), MetaError> {
    match c {
        AdminChange::CreateToken { id, record } => {
            let mut t = tx.open_table(ADMIN_TOKENS)?;
            if t.get(id.as_str())?.is_some() {
                return Err(MetaError::KeyExists);
            }
            t.insert(id.as_str(), serde_json::to_vec(record)?.as_slice())?;
        }
        AdminChange::DeleteToken { id } => {
            let mut t = tx.open_table(ADMIN_TOKENS)?;
            if t.remove(id.as_str())?.is_none() {
                return Err(MetaError::NoSuchAdminToken(id.clone()));
            }
        }
        AdminChange::Audit { entry } => {
            let mut t = tx.open_table(audit_table(entry))?;
            let next = t.last()?.map_or(0, |(k, _)| k.value() + 1);
            t.insert(next, serde_json::to_vec(entry)?.as_slice())?;
            while t.len()? > AUDIT_KEEP {
                if t.pop_first()?.is_none() {
                    break;
                }
            }
        }
        AdminChange::SetBmc { node, record } => {
            let mut t = tx.open_table(BMCS)?;
            t.insert(*node, serde_json::to_vec(record)?.as_slice())?;
        }
        AdminChange::CreateCert { sha256, record } => {
            let mut t = tx.open_table(ADMIN_CERTS)?;
            t.insert(sha256.as_str(), serde_json::to_vec(record)?.as_slice())?;
        }
        AdminChange::DeleteCert { sha256 } => {
            let mut t = tx.open_table(ADMIN_CERTS)?;
            if t.remove(sha256.as_str())?.is_none() {
                return Err(MetaError::NoSuchAdminCert(sha256.clone()));
            }
        }
        AdminChange::AddSshKey { id, record } => {
            let mut t = tx.open_table(SSH_KEYS)?;
            if t.get(id.as_str())?.is_some() {
                return Err(MetaError::KeyExists);
            }
            t.insert(id.as_str(), serde_json::to_vec(record)?.as_slice())?;
        }
        AdminChange::RemoveSshKey { id } => {
            let mut t = tx.open_table(SSH_KEYS)?;
            if t.remove(id.as_str())?.is_none() {
                return Err(MetaError::NoSuchSshKey(id.clone()));
            }
        }
        AdminChange::ClearBmc { node } => {
            let mut t = tx.open_table(BMCS)?;
            if t.remove(*node)?.is_none() {
                return Err(MetaError::NoSuchBmc(*node));
            }
        }
        AdminChange::Fenced { node, at_ms } => {
            let mut t = tx.open_table(BMCS)?;
            let rec = t
                .get(*node)?
                .map(|v| serde_json::from_slice::<BmcRecord>(v.value()));
            if let Some(rec) = rec {
                let rec = BmcRecord {
                    fenced_ms: *at_ms,
                    ..rec?
                };
                t.insert(*node, serde_json::to_vec(&rec)?.as_slice())?;
            }
        }
    }
    Ok(())
}

/// Reads of the admin records (local: as current as this replica).
impl MetaStore {
    /// Every record of a table keyed by name (none when the table is not made yet).
    fn by_name<V: serde::de::DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<(String, V)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(table) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            out.push((k.value().to_string(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    pub fn admin_token(&self, id: &str) -> Result<Option<AdminTokenRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(ADMIN_TOKENS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let v = t.get(id)?;
        Ok(match v {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    pub fn admin_tokens(&self) -> Result<Vec<(String, AdminTokenRecord)>, MetaError> {
        self.by_name(ADMIN_TOKENS)
    }

    /// The admin client certificates, by SHA-256 (hex).
    pub fn admin_certs(&self) -> Result<Vec<(String, AdminCertRecord)>, MetaError> {
        self.by_name(ADMIN_CERTS)
    }

    pub fn admin_cert(&self, sha256: &str) -> Result<Option<AdminCertRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(ADMIN_CERTS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let v = t.get(sha256)?;
        Ok(match v {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// The SSH console keys added through the API, by id.
    pub fn ssh_keys(&self) -> Result<Vec<(String, SshKeyRecord)>, MetaError> {
        self.by_name(SSH_KEYS)
    }

    /// Every node's BMC record, by node id.
    pub fn bmcs(&self) -> Result<Vec<(u64, BmcRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(BMCS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            out.push((k.value(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    pub fn bmc(&self, node: u64) -> Result<Option<BmcRecord>, MetaError> {
        Ok(self
            .bmcs()?
            .into_iter()
            .find(|(n, _)| *n == node)
            .map(|(_, r)| r))
    }

    /// The newest `limit` audit entries of all three tables, oldest first.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut out: Vec<AuditEntry> = Vec::new();
        for table in [AUDIT, AUDIT_STAFF, AUDIT_TENANTS] {
            let t = match tx.open_table(table) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            for e in t.iter()?.rev().take(limit) {
                out.push(serde_json::from_slice(e?.1.value())?);
            }
        }
        // Each table is in order; merged by time (stable: a table's order
        // stands for entries of the same millisecond).
        out.sort_by_key(|e| e.at_ms);
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }
}

/// The admin tables in a Raft snapshot: tokens, the audit, BMCs, SSH keys and
/// admin certificates (a node restored from a snapshot must know them as one
/// that applied the log does).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct AdminDump {
    tokens: Vec<(String, Vec<u8>)>,
    audit: Vec<(u64, Vec<u8>)>,
    #[serde(default)]
    audit_staff: Vec<(u64, Vec<u8>)>,
    #[serde(default)]
    audit_tenants: Vec<(u64, Vec<u8>)>,
    bmcs: Vec<(u64, Vec<u8>)>,
    ssh_keys: Vec<(String, Vec<u8>)>,
    certs: Vec<(String, Vec<u8>)>,
}

impl AdminDump {
    pub(crate) fn export(tx: &redb::ReadTransaction) -> Result<AdminDump, MetaError> {
        let by_name =
            |t: TableDefinition<&str, &[u8]>| -> Result<Vec<(String, Vec<u8>)>, MetaError> {
                let mut out = Vec::new();
                for e in tx.open_table(t)?.iter()? {
                    let (k, v) = e?;
                    out.push((k.value().to_string(), v.value().to_vec()));
                }
                Ok(out)
            };
        let by_number = |t: TableDefinition<u64, &[u8]>| -> Result<Vec<(u64, Vec<u8>)>, MetaError> {
            let mut out = Vec::new();
            for e in tx.open_table(t)?.iter()? {
                let (k, v) = e?;
                out.push((k.value(), v.value().to_vec()));
            }
            Ok(out)
        };
        Ok(AdminDump {
            tokens: by_name(ADMIN_TOKENS)?,
            audit: by_number(AUDIT)?,
            audit_staff: by_number(AUDIT_STAFF)?,
            audit_tenants: by_number(AUDIT_TENANTS)?,
            bmcs: by_number(BMCS)?,
            ssh_keys: by_name(SSH_KEYS)?,
            certs: by_name(ADMIN_CERTS)?,
        })
    }

    /// Replaces the admin tables with this dump's, inside `tx`.
    pub(crate) fn import(&self, tx: &redb::WriteTransaction) -> Result<(), MetaError> {
        for (t, rows) in [
            (ADMIN_TOKENS, &self.tokens),
            (SSH_KEYS, &self.ssh_keys),
            (ADMIN_CERTS, &self.certs),
        ] {
            tx.delete_table(t)?;
            let mut t = tx.open_table(t)?;
            for (k, v) in rows {
                t.insert(k.as_str(), v.as_slice())?;
            }
        }
        for (t, rows) in [
            (AUDIT, &self.audit),
            (AUDIT_STAFF, &self.audit_staff),
            (AUDIT_TENANTS, &self.audit_tenants),
            (BMCS, &self.bmcs),
        ] {
            tx.delete_table(t)?;
            let mut t = tx.open_table(t)?;
            for (k, v) in rows {
                t.insert(*k, v.as_slice())?;
            }
        }
        Ok(())
    }
}
