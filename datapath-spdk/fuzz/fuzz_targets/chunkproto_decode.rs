//! Any bytes into the chunk protocol decoder: frames, then both body decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buf = bytes::BytesMut::from(data);
    while let Ok(Some(frame)) = cairn_chunkproto::decode_frame(&mut buf) {
        let _ = frame.requests();
        let _ = frame.responses();
    }
});
