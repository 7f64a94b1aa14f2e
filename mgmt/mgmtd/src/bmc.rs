//! Each node's BMC, reached over RMCP+ (cairn-bmc): the operator's power control
//! (`/v1/nodes/{node}/bmc`, `/v1/nodes/{node}/power`) and fencing.
//!
//! A BMC's record lives in the replicated metadata with its password sealed by
//! the cluster's master key, so any node can act on any peer's BMC. Setting one
//! reaches the BMC first: wrong credentials are refused and nothing is kept.
//!
//! Fencing: a node down past the repair grace whose record allows it is powered
//! off by the Raft leader before repair rebuilds its data, so a node that is
//! only cut off (still writing to its drives, or about to come back with stale
//! state) is stopped first. No more nodes are kept fenced at once than the data
//! can lose (the erasure code's parity, or the copies less one). Repair holds a
//! fenceable node's data for at most [`FENCE_WAIT`] past the grace; if fencing
//! has not succeeded by then, it rebuilds anyway and says so: a BMC that does
//! not answer must not keep data degraded for good.

use crate::access::Principal;
use crate::admin::{App, Body, Failure};
use crate::cluster::{id_hex, resolve_node, ClusterNode};
use axum::extract::{Path, State};
use axum::{Extension, Json};
use cairn_adminapi::{
    BmcSettings, BmcView, ErrorKind, PowerAction, PowerRequest, PowerState, PowerView,
};
use cairn_bmc::BmcTarget;
use cairn_cluster::{ClusterMap, NodeId, NodeState};
use cairn_meta::{AdminChange, BmcRecord};
use cairn_objects::ObjectStore;
use std::collections::HashSet;
use std::time::Duration;
use zeroize::Zeroizing;

/// How long past the repair grace repair waits for a fenceable node to be fenced.
pub(crate) const FENCE_WAIT: Duration = Duration::from_secs(60);

fn secret_name(node: NodeId) -> String {
    format!("bmc password {}", id_hex(node))
}

pub(crate) fn view(node: NodeId, r: BmcRecord) -> BmcView {
    BmcView {
        node: id_hex(node),
        address: r.address,
        user: r.user,
        fence: r.fence,
        set_ms: r.set_ms,
        set_by: r.set_by,
        fenced_ms: r.fenced_ms,
    }
}

pub(crate) fn bmc_failure(e: cairn_bmc::BmcError) -> Failure {
    use cairn_bmc::BmcError as E;
    let kind = match e {
        E::Address(_) => ErrorKind::Invalid,
        E::Auth { .. } | E::Refused { .. } | E::Garbage { .. } | E::Insecure { .. } => {
            ErrorKind::Conflict
        }
        E::Unreachable { .. }
        | E::TimedOut { .. }
        | E::Busy { .. }
        | E::NotSent { .. }
        | E::NoSession { .. } => ErrorKind::Unavailable,
    };
    Failure::new(kind, e)
}

/// The node a path names, and its BMC target (password unsealed).
pub(crate) fn target(store: &ObjectStore, node: NodeId) -> Result<(BmcRecord, BmcTarget), Failure> {
    let rec = store
        .meta()
        .bmc(node)?
        .ok_or(cairn_meta::MetaError::NoSuchBmc(node))?;
    let kp = store.key_provider().ok_or_else(|| {
        Failure::new(
            ErrorKind::Internal,
            "this node has no master key to unseal BMC passwords",
        )
    })?;
    let pw = kp
        .unwrap_secret(&secret_name(node), &rec.password_sealed)
        .map_err(|e| Failure::new(ErrorKind::Internal, format!("BMC password: {e}")))?;
    let password = Zeroizing::new(String::from_utf8_lossy(&pw).into_owned());
    let t = BmcTarget {
        address: rec.address.clone(),
        user: rec.user.clone(),
        password,
    };
    Ok((rec, t))
}

pub(crate) fn node_of(app: &App, named: &str) -> Result<NodeId, Failure> {
    resolve_node(&app.cluster_map(), named)
        .map_err(|e| Failure::new(ErrorKind::NotFound, e.to_string()))
}

/// `GET /v1/bmcs`.
pub(crate) async fn list(State(app): State<App>) -> Result<Json<Vec<BmcView>>, Failure> {
    let store = crate::tenants::current(&app).await?;
    let out = store.meta().bmcs()?;
    Ok(Json(out.into_iter().map(|(n, r)| view(n, r)).collect()))
}

