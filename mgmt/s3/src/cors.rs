//! Cross-origin resource sharing, as S3 does it: a bucket's CORS rules decide
//! which web pages (origins) may call it from a browser. A preflight (`OPTIONS`
//! with `Origin` and `Access-Control-Request-Method`) is answered here, before
//! the S3 service, since it carries no credentials; an authenticated request that
//! names an `Origin` gets the matching rule's `Access-Control-*` headers on its
//! answer.
//!
//! Bucket names are per tenant, and a preflight names no tenant: it is allowed
//! when a rule of any bucket of that name allows it. That lets a browser *send*
//! the request; whether the page may *read* the answer is decided by the rules of
//! the bucket the request's credentials reach, on the answer itself.

use cairn_meta::CorsRule;
use cairn_objects::ObjectStore;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// AWS's limits on a CORS configuration.
const MAX_RULES: usize = 100;
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "HEAD"];

/// Why a CORS configuration is refused (S3's `MalformedXML` / `InvalidRequest`).
pub(crate) fn invalid(rules: &[CorsRule]) -> Option<String> {
    if rules.is_empty() {
        return Some("a CORS configuration needs at least one CORSRule".into());
    }
    if rules.len() > MAX_RULES {
        return Some(format!(
            "a CORS configuration takes at most {MAX_RULES} rules, not {}",
            rules.len()
        ));
    }
    for r in rules {
        let texts = r
            .allowed_origins
            .iter()
            .chain(&r.allowed_headers)
            .chain(&r.expose_headers)
            .chain(&r.id);
        if let Some(t) = texts
            .into_iter()
            .find(|t| t.chars().any(|c| c.is_control() || !c.is_ascii()))
        {
            return Some(format!(
                "{t:?}: only printable ASCII is allowed (values go into response headers)"
            ));
        }
        if r.allowed_origins.is_empty() || r.allowed_methods.is_empty() {
            return Some("each CORSRule needs an AllowedOrigin and an AllowedMethod".into());
        }
        if let Some(m) = r
            .allowed_methods
            .iter()
            .find(|m| !METHODS.contains(&m.as_str()))
        {
            return Some(format!(
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            ));
        }
        if let Some(o) = r
            .allowed_origins
            .iter()
            .find(|o| o.matches('*').count() > 1)
        {
            return Some(format!(
                "AllowedOrigin \"{o}\" can not have more than one wildcard."
            ));
        }
        if let Some(h) = r
            .allowed_headers
            .iter()
            .find(|h| h.matches('*').count() > 1)
        {
            return Some(format!(
                "AllowedHeader \"{h}\" can not have more than one wildcard."
            ));
        }
        if r.max_age_seconds.is_some_and(|s| s < 0) {
            return Some("MaxAgeSeconds must not be negative".into());
        }
    }
    None
}

/// `value` against a pattern with at most one `*` (any run of characters).
fn wildcard(pattern: &str, value: &str, ignore_case: bool) -> bool {
    let eq = |a: &str, b: &str| match ignore_case {
        true => a.eq_ignore_ascii_case(b),
        false => a == b,
    };
    match pattern.split_once('*') {
        None => eq(pattern, value),
        Some((head, tail)) => {
            value.len() >= head.len() + tail.len()
                && value.is_char_boundary(head.len())
                && value.is_char_boundary(value.len() - tail.len())
                && eq(&value[..head.len()], head)
                && eq(&value[value.len() - tail.len()..], tail)
        }
    }
}

/// The first rule that allows `origin` to use `method` with `headers` (the
/// preflight's `Access-Control-Request-Headers`, lower case).
fn find<'a>(
    rules: &'a [CorsRule],
    origin: &str,
    method: &str,
    headers: &[String],
) -> Option<&'a CorsRule> {
    rules.iter().find(|r| {
        r.allowed_origins.iter().any(|o| wildcard(o, origin, false))
            && r.allowed_methods.iter().any(|m| m == method)
            && headers.iter().all(|h| {
                r.allowed_headers
                    .iter()
                    .any(|pattern| wildcard(pattern, h, true))
            })
    })
}

