//! Decoded manifests of large objects. A manifest is JSON, a few bytes per
//! stripe: tens of kilobytes for a file of gigabytes. A client reading such a
//! file in many ranged calls (an NFS client's 1 MiB READs, each asking for the
//! record anew, twice) would decode it every time, and that decoding was the
//! largest cost of an NFS read of a 1 GiB file. An entry is used only while the
//! stored bytes are exactly those it was decoded from, so nothing needs to
//! invalidate it: a changed object is decoded anew.

use crate::{MetaError, ObjectRecord};
use std::collections::HashMap;
use std::sync::Mutex;

/// Manifests smaller than this are decoded each time (it costs less than
/// keeping them).
const MIN_BYTES: usize = 8 << 10;
/// Manifests kept; past it one is let go (the least recently used).
const ENTRIES: usize = 64;

struct Entry {
    raw: Vec<u8>,
    rec: ObjectRecord,
    used: u64,
}

/// Entries by bucket and key, and a use counter (for least recently used).
type Entries = (u64, HashMap<(String, String), Entry>);

#[derive(Default)]
pub(crate) struct RecordCache {
    map: Mutex<Entries>,
}

impl RecordCache {
    /// The record `raw` (the stored bytes of `bucket/key`) encodes.
    pub(crate) fn decode(
        &self,
        bucket: &str,
        key: &str,
        raw: &[u8],
    ) -> Result<ObjectRecord, MetaError> {
        if raw.len() < MIN_BYTES {
            return Ok(serde_json::from_slice(raw)?);
        }
        let id = (bucket.to_string(), key.to_string());
        {
            let mut guard = self.map.lock().unwrap_or_else(|e| e.into_inner());
            let (clock, map) = &mut *guard;
            *clock += 1;
            if let Some(e) = map.get_mut(&id).filter(|e| e.raw == raw) {
                e.used = *clock;
                return Ok(e.rec.clone());
            }
        }
        let rec: ObjectRecord = serde_json::from_slice(raw)?;
        let mut guard = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let (clock, map) = &mut *guard;
        if map.len() >= ENTRIES && !map.contains_key(&id) {
            let oldest = map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                map.remove(&k);
            }
        }
        map.insert(
            id,
            Entry {
                raw: raw.to_vec(),
                rec: rec.clone(),
                used: *clock,
            },
        );
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(size: u64, extents: usize) -> ObjectRecord {
        let mut rec = ObjectRecord {
            size,
            etag: format!("e{size}"),
            ..ObjectRecord::empty()
        };
        for i in 0..extents {
            rec.extents.push(crate::Extent {
                id: i as u128,
                size: 1,
                layout: crate::Layout::Replicated {
                    drives: vec![0, 1, 2],
                    sum: Some(7),
                    tag: None,
                },
                sealed: None,
            });
        }
        rec
    }

    #[test]
    fn a_changed_manifest_is_decoded_anew() {
        let cache = RecordCache::default();
        let a = serde_json::to_vec(&record(1, 400)).unwrap();
        assert!(a.len() >= MIN_BYTES, "{} bytes", a.len());
        assert_eq!(cache.decode("b", "k", &a).unwrap().size, 1);
        assert_eq!(cache.decode("b", "k", &a).unwrap().size, 1, "kept");
        let b = serde_json::to_vec(&record(2, 400)).unwrap();
        assert_eq!(
            cache.decode("b", "k", &b).unwrap().size,
            2,
            "not the kept one"
        );
        assert!(cache.decode("b", "k", b"{not json").is_err());
        for i in 0..ENTRIES + 5 {
            cache.decode("b", &format!("k{i}"), &a).unwrap();
        }
        assert!(cache.map.lock().unwrap().1.len() <= ENTRIES);
    }
}
