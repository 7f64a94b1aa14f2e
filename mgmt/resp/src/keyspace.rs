//! Commands over a tenant's whole keyspace: SCAN, DBSIZE, INFO.

use crate::commands::{now, Session};
use crate::expiry::expiry;
use crate::reply::{array, bulk, error};
use crate::shared::Cursor;
use crate::RespError;
use bytes::Bytes;
use cairn_meta::After;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The most keys one SCAN call looks at, whatever its COUNT.
const SCAN_MAX: usize = 1000;

/// Live keys, and how many of them expire.
pub(crate) struct KeyCount {
    pub keys: i64,
    pub expires: i64,
}

impl Session {
    /// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`: about `n` keys looked
    /// at per call, in key order; every key present for the whole iteration is
    /// returned exactly once (the cursor names the last key returned, so keys
    /// added or removed meanwhile do not shift the others).
    pub(crate) async fn scan<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        cursor: &Bytes,
        opts: &[Bytes],
        w: &mut W,
    ) -> Result<(), RespError> {
        let (mut pattern, mut count, mut strings) = (None, 10usize, true);
        let mut it = opts.iter();
        while let Some(o) = it.next() {
            let Some(v) = it.next() else {
                return error(w, "ERR syntax error").await;
            };
            match o.to_ascii_uppercase().as_slice() {
                b"MATCH" => pattern = Some(v.clone()),
                b"COUNT" => match std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()) {
                    Some(n) if n >= 1 => count = n,
                    Some(_) => return error(w, "ERR syntax error").await,
                    None => return error(w, "ERR value is not an integer or out of range").await,
                },
                b"TYPE" => strings = v.eq_ignore_ascii_case(b"string"),
                _ => return error(w, "ERR syntax error").await,
            }
        }
        let after = match std::str::from_utf8(cursor)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            Some(0) => None,
            Some(n) => match self.shared.cursors.get(&n) {
                Some(c) if c.tenant == tenant => Some(After::Key(c.after)),
                _ => return error(w, "ERR invalid cursor").await,
            },
            None => return error(w, "ERR invalid cursor").await,
        };
        if !strings || !self.bucket_exists(tenant).await? {
            return w
                .write_all(b"*2\r\n$1\r\n0\r\n*0\r\n")
                .await
                .map_err(RespError::Io);
        }
        // Keys are encoded byte by byte, so the literal head of the pattern,
        // encoded, is a prefix of every matching object key.
        let prefix = pattern.as_deref().map(literal_head).unwrap_or_default();
        let page = self
            .store
            .list_objects(
                tenant,
                &self.pool.bucket,
                &self.pool.object_key(prefix).unwrap_or_default(),
                after,
                None,
                count.min(SCAN_MAX),
            )
            .await?;
        let t = now();
        let keys: Vec<Vec<u8>> = page
            .objects
            .iter()
            .filter(|(_, r)| expiry(r).is_none_or(|at| at > t))
            .filter_map(|(k, _)| self.pool.redis_key(k))
            .filter(|k| pattern.as_deref().is_none_or(|p| glob(p, k)))
            .collect();
        let next = match (page.next, page.objects.last()) {
            (Some(_), Some((last, _))) => {
                // Below 2^53, so clients that parse numbers as doubles keep it.
                let id = rand::random_range(1..(1u64 << 53));
                self.shared.cursors.insert(
                    id,
                    Cursor {
                        tenant,
                        after: last.clone(),
                    },
                );
                id
            }
            _ => 0,
        };
        array(w, 2).await?;
        bulk(w, next.to_string().as_bytes()).await?;
        array(w, keys.len()).await?;
        for k in keys {
            bulk(w, &k).await?;
        }
        Ok(())
    }

    /// Live keys of the tenant, counted page by page.
    pub(crate) async fn count_keys(&self, tenant: u64) -> Result<KeyCount, RespError> {
        let mut n = KeyCount {
            keys: 0,
            expires: 0,
        };
        if !self.bucket_exists(tenant).await? {
            return Ok(n);
        }
        let (bucket, t) = (self.pool.bucket.clone(), now());
        let mut after = None;
        loop {
            let page = self
                .store
                .list_objects(tenant, &bucket, "", after, None, 1000)
                .await?;
            for (_, r) in &page.objects {
                match expiry(r) {
                    None => n.keys += 1,
                    Some(at) if at > t => {
                        n.keys += 1;
                        n.expires += 1;
                    }
                    Some(_) => {}
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(n),
            }
        }
    }

    /// `INFO [section ...]`: server, clients, memory, stats and keyspace. The
    /// keyspace is the session's tenant's; the rest is the node's.
    pub(crate) async fn info<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        a: &[Bytes],
        w: &mut W,
    ) -> Result<(), RespError> {
        let asked: Vec<String> = a
            .iter()
            .map(|s| String::from_utf8_lossy(s).to_ascii_lowercase())
            .collect();
        let all = asked.is_empty()
            || asked
                .iter()
                .any(|s| matches!(s.as_str(), "all" | "default" | "everything"));
        let wants = |s: &str| all || asked.iter().any(|x| x == s);
        let (st, ram) = (&self.shared.stats, self.store.ram());
        let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        // Writing to a String cannot fail.
        if wants("server") {
            let _ = write!(
                out,
                "# Server\r\nredis_version:7.2.0\r\nredis_mode:standalone\r\nserver_name:cairn\r\ncairn_version:{}\r\n\r\n",
                env!("CARGO_PKG_VERSION")
            );
        }
        if wants("clients") {
            let _ = write!(
                out,
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
                st.connected.get(),
                self.cfg().max_clients
            );
        }
        if wants("memory") {
            let used = ram.bytes() + self.shared.intake.in_use();
            let _ = write!(
                out,
                "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:allkeys-lru\r\ncairn_ram_tier_bytes:{}\r\ncairn_ram_tier_values:{}\r\ncairn_intake_bytes:{}\r\ncairn_intake_in_use:{}\r\n\r\n",
                human(used),
                rss(),
                ram.capacity(),
                human(ram.capacity()),
                ram.bytes(),
                ram.entries(),
                self.shared.intake.bytes(),
                self.shared.intake.in_use(),
            );
        }
        if wants("stats") {
            let rc = ram.counters();
            // Bytes in and out, and values evicted from full pools, are counted
            // per keyspace (for `nodectl kv stats`); the node's are their sums.
            let (mut bytes_in, mut bytes_out, mut dropped) = (0, 0, 0);
            for f in ram.groups().values() {
                bytes_in += f.bytes_in;
                bytes_out += f.bytes_out;
                dropped += f.dropped;
            }
            let (hits, misses) = (get(&rc.hits), get(&rc.misses));
            let ratio = match hits + misses {
                0 => 0.0,
                n => hits as f64 / n as f64,
            };
            let _ = write!(
                out,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\nexpired_keys:0\r\nevicted_keys:{}\r\ncairn_ram_hits:{hits}\r\ncairn_ram_misses:{misses}\r\ncairn_ram_hit_ratio:{ratio:.3}\r\ncairn_ram_evictions:{}\r\n\r\n",
                st.connections.get(),
                st.commands.get(),
                st.rejected.get(),
                bytes_in,
                bytes_out,
                st.hits.get(),
                st.misses.get(),
                dropped,
                get(&rc.evicted),
            );
        }
        if wants("keyspace") {
            let n = self.count_keys(tenant).await?;
            out.push_str("# Keyspace\r\n");
            // Redis lists a database only when it holds keys.
            if n.keys > 0 {
                let _ = write!(
                    out,
                    "db0:keys={},expires={},avg_ttl=0\r\n",
                    n.keys, n.expires
                );
            }
        }
        // Each line ends in CRLF, the last one too, as Redis writes it.
        let out = format!("{}\r\n", out.trim_end());
        bulk(w, out.as_bytes()).await
    }
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.2}G", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2}M", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.2}K", b as f64 / 1024.0),
    }
}

