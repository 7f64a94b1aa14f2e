//! The only place `unsafe` lives in this crate: declarations for the five ISA-L
//! functions we use and safe wrappers that check every invariant ISA-L relies on
//! (matrix sizes, pointer counts, equal buffer lengths) before crossing the FFI.
//!
//! Declarations follow `/usr/include/isa-l/erasure_code.h` of ISA-L 2.30.

use core::ffi::c_int;
use core::fmt;

/// ISA-L's GF(2^8) has 256 elements; [`crate::Codec::new`] caps k+m at 255,
/// so no pointer array ever needs more than this many entries.
pub(crate) const MAX_SHARDS: usize = 255;

/// Most bytes handed to one `ec_encode_data` call: its `len` is a C `int`, so
/// shards of 2 GiB or more must be split. Smaller slices (64 KiB, which help the
/// pure-Rust codecs) made no measurable difference to ISA-L with 1 MiB shards
/// in `examples/ec_bench.rs`, so buffers are passed whole.
const CHUNK: usize = 1 << 30;

mod sys {
    use core::ffi::{c_int, c_uchar};

    // SAFETY (of the block): signatures transcribed from ISA-L 2.30's
    // erasure_code.h; `unsigned char` = u8, `int` = i32 on every Rust target
    // Debian ships ISA-L for.
    unsafe extern "C" {
        /// Writes an (m x k) matrix, identity on top, Cauchy rows 1/(i ^ j) below.
        pub(super) fn gf_gen_cauchy1_matrix(a: *mut c_uchar, m: c_int, k: c_int);
        /// Inverts n x n `inp` into `out`, destroying `inp`; non-zero if singular.
        pub(super) fn gf_invert_matrix(inp: *mut c_uchar, out: *mut c_uchar, n: c_int) -> c_int;
        /// Expands `rows` x `k` coefficients into 32*k*rows bytes of tables.
        pub(super) fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        /// coding[r][i] = sum_j a[r][j] * data[j][i] for i < len (overwrites, never reads, coding).
        pub(super) fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        /// Pure table lookup on two bytes: no pointers, no state, so it is
        /// declared `safe`.
        pub(super) safe fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
    }
}

/// Multiplication in ISA-L's GF(2^8) (polynomial 0x11d).
pub(crate) fn gf_mul(a: u8, b: u8) -> u8 {
    sys::gf_mul(a, b)
}

/// The full (k+m) x k encoding matrix, row-major: identity rows for the data
/// shards, then ISA-L's Cauchy rows for parity (any k of its rows are invertible,
/// unlike `gf_gen_rs_matrix`, which fails for some k+m).
pub(crate) fn cauchy_matrix(k: usize, m: usize) -> Vec<u8> {
    let n = k + m;
    assert!(k >= 1 && n <= MAX_SHARDS, "k={k} m={m} out of range");
    let mut a = vec![0u8; n * k];
    // SAFETY: `a` holds exactly n*k bytes, which is what ISA-L writes for an
    // n-row, k-column matrix; n, k <= 255 fit in c_int.
    unsafe { sys::gf_gen_cauchy1_matrix(a.as_mut_ptr(), n as c_int, k as c_int) };
    a
}

/// Inverse of the n x n row-major matrix `m`, or `None` if it is singular.
pub(crate) fn invert(m: &[u8], n: usize) -> Option<Vec<u8>> {
    assert!(
        n <= MAX_SHARDS && m.len() == n * n,
        "matrix is not {n} x {n}"
    );
    // ISA-L destroys its input, so it works on a scratch copy (at most 64 KiB).
    let mut scratch = m.to_vec();
    let mut out = vec![0u8; n * n];
    // SAFETY: both buffers are exactly n*n bytes, distinct allocations, and
    // ISA-L touches only n*n bytes of each.
    let rc = unsafe { sys::gf_invert_matrix(scratch.as_mut_ptr(), out.as_mut_ptr(), n as c_int) };
    (rc == 0).then_some(out)
}

/// Expanded multiplication tables for one coefficient matrix (`rows` outputs
/// from `k` inputs), ready for `ec_encode_data`.
pub(crate) struct Tables {
    k: usize,
    rows: usize,
    gftbls: Vec<u8>,
}

