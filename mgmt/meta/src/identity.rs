//! Who may act: tenants, the users within a tenant, and the access keys users
//! sign with. Replicated like every other record (the mutations below go through
//! the Raft log in a cluster), so every node authenticates every key.
//!
//! The root identity (the node's root key pair, tenant [`ROOT_TENANT`]) is not a
//! record here: it administers tenants through the admin API and owns buckets of
//! its own, and it cannot address a tenant's buckets (see [`bucket_id`]).

use crate::{MetaError, MetaStore, ROOT_TENANT};
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

pub(crate) const TENANTS: TableDefinition<u64, &[u8]> = TableDefinition::new("tenants");
pub(crate) const USERS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("users");
pub(crate) const KEYS: TableDefinition<&str, &[u8]> = TableDefinition::new("access_keys");
/// Tenant id -> its key-encryption key, wrapped ([`TenantKeyRecord`]). Apart from
/// the tenant records so that the root tenant, which has none, has a key too.
pub(crate) const TENANT_KEYS: TableDefinition<u64, &[u8]> = TableDefinition::new("tenant_keys");
/// The system record holding the master key's fingerprint.
const MASTER_KEY: &str = "master_key";

/// The name a tenant's bucket has in the metadata: bucket names are per tenant
/// (two tenants may each own `data`). The root tenant's buckets keep their bare
/// names (as before tenants existed); another tenant's carry its id and a `:`,
/// which no S3 bucket name contains, so no name of one tenant reaches another's.
pub fn bucket_id(tenant: u64, name: &str) -> String {
    if tenant == ROOT_TENANT {
        name.to_string()
    } else {
        format!("{tenant:016x}:{name}")
    }
}

/// The S3 name of a bucket from its metadata name (see [`bucket_id`]).
pub fn bucket_name(id: &str) -> &str {
    id.split_once(':').map_or(id, |(_, name)| name)
}

/// What a user may do with its tenant's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Everything in the tenant: buckets, objects, and the tenant's users and keys.
    Admin,
    /// Buckets and objects: read, write, delete.
    ReadWrite,
    /// Read and list only.
    ReadOnly,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::ReadWrite => "read-write",
            Role::ReadOnly => "read-only",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        [Role::Admin, Role::ReadWrite, Role::ReadOnly]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// A tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// Unique among tenants; what operators name it by.
    pub name: String,
    pub created_ms: i64,
    /// A disabled tenant's keys are refused (its data stays).
    #[serde(default)]
    pub disabled: bool,
    /// What all the tenant's buckets together may hold.
    #[serde(default, skip_serializing_if = "crate::Quota::is_none")]
    pub quota: crate::Quota,
    /// Its rates and its weight on a busy node (see `cairn_qos`).
    #[serde(default, skip_serializing_if = "cairn_qos::Limits::is_none")]
    pub qos: cairn_qos::Limits,
}

/// A user of a tenant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserRecord {
    pub role: Role,
    pub created_ms: i64,
    #[serde(default)]
    pub disabled: bool,
}

/// An access key: whose it is, and the secret SigV4 signatures are checked with
/// (SigV4 derives its signing key from the secret itself, so the secret, not a
/// hash of it, must be at hand). The secret is kept wrapped by the cluster's
/// master key (`sealed_secret`); keys made before Cairn wrapped them keep it in
/// `secret` as it was.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub tenant: u64,
    pub user: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub secret: String,
    /// The secret wrapped by the master key (hex; AAD: the access key).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sealed_secret: String,
    pub created_ms: i64,
}

impl std::fmt::Debug for KeyRecord {
    // Never print a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KeyRecord(tenant={}, user={}, secret=<redacted>)",
            self.tenant, self.user
        )
    }
}

/// A tenant's key-encryption key as the metadata keeps it: wrapped by the master
/// key `master` names (a fingerprint, not the key). Deleting this record is what
/// crypto-shreds the tenant: every data key of its extents is wrapped by it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantKeyRecord {
    /// Written into the header of every chunk sealed under this key.
    pub key_id: u32,
    /// The wrapped key, hex.
    pub wrapped: String,
    /// The fingerprint of the master key that wrapped it.
    pub master: String,
    pub created_ms: i64,
}