/// The process's resident set, from /proc (0 where there is none).
fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// The bytes of a pattern before its first special character.
fn literal_head(p: &[u8]) -> &[u8] {
    let end = p
        .iter()
        .position(|b| matches!(b, b'*' | b'?' | b'[' | b'\\'))
        .unwrap_or(p.len());
    &p[..end]
}

/// Redis's glob: `*`, `?`, `[abc]`, `[^a-z]` and `\x`, on bytes. Greedy with one
/// backtrack point, so no pattern takes more than O(pattern × key) steps.
pub(crate) fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            if p[pi] == b'*' {
                star = Some((pi, si));
                pi += 1;
                continue;
            }
            if let Some(next) = one(p, pi, s[si]) {
                pi = next;
                si += 1;
                continue;
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

/// If the one-byte element of the pattern at `pi` matches `c`, where it ends.
fn one(p: &[u8], pi: usize, c: u8) -> Option<usize> {
    match p[pi] {
        b'?' => Some(pi + 1),
        b'\\' if pi + 1 < p.len() => (p[pi + 1] == c).then_some(pi + 2),
        b'[' => {
            let mut i = pi + 1;
            let not = p.get(i) == Some(&b'^');
            if not {
                i += 1;
            }
            let mut hit = false;
            // An unterminated class runs to the end of the pattern (as in Redis).
            while i < p.len() && p[i] != b']' {
                if p[i] == b'\\' && i + 1 < p.len() {
                    hit |= p[i + 1] == c;
                    i += 2;
                } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                    let (lo, hi) = (p[i].min(p[i + 2]), p[i].max(p[i + 2]));
                    hit |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    hit |= p[i] == c;
                    i += 1;
                }
            }
            (hit != not).then_some((i + 1).min(p.len()))
        }
        x => (x == c).then_some(pi + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_as_redis() {
        let yes: &[(&str, &str)] = &[
            ("*", ""),
            ("*", "anything"),
            ("h?llo", "hello"),
            ("h*llo", "heeeello"),
            ("h[ae]llo", "hallo"),
            ("h[^e]llo", "hallo"),
            ("h[a-b]llo", "hbllo"),
            ("h[b-a]llo", "hallo"),
            ("h\\*llo", "h*llo"),
            ("meta-llama/*@bfloat16", "meta-llama/L@1@0@ab@bfloat16"),
            ("*a*b*c*", "xxaxxbxxcxx"),
        ];
        for (p, s) in yes {
            assert!(glob(p.as_bytes(), s.as_bytes()), "{p} ~ {s}");
        }
        let no: &[(&str, &str)] = &[
            ("h?llo", "hllo"),
            ("h[^e]llo", "hello"),
            ("h[a-b]llo", "hcllo"),
            ("h\\*llo", "hello"),
            ("a*", "ba"),
            ("*a*b*c*", "xxcxxbxxaxx"),
        ];
        for (p, s) in no {
            assert!(!glob(p.as_bytes(), s.as_bytes()), "{p} !~ {s}");
        }
        assert_eq!(literal_head(b"user:*:x"), b"user:");
        assert_eq!(literal_head(b"plain"), b"plain");
    }

    #[test]
    fn a_pathological_pattern_is_quick() {
        let p = "*a".repeat(30) + "b";
        let s = "a".repeat(5000);
        let t = std::time::Instant::now();
        assert!(!glob(p.as_bytes(), s.as_bytes()));
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
