//! NFS exports from the outside, through the real admin API client and the real
//! nodectl against one real node: a tenant's bucket and a root bucket
//! exported, listed as `/<tenant>/<bucket>` with their client networks in CIDR
//! form, an export replaced, bad client networks, an empty list and a KV
//! pool's bucket refused with 400, unknown tenants and buckets with 404, a
//! reader's token (and a tenant's) refused the change, the changes audited, the
//! exports removed (twice: no error).

use cairn_adminapi::{
    Action, AdminClient, AdminError, ErrorKind, ExportSpec, ExportView, NewAdminToken, NewKvPool,
    Role, NOBODY,
};
use cairn_it::tenant::nodectl;
use cairn_it::{Node, NodeOptions};
use std::time::{Duration, Instant};

fn spec(clients: &[&str]) -> ExportSpec {
    ExportSpec {
        clients: clients.iter().map(|c| c.to_string()).collect(),
        uid: None,
        gid: None,
        read_only: false,
    }
}

/// The kind of a call that must fail, and that it was a 4xx answer.
fn refused<T: std::fmt::Debug>(r: Result<T, AdminError>) -> ErrorKind {
    let e = r.expect_err("refused");
    let kind = e.kind().unwrap_or_else(|| panic!("not an answer: {e}"));
    let status = match &e {
        AdminError::Unauthorized { status, .. }
        | AdminError::NotFound { status, .. }
        | AdminError::Rejected { status, .. } => status.as_u16(),
        _ => panic!("not a refusal: {e}"),
    };
    assert!((400..500).contains(&status), "{e}");
    kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_are_exported_listed_refused_and_removed() {
    let node = Node::start(NodeOptions::default());
    let api = AdminClient::for_state_dir(&node.admin_addr, &node.state_dir()).unwrap();

    // A tenant's bucket, a root bucket, and a KV pool's S3 bucket.
    let acme = api.tenant_create("acme", true).await.unwrap();
    api.user_create("acme", "alice", "admin").await.unwrap();
    let k = api.key_create("acme", "alice").await.unwrap();
    let alice = node.client_with(&k.access_key, &k.secret_key);
    alice.create_bucket().bucket("data").send().await.unwrap();
    node.client()
        .create_bucket()
        .bucket("scratch")
        .send()
        .await
        .unwrap();
    api.kv_pool_create(
        "acme",
        NewKvPool {
            name: "cache".into(),
            s3_bucket: Some("cache".into()),
            evict: true,
            durability: "write-back".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(api.exports().await.unwrap().is_empty());

    // Exported: clients stored as networks, the owner nobody unless given.
    let data = api
        .set_export(
            "acme",
            "data",
            &ExportSpec {
                uid: Some(1000),
                ..spec(&["10.1.2.3/8", "127.0.0.1", "fd00::1/64", "10.0.0.0/8"])
            },
        )
        .await
        .unwrap();
    assert_eq!(
        data,
        ExportView {
            tenant: "acme".into(),
            bucket: "data".into(),
            path: "/acme/data".into(),
            clients: vec![
                "10.0.0.0/8".into(),
                "127.0.0.1/32".into(),
                "fd00::/64".into()
            ],
            uid: 1000,
            gid: NOBODY,
            read_only: false,
        }
    );
    // The root's buckets are `root`'s, as the KV routes name them.
    let scratch = api
        .set_export(
            "root",
            "scratch",
            &ExportSpec {
                read_only: true,
                ..spec(&["192.0.2.0/24"])
            },
        )
        .await
        .unwrap();
    assert_eq!(scratch.path, "/root/scratch");
    assert_eq!((scratch.uid, scratch.gid), (NOBODY, NOBODY));
    assert_eq!(
        api.exports().await.unwrap(),
        [data.clone(), scratch.clone()]
    );

    // Replaced whole, the tenant named by its id this time.
    let data = api
        .set_export(&acme.id, "data", &spec(&["::1"]))
        .await
        .unwrap();
    assert_eq!(data.path, "/acme/data");
    assert_eq!(data.clients, ["::1/128"]);
    assert_eq!((data.uid, data.gid), (NOBODY, NOBODY));
    let listed = api.exports().await.unwrap();
    assert_eq!(listed, [data.clone(), scratch.clone()]);

    // Refused, and nothing changed.
    for bad in [
        spec(&["10.0.0.0/33"]),
        spec(&["nonsense"]),
        spec(&["10.0.0.0/8", ""]),
        spec(&[]),
    ] {
        let r = api.set_export("acme", "data", &bad).await;
        assert_eq!(refused(r), ErrorKind::Invalid, "{bad:?}");
    }
    let r = api
        .set_export("acme", "cache", &spec(&["10.0.0.0/8"]))
        .await;
    assert_eq!(refused(r), ErrorKind::Invalid);
    let r = api
        .set_export("nobody", "data", &spec(&["10.0.0.0/8"]))
        .await;
    assert_eq!(refused(r), ErrorKind::NotFound);
    let r = api
        .set_export("acme", "absent", &spec(&["10.0.0.0/8"]))
        .await;
    assert_eq!(refused(r), ErrorKind::NotFound);
    // The root's `data` is not acme's.
    let r = api.set_export("root", "data", &spec(&["10.0.0.0/8"])).await;
    assert_eq!(refused(r), ErrorKind::NotFound);
    let r = api.remove_export("acme", "absent").await;
    assert_eq!(refused(r), ErrorKind::NotFound);

    // A reader lists exports and changes none; neither does a tenant's admin.
    let token = |name: &str, role, tenant: Option<&str>| NewAdminToken {
        name: name.into(),
        role,
        expires_in_s: None,
        tenant: tenant.map(str::to_string),
    };
    let reader = api
        .admin_token_create(&token("dashboard", Role::Reader, None))
        .await
        .unwrap();
    let reader = AdminClient::new(&node.admin_addr, reader.token);
    assert_eq!(reader.exports().await.unwrap(), listed);
    let r = reader
        .set_export("acme", "data", &spec(&["0.0.0.0/0"]))
        .await;
    assert_eq!(refused(r), ErrorKind::Forbidden);
    let r = reader.remove_export("acme", "data").await;
    assert_eq!(refused(r), ErrorKind::Forbidden);
    let tenant_admin = api
        .admin_token_create(&token("acme-admin", Role::Admin, Some("acme")))
        .await
        .unwrap();
    let tenant_admin = AdminClient::new(&node.admin_addr, tenant_admin.token);
    let r = tenant_admin
        .set_export("acme", "data", &spec(&["0.0.0.0/0"]))
        .await;
    assert_eq!(refused(r), ErrorKind::Forbidden);
    assert_eq!(api.exports().await.unwrap(), listed);
    // Audited as every admin change is (entries land in the background): the
    // three exports set, the two refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let audit = api.audit(1000).await.unwrap();
        let sets = |status: u16| {
            audit
                .iter()
                .filter(|a| a.action == Action::ExportSet && a.status == status)
                .count()
        };
        if (sets(200), sets(403)) == (3, 2) {
            break;
        }
        assert!(Instant::now() < deadline, "audit: {audit:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // nodectl: add, the table, remove.
    let (ok, out, err) = nodectl(
        &node,
        &[
            "export",
            "add",
            "acme",
            "data",
            "--client",
            "10.9.0.0/16",
            "--client",
            "192.0.2.7",
            "--uid",
            "1000",
            "--gid",
            "100",
            "--read-only",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("/acme/data"), "{out}");
    let (ok, out, err) = nodectl(&node, &["export", "list"]);
    assert!(ok, "{err}");
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["PATH", "CLIENTS", "UID:GID", "MODE"],
            vec!["/acme/data", "10.9.0.0/16,192.0.2.7/32", "1000:100", "ro"],
            vec!["/root/scratch", "192.0.2.0/24", "65534:65534", "ro"],
        ],
        "{out}"
    );
    let (ok, _, err) = nodectl(&node, &["export", "add", "acme", "data", "--client", "x"]);
    assert!(
        !ok && err.contains("\"x\" is not a client network"),
        "{err}"
    );
    let (ok, _, err) = nodectl(&node, &["export", "remove", "root", "scratch"]);
    assert!(ok, "{err}");

    // Removed; removing again is no error.
    api.remove_export("acme", "data").await.unwrap();
    api.remove_export("acme", "data").await.unwrap();
    api.remove_export("root", "scratch").await.unwrap();
    assert!(api.exports().await.unwrap().is_empty());
    let (ok, out, err) = nodectl(&node, &["export", "list"]);
    assert!(ok && out.starts_with("no NFS exports"), "{out}{err}");
    // The bucket itself is untouched.
    alice.head_bucket().bucket("data").send().await.unwrap();
}