impl std::fmt::Debug for TenantKeyRecord {
    // Wrapped key material stays out of logs all the same.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TenantKeyRecord(key_id={}, master={})",
            self.key_id, self.master
        )
    }
}

/// A change to the identities (one arm of [`crate::Mutation::Identity`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum IdentityChange {
    CreateTenant {
        id: u64,
        record: TenantRecord,
        /// Its key-encryption key; none: its data is stored unencrypted.
        #[serde(default)]
        key: Option<TenantKeyRecord>,
    },
    /// Gives a tenant (or the root tenant) a key when it has none; a no-op when
    /// it has one (two nodes giving the root its first key at once agree on the
    /// first).
    SetTenantKey {
        id: u64,
        key: TenantKeyRecord,
    },
    /// Sets (or with an empty quota, lifts) a tenant's quota.
    SetTenantQuota {
        id: u64,
        quota: crate::Quota,
    },
    /// Records the fingerprint of the cluster's master key, once: the first
    /// node to offer one sets it; the same again is a no-op; another is refused
    /// ([`MetaError::MasterKeyMismatch`]). Nodes offer theirs before wrapping
    /// anything, so everything in the metadata is wrapped by one key.
    SetMasterKey {
        fingerprint: String,
    },
    /// Sets (or with empty limits, lifts) a tenant's rates and weight.
    SetTenantQos {
        id: u64,
        qos: cairn_qos::Limits,
    },
    /// Enables or disables a tenant.
    SetTenantDisabled {
        id: u64,
        disabled: bool,
    },
    /// Deletes a tenant with its users, access keys and key-encryption key:
    /// one with buckets left is refused unless `purge`, which deletes its
    /// buckets and objects in the same transaction (their chunks, ciphertext
    /// under the deleted key, are collected in the background).
    DeleteTenant {
        id: u64,
        #[serde(default)]
        purge: bool,
    },
    CreateUser {
        tenant: u64,
        name: String,
        record: UserRecord,
    },
    SetUserDisabled {
        tenant: u64,
        name: String,
        disabled: bool,
    },
    /// Deletes a user and its keys.
    DeleteUser {
        tenant: u64,
        name: String,
    },
    CreateKey {
        access_key: String,
        record: KeyRecord,
    },
    DeleteKey {
        access_key: String,
    },
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>, MetaError> {
    Ok(serde_json::to_vec(v)?)
}

