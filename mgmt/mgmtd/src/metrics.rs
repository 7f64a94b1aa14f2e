//! `/metrics`: the node in Prometheus text format, on the admin port, for any
//! admin token of the reader role or above (Prometheus sends one with
//! `authorization: {credentials_file: …}`; `nodectl token create prometheus
//! --role reader` makes one).
//!
//! Two kinds of figures. The front ends' request counters and latency histograms
//! are prometheus-client families updated as requests are answered (cairn-s3's
//! and cairn-resp's). Everything else is read at scrape time into a [`Snapshot`]
//! (drives from this node's datapathd, the store's counters, Raft's view, repair,
//! scrub, sharing per tenant, the RAM tier) and encoded by a collector: a gauge
//! for a drive that has gone is then simply absent, never a stale value.
//!
//! Each node reports itself; a cluster's figures are the sum Prometheus makes.

use crate::admin::App;
use crate::cluster::id_hex;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use cairn_cluster::NodeState;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// The node's registry and the front ends' families in it.
pub(crate) struct Metrics {
    registry: Registry,
    snapshot: Arc<Mutex<Snapshot>>,
    /// One scrape at a time fills and encodes the snapshot.
    scrape: tokio::sync::Mutex<()>,
    s3: cairn_s3::S3Metrics,
}

impl Metrics {
    /// The registry with the front ends' families and the scrape-time collector.
    pub(crate) fn new(s3: &cairn_s3::S3Metrics, resp: &cairn_resp::RespMetrics) -> Metrics {
        let mut registry = Registry::default();
        s3.register(&mut registry);
        resp.register(&mut registry);
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        registry.register_collector(Box::new(SnapshotCollector(snapshot.clone())));
        Metrics {
            registry,
            snapshot,
            scrape: tokio::sync::Mutex::new(()),
            s3: s3.clone(),
        }
    }

    /// S3 bytes received and sent by this node so far.
    pub(crate) fn s3_bytes(&self) -> (u64, u64) {
        self.s3.bytes()
    }
}

type Labels = Vec<(&'static str, String)>;

#[derive(Clone, Copy, Debug)]
enum Value {
    Counter(f64),
    Gauge(f64),
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    series: Vec<(Labels, Value)>,
}

/// What a scrape read, encoded by [`SnapshotCollector`].
#[derive(Debug, Default)]
struct Snapshot(Vec<Family>);

impl Snapshot {
    fn add(&mut self, name: &'static str, help: &'static str, labels: Labels, v: Value) {
        self.add_unit(name, help, None, labels, v)
    }

    fn add_unit(
        &mut self,
        name: &'static str,
        help: &'static str,
        unit: Option<Unit>,
        labels: Labels,
        v: Value,
    ) {
        match self.0.iter_mut().find(|f| f.name == name) {
            Some(f) => f.series.push((labels, v)),
            None => self.0.push(Family {
                name,
                help,
                unit,
                series: vec![(labels, v)],
            }),
        }
    }

    fn gauge(&mut self, name: &'static str, help: &'static str, labels: Labels, v: f64) {
        self.add(name, help, labels, Value::Gauge(v))
    }

    fn counter(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u64) {
        self.add(name, help, labels, Value::Counter(v as f64))
    }

    fn bytes(&mut self, name: &'static str, help: &'static str, labels: Labels, v: u64) {
        self.add_unit(
            name,
            help,
            Some(Unit::Bytes),
            labels,
            Value::Gauge(v as f64),
        )
    }
}

#[derive(Debug)]
struct SnapshotCollector(Arc<Mutex<Snapshot>>);

impl Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for f in &snap.0 {
            let kind = match f.series.first().map(|s| s.1) {
                Some(Value::Counter(_)) => MetricType::Counter,
                _ => MetricType::Gauge,
            };
            let mut fam = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), kind)?;
            for (labels, v) in &f.series {
                let m = fam.encode_family(labels)?;
                match *v {
                    Value::Counter(n) => ConstCounter::new(n).encode(m)?,
                    Value::Gauge(x) => ConstGauge::new(x).encode(m)?,
                }
            }
        }
        Ok(())
    }
}

