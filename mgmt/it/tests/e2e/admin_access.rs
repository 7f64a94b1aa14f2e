//! The admin API's one access layer, from the outside: tokens made through the
//! API with roles, each role held to its actions, revoked and expired tokens
//! refused, bad input answered with a typed error, every mutating call (refused
//! ones too) in the audit table, and nodectl using an issued token.

use cairn_it::{bin, Node, NodeOptions};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

struct Api {
    base: String,
    http: reqwest::Client,
}

impl Api {
    async fn call(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut r = self
            .http
            .request(m, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn token(
        &self,
        admin: &str,
        name: &str,
        role: &str,
        expires: Option<u64>,
    ) -> (String, String) {
        let mut body = json!({"name": name, "role": role});
        if let Some(s) = expires {
            body["expires_in_s"] = s.into();
        }
        let (st, v) = self
            .call(admin, "POST", "/v1/admin/tokens", Some(body))
            .await;
        assert_eq!(st, 200, "{v}");
        (
            v["id"].as_str().unwrap().to_string(),
            v["token"].as_str().unwrap().to_string(),
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_tokens_and_audit() {
    let node = Node::start(NodeOptions::default());
    let local = std::fs::read_to_string(node.state_dir().join("admin.token")).unwrap();
    let local = local.trim();
    let api = Api {
        base: format!("http://{}", node.admin_addr),
        http: reqwest::Client::new(),
    };

    let (reader_id, reader) = api.token(local, "dashboard", "reader", None).await;
    let (_, operator) = api.token(local, "oncall", "operator", None).await;
    let (_, admin) = api.token(local, "automation", "admin", None).await;
    let (_, expired) = api.token(local, "stale", "admin", Some(0)).await;

    // The table of each role: (token, method, path, body, status).
    let tenant = json!({"name": "acme"});
    let cases: Vec<(&str, &str, &str, Option<Value>, u16)> = vec![
        (&reader, "GET", "/v1/status", None, 200),
        (&reader, "GET", "/metrics", None, 200),
        (&reader, "GET", "/v1/tenants", None, 200),
        (&reader, "POST", "/v1/scrub/start", None, 403),
        (&reader, "POST", "/v1/tenants", Some(tenant.clone()), 403),
        (&reader, "GET", "/v1/cluster/token", None, 403),
        (&reader, "GET", "/v1/admin/tokens", None, 403),
        (&reader, "GET", "/v1/audit", None, 403),
        (&operator, "POST", "/v1/scrub/pause", None, 200),
        (&operator, "GET", "/v1/audit", None, 200),
        (&operator, "POST", "/v1/tenants", Some(tenant.clone()), 403),
        (
            &operator,
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "x", "role": "admin"})),
            403,
        ),
        (&admin, "POST", "/v1/tenants", Some(tenant.clone()), 200),
        (&admin, "GET", "/v1/admin/tokens", None, 200),
        (&expired, "GET", "/v1/status", None, 401),
        ("not-a-token", "GET", "/v1/status", None, 401),
        ("cairn_0000000000000000_00", "GET", "/v1/status", None, 401),
        ("", "GET", "/metrics", None, 401),
    ];
    for (token, method, path, body, want) in cases {
        let (st, v) = api.call(token, method, path, body).await;
        assert_eq!(st, want, "{method} {path} with {token:.16}…: {v}");
        if st == 403 {
            let msg = v["message"].as_str().unwrap_or_default();
            assert!(msg.contains("role"), "403 says which role it needs: {v}");
        }
    }
    // The token's secret half is checked, not just its id.
    let forged = format!("cairn_{reader_id}_{}", "0".repeat(64));
    assert_eq!(api.call(&forged, "GET", "/v1/status", None).await.0, 401);

    // Bad input: typed 400s, unknown routes 404, and the daemon stays up.
    let (st, v) = api
        .call(
            local,
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "x", "role": "root"})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    let (st, _) = api
        .call(
            local,
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "", "role": "reader"})),
        )
        .await;
    assert_eq!(st, 400);
    let raw = api
        .http
        .post(format!("{}/v1/admin/tokens", api.base))
        .bearer_auth(local)
        .header("content-type", "application/json")
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 400);
    assert_eq!(
        api.call(local, "GET", "/v1/no/such/action", None).await.0,
        404
    );
    // Other methods on a known route: HEAD is a GET (and needs its token), the
    // rest are no action at all.
    assert_eq!(api.call("", "HEAD", "/v1/status", None).await.0, 401);
    assert_eq!(api.call(&reader, "HEAD", "/v1/status", None).await.0, 200);
    for m in ["PUT", "OPTIONS", "TRACE"] {
        assert_eq!(api.call("", m, "/v1/status", None).await.0, 404, "{m}");
    }
    // Names that could disguise themselves in lists and logs.
    for name in ["\u{202e}evil", "tab\there", "\u{e9}t\u{e9}"] {
        let (st, v) = api
            .call(
                local,
                "POST",
                "/v1/admin/tokens",
                Some(json!({"name": name, "role": "reader"})),
            )
            .await;
        assert_eq!(st, 400, "{name:?}: {v}");
    }
    assert_eq!(
        api.call(local, "DELETE", "/v1/admin/tokens/0123456789abcdef", None)
            .await
            .0,
        404
    );

    // nodectl with an issued token: a reader's mutation is refused, and says why.
    let out = std::process::Command::new(bin("nodectl"))
        .args(["scrub", "start", "--admin", &node.admin_addr])
        .env("CAIRN_ADMIN_TOKEN", &reader)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("operator role"), "nodectl says: {err}");
    let out = std::process::Command::new(bin("nodectl"))
        .args(["token", "list", "--json", "--admin", &node.admin_addr])
        .env("CAIRN_ADMIN_TOKEN", &admin)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 4);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(&reader[30..]),
        "a secret listed"
    );

    // Revoked: refused from the answer on.
    let (st, _) = api
        .call(
            &admin,
            "DELETE",
            &format!("/v1/admin/tokens/{reader_id}"),
            None,
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(api.call(&reader, "GET", "/v1/status", None).await.0, 401);

    // The audit table: who did what, refusals included (entries land in the
    // background: wait for them).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (st, v) = api
            .call(&operator, "GET", "/v1/audit?limit=1000", None)
            .await;
        assert_eq!(st, 200);
        let entries = v.as_array().unwrap().clone();
        let has = |action: &str, who: &str, status: u64| {
            entries.iter().any(|e| {
                e["action"] == action
                    && e["who"].as_str().unwrap().contains(who)
                    && e["status"] == status
            })
        };
        let all = has("scrub_start", "(dashboard)", 403)
            && has("tenant_create", "(automation)", 200)
            && has("tenant_create", "(oncall)", 403)
            && has("admin_token_create", "local", 200)
            && has("admin_token_revoke", "(automation)", 200)
            && has("scrub_pause", "(oncall)", 200);
        if all {
            // Reads are not audited.
            assert!(!entries.iter().any(|e| e["action"] == "status"));
            break;
        }
        assert!(
            Instant::now() < deadline,
            "audit table lacks entries: {v:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A flood of refused calls is folded: one entry per caller and action per
    // minute, so it cannot push the admins' entries out of the bounded table.
    let count = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                e["action"] == "admin_token_create"
                    && e["who"].as_str().unwrap().contains("(oncall)")
                    && e["status"] == 403
            })
            .count()
    };
    let audit = || api.call(&admin, "GET", "/v1/audit?limit=10000", None);
    let before = count(&audit().await.1);
    for _ in 0..300 {
        let body = json!({"name": "x", "role": "admin"});
        let (st, _) = api
            .call(&operator, "POST", "/v1/admin/tokens", Some(body))
            .await;
        assert_eq!(st, 403);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, v) = audit().await;
    assert!(
        count(&v) <= before + 1,
        "300 refusals made {} entries",
        count(&v) - before
    );
    assert!(v
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["action"] == "admin_token_create" && e["who"] == "local"));
}

