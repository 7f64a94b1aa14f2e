//! The Raft log on disk: a redb database beside the metadata, every append durable
//! (fsynced) before openraft is told it is.

// openraft's storage traits fix `StorageError` (over 200 bytes) as the error of every
// method; the helpers here return what the traits return, and the redb errors are
// converted once at the trait boundary. Boxing would only add a conversion per call.
#![allow(clippy::result_large_err)]

use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{LogState, RaftLogReader, StorageIOError};
use redb::{Database, ReadableTable, TableDefinition};
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
/// "vote", "committed", "purged" -> JSON.
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("state");

/// The log store; clones share the database (openraft reads through a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogStore")
    }
}

fn r<E: std::error::Error + 'static>(e: E) -> StorageError {
    StorageIOError::read_logs(&e).into()
}
fn w<E: std::error::Error + 'static>(e: E) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl LogStore {
    pub fn open(path: &Path) -> Result<LogStore, redb::Error> {
        // Created atomically: a crash while the file is new leaves no file that no
        // start can open.
        let db = cairn_sysutil::open_or_create(path, |p| -> Result<Database, redb::Error> {
            let db = Database::create(p)?;
            let tx = db.begin_write()?;
            tx.open_table(LOG)?;
            tx.open_table(STATE)?;
            tx.commit()?;
            Ok(db)
        })?;
        Ok(LogStore { db: Arc::new(db) })
    }

    /// The id of the last entry on disk (or of the last purged one when the log is
    /// empty): what a vote compares.
    pub(crate) fn last_log_id(&self) -> Result<Option<LogId>, StorageError> {
        let purged: Option<LogId> = self.get_state("purged")?;
        let tx = self.db.begin_read().map_err(r)?;
        let t = tx.open_table(LOG).map_err(r)?;
        let last = match t.last().map_err(r)? {
            Some((_, v)) => Some(
                serde_json::from_slice::<Entry>(v.value())
                    .map_err(r)?
                    .log_id,
            ),
            None => purged,
        };
        Ok(last)
    }

    fn get_state<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StorageError> {
        let tx = self.db.begin_read().map_err(r)?;
        let t = tx.open_table(STATE).map_err(r)?;
        match t.get(key).map_err(r)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(r)?)),
            None => Ok(None),
        }
    }

    fn put_state<T: serde::Serialize>(&self, key: &str, v: &T) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(v).map_err(w)?;
        let tx = self.db.begin_write().map_err(w)?;
        tx.open_table(STATE)
            .map_err(w)?
            .insert(key, bytes.as_slice())
            .map_err(w)?;
        tx.commit().map_err(w)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let tx = self.db.begin_read().map_err(r)?;
        let t = tx.open_table(LOG).map_err(r)?;
        let mut out = Vec::new();
        for e in t.range(range).map_err(r)? {
            let (_, v) = e.map_err(r)?;
            out.push(serde_json::from_slice(v.value()).map_err(r)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        Ok(LogState {
            last_purged_log_id: self.get_state("purged")?,
            last_log_id: self.last_log_id()?,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.put_state("vote", vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.get_state("vote")
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.put_state("committed", &committed)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.get_state::<Option<LogId>>("committed")?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let db = self.db.clone();
        // One transaction (one fsync) per append call: openraft batches entries.
        let res = tokio::task::spawn_blocking(move || -> Result<(), redb::Error> {
            let tx = db.begin_write()?;
            {
                let mut t = tx.open_table(LOG)?;
                for e in &entries {
                    let bytes =
                        serde_json::to_vec(e).map_err(|e| redb::Error::Corrupted(e.to_string()))?;
                    t.insert(e.log_id.index, bytes.as_slice())?;
                }
            }
            tx.commit()?;
            Ok(())
        })
        .await
        .map_err(w)?;
        match res {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(w(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let tx = self.db.begin_write().map_err(w)?;
        {
            let mut t = tx.open_table(LOG).map_err(w)?;
            t.retain_in(log_id.index.., |_, _| false).map_err(w)?;
        }
        tx.commit().map_err(w)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec(&log_id).map_err(w)?;
        let tx = self.db.begin_write().map_err(w)?;
        {
            tx.open_table(STATE)
                .map_err(w)?
                .insert("purged", bytes.as_slice())
                .map_err(w)?;
            let mut t = tx.open_table(LOG).map_err(w)?;
            t.retain_in(..=log_id.index, |_, _| false).map_err(w)?;
        }
        tx.commit().map_err(w)
    }
}
