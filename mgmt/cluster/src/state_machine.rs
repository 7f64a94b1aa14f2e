//! The replicated state machine: committed entries applied, in log order, to the
//! node's metadata store and cluster map. Each batch of entries is one redb
//! transaction that also records the last applied log id, the membership and the
//! map, so a crash never leaves metadata and "applied up to" out of step.

// As in log_store: openraft's traits fix `StorageError` as the error type.
#![allow(clippy::result_large_err)]

use crate::map::ClusterMap;
use crate::types::{
    Command, Entry, LogId, Outcome, Snapshot, SnapshotMeta, StorageError, StoredMembership,
    TypeConfig,
};
use cairn_meta::MetaStore;
use cairn_pki::Secrets;
use openraft::storage::RaftStateMachine;
use openraft::{EntryPayload, RaftSnapshotBuilder, StorageIOError};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

const APPLIED: &str = "raft.applied";
const MEMBERSHIP: &str = "raft.membership";
const MAP: &str = "cluster.map";
const SECRETS: &str = "cluster.secrets";

fn sm_err<E: std::fmt::Display>(e: E) -> StorageError {
    StorageIOError::write_state_machine(&std::io::Error::other(e.to_string())).into()
}

/// State shared between the state machine (the only writer) and readers.
#[derive(Debug)]
pub struct Shared {
    pub map: watch::Sender<Arc<ClusterMap>>,
    pub applied: watch::Sender<u64>,
    pub secrets: Mutex<Option<Secrets>>,
}

/// The last snapshot built, shared with the builders openraft asks for.
type SnapshotSlot = Arc<Mutex<Option<(SnapshotMeta, Vec<u8>)>>>;

pub struct StateMachine {
    meta: MetaStore,
    shared: Arc<Shared>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    snapshot: SnapshotSlot,
}

fn get<T: serde::de::DeserializeOwned>(
    meta: &MetaStore,
    key: &str,
) -> Result<Option<T>, StorageError> {
    match meta.system(key).map_err(sm_err)? {
        Some(v) => Ok(Some(serde_json::from_slice(&v).map_err(sm_err)?)),
        None => Ok(None),
    }
}

impl StateMachine {
    /// Opens the state machine over `meta`, restoring what it last applied.
    pub fn open(meta: MetaStore) -> Result<(StateMachine, Arc<Shared>), StorageError> {
        let last_applied: Option<LogId> = get(&meta, APPLIED)?;
        let membership: StoredMembership = get(&meta, MEMBERSHIP)?.unwrap_or_default();
        let map: ClusterMap = get(&meta, MAP)?.unwrap_or_default();
        let secrets: Option<Secrets> = get(&meta, SECRETS)?;
        let shared = Arc::new(Shared {
            map: watch::channel(Arc::new(map)).0,
            applied: watch::channel(last_applied.map(|l| l.index).unwrap_or(0)).0,
            secrets: Mutex::new(secrets),
        });
        Ok((
            StateMachine {
                meta,
                shared: shared.clone(),
                last_applied,
                membership,
                snapshot: Arc::new(Mutex::new(None)),
            },
            shared,
        ))
    }

    fn reload(&mut self) -> Result<(), StorageError> {
        self.last_applied = get(&self.meta, APPLIED)?;
        self.membership = get(&self.meta, MEMBERSHIP)?.unwrap_or_default();
        let map: ClusterMap = get(&self.meta, MAP)?.unwrap_or_default();
        *self
            .shared
            .secrets
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = get(&self.meta, SECRETS)?;
        self.shared.map.send_replace(Arc::new(map));
        self.shared
            .applied
            .send_replace(self.last_applied.map(|l| l.index).unwrap_or(0));
        Ok(())
    }
}

