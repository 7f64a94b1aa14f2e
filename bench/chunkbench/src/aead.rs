//! aeadbench: what sealing tenants' data costs a core. AES-256-GCM in place over
//! 1 MiB buffers (Cairn's fragment size) on one thread, with ring (what Cairn
//! uses) and aws-lc-rs (the other candidate), beside memcpy of the same buffers.
//! Prints `RESULT aead <name> gbps=.. ratio_memcpy=..` lines.

use std::time::{Duration, Instant};

const LEN: usize = 1 << 20;

/// Runs `f` over the buffer for about `secs`; returns GB/s.
fn rate(secs: f64, buf: &mut [u8], mut f: impl FnMut(&mut [u8], u64)) -> f64 {
    let start = Instant::now();
    let limit = Duration::from_secs_f64(secs);
    let mut n = 0u64;
    while start.elapsed() < limit {
        for _ in 0..16 {
            f(buf, n);
            n += 1;
        }
    }
    (n as f64 * buf.len() as f64) / start.elapsed().as_secs_f64() / 1e9
}

fn nonce_bytes(n: u64) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&n.to_be_bytes());
    b
}

/// Seal and open rates of one AEAD crate; `$open` adapts the one call whose
/// shape differs between ring and aws-lc-rs (how the tag is passed).
macro_rules! gcm {
    ($krate:ident, $secs:expr, $buf:expr, $open:expr) => {{
        use $krate::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
        let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[7u8; 32]).unwrap());
        let seal = rate($secs, $buf, |b, n| {
            let t = key
                .seal_in_place_separate_tag(
                    Nonce::assume_unique_for_key(nonce_bytes(n)),
                    Aad::from(b"fragment"),
                    b,
                )
                .unwrap();
            let _ = std::hint::black_box(t);
        });
        // Opening checks the tag: seal once, then open a fresh copy each time.
        let mut sealed = $buf.to_vec();
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce_bytes(0)),
                Aad::from(b"fragment"),
                &mut sealed,
            )
            .unwrap();
        let open = rate($secs, $buf, |b, _| {
            b.copy_from_slice(&sealed);
            let n = Nonce::assume_unique_for_key(nonce_bytes(0));
            #[allow(clippy::redundant_closure_call)]
            ($open)(&key, n, Aad::from(b"fragment"), tag.as_ref(), b);
        });
        (seal, open)
    }};
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let mut buf = vec![0u8; LEN];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes()[0];
    }
    let src = buf.clone();
    let memcpy = rate(secs, &mut buf, |b, _| {
        b.copy_from_slice(&src);
        std::hint::black_box(&b[0]);
    });
    println!("RESULT aead memcpy gbps={memcpy:.2} ratio_memcpy=1.00");
    let (seal, open) = gcm!(
        ring,
        secs,
        &mut buf,
        |k: &ring::aead::LessSafeKey, n, aad, tag: &[u8], b: &mut [u8]| {
            let tag = ring::aead::Tag::try_from(tag).unwrap();
            k.open_in_place_separate_tag(n, aad, tag, b, 0..).unwrap();
        }
    );
    // The open figure includes a memcpy of the fragment (to reseal nothing).
    for (name, g) in [("ring-seal", seal), ("ring-open+copy", open)] {
        println!(
            "RESULT aead {name} gbps={g:.2} ratio_memcpy={:.2}",
            g / memcpy
        );
    }
    let (seal, open) = gcm!(
        aws_lc_rs,
        secs,
        &mut buf,
        |k: &aws_lc_rs::aead::LessSafeKey, n, aad, tag: &[u8], b: &mut [u8]| {
            k.open_in_place_separate_tag(n, aad, tag, b).unwrap();
        }
    );
    for (name, g) in [("aws-lc-rs-seal", seal), ("aws-lc-rs-open+copy", open)] {
        println!(
            "RESULT aead {name} gbps={g:.2} ratio_memcpy={:.2}",
            g / memcpy
        );
    }
}
