//! `/metrics` on the admin port, read as Prometheus would: behind the admin
//! token, parsed by a Prometheus text-format parser, counting what real S3 and
//! RESP clients just did, and still answering (saying so) when datapathd is gone.

use cairn_it::{resp_command, Node, NodeOptions, ACCESS_KEY, SECRET_KEY};
use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn start() -> (Node, String) {
    let addr = cairn_it::free_addr();
    let port = addr.to_string();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_RESP", addr)],
        ..Default::default()
    });
    (node, port)
}

async fn scrape_with(node: &Node, token: Option<&str>) -> reqwest::Response {
    let mut req = reqwest::Client::new().get(format!("http://{}/metrics", node.admin_addr));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

async fn scrape(node: &Node) -> Scrape {
    let token = std::fs::read_to_string(node.state_dir().join("admin.token")).unwrap();
    let r = scrape_with(node, Some(token.trim())).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.ends_with("# EOF\n"),
        "not OpenMetrics-terminated: {text}"
    );
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap()
}

fn find<'a>(s: &'a Scrape, name: &str, labels: &[(&str, &str)]) -> Vec<&'a Sample> {
    s.samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .collect()
}

/// The one sample's value (counters, gauges and untyped alike).
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = find(s, name, labels);
    assert_eq!(found.len(), 1, "{name} {labels:?}: {} samples", found.len());
    match &found[0].value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
        other => panic!("{name}: not a number: {other:?}"),
    }
}

async fn resp_roundtrip(addr: &str, commands: &[&[&[u8]]]) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut all = resp_command(&[b"AUTH", ACCESS_KEY.as_bytes(), SECRET_KEY.as_bytes()]);
    for c in commands {
        all.extend(resp_command(c));
    }
    all.extend(resp_command(&[b"QUIT"]));
    s.write_all(&all).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_count_what_clients_did() {
    let (mut node, resp) = start();
    let c = node.client();
    c.create_bucket().bucket("metered").send().await.unwrap();
    let body = cairn_it::random_bytes(300_000, 7);
    cairn_it::put_bytes(&c, "metered", "k", &body)
        .await
        .unwrap();
    assert_eq!(cairn_it::get_bytes(&c, "metered", "k").await.unwrap(), body);
    assert!(c
        .head_object()
        .bucket("metered")
        .key("absent")
        .send()
        .await
        .is_err());
    resp_roundtrip(
        &resp,
        &[
            &[b"SET", b"a", b"1"],
            &[b"GET", b"a"],
            &[b"GET", b"absent"],
            &[b"NOSUCHCOMMAND", b"x"],
        ],
    )
    .await;

    // Without the token, or with a wrong one: refused.
    assert_eq!(scrape_with(&node, None).await.status(), 401);
    assert_eq!(
        scrape_with(&node, Some("not-the-token")).await.status(),
        401
    );

    let s = scrape(&node).await;
    let put = [("op", "PutObject"), ("status", "200")];
    assert_eq!(value(&s, "cairn_s3_requests_total", &put), 1.0);
    assert_eq!(
        value(
            &s,
            "cairn_s3_requests_total",
            &[("op", "GetObject"), ("status", "200")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "cairn_s3_requests_total",
            &[("op", "HeadObject"), ("status", "404")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "cairn_s3_errors_total",
            &[("op", "HeadObject"), ("code", "NoSuchKey")]
        ),
        1.0
    );
    let h = find(
        &s,
        "cairn_s3_request_duration_seconds",
        &[("op", "PutObject")],
    );
    match h.first().map(|x| &x.value) {
        Some(Value::Histogram(b)) => {
            assert_eq!(b.last().unwrap().count, 1.0, "PutObject +Inf bucket: {b:?}")
        }
        other => panic!("PutObject latency histogram: {other:?}"),
    }
    assert!(value(&s, "cairn_s3_received_bytes_total", &[]) >= body.len() as f64);
    assert!(value(&s, "cairn_s3_sent_bytes_total", &[]) >= body.len() as f64);
    for (cmd, n) in [("SET", 1.0), ("GET", 2.0), ("AUTH", 1.0), ("OTHER", 1.0)] {
        assert_eq!(
            value(&s, "cairn_resp_commands_total", &[("command", cmd)]),
            n,
            "{cmd}"
        );
    }
    assert_eq!(value(&s, "cairn_resp_keyspace_hits_total", &[]), 1.0);
    assert_eq!(value(&s, "cairn_resp_keyspace_misses_total", &[]), 1.0);
    assert_eq!(value(&s, "cairn_datapath_up", &[]), 1.0);
    let drives = find(&s, "cairn_drive_healthy", &[]);
    assert_eq!(drives.len(), node.opts.drives as usize);
    for d in &drives {
        assert!(matches!(d.value, Value::Gauge(v) if v == 1.0), "{d:?}");
    }
    // datapathd's reactors: each once, busy some of the time, having served the
    // PUT's and GET's operations, with the scrape's own message in the mailbox.
    let reactors = find(&s, "cairn_reactor_ops_total", &[]);
    assert!(!reactors.is_empty(), "no reactor figures");
    for r in &reactors {
        let l = [("reactor", r.labels.get("reactor").unwrap())];
        assert!(value(&s, "cairn_reactor_ops_total", &l) > 0.0, "{r:?}");
        let busy = value(&s, "cairn_reactor_busy_seconds_total", &l);
        assert!(busy > 0.0 && busy < 3600.0, "busy {busy}");
        let (turns, batches) = (
            value(&s, "cairn_reactor_turns_total", &l),
            value(&s, "cairn_reactor_batches_total", &l),
        );
        assert!(
            turns > 0.0 && batches >= turns,
            "{turns} turns, {batches} batches"
        );
        assert!(value(&s, "cairn_reactor_queue_depth", &l) >= 1.0);
    }
    assert!(value(&s, "cairn_tenant_stored_bytes", &[("tenant", "root")]) >= body.len() as f64);
    assert_eq!(value(&s, "cairn_raft_leader", &[]), 1.0);
    assert_eq!(value(&s, "cairn_cluster_nodes", &[("state", "up")]), 1.0);

    // datapathd gone: the scrape still answers, and says so; no drive gauges
    // pretend to know.
    node.kill_datapathd();
    let s = scrape(&node).await;
    assert_eq!(value(&s, "cairn_datapath_up", &[]), 0.0);
    assert!(find(&s, "cairn_drive_healthy", &[]).is_empty());
    assert_eq!(value(&s, "cairn_s3_requests_total", &put), 1.0);
}