fn header(h: &mut http::HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = http::HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

/// The headers every answer a rule allows gets: who may read it, and what.
fn allow(h: &mut http::HeaderMap, rule: &CorsRule, origin: &str) {
    if rule.allowed_origins.iter().any(|o| o == "*") {
        header(h, "access-control-allow-origin", "*");
    } else {
        header(h, "access-control-allow-origin", origin);
        header(h, "access-control-allow-credentials", "true");
    }
    if !rule.expose_headers.is_empty() {
        header(
            h,
            "access-control-expose-headers",
            &rule.expose_headers.join(", "),
        );
    }
}

/// The bucket a request names: `bucket.DOMAIN` under a configured domain, else
/// the path's first segment.
fn bucket_of<B>(req: &http::Request<B>, domains: &crate::Domains) -> Option<String> {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok());
    if let Some(b) = host.and_then(|h| domains.bucket_of(h).ok().flatten()) {
        return Some(b.to_string());
    }
    let first = req.uri().path().trim_start_matches('/').split('/').next()?;
    (!first.is_empty()).then(|| first.to_string())
}

/// The CORS rules of every bucket, by name, as preflights and answers read them: one map,
/// made again at most once a second, so a flood of preflights (unauthenticated,
/// and as cheap to send as any request) costs one read of the bucket table per
/// second, whatever names it asks for; a name without rules is a miss in memory.
/// A change through this node is seen at once; through another, within a second.
/// Every bucket's rules by S3 name, with the tenant owning each.
type RulesByName = HashMap<String, Vec<(u64, Vec<CorsRule>)>>;

#[derive(Clone)]
pub(crate) struct Named {
    store: Arc<ObjectStore>,
    cache: moka::sync::Cache<(), Arc<RulesByName>>,
}

impl Named {
    pub(crate) fn new(store: Arc<ObjectStore>) -> Named {
        Named {
            store,
            cache: moka::sync::Cache::builder()
                .max_capacity(1)
                .time_to_live(std::time::Duration::from_secs(1))
                .build(),
        }
    }

    /// Drops the map: a bucket's rules changed, or a bucket went, through this
    /// node.
    pub(crate) fn forget(&self) {
        self.cache.invalidate_all();
    }

    fn all(&self) -> Arc<RulesByName> {
        self.cache.get_with((), || {
            Arc::new(self.store.cors_by_name().unwrap_or_default())
        })
    }

    /// The rules of every bucket named `bucket`, whichever tenant owns it.
    fn rules(&self, bucket: &str) -> Vec<CorsRule> {
        let all = self.all();
        let owners = all.get(bucket).map(Vec::as_slice).unwrap_or_default();
        owners.iter().flat_map(|(_, r)| r.iter().cloned()).collect()
    }

    /// The rules of `tenant`'s bucket `bucket`.
    fn rules_of(&self, tenant: u64, bucket: &str) -> Vec<CorsRule> {
        let all = self.all();
        let owners = all.get(bucket).map(Vec::as_slice).unwrap_or_default();
        owners
            .iter()
            .find(|(t, _)| *t == tenant)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    }
}

