//! The chunk fabric: every drive the object layer may use, wherever it is.
//!
//! Manifests name drives by a cluster-wide id. The fabric routes each request to the
//! chunk service of the node that holds the drive (rewriting the id to the drive's
//! index on that node), sends the parts for different nodes concurrently, and puts
//! the answers back in request order. A node that cannot be reached answers every
//! one of its requests with `DriveFailed`, so callers see one missing fragment per
//! drive, never a failed batch: that is what lets a read go on with any k fragments
//! while m nodes are down.
//!
//! On a single node the fabric is one chunk client, ids equal to local indices,
//! and each drive its own failure domain.

use crate::Candidates;
use cairn_chunkproto::{ChunkClient, Failure, FailureCode, ProtoError, Reply, Request, Response};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Where one drive is, and whether new data may go there.
#[derive(Clone, Debug)]
pub struct Route {
    /// Cluster-wide drive id.
    pub drive: u16,
    /// Node holding the drive (0 on a single node).
    pub node: u64,
    /// Whether the drive is this node's own (the scrubber reads only those).
    pub own: bool,
    /// The drive's index on that node's chunk service.
    pub local: u16,
    /// That node's chunk service.
    pub client: ChunkClient,
    /// Failure domain: fragments of one stripe go to distinct domains.
    pub domain: u32,
    /// Whether placement may choose it (its node is up and not draining).
    pub placeable: bool,
    /// Relative share of new data (capacity in GiB by default).
    pub weight: u32,
}

/// The drive routes, replaced whole when the cluster map changes.
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    routes: Arc<RwLock<Arc<Vec<Option<Route>>>>>,
}

impl Fabric {
    /// One node's chunk service with `drives` drives, each its own domain.
    pub fn single(client: ChunkClient, drives: u16) -> Fabric {
        let f = Fabric::default();
        f.set_routes(
            (0..drives)
                .map(|d| Route {
                    drive: d,
                    node: 0,
                    own: true,
                    local: d,
                    client: client.clone(),
                    domain: d as u32,
                    placeable: true,
                    weight: 1,
                })
                .collect(),
        );
        f
    }

    /// Replaces every route.
    pub fn set_routes(&self, routes: Vec<Route>) {
        let len = routes
            .iter()
            .map(|r| r.drive as usize + 1)
            .max()
            .unwrap_or(0);
        let mut v = vec![None; len];
        for r in routes {
            let i = r.drive as usize;
            v[i] = Some(r);
        }
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(v);
    }

    fn snapshot(&self) -> Arc<Vec<Option<Route>>> {
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One past the highest drive id.
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every known drive id.
    pub fn drives(&self) -> Vec<u16> {
        self.snapshot().iter().flatten().map(|r| r.drive).collect()
    }

    /// This node's own drives.
    pub fn own_drives(&self) -> Vec<u16> {
        self.snapshot()
            .iter()
            .flatten()
            .filter(|r| r.own)
            .map(|r| r.drive)
            .collect()
    }

    /// The route of one drive.
    pub fn route(&self, drive: u16) -> Option<Route> {
        self.snapshot().get(drive as usize).cloned().flatten()
    }

    /// For placement, by drive id: may it take new data, and its failure domain.
    pub fn placement(&self) -> Candidates {
        let s = self.snapshot();
        Candidates {
            ok: s
                .iter()
                .map(|r| r.as_ref().is_some_and(|r| r.placeable))
                .collect(),
            domains: s
                .iter()
                .enumerate()
                .map(|(i, r)| r.as_ref().map(|r| r.domain).unwrap_or(u32::MAX - i as u32))
                .collect(),
            weights: s
                .iter()
                .map(|r| r.as_ref().map(|r| r.weight).unwrap_or(1))
                .collect(),
        }
    }

    /// Sends `ops` to the nodes holding their drives; answers in request order.
    pub async fn call(&self, ops: Vec<Request>) -> Result<Vec<Response>, ProtoError> {
        let routes = self.snapshot();
        let n = ops.len();
        let mut out: Vec<Option<Response>> = (0..n).map(|_| None).collect();
        // node -> (client, positions, requests rewritten to local drive indices)
        let mut per_node: HashMap<u64, (ChunkClient, Vec<usize>, Vec<Request>)> = HashMap::new();
        let global: Vec<u16> = ops.iter().map(|o| o.drive()).collect();
        for (pos, op) in ops.into_iter().enumerate() {
            let Some(route) = routes.get(op.drive() as usize).and_then(|r| r.as_ref()) else {
                out[pos] = Some(Err(Failure::new(
                    FailureCode::DriveFailed,
                    format!("drive {} is not in the cluster map", op.drive()),
                )));
                continue;
            };
            let e = per_node
                .entry(route.node)
                .or_insert_with(|| (route.client.clone(), Vec::new(), Vec::new()));
            e.1.push(pos);
            e.2.push(with_drive(op, route.local));
        }
        let calls = per_node
            .into_iter()
            .map(|(node, (client, pos, reqs))| async move {
                let res = client.call(reqs).await;
                (node, client, pos, res)
            });
        for (node, client, pos, res) in futures::future::join_all(calls).await {
            match res {
                Ok(replies) => {
                    for (p, r) in pos.into_iter().zip(replies) {
                        out[p] = Some(r);
                    }
                }
                Err(e) => {
                    tracing::debug!(node, addr = client.addr(), "chunk service unreachable: {e}");
                    for p in pos {
                        out[p] = Some(Err(Failure::new(
                            FailureCode::DriveFailed,
                            format!("node {node:016x} at {} unreachable: {e}", client.addr()),
                        )));
                    }
                }
            }
        }
        Ok(out
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let r = r.unwrap_or_else(|| Err(Failure::new(FailureCode::Io, "no answer")));
                // Drive reports name the local index: give them the cluster id back.
                match r {
                    Ok(Reply::DriveInfo(mut d)) => {
                        d.drive = global[i];
                        Ok(Reply::DriveInfo(d))
                    }
                    Ok(Reply::DriveDetails(mut d)) => {
                        d.drive = global[i];
                        Ok(Reply::DriveDetails(d))
                    }
                    other => other,
                }
            })
            .collect())
    }
}

/// The same request aimed at another drive index.
fn with_drive(op: Request, local: u16) -> Request {
    match op {
        Request::Put {
            id,
            tenant,
            key_id,
            payload,
            durable,
            ..
        } => Request::Put {
            drive: local,
            id,
            tenant,
            key_id,
            payload,
            durable,
        },
        Request::Get { id, tenant, .. } => Request::Get {
            drive: local,
            id,
            tenant,
        },
        Request::Delete { id, tenant, .. } => Request::Delete {
            drive: local,
            id,
            tenant,
        },
        Request::Stat { id, tenant, .. } => Request::Stat {
            drive: local,
            id,
            tenant,
        },
        Request::List { after, limit, .. } => Request::List {
            drive: local,
            after,
            limit,
        },
        Request::ListVersions { after, limit, .. } => Request::ListVersions {
            drive: local,
            after,
            limit,
        },
        Request::DeleteVersion {
            id, tenant, seq, ..
        } => Request::DeleteVersion {
            drive: local,
            id,
            tenant,
            seq,
        },
        Request::DriveInfo { .. } => Request::DriveInfo { drive: local },
        Request::DriveDetails { .. } => Request::DriveDetails { drive: local },
    }
}
