//! Reed-Solomon erasure coding for Cairn, over Intel ISA-L.
//!
//! **What it is.** A systematic k+m code over GF(2^8): k data shards are stored
//! unchanged and m parity shards are computed from them, so any k of the k+m
//! shards rebuild the rest. The math runs in ISA-L (Debian `libisal-dev`, linked
//! by `build.rs`), chosen because it led every alternative measured on this
//! hardware (see ARCHITECTURE.md, "Erasure coding").
//!
//! **What it owns.** The encoding matrix (ISA-L's Cauchy matrix: identity on
//! top, so any k rows are invertible for every k+m <= 255), encoding, and
//! rebuilding lost shards. All `unsafe` code of the crate is in the `ffi`
//! module, whose C declarations are private to it and reached only through
//! wrappers that check sizes before calling C.
//!
//! **What it must never do.** It knows nothing about objects, placement,
//! checksums or I/O: it never splits or pads objects into shards, never decides
//! which shards are lost (the caller marks them `None`), and never detects
//! corruption — a present but damaged shard silently yields damaged output, so
//! callers verify checksums before feeding shards in. It must never change the
//! matrix for an existing (k, m): parity already on disk was computed with it.
//!
//! Shards of any length are accepted (ISA-L has no alignment requirement; zero
//! length is a trivial no-op). Throughput (one thread, ISA-L 2.30 AVX-512 on
//! AMD EPYC, 1 MiB shards, cache-resident), over five runs on a shared builder:
//! 4+2 encode 39-49 GB/s, 8+3 encode 28-36, rebuild of m lost data shards 36-45
//! (4+2) and 28-34 (8+3). That is above ARCHITECTURE.md's table (19.5 / 17.3 /
//! 16.9), which was measured on another machine of the same kind; reproduce
//! with `cargo run --release -p cairn-erasure --example ec_bench`.

mod ffi;

use core::fmt;

/// Why an encode or reconstruct call was refused. No call modifies its buffers
/// when it returns an error.
#[derive(Debug, thiserror::Error)]
pub enum ErasureError {
    /// k or m outside `1 <= k`, `k + m <= 255`.
    #[error("invalid erasure code {k}+{m}: need k >= 1 and k + m <= 255")]
    InvalidParams { k: usize, m: usize },
    /// The wrong number of shards (data, parity, or all) was passed.
    #[error("expected {expected} shards, got {got}")]
    ShardCount { expected: usize, got: usize },
    /// A shard's length differs from the first shard's.
    #[error("shard {index} is {len} bytes, expected {expected}")]
    ShardLength {
        index: usize,
        len: usize,
        expected: usize,
    },
    /// Fewer than k shards survive: the data is unrecoverable.
    #[error("only {present} shards present, at least {needed} needed")]
    TooFewShards { present: usize, needed: usize },
    /// The decode matrix could not be inverted. Unreachable with the Cauchy
    /// matrix; kept so a broken invariant surfaces as an error, not garbage.
    #[error("decode matrix is singular")]
    Singular,
}

/// A k+m Reed-Solomon code. Immutable after construction, so one `Codec` can be
/// shared by any number of threads.
pub struct Codec {
    k: usize,
    m: usize,
    /// (k+m) x k, row-major; row i maps the data shards to shard i.
    matrix: Vec<u8>,
    /// Tables for the m parity rows; `None` when m == 0 (ISA-L rejects 0 rows).
    encode: Option<ffi::Tables>,
}

impl fmt::Debug for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The matrix and tables are derived from (k, m); printing them is noise.
        f.debug_struct("Codec")
            .field("k", &self.k)
            .field("m", &self.m)
            .finish_non_exhaustive()
    }
}

impl Codec {
    /// A code with `k` data and `m` parity shards; `1 <= k`, `k + m <= 255`.
    /// `m == 0` is allowed (encode is a no-op, nothing can be rebuilt).
    pub fn new(k: usize, m: usize) -> Result<Codec, ErasureError> {
        if k == 0 || k.checked_add(m).is_none_or(|n| n > ffi::MAX_SHARDS) {
            return Err(ErasureError::InvalidParams { k, m });
        }
        let matrix = ffi::cauchy_matrix(k, m);
        let encode = (m > 0).then(|| ffi::Tables::new(k, m, &matrix[k * k..]));
        Ok(Codec {
            k,
            m,
            matrix,
            encode,
        })
    }