/// Applies one change inside the caller's transaction.
pub(crate) fn apply(
    tx: &redb::WriteTransaction,
    buckets: &mut redb::Table<&str, &[u8]>,
    objects: &redb::Table<(&str, &str), &[u8]>,
    c: &IdentityChange,
) -> Result<(), MetaError> {
    let mut tenants = tx.open_table(TENANTS)?;
    let mut users = tx.open_table(USERS)?;
    let mut keys = tx.open_table(KEYS)?;
    let mut tenant_keys = tx.open_table(TENANT_KEYS)?;
    let tenant = |t: &redb::Table<u64, &[u8]>, id: u64| -> Result<TenantRecord, MetaError> {
        match t.get(id)? {
            Some(v) => Ok(serde_json::from_slice(v.value())?),
            None => Err(MetaError::NoSuchTenant(format!("{id:016x}"))),
        }
    };
    let user = |t: &redb::Table<(u64, &str), &[u8]>,
                id: u64,
                name: &str|
     -> Result<UserRecord, MetaError> {
        match t.get((id, name))? {
            Some(v) => Ok(serde_json::from_slice(v.value())?),
            None => Err(MetaError::NoSuchUser(name.to_string())),
        }
    };
    match c {
        IdentityChange::CreateTenant { id, record, key } => {
            if *id == ROOT_TENANT || tenants.get(*id)?.is_some() {
                return Err(MetaError::TenantExists(format!("{id:016x}")));
            }
            for e in tenants.iter()? {
                let t: TenantRecord = serde_json::from_slice(e?.1.value())?;
                if t.name == record.name {
                    return Err(MetaError::TenantExists(record.name.clone()));
                }
            }
            tenants.insert(*id, json(record)?.as_slice())?;
            if let Some(k) = key {
                tenant_keys.insert(*id, json(k)?.as_slice())?;
            }
        }
        IdentityChange::SetTenantKey { id, key } => {
            if *id != ROOT_TENANT {
                tenant(&tenants, *id)?;
            }
            if tenant_keys.get(*id)?.is_none() {
                tenant_keys.insert(*id, json(key)?.as_slice())?;
            }
        }
        IdentityChange::SetMasterKey { fingerprint } => {
            let mut system = tx.open_table(crate::SYSTEM)?;
            let recorded = system
                .get(MASTER_KEY)?
                .map(|v| String::from_utf8_lossy(v.value()).into_owned());
            match recorded {
                None => {
                    system.insert(MASTER_KEY, fingerprint.as_bytes())?;
                }
                Some(r) if r == *fingerprint => {}
                Some(cluster) => {
                    return Err(MetaError::MasterKeyMismatch {
                        cluster,
                        offered: fingerprint.clone(),
                    })
                }
            }
        }
        IdentityChange::SetTenantDisabled { id, disabled } => {
            let mut t = tenant(&tenants, *id)?;
            t.disabled = *disabled;
            tenants.insert(*id, json(&t)?.as_slice())?;
        }
        IdentityChange::SetTenantQuota { id, quota } => {
            let mut t = tenant(&tenants, *id)?;
            t.quota = *quota;
            tenants.insert(*id, json(&t)?.as_slice())?;
        }
        IdentityChange::SetTenantQos { id, qos } => {
            let mut t = tenant(&tenants, *id)?;
            t.qos = *qos;
            tenants.insert(*id, json(&t)?.as_slice())?;
        }
        IdentityChange::DeleteTenant { id, .. } => {
            tenant(&tenants, *id)?;
            // Buckets named with a leading `_` are kept by front ends other than
            // S3 (RESP's `_resp.<tenant>`), which a tenant cannot delete through
            // S3: empty, they go with the tenant; holding anything, they keep it.
            let mut service = Vec::new();
            for e in buckets.iter()? {
                let (k, v) = e?;
                let b: crate::BucketRecord = serde_json::from_slice(v.value())?;
                if b.tenant != *id {
                    continue;
                }
                let name = bucket_name(k.value());
                let empty = objects
                    .range((k.value(), "")..)?
                    .next()
                    .transpose()?
                    .is_none_or(|(o, _)| o.value().0 != k.value());
                if !(name.starts_with('_') && empty) {
                    return Err(MetaError::TenantNotEmpty(if name.starts_with("_resp.") {
                        format!("{name}, its RESP keyspace (DEL its keys through RESP)")
                    } else {
                        name.to_string()
                    }));
                }
                service.push(k.value().to_string());
            }
            for b in service {
                buckets.remove(b.as_str())?;
                crate::usage::forget_bucket(tx, *id, &b)?;
            }
            tenants.remove(*id)?;
            tenant_keys.remove(*id)?;
            let mut names = Vec::new();
            for e in users.range((*id, "")..)? {
                let (k, _) = e?;
                let (t, n) = k.value();
                if t != *id {
                    break;
                }
                names.push(n.to_string());
            }
            for n in names {
                users.remove((*id, n.as_str()))?;
            }
            remove_keys(&mut keys, |k| k.tenant == *id)?;
        }
        IdentityChange::CreateUser {
            tenant: t,
            name,
            record,
        } => {
            tenant(&tenants, *t)?;
            if users.get((*t, name.as_str()))?.is_some() {
                return Err(MetaError::UserExists(name.clone()));
            }
            users.insert((*t, name.as_str()), json(record)?.as_slice())?;
        }
        IdentityChange::SetUserDisabled {
            tenant: t,
            name,
            disabled,
        } => {
            let mut u = user(&users, *t, name)?;
            u.disabled = *disabled;
            users.insert((*t, name.as_str()), json(&u)?.as_slice())?;
        }
        IdentityChange::DeleteUser { tenant: t, name } => {
            user(&users, *t, name)?;
            users.remove((*t, name.as_str()))?;
            remove_keys(&mut keys, |k| k.tenant == *t && k.user == *name)?;
        }
        IdentityChange::CreateKey { access_key, record } => {
            user(&users, record.tenant, &record.user)?;
            if keys.get(access_key.as_str())?.is_some() {
                return Err(MetaError::KeyExists);
            }
            keys.insert(access_key.as_str(), json(record)?.as_slice())?;
        }
        IdentityChange::DeleteKey { access_key } => {
            if keys.remove(access_key.as_str())?.is_none() {
                return Err(MetaError::NoSuchAccessKey(access_key.clone()));
            }
        }
    }
    Ok(())
}

