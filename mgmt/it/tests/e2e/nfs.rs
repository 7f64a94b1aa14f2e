//! NFS from the outside: a real userspace NFSv3 client (`nfs3_client`) against
//! a real node, S3 through the AWS SDK on the same buckets. Files written over
//! NFS are objects byte for byte and the other way round; directories, renames,
//! truncation, partial overwrites; handles that outlive a kill -9 of mgmtd and
//! committed bytes that survive it; names and handles a client must not use;
//! exports sealed by tenant and client network; quotas as through S3.

use cairn_adminapi::{AdminClient, ExportSpec, QuotaSpec};
use cairn_it::nfs::{at, call_with_xid, raw_handle, reply_status, Mount};
use cairn_it::{free_addr, md5_hex, random_bytes, Node, NodeOptions};
use nfs3_client::nfs3_types::nfs3::{
    nfsstat3, sattr3, stable_how, LINK3args, Nfs3Option, REMOVE3args, RENAME3args,
};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

pub(crate) struct Setup {
    pub(crate) node: Node,
    pub(crate) nfs: SocketAddr,
    pub(crate) api: AdminClient,
}

pub(crate) async fn setup(bucket: &str) -> Setup {
    let nfs = free_addr();
    let node = Node::start(NodeOptions {
        mgmtd_env: vec![("CAIRN_NFS", nfs)],
        ..Default::default()
    });
    let api = AdminClient::for_state_dir(&node.admin_addr, &node.state_dir()).unwrap();
    node.client()
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    export(&api, "root", bucket, &["127.0.0.1/32"], false).await;
    Setup {
        nfs: nfs.parse().unwrap(),
        node,
        api,
    }
}

async fn export(api: &AdminClient, tenant: &str, bucket: &str, clients: &[&str], read_only: bool) {
    let spec = ExportSpec {
        clients: clients.iter().map(|c| c.to_string()).collect(),
        uid: Some(1000),
        gid: Some(1000),
        read_only,
    };
    api.set_export(tenant, bucket, &spec).await.unwrap();
    // Each node reads the exports at most every 2 s.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
}

pub(crate) async fn get(node: &Node, bucket: &str, key: &str) -> Vec<u8> {
    let o = node
        .client()
        .get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await;
    let o = o.unwrap_or_else(|e| panic!("GET {key}: {e:?}"));
    o.body.collect().await.unwrap().into_bytes().to_vec()
}