/// Builds snapshots from a consistent export of the metadata store.
pub struct SnapshotBuilder {
    meta: MetaStore,
    slot: SnapshotSlot,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        let meta = self.meta.clone();
        let (data, system) = tokio::task::spawn_blocking(move || meta.export())
            .await
            .map_err(sm_err)?
            .map_err(sm_err)?;
        // The applied id and membership are read from the same transaction as the
        // data, so the snapshot is exactly "everything up to last_log_id".
        let find = |k: &str| system.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let last_log_id: Option<LogId> = match find(APPLIED) {
            Some(v) => serde_json::from_slice(v).map_err(sm_err)?,
            None => None,
        };
        let last_membership: StoredMembership = match find(MEMBERSHIP) {
            Some(v) => serde_json::from_slice(v).map_err(sm_err)?,
            None => StoredMembership::default(),
        };
        let snap_meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id: format!(
                "{}-{:08x}",
                last_log_id.map(|l| l.index).unwrap_or(0),
                rand::random::<u32>()
            ),
        };
        *self.slot.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((snap_meta.clone(), data.clone()));
        Ok(Snapshot {
            meta: snap_meta,
            snapshot: Box::new(data),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        enum Slot {
            Meta(usize),
            Map(Result<u64, String>),
            None,
        }
        let mut map = (**self.shared.map.borrow()).clone();
        let map_before = map.epoch;
        let mut secrets = None;
        let mut mutations = Vec::new();
        let mut slots = Vec::new();
        for e in entries {
            self.last_applied = Some(e.log_id);
            match e.payload {
                EntryPayload::Blank => slots.push(Slot::None),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m);
                    slots.push(Slot::None);
                }
                EntryPayload::Normal(Command::Meta(m)) => {
                    slots.push(Slot::Meta(mutations.len()));
                    mutations.push((None, m));
                }
                EntryPayload::Normal(Command::MetaOnce(p)) => {
                    slots.push(Slot::Meta(mutations.len()));
                    mutations.push((Some(p.request), p.mutation));
                }
                EntryPayload::Normal(Command::Map(change)) => {
                    slots.push(Slot::Map(map.apply(&change).map(|()| map.epoch)));
                }
                EntryPayload::Normal(Command::Secrets(s)) => {
                    secrets = Some(s);
                    slots.push(Slot::None);
                }
            }
        }
        let mut system = vec![
            (
                APPLIED.to_string(),
                serde_json::to_vec(&self.last_applied).map_err(sm_err)?,
            ),
            (
                MEMBERSHIP.to_string(),
                serde_json::to_vec(&self.membership).map_err(sm_err)?,
            ),
        ];
        if map.epoch != map_before {
            system.push((MAP.to_string(), serde_json::to_vec(&map).map_err(sm_err)?));
        }
        if let Some(s) = &secrets {
            system.push((SECRETS.to_string(), serde_json::to_vec(s).map_err(sm_err)?));
        }
        let meta = self.meta.clone();
        let mut results =
            tokio::task::spawn_blocking(move || meta.apply_replicated(&mutations, &system))
                .await
                .map_err(sm_err)?
                .map_err(sm_err)?
                .into_iter()
                .map(Some)
                .collect::<Vec<_>>();
        if map.epoch != map_before {
            self.shared.map.send_replace(Arc::new(map));
        }
        if let Some(s) = secrets {
            *self
                .shared
                .secrets
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(s);
        }
        self.shared
            .applied
            .send_replace(self.last_applied.map(|l| l.index).unwrap_or(0));
        Ok(slots
            .into_iter()
            .map(|s| match s {
                Slot::Meta(i) => Outcome::Meta(
                    results[i]
                        .take()
                        .unwrap_or(Err(cairn_meta::MetaError::Stopped)),
                ),
                Slot::Map(r) => Outcome::Map(r),
                Slot::None => Outcome::None,
            })
            .collect())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            meta: self.meta.clone(),
            slot: self.snapshot.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Vec<u8>>, StorageError> {
        Ok(Box::default())
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Vec<u8>>,
    ) -> Result<(), StorageError> {
        let store = self.meta.clone();
        let data = *snapshot;
        let keep = data.clone();
        tokio::task::spawn_blocking(move || store.import(&data))
            .await
            .map_err(sm_err)?
            .map_err(sm_err)?;
        self.reload()?;
        // The snapshot's own records must agree with its metadata.
        if self.last_applied != meta.last_log_id {
            return Err(sm_err(format!(
                "snapshot {} holds applied {:?}, not {:?}",
                meta.snapshot_id, self.last_applied, meta.last_log_id
            )));
        }
        *self.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some((meta.clone(), keep));
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        Ok(self
            .snapshot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .map(|(meta, data)| Snapshot {
                meta,
                snapshot: Box::new(data),
            }))
    }
}