/// The answer to a preflight (`OPTIONS`), or none for any other request.
pub(crate) fn preflight<B>(
    req: &http::Request<B>,
    named: &Named,
    domains: &crate::Domains,
) -> Option<s3s::HttpResponse> {
    if req.method() != http::Method::OPTIONS {
        return None;
    }
    let h = req.headers();
    let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    let forbidden = |why: &str| {
        crate::error_response(
            http::StatusCode::FORBIDDEN,
            "AccessForbidden",
            &format!("CORSResponse: {why}"),
        )
    };
    let Some(origin) = text("origin") else {
        return Some(crate::error_response(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        ));
    };
    let Some(method) = text("access-control-request-method") else {
        return Some(crate::error_response(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            "Insufficient information. Access-Control-Request-Method request header needed.",
        ));
    };
    if !METHODS.contains(&method) {
        return Some(crate::error_response(
            http::StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("Invalid Access-Control-Request-Method: {method}"),
        ));
    }
    let Some(bucket) = bucket_of(req, domains) else {
        return Some(forbidden("CORS is not enabled for this bucket."));
    };
    let rules = named.rules(&bucket);
    if rules.is_empty() {
        return Some(forbidden("CORS is not enabled for this bucket."));
    }
    let wanted: Vec<String> = text("access-control-request-headers")
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().to_ascii_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    let Some(rule) = find(&rules, origin, method, &wanted) else {
        return Some(forbidden(
            "This CORS request is not allowed. This is usually because the evalution of Origin, request method / Access-Control-Request-Method or Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        ));
    };
    let mut resp = http::Response::new(s3s::Body::empty());
    let out = resp.headers_mut();
    allow(out, rule, origin);
    header(
        out,
        "access-control-allow-methods",
        &rule.allowed_methods.join(", "),
    );
    if !wanted.is_empty() {
        header(out, "access-control-allow-headers", &wanted.join(", "));
    }
    if let Some(age) = rule.max_age_seconds {
        header(out, "access-control-max-age", &age.to_string());
    }
    header(
        out,
        "vary",
        "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    );
    Some(resp)
}

/// Filled by the access check of a request that names an `Origin`: the tenant
/// its credentials belong to and the bucket it names, whose rules decide the
/// answer's CORS headers.
#[derive(Clone, Default)]
pub(crate) struct Reached(pub Arc<OnceLock<(u64, String)>>);

/// The `Access-Control-*` headers of an answer to `origin`'s `method` request,
/// when a rule of the bucket it reached allows it.
pub(crate) fn decorate(
    resp: &mut s3s::HttpResponse,
    named: &Named,
    origin: &str,
    method: &http::Method,
    reached: &Reached,
) {
    let Some((tenant, bucket)) = reached.0.get() else {
        return;
    };
    let rules = named.rules_of(*tenant, bucket);
    if let Some(rule) = find(&rules, origin, method.as_str(), &[]) {
        allow(resp.headers_mut(), rule, origin);
        header(resp.headers_mut(), "vary", "Origin");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(origins: &[&str], methods: &[&str], headers: &[&str]) -> CorsRule {
        CorsRule {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allowed_methods: methods.iter().map(|s| s.to_string()).collect(),
            allowed_headers: headers.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn rules_match_origin_method_and_headers_in_order() {
        let rules = [
            rule(&["https://*.example.com"], &["GET"], &[]),
            rule(
                &["https://app.example.com"],
                &["PUT"],
                &["x-amz-*", "content-type"],
            ),
            rule(&["*"], &["HEAD"], &["*"]),
        ];
        let get = find(&rules, "https://a.example.com", "GET", &[]);
        assert_eq!(get.unwrap().allowed_methods, ["GET"]);
        assert!(find(&rules, "https://example.com", "GET", &[]).is_none());
        assert!(find(&rules, "http://a.example.com", "GET", &[]).is_none());
        let hdrs = vec!["x-amz-date".to_string(), "content-type".to_string()];
        assert!(find(&rules, "https://app.example.com", "PUT", &hdrs).is_some());
        let more = vec!["x-custom".to_string()];
        assert!(find(&rules, "https://app.example.com", "PUT", &more).is_none());
        assert!(find(&rules, "https://evil.test", "HEAD", &more).is_some());
        assert!(find(&rules, "https://evil.test", "DELETE", &[]).is_none());
    }

    #[test]
    fn configurations_are_checked_as_aws_does() {
        assert!(invalid(&[rule(&["*"], &["GET"], &[])]).is_none());
        assert!(invalid(&[]).is_some());
        assert!(invalid(&[rule(&["*"], &["PATCH"], &[])]).is_some());
        assert!(invalid(&[rule(&["https://*.*.com"], &["GET"], &[])]).is_some());
        assert!(invalid(&[rule(&[], &["GET"], &[])]).is_some());
        assert!(invalid(&[rule(&["*"], &["GET"], &["a*b*"])]).is_some());
        let many: Vec<CorsRule> = (0..101).map(|_| rule(&["*"], &["GET"], &[])).collect();
        assert!(invalid(&many).is_some());
    }

    #[test]
    fn wildcards_match_around_one_star() {
        assert!(wildcard("*", "", false));
        assert!(wildcard("a*z", "az", false));
        assert!(
            !wildcard("ab*ba", "aba", false),
            "head and tail may not overlap"
        );
        assert!(wildcard("X-Amz-*", "x-amz-date", true));
        assert!(!wildcard("é*", "e", false));
    }
}
