//! The writes: SET (with its options) and the one way a value is stored.

use crate::commands::{now, Session};
use crate::expiry::{self, expired, EXPIRES};
use crate::reply::{error, nil, ok};
use crate::RespError;
use bytes::Bytes;
use cairn_meta::{MetaError, Precondition};
use cairn_objects::{Etag, ObjectAttrs, ObjectError};
use tokio::io::AsyncWrite;

/// When a written value expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The pool's default expiry, if it has one.
    Default,
    /// At this Unix time in ms.
    At(i64),
    /// Never (KEEPTTL of a value without one).
    Never,
}

impl Session {
    pub(crate) async fn set<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        key: &[u8],
        value: Bytes,
        opts: &[Bytes],
        w: &mut W,
    ) -> Result<(), RespError> {
        let mut expires = Expiry::Default;
        let mut keep_ttl = false;
        let mut cond = Precondition::default();
        let mut i = 0;
        while i < opts.len() {
            let o = opts[i].to_ascii_uppercase();
            let timed = expires != Expiry::Default || keep_ttl;
            match o.as_slice() {
                b"NX" if cond.if_match.is_none() => cond.if_none_match_any = true,
                b"XX" if !cond.if_none_match_any => cond.if_match = Some("*".into()),
                b"KEEPTTL" if !timed => keep_ttl = true,
                b"EX" | b"PX" | b"EXAT" | b"PXAT" if !timed && i + 1 < opts.len() => {
                    let n = std::str::from_utf8(&opts[i + 1])
                        .ok()
                        .and_then(|s| s.parse::<i64>().ok())
                        .filter(|n| *n > 0 && *n < i64::MAX / 1000);
                    let Some(n) = n else {
                        return error(w, "ERR invalid expire time in 'set' command").await;
                    };
                    expires = Expiry::At(match o.as_slice() {
                        b"EX" => now().saturating_add(n * 1000),
                        b"PX" => now().saturating_add(n),
                        b"EXAT" => n * 1000,
                        _ => n,
                    });
                    i += 1;
                }
                _ => return error(w, "ERR syntax error").await,
            }
            i += 1;
        }
        // An expired key is no key, for NX and XX too, though its object may
        // not be deleted yet: NX replaces exactly that expired write, XX fails.
        // KEEPTTL keeps the expiry of a live value it replaces.
        if cond.if_none_match_any || cond.if_match.is_some() || keep_ttl {
            let found = self
                .lookup_raw(tenant, &[Bytes::copy_from_slice(key)])
                .await?
                .pop()
                .flatten();
            match found {
                Some(r) if expired(&r, now()) => {
                    if cond.if_match.is_some() {
                        return nil(w).await;
                    }
                    if cond.if_none_match_any {
                        cond = expiry::this_write(&r);
                    }
                }
                Some(r) if keep_ttl => {
                    expires = match expiry::expiry(&r) {
                        Some(at) => Expiry::At(at),
                        None => Expiry::Never,
                    }
                }
                _ => {}
            }
        }
        match self.put(tenant, key, value, expires, cond).await {
            Ok(()) => ok(w).await,
            // NX on a present key, XX on a missing one: Redis answers nil.
            Err(RespError::Objects(ObjectError::Meta(
                MetaError::PreconditionFailed | MetaError::NoSuchKey(_),
            ))) => nil(w).await,
            Err(e) => Err(e),
        }
    }

    /// Stores one value as the object of `key`, expiring as `expires` says,
    /// creating the tenant's bucket on its first write. The value is already one
    /// buffer: it is handed over as a one-item stream, not copied.
    pub(crate) async fn put(
        &self,
        tenant: u64,
        key: &[u8],
        value: Bytes,
        expires: Expiry,
        cond: Precondition,
    ) -> Result<(), RespError> {
        let bucket = self.pool.bucket.clone();
        // A named pool's keyspace is made with the pool; only the default one is
        // made here (a pool deleted meanwhile is told as a missing bucket).
        if self.pool.kv.is_none() && !self.bucket_exists(tenant).await? {
            match self.store.create_bucket(tenant, &bucket, None).await {
                // Another connection (or node) created it first.
                Ok(()) | Err(ObjectError::Meta(MetaError::BucketExists(_))) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // RESP clients never see an ETag: the write's id stands in for the MD5,
        // which would be the costliest pass over the value.
        let mut attrs = ObjectAttrs {
            etag: Etag::Write,
            ..Default::default()
        };
        let at = match expires {
            Expiry::At(at) => Some(at),
            Expiry::Never => None,
            Expiry::Default => {
                let ttl = self.pool.kv.as_ref().and_then(|k| k.ttl_ms);
                ttl.map(|ms| now().saturating_add(ms))
            }
        };
        if let Some(at) = at {
            attrs.user_meta.insert(EXPIRES.into(), at.to_string());
        }
        let len = value.len() as u64;
        self.store.ram().count_traffic(&self.pool.id, len, 0);
        // A caching pool makes room first; writers racing for the same room may
        // still find it taken at commit, and make room again (a few times).
        let evicting = self.pool.kv.as_ref().is_some_and(|k| k.evict);
        let mut tries = 0;
        let rec = loop {
            self.make_room(tenant, len).await?;
            let body = futures::stream::iter([Ok::<_, std::convert::Infallible>(value.clone())]);
            let put = self
                .store
                .put_object(
                    tenant,
                    &bucket,
                    &self.pool.object_key(key)?,
                    body,
                    Some(len),
                    attrs.clone(),
                    cond.clone(),
                )
                .await;
            match put {
                Err(ObjectError::Meta(MetaError::QuotaExceeded(_))) if evicting && tries < 3 => {
                    tries += 1;
                }
                r => break r?,
            }
        };
        let held = value;
        // Written, so likely read back soon (by this node or, after their first
        // read, by others): it stays in RAM, at the cost of no copy.
        self.store.hold(tenant, &self.pool.id, &rec, &held);
        Ok(())
    }
}
