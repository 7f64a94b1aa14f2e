//! The exports: buckets whose record carries an [`NfsExport`], each mounted as
//! `/<tenant>/<bucket>` by the clients its networks allow. Read from the
//! metadata and kept for [`REFRESH`], so a change through the admin API holds
//! on every node within that time.

use crate::handle::export_id;
use cairn_meta::{MetaStore, NfsExport, ROOT_TENANT};
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a read of the exports serves.
pub const REFRESH: Duration = Duration::from_secs(2);

/// One exported bucket.
#[derive(Debug)]
pub struct Export {
    pub id: u64,
    pub tenant: u64,
    /// The bucket's S3 name (what the object store's calls take).
    pub bucket: String,
    /// `/<tenant>/<bucket>`.
    pub path: String,
    pub conf: NfsExport,
    nets: Vec<IpNet>,
    pub versioned: bool,
    pub created_ms: i64,
}

impl Export {
    /// Whether a client at `addr` may reach it (an IPv4 client seen as an
    /// IPv4-mapped IPv6 address counts as its IPv4 address).
    pub fn allows(&self, addr: IpAddr) -> bool {
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&addr))
    }
}

/// Exports by id.
pub type ById = Arc<HashMap<u64, Arc<Export>>>;

/// The exports, by id, as last read.
pub struct Exports {
    meta: MetaStore,
    read: Mutex<Option<(Instant, ById)>>,
}

impl std::fmt::Debug for Exports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exports").finish_non_exhaustive()
    }
}

impl Exports {
    pub fn new(meta: MetaStore) -> Exports {
        Exports {
            meta,
            read: Mutex::new(None),
        }
    }

    /// Every export, read again if the last read is older than [`REFRESH`]. A
    /// failed read leaves the last one in place (or none).
    pub fn all(&self) -> ById {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, map)) = &*read {
            if at.elapsed() < REFRESH {
                return map.clone();
            }
        }
        let map = match self.load() {
            Ok(m) => Arc::new(m),
            Err(e) => {
                tracing::warn!("reading the NFS exports failed: {e}");
                return read.as_ref().map(|(_, m)| m.clone()).unwrap_or_default();
            }
        };
        *read = Some((Instant::now(), map.clone()));
        map
    }

    pub fn get(&self, id: u64) -> Option<Arc<Export>> {
        self.all().get(&id).cloned()
    }

    /// Whether any export allows a client at `addr` (one none allows is not
    /// served at all).
    pub fn any_allows(&self, addr: IpAddr) -> bool {
        self.all().values().any(|e| e.allows(addr))
    }

    fn load(&self) -> Result<HashMap<u64, Arc<Export>>, cairn_meta::MetaError> {
        let names: HashMap<u64, String> = self
            .meta
            .tenants()?
            .into_iter()
            .map(|(id, t)| (id, t.name))
            .collect();
        let mut out = HashMap::new();
        for (bucket_id, b) in self.meta.buckets()? {
            let Some(conf) = b.nfs else { continue };
            let tenant = match (b.tenant, names.get(&b.tenant)) {
                (ROOT_TENANT, _) => "root".to_string(),
                (_, Some(n)) => n.clone(),
                (t, None) => format!("{t:016x}"),
            };
            let bucket = cairn_meta::bucket_name(&bucket_id).to_string();
            let nets = conf
                .clients
                .iter()
                .filter_map(|c| match c.parse::<IpNet>() {
                    Ok(n) => Some(n),
                    Err(_) => {
                        tracing::warn!("export of {bucket_id}: client network {c:?} ignored");
                        None
                    }
                })
                .collect();
            let id = export_id(&bucket_id);
            out.insert(
                id,
                Arc::new(Export {
                    id,
                    tenant: b.tenant,
                    path: format!("/{tenant}/{bucket}"),
                    bucket,
                    conf,
                    nets,
                    versioned: b.versioning.is_some(),
                    created_ms: b.created_ms,
                }),
            );
        }
        Ok(out)
    }
}
