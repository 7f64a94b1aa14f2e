//! Any bytes as the other side of the node-local key handshake, to both the
//! server's and the client's half: no panic, and never accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_chunkproto::auth::fuzz_handshake(data);
});
