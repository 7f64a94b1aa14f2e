//! The node's hardware health, from its BMC's threshold sensors (temperatures,
//! voltages, fans): read every `--sensor-every` (30 s), in-band through the
//! node's own BMC device when it has one, else through its BMC record over the
//! LAN (a node whose in-band driver is missing still watches its hardware).
//! A sensor past a threshold is an alert in `status`, on the page and in
//! `/metrics`, and its changes of level are logged (warning when it rises, info
//! when it is back to ok). The BMC decides the level with its own thresholds,
//! as `ipmitool sdr` shows it.
//!
//! `GET /v1/nodes/{node}/sensors` reads any node's sensors now: this node's as
//! the watch does, a peer's through its BMC over the LAN.

use crate::admin::{App, Failure};
use crate::cluster::{id_hex, ClusterNode};
use axum::extract::{Path, State};
use axum::Json;
use cairn_adminapi::{ErrorKind, SensorLevel, SensorView, SensorsView};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The last reading of this node's sensors.
#[derive(Clone, Debug)]
pub(crate) struct Watched {
    /// `in-band /dev/ipmi0`, or the BMC's address.
    pub source: String,
    pub at: Instant,
    pub sensors: Result<Vec<SensorView>, String>,
}

/// What the watch last read (none before its first reading, or when the node
/// has no BMC to read).
#[derive(Debug, Default)]
pub(crate) struct Watch {
    latest: Mutex<Option<Watched>>,
    every: Mutex<Duration>,
}

impl Watch {
    pub(crate) fn latest(&self) -> Option<Watched> {
        let every = *self.every.lock().unwrap_or_else(|p| p.into_inner());
        let w = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        // A reading three rounds old says nothing of now.
        w.clone()
            .filter(|w| w.at.elapsed() < every * 3 + Duration::from_secs(10))
    }

    /// The alerts an operator must hear of, one line each.
    pub(crate) fn alerts(&self) -> Vec<String> {
        let Some(w) = self.latest() else {
            return Vec::new();
        };
        match &w.sensors {
            Ok(sensors) => sensors
                .iter()
                .filter(|s| s.level.alerts())
                .map(alert)
                .collect(),
            Err(e) => vec![format!(
                "the BMC's sensors cannot be read ({}): {e}",
                w.source
            )],
        }
    }
}

fn alert(s: &SensorView) -> String {
    let value = s.value.map_or_else(String::new, |v| {
        format!(": {v} {}", s.unit).trim_end().to_string()
    });
    // The most severe threshold passed (they are listed most severe first).
    let past = s
        .thresholds
        .iter()
        .filter(|(name, t)| {
            let over = name.starts_with("upper") && s.value.is_some_and(|v| v >= *t);
            let under = name.starts_with("lower") && s.value.is_some_and(|v| v <= *t);
            over || under
        })
        .map(|(name, t)| format!("{name} {t} {}", s.unit).trim_end().to_string())
        .next();
    match past {
        Some(p) => format!("sensor {} is {}{value} (past {p})", s.name, s.level.name()),
        None => format!("sensor {} is {}{value}", s.name, s.level.name()),
    }
}

/// This node's sensors read now, and where from; none when it has no BMC to
/// read (no device, no record).
async fn read_own(node: &ClusterNode) -> Option<(String, Result<Vec<SensorView>, String>)> {
    if let Some(bmc) = node.local_bmc.get() {
        let r = bmc.sensors().await.map_err(|e| e.to_string());
        return Some((format!("in-band {}", bmc.path().display()), r));
    }
    let store = node.store.get()?;
    let (_, target) = match crate::bmc::target(store, node.cluster.id()) {
        Ok(t) => t,
        Err(f) if f.kind() == ErrorKind::NotFound => return None,
        Err(f) => return Some((String::new(), Err(f.message().to_string()))),
    };
    let r = node
        .bmcs
        .get(&target)
        .sensors()
        .await
        .map_err(|e| e.to_string());
    Some((target.address, r))
}

