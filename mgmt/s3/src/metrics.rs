//! What the S3 front end tells Prometheus: requests and their latency by
//! operation, answers by status, S3 error codes, bytes in and out.
//!
//! The families live as long as the server; mgmtd registers them with its
//! registry and serves them on `/metrics`. Labels are closed sets (s3s's operation
//! names, HTTP statuses, S3's error codes as the server renders them), so a client
//! cannot grow the series without bound.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The operation s3s resolved a request to; "none" for one refused before
/// (a bad signature, an unknown key, a malformed request).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Op {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpStatus {
    op: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpError {
    op: String,
    code: String,
}

fn latency() -> Histogram {
    // 0.5 ms .. ~33 s, doubling: a cached 4 KiB GET to a 16 MiB PUT in a cluster.
    Histogram::new(exponential_buckets(0.0005, 2.0, 17))
}

/// The S3 front end's metric families (cheap to clone: shared counters).
#[derive(Clone, Debug)]
pub struct S3Metrics {
    requests: Family<OpStatus, Counter>,
    errors: Family<OpError, Counter>,
    duration: Family<Op, Histogram, fn() -> Histogram>,
    received: Counter,
    sent: Counter,
}

impl Default for S3Metrics {
    fn default() -> S3Metrics {
        S3Metrics {
            requests: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(latency),
            received: Counter::default(),
            sent: Counter::default(),
        }
    }
}

impl S3Metrics {
    /// Bytes received and sent so far (what the status page charts).
    pub fn bytes(&self) -> (u64, u64) {
        (self.received.get(), self.sent.get())
    }

    /// Adds the families to `r` (under `cairn_s3_`).
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("cairn_s3");
        r.register(
            "requests",
            "S3 requests answered, by operation and HTTP status",
            self.requests.clone(),
        );
        r.register(
            "errors",
            "S3 error answers, by operation and S3 error code",
            self.errors.clone(),
        );
        r.register_with_unit(
            "request_duration",
            "Time from a request's arrival to its answer's head, by operation",
            Unit::Seconds,
            self.duration.clone(),
        );
        r.register_with_unit(
            "received",
            "Request body bytes of answered requests (by their declared length)",
            Unit::Bytes,
            self.received.clone(),
        );
        r.register_with_unit(
            "sent",
            "Response body bytes of successful answers (by their declared length)",
            Unit::Bytes,
            self.sent.clone(),
        );
    }

    /// One answered request.
    pub(crate) fn answered(&self, a: &Answered<'_>) {
        let op = a.op.get().map_or("none", String::as_str).to_string();
        self.requests
            .get_or_create(&OpStatus {
                op: op.clone(),
                status: a.status,
            })
            .inc();
        self.duration
            .get_or_create(&Op { op: op.clone() })
            .observe(a.took.as_secs_f64());
        if let Some(code) = a.error {
            self.errors
                .get_or_create(&OpError {
                    op,
                    code: code.to_string(),
                })
                .inc();
        }
        self.received.inc_by(a.received);
        if a.status < 300 {
            self.sent.inc_by(a.sent);
        }
    }
}

/// Set by the access check once s3s has resolved the operation (a request
/// extension, so the answer's accounting can name it).
#[derive(Clone, Default)]
pub(crate) struct OpSlot(pub Arc<OnceLock<String>>);

/// What [`S3Metrics::answered`] counts of one request.
pub(crate) struct Answered<'a> {
    pub op: &'a OpSlot,
    pub status: u16,
    pub error: Option<&'a str>,
    pub took: Duration,
    pub received: u64,
    pub sent: u64,
}

impl std::ops::Deref for OpSlot {
    type Target = OnceLock<String>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
