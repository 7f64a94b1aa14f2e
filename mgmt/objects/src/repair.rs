//! Protection accounting and repair.
//!
//! Every node holds the whole metadata, so every node can count, for the whole
//! cluster, how many objects are fully protected, degraded (readable, with
//! fragments missing) or lost (fewer than k fragments, or no copy). Repair is split
//! between nodes by rendezvous hashing of the object's key over the nodes that are
//! up, so each object has one repairer and the work runs in parallel across nodes.
//!
//! A repair rebuilds each lost fragment from any k good ones (or copies a good
//! replica), writes it to a drive in a failure domain the stripe does not use yet,
//! reads it back and compares, and only then commits the move through the metadata
//! log ([`Mutation::MoveFragments`], which applies only if the manifest is still as
//! the repairer saw it). A crash at any point leaves the old manifest and at worst
//! an orphan chunk.

use crate::read::check_fragment;
use crate::{chunk_id, Candidates, Landing, ObjectError, ObjectStore};
use bytes::Bytes;
use cairn_adminapi::ProtectionReport;
use cairn_chunkproto::{Reply, Request};
use cairn_meta::{matches_sum, FragmentMove, Layout, Mutation, ObjectRecord, Stripe, UNPLACED};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// What one fragment's drive is, for protection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FragmentState {
    /// Readable and where it should be.
    Good,
    /// Unreadable for now (e.g. its node is down, within the grace period): counts
    /// as missing, not repaired yet.
    Missing,
    /// To be rebuilt elsewhere now (drive failed, node down past the grace period,
    /// node draining, or never placed).
    Lost,
}

/// What a repair pass did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairPass {
    pub rebuilt_fragments: u64,
    pub rebuilt_bytes: u64,
    /// Fragments that could not be rebuilt now (no spare domain, or too few good).
    pub deferred: u64,
}

