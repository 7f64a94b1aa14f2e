use super::*;
use crate::{
    ChunkId, ChunkVersion, DriveReport, DriveSpace, DriveState, Failure, FailureCode, ProtoError,
    Reply, Request, Response,
};
use bytes::{BufMut, Bytes, BytesMut};

fn join(parts: Vec<Bytes>) -> BytesMut {
    let mut b = BytesMut::new();
    for p in parts {
        b.extend_from_slice(&p);
    }
    b
}

fn sample_requests() -> Vec<Request> {
    vec![
        Request::Put {
            drive: 2,
            id: ChunkId::from_u128(7),
            tenant: 9,
            key_id: 3,
            payload: Bytes::from(vec![0xab; 5000]),
            durable: true,
        },
        Request::Get {
            drive: 1,
            id: ChunkId::from_u128(u128::MAX),
            tenant: 0,
        },
        Request::Delete {
            drive: 0,
            id: ChunkId::from_u128(1),
            tenant: 4,
        },
        Request::Stat {
            drive: 3,
            id: ChunkId::from_u128(2),
            tenant: 4,
        },
        Request::List {
            drive: 3,
            after: ChunkId::MIN,
            limit: 100,
        },
        Request::ListVersions {
            drive: 2,
            after: ChunkId::from_u128(5),
            limit: 7,
        },
        Request::DeleteVersion {
            drive: 1,
            id: ChunkId::from_u128(9),
            tenant: 4,
            seq: u64::MAX - 1,
        },
        Request::DriveInfo { drive: 5 },
        Request::DriveDetails { drive: 6 },
    ]
}

#[test]
fn requests_round_trip() {
    let ops = sample_requests();
    let mut buf = join(encode_request_batch(42, &ops).unwrap());
    let frame = decode_frame(&mut buf).unwrap().unwrap();
    assert!(buf.is_empty());
    assert_eq!(frame.request_id, 42);
    assert_eq!(frame.requests().unwrap(), ops);
}

#[test]
fn responses_round_trip() {
    let res: Vec<Response> = vec![
        Ok(Reply::Put),
        Ok(Reply::Get {
            payload: Bytes::from_static(b"hello"),
        }),
        Ok(Reply::Delete { existed: true }),
        Ok(Reply::Stat {
            len: 5,
            crc32c: 0xdead_beef,
        }),
        Ok(Reply::List {
            chunks: vec![(ChunkId::from_u128(1), 3), (ChunkId::from_u128(2), 4)],
        }),
        Ok(Reply::ListVersions {
            chunks: vec![ChunkVersion {
                id: ChunkId::from_u128(3),
                tenant: 5,
                seq: 77,
            }],
        }),
        Ok(Reply::DeleteVersion { deleted: true }),
        Ok(Reply::DriveInfo(DriveReport {
            drive: 1,
            state: DriveState::Failed,
            capacity: 10,
            live_bytes: 3,
            allocated_bytes: 4,
            chunks: 2,
            reason: "truncated".into(),
            device: "uring:/tmp/d1".into(),
            ..unknown_identity()
        })),
        Ok(Reply::DriveDetails(details())),
        Err(Failure::new(FailureCode::Corrupt, "crc mismatch")),
    ];
    let mut buf = join(encode_response_batch(7, &res).unwrap());
    let frame = decode_frame(&mut buf).unwrap().unwrap();
    assert_eq!(frame.responses().unwrap(), res);
}

/// A report with every identity field unknown (what a `DriveInfo` reply decodes to).
fn unknown_identity() -> DriveReport {
    DriveReport {
        drive: 0,
        state: DriveState::Healthy,
        capacity: 0,
        live_bytes: 0,
        allocated_bytes: 0,
        chunks: 0,
        reason: String::new(),
        device: String::new(),
        backend: String::new(),
        location: String::new(),
        model: None,
        serial: None,
        firmware: None,
        space: None,
        reactor: None,
    }
}

fn details() -> DriveReport {
    DriveReport {
        drive: 2,
        state: DriveState::Healthy,
        capacity: 64 << 20,
        live_bytes: 5000,
        allocated_bytes: 1 << 20,
        chunks: 3,
        reason: String::new(),
        device: "nvme:0000:00:04.0/ns1".into(),
        backend: "nvme".into(),
        location: "0000:00:04.0/ns1".into(),
        model: Some("QEMU NVMe Ctrl".into()),
        serial: Some("SN-A0".into()),
        firmware: Some("8.2.0".into()),
        space: Some(DriveSpace {
            free_segments: 12,
            reserve_segments: 2,
            full: false,
            damaged_segments: 1,
            corrupt_batches: 2,
            corrupt_records: 3,
            salvaged_records: 40,
            torn_batches: 1,
            formatted_at_open: true,
            dropped_since_open: 2,
        }),
        reactor: Some(crate::ReactorLoad {
            reactor: 1,
            busy_ns: 123_456_789_012,
            turns: 9,
            batches: 30,
            ops: 1000,
            queue_depth: 4,
        }),
    }
}