/// Reads this node's sensors every `every` until `stop`, logging changes of level.
pub(crate) async fn watch(
    node: Arc<ClusterNode>,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    *node.sensors.every.lock().unwrap_or_else(|p| p.into_inner()) = every;
    let mut levels: HashMap<String, SensorLevel> = HashMap::new();
    let mut failing = false;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        // A panic while reading (a BMC's bytes meeting a bug) is a failed
        // reading, never the end of the watch.
        let n = node.clone();
        let read = tokio::spawn(async move { read_own(&n).await });
        let read = read.await.unwrap_or_else(|_| {
            Some((
                "the BMC".to_string(),
                Err("reading the sensors failed (a panic; see the log)".to_string()),
            ))
        });
        let Some((source, sensors)) = read else {
            // No BMC (any more): nothing to say of the hardware.
            *node
                .sensors
                .latest
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = None;
            continue;
        };
        match &sensors {
            Ok(list) => {
                if failing {
                    tracing::info!(%source, sensors = list.len(), "BMC sensors readable again");
                    failing = false;
                }
                for s in list {
                    let before = levels.insert(s.name.clone(), s.level);
                    if before == Some(s.level) || (before.is_none() && s.level == SensorLevel::Ok) {
                        continue;
                    }
                    if s.level.alerts() {
                        tracing::warn!(sensor = %s.name, level = s.level.name(), value = ?s.value, unit = %s.unit, "{}", alert(s));
                    } else {
                        tracing::info!(sensor = %s.name, level = s.level.name(), value = ?s.value, unit = %s.unit, "sensor {} is {}", s.name, s.level.name());
                    }
                }
            }
            Err(e) if !failing => {
                tracing::warn!(%source, "BMC sensors cannot be read: {e}");
                failing = true;
            }
            Err(_) => {}
        }
        let mut latest = node
            .sensors
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // A failed read (a BMC busy with other readers, a lost packet) keeps the
        // last good reading for up to three rounds: a reader must not be able to
        // hide an alert by keeping the BMC busy. Past that, the failure shows.
        let keep = sensors.is_err()
            && latest
                .as_ref()
                .is_some_and(|w| w.sensors.is_ok() && w.at.elapsed() < every * 3);
        if !keep {
            *latest = Some(Watched {
                source,
                at: Instant::now(),
                sensors,
            });
        }
    }
}

/// `GET /v1/nodes/{node}/sensors`.
pub(crate) async fn list(
    State(app): State<App>,
    Path(named): Path<String>,
) -> Result<Json<SensorsView>, Failure> {
    let node = crate::bmc::node_of(&app, &named)?;
    let cn = app.node();
    if node == cn.cluster.id() {
        // This node's own, read by the watch within the round: served from it,
        // so readers cannot keep the BMC busy (and the watch from reading it).
        let every = *cn.sensors.every.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Watched {
            source,
            at,
            sensors: Ok(sensors),
        }) = cn.sensors.latest()
        {
            if at.elapsed() < every {
                return Ok(Json(SensorsView {
                    node: id_hex(node),
                    source,
                    sensors,
                }));
            }
        }
        if let Some(bmc) = cn.local_bmc.get() {
            let sensors = bmc.sensors().await.map_err(crate::bmc::bmc_failure)?;
            return Ok(Json(SensorsView {
                node: id_hex(node),
                source: format!("in-band {}", bmc.path().display()),
                sensors,
            }));
        }
    }
    let store = crate::tenants::current(&app).await?;
    let (_, t) = crate::bmc::target(&store, node)?;
    let sensors = cn
        .bmcs
        .get(&t)
        .sensors()
        .await
        .map_err(crate::bmc::bmc_failure)?;
    Ok(Json(SensorsView {
        node: id_hex(node),
        source: t.address,
        sensors,
    }))
}
