//! How a tenant's Redis keys become object keys.

/// The reserved bucket that holds tenant `tenant`'s keys: `_resp.<tenant>`. S3
/// bucket names cannot start with `_`, so no S3 client can create or squat it,
/// and bucket names are global, so the tenant id keeps tenants apart.
pub fn bucket_for(tenant: u64) -> String {
    format!("_resp.{tenant}")
}

/// Redis keys are arbitrary bytes, object keys are strings: printable ASCII other
/// than `%` is kept (LMCache's keys stay readable through S3 listings), every
/// other byte becomes `%XX`. Reversible by [`decode_key`].
pub fn encode_key(key: &[u8]) -> String {
    let mut s = String::with_capacity(key.len());
    for &b in key {
        if (0x21..=0x7e).contains(&b) && b != b'%' {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The Redis key of an object key written by [`encode_key`].
pub fn decode_key(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        let k = b"meta-llama/Llama-3.1-8B@1@0@ab12@bf16 \x00\xff%";
        let e = encode_key(k);
        assert_eq!(e, "meta-llama/Llama-3.1-8B@1@0@ab12@bf16%20%00%FF%25");
        assert_eq!(decode_key(&e).unwrap(), k);
    }
}
