//! Stable stand-in for the cargo-fuzz target `chunk_record_parse`
//! (datapath-spdk/fuzz): ~100k random and mutated inputs into the on-disk parsers,
//! none may panic. The wire decoder's is in the chunk protocol's own tests.

use cairn_chunkstore::format;
use cairn_types::ChunkId;

mod common;
use common::Rng;

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut s = seed.to_vec();
    match rng.next() % 4 {
        0 => (0..rng.next() % 300).map(|_| rng.next() as u8).collect(),
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
fn on_disk_parsers_never_panic() {
    // A real batch and superblock as seeds.
    let sb = format::Superblock {
        drive_uuid: [1; 16],
        node_id: [2; 16],
        cluster_id: [3; 16],
        drive_index: 0,
        segment_size: 1 << 20,
        segment_count: 4,
        data_offset: format::DATA_OFFSET,
    }
    .encode()
    .to_vec();
    let payload = b"some payload bytes";
    let rec = format::RecordHeader {
        kind: format::RecordKind::Put,
        id: ChunkId::from_u128(9),
        tenant: 1,
        key_id: 0,
        payload_len: payload.len() as u32,
        payload_crc: crc32c::crc32c(payload),
        seq: 10,
    };
    let mut body = rec.encode().to_vec();
    body.extend_from_slice(payload);
    body.resize(format::record_len(payload.len() as u32) as usize, 0);
    let bh = format::BatchHeader {
        records: 1,
        len: (format::BATCH_HEADER + body.len()) as u32,
        first_seq: 10,
        body_crc: crc32c::crc32c(&body),
    };
    let mut batch = bh.encode().to_vec();
    batch.extend_from_slice(&body);
    assert!(format::parse_batch(&batch).is_ok());
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let disk_seeds = [sb, batch, body];
    for i in 0..100_000 {
        let input = mutate(&mut rng, &disk_seeds[i % 3]);
        format::fuzz_parse(&input);
    }
}
