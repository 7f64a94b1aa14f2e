//! Virtual-hosted-style addressing: `bucket.DOMAIN` for each configured domain
//! (`mgmtd --s3-domain`, repeatable), alongside path style.
//!
//! s3s's own parsers take any other host that looks like a domain for a bucket name
//! (a CNAME), which would turn a path-style request to `127.0.0.1:9000` or to a
//! node's name into a request for bucket `127.0.0.1:9000`. Here a host is a bucket
//! only under a configured domain; any other host is path style, as before.

use s3s::host::{S3Host, VirtualHost};
use s3s::{s3_error, S3Result};

/// The configured domains (lower case, no port).
#[derive(Debug, Clone, Default)]
pub struct Domains(Vec<String>);

/// Why a configured domain cannot serve.
#[derive(Debug, thiserror::Error)]
#[error("--s3-domain {0:?} is not a domain name (letters, digits, '-', dots between)")]
pub struct BadDomain(pub String);

impl Domains {
    pub fn new<I: IntoIterator<Item = String>>(domains: I) -> Result<Domains, BadDomain> {
        let mut v = Vec::new();
        for d in domains {
            let d = d.trim().trim_end_matches('.').to_ascii_lowercase();
            let ok = !d.is_empty()
                && d.split('.').all(|p| {
                    !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
            if !ok {
                return Err(BadDomain(d));
            }
            v.push(d);
        }
        // The longest first, so `s3.example.com` wins over `example.com`.
        v.sort_by_key(|d| std::cmp::Reverse(d.len()));
        Ok(Domains(v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bucket a `Host` header names, if it is `bucket.DOMAIN[:port]`.
    pub(crate) fn bucket_of<'a>(&self, host: &'a str) -> S3Result<Option<&'a str>> {
        let invalid = || s3_error!(InvalidRequest, "Invalid host header: {host:?}");
        if host.starts_with('[') {
            return Ok(None); // an IPv6 literal: path style
        }
        let name = match host.rsplit_once(':') {
            Some((h, port)) => {
                if h.contains(':') || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(invalid());
                }
                h
            }
            None => host,
        };
        // A fully qualified name's trailing dot names the same host.
        let name = name.strip_suffix('.').unwrap_or(name);
        for d in &self.0 {
            let Some(head) = strip_suffix_ignore_case(name, d) else {
                continue;
            };
            if head.is_empty() {
                return Ok(None); // the domain itself: path style
            }
            let Some(bucket) = head.strip_suffix('.') else {
                continue; // `xs3.example.com` is not under `s3.example.com`
            };
            if bucket.is_empty()
                || !bucket
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            {
                return Err(s3_error!(
                    InvalidBucketName,
                    "{bucket:?} (from the Host header) is not a bucket name"
                ));
            }
            return Ok(Some(bucket));
        }
        Ok(None)
    }
}

fn strip_suffix_ignore_case<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let at = s.len().checked_sub(suffix.len())?;
    (s.is_char_boundary(at) && s[at..].eq_ignore_ascii_case(suffix)).then(|| &s[..at])
}

impl S3Host for Domains {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        Ok(match self.bucket_of(host)? {
            Some(b) => VirtualHost::new(host).with_bucket(b),
            None => VirtualHost::new(host),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hosts_under_a_configured_domain_name_buckets() {
        let d = Domains::new(["s3.localhost".to_string(), "example.com".to_string()]).unwrap();
        assert_eq!(
            d.bucket_of("photos.s3.localhost:9000").unwrap(),
            Some("photos")
        );
        assert_eq!(d.bucket_of("a.b.example.com").unwrap(), Some("a.b"));
        assert_eq!(
            d.bucket_of("Photos.S3.LOCALHOST")
                .unwrap_err()
                .code()
                .as_str(),
            "InvalidBucketName"
        );
        assert_eq!(d.bucket_of("s3.localhost:9000").unwrap(), None);
        assert_eq!(
            d.bucket_of("127.0.0.1:9000").unwrap(),
            None,
            "an address is path style"
        );
        assert_eq!(d.bucket_of("node7.lan").unwrap(), None);
        assert_eq!(d.bucket_of("xs3.localhost").unwrap(), None);
        assert_eq!(
            d.bucket_of("photos.s3.localhost.:9000").unwrap(),
            Some("photos")
        );
        assert_eq!(d.bucket_of("[::1]:9000").unwrap(), None);
        assert!(d.bucket_of("photos.s3.localhost:abc").is_err());
        assert!(d.bucket_of("photos.s3.localhost:9000:9000").is_err());
        assert!(d.bucket_of("bad_name.s3.localhost").is_err());
        assert!(Domains::new(["not a domain".to_string()]).is_err());
        assert!(Domains::new(["".to_string()]).is_err());
    }
}
