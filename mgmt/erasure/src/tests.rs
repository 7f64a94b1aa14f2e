use super::*;

const PARAMS: &[(usize, usize)] = &[(1, 0), (1, 1), (2, 1), (2, 2), (3, 2), (4, 2), (8, 3)];
// Odd lengths on purpose: they exercise ISA-L's scalar tail and its
// short-buffer fallback (< 64 bytes), not just the SIMD body.
const LENS: &[usize] = &[1, 63, 4096, 100_003];

/// xorshift64*: deterministic test data without a dev-dependency.
struct Rng(u64);
impl Rng {
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }
}

/// All k+m shards of random data of length `len`, parity computed by `codec`.
fn encoded(codec: &Codec, len: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed | 1);
    let data: Vec<Vec<u8>> = (0..codec.data_shards()).map(|_| rng.bytes(len)).collect();
    let mut parity = vec![vec![0u8; len]; codec.parity_shards()];
    let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    codec.encode(&data_refs, &mut parity_refs).unwrap();
    data.into_iter().chain(parity).collect()
}

fn erase(shards: &[Vec<u8>], mask: u32) -> Vec<Option<Vec<u8>>> {
    let keep = |i: usize| mask & (1 << i) == 0;
    shards
        .iter()
        .enumerate()
        .map(|(i, s)| keep(i).then(|| s.clone()))
        .collect()
}

#[test]
fn rebuilds_every_erasure_pattern_up_to_m() {
    for &(k, m) in PARAMS {
        let codec = Codec::new(k, m).unwrap();
        let n = k + m;
        for &len in LENS {
            let full = encoded(&codec, len, (k * 1000 + m * 100 + len) as u64);
            let mut patterns = 0;
            for mask in 0u32..(1 << n) {
                if mask.count_ones() as usize > m {
                    continue;
                }
                let mut shards = erase(&full, mask);
                codec.reconstruct(&mut shards).unwrap();
                for (i, s) in shards.iter().enumerate() {
                    assert_eq!(
                        s.as_deref(),
                        Some(&full[i][..]),
                        "{k}+{m} len {len} mask {mask:#b} shard {i}"
                    );
                }
                patterns += 1;
            }
            assert!(patterns > 0);
        }
    }
}

#[test]
fn erasing_more_than_m_is_too_few_and_leaves_shards_untouched() {
    for &(k, m) in PARAMS {
        let codec = Codec::new(k, m).unwrap();
        let n = k + m;
        let full = encoded(&codec, 63, 7);
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != m + 1 {
                continue;
            }
            let mut shards = erase(&full, mask);
            let before = shards.clone();
            match codec.reconstruct(&mut shards) {
                Err(ErasureError::TooFewShards { present, needed }) => {
                    assert_eq!((present, needed), (k - 1, k));
                }
                other => panic!("{k}+{m} mask {mask:#b}: {other:?}"),
            }
            assert_eq!(shards, before);
        }
    }
}

#[test]
fn unequal_lengths_are_rejected() {
    let codec = Codec::new(4, 2).unwrap();
    let data = [vec![1u8; 10], vec![2; 10], vec![3; 9], vec![4; 10]];
    let data_refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut parity = [vec![0u8; 10], vec![0; 10]];
    let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(
        codec.encode(&data_refs, &mut parity_refs),
        Err(ErasureError::ShardLength {
            index: 2,
            len: 9,
            expected: 10
        })
    ));

    let good = [vec![1u8; 10], vec![2; 10], vec![3; 10], vec![4; 10]];
    let good_refs: Vec<&[u8]> = good.iter().map(Vec::as_slice).collect();
    let mut short = [vec![0u8; 10], vec![0; 11]];
    let mut short_refs: Vec<&mut [u8]> = short.iter_mut().map(Vec::as_mut_slice).collect();
    assert!(matches!(
        codec.encode(&good_refs, &mut short_refs),
        Err(ErasureError::ShardLength {
            index: 5,
            len: 11,
            expected: 10
        })
    ));
    assert!(
        short.iter().all(|p| p.iter().all(|&b| b == 0)),
        "parity written despite error"
    );

    let mut shards = erase(&encoded(&codec, 100, 3), 0b000001);
    shards[4].as_mut().unwrap().push(0);
    let before = shards.clone();
    assert!(matches!(
        codec.reconstruct(&mut shards),
        Err(ErasureError::ShardLength {
            index: 4,
            len: 101,
            expected: 100
        })
    ));
    assert_eq!(shards, before);
}

#[test]
fn wrong_counts_and_params_are_rejected() {
    for (k, m) in [(0, 0), (0, 3), (200, 56), (1, 255), (usize::MAX, 2)] {
        assert!(
            matches!(Codec::new(k, m), Err(ErasureError::InvalidParams { .. })),
            "{k}+{m}"
        );
    }
    assert!(Codec::new(255, 0).is_ok());
    assert!(Codec::new(1, 254).is_ok());

    let codec = Codec::new(2, 1).unwrap();
    let d = [0u8; 4];
    let mut p = [0u8; 4];
    assert!(matches!(
        codec.encode(&[&d], &mut [&mut p]),
        Err(ErasureError::ShardCount {
            expected: 2,
            got: 1
        })
    ));
    assert!(matches!(
        codec.encode(&[&d, &d], &mut []),
        Err(ErasureError::ShardCount {
            expected: 1,
            got: 0
        })
    ));
    let mut shards = vec![Some(vec![0u8; 4]); 2];
    assert!(matches!(
        codec.reconstruct(&mut shards),
        Err(ErasureError::ShardCount {
            expected: 3,
            got: 2
        })
    ));
}

