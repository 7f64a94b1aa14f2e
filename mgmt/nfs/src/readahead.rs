//! Read-ahead for files read in sequence. A client reading a file one READ at a
//! time (libnfs's `nfs-cp`, `cat` on a mount with few requests in flight) would
//! otherwise wait for each fragment's fetch from the drives in turn; once READs
//! come in order, the next windows of the file are fetched while the client is
//! busy with the last one, and the READs that follow are answered from them.
//!
//! A window belongs to one version of one file: it is used only while the
//! object's record (etag, modification time, size) is the one it was read from,
//! so a READ after an overwrite over S3 or NFS never sees old bytes.

use crate::fs::Res;
use bytes::Bytes;
use cairn_meta::ObjectRecord;
use futures::future::{BoxFuture, FutureExt, Shared};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The bytes of one window, once fetched: the pieces the store gave, kept as
/// they are (a READ copies its range out of them once).
pub(crate) type Window = Shared<BoxFuture<'static, Res<Arc<Vec<Bytes>>>>>;

/// Bytes fetched ahead per window (four 1 MiB fragments: fetched together).
pub(crate) const WINDOW: u64 = 4 << 20;
/// Windows kept ahead of the client.
const DEPTH: usize = 2;
/// Files read ahead at once; the least recently read is let go past it.
const FILES: usize = 16;
/// A file not read for this long is let go.
const IDLE: Duration = Duration::from_secs(30);

/// Which version of a file a window is of.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Version {
    etag: String,
    modified_ms: i64,
    size: u64,
}

impl Version {
    fn of(rec: &ObjectRecord) -> Self {
        Version {
            etag: rec.etag.clone(),
            modified_ms: rec.modified_ms,
            size: rec.size,
        }
    }
}

struct File {
    version: Version,
    /// Where the last READ ended: the next one starting there is in sequence.
    next: u64,
    /// Windows in file order: (start, end, bytes).
    windows: VecDeque<(u64, u64, Window)>,
    touched: Instant,
}

/// What a READ is answered from.
pub(crate) enum Plan {
    /// A window covering the whole range: await it and slice.
    Window { start: u64, bytes: Window },
    /// Read directly from the store.
    Direct,
}

/// Read-ahead state of every file being read, by export and key.
#[derive(Default)]
pub(crate) struct ReadAhead {
    files: Mutex<HashMap<(u64, String), File>>,
}

impl ReadAhead {
    /// How to answer a READ of `[offset, end)` of `rec`, and the windows to
    /// start fetching (`fetch(start, end)` makes a window's future; it is
    /// called with the lock held, so it must only build the future).
    pub(crate) fn plan(
        &self,
        export: u64,
        key: &str,
        rec: &ObjectRecord,
        offset: u64,
        end: u64,
        fetch: impl Fn(u64, u64) -> Window,
    ) -> Plan {
        let version = Version::of(rec);
        let now = Instant::now();
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let id = (export, key.to_string());
        let sequential = match files.get(&id) {
            Some(f) if f.version == version => f.next == offset || f.covers(offset, end),
            _ => false,
        };
        if !sequential {
            // A first READ, one elsewhere in the file, or a new version: no
            // windows yet, only where this READ ends.
            if !files.contains_key(&id) {
                Self::make_room(&mut files, now);
            }
            files.insert(
                id,
                File {
                    version,
                    next: end,
                    windows: VecDeque::new(),
                    touched: now,
                },
            );
            return Plan::Direct;
        }
        let f = files.get_mut(&id).expect("present");
        f.touched = now;
        f.next = end;
        // Windows wholly behind this READ are done with.
        while f.windows.front().is_some_and(|w| w.1 <= offset) {
            f.windows.pop_front();
        }
        let plan = match f.windows.iter().find(|w| w.0 <= offset && end <= w.1) {
            Some((start, _, bytes)) => Plan::Window {
                start: *start,
                bytes: bytes.clone(),
            },
            None => Plan::Direct,
        };
        // Keep DEPTH windows ahead of where this READ ends.
        let mut from = f.windows.back().map_or(end, |w| w.1.max(end));
        while f.windows.iter().filter(|w| w.1 > end).count() < DEPTH && from < rec.size {
            let to = (from + WINDOW).min(rec.size);
            f.windows.push_back((from, to, fetch(from, to)));
            from = to;
        }
        plan
    }

    /// Lets go of idle files, then of the least recently read past [`FILES`].
    fn make_room(files: &mut HashMap<(u64, String), File>, now: Instant) {
        files.retain(|_, f| now.duration_since(f.touched) < IDLE);
        while files.len() >= FILES {
            let oldest = files
                .iter()
                .min_by_key(|(_, f)| f.touched)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => files.remove(&k),
                None => break,
            };
        }
    }

    /// Forgets `key`'s windows (its file was written, removed or renamed).
    pub(crate) fn forget(&self, export: u64, key: &str) {
        let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        files.remove(&(export, key.to_string()));
    }
}

impl File {
    fn covers(&self, offset: u64, end: u64) -> bool {
        self.windows.iter().any(|w| w.0 <= offset && end <= w.1)
    }
}

/// A window fetched by `fut`, started at once (a shared future runs only when
/// polled: a task polls it to the end whether or not a READ waits on it).
pub(crate) fn start(fut: impl Future<Output = Res<Arc<Vec<Bytes>>>> + Send + 'static) -> Window {
    let w = fut.boxed().shared();
    tokio::spawn(w.clone());
    w
}

/// Appends `[from, from + len)` of the bytes `parts` hold (in order, from
/// offset 0) to `out`.
pub(crate) fn copy_range(parts: &[Bytes], from: usize, len: usize, out: &mut Vec<u8>) {
    let (mut at, end) = (0usize, from + len);
    for p in parts {
        let (lo, hi) = (at, at + p.len());
        at = hi;
        if hi <= from {
            continue;
        }
        if lo >= end {
            break;
        }
        out.extend_from_slice(&p[from.max(lo) - lo..end.min(hi) - lo]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_copied_across_pieces() {
        let parts = [
            Bytes::from_static(b"abc"),
            Bytes::from_static(b""),
            Bytes::from_static(b"defg"),
            Bytes::from_static(b"hi"),
        ];
        for (from, len, want) in [
            (0, 9, &b"abcdefghi"[..]),
            (2, 3, b"cde"),
            (3, 4, b"defg"),
            (8, 1, b"i"),
            (4, 0, b""),
        ] {
            let mut out = Vec::new();
            copy_range(&parts, from, len, &mut out);
            assert_eq!(out, want, "{from}+{len}");
        }
    }
}
