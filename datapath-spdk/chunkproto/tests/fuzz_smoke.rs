//! Stable stand-in for the cargo-fuzz targets `chunkproto_decode`,
//! `chunkproto_handshake` and `chunkproto_reassembly` (datapath-spdk/fuzz): random
//! and mutated inputs, none may panic, no handshake may be accepted without the
//! key, no reply may yield more results than were asked for.

use bytes::{Bytes, BytesMut};
use cairn_chunkproto::auth::{fuzz_handshake, AUTH_MAGIC, KEY_LEN};
use cairn_chunkproto::{
    encode_request_batch, encode_response_batch, encode_response_frames, fuzz_reassembly,
    DriveReport, DriveSpace, DriveState, Failure, FailureCode, Reply, Request,
};
use cairn_types::ChunkId;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A random input of up to `max_random` bytes, or `seed` with bytes changed,
/// cut off or inserted.
fn mutate(rng: &mut Rng, seed: &[u8], max_random: u64) -> Vec<u8> {
    let mut s = seed.to_vec();
    match rng.next() % 4 {
        0 => (0..rng.next() % max_random)
            .map(|_| rng.next() as u8)
            .collect(),
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
        fuzz_handshake(&mutate(&mut rng, seed, 200));
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
        fuzz_reassembly(&mutate(&mut rng, seed, 200));
    }
}

fn join(parts: Vec<Bytes>) -> Vec<u8> {
    parts.concat()
}

#[test]
fn frames_never_panic_the_decoder() {
    let reqs = vec![
        Request::Put {
            drive: 1,
            id: ChunkId::from_u128(5),
            tenant: 2,
            key_id: 3,
            payload: Bytes::from_static(b"payload"),
            durable: true,
        },
        Request::Get {
            drive: 0,
            id: ChunkId::from_u128(6),
            tenant: 2,
        },
        Request::List {
            drive: 0,
            after: ChunkId::MIN,
            limit: 9,
        },
        Request::DriveInfo { drive: 3 },
        Request::DriveDetails { drive: 1 },
    ];
    let report = DriveReport {
        drive: 1,
        state: DriveState::Failed,
        capacity: 1 << 30,
        live_bytes: 7,
        allocated_bytes: 1 << 20,
        chunks: 1,
        reason: "gone".into(),
        device: "nvme:0000:00:04.0/ns1".into(),
        backend: "nvme".into(),
        location: "0000:00:04.0/ns1".into(),
        model: Some("QEMU NVMe Ctrl".into()),
        serial: Some("SN-A0".into()),
        firmware: None,
        space: Some(DriveSpace {
            free_segments: 3,
            reserve_segments: 2,
            full: true,
            torn_batches: 1,
            ..DriveSpace::default()
        }),
        reactor: None,
    };
    let proto_seeds = [
        join(encode_request_batch(1, &reqs).unwrap()),
        join(
            encode_response_batch(
                2,
                &[
                    Ok(Reply::Put),
                    Ok(Reply::Get {
                        payload: Bytes::from_static(b"xyz"),
                    }),
                    Ok(Reply::List {
                        chunks: vec![(ChunkId::from_u128(1), 4)],
                    }),
                    Ok(Reply::DriveDetails(report.clone())),
                    Ok(Reply::DriveInfo(report)),
                ],
            )
            .unwrap(),
        ),
    ];
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for i in 0..100_000 {
        let seed = &proto_seeds[i % 2];
        let input = mutate(&mut rng, seed, 300);
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(frame)) = cairn_chunkproto::decode_frame(&mut buf) {
            let _ = frame.requests();
            let _ = frame.responses();
        }
    }
}
