//! KV pools: which keyspace a session works in (`SELECT n`, `AUTH key/pool`), a
//! pool's default expiry, its capacity (a full caching pool evicts its oldest
//! values not pinned; a storing pool refuses), and pinned keys.

use crate::commands::Session;
use crate::expiry::this_write;
use crate::keys::{bucket_for, decode_key, encode_key};
use crate::reply::{error, ok};
use crate::RespError;
use bytes::Bytes;
use cairn_meta::{bucket_id, KvPool, MetaError, ObjectRecord};
use cairn_objects::ObjectError;
use tokio::io::AsyncWrite;

/// The user metadata that pins a key: a full pool never evicts it.
pub(crate) const PINNED: &str = "kv-pinned";
/// What a full caching pool frees beyond the write that needs room, as a share
/// of its capacity: one listing pass makes room for many writes.
const HEADROOM: u64 = 10;

/// The keyspace a session works in.
#[derive(Clone, Debug)]
pub(crate) struct Pool {
    /// The bucket's name within the tenant.
    pub bucket: String,
    /// The bucket's id (the RAM tier counts the pool's share under it).
    pub id: String,
    /// None: the tenant's default keyspace (database 0).
    pub kv: Option<KvPool>,
}

impl Pool {
    /// Whether the keyspace is an S3 bucket (a pool made with `--s3-bucket`).
    fn s3(&self) -> bool {
        !self.bucket.starts_with('_')
    }

    /// The object key of a Redis key. In the tenants' own keyspaces, every byte
    /// outside printable ASCII (and `%`) is escaped ([`encode_key`]), so any key
    /// is held; in an S3 pool the key is the object key itself, as S3 clients
    /// name it, so it must be UTF-8 (a key that is not would need an escape that
    /// another key could spell).
    pub fn object_key(&self, key: &[u8]) -> Result<String, RespError> {
        if !self.s3() {
            return Ok(encode_key(key));
        }
        std::str::from_utf8(key).map(str::to_string).map_err(|_| {
            RespError::BadKey("keys of a pool kept as an S3 bucket must be UTF-8".into())
        })
    }

    /// The Redis key of an object key, [`Pool::object_key`] undone.
    pub fn redis_key(&self, object: &str) -> Option<Vec<u8>> {
        match self.s3() {
            true => Some(object.as_bytes().to_vec()),
            false => decode_key(object),
        }
    }

    /// The tenant's default keyspace, made on its first write.
    pub fn default_for(tenant: u64) -> Pool {
        let bucket = bucket_for(tenant);
        Pool {
            id: bucket_id(tenant, &bucket),
            bucket,
            kv: None,
        }
    }
}

/// Which pool is asked for.
pub(crate) enum Which<'a> {
    Index(u32),
    Name(&'a str),
}

impl Session {
    /// Works in `pool` from now on; its RAM share is bounded as it says (read
    /// again each time a session takes the pool up).
    pub(crate) fn enter(&mut self, pool: Pool) {
        let cap = pool.kv.as_ref().and_then(|k| k.ram_bytes);
        self.store.ram().cap_group(&pool.id, cap);
        self.pool = pool;
    }

    /// The tenant's pool `which`, if it has one (`SELECT 0` is always the default).
    pub(crate) async fn find_pool(
        &self,
        tenant: u64,
        which: Which<'_>,
    ) -> Result<Option<Pool>, RespError> {
        if matches!(which, Which::Index(0)) {
            return Ok(Some(Pool::default_for(tenant)));
        }
        let buckets = self.store.list_buckets(tenant).await?;
        Ok(buckets.into_iter().find_map(|(name, b)| {
            let kv = b.kv?;
            let hit = match which {
                Which::Index(i) => kv.index == i,
                Which::Name(n) => kv.name == n,
            };
            hit.then(|| Pool {
                id: bucket_id(tenant, &name),
                bucket: name,
                kv: Some(kv),
            })
        }))
    }

    /// `SELECT n`: the tenant's pool with index `n`.
    pub(crate) async fn select<W: AsyncWrite + Unpin>(
        &mut self,
        tenant: u64,
        db: &Bytes,
        w: &mut W,
    ) -> Result<(), RespError> {
        let Some(i) = std::str::from_utf8(db)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        else {
            return error(w, "ERR value is not an integer or out of range").await;
        };
        let Ok(i) = u32::try_from(i) else {
            return error(w, "ERR DB index is out of range").await;
        };
        match self.find_pool(tenant, Which::Index(i)).await? {
            Some(p) => {
                self.enter(p);
                ok(w).await
            }
            None => error(w, "ERR DB index is out of range").await,
        }
    }

    /// `CAIRN.PIN key` / `CAIRN.UNPIN key`: a pinned key is never evicted from a
    /// full pool (it still expires, if it has an expiry). `:1` when it changed.
    pub(crate) async fn pin<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        key: &Bytes,
        pinned: bool,
        w: &mut W,
    ) -> Result<(), RespError> {
        self.edit_meta(tenant, key, w, |meta| match pinned {
            true => meta.insert(PINNED.into(), "1".into()).is_none(),
            false => meta.remove(PINNED).is_some(),
        })
        .await
    }

    /// Before a write of `len` bytes into a caching pool: when the pool's
    /// capacity would be passed, its oldest values not pinned are deleted (each
    /// only if it is still the write found), down to a tenth under the capacity.
    /// A storing pool, or the default keyspace, is left to refuse the write.
    pub(crate) async fn make_room(&self, tenant: u64, len: u64) -> Result<(), RespError> {
        let Some(kv) = self.pool.kv.as_ref().filter(|k| k.evict) else {
            return Ok(());
        };
        // This node's copy of the metadata, no barrier: the commit checks the
        // quota against the cluster's, and a write refused there makes room again.
        let meta = self.store.meta();
        let local = |e: MetaError| RespError::Objects(e.into());
        let Some(max) = meta
            .bucket(&self.pool.id)
            .map_err(local)?
            .and_then(|b| b.quota.max_bytes)
        else {
            return Ok(());
        };
        if len > max {
            // Evicting everything would not make room: refuse before losing any.
            return Err(RespError::Objects(ObjectError::Meta(
                MetaError::QuotaExceeded(format!(
                    "a value of {len} bytes is larger than pool {}'s capacity of {max}",
                    kv.name
                )),
            )));
        }
        let used = meta.bucket_usage(&self.pool.id).map_err(local)?.bytes;
        if used + len <= max {
            return Ok(());
        }
        let target = max.saturating_sub(max / HEADROOM).saturating_sub(len);
        let mut old: Vec<(String, ObjectRecord)> = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .store
                .list_objects(tenant, &self.pool.bucket, "", after, None, 1000)
                .await?;
            old.extend(
                page.objects
                    .into_iter()
                    .filter(|(_, r)| !r.user_meta.contains_key(PINNED)),
            );
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        old.sort_by_key(|(_, r)| r.modified_ms);
        let (mut left, mut dropped) = (used, 0);
        for (key, r) in old {
            if left <= target {
                break;
            }
            let gone = self
                .store
                .delete_object(tenant, &self.pool.bucket, &key, this_write(&r))
                .await;
            if gone.is_ok() {
                left = left.saturating_sub(r.size);
                dropped += 1;
            }
        }
        if dropped > 0 {
            tracing::debug!(pool = %kv.name, dropped, "KV pool full: oldest values evicted");
            self.store.ram().count_dropped(&self.pool.id, dropped);
        }
        Ok(())
    }
}