/// A 64-bit FNV-1a hash: stable across nodes and releases.
fn fnv(data: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The repairer of `bucket/key` among `nodes` (highest random weight).
pub fn repairer(bucket: &str, key: &str, nodes: &[u64]) -> Option<u64> {
    let k = fnv(format!("{bucket}\0{key}").as_bytes());
    nodes
        .iter()
        .copied()
        .max_by_key(|&n| fnv(&(k ^ n.rotate_left(17)).to_le_bytes()))
}

/// Fragment positions of an extent: (stripe, position, drive, bytes).
fn fragments(layout: &Layout, size: u64) -> Vec<(u32, u8, u16, u64)> {
    match layout {
        Layout::Replicated { drives, .. } => drives
            .iter()
            .enumerate()
            .map(|(i, &d)| (0, i as u8, d, size))
            .collect(),
        Layout::Erasure { k, stripes, .. } => stripes
            .iter()
            .enumerate()
            .flat_map(|(s, st)| {
                let shard = (st.len as u64).div_ceil(*k as u64).max(1);
                st.drives
                    .iter()
                    .enumerate()
                    .map(move |(f, &d)| (s as u32, f as u8, d, shard))
            })
            .collect(),
    }
}

impl ObjectStore {
    /// The state of a fragment on `drive`, given the cluster's view of drives.
    pub(crate) fn fragment_state(
        &self,
        drive: u16,
        gone: &(dyn Fn(u16) -> FragmentState + Sync),
    ) -> FragmentState {
        if drive == UNPLACED {
            return FragmentState::Lost;
        }
        match gone(drive) {
            FragmentState::Good if self.chunks.route(drive).is_none() => FragmentState::Lost,
            FragmentState::Good if !self.health.is_healthy(drive) => FragmentState::Missing,
            s => s,
        }
    }

    /// How many fragments (or copies) manifests place on any of `drives`.
    pub fn fragments_on(&self, drives: &[u16]) -> Result<u64, ObjectError> {
        let mut n = 0;
        for (_, _, rec) in self.meta.all_objects()? {
            for e in &rec.extents {
                n += fragments(&e.layout, e.size)
                    .iter()
                    .filter(|f| drives.contains(&f.2))
                    .count() as u64;
            }
        }
        Ok(n)
    }

    /// Counts protection over every object, from local metadata.
    pub fn protection(
        &self,
        gone: &(dyn Fn(u16) -> FragmentState + Sync),
    ) -> Result<ProtectionReport, ObjectError> {
        let mut r = ProtectionReport::default();
        let mut buckets = HashMap::new();
        for (bucket, _, rec) in self.meta.all_objects()? {
            r.objects += 1;
            // A bucket kept on chosen nodes has the copies that fit them (as
            // repair keeps them), not the cluster's count.
            let chosen = self
                .bucket_of(&mut buckets, &bucket)?
                .is_some_and(|(_, landing)| !landing.nodes.is_empty());
            let mut degraded = false;
            let mut lost = false;
            for e in &rec.extents {
                let frags = fragments(&e.layout, e.size);
                let mut bad_per_stripe: HashMap<u32, usize> = HashMap::new();
                for &(s, _, d, bytes) in &frags {
                    if self.fragment_state(d, gone) != FragmentState::Good {
                        *bad_per_stripe.entry(s).or_default() += 1;
                        r.fragments_missing += 1;
                        r.bytes_missing += bytes;
                    }
                }
                let (width, tolerate) = match &e.layout {
                    Layout::Replicated { drives, .. } => {
                        let short = (self.cfg.replicas as usize).saturating_sub(drives.len());
                        if short > 0 && !chosen {
                            degraded = true;
                            r.fragments_missing += short as u64;
                        }
                        (drives.len(), drives.len().saturating_sub(1))
                    }
                    Layout::Erasure { k, m, .. } => ((*k + *m) as usize, *m as usize),
                };
                for bad in bad_per_stripe.values() {
                    if *bad > tolerate || *bad >= width {
                        lost = true;
                    } else if *bad > 0 {
                        degraded = true;
                    }
                }
            }
            if lost {
                r.lost += 1;
            } else if degraded {
                r.degraded += 1;
            } else {
                r.protected += 1;
            }
        }
        Ok(r)
    }

    /// Rebuilds the lost fragments of the objects this node repairs (`mine`).
    pub async fn repair_pass(
        &self,
        gone: &(dyn Fn(u16) -> FragmentState + Sync),
        mine: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> Result<RepairPass, ObjectError> {
        let mut pass = RepairPass::default();
        let mut buckets = HashMap::new();
        for (bucket, key, rec) in self.meta.all_objects()? {
            if !mine(&bucket, &key) {
                continue;
            }
            let Some((tenant, landing)) = self.bucket_of(&mut buckets, &bucket)? else {
                continue;
            };
            if let Err(e) = self
                .repair_object(tenant, &landing, &bucket, &key, &rec, gone, &mut pass)
                .await
            {
                tracing::warn!(%bucket, %key, "repair deferred: {e}");
                pass.deferred += 1;
            }
        }
        self.counters
            .repaired_fragments
            .fetch_add(pass.rebuilt_fragments, Ordering::Relaxed);
        Ok(pass)
    }

    /// The tenant owning `bucket` and where its data lands (`None`: the bucket
    /// is gone), cached for a pass.
    pub(crate) fn bucket_of(
        &self,
        cache: &mut HashMap<String, Option<(u64, Landing)>>,
        bucket: &str,
    ) -> Result<Option<(u64, Landing)>, ObjectError> {
        if let Some(t) = cache.get(bucket) {
            return Ok(t.clone());
        }
        let t = self
            .meta
            .bucket(bucket)?
            .map(|b| (b.tenant, Landing::of(&b)));
        cache.insert(bucket.to_string(), t.clone());
        Ok(t)
    }

    #[allow(clippy::too_many_arguments)]
    async fn repair_object(
        &self,
        tenant: u64,
        landing: &Landing,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        gone: &(dyn Fn(u16) -> FragmentState + Sync),
        pass: &mut RepairPass,
    ) -> Result<(), ObjectError> {
        for e in &rec.extents {
            // Before any fragment is written: the commit must say when they were.
            let written_in = self.gc_epoch()?;
            let mut moves = Vec::new();
            let mut stale = Vec::new();
            match &e.layout {
                Layout::Replicated { drives, .. } => {
                    let (candidates, _, _) = self.landing_view(landing, (1, 0));
                    // Copies short of the protection (written while domains were
                    // down) are filled in as "lost" positions past the end; a
                    // bucket kept on chosen nodes keeps the copies it was written
                    // with (fitted to those nodes).
                    let mut drives = drives.clone();
                    while landing.nodes.is_empty() && drives.len() < self.cfg.replicas as usize {
                        drives.push(UNPLACED);
                    }
                    let states: Vec<FragmentState> = drives
                        .iter()
                        .map(|&d| self.fragment_state(d, gone))
                        .collect();
                    if !states.contains(&FragmentState::Lost) {
                        continue;
                    }
                    let id = chunk_id(e.id, 0, 0);
                    let sum = match &e.layout {
                        Layout::Replicated { sum, .. } => *sum,
                        Layout::Erasure { .. } => None,
                    };
                    let good = self.first_good(tenant, &drives, &states, id, e.size, sum);
                    let Some(data) = good.await else {
                        pass.deferred += 1;
                        continue;
                    };
                    let mut used: Vec<u16> = drives
                        .iter()
                        .zip(&states)
                        .filter(|(_, s)| **s != FragmentState::Lost)
                        .map(|(d, _)| *d)
                        .collect();
                    for (i, s) in states.iter().enumerate() {
                        if *s != FragmentState::Lost {
                            continue;
                        }
                        let Some(to) = spare(e.id, 0, &candidates, &used) else {
                            pass.deferred += 1;
                            continue;
                        };
                        if self.put_verified(tenant, to, id, data.clone()).await? {
                            used.push(to);
                            moves.push(FragmentMove {
                                stripe: 0,
                                frag: i as u8,
                                from: drives[i],
                                to,
                            });
                            stale.push((drives[i], id));
                            pass.rebuilt_bytes += data.len() as u64;
                        }
                    }
                }
                Layout::Erasure { k, m, stripes, .. } => {
                    let codec = self.codecs.get(*k, *m)?;
                    let (candidates, _, _) = self.landing_view(landing, (*k, *m));
                    for (s, st) in stripes.iter().enumerate() {
                        let s = s as u32;
                        let states: Vec<FragmentState> = st
                            .drives
                            .iter()
                            .map(|&d| self.fragment_state(d, gone))
                            .collect();
                        if !states.contains(&FragmentState::Lost) {
                            continue;
                        }
                        let shard = (st.len as usize).div_ceil(*k as usize).max(1);
                        let mut shards = self
                            .fetch_stripe(tenant, e.id, s, st, &states, shard)
                            .await?;
                        if shards.iter().filter(|x| x.is_some()).count() < *k as usize {
                            pass.deferred += 1;
                            continue;
                        }
                        codec.reconstruct(&mut shards)?;
                        if let Some(f) = (0..shards.len()).find(|&f| {
                            !matches_sum(st.sum(f), shards[f].as_deref().unwrap_or_default())
                        }) {
                            // Inputs were verified, so this is a bug or memory error:
                            // write nothing.
                            tracing::error!(
                                extent = %format!("{:x}", e.id),
                                stripe = s,
                                fragment = f,
                                "rebuilt fragment does not match the manifest; repair skipped"
                            );
                            pass.deferred += 1;
                            continue;
                        }
                        let mut used: Vec<u16> = st
                            .drives
                            .iter()
                            .zip(&states)
                            .filter(|(_, s)| **s != FragmentState::Lost)
                            .map(|(d, _)| *d)
                            .collect();
                        for (f, state) in states.iter().enumerate() {
                            if *state != FragmentState::Lost {
                                continue;
                            }
                            let Some(to) = spare(e.id, s, &candidates, &used) else {
                                pass.deferred += 1;
                                continue;
                            };
                            let id = chunk_id(e.id, s, f as u8);
                            let bytes = Bytes::from(shards[f].clone().unwrap_or_default());
                            let n = bytes.len() as u64;
                            if self.put_verified(tenant, to, id, bytes).await? {
                                used.push(to);
                                moves.push(FragmentMove {
                                    stripe: s,
                                    frag: f as u8,
                                    from: st.drives[f],
                                    to,
                                });
                                stale.push((st.drives[f], id));
                                pass.rebuilt_bytes += n;
                            }
                        }
                    }
                }
            }
            if moves.is_empty() {
                continue;
            }
            let n = moves.len() as u64;
            // The rebuilt copies are not handed to the commit as "written": a
            // refused move (another repairer won, the object changed) may share
            // their chunk ids with the winner's copies on the same drive, so they
            // are left to the collector rather than deleted here.
            match self
                .commit(
                    tenant,
                    Mutation::MoveFragments {
                        bucket: bucket.to_string(),
                        key: key.to_string(),
                        extent: e.id,
                        moves,
                        written_in: Some(written_in),
                    },
                    Vec::new(),
                )
                .await
            {
                Ok(_) => {
                    pass.rebuilt_fragments += n;
                    // The old copies are no longer referenced; remove those that
                    // are still reachable (a draining node's), best effort.
                    let ops: Vec<Request> = stale
                        .into_iter()
                        .filter(|(d, _)| *d != UNPLACED)
                        .map(|(drive, id)| Request::Delete { drive, id, tenant })
                        .collect();
                    if !ops.is_empty() {
                        let _ = self.chunks.call(ops).await;
                    }
                }
                // The object changed under us: its new version has its own fragments.
                Err(ObjectError::Meta(cairn_meta::MetaError::PreconditionFailed)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The first copy that is whole and matches the manifest's checksum.
    pub(crate) async fn first_good(
        &self,
        tenant: u64,
        drives: &[u16],
        states: &[FragmentState],
        id: cairn_types::ChunkId,
        size: u64,
        sum: Option<u32>,
    ) -> Option<Bytes> {
        for (&d, s) in drives.iter().zip(states) {
            if *s != FragmentState::Good {
                continue;
            }
            let r = self
                .chunks
                .call(vec![Request::Get {
                    drive: d,
                    id,
                    tenant,
                }])
                .await;
            if let Ok(mut v) = r {
                if let Some(Ok(Reply::Get { payload })) = v.pop() {
                    if payload.len() as u64 == size && matches_sum(sum, &payload) {
                        return Some(payload);
                    }
                }
            }
        }
        None
    }

    pub(crate) async fn fetch_stripe(
        &self,
        tenant: u64,
        extent: u128,
        stripe: u32,
        st: &Stripe,
        states: &[FragmentState],
        shard: usize,
    ) -> Result<Vec<Option<Vec<u8>>>, ObjectError> {
        let want: Vec<usize> = (0..st.drives.len())
            .filter(|&i| states[i] == FragmentState::Good)
            .collect();
        let ops = want
            .iter()
            .map(|&i| Request::Get {
                drive: st.drives[i],
                id: chunk_id(extent, stripe, i as u8),
                tenant,
            })
            .collect();
        let res = self.chunks.call(ops).await?;
        let mut shards = vec![None; st.drives.len()];
        for (i, r) in want.into_iter().zip(res) {
            // The datapath verified its record checksum; the length and the
            // manifest's checksum must match too.
            if let Ok(Reply::Get { payload }) = r {
                if check_fragment(&payload, shard, st.sum(i)).is_ok() {
                    shards[i] = Some(payload.to_vec());
                }
            }
        }
        Ok(shards)
    }

    /// Writes a chunk and reads it back; true when the bytes came back the same.
    pub(crate) async fn put_verified(
        &self,
        tenant: u64,
        drive: u16,
        id: cairn_types::ChunkId,
        data: Bytes,
    ) -> Result<bool, ObjectError> {
        let put = self
            .chunks
            .call(vec![Request::Put {
                drive,
                id,
                tenant,
                key_id: 0,
                payload: data.clone(),
                durable: true,
            }])
            .await?;
        if !matches!(put.first(), Some(Ok(_))) {
            return Ok(false);
        }
        let got = self
            .chunks
            .call(vec![Request::Get { drive, id, tenant }])
            .await?;
        Ok(matches!(got.first(), Some(Ok(Reply::Get { payload })) if *payload == data))
    }
}

/// The best-ranked placeable drive for one more fragment of a stripe, in a failure
/// domain none of `used` is in.
fn spare(extent: u128, stripe: u32, c: &Candidates, used: &[u16]) -> Option<u16> {
    let domain = |d: u16| c.domains.get(d as usize).copied().unwrap_or(d as u32);
    let taken: Vec<u32> = used
        .iter()
        .filter(|&&d| d != UNPLACED)
        .map(|&d| domain(d))
        .collect();
    let mut free = c.clone();
    for (d, f) in free.ok.iter_mut().enumerate() {
        if used.contains(&(d as u16)) || taken.contains(&domain(d as u16)) {
            *f = false;
        }
    }
    crate::place(extent, stripe, 1, &free)
        .into_iter()
        .find(|&d| d != UNPLACED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairer_is_stable_and_spreads() {
        let nodes = [11, 22, 33, 44, 55, 66];
        let mut count = HashMap::new();
        for i in 0..6000 {
            let k = format!("k{i}");
            let a = repairer("b", &k, &nodes).unwrap();
            assert_eq!(Some(a), repairer("b", &k, &nodes));
            *count.entry(a).or_insert(0) += 1;
            // Losing a node that was not the repairer changes nothing.
            let others: Vec<u64> = nodes
                .iter()
                .copied()
                .filter(|&n| n != a && n != 11)
                .collect();
            if a != 11 {
                let mut with_a = others.clone();
                with_a.push(a);
                assert_eq!(repairer("b", &k, &with_a), Some(a));
            }
        }
        for n in nodes {
            assert!((800..1200).contains(&count[&n]), "{count:?}");
        }
    }
}
