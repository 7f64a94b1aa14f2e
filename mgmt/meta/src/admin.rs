//! The admin API's own records, replicated like every other: admin tokens (by
//! id, holding only the SHA-256 of their secret) and the audit table, the last
//! [`AUDIT_KEEP`] mutating calls served by any node.

use crate::{MetaError, MetaStore};
use cairn_adminapi::{AuditEntry, Role};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

pub(crate) const ADMIN_TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("admin_tokens");
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");

/// Audit entries kept; the oldest go first.
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
            let mut t = tx.open_table(AUDIT)?;
            let next = t.last()?.map_or(0, |(k, _)| k.value() + 1);
            t.insert(next, serde_json::to_vec(entry)?.as_slice())?;
            while t.len()? > AUDIT_KEEP {
                if t.pop_first()?.is_none() {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Reads of the admin records (local: as current as this replica).
impl MetaStore {
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
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(ADMIN_TOKENS) {
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

    /// The newest `limit` audit entries, oldest first.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = match tx.open_table(AUDIT) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        for e in t.iter()?.rev().take(limit) {
            out.push(serde_json::from_slice(e?.1.value())?);
        }
        out.reverse();
        Ok(out)
    }
}