/// `GET /metrics`.
pub(crate) async fn serve(State(app): State<App>) -> Response {
    let m = app.metrics();
    let _one = m.scrape.lock().await;
    let snap = gather(&app).await;
    *m.snapshot.lock().unwrap_or_else(|p| p.into_inner()) = snap;
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &m.registry) {
        tracing::error!("encoding /metrics: {e}");
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// Everything read at scrape time.
async fn gather(app: &App) -> Snapshot {
    let mut s = Snapshot::default();
    let cluster = app.cluster();
    s.gauge(
        "cairn_node_info",
        "This node: its cluster id and Cairn's version",
        vec![
            ("node", id_hex(cluster.id())),
            ("version", env!("CARGO_PKG_VERSION").to_string()),
        ],
        1.0,
    );
    drives(app, &mut s).await;
    sensors(app, &mut s);
    raft(app, &mut s);
    if let Ok(store) = app.store() {
        store_figures(app, &store, &mut s).await;
    }
    s
}

/// This node's BMC sensors, as the watch last read them (nothing when the node
/// has no BMC to read).
fn sensors(app: &App, s: &mut Snapshot) {
    let Some(w) = app.node().sensors.latest() else {
        return;
    };
    s.gauge(
        "cairn_sensors_readable",
        "1 while the node's BMC sensors read, 0 when they cannot be read",
        vec![("source", w.source.clone())],
        w.sensors.is_ok() as u8 as f64,
    );
    for x in w.sensors.unwrap_or_default() {
        let l = || vec![("sensor", x.name.clone())];
        if let Some(v) = x.value {
            s.gauge(
                "cairn_sensor_value",
                "A BMC threshold sensor's reading, in its unit",
                vec![
                    ("sensor", x.name.clone()),
                    ("kind", x.kind.clone()),
                    ("unit", x.unit.clone()),
                ],
                v,
            );
        }
        s.gauge(
            "cairn_sensor_level",
            "Where the sensor stands against its BMC's thresholds: 0 ok, 1 warning (non-critical), 2 critical, 3 non-recoverable, -1 unavailable",
            l(),
            match x.level {
                cairn_adminapi::SensorLevel::Ok => 0.0,
                cairn_adminapi::SensorLevel::Warning => 1.0,
                cairn_adminapi::SensorLevel::Critical => 2.0,
                cairn_adminapi::SensorLevel::NonRecoverable => 3.0,
                cairn_adminapi::SensorLevel::Unavailable => -1.0,
            },
        );
    }
}

/// This node's drives, from its own datapathd.
async fn drives(app: &App, s: &mut Snapshot) {
    let reports = app.local_drives().await;
    s.gauge(
        "cairn_datapath_up",
        "Whether this node's datapathd answers",
        vec![],
        reports.is_ok() as u8 as f64,
    );
    let reports = reports.unwrap_or_default();
    reactors(&reports, s);
    for d in reports {
        let l = || vec![("drive", d.index.to_string())];
        s.gauge(
            "cairn_drive_info",
            "A drive's identity: device (backend and path), model, serial",
            vec![
                ("drive", d.index.to_string()),
                ("device", d.device.clone()),
                ("model", d.model.clone().unwrap_or_default()),
                ("serial", d.serial.clone().unwrap_or_default()),
            ],
            1.0,
        );
        s.gauge(
            "cairn_drive_healthy",
            "1 while the drive serves, 0 once datapathd has failed it",
            l(),
            (d.state == "healthy") as u8 as f64,
        );
        s.gauge(
            "cairn_drive_full",
            "1 while the drive refuses new data for want of space",
            l(),
            d.full as u8 as f64,
        );
        s.bytes(
            "cairn_drive_capacity",
            "Drive capacity",
            l(),
            d.capacity_bytes,
        );
        s.bytes(
            "cairn_drive_used",
            "Bytes of live chunks",
            l(),
            d.used_bytes,
        );
        s.bytes(
            "cairn_drive_allocated",
            "Bytes of segments in use (live and not yet compacted)",
            l(),
            d.allocated_bytes,
        );
        s.gauge("cairn_drive_chunks", "Chunks stored", l(), d.chunks as f64);
    }
}

/// datapathd's reactors, each once (every drive it serves reports it).
fn reactors(drives: &[cairn_adminapi::DriveStatus], s: &mut Snapshot) {
    let mut seen = std::collections::BTreeMap::new();
    for d in drives {
        if let Some(l) = d.reactor {
            seen.insert(l.reactor, l);
        }
    }
    for (r, l) in seen {
        let lab = || vec![("reactor", r.to_string())];
        s.add_unit(
            "cairn_reactor_busy",
            "Time the reactor spent serving (not idle) since datapathd started; its rate is the reactor's utilisation",
            Some(Unit::Seconds),
            lab(),
            Value::Counter(l.busy_ns as f64 / 1e9),
        );
        s.counter(
            "cairn_reactor_turns",
            "Reactor turns that had work (one group commit per drive each)",
            lab(),
            l.turns,
        );
        s.counter(
            "cairn_reactor_batches",
            "Messages served; per turn, the reactor's mean queue depth",
            lab(),
            l.batches,
        );
        s.counter("cairn_reactor_ops", "Operations served", lab(), l.ops);
        s.gauge(
            "cairn_reactor_queue_depth",
            "Messages in the reactor's mailbox at the scrape",
            lab(),
            l.queue_depth as f64,
        );
    }
}

/// Raft's view from this node, and the members' states in the map it applied.
fn raft(app: &App, s: &mut Snapshot) {
    let cluster = app.cluster();
    let r = cluster.raft_status();
    s.gauge(
        "cairn_raft_term",
        "Current Raft term",
        vec![],
        r.term as f64,
    );
    s.gauge(
        "cairn_raft_leader",
        "1 on the leader",
        vec![],
        (r.leader == Some(r.node_id)) as u8 as f64,
    );
    s.gauge(
        "cairn_raft_leader_known",
        "1 while this node knows a leader",
        vec![],
        r.leader.is_some() as u8 as f64,
    );
    s.gauge(
        "cairn_raft_last_log_index",
        "Last entry in this node's log",
        vec![],
        r.last_log_index as f64,
    );
    s.gauge(
        "cairn_raft_last_applied_index",
        "Last entry applied to this node's metadata",
        vec![],
        r.last_applied as f64,
    );
    s.gauge(
        "cairn_raft_voters",
        "Voters in the group",
        vec![],
        r.voters.len() as f64,
    );
    for (peer, matched) in &r.matched {
        if *peer != r.node_id {
            s.gauge(
                "cairn_raft_follower_lag_entries",
                "On the leader: entries a member is behind its log",
                vec![("peer", id_hex(*peer))],
                r.last_log_index.saturating_sub(*matched) as f64,
            );
        }
    }
    let map = app.cluster_map();
    for (state, name) in [(NodeState::Up, "up"), (NodeState::Down, "down")] {
        s.gauge(
            "cairn_cluster_nodes",
            "Members of the cluster map this node applied, by state",
            vec![("state", name.to_string())],
            map.count(state) as f64,
        );
    }
}

async fn store_figures(app: &App, store: &cairn_objects::ObjectStore, s: &mut Snapshot) {
    if let Ok(st) = store.status().await {
        s.gauge(
            "cairn_objects",
            "Objects in the metadata",
            vec![],
            st.objects as f64,
        );
        s.gauge(
            "cairn_buckets",
            "Buckets in the metadata",
            vec![],
            st.buckets as f64,
        );
    }
    let c = store.counters();
    for (name, help, v) in [
        (
            "cairn_degraded_reads",
            "Reads that reconstructed from parity or another copy",
            &c.degraded_reads,
        ),
        (
            "cairn_bad_fragments",
            "Fragments found bad when read (checksum, length)",
            &c.bad_fragments,
        ),
        (
            "cairn_repaired_fragments",
            "Bad fragments rewritten and verified after a read",
            &c.repaired_fragments,
        ),
        (
            "cairn_unreadable_reads",
            "Reads that failed for want of good fragments",
            &c.unreadable,
        ),
        (
            "cairn_collected_chunks",
            "Orphan chunks the collector removed",
            &c.collected_chunks,
        ),
        (
            "cairn_aborted_uploads",
            "Multipart uploads aborted for their age",
            &c.aborted_uploads,
        ),
        (
            "cairn_lifecycle_expired",
            "Objects deleted by lifecycle expiration rules",
            &c.lifecycle_expired,
        ),
        (
            "cairn_lifecycle_aborted_uploads",
            "Incomplete multipart uploads aborted by lifecycle rules",
            &c.lifecycle_aborted,
        ),
    ] {
        s.counter(name, help, vec![], v.load(Ordering::Relaxed));
    }
    let repair = app.repair_stats();
    s.counter(
        "cairn_repair_passes",
        "Repair passes run",
        vec![],
        repair.passes,
    );
    s.counter(
        "cairn_repair_rebuilt_fragments",
        "Fragments repair rebuilt",
        vec![],
        repair.rebuilt_fragments,
    );
    s.add_unit(
        "cairn_repair_rebuilt",
        "Bytes repair rebuilt",
        Some(Unit::Bytes),
        vec![],
        Value::Counter(repair.rebuilt_bytes as f64),
    );
    s.gauge(
        "cairn_repair_deferred",
        "Fragments the last repair pass left for later",
        vec![],
        repair.deferred_last_pass as f64,
    );
    if let Some(last) = store.scrubber().status().last {
        s.gauge(
            "cairn_scrub_last_bad",
            "Bad fragments the last scrub pass found",
            vec![],
            last.bad as f64,
        );
        s.gauge(
            "cairn_scrub_last_unrepaired",
            "Bad fragments the last scrub pass could not rebuild",
            vec![],
            last.unrepaired as f64,
        );
        if let Some(ms) = last.finished_ms {
            s.gauge(
                "cairn_scrub_last_finished_timestamp_seconds",
                "When the last scrub pass finished",
                vec![],
                ms as f64 / 1000.0,
            );
        }
    }
    tenants(store, s);
    ram(store, s);
}

/// Sharing and usage per tenant (labelled by name; root is "root").
fn tenants(store: &cairn_objects::ObjectStore, s: &mut Snapshot) {
    let meta = store.meta();
    let mut names =
        std::collections::HashMap::from([(cairn_meta::ROOT_TENANT, "root".to_string())]);
    for (id, t) in meta.tenants().unwrap_or_default() {
        names.insert(id, t.name);
    }
    let name = |id: u64| names.get(&id).cloned().unwrap_or_else(|| id.to_string());
    for (id, n) in &names {
        if let Ok(u) = meta.tenant_usage(*id) {
            s.bytes(
                "cairn_tenant_stored",
                "Bytes of the tenant's objects",
                vec![("tenant", n.clone())],
                u.bytes,
            );
            s.gauge(
                "cairn_tenant_objects",
                "The tenant's objects",
                vec![("tenant", n.clone())],
                u.objects as f64,
            );
        }
    }
    for (id, t) in store.qos().stats() {
        let l = || vec![("tenant", name(id))];
        s.gauge(
            "cairn_tenant_busy_slots",
            "Data-work slots the tenant holds now",
            l(),
            t.busy as f64,
        );
        s.gauge(
            "cairn_tenant_waiting",
            "Units of the tenant's work waiting for a slot",
            l(),
            t.waiting as f64,
        );
        s.counter(
            "cairn_tenant_queued",
            "Units of the tenant's work that waited for a slot",
            l(),
            t.queued,
        );
        s.counter(
            "cairn_tenant_slowed_down",
            "Requests refused (SlowDown) for the tenant's request rate",
            l(),
            t.slowed_down,
        );
        s.add_unit(
            "cairn_tenant_shaped",
            "Time the tenant's requests waited for its rates",
            Some(Unit::Seconds),
            l(),
            Value::Counter(t.shaped_ms as f64 / 1000.0),
        );
    }
}

/// The RAM tier: the node's totals and each KV keyspace's.
fn ram(store: &cairn_objects::ObjectStore, s: &mut Snapshot) {
    let ram = store.ram();
    let c = ram.counters();
    s.bytes(
        "cairn_ram_capacity",
        "RAM tier capacity",
        vec![],
        ram.capacity(),
    );
    s.bytes(
        "cairn_ram_held",
        "Bytes the RAM tier holds",
        vec![],
        ram.bytes(),
    );
    let (hits, misses) = (
        c.hits.load(Ordering::Relaxed),
        c.misses.load(Ordering::Relaxed),
    );
    s.counter("cairn_ram_hits", "Extents served from RAM", vec![], hits);
    s.counter(
        "cairn_ram_misses",
        "Hot reads fetched through the datapath",
        vec![],
        misses,
    );
    s.counter(
        "cairn_ram_evictions",
        "Extents pushed out of RAM to make room",
        vec![],
        c.evicted.load(Ordering::Relaxed),
    );
    s.gauge(
        "cairn_ram_hit_ratio",
        "Hits over hot reads since the start (0 before any)",
        vec![],
        match hits + misses {
            0 => 0.0,
            n => hits as f64 / n as f64,
        },
    );
    for (group, f) in ram.groups() {
        let l = || vec![("keyspace", group.clone())];
        s.bytes(
            "cairn_kv_ram_held",
            "Bytes of the keyspace in RAM",
            l(),
            f.bytes,
        );
        s.counter(
            "cairn_kv_hits",
            "Values of the keyspace served from RAM",
            l(),
            f.hits,
        );
        s.counter(
            "cairn_kv_misses",
            "Values of the keyspace read through the datapath",
            l(),
            f.misses,
        );
        s.counter(
            "cairn_kv_dropped",
            "Values deleted to make room in a full pool",
            l(),
            f.dropped,
        );
        s.add_unit(
            "cairn_kv_received",
            "Bytes written to the keyspace",
            Some(Unit::Bytes),
            l(),
            Value::Counter(f.bytes_in as f64),
        );
        s.add_unit(
            "cairn_kv_sent",
            "Bytes read from the keyspace",
            Some(Unit::Bytes),
            l(),
            Value::Counter(f.bytes_out as f64),
        );
    }
}