impl fmt::Debug for Tables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tables")
            .field("k", &self.k)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl Tables {
    /// `coeffs` is `rows` x `k`, row-major.
    pub(crate) fn new(k: usize, rows: usize, coeffs: &[u8]) -> Tables {
        assert!((1..=MAX_SHARDS).contains(&k) && (1..=MAX_SHARDS).contains(&rows));
        assert_eq!(
            coeffs.len(),
            k * rows,
            "coefficient matrix is not {rows} x {k}"
        );
        let mut gftbls = vec![0u8; 32 * k * rows];
        // SAFETY: ISA-L reads k*rows coefficients (exactly `coeffs.len()`, and it
        // never writes through `a` despite the non-const pointer) and writes
        // 32*k*rows bytes, exactly `gftbls.len()`.
        unsafe {
            sys::ec_init_tables(
                k as c_int,
                rows as c_int,
                coeffs.as_ptr().cast_mut(),
                gftbls.as_mut_ptr(),
            )
        };
        Tables { k, rows, gftbls }
    }

    /// Computes every output from `inputs` into caller-provided buffers.
    /// Panics unless there are k inputs and `rows` outputs, all the same length.
    pub(crate) fn encode(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) {
        assert_eq!(outputs.len(), self.rows, "wrong number of outputs");
        let len = self.check_inputs(inputs);
        assert!(
            outputs.iter().all(|o| o.len() == len),
            "output lengths differ from inputs"
        );
        let mut ptrs = [core::ptr::null_mut::<u8>(); MAX_SHARDS];
        for (p, o) in ptrs.iter_mut().zip(outputs.iter_mut()) {
            *p = o.as_mut_ptr();
        }
        // SAFETY: each pointer comes from a distinct `&mut [u8]` of `len` bytes
        // (so it is writable and aliases neither the other outputs nor the
        // shared `inputs`), and the borrows outlive the call.
        unsafe { self.encode_raw(inputs, len, &ptrs[..self.rows]) };
    }

    /// Like [`Tables::encode`] but allocates the outputs, skipping the zero-fill
    /// pass a `vec![0; len]` would cost (a full extra write of every rebuilt
    /// byte, significant when the code runs near memory bandwidth).
    pub(crate) fn encode_new(&self, inputs: &[&[u8]]) -> Vec<Vec<u8>> {
        let len = self.check_inputs(inputs);
        let mut outs: Vec<Vec<u8>> = (0..self.rows).map(|_| Vec::with_capacity(len)).collect();
        let mut ptrs = [core::ptr::null_mut::<u8>(); MAX_SHARDS];
        for (p, o) in ptrs.iter_mut().zip(outs.iter_mut()) {
            *p = o.as_mut_ptr();
        }
        // SAFETY: each pointer is the buffer of a distinct fresh Vec with
        // capacity >= len, so writable for len bytes and aliasing nothing.
        unsafe { self.encode_raw(inputs, len, &ptrs[..self.rows]) };
        for o in &mut outs {
            // SAFETY: capacity >= len, and ec_encode_data stored every one of the
            // first len bytes (it is a plain matrix product that writes each
            // output byte and reads none; only ec_encode_data_update accumulates).
            unsafe { o.set_len(len) };
        }
        outs
    }

    fn check_inputs(&self, inputs: &[&[u8]]) -> usize {
        assert_eq!(inputs.len(), self.k, "wrong number of inputs");
        let len = inputs[0].len();
        assert!(
            inputs.iter().all(|i| i.len() == len),
            "input lengths differ"
        );
        len
    }

    /// # Safety
    /// `outputs` has `self.rows` pointers, each valid for writes of `len`
    /// bytes, not overlapping each other or any input, for the whole call.
    /// `inputs` has `self.k` slices of exactly `len` bytes.
    unsafe fn encode_raw(&self, inputs: &[&[u8]], len: usize, outputs: &[*mut u8]) {
        debug_assert!(outputs.len() == self.rows && inputs.len() == self.k);
        let mut ins = [core::ptr::null_mut::<u8>(); MAX_SHARDS];
        let mut outs = [core::ptr::null_mut::<u8>(); MAX_SHARDS];
        let mut off = 0;
        while off < len {
            let n = CHUNK.min(len - off);
            for (p, i) in ins.iter_mut().zip(inputs) {
                // ISA-L wants `unsigned char **` but only reads sources.
                *p = i[off..off + n].as_ptr().cast_mut();
            }
            for (p, o) in outs.iter_mut().zip(outputs) {
                // In bounds: off + n <= len, the caller's guaranteed extent.
                *p = o.wrapping_add(off);
            }
            // SAFETY: k input pointers each readable for n bytes (sliced above);
            // `rows` output pointers each writable for n bytes and disjoint from
            // everything else (caller contract); gftbls is 32*k*rows bytes built
            // by ec_init_tables for this (k, rows) and is only read; n <= CHUNK
            // fits in c_int.
            unsafe {
                sys::ec_encode_data(
                    n as c_int,
                    self.k as c_int,
                    self.rows as c_int,
                    self.gftbls.as_ptr().cast_mut(),
                    ins.as_mut_ptr(),
                    outs.as_mut_ptr(),
                )
            };
            off += n;
        }
    }
}
