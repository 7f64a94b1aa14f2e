//! Tenants made from the outside: the real `nodectl` against a test node.

use crate::{bin, Node};
use aws_sdk_s3::Client;
use std::process::Command;

/// `nodectl ARGS --admin ... --token-file ...`: (exit success, stdout, stderr).
pub fn nodectl(node: &Node, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin("nodectl"))
        .args(args)
        .args(["--admin", &node.admin_addr, "--token-file"])
        .arg(node.state_dir().join("admin.token"))
        .output()
        .expect("nodectl");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn nodectl_json(node: &Node, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (ok, out, err) = nodectl(node, &all);
    assert!(ok, "nodectl {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("nodectl {args:?}: {e}: {out}"))
}

/// A new key for `user` of `tenant`, as a client.
pub fn key_client(node: &Node, tenant: &str, user: &str) -> (Client, String) {
    let k = nodectl_json(node, &["key", "create", tenant, user]);
    let (ak, sk) = (
        k["access_key"].as_str().unwrap(),
        k["secret_key"].as_str().unwrap(),
    );
    assert_eq!(ak.len(), 20);
    assert_eq!(sk.len(), 40);
    (node.client_with(ak, sk), ak.to_string())
}

/// PUTs `body` as `b/k`, panicking with the error if refused.
pub async fn put(c: &Client, b: &str, k: &str, body: &[u8]) {
    c.put_object()
        .bucket(b)
        .key(k)
        .body(aws_sdk_s3::primitives::ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("put {b}/{k}: {e:?}"));
}
