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

/// What a listing does with the next key it meets.
pub(crate) enum Step {
    /// List it: push it onto `out.objects`.
    Take,
    /// Pass over it.
    Skip,
    /// It was rolled up into a common prefix: go on from this key.
    Seek(String),
    /// The page is full, or the keys left are past the prefix.
    Done,
}

/// S3's prefix, delimiter and paging rules over keys met in byte order.
pub(crate) struct Pager<'a> {
    prefix: &'a str,
    after: Option<After>,
    delimiter: Option<&'a str>,
    max: usize,
    skip_prefix: Option<String>,
    count: usize,
    pub out: Listing,
}

impl<'a> Pager<'a> {
    /// A pager, and the key the scan starts at (inclusive).
    pub fn new(
        prefix: &'a str,
        after: Option<After>,
        delimiter: Option<&'a str>,
        max: usize,
    ) -> (Pager<'a>, String) {
        let (start, skip_prefix) = match &after {
            None => (prefix.to_string(), None),
            Some(After::Key(k)) => (k.max(&prefix.to_string()).clone(), None),
            Some(After::Prefix(p)) => (past_prefix(p), Some(p.clone())),
        };
        let page = Pager {
            prefix,
            after,
            delimiter: delimiter.filter(|d| !d.is_empty()),
            max,
            skip_prefix,
            count: 0,
            out: Listing::default(),
        };
        (page, start)
    }

    pub fn step(&mut self, key: &str) -> Step {
        let prefix = self.prefix;
        if !key.starts_with(prefix) {
            return Step::Done;
        }
        if let Some(After::Key(a)) = &self.after {
            if key <= a.as_str() {
                return Step::Skip;
            }
        }
        if let Some(sp) = &self.skip_prefix {
            if key.starts_with(sp.as_str()) {
                return Step::Skip;
            }
        }
        let out = &mut self.out;
        if self.count == self.max {
            out.next = match (out.objects.last(), out.prefixes.last()) {
                _ if self.max == 0 => None,
                (Some((k, _)), Some(p)) if p > k => Some(After::Prefix(p.clone())),
                (_, Some(p)) if out.objects.is_empty() => Some(After::Prefix(p.clone())),
                (Some((k, _)), _) => Some(After::Key(k.clone())),
                (None, _) => None,
            };
            return Step::Done;
        }
        self.count += 1;
        if let Some(d) = self.delimiter {
            if let Some(pos) = key[prefix.len()..].find(d) {
                let common = key[..prefix.len() + pos + d.len()].to_string();
                self.skip_prefix = Some(common.clone());
                out.prefixes.push(common.clone());
                return Step::Seek(past_prefix(&common));
            }
        }
        Step::Take
    }
}

pub(crate) fn list<T: ReadableTable<(&'static str, &'static str), &'static [u8]>>(
    t: &T,
    bucket: &str,
    prefix: &str,
    after: Option<After>,
    delimiter: Option<&str>,
    max: usize,
) -> Result<Listing, MetaError> {
    let (mut page, mut start) = Pager::new(prefix, after, delimiter, max);
    // Restart the range scan whenever a common prefix is rolled up, so a "folder"
    // of a million keys costs one seek, not a million steps.
    'scan: loop {
        for e in t.range((bucket, start.as_str())..)? {
            let (k, v) = e?;
            let (b, key) = k.value();
            if b != bucket {
                break 'scan;
            }
            match page.step(key) {
                Step::Take => page
                    .out
                    .objects
                    .push((key.to_string(), serde_json::from_slice(v.value())?)),
                Step::Skip => {}
                Step::Seek(s) => {
                    start = s;
                    continue 'scan;
                }
                Step::Done => break 'scan,
            }
        }
        break;
    }
    Ok(page.out)
}
