//! Stable stand-in for the cargo-fuzz targets in datapath-spdk/fuzz: ~100k random
//! and mutated inputs into the wire decoder and the on-disk parsers, none may panic.

use bytes::{Bytes, BytesMut};
use cairn_chunkproto::{
    encode_request_batch, encode_response_batch, ChunkId, DriveReport, DriveSpace, DriveState,
    Reply, Request,
};
use cairn_chunkstore::format;

mod common;
use common::Rng;

fn join(parts: Vec<Bytes>) -> Vec<u8> {
    parts.concat()
}

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
fn decoders_never_panic() {
    let reqs = vec![
        Request::Put {
            drive: 1,
            id: ChunkId::from_u128(5),
            tenant: 2,
            key_id: 3,
            payload: Bytes::from_static(b"payload"),
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
        let input = mutate(&mut rng, seed);
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(frame)) = cairn_chunkproto::decode_frame(&mut buf) {
            let _ = frame.requests();
            let _ = frame.responses();
        }
    }
    // The on-disk side: a real batch and superblock as seeds.
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
    let disk_seeds = [sb, batch, body];
    for i in 0..100_000 {
        let input = mutate(&mut rng, &disk_seeds[i % 3]);
        format::fuzz_parse(&input);
    }
}