/// `GET /v1/nodes/{node}/bmc`.
pub(crate) async fn show(
    State(app): State<App>,
    Path(node): Path<String>,
) -> Result<Json<BmcView>, Failure> {
    let node = node_of(&app, &node)?;
    let store = crate::tenants::current(&app).await?;
    let rec = store
        .meta()
        .bmc(node)?
        .ok_or(cairn_meta::MetaError::NoSuchBmc(node))?;
    Ok(Json(view(node, rec)))
}

/// `PUT /v1/nodes/{node}/bmc`: checked against the BMC before it is kept.
pub(crate) async fn set(
    State(app): State<App>,
    Extension(by): Extension<Principal>,
    Path(node): Path<String>,
    body: Body<BmcSettings>,
) -> Result<Json<BmcView>, Failure> {
    let Json(req) = body?;
    let node = node_of(&app, &node)?;
    BmcTarget::check_address(&req.address).map_err(bmc_failure)?;
    // IPMI 2.0 user names are at most 16 bytes, passwords at most 20.
    if req.user.is_empty() || req.user.len() > 16 || !req.user.chars().all(|c| c.is_ascii_graphic())
    {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a BMC user is 1 to 16 printable ASCII characters",
        ));
    }
    if req.password.is_empty() || req.password.len() > 20 {
        return Err(Failure::new(
            ErrorKind::Invalid,
            "a BMC password is 1 to 20 bytes (IPMI 2.0)",
        ));
    }
    let store = app.store()?;
    let kp = store.key_provider().ok_or_else(|| {
        Failure::new(
            ErrorKind::Conflict,
            "this cluster has no master key to seal a BMC password with",
        )
    })?;
    let t = BmcTarget {
        address: req.address.clone(),
        user: req.user.clone(),
        password: Zeroizing::new(req.password.clone()),
    };
    // Reach it first: a typo is refused now, not found at the first fencing.
    // On a link of its own, so a wrong password does not displace the session
    // of the one in use (BMCs hold few, and abandoned ones linger).
    let trial = std::sync::Arc::new(cairn_bmc::Link::new(t));
    trial.power_state().await.map_err(|e| {
        let f = bmc_failure(e);
        Failure::new(
            ErrorKind::Invalid,
            format!("{} (nothing was kept)", f.message()),
        )
    })?;
    // Proven: its session serves from now on.
    app.node().bmcs.adopt(trial);
    let sealed = kp
        .wrap_secret(&secret_name(node), req.password.as_bytes())
        .map_err(|e| Failure::new(ErrorKind::Internal, format!("sealing the password: {e}")))?;
    let record = BmcRecord {
        address: req.address,
        user: req.user,
        password_sealed: sealed,
        fence: req.fence,
        set_ms: cairn_meta::now_ms(),
        set_by: by.who,
        fenced_ms: None,
    };
    store
        .change_admin(AdminChange::SetBmc {
            node,
            record: record.clone(),
        })
        .await?;
    Ok(Json(view(node, record)))
}

/// `DELETE /v1/nodes/{node}/bmc`.
pub(crate) async fn clear(
    State(app): State<App>,
    Path(node): Path<String>,
) -> Result<Json<bool>, Failure> {
    let node = node_of(&app, &node)?;
    app.store()?
        .change_admin(AdminChange::ClearBmc { node })
        .await?;
    Ok(Json(true))
}

/// `GET /v1/nodes/{node}/power`.
pub(crate) async fn power_status(
    State(app): State<App>,
    Path(node): Path<String>,
) -> Result<Json<PowerView>, Failure> {
    let node = node_of(&app, &node)?;
    let store = crate::tenants::current(&app).await?;
    let (_, t) = target(&store, node)?;
    let link = app.node().bmcs.get(&t);
    let state = link.power_state().await.map_err(bmc_failure)?;
    Ok(Json(PowerView {
        node: id_hex(node),
        bmc: t.address,
        state,
        action: None,
    }))
}