/// One response frame holding `replies`, as raw bytes.
fn response_bytes(replies: Vec<Response>) -> BytesMut {
    join(encode_response_batch(9, &replies).unwrap())
}

/// A response frame of `count` operations whose body is `body`.
fn raw_response(count: u16, body: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u32_le((HEADER + body.len()) as u32);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u8(FrameKind::Response as u8);
    b.put_u16_le(count);
    b.put_u64_le(9);
    b.put_slice(body);
    b
}

fn decode_responses(mut b: BytesMut) -> Result<Vec<Response>, ProtoError> {
    decode_frame(&mut b)?
        .ok_or(ProtoError::Malformed("incomplete"))?
        .responses()
}

#[test]
fn drive_info_keeps_the_version_1_layout() {
    // The bytes an old decoder expects, written out by hand: identity fields of
    // the report must not leak into a DriveInfo reply.
    let mut v1 = vec![STATUS_OK, OP_DRIVE_INFO];
    v1.extend_from_slice(&2u16.to_le_bytes());
    v1.push(0);
    for n in [64u64 << 20, 5000, 1 << 20, 3] {
        v1.extend_from_slice(&n.to_le_bytes());
    }
    v1.extend_from_slice(&0u16.to_le_bytes());
    v1.extend_from_slice(&21u16.to_le_bytes());
    v1.extend_from_slice(b"nvme:0000:00:04.0/ns1");
    let got = response_bytes(vec![Ok(Reply::DriveInfo(details()))]);
    assert_eq!(&got[4 + HEADER..], &v1[..]);
    // And it decodes with the identity unknown.
    match &decode_responses(got).unwrap()[0] {
        Ok(Reply::DriveInfo(d)) => {
            assert_eq!(d.capacity, 64 << 20);
            assert_eq!(d.device, "nvme:0000:00:04.0/ns1");
            assert_eq!((d.backend.as_str(), d.location.as_str()), ("", ""), "{d:?}");
            assert_eq!((&d.model, &d.serial, &d.firmware), (&None, &None, &None));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn drive_details_round_trip_with_any_fields_absent() {
    let full = details();
    let mut none = details();
    none.backend.clear();
    none.location.clear();
    none.model = None;
    none.serial = None;
    none.firmware = None;
    none.space = None;
    let mut some = details();
    some.model = None;
    some.firmware = None;
    // Each inside a batch with a reply after it: the fields are self-delimiting.
    for d in [full, none, some] {
        let res = vec![
            Ok(Reply::DriveDetails(d.clone())),
            Ok(Reply::Stat { len: 1, crc32c: 2 }),
        ];
        assert_eq!(decode_responses(response_bytes(res.clone())).unwrap(), res);
    }
    // Over-long identity strings are cut on a character boundary, not refused.
    let mut long = details();
    long.model = Some("é".repeat(1000));
    match &decode_responses(response_bytes(vec![Ok(Reply::DriveDetails(long))])).unwrap()[0] {
        Ok(Reply::DriveDetails(d)) => {
            assert_eq!(d.model.as_deref(), Some("é".repeat(512).as_str()))
        }
        other => panic!("{other:?}"),
    }
}

/// The body of a DriveDetails reply up to its fields block.
fn details_head() -> Vec<u8> {
    let b = response_bytes(vec![Ok(Reply::DriveInfo(details()))]);
    let mut v = b[4 + HEADER..].to_vec();
    v[1] = OP_DRIVE_DETAILS;
    v
}

fn with_fields(fields: &[u8]) -> BytesMut {
    let mut body = details_head();
    body.extend_from_slice(&(fields.len() as u16).to_le_bytes());
    body.extend_from_slice(fields);
    raw_response(1, &body)
}

fn field(tag: u8, v: &[u8]) -> Vec<u8> {
    let mut f = vec![tag];
    f.extend_from_slice(&(v.len() as u16).to_le_bytes());
    f.extend_from_slice(v);
    f
}

#[test]
fn drive_details_skip_unknown_fields_and_refuse_bad_ones() {
    // A later version's field (tag 42) is skipped; known ones are read.
    let fields = [field(42, b"future"), field(TAG_SERIAL, b"S1")].concat();
    match &decode_responses(with_fields(&fields)).unwrap()[0] {
        Ok(Reply::DriveDetails(d)) => {
            assert_eq!(d.serial.as_deref(), Some("S1"));
            assert_eq!(d.model, None);
            assert_eq!(d.backend, "");
        }
        other => panic!("{other:?}"),
    }
    // An empty block: every field unknown.
    assert!(decode_responses(with_fields(&[])).is_ok());
    let bad: Vec<Vec<u8>> = vec![
        // Repeated field.
        [field(TAG_MODEL, b"a"), field(TAG_MODEL, b"b")].concat(),
        // Not UTF-8.
        field(TAG_MODEL, &[0xff, 0xfe]),
        // A field longer than the block.
        {
            let mut f = field(TAG_MODEL, b"abc");
            f[1] = 200;
            f
        },
        // A tag without its length.
        vec![TAG_MODEL],
        vec![TAG_MODEL, 1],
    ];
    for f in bad {
        assert!(
            matches!(
                decode_responses(with_fields(&f)),
                Err(ProtoError::Malformed(_))
            ),
            "{f:?}"
        );
    }
    // A block length running past the frame.
    let mut body = details_head();
    body.extend_from_slice(&1000u16.to_le_bytes());
    body.extend_from_slice(&field(TAG_MODEL, b"x"));
    assert!(decode_responses(raw_response(1, &body)).is_err());
    // A block length shorter than its fields leaves trailing bytes.
    let mut body = details_head();
    body.extend_from_slice(&2u16.to_le_bytes());
    body.extend_from_slice(&field(TAG_MODEL, b"x"));
    assert!(decode_responses(raw_response(1, &body)).is_err());
}

#[test]
fn drive_space_fields_are_numbers() {
    // Any of them makes the space known, the rest reading 0.
    let fields = [field(TAG_FREE_SEGMENTS, b"7"), field(TAG_FULL, b"1")].concat();
    match &decode_responses(with_fields(&fields)).unwrap()[0] {
        Ok(Reply::DriveDetails(d)) => assert_eq!(
            d.space,
            Some(DriveSpace {
                free_segments: 7,
                full: true,
                ..DriveSpace::default()
            })
        ),
        other => panic!("{other:?}"),
    }
    match &decode_responses(with_fields(&field(TAG_SERIAL, b"S1"))).unwrap()[0] {
        Ok(Reply::DriveDetails(d)) => assert_eq!(d.space, None),
        other => panic!("{other:?}"),
    }
    for f in [
        field(TAG_FREE_SEGMENTS, b"x"),
        field(TAG_TORN_BATCHES, b"-1"),
        field(TAG_FULL, b"2"),
        [field(TAG_FULL, b"0"), field(TAG_FULL, b"0")].concat(),
    ] {
        assert!(
            matches!(
                decode_responses(with_fields(&f)),
                Err(ProtoError::Malformed(_))
            ),
            "{f:?}"
        );
    }
}

#[test]
fn truncated_and_garbled_drive_reports_are_errors_not_panics() {
    let full = response_bytes(vec![
        Ok(Reply::DriveDetails(details())),
        Ok(Reply::DriveInfo(details())),
    ]);
    let body = &full[4 + HEADER..];
    // Every truncation of the body (with the frame length fixed up) fails cleanly.
    for cut in 0..body.len() {
        let r = decode_responses(raw_response(2, &body[..cut]));
        assert!(r.is_err(), "cut at {cut} decoded: {r:?}");
    }
    // Every single-byte corruption either decodes or is an error: never a panic.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..body.len() {
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = body.to_vec();
            b[i] = x as u8;
            let _ = decode_responses(raw_response(2, &b));
        }
    }
    // A failed-state report with a bad state byte is malformed.
    let mut b = body.to_vec();
    b[4] = 7;
    assert!(matches!(
        decode_responses(raw_response(2, &b)),
        Err(ProtoError::Malformed("unknown drive state"))
    ));
}

#[test]
fn partial_frames_wait_for_more_bytes() {
    let full = join(encode_request_batch(1, &sample_requests()).unwrap());
    for cut in 0..full.len() {
        let mut b = BytesMut::from(&full[..cut]);
        assert!(decode_frame(&mut b).unwrap().is_none(), "cut at {cut}");
    }
    // A frame announced at the limit, of which a few bytes came: nothing is
    // reserved for the rest.
    let mut b = BytesMut::with_capacity(16);
    b.put_u32_le((MAX_FRAME - 4) as u32);
    b.put_slice(&[PROTOCOL_VERSION, 1, 0, 0]);
    assert!(decode_frame(&mut b).unwrap().is_none());
    assert!(b.capacity() < 4096, "reserved {}", b.capacity());
    assert_eq!(frame_len(&b).unwrap(), Some(MAX_FRAME));
}

#[test]
fn oversized_and_garbage_frames_are_errors() {
    let mut b = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 1, 1][..]);
    assert!(matches!(decode_frame(&mut b), Err(ProtoError::TooLarge(_))));
    let mut b = BytesMut::from(&[3, 0, 0, 0, 1, 1, 0][..]);
    assert!(decode_frame(&mut b).is_err());
    // A count that promises more operations than the body holds.
    let mut b = BytesMut::new();
    b.put_u32_le(HEADER as u32);
    b.put_u8(PROTOCOL_VERSION);
    b.put_u8(1);
    b.put_u16_le(3);
    b.put_u64_le(0);
    let frame = decode_frame(&mut b).unwrap().unwrap();
    assert!(frame.requests().is_err());
    // A Put whose payload length lies.
    let mut parts = encode_request_batch(1, &sample_requests()[..1]).unwrap();
    let mut first = BytesMut::from(&parts[0][..]);
    let n = first.len();
    first[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    parts[0] = first.freeze();
    let mut b = join(parts);
    let frame = decode_frame(&mut b).unwrap().unwrap();
    assert!(frame.requests().is_err());
}