/// A tenant's token (`token create --tenant`): its role holds within its own
/// tenant (users, keys, buckets, KV pools) and nowhere else: not another
/// tenant, not the node, not tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_tokens_act_only_within_their_tenant() {
    let node = Node::start(NodeOptions::default());
    let local = std::fs::read_to_string(node.state_dir().join("admin.token")).unwrap();
    let local = local.trim();
    let api = Api {
        base: format!("http://{}", node.admin_addr),
        http: reqwest::Client::new(),
    };
    for t in ["acme", "globex"] {
        let (st, v) = api
            .call(local, "POST", "/v1/tenants", Some(json!({"name": t})))
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, v) = api
        .call(
            local,
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "acme-admin", "role": "admin", "tenant": "acme"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["tenant"], "acme", "{v}");
    let acme = v["token"].as_str().unwrap().to_string();
    let (st, v) = api
        .call(
            local,
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "nobody", "role": "admin", "tenant": "initech"})),
        )
        .await;
    assert_eq!(st, 404, "a token for an unknown tenant: {v}");

    // No tenant may be named as the root's namespace.
    for name in ["root", "ROOT"] {
        let (st, v) = api
            .call(local, "POST", "/v1/tenants", Some(json!({"name": name})))
            .await;
        assert_eq!(st, 400, "a tenant named {name}: {v}");
    }
    let user = |n: &str| Some(json!({"name": n, "role": "read-write"}));
    let cases: Vec<(&str, &str, Option<Value>, u16)> = vec![
        ("GET", "/v1/tenants/acme", None, 200),
        ("POST", "/v1/tenants/acme/users", user("wile"), 200),
        ("GET", "/v1/tenants/acme/users", None, 200),
        ("POST", "/v1/tenants/acme/users/wile/keys", None, 200),
        ("GET", "/v1/tenants/acme/buckets", None, 200),
        // Another tenant, by name or by id, and percent-encoded: refused.
        ("GET", "/v1/tenants/globex", None, 403),
        ("POST", "/v1/tenants/globex/users", user("mallory"), 403),
        ("GET", "/v1/tenants/%67lobex/users", None, 403),
        // Nothing outside tenants.
        ("GET", "/v1/tenants", None, 403),
        ("GET", "/v1/status", None, 403),
        ("GET", "/metrics", None, 403),
        ("GET", "/v1/admin/tokens", None, 403),
        (
            "POST",
            "/v1/admin/tokens",
            Some(json!({"name": "escalate", "role": "admin"})),
            403,
        ),
        (
            "PUT",
            "/v1/tenants/acme/quota",
            Some(json!({"max_bytes": 1})),
            403,
        ),
        ("DELETE", "/v1/tenants/acme", None, 403),
        // `root` in a path is the root key's own namespace (its KV pools).
        ("GET", "/v1/tenants/root/kv/pools", None, 403),
        (
            "POST",
            "/v1/tenants/root/kv/pools",
            Some(json!({"name": "planted"})),
            403,
        ),
    ];
    for (method, path, body, want) in cases {
        let (st, v) = api.call(&acme, method, path, body).await;
        assert_eq!(st, want, "{method} {path}: {v}");
    }
    let (_, gid) = api.call(local, "GET", "/v1/tenants/globex", None).await;
    let gid = gid["id"].as_str().unwrap().to_string();
    let (st, _) = api
        .call(&acme, "GET", &format!("/v1/tenants/{gid}/users"), None)
        .await;
    assert_eq!(st, 403, "another tenant by id");

    // Keys: its own revoked, another tenant's refused.
    let (st, k) = api
        .call(local, "POST", "/v1/tenants/globex/users", user("road"))
        .await;
    assert_eq!(st, 200, "{k}");
    let (_, gk) = api
        .call(local, "POST", "/v1/tenants/globex/users/road/keys", None)
        .await;
    let gk = gk["access_key"].as_str().unwrap().to_string();
    let (st, _) = api
        .call(&acme, "DELETE", &format!("/v1/keys/{gk}"), None)
        .await;
    assert_eq!(st, 403, "another tenant's key revoked");
    let (_, ak) = api
        .call(&acme, "POST", "/v1/tenants/acme/users/wile/keys", None)
        .await;
    let ak = ak["access_key"].as_str().unwrap().to_string();
    let (st, v) = api
        .call(&acme, "DELETE", &format!("/v1/keys/{ak}"), None)
        .await;
    assert_eq!(st, 200, "its own key: {v}");

    // The audit names the token and its refusals.
    let (_, audit) = api.call(local, "GET", "/v1/audit?limit=200", None).await;
    assert!(
        audit.as_array().unwrap().iter().any(|e| e["who"]
            .as_str()
            .unwrap_or("")
            .contains("acme-admin")
            && e["status"] == 403),
        "{audit:#}"
    );
}