async fn keys(node: &Node, bucket: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let r = node
            .client()
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token)
            .send()
            .await
            .unwrap();
        out.extend(
            r.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string)),
        );
        token = r.next_continuation_token().map(str::to_string);
        if token.is_none() {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_objects_are_one_namespace() {
    let s = setup("demo").await;
    let node = &s.node;
    let mut m = Mount::new(s.nfs, "/root/demo", LOCAL).await.unwrap();

    // An object written over S3 is a file at once.
    let body = random_bytes(3 << 20, 1);
    node.client()
        .put_object()
        .bucket("demo")
        .key("s3/deep/obj.bin")
        .body(body.clone().into())
        .send()
        .await
        .unwrap();
    let h = m.walk("s3/deep/obj.bin").await.unwrap();
    assert_eq!(m.read_all(&h).await.unwrap(), body, "S3 -> NFS");
    assert_eq!(m.getattr(&h).await.unwrap().size, 3 << 20);

    // A tree written over NFS: every file an object, byte for byte, once committed.
    let root = m.root.clone();
    let tree = m.mkdir(&root, "tree").await.unwrap();
    let mut subs = Vec::new();
    for i in 0..10 {
        subs.push(m.mkdir(&tree, &format!("d{i}")).await.unwrap());
    }
    let started = Instant::now();
    for i in 0..1000u64 {
        let f = m
            .create(&subs[(i % 10) as usize], &format!("f{i}"))
            .await
            .unwrap();
        m.write_all(&f, 0, &random_bytes(100 + i as usize, i))
            .await
            .unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "1000 small files created, written and committed over NFS in {secs:.1} s ({:.0} files/s)",
        1000.0 / secs
    );
    let listed = keys(node, "demo", "tree/").await;
    assert_eq!(
        listed.len(),
        1000 + 11,
        "1000 files and 11 directory markers: {:?}",
        &listed[..5]
    );
    for i in (0..1000u64).step_by(37) {
        let got = get(node, "demo", &format!("tree/d{}/f{i}", i % 10)).await;
        assert_eq!(
            md5_hex(&got),
            md5_hex(&random_bytes(100 + i as usize, i)),
            "NFS -> S3, file {i}"
        );
    }
    // A directory read in small replies (several cookies) sees every name
    // once, while another client reads the same directory at the same time.
    let mut other = Mount::new(s.nfs, "/root/demo", LOCAL).await.unwrap();
    let d3 = other.walk("tree/d3").await.unwrap();
    let (names, also) = tokio::join!(m.names(&subs[3], 1024), other.names(&d3, 700));
    let (mut names, mut also) = (names.unwrap(), also.unwrap());
    also.sort();
    names.sort();
    assert_eq!(names, also);
    let mut want: Vec<String> = (0..1000)
        .filter(|i| i % 10 == 3)
        .map(|i| format!("f{i}"))
        .collect();
    want.sort();
    assert_eq!(names, want);

    // A directory renamed: every file moves, none is left behind.
    m.rename(&root, "tree", &root, "moved").await.unwrap();
    assert!(keys(node, "demo", "tree/").await.is_empty());
    assert_eq!(keys(node, "demo", "moved/").await.len(), 1011);
    let f7 = m.walk("moved/d7/f7").await.unwrap();
    assert_eq!(m.read_all(&f7).await.unwrap(), random_bytes(107, 7));
    assert_eq!(m.lookup(&root, "tree").await, Err(nfsstat3::NFS3ERR_NOENT));

    // Part of a file overwritten, then appended to, then cut: S3 sees each.
    let f = m.create(&root, "edit.bin").await.unwrap();
    let mut want = random_bytes(5 << 20, 9);
    m.write_all(&f, 0, &want).await.unwrap();
    let patch = random_bytes(1000, 10);
    m.write_all(&f, 4096, &patch).await.unwrap();
    want[4096..5096].copy_from_slice(&patch);
    assert_eq!(
        md5_hex(&get(node, "demo", "edit.bin").await),
        md5_hex(&want),
        "overwrite"
    );
    let tail = random_bytes(777, 11);
    m.write_all(&f, want.len() as u64, &tail).await.unwrap();
    want.extend_from_slice(&tail);
    assert_eq!(
        md5_hex(&get(node, "demo", "edit.bin").await),
        md5_hex(&want),
        "append"
    );
    let cut = sattr3 {
        size: Nfs3Option::Some(1234),
        mode: Nfs3Option::Some(0o600),
        ..Default::default()
    };
    m.setattr(&f, cut).await.unwrap();
    want.truncate(1234);
    assert_eq!(get(node, "demo", "edit.bin").await, want, "truncate");
    let a = m.getattr(&f).await.unwrap();
    assert_eq!(
        (a.size, a.mode, a.uid),
        (1234, 0o600, 1000),
        "size, mode kept, the export's owner"
    );
    let head = node
        .client()
        .head_object()
        .bucket("demo")
        .key("edit.bin")
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("nfs-mode"))
            .map(String::as_str),
        Some("384")
    );

    // An S3 overwrite is what the next NFS read sees (close-to-open).
    let fresh = random_bytes(2000, 12);
    node.client()
        .put_object()
        .bucket("demo")
        .key("edit.bin")
        .body(fresh.clone().into())
        .send()
        .await
        .unwrap();
    assert_eq!(m.read_all(&f).await.unwrap(), fresh);

    // A file renamed while it has uncommitted writes: they move with it, a
    // write through the old handle is STALE, and the old name stays gone.
    let w = m.create(&root, "wip").await.unwrap();
    m.write(&w, 0, b"before the rename", stable_how::UNSTABLE)
        .await
        .unwrap();
    m.rename(&root, "wip", &root, "done").await.unwrap();
    assert_eq!(
        m.write(&w, 17, b"!", stable_how::UNSTABLE)
            .await
            .map(|_| ()),
        Err(nfsstat3::NFS3ERR_STALE)
    );
    let done = m.lookup(&root, "done").await.unwrap();
    assert_eq!(m.read_all(&done).await.unwrap(), b"before the rename");
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(m.lookup(&root, "wip").await, Err(nfsstat3::NFS3ERR_NOENT));
    assert!(keys(node, "demo", "wip").await.is_empty());

    // A file and a directory of one name across a listing's page boundary
    // (S3 allows both `x` and `x/y`): the name shows once, as the directory.
    for i in 0..255 {
        let k = format!("pages/k{i:03}");
        node.client()
            .put_object()
            .bucket("demo")
            .key(k)
            .body(Vec::new().into())
            .send()
            .await
            .unwrap();
    }
    for k in ["pages/x", "pages/x/y"] {
        node.client()
            .put_object()
            .bucket("demo")
            .key(k)
            .body(b"v".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let pages = m.walk("pages").await.unwrap();
    let listed = m.names(&pages, 65536).await.unwrap();
    assert_eq!(listed.len(), 256, "255 files and x once");
    assert_eq!(listed.iter().filter(|n| *n == "x").count(), 1);

    // Removal; a directory with something in it stays.
    m.remove(&root, "edit.bin").await.unwrap();
    assert_eq!(
        m.lookup(&root, "edit.bin").await,
        Err(nfsstat3::NFS3ERR_NOENT)
    );
    assert_eq!(
        m.rmdir(&root, "moved").await,
        Err(nfsstat3::NFS3ERR_NOTEMPTY)
    );
    assert_eq!(m.remove(&root, "moved").await, Err(nfsstat3::NFS3ERR_ISDIR));
    let keep = m.create(&root, "keep.txt").await.unwrap();
    m.write(&keep, 0, b"kept", stable_how::FILE_SYNC)
        .await
        .unwrap();
    assert_eq!(
        m.rmdir(&root, "keep.txt").await,
        Err(nfsstat3::NFS3ERR_NOTDIR)
    );
    assert_eq!(
        m.read_all(&keep).await.unwrap(),
        b"kept",
        "an RMDIR of a file removes nothing"
    );
    m.rename(&root, "moved", &root, "moved").await.unwrap();
    let empty = m.mkdir(&root, "empty").await.unwrap();
    assert_eq!(m.names(&empty, 4096).await.unwrap(), Vec::<String>::new());
    m.rmdir(&root, "empty").await.unwrap();

    // What a client must not do gets an error, and changes nothing.
    assert_eq!(
        m.lookup(&root, &"x".repeat(256)).await,
        Err(nfsstat3::NFS3ERR_NAMETOOLONG)
    );
    assert_eq!(
        m.create(&root, "nul\0name").await,
        Err(nfsstat3::NFS3ERR_INVAL)
    );
    assert_eq!(m.create(&root, "..").await, Err(nfsstat3::NFS3ERR_INVAL));
    let up = m.lookup(&root, "..").await.unwrap();
    assert_eq!(
        m.getattr(&up).await.unwrap().fileid,
        m.getattr(&root).await.unwrap().fileid,
        "nothing above the export"
    );
    let big = m.create(&root, "sparse").await.unwrap();
    assert_eq!(
        m.write(&big, 200 << 30, b"x", stable_how::FILE_SYNC).await,
        Err(nfsstat3::NFS3ERR_FBIG)
    );
    let huge = sattr3 {
        size: Nfs3Option::Some(1 << 63),
        ..Default::default()
    };
    assert_eq!(m.setattr(&keep, huge).await, Err(nfsstat3::NFS3ERR_FBIG));
    m.write(&keep, 128 << 30, b"", stable_how::FILE_SYNC)
        .await
        .unwrap();
    assert_eq!(
        m.getattr(&keep).await.unwrap().size,
        4,
        "nothing grew the file"
    );
    assert_eq!(m.read_all(&keep).await.unwrap(), b"kept");
    assert!(matches!(
        m.getattr(&raw_handle(vec![7; 30])).await,
        Err(nfsstat3::NFS3ERR_BADHANDLE | nfsstat3::NFS3ERR_STALE)
    ));
    // A record claiming 2 GiB is cut off before its memory is taken; the
    // server goes on serving.
    let mut raw = tokio::net::TcpStream::connect(s.nfs).await.unwrap();
    raw.write_all(&0x7fff_ffffu32.to_be_bytes()).await.unwrap();
    let mut buf = [0u8; 16];
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), raw.read(&mut buf)).await;
    assert!(
        matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
        "the connection stays open: {closed:?}"
    );
    let mut again = Mount::new(s.nfs, "/root/demo", LOCAL).await.unwrap();
    let h = again.walk("s3/deep/obj.bin").await.unwrap();
    assert_eq!(
        again.read_all(&h).await.unwrap(),
        body,
        "untouched by all that, still served"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_outlive_a_kill_and_committed_bytes_survive_it() {
    let mut s = setup("keep").await;
    let mut m = Mount::new(s.nfs, "/root/keep", LOCAL).await.unwrap();
    let root = m.root.clone();
    let dir = m.mkdir(&root, "dir").await.unwrap();
    // LMCache's fs:// layout: a directory per model, one file per chunk,
    // written to `.tmp` and renamed; names far longer than a handle holds.
    let model = "vllm@meta-llama_Llama-3.1-8B-Instruct@1@0@bfloat16";
    let chunks = m.mkdir(&dir, model).await.unwrap();
    let mut lm = Vec::new();
    for i in 0..5u64 {
        let name = format!("{model}@{:064x}.pt", i.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let tmp = m.create(&chunks, &format!("{name}.tmp")).await.unwrap();
        let data = random_bytes(256 << 10, 100 + i);
        m.write_all(&tmp, 0, &data).await.unwrap();
        m.rename(&chunks, &format!("{name}.tmp"), &chunks, &name)
            .await
            .unwrap();
        let h = m.lookup(&chunks, &name).await.unwrap();
        assert_eq!(
            m.lookup(&chunks, &format!("{name}.tmp")).await,
            Err(nfsstat3::NFS3ERR_NOENT)
        );
        lm.push((name, h, data));
    }
    let f = m.create(&dir, "log").await.unwrap();
    let first = random_bytes(3 << 20, 21);
    let verf = m.write_all(&f, 0, &first).await.unwrap();
    // An unstable write with no COMMIT: the server may lose it, and says so by
    // its verifier.
    let (_, how, _) = m
        .write(
            &f,
            first.len() as u64,
            &random_bytes(1 << 20, 22),
            stable_how::UNSTABLE,
        )
        .await
        .unwrap();
    assert_eq!(how, stable_how::UNSTABLE);
    s.node.kill_mgmtd();
    s.node.start_mgmtd();

    // The same handles, on a new connection, after the restart.
    let mut m = Mount::new(s.nfs, "/root/keep", LOCAL).await.unwrap();
    assert_eq!(m.root, root, "the export's handle is the same");
    let a = m.getattr(&f).await.unwrap();
    assert!(
        a.size == first.len() as u64 || a.size == (4 << 20),
        "size {}",
        a.size
    );
    let again = m.commit(&f).await.unwrap();
    assert_ne!(
        again, verf,
        "a new verifier: the client resends what it had not committed"
    );
    let got = m.read_all(&f).await.unwrap();
    assert_eq!(
        md5_hex(&got[..first.len()]),
        md5_hex(&first),
        "every committed byte is there"
    );
    let mut names = m.names(&dir, 4096).await.unwrap();
    names.sort();
    assert_eq!(names, ["log", model]);
    // Handles of long paths hold only their beginning: found again after the
    // restart by listing, the bytes the same over NFS and S3.
    for (name, h, data) in &lm {
        assert_eq!(&m.read_all(h).await.unwrap(), data, "{name} over NFS");
        assert_eq!(
            &get(&s.node, "keep", &format!("dir/{model}/{name}")).await,
            data,
            "over S3"
        );
    }
    assert_eq!(
        get(&s.node, "keep", "dir/log").await[..first.len()],
        first[..]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_are_sealed_by_tenant_and_network() {
    let s = setup("open").await;
    let (node, api) = (&s.node, &s.api);
    // Another tenant's bucket, exported to it; a root bucket not exported; one
    // exported only to a network this client is not in.
    api.tenant_create("acme", true).await.unwrap();
    api.user_create("acme", "alice", "admin").await.unwrap();
    let k = api.key_create("acme", "alice").await.unwrap();
    let alice = node.client_with(&k.access_key, &k.secret_key);
    alice.create_bucket().bucket("data").send().await.unwrap();
    alice
        .put_object()
        .bucket("data")
        .key("secret.txt")
        .body(b"acme only".to_vec().into())
        .send()
        .await
        .unwrap();
    node.client()
        .create_bucket()
        .bucket("hidden")
        .send()
        .await
        .unwrap();
    node.client()
        .create_bucket()
        .bucket("far")
        .send()
        .await
        .unwrap();
    export(api, "root", "far", &["10.0.0.0/8"], false).await;
    export(api, "acme", "data", &["127.0.0.2/32"], true).await;

    // 127.0.0.1 reaches its export only.
    assert!(Mount::new(s.nfs, "/root/open", LOCAL).await.is_ok());
    for path in ["/root/hidden", "/root/far", "/acme/data", "/", "/root"] {
        assert!(
            Mount::new(s.nfs, path, LOCAL).await.is_err(),
            "{path} mounted from 127.0.0.1"
        );
    }
    // 127.0.0.2 reaches acme's, read-only, and sees acme's bytes.
    let other: IpAddr = "127.0.0.2".parse().unwrap();
    let mut m = Mount::new(s.nfs, "/acme/data", other).await.unwrap();
    let f = m.walk("secret.txt").await.unwrap();
    assert_eq!(m.read_all(&f).await.unwrap(), b"acme only");
    assert_eq!(
        m.write(&f, 0, b"no", stable_how::FILE_SYNC).await,
        Err(nfsstat3::NFS3ERR_ROFS)
    );
    let root = m.root.clone();
    assert_eq!(m.create(&root, "new").await, Err(nfsstat3::NFS3ERR_ROFS));
    assert!(
        Mount::new(s.nfs, "/root/open", other).await.is_err(),
        "not its network"
    );
    // A handle of acme's export, carried to 127.0.0.1's connection: refused.
    let mut mine = Mount::new(s.nfs, "/root/open", LOCAL).await.unwrap();
    assert_eq!(mine.getattr(&f).await.err(), Some(nfsstat3::NFS3ERR_ACCES));
    // A client no export allows is not served at all.
    let nobody: IpAddr = "127.0.0.9".parse().unwrap();
    let e = Mount::new(s.nfs, "/root/open", nobody)
        .await
        .expect_err("no export");
    println!("a client no export allows: {e}");

    // The root key's buckets take quotas through the admin API too.
    let q = QuotaSpec {
        max_bytes: Some(1 << 30),
        ..Default::default()
    };
    let b = api.bucket_quota("root", "open", q).await.unwrap();
    assert_eq!(b.quota.max_bytes, Some(1 << 30));
    assert!(api
        .tenant_buckets("root")
        .await
        .unwrap()
        .iter()
        .any(|b| b.name == "open"));

    // A bucket's quota holds over NFS as over S3.
    alice.create_bucket().bucket("small").send().await.unwrap();
    let q = QuotaSpec {
        max_bytes: Some(1 << 20),
        ..Default::default()
    };
    api.bucket_quota("acme", "small", q).await.unwrap();
    export(api, "acme", "small", &["127.0.0.1/32"], false).await;
    let mut small = Mount::new(s.nfs, "/acme/small", LOCAL).await.unwrap();
    let root = small.root.clone();
    // `df` on the mount shows the quota, less what the bucket holds.
    alice
        .put_object()
        .bucket("small")
        .key("seed")
        .body(vec![7u8; 100_000].into())
        .send()
        .await
        .unwrap();
    let st = small.fsstat().await.unwrap();
    assert_eq!(
        (st.tbytes, st.fbytes, st.abytes),
        (1 << 20, (1 << 20) - 100_000, (1 << 20) - 100_000),
        "FSSTAT under a 1 MiB quota with 100 000 bytes held"
    );
    alice
        .delete_object()
        .bucket("small")
        .key("seed")
        .send()
        .await
        .unwrap();
    let f = small.create(&root, "big").await.unwrap();
    // Another client's read makes the flush fail, and must not take the
    // failure away from the writer's COMMIT.
    for i in 0..2u64 {
        small
            .write(
                &f,
                i << 20,
                &random_bytes(1 << 20, 31 + i),
                stable_how::UNSTABLE,
            )
            .await
            .unwrap();
    }
    let mut reader = Mount::new(s.nfs, "/acme/small", LOCAL).await.unwrap();
    let seen = reader.walk("big").await.unwrap();
    assert_eq!(
        reader.read_all(&seen).await.unwrap(),
        b"",
        "the reader sees what is stored"
    );
    assert_eq!(small.commit(&f).await, Err(nfsstat3::NFS3ERR_DQUOT));
    let r = small.write_all(&f, 0, &random_bytes(2 << 20, 31)).await;
    assert_eq!(r, Err(nfsstat3::NFS3ERR_DQUOT));
    // The refused bytes are dropped, not stored once room is made.
    api.bucket_quota("acme", "small", QuotaSpec::default())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(7)).await;
    assert_eq!(small.getattr(&f).await.unwrap().size, 0);
    small.commit(&f).await.unwrap();
    let kept = alice
        .get_object()
        .bucket("small")
        .key("big")
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.content_length(),
        Some(0),
        "nothing past the quota was kept"
    );
}

/// A call resent with its xid after its reply was lost (the connection reset,
/// the client back from the same port) hears the first answer and is not done
/// twice: REMOVE says OK again, not NOENT, and RENAME does not fail for its
/// source being gone. A new xid, or the xid with another call, is done anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_call_hears_its_first_answer() {
    const REMOVE: u32 = 12;
    const RENAME: u32 = 14;
    const LINK: u32 = 15;
    let s = setup("resend").await;
    let mut m = Mount::new(s.nfs, "/root/resend", LOCAL).await.unwrap();
    let root = m.root.clone();
    for n in ["a", "b", "d"] {
        let h = m.create(&root, n).await.unwrap();
        m.write_all(&h, 0, n.as_bytes()).await.unwrap();
        m.commit(&h).await.unwrap();
    }
    let remove = REMOVE3args {
        object: at(&root, "a"),
    };
    let rename = RENAME3args {
        from: at(&root, "b"),
        to: at(&root, "c"),
    };
    let connect = |port: u16| async move {
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_reuseaddr(true).unwrap();
        sock.bind(SocketAddr::new(LOCAL, port)).unwrap();
        sock.connect(s.nfs).await.unwrap()
    };
    let mut c = connect(0).await;
    let port = c.local_addr().unwrap().port();
    let removed = call_with_xid(&mut c, 7001, REMOVE, &remove).await.unwrap();
    let renamed = call_with_xid(&mut c, 7002, RENAME, &rename).await.unwrap();
    assert_eq!(reply_status(&removed), 0, "REMOVE a");
    assert_eq!(reply_status(&renamed), 0, "RENAME b c");
    // Reset (no TIME_WAIT holds the port), as a connection dropped under a client.
    c.set_zero_linger().unwrap();
    drop(c);

    let mut c = connect(port).await;
    let again = call_with_xid(&mut c, 7001, REMOVE, &remove).await.unwrap();
    assert_eq!(again, removed, "the resent REMOVE hears its first answer");
    let again = call_with_xid(&mut c, 7002, RENAME, &rename).await.unwrap();
    assert_eq!(again, renamed, "the resent RENAME hears its first answer");
    let anew = call_with_xid(&mut c, 7003, REMOVE, &remove).await.unwrap();
    assert_eq!(
        reply_status(&anew),
        nfsstat3::NFS3ERR_NOENT as u32,
        "a new call"
    );
    let other = REMOVE3args {
        object: at(&root, "d"),
    };
    let r = call_with_xid(&mut c, 7001, REMOVE, &other).await.unwrap();
    assert_eq!(
        reply_status(&r),
        0,
        "the xid with another call is that call's"
    );
    assert_eq!(keys(&s.node, "resend", "").await, vec!["c".to_string()]);
    assert_eq!(get(&s.node, "resend", "c").await, b"b");
    // A hard link is refused as RFC 1813 says, not as a missing procedure.
    let c_fh = m.lookup(&root, "c").await.unwrap();
    let link = LINK3args {
        file: c_fh,
        link: at(&root, "c2"),
    };
    let r = call_with_xid(&mut c, 7004, LINK, &link).await.unwrap();
    assert_eq!(reply_status(&r), nfsstat3::NFS3ERR_NOTSUPP as u32, "LINK");
}
