//! What the RESP front end tells Prometheus (and INFO): connections, commands
//! and their latency by name, key hits and misses.
//!
//! The same counters answer INFO and `/metrics`, so the two never disagree.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use std::time::Duration;

/// The commands named in labels; any other is counted as "OTHER", so a client
/// sending made-up names cannot grow the series without bound.
const NAMED: &[&str] = &[
    "AUTH",
    "CLIENT",
    "COMMAND",
    "DBSIZE",
    "DEL",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "GET",
    "HELLO",
    "INFO",
    "MGET",
    "MSET",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PING",
    "PTTL",
    "QUIT",
    "SCAN",
    "SELECT",
    "SET",
    "STRLEN",
    "TTL",
    "TYPE",
    "UNLINK",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Command {
    command: &'static str,
}

impl Command {
    fn of(name: &str) -> Command {
        let command = NAMED
            .iter()
            .find(|n| **n == name)
            .copied()
            .unwrap_or("OTHER");
        Command { command }
    }
}

fn latency() -> Histogram {
    // 50 µs .. ~3 s, doubling: a RAM-tier GET to a 512 MiB SET.
    Histogram::new(exponential_buckets(0.00005, 2.0, 17))
}

/// The RESP front end's counters (cheap to clone: shared).
#[derive(Clone, Debug)]
pub struct RespMetrics {
    pub(crate) connections: Counter,
    pub(crate) connected: Gauge,
    pub(crate) rejected: Counter,
    pub(crate) commands: Counter,
    /// Keys a GET or MGET found, and did not.
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    calls: Family<Command, Counter>,
    duration: Family<Command, Histogram, fn() -> Histogram>,
}

impl Default for RespMetrics {
    fn default() -> RespMetrics {
        RespMetrics {
            connections: Counter::default(),
            connected: Gauge::default(),
            rejected: Counter::default(),
            commands: Counter::default(),
            hits: Counter::default(),
            misses: Counter::default(),
            calls: Family::default(),
            duration: Family::new_with_constructor(latency),
        }
    }
}

/// Counts a connection as connected while it lives.
pub(crate) struct Connected(Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RespMetrics {
    /// Adds the families to `r` (under `cairn_resp_`).
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("cairn_resp");
        r.register(
            "connections",
            "Connections accepted (including those refused at maxclients)",
            self.connections.clone(),
        );
        r.register("connected", "Connections open now", self.connected.clone());
        r.register(
            "rejected_connections",
            "Connections refused at maxclients",
            self.rejected.clone(),
        );
        r.register("commands", "Commands run, by name", self.calls.clone());
        r.register_with_unit(
            "command_duration",
            "Time to run a command and write its reply, by name",
            Unit::Seconds,
            self.duration.clone(),
        );
        r.register("keyspace_hits", "Keys GET or MGET found", self.hits.clone());
        r.register(
            "keyspace_misses",
            "Keys GET or MGET did not find",
            self.misses.clone(),
        );
    }

    pub(crate) fn connected(&self) -> Connected {
        self.connected.inc();
        Connected(self.connected.clone())
    }

    /// One command run (answered, or failed with its connection).
    pub(crate) fn ran(&self, name: &str, took: Duration) {
        self.commands.inc();
        let c = Command::of(name);
        self.calls.get_or_create(&c).inc();
        self.duration.get_or_create(&c).observe(took.as_secs_f64());
    }
}
