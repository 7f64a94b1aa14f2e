//! Any bytes into every on-disk parser of the chunk store (record, batch,
//! superblock, segment header, footer, summary).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cairn_chunkstore::format::fuzz_parse(data);
});
