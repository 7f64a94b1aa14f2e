//! The commit contract between the object layer and the metadata log.
//!
//! Fragments are written first, then a manifest naming them is proposed, then what
//! the commit unreferenced is freed. Each proposal carries a request id and is
//! applied at most once, so its outcome is exact:
//!
//! - **Committed**: the extents it replaced are freed (after a grace period for
//!   reads in progress). `freed` never contains the new record's own extents.
//! - **Rejected**: nothing references what was just written; it is freed now.
//! - **Unknown** (the answer was lost): nothing is freed on the strength of it. A
//!   fence under the same request id settles it — inline once, then in the
//!   background with back-off — and only a settled outcome frees anything. If it
//!   cannot be settled, the chunks are left to the collector, which frees only
//!   what no manifest references.
//!
//! A commit runs in a task of its own: a client that hangs up mid-commit must not
//! cancel the step between "maybe committed" and "freed accordingly".

use crate::{chunk_id, Fabric, ObjectError};
use cairn_chunkproto::Request;
use cairn_meta::{
    Applied, Commit, Extent, Layout, MetaError, MetaLog, Mutation, Proposal, RequestId,
};
use std::sync::Arc;
use std::time::Duration;

/// How long an unknown outcome is pursued in the background before it is left to
/// the collector.
const SETTLE_FOR: Duration = Duration::from_secs(600);

/// What a commit needs, owned, so it can run detached from the request.
#[derive(Clone)]
pub(crate) struct Committer {
    pub(crate) log: Arc<dyn MetaLog>,
    pub(crate) chunks: Fabric,
    pub(crate) grace: Duration,
    pub(crate) readers: crate::pins::Readers,
    /// What an overwrite or delete frees leaves the RAM tier too (reads already
    /// holding its bytes keep them: they are reference-counted).
    pub(crate) ram: Arc<crate::RamTier>,
}

impl Committer {
    /// Proposes `m`, which references the freshly written `written` extents (and
    /// nothing else references them), and frees exactly what its outcome allows.
    pub(crate) async fn commit(
        self,
        tenant: u64,
        m: Mutation,
        written: Vec<Extent>,
    ) -> Result<Applied, ObjectError> {
        let task = tokio::spawn(self.commit_detached(tenant, m, written));
        task.await
            .map_err(|e| ObjectError::Unavailable(format!("commit task failed: {e}")))?
    }

    async fn commit_detached(
        self,
        tenant: u64,
        m: Mutation,
        written: Vec<Extent>,
    ) -> Result<Applied, ObjectError> {
        // The fragments are durable and nothing names them yet.
        fail::fail_point!("objects::crash-before-commit", |_| {
            tracing::warn!("failpoint objects::crash-before-commit fired: aborting");
            std::process::abort()
        });
        let p = Proposal::new(m);
        let request = p.request;
        let mut outcome = self.log.propose(p).await;
        if let Commit::Unknown(why) = &outcome {
            tracing::warn!(%request, "commit outcome unknown ({why}); settling it with a fence");
            outcome = self.log.propose(Proposal::fence(request)).await;
        }
        match self.settled(tenant, outcome, written) {
            Ok(r) => r,
            Err(written) => {
                let me = self.clone();
                tokio::spawn(
                    async move { me.settle_in_background(tenant, request, written).await },
                );
                Err(ObjectError::OutcomeUnknown)
            }
        }
    }

    /// Frees what a settled outcome allows and turns it into the caller's answer;
    /// while it is still unknown, hands `written` back untouched.
    fn settled(
        &self,
        tenant: u64,
        outcome: Commit,
        written: Vec<Extent>,
    ) -> Result<Result<Applied, ObjectError>, Vec<Extent>> {
        match outcome {
            Commit::Committed(mut a) => {
                // Committed, and what it replaced not yet freed.
                fail::fail_point!("objects::crash-before-free", |_| {
                    tracing::warn!("failpoint objects::crash-before-free fired: aborting");
                    std::process::abort()
                });
                for e in &a.freed {
                    self.ram.forget(e.id);
                }
                free(
                    &self.chunks,
                    Some(&self.readers),
                    tenant,
                    std::mem::take(&mut a.freed),
                    self.grace,
                );
                Ok(Ok(a))
            }
            Commit::Rejected(e) => {
                // Never applied: what was written for it is referenced by nothing,
                // and no reader can have found it.
                free(&self.chunks, None, tenant, written, Duration::ZERO);
                Ok(Err(match e {
                    MetaError::Fenced => ObjectError::NotCommitted,
                    e => e.into(),
                }))
            }
            Commit::Unknown(_) => Err(written),
        }
    }

    async fn settle_in_background(self, tenant: u64, request: RequestId, mut written: Vec<Extent>) {
        let start = tokio::time::Instant::now();
        let mut wait = Duration::from_secs(1);
        while start.elapsed() < SETTLE_FOR {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(Duration::from_secs(30));
            let outcome = self.log.propose(Proposal::fence(request)).await;
            match self.settled(tenant, outcome, written) {
                Ok(_) => {
                    tracing::info!(%request, "unknown commit outcome settled");
                    return;
                }
                Err(w) => written = w,
            }
        }
        tracing::error!(%request, "commit outcome still unknown after {SETTLE_FOR:?}; its chunks are left to the collector");
    }
}

/// Deletes the chunks of extents no manifest references any more, in the
/// background, after `grace`: a GET that started before an overwrite or delete
/// streams the version it found, and must not lose its fragments midway. A crash
/// before the deletion only leaves orphans for the collector.
pub(crate) fn free(
    chunks: &Fabric,
    readers: Option<&crate::pins::Readers>,
    tenant: u64,
    extents: Vec<Extent>,
    grace: Duration,
) {
    if extents.is_empty() {
        return;
    }
    let chunks = chunks.clone();
    let readers = readers.cloned();
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        if let Some(r) = readers {
            let ids: Vec<u128> = extents.iter().map(|e| e.id).collect();
            r.wait_unpinned(&ids, crate::pins::MAX_PIN_WAIT).await;
        }
        let mut ops = Vec::new();
        for e in &extents {
            match &e.layout {
                Layout::Replicated { drives, .. } => {
                    for &drive in drives.iter().filter(|&&d| d != cairn_meta::UNPLACED) {
                        ops.push(Request::Delete {
                            drive,
                            id: chunk_id(e.id, 0, 0),
                            tenant,
                        });
                    }
                }
                Layout::Erasure { stripes, .. } => {
                    for (s, stripe) in stripes.iter().enumerate() {
                        for (f, &drive) in stripe.drives.iter().enumerate() {
                            if drive != cairn_meta::UNPLACED {
                                ops.push(Request::Delete {
                                    drive,
                                    id: chunk_id(e.id, s as u32, f as u8),
                                    tenant,
                                });
                            }
                        }
                    }
                }
            }
        }
        delete_chunks(&chunks, ops).await;
    });
}

/// Sends deletes in batches; a failure leaves the rest to the collector.
pub(crate) async fn delete_chunks(chunks: &Fabric, ops: Vec<Request>) {
    for batch in ops.chunks(1024) {
        if let Err(e) = chunks.call(batch.to_vec()).await {
            tracing::warn!("deleting freed chunks failed (left for the collector): {e}");
            return;
        }
    }
}
