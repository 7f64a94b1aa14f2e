//! The status page in a real browser (Debian's chromium, headless): it renders
//! the node's health, drives and nodes for a reader token given as the Basic
//! password; shows a failed drive once a drive's file is removed; and an
//! unauthenticated request gets a 401 that asks for credentials, and no data.

use cairn_it::{Node, NodeOptions};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

/// The page's DOM after chromium has loaded `url`.
fn chromium_dom(url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", url])
        .output()
        .expect("chromium (apt install chromium)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element with `id` (up to its closing tag).
fn element<'a>(dom: &'a str, tag: &str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page: {dom}"));
    let end = dom[start..]
        .find(&format!("</{tag}>"))
        .map_or(dom.len(), |e| start + e);
    &dom[start..end]
}

#[test]
fn the_status_page_in_headless_chromium() {
    let node = Node::start(NodeOptions::default());
    let made = node.admin_post(
        "/v1/admin/tokens",
        &json!({"name": "wallboard", "role": "reader"}),
    );
    let token = made["token"].as_str().unwrap();
    let url = format!("http://wall:{token}@{}/ui", node.admin_addr);

    let dom = chromium_dom(&url);
    assert!(element(&dom, "span", "health").contains("healthy"), "{dom}");
    let drives = element(&dom, "table", "drives");
    assert_eq!(drives.matches("<tr>").count(), 5, "{drives}");
    assert!(!drives.contains("failed"), "{drives}");
    let id = node.admin("GET", "/v1/cluster/status")["nodes"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(element(&dom, "table", "nodes").contains(&id), "{dom}");
    assert!(element(&dom, "ul", "alerts").contains("none"), "{dom}");
    assert!(dom.contains("<svg"), "no throughput chart: {dom}");

    // A drive's file removed: the page shows it failed, as an alert too. The
    // page's parts are asked at once, so one render may show the drive failed
    // before the node's health (read a moment earlier) says so: wait for both.
    std::fs::remove_file(node.drive_path(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let dom = loop {
        let dom = chromium_dom(&url);
        if element(&dom, "table", "drives").contains("failed")
            && element(&dom, "span", "health").contains("degraded")
        {
            break dom;
        }
        assert!(
            Instant::now() < deadline,
            "the failed drive never showed: {dom}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        element(&dom, "span", "health").contains("degraded"),
        "{dom}"
    );
    let alerts = element(&dom, "ul", "alerts");
    assert!(
        alerts.contains("drive 2") && alerts.contains("failed"),
        "{alerts}"
    );

    // Without credentials: 401 asking for them, and none of the node's data.
    let dom = chromium_dom(&format!("http://{}/ui", node.admin_addr));
    // (Headless chromium shows nothing for a page that asks for credentials.)
    assert!(
        !dom.contains("id=\"drives\"") && !dom.contains(&id),
        "{dom}"
    );
    let head = Command::new("curl")
        .args(["-s", "-D", "-"])
        .arg(format!("http://{}/ui", node.admin_addr))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).to_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("www-authenticate: basic"), "{head}");
    assert!(
        head.contains("missing admin token") && !head.contains(&id),
        "{head}"
    );
    // A wrong token is refused the same way.
    let dom = chromium_dom(&format!("http://wall:cairn_00_ff@{}/ui", node.admin_addr));
    assert!(!dom.contains("id=\"drives\""), "{dom}");

    // Basic credentials never change anything: a mutating call with them is
    // 401, even with the node's own admin token.
    let local = std::fs::read_to_string(node.state_dir().join("admin.token")).unwrap();
    let post = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"])
        .args(["-u", &format!("admin:{}", local.trim())])
        .arg(format!("http://{}/v1/scrub/start", node.admin_addr))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&post.stdout), "401");
}
