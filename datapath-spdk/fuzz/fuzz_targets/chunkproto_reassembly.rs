//! Any bytes as the response frames of one batch (its size the first byte),
//! gathered as the client does: no panic, never more results than asked for.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_chunkproto::fuzz_reassembly(data);
});
