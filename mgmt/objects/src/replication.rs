//! What the replication shipper (`cairn_replication`) and the admin API need of
//! the store: who ships (the leader), the rules set with their secret wrapped,
//! a destination's secret opened, and a batch reported (the rules themselves
//! are `cairn_meta::replication`'s).

use crate::{ObjectError, ObjectStore};
use cairn_meta::{
    BucketChange, MetaError, Mutation, ObjectRecord, Replication, ReplicationStatus, ShipState,
};

/// What a destination's secret is wrapped for (never an access key's own AAD,
/// so one sealed secret cannot stand for the other).
fn aad(access_key: &str) -> String {
    format!("replication:{access_key}")
}

impl ObjectStore {
    /// This node proposes without forwarding (in a cluster: it leads), so the
    /// cluster's background workers run here.
    pub fn leads(&self) -> bool {
        self.log.leads()
    }

    /// Sets (or with `None` removes, backlog and all) the replication rules of
    /// the tenant's `bucket`. Each rule's `target.sealed_secret` comes in as the
    /// plain secret and is kept wrapped by the master key.
    pub async fn set_replication(
        &self,
        tenant: u64,
        bucket: &str,
        rules: Option<Replication>,
    ) -> Result<(), ObjectError> {
        let (bucket, _) = &self.resolve(tenant, bucket).await?;
        let rules = match rules {
            None => None,
            Some(mut r) => {
                for rule in &mut r.rules {
                    let t = &mut rule.target;
                    t.sealed_secret = self.seal_secret(&aad(&t.access_key), &t.sealed_secret)?;
                }
                Some(r)
            }
        };
        let m = Mutation::ChangeBucket {
            name: bucket.to_string(),
            change: BucketChange::Replication(rules),
        };
        self.commit(tenant, m, Vec::new()).await?;
        Ok(())
    }

    /// The tenant's `bucket`'s rules (secrets wrapped) and where its
    /// replication stands.
    pub async fn replication(
        &self,
        tenant: u64,
        bucket: &str,
    ) -> Result<(Option<Replication>, ReplicationStatus), ObjectError> {
        let (bucket, rec) = &self.resolve(tenant, bucket).await?;
        Ok((
            rec.replication.clone(),
            self.meta.replication_status(bucket)?,
        ))
    }

    /// S3's `x-amz-replication-status` for `rec`, version of `key` in the
    /// tenant's `bucket` (read after the request's own barrier): `REPLICA` for
    /// a replica shipped here, else where shipping it stands, if its bucket
    /// replicates it.
    pub fn replication_state(
        &self,
        tenant: u64,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
    ) -> Result<Option<&'static str>, ObjectError> {
        if rec.user_meta.contains_key(cairn_meta::REPLICA_OF) {
            return Ok(Some("REPLICA"));
        }
        let id = cairn_meta::bucket_id(tenant, bucket);
        let Some(r) = self.meta.bucket(&id)?.and_then(|b| b.replication) else {
            return Ok(None);
        };
        Ok(match self.meta.ship_state(&id, &r, key, &rec.version)? {
            None => None,
            Some(ShipState::Pending) => Some("PENDING"),
            Some(ShipState::Failed) => Some("FAILED"),
            Some(ShipState::Completed) => Some("COMPLETED"),
        })
    }

    /// A destination's secret, opened.
    pub fn open_target_secret(
        &self,
        t: &cairn_meta::ReplicationTarget,
    ) -> Result<String, ObjectError> {
        let p = self
            .key_provider()
            .ok_or_else(|| ObjectError::Sealing("no master key to open the secret with".into()))?;
        let w = hex::decode(&t.sealed_secret)
            .map_err(|e| ObjectError::Sealing(format!("a replication secret: {e}")))?;
        let s = p
            .unwrap_secret(&aad(&t.access_key), &w)
            .map_err(|e| ObjectError::Sealing(format!("a replication secret: {e}")))?;
        String::from_utf8(s.to_vec())
            .map_err(|_| ObjectError::Sealing("a replication secret is not UTF-8".into()))
    }

    /// Reports a shipped batch of bucket `bucket` (internal name) of `tenant`.
    pub async fn report_shipped(
        &self,
        tenant: u64,
        bucket: &str,
        done: Vec<u64>,
        failed: Vec<(u64, String)>,
        (bytes, elapsed_ms): (u64, u64),
    ) -> Result<(), ObjectError> {
        let m = Mutation::ReplicationDone {
            bucket: bucket.to_string(),
            done,
            failed,
            bytes,
            elapsed_ms,
            now_ms: cairn_meta::now_ms(),
        };
        match self.commit(tenant, m, Vec::new()).await {
            Ok(_) | Err(ObjectError::Meta(MetaError::NoSuchBucket(_))) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
