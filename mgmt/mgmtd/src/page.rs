//! The status page (`GET /ui`): one read-only HTML page, rendered here from what
//! the admin API answers (node status, cluster status, tenants, BMCs), with a
//! chart of this node's S3 throughput drawn as inline SVG. No script, no external
//! asset: it works on an air-gapped management network and in any browser, and
//! refreshes itself every 10 s.
//!
//! It passes the same access layer as the API (reader role). A browser cannot
//! send a bearer token, so for reads only the layer also takes HTTP Basic
//! authentication with the token as the password (any user name): reads only,
//! because a browser replays Basic credentials on requests other sites make it
//! send, and no such request may change anything.

use crate::admin::App;
use axum::extract::State;
use axum::response::Html;
use cairn_adminapi::{BmcView, ClusterStatus, DriveStatus, NodeStatus, TenantView};
use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

/// How often the throughput is sampled, and how many samples the chart shows.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);
const SAMPLES: usize = 120;

/// This node's S3 bytes in and out, sampled for the chart.
#[derive(Debug, Default)]
pub(crate) struct Throughput {
    /// (ms since the epoch, bytes received, bytes sent), oldest first.
    samples: Mutex<VecDeque<(i64, u64, u64)>>,
}

impl Throughput {
    /// Samples `read` every few seconds, for ever.
    pub(crate) async fn sample(&self, read: impl Fn() -> (u64, u64)) {
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            let (rx, tx) = read();
            let mut s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
            s.push_back((cairn_meta::now_ms(), rx, tx));
            while s.len() > SAMPLES + 1 {
                s.pop_front();
            }
        }
    }

    /// MB/s in and out between successive samples.
    fn rates(&self) -> Vec<(f64, f64)> {
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        s.iter()
            .zip(s.iter().skip(1))
            .map(|(a, b)| {
                let secs = ((b.0 - a.0) as f64 / 1000.0).max(1e-3);
                let mb = |x: u64, y: u64| y.saturating_sub(x) as f64 / 1e6 / secs;
                (mb(a.1, b.1), mb(a.2, b.2))
            })
            .collect()
    }
}

/// Text made safe for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

const STYLE: &str = "body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.5em}\
table{border-collapse:collapse}td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:left}\
.healthy,.up,.ok{color:#17692a}.degraded,.down,.failed,.full,.alert{color:#b00020;font-weight:600}\
.badge{padding:.1em .5em;border:1px solid currentColor;border-radius:.3em}\
svg{border:1px solid #ddd;background:#fafafa}";

/// What the page shows; each part may be missing (the node not yet a member,
/// the datapath down), which the page then says instead.
struct View {
    node: Result<NodeStatus, String>,
    drives: Result<Vec<DriveStatus>, String>,
    cluster: Result<ClusterStatus, String>,
    tenants: Result<Vec<TenantView>, String>,
    bmcs: Vec<BmcView>,
}

/// How long the page waits for each of its parts (all asked at once): a part
/// that does not answer (datapathd hung) is shown as such, not waited for.
const PART: Duration = Duration::from_secs(3);

/// One part of the page, within [`PART`].
async fn part<T>(
    f: impl std::future::Future<Output = Result<T, crate::admin::Failure>>,
) -> Result<T, String> {
    match tokio::time::timeout(PART, f).await {
        Ok(r) => r.map_err(|e| e.message().to_string()),
        Err(_) => Err(format!("did not answer within {} s", PART.as_secs())),
    }
}

/// `GET /ui`.
pub(crate) async fn page(State(app): State<App>) -> Html<String> {
    let (node, drives, cluster, tenants) = tokio::join!(
        part(async { Ok(crate::admin::status(State(app.clone())).await?.0) }),
        part(app.local_drives()),
        part(async { Ok(crate::admin::cluster_status(State(app.clone())).await?.0) }),
        part(async { Ok(crate::tenants::list(State(app.clone())).await?.0) }),
    );
    let view = View {
        node,
        drives,
        cluster,
        tenants,
        bmcs: match app.store() {
            Ok(s) => s.meta().bmcs().unwrap_or_default(),
            Err(_) => Vec::new(),
        }
        .into_iter()
        .map(|(n, r)| crate::bmc::view(n, r))
        .collect(),
    };
    Html(render(&view, &app.throughput().rates()))
}

fn alerts(v: &View) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(n) = &v.node {
        out.extend(n.alerts.iter().cloned());
    }
    match &v.drives {
        Ok(ds) => {
            for d in ds {
                if d.state != "healthy" {
                    out.push(format!(
                        "drive {} ({}) failed: {}",
                        d.index, d.device, d.reason
                    ));
                }
                if d.full {
                    out.push(format!("drive {} ({}) is full", d.index, d.device));
                }
            }
        }
        Err(e) => out.push(format!("this node's drives do not answer: {e}")),
    }
    if let Ok(c) = &v.cluster {
        for n in c.nodes.iter().filter(|n| n.state != "up") {
            out.push(format!("node {} is {}", n.id, n.state));
        }
        if !c.fully_protected {
            out.push(format!(
                "objects short of protection: {} degraded, {} lost",
                c.objects.degraded, c.objects.lost
            ));
        }
        if c.leader.is_none() {
            out.push("the cluster has no leader".into());
        }
    }
    for b in v.bmcs.iter().filter(|b| b.fenced_ms.is_some()) {
        out.push(format!(
            "node {} was fenced (powered off by its BMC)",
            b.node
        ));
    }
    out
}

