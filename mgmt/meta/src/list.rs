//! Listing a bucket in key order, with S3's prefix, delimiter and paging rules.

use crate::{MetaError, ObjectRecord};
use redb::ReadableTable;

/// Where a listing resumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum After {
    /// Strictly after this key.
    Key(String),
    /// After every key that starts with this common prefix.
    Prefix(String),
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub objects: Vec<(String, ObjectRecord)>,
    /// Common prefixes (keys rolled up at the delimiter), in order.
    pub prefixes: Vec<String>,
    /// Where the next page starts, when this page is not the last.
    pub next: Option<After>,
}

/// The smallest string greater than every string that starts with `p`: a key that
/// starts with `p` is at most `p` followed by U+10FFFF characters.
fn past_prefix(p: &str) -> String {
    let mut s = p.to_string();
    s.push(char::MAX);
    s
}

pub(crate) fn list<T: ReadableTable<(&'static str, &'static str), &'static [u8]>>(
    t: &T,
    bucket: &str,
    prefix: &str,
    after: Option<After>,
    delimiter: Option<&str>,
    max: usize,
) -> Result<Listing, MetaError> {
    let mut out = Listing::default();
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let (mut start, mut skip_prefix) = match &after {
        None => (prefix.to_string(), None),
        Some(After::Key(k)) => (k.max(&prefix.to_string()).clone(), None),
        Some(After::Prefix(p)) => (past_prefix(p), Some(p.clone())),
    };
    let mut count = 0usize;
    // Restart the range scan whenever a common prefix is rolled up, so a "folder"
    // of a million keys costs one seek, not a million steps.
    'scan: loop {
        let range = t.range((bucket, start.as_str())..)?;
        for e in range {
            let (k, v) = e?;
            let (b, key) = k.value();
            if b != bucket || !key.starts_with(prefix) {
                break 'scan;
            }
            if let Some(After::Key(a)) = &after {
                if key <= a.as_str() {
                    continue;
                }
            }
            if let Some(sp) = &skip_prefix {
                if key.starts_with(sp.as_str()) {
                    continue;
                }
            }
            if count == max {
                out.next = match (out.objects.last(), out.prefixes.last()) {
                    _ if max == 0 => None,
                    (Some((k, _)), Some(p)) if p > k => Some(After::Prefix(p.clone())),
                    (_, Some(p)) if out.objects.is_empty() => Some(After::Prefix(p.clone())),
                    (Some((k, _)), _) => Some(After::Key(k.clone())),
                    (None, _) => None,
                };
                break 'scan;
            }
            if let Some(d) = delimiter {
                if let Some(pos) = key[prefix.len()..].find(d) {
                    let common = key[..prefix.len() + pos + d.len()].to_string();
                    start = past_prefix(&common);
                    skip_prefix = Some(common.clone());
                    out.prefixes.push(common);
                    count += 1;
                    continue 'scan;
                }
            }
            out.objects
                .push((key.to_string(), serde_json::from_slice(v.value())?));
            count += 1;
        }
        break;
    }
    Ok(out)
}