    /// k, the number of data shards.
    pub fn data_shards(&self) -> usize {
        self.k
    }

    /// m, the number of parity shards.
    pub fn parity_shards(&self) -> usize {
        self.m
    }

    /// Computes the m parity shards of the k `data` shards into `parity`.
    /// All shards must have the same length.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), ErasureError> {
        check_count(data.len(), self.k)?;
        check_count(parity.len(), self.m)?;
        let lens = data
            .iter()
            .map(|d| d.len())
            .chain(parity.iter().map(|p| p.len()));
        common_len(lens.enumerate())?;
        if let Some(tables) = &self.encode {
            tables.encode(data, parity);
        }
        Ok(())
    }

    /// Rebuilds every missing (`None`) entry of `shards` (k data then m parity
    /// shards, in order). Needs at least k present shards of equal length; on
    /// success every entry is `Some`. On error `shards` is untouched.
    pub fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), ErasureError> {
        let (k, n) = (self.k, self.k + self.m);
        check_count(shards.len(), n)?;
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < k {
            return Err(ErasureError::TooFewShards { present, needed: k });
        }
        common_len(
            shards
                .iter()
                .enumerate()
                .filter_map(|(i, s)| Some((i, s.as_ref()?.len()))),
        )?;
        let missing: Vec<usize> = (0..n).filter(|&i| shards[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }

        // Decode from the first k survivors. Taking them in index order prefers
        // data shards, whose identity rows keep the decode rows sparse, and
        // with all data present this degenerates to a plain parity re-encode.
        let survivors: Vec<usize> = (0..n).filter(|&i| shards[i].is_some()).take(k).collect();
        let mut sub = Vec::with_capacity(k * k);
        for &s in &survivors {
            sub.extend_from_slice(self.row(s));
        }
        // survivors = sub * data, so data = inv * survivors.
        let inv = ffi::invert(&sub, k).ok_or(ErasureError::Singular)?;

        // One coefficient row per missing shard, all applied to the survivors in
        // a single ISA-L pass: a lost data shard d is row d of `inv`; a lost
        // parity shard p is (row p of the encoding matrix) * inv. This reads the
        // survivors once instead of rebuilding data first and then re-reading
        // all data to re-encode parity.
        let mut coeffs = Vec::with_capacity(missing.len() * k);
        for &i in &missing {
            if i < k {
                coeffs.extend_from_slice(&inv[i * k..(i + 1) * k]);
            } else {
                let row = self.row(i);
                coeffs.extend((0..k).map(|c| {
                    row.iter()
                        .enumerate()
                        .fold(0u8, |acc, (t, &e)| acc ^ ffi::gf_mul(e, inv[t * k + c]))
                }));
            }
        }
        let tables = ffi::Tables::new(k, missing.len(), &coeffs);
        let inputs: Vec<&[u8]> = survivors
            .iter()
            .filter_map(|&s| shards[s].as_deref())
            .collect();
        let rebuilt = tables.encode_new(&inputs);
        for (&i, shard) in missing.iter().zip(rebuilt) {
            shards[i] = Some(shard);
        }
        Ok(())
    }

    /// Row `i` of the encoding matrix.
    fn row(&self, i: usize) -> &[u8] {
        &self.matrix[i * self.k..(i + 1) * self.k]
    }
}

fn check_count(got: usize, expected: usize) -> Result<(), ErasureError> {
    if got == expected {
        Ok(())
    } else {
        Err(ErasureError::ShardCount { expected, got })
    }
}

/// The length shared by all `(index, len)` pairs (0 if there are none).
fn common_len(mut lens: impl Iterator<Item = (usize, usize)>) -> Result<usize, ErasureError> {
    let Some((_, expected)) = lens.next() else {
        return Ok(0);
    };
    match lens.find(|&(_, len)| len != expected) {
        Some((index, len)) => Err(ErasureError::ShardLength {
            index,
            len,
            expected,
        }),
        None => Ok(expected),
    }
}

#[cfg(test)]
mod tests;