/// Whether tenant `id` exists, inside a write transaction.
pub(crate) fn tenant_exists(tx: &redb::WriteTransaction, id: u64) -> Result<bool, MetaError> {
    Ok(tx.open_table(TENANTS)?.get(id)?.is_some())
}

fn remove_keys(
    keys: &mut redb::Table<&str, &[u8]>,
    doomed: impl Fn(&KeyRecord) -> bool,
) -> Result<(), MetaError> {
    let mut gone = Vec::new();
    for e in keys.iter()? {
        let (k, v) = e?;
        let r: KeyRecord = serde_json::from_slice(v.value())?;
        if doomed(&r) {
            gone.push(k.value().to_string());
        }
    }
    for k in gone {
        keys.remove(k.as_str())?;
    }
    Ok(())
}

/// The identity tables as a snapshot carries them.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct IdentityDump {
    tenants: Vec<(u64, Vec<u8>)>,
    users: Vec<(u64, String, Vec<u8>)>,
    keys: Vec<(String, Vec<u8>)>,
    #[serde(default)]
    tenant_keys: Vec<(u64, Vec<u8>)>,
}

impl IdentityDump {
    pub(crate) fn export(tx: &redb::ReadTransaction) -> Result<IdentityDump, MetaError> {
        let mut d = IdentityDump::default();
        for e in tx.open_table(TENANTS)?.iter()? {
            let (k, v) = e?;
            d.tenants.push((k.value(), v.value().to_vec()));
        }
        for e in tx.open_table(USERS)?.iter()? {
            let (k, v) = e?;
            let (t, n) = k.value();
            d.users.push((t, n.to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(KEYS)?.iter()? {
            let (k, v) = e?;
            d.keys.push((k.value().to_string(), v.value().to_vec()));
        }
        for e in tx.open_table(TENANT_KEYS)?.iter()? {
            let (k, v) = e?;
            d.tenant_keys.push((k.value(), v.value().to_vec()));
        }
        Ok(d)
    }

    /// Replaces the identity tables with this dump's, inside `tx`.
    pub(crate) fn import(&self, tx: &redb::WriteTransaction) -> Result<(), MetaError> {
        tx.delete_table(TENANTS)?;
        tx.delete_table(USERS)?;
        tx.delete_table(KEYS)?;
        tx.delete_table(TENANT_KEYS)?;
        let mut t = tx.open_table(TENANTS)?;
        for (k, v) in &self.tenants {
            t.insert(*k, v.as_slice())?;
        }
        let mut t = tx.open_table(USERS)?;
        for (id, n, v) in &self.users {
            t.insert((*id, n.as_str()), v.as_slice())?;
        }
        let mut t = tx.open_table(KEYS)?;
        for (k, v) in &self.keys {
            t.insert(k.as_str(), v.as_slice())?;
        }
        let mut t = tx.open_table(TENANT_KEYS)?;
        for (k, v) in &self.tenant_keys {
            t.insert(*k, v.as_slice())?;
        }
        Ok(())
    }
}

/// Reads of the identities (local: they are as current as this replica).
impl MetaStore {
    pub fn tenants(&self) -> Result<Vec<(u64, TenantRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for e in tx.open_table(TENANTS)?.iter()? {
            let (k, v) = e?;
            out.push((k.value(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    pub fn tenant(&self, id: u64) -> Result<Option<TenantRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TENANTS)?;
        let v = t.get(id)?;
        Ok(match v {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// The tenant's key-encryption key, wrapped (none: it stores plaintext, or
    /// it was deleted).
    pub fn tenant_key(&self, id: u64) -> Result<Option<TenantKeyRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(TENANT_KEYS)?;
        let v = t.get(id)?;
        Ok(match v {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// Every tenant key record (the start checks their master key's fingerprint).
    pub fn tenant_keys(&self) -> Result<Vec<(u64, TenantKeyRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for e in tx.open_table(TENANT_KEYS)?.iter()? {
            let (k, v) = e?;
            out.push((k.value(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    /// The fingerprint of the cluster's master key, once a node recorded it.
    pub fn master_key(&self) -> Result<Option<String>, MetaError> {
        Ok(self
            .system(MASTER_KEY)?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// One access key whose secret is wrapped by the master key, if any: the
    /// key file can be tried on it (secrets do not name their master key).
    pub fn a_sealed_secret(&self) -> Result<Option<(String, String)>, MetaError> {
        let tx = self.db.begin_read()?;
        for e in tx.open_table(KEYS)?.iter()? {
            let (k, v) = e?;
            let r: KeyRecord = serde_json::from_slice(v.value())?;
            if !r.sealed_secret.is_empty() {
                return Ok(Some((k.value().to_string(), r.sealed_secret)));
            }
        }
        Ok(None)
    }

    /// The tenant named `name`, with its id.
    pub fn tenant_named(&self, name: &str) -> Result<Option<(u64, TenantRecord)>, MetaError> {
        Ok(self.tenants()?.into_iter().find(|(_, t)| t.name == name))
    }

    pub fn users(&self, tenant: u64) -> Result<Vec<(String, UserRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(USERS)?;
        let mut out = Vec::new();
        for e in t.range((tenant, "")..)? {
            let (k, v) = e?;
            let (id, name) = k.value();
            if id != tenant {
                break;
            }
            out.push((name.to_string(), serde_json::from_slice(v.value())?));
        }
        Ok(out)
    }

    pub fn user(&self, tenant: u64, name: &str) -> Result<Option<UserRecord>, MetaError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(USERS)?;
        let v = t.get((tenant, name))?;
        Ok(match v {
            Some(v) => Some(serde_json::from_slice(v.value())?),
            None => None,
        })
    }

    /// An access key with its user and tenant, read in one transaction (one
    /// consistent state, and one read per request on the authentication path);
    /// none if any of the three is missing.
    pub fn key_holder(
        &self,
        access_key: &str,
    ) -> Result<Option<(KeyRecord, UserRecord, TenantRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let Some(k) = tx.open_table(KEYS)?.get(access_key)? else {
            return Ok(None);
        };
        let k: KeyRecord = serde_json::from_slice(k.value())?;
        let Some(u) = tx.open_table(USERS)?.get((k.tenant, k.user.as_str()))? else {
            return Ok(None);
        };
        let u: UserRecord = serde_json::from_slice(u.value())?;
        let Some(t) = tx.open_table(TENANTS)?.get(k.tenant)? else {
            return Ok(None);
        };
        let t: TenantRecord = serde_json::from_slice(t.value())?;
        Ok(Some((k, u, t)))
    }

    /// Every access key of `tenant` (of one user when `user` is given).
    pub fn access_keys(
        &self,
        tenant: u64,
        user: Option<&str>,
    ) -> Result<Vec<(String, KeyRecord)>, MetaError> {
        let tx = self.db.begin_read()?;
        let mut out = Vec::new();
        for e in tx.open_table(KEYS)?.iter()? {
            let (k, v) = e?;
            let r: KeyRecord = serde_json::from_slice(v.value())?;
            if r.tenant == tenant && user.is_none_or(|u| u == r.user) {
                out.push((k.value().to_string(), r));
            }
        }
        Ok(out)
    }
}