/// `POST /v1/nodes/{node}/power`.
pub(crate) async fn power(
    State(app): State<App>,
    Path(node): Path<String>,
    body: Body<PowerRequest>,
) -> Result<Json<PowerView>, Failure> {
    let Json(req) = body?;
    let node = node_of(&app, &node)?;
    let store = crate::tenants::current(&app).await?;
    let (_, t) = target(&store, node)?;
    let link = app.node().bmcs.get(&t);
    link.power(req.action).await.map_err(bmc_failure)?;
    tracing::warn!(node = %id_hex(node), bmc = %t.address, action = req.action.name(), "power request carried out by the node's BMC");
    // What the BMC says now: for on and off, once it says so (a few seconds at
    // most); a cycle, reset or soft off may still be under way.
    let want = match req.action {
        PowerAction::On => Some(PowerState::On),
        PowerAction::Off => Some(PowerState::Off),
        _ => None,
    };
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    let state = loop {
        let s = link.power_state().await.map_err(bmc_failure)?;
        if want.is_none_or(|w| w == s) || tokio::time::Instant::now() >= until {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    Ok(Json(PowerView {
        node: id_hex(node),
        bmc: t.address,
        state,
        action: Some(req.action),
    }))
}

/// What fencing has warned about, for a down node (each once per outage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Warned {
    Failed,
    Unfenced,
    Budget,
}

/// How many nodes may be fenced at once: what the data can lose.
fn fence_budget(map: &ClusterMap) -> usize {
    map.protection
        .map_or(0, |p| usize::from(p.m.min(p.replicas.saturating_sub(1))))
}

/// Before a repair pass: fences what must be (on the leader), and returns the
/// nodes whose data repair must leave alone for now (fenceable, past the grace,
/// not yet fenced, and within [`FENCE_WAIT`]).
pub(crate) async fn fence_before_repair(
    node: &ClusterNode,
    store: &ObjectStore,
    map: &ClusterMap,
    grace: Duration,
) -> HashSet<NodeId> {
    let mut held = HashSet::new();
    let Ok(records) = store.meta().bmcs() else {
        return held;
    };
    let now = cairn_meta::now_ms();
    let leader = node.cluster.raft_status().leader == Some(node.cluster.id());
    let mut fenced = records
        .iter()
        .filter(|(n, r)| {
            r.fenced_ms.is_some() && map.nodes.get(n).is_some_and(|m| m.state == NodeState::Down)
        })
        .count();
    let budget = fence_budget(map);
    // Each kind of warning once per outage of a node.
    let warn_once = |id: NodeId, kind: Warned| {
        node.fence_warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((id, kind))
    };
    for (id, rec) in &records {
        let Some(n) = map.nodes.get(id) else { continue };
        if n.state == NodeState::Up {
            node.fence_warned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(n, _)| n != id);
            if rec.fenced_ms.is_some() && leader {
                // Powered back on by someone: no longer counted as fenced.
                let _ = store
                    .change_admin(AdminChange::Fenced {
                        node: *id,
                        at_ms: None,
                    })
                    .await;
            }
            continue;
        }
        let down_ms = now - n.since_ms;
        if !rec.fence || rec.fenced_ms.is_some() || down_ms <= grace.as_millis() as i64 {
            continue;
        }
        let waited = down_ms - grace.as_millis() as i64;
        if waited <= FENCE_WAIT.as_millis() as i64 {
            held.insert(*id);
        } else {
            if warn_once(*id, Warned::Unfenced) {
                tracing::warn!(node = %id_hex(*id), "rebuilding a node's data without fencing it: fencing did not succeed in {} s", FENCE_WAIT.as_secs());
            }
            continue;
        }
        if !leader {
            continue;
        }
        if fenced >= budget {
            if !warn_once(*id, Warned::Budget) {
                continue;
            }
            tracing::warn!(node = %id_hex(*id), fenced, budget, "not fencing: as many nodes are fenced as the data can lose");
            continue;
        }
        match fence(node, store, *id).await {
            Ok(()) => {
                fenced += 1;
                held.remove(id);
                tracing::warn!(node = %id_hex(*id), bmc = %rec.address, "fenced: the node's BMC powered it off before its data is rebuilt");
            }
            // Once per outage at ERROR; the retries at each pass quietly.
            Err(e) if warn_once(*id, Warned::Failed) => {
                tracing::error!(node = %id_hex(*id), "fencing failed (retried at each repair pass): {}", e.message())
            }
            Err(e) => tracing::debug!(node = %id_hex(*id), "fencing failed again: {}", e.message()),
        }
    }
    held
}

/// Powers a node off through its BMC, checks it is off, and records it.
async fn fence(node: &ClusterNode, store: &ObjectStore, id: NodeId) -> Result<(), Failure> {
    let (_, t) = target(store, id)?;
    let link = node.bmcs.get(&t);
    link.power(PowerAction::Off).await.map_err(bmc_failure)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if link.power_state().await.map_err(bmc_failure)? == PowerState::Off {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(Failure::new(
                ErrorKind::Unavailable,
                format!("{} still reports power on 30 s after power off", t.address),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    store
        .change_admin(AdminChange::Fenced {
            node: id,
            at_ms: Some(cairn_meta::now_ms()),
        })
        .await?;
    Ok(())
}