#[test]
fn zero_parity_encode_is_a_no_op() {
    let codec = Codec::new(3, 0).unwrap();
    let d = [5u8; 7];
    codec.encode(&[&d, &d, &d], &mut []).unwrap();
    let mut shards = vec![Some(d.to_vec()); 3];
    codec.reconstruct(&mut shards).unwrap();
    shards[1] = None;
    assert!(matches!(
        codec.reconstruct(&mut shards),
        Err(ErasureError::TooFewShards {
            present: 2,
            needed: 3
        })
    ));
}

#[test]
fn empty_shards_are_trivial() {
    let codec = Codec::new(2, 2).unwrap();
    let mut p = [Vec::new(), Vec::new()];
    let mut p_refs: Vec<&mut [u8]> = p.iter_mut().map(Vec::as_mut_slice).collect();
    codec.encode(&[&[], &[]], &mut p_refs).unwrap();
    let mut shards = vec![None, Some(Vec::new()), None, Some(Vec::new())];
    codec.reconstruct(&mut shards).unwrap();
    assert!(shards.iter().all(|s| s.as_deref() == Some(&[][..])));
}

/// Extreme shape: 128 data shards, 127 lost and rebuilt from parity only.
/// Proves the Cauchy matrix stays invertible where a Vandermonde-style
/// `gf_gen_rs_matrix` would not be guaranteed to.
#[test]
fn wide_code_rebuilds_from_parity() {
    let (k, m) = (128, 127);
    let codec = Codec::new(k, m).unwrap();
    let full = encoded(&codec, 65, 11);
    let mut shards: Vec<Option<Vec<u8>>> = full.iter().cloned().map(Some).collect();
    for s in &mut shards[1..k] {
        *s = None;
    }
    codec.reconstruct(&mut shards).unwrap();
    assert!(shards.iter().zip(&full).all(|(s, f)| s.as_ref() == Some(f)));
}

#[test]
fn codec_is_send_sync_debug() {
    fn assert_traits<T: Send + Sync + fmt::Debug>() {}
    assert_traits::<Codec>();
    assert_traits::<ErasureError>();
    assert_eq!(
        format!("{:?}", Codec::new(4, 2).unwrap()),
        "Codec { k: 4, m: 2, .. }"
    );
}

/// Independent GF(2^8) arithmetic, polynomial x^8+x^4+x^3+x^2+1 (0x11d), the
/// field ISA-L uses. Shares no code with ISA-L.
mod reference {
    pub fn mul(mut a: u8, mut b: u8) -> u8 {
        let mut p = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                p ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= 0x1d;
            }
            b >>= 1;
        }
        p
    }

    pub fn inv(a: u8) -> u8 {
        (1..=255u8)
            .find(|&x| mul(a, x) == 1)
            .expect("nonzero has an inverse")
    }

    /// ISA-L's documented Cauchy construction: identity, then 1/(i ^ j).
    pub fn cauchy(k: usize, m: usize) -> Vec<u8> {
        let mut a = vec![0u8; (k + m) * k];
        for i in 0..k {
            a[i * k + i] = 1;
        }
        for i in k..k + m {
            for j in 0..k {
                a[i * k + j] = inv((i ^ j) as u8);
            }
        }
        a
    }
}

#[test]
fn gf_mul_matches_reference() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(ffi::gf_mul(a, b), reference::mul(a, b), "{a} * {b}");
        }
    }
}

/// Known answer: 4+2 parity from ISA-L equals a pure-Rust matrix multiply over
/// an independently built Cauchy matrix, so the FFI passes matrices, tables and
/// buffers the way ISA-L expects.
#[test]
fn parity_4_2_matches_pure_rust_reference() {
    let (k, m) = (4, 2);
    let codec = Codec::new(k, m).unwrap();
    let matrix = reference::cauchy(k, m);
    assert_eq!(
        codec.matrix, matrix,
        "ISA-L's Cauchy matrix differs from its documented construction"
    );
    // Spot-check a few entries by hand: row 4 = 1/(4^j) for j=0..3.
    assert_eq!(reference::mul(matrix[4 * k], 4), 1);
    assert_eq!(matrix[4 * k + 1], reference::inv(5));

    for len in [1, 63, 4096, 100_003] {
        let full = encoded(&codec, len, 42 + len as u64);
        for p in 0..m {
            let row = &matrix[(k + p) * k..(k + p + 1) * k];
            let expect: Vec<u8> = (0..len)
                .map(|b| (0..k).fold(0u8, |acc, j| acc ^ reference::mul(row[j], full[j][b])))
                .collect();
            assert_eq!(full[k + p], expect, "parity {p} len {len}");
        }
    }
    // A fixed vector, so a regression is visible as numbers, not just "differs".
    let data: [&[u8]; 4] = [&[1], &[2], &[3], &[4]];
    let mut p0 = [0u8];
    let mut p1 = [0u8];
    codec.encode(&data, &mut [&mut p0, &mut p1]).unwrap();
    let expect = |r: usize| {
        (0..k).fold(0u8, |acc, j| {
            acc ^ reference::mul(matrix[r * k + j], data[j][0])
        })
    };
    assert_eq!((p0[0], p1[0]), (expect(4), expect(5)));
}
