//! `nodectl tenant qos`: a tenant's rates and weight as given on the command
//! line, and how `tenant show` prints them.

use crate::status::human;
use crate::tenants::{parse_bytes, parse_count, Limit};
use cairn_adminapi::{QosFigures, QosSpec};

/// Rates per node (each node shapes what it serves) and the weight on a busy
/// node. A value of `none` lifts a limit; one not given stays as it is.
#[derive(clap::Args, Debug)]
pub struct Rates {
    /// Share of a busy node against other tenants' weights (1..10000; none: 1).
    #[arg(long, value_parser = parse_count)]
    weight: Option<Limit>,
    /// Bytes read per second (`200M`, binary units), or `none`.
    #[arg(long, value_parser = parse_bytes)]
    read_bytes: Option<Limit>,
    /// Bytes written per second, or `none`.
    #[arg(long, value_parser = parse_bytes)]
    write_bytes: Option<Limit>,
    /// Read requests (GET, HEAD, LIST; RESP GET...) per second, or `none`.
    #[arg(long, value_parser = parse_count)]
    read_requests: Option<Limit>,
    /// Other requests per second, or `none`.
    #[arg(long, value_parser = parse_count)]
    write_requests: Option<Limit>,
}

impl Rates {
    /// The new settings: those given, the others as they were.
    pub fn over(&self, was: QosSpec) -> QosSpec {
        let or = |l: Option<Limit>, was: Option<u64>| l.map_or(was, |l| l.0);
        QosSpec {
            weight: self.weight.map_or(was.weight, |l| {
                l.0.map(|w| w.min(u64::from(u32::MAX)) as u32)
            }),
            read_bytes_per_sec: or(self.read_bytes, was.read_bytes_per_sec),
            write_bytes_per_sec: or(self.write_bytes, was.write_bytes_per_sec),
            read_requests_per_sec: or(self.read_requests, was.read_requests_per_sec),
            write_requests_per_sec: or(self.write_requests, was.write_requests_per_sec),
        }
    }
}

/// `weight 2, reads 200 MiB/s and 500 req/s, writes no limit`.
pub fn text(q: &QosSpec) -> String {
    let side = |bytes: Option<u64>, reqs: Option<u64>| match (bytes, reqs) {
        (None, None) => "no limit".to_string(),
        (b, r) => [
            b.map(|b| format!("{}/s", human(b))),
            r.map(|r| format!("{r} req/s")),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" and "),
    };
    format!(
        "weight {}, reads {}, writes {}",
        q.weight.unwrap_or(1),
        side(q.read_bytes_per_sec, q.read_requests_per_sec),
        side(q.write_bytes_per_sec, q.write_requests_per_sec)
    )
}

/// What the answering node's sharing has done to the tenant.
pub fn figures(f: &QosFigures) -> String {
    format!(
        "on this node: {} running, {} waiting; {} waited for a slot, {} slowed down, {} ms shaped",
        f.busy, f.waiting, f.queued, f.slowed_down, f.shaped_ms
    )
}
