//! `encoding-type=url` in listings.
//!
//! The AWS SDKs and the CLI send `encoding-type=url` with every listing they make
//! (botocore sets it unless the caller chose one) and then URL-decode the key
//! fields of the answer with `unquote_plus`. A server that echoes the parameter
//! but returns keys raw has every key with `+` or `%` listed wrong (`a+b` comes
//! back as `a b`), and a key holding a control character makes the XML invalid.
//! Encoded, both are exact. Which fields are encoded follows the S3 reference:
//! V2 `Delimiter`, `Prefix`, `StartAfter`, `Key`, `CommonPrefixes`; V1 also
//! `Marker` and `NextMarker`; uploads `KeyMarker`, `NextKeyMarker`.

use s3s::dto::EncodingType;
use s3s::{s3_error, S3Result};

/// Bytes left as they are: RFC 3986's unreserved set, and `/`, which S3 leaves
/// unencoded in keys (every decoder takes it either way).
fn keep(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/')
}

/// Percent-encodes `s` (as UTF-8) except the bytes [`keep`] allows.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
    out
}

/// How a listing's key fields are written: as they are, or URL-encoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyEncoding {
    url: bool,
}

impl KeyEncoding {
    /// From the request's `encoding-type`; S3 refuses any value but `url`.
    pub(crate) fn of(requested: Option<&EncodingType>) -> S3Result<KeyEncoding> {
        match requested.map(|e| e.as_str()) {
            None => Ok(KeyEncoding { url: false }),
            Some(EncodingType::URL) => Ok(KeyEncoding { url: true }),
            Some(_) => Err(s3_error!(
                InvalidArgument,
                "Invalid Encoding Method specified in Request"
            )),
        }
    }

    pub(crate) fn key(&self, s: String) -> String {
        if self.url {
            url_encode(&s)
        } else {
            s
        }
    }

    pub(crate) fn opt(&self, s: Option<String>) -> Option<String> {
        s.map(|s| self.key(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_unquote_plus() {
        // What botocore's decoder (urllib's unquote_plus) does.
        fn unquote_plus(s: &str) -> String {
            let b = s.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                match b[i] {
                    b'+' => out.push(b' '),
                    b'%' => {
                        let h = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                        out.push(u8::from_str_radix(h, 16).unwrap());
                        i += 2;
                    }
                    c => out.push(c),
                }
                i += 1;
            }
            String::from_utf8(out).unwrap()
        }
        for k in [
            "a+b",
            "a b",
            "a%20b",
            "x%2Fy",
            "dir/sub/file.txt",
            "ü/日本語",
            "nul\u{0}and\u{1}",
            "~tilde_-.",
            "&<>\"'",
        ] {
            let e = url_encode(k);
            assert!(
                e.bytes()
                    .all(|b| keep(b) || b == b'%' || b.is_ascii_hexdigit()),
                "{e}"
            );
            assert_eq!(unquote_plus(&e), k);
        }
        assert_eq!(url_encode("a+b c/d"), "a%2Bb%20c/d");
    }

    #[test]
    fn only_url_is_an_encoding() {
        assert!(KeyEncoding::of(None).is_ok_and(|e| !e.url));
        assert!(KeyEncoding::of(Some(&EncodingType::from_static("url"))).is_ok_and(|e| e.url));
        assert!(KeyEncoding::of(Some(&EncodingType::from_static("base64"))).is_err());
    }
}