fn render(v: &View, rates: &[(f64, f64)]) -> String {
    let mut h = String::new();
    let health = v.node.as_ref().map_or("unavailable", |n| n.health.as_str());
    let (cluster_id, this) = v
        .cluster
        .as_ref()
        .map_or((String::new(), String::new()), |c| {
            (c.cluster_id.clone(), c.this_node.clone())
        });
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta http-equiv=refresh content=10><title>Cairn {}</title><style>{STYLE}</style></head><body>\
         <h1>Cairn {} <span id=health class=\"badge {}\">{}</span></h1><p>node {} · cluster {}</p>",
        esc(&this),
        esc(&crate::admin::hostname()),
        esc(health),
        esc(health),
        esc(&this),
        esc(&cluster_id),
    );
    let al = alerts(v);
    h.push_str("<h2>Alerts</h2><ul id=alerts>");
    if al.is_empty() {
        h.push_str("<li class=ok>none</li>");
    }
    for a in &al {
        let _ = write!(h, "<li class=alert>{}</li>", esc(a));
    }
    h.push_str("</ul>");

    if let Ok(n) = &v.node {
        let _ = write!(
            h,
            "<h2>Capacity</h2><p id=capacity>{} used of {} · {} objects in {} buckets · {} · scrub: {}</p>",
            bytes(n.used_bytes),
            bytes(n.capacity_bytes),
            n.objects,
            n.buckets,
            esc(&n.protection),
            n.scrub
                .as_ref()
                .and_then(|s| s.last.as_ref())
                .map_or("no pass yet".to_string(), |p| format!(
                    "last pass checked {} fragments, {} bad, {} repaired",
                    p.fragments, p.bad, p.repaired
                )),
        );
    }

    h.push_str("<h2>This node's drives</h2>");
    match &v.drives {
        Ok(ds) => {
            h.push_str("<table id=drives><tr><th>drive</th><th>device</th><th>state</th><th>used</th><th>capacity</th><th>chunks</th></tr>");
            for d in ds {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td class={}>{}{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    d.index,
                    esc(&d.device),
                    esc(&d.state),
                    esc(&d.state),
                    if d.reason.is_empty() { String::new() } else { format!(": {}", esc(&d.reason)) },
                    bytes(d.used_bytes),
                    bytes(d.capacity_bytes),
                    d.chunks
                );
            }
            h.push_str("</table>");
        }
        Err(e) => {
            let _ = write!(h, "<p class=alert>{}</p>", esc(e));
        }
    }

    h.push_str("<h2>Nodes</h2>");
    match &v.cluster {
        Ok(c) => {
            let _ = write!(
                h,
                "<p>protection {} · term {} · repair {} ({} fragments rebuilt here)</p>\
                 <table id=nodes><tr><th>node</th><th>state</th><th>role</th><th>S3</th><th>domain</th><th>drives</th><th>BMC</th></tr>",
                esc(&c.protection),
                c.term,
                esc(&c.repair.state),
                c.repair.rebuilt_fragments
            );
            for n in &c.nodes {
                let role = if n.leader {
                    "leader"
                } else if n.voter {
                    "voter"
                } else {
                    "learner"
                };
                let bmc = v
                    .bmcs
                    .iter()
                    .find(|b| b.node == n.id)
                    .map_or("—".to_string(), |b| {
                        format!("{}{}", b.address, if b.fence { " (fencing)" } else { "" })
                    });
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class={}>{}{}</td><td>{role}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&n.id),
                    esc(&n.state),
                    esc(&n.state),
                    if n.draining { ", draining" } else { "" },
                    esc(&n.s3),
                    esc(&n.domain),
                    n.drives,
                    esc(&bmc)
                );
            }
            h.push_str("</table>");
        }
        Err(e) => {
            let _ = write!(h, "<p>{}</p>", esc(e));
        }
    }

    h.push_str("<h2>Tenants</h2>");
    match &v.tenants {
        Ok(ts) if ts.is_empty() => h.push_str("<p>none yet</p>"),
        Ok(ts) => {
            h.push_str("<table id=tenants><tr><th>tenant</th><th>stored</th><th>objects</th><th>buckets</th><th></th></tr>");
            for t in ts {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&t.name),
                    bytes(t.bytes),
                    t.objects,
                    t.buckets,
                    if t.disabled { "disabled" } else { "" }
                );
            }
            h.push_str("</table>");
        }
        Err(e) => {
            let _ = write!(h, "<p>{}</p>", esc(e));
        }
    }

    h.push_str("<h2>S3 throughput on this node (MB/s, last 10 min)</h2>");
    h.push_str(&chart(rates));
    h.push_str("</body></html>");
    h
}

/// Two polylines (in, out) over the samples, scaled to the highest rate.
fn chart(rates: &[(f64, f64)]) -> String {
    let (w, ht) = (600.0, 120.0);
    let top = rates.iter().map(|r| r.0.max(r.1)).fold(1.0_f64, f64::max);
    let line = |pick: fn(&(f64, f64)) -> f64| -> String {
        let n = rates.len().max(2) - 1;
        rates
            .iter()
            .enumerate()
            .map(|(i, r)| {
                format!(
                    "{:.1},{:.1}",
                    i as f64 * w / n as f64,
                    ht - pick(r) / top * (ht - 10.0)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let last = rates.last().copied().unwrap_or_default();
    format!(
        "<svg id=chart width={w} height={ht} viewBox=\"0 0 {w} {ht}\" role=img>\
         <polyline fill=none stroke=#1f5fbf stroke-width=2 points=\"{}\"/>\
         <polyline fill=none stroke=#c0392b stroke-width=2 points=\"{}\"/>\
         <text x=5 y=14 font-size=12>max {top:.1} MB/s</text></svg>\
         <p><span style=color:#1f5fbf>■ in {:.1} MB/s</span> · <span style=color:#c0392b>■ out {:.1} MB/s</span> (now)</p>",
        line(|r| r.0),
        line(|r| r.1),
        last.0,
        last.1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<b a=\"x\">&'"), "&lt;b a=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
