//! Stable stand-in for the cargo-fuzz targets `chunkproto_handshake` and
//! `chunkproto_reassembly` (datapath-spdk/fuzz): random and mutated inputs, none
//! may panic, no handshake may be accepted without the key, no reply may yield
//! more results than were asked for.

use bytes::Bytes;
use cairn_chunkproto::auth::{fuzz_handshake, AUTH_MAGIC, KEY_LEN};
use cairn_chunkproto::{encode_response_frames, fuzz_reassembly, Failure, FailureCode, Reply};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut s = seed.to_vec();
    match rng.next() % 4 {
        0 => (0..rng.next() % 200).map(|_| rng.next() as u8).collect(),
        1 => {
            if !s.is_empty() {
                for _ in 0..1 + rng.next() % 4 {
                    let at = rng.next() as usize % s.len();
                    s[at] = rng.next() as u8;
                }
            }
            s
        }
        2 => {
            s.truncate(rng.next() as usize % (s.len() + 1));
            s
        }
        _ => {
            let at = rng.next() as usize % (s.len() + 1);
            s.splice(at..at, (0..rng.next() % 16).map(|_| rng.next() as u8));
            s
        }
    }
}

#[test]
fn handshake_inputs_never_panic_and_are_never_accepted() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // Seeds shaped like each message: the magic, then nonces and proofs.
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for extra in [KEY_LEN, 2 * KEY_LEN, 3 * KEY_LEN + 1] {
        let mut s = AUTH_MAGIC.to_vec();
        s.extend((0..extra).map(|_| rng.next() as u8));
        seeds.push(s);
    }
    seeds.push(Vec::new());
    for i in 0..3000 {
        let seed = &seeds[i % seeds.len()];
        fuzz_handshake(&mutate(&mut rng, seed));
    }
}

#[test]
fn reply_frames_never_panic_nor_overflow_the_batch() {
    let mut rng = Rng(0x0fed_cba9_8765_4321);
    let results = [
        Ok(Reply::Get {
            payload: Bytes::from(vec![3u8; 100]),
        }),
        Err(Failure::new(FailureCode::NotFound, "gone")),
        Ok(Reply::Stat { len: 1, crc32c: 2 }),
        Ok(Reply::Put),
    ];
    let mut seeds = Vec::new();
    for n in 0..=results.len() {
        let frames = encode_response_frames(7, &results[..n]).unwrap();
        let mut seed = vec![n as u8];
        for f in frames {
            seed.extend(f.concat());
        }
        // Split in two frames too: the first results, then the rest.
        if n >= 2 {
            let mut two = vec![n as u8];
            for part in [&results[..1], &results[1..n]] {
                for f in encode_response_frames(7, part).unwrap() {
                    two.extend(f.concat());
                }
            }
            seeds.push(two);
        }
        seeds.push(seed);
    }
    for s in &seeds {
        fuzz_reassembly(s);
    }
    for i in 0..20_000 {
        let seed = &seeds[i % seeds.len()];
        fuzz_reassembly(&mutate(&mut rng, seed));
    }
}
