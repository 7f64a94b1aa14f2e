//! The peer listener: mutual TLS with certificates from the cluster CA, limited to
//! the members named in the TLS directory's `peers` file, on the real binary.

use bytes::Bytes;
use cairn_chunkproto::{ChunkClient, Request};
use cairn_pki::ca::{self, NodeKey, NodeNames};
use cairn_pki::tls::NodeTls;
use cairn_pki::Secrets;
use cairn_types::ChunkId;
use std::cell::Cell;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A cluster CA, and certificates it signs for nodes at 127.0.0.1 (as
/// `cluster init` and joins issue them).
struct Ca {
    cluster: &'static str,
    secrets: Secrets,
    pem: String,
    next_node: Cell<u64>,
}

impl Ca {
    fn new(cluster: &'static str) -> Ca {
        let secrets = ca::new_ca(cluster).unwrap();
        Ca {
            cluster,
            pem: secrets.ca_cert_pem.clone(),
            secrets,
            next_node: Cell::new(1),
        }
    }

    /// (certificate PEM, key PEM) of the next node.
    fn node(&self) -> (String, String) {
        let id = self.next_node.replace(self.next_node.get() + 1);
        let key = NodeKey::generate().unwrap();
        let names = NodeNames {
            id,
            addrs: &["127.0.0.1:0"],
        };
        let cert = ca::issue(&self.secrets, self.cluster, names, &key.public_hex()).unwrap();
        (cert, key.private_pem())
    }
}

/// SHA-256 (hex) of a PEM certificate, as the `peers` file lists it.
fn fingerprint(cert_pem: &str) -> String {
    ca::fingerprint(cert_pem).unwrap()
}

fn client(ca: &str, (cert, key): &(String, String), addr: &str) -> ChunkClient {
    let tls = NodeTls::from_pem(ca, cert, key).unwrap();
    ChunkClient::with_tls(
        addr,
        1,
        Duration::from_secs(5),
        tls.client_config().unwrap(),
    )
}

fn write_peers(dir: &Path, fps: &[&str]) {
    let tmp = dir.join("peers.tmp");
    std::fs::write(&tmp, fps.join("\n") + "\n").unwrap();
    std::fs::rename(tmp, dir.join("peers")).unwrap();
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn put(id: u128) -> Request {
    Request::Put {
        drive: 0,
        id: ChunkId::from_u128(id),
        tenant: 1,
        key_id: 1,
        payload: Bytes::from(vec![7u8; 4096]),
        durable: true,
    }
}

async fn works(c: &ChunkClient, id: u128) -> bool {
    matches!(c.call(vec![put(id)]).await.as_deref(), Ok([Ok(_)]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_need_a_current_members_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let tls_dir = dir.path().join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    let ca = Ca::new("c1");
    let (server, a, b) = (ca.node(), ca.node(), ca.node());
    std::fs::write(tls_dir.join("ca.pem"), &ca.pem).unwrap();
    std::fs::write(tls_dir.join("node.key"), &server.1).unwrap();
    std::fs::write(tls_dir.join("node.pem"), &server.0).unwrap();
    let (fa, fb) = (fingerprint(&a.0), fingerprint(&b.0));
    write_peers(&tls_dir, &[&fa]);

    let peer_addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_datapathd"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--segment-size",
            "1M",
            "--peer-listen",
        ])
        .arg(&peer_addr)
        .arg("--local-key")
        .arg(dir.path().join("chunk.key"))
        .arg("--tls-dir")
        .arg(&tls_dir)
        .arg("--drive")
        .arg(format!("{}:64M", dir.path().join("d0").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _d = Daemon(child);

    // A listed member gets in (once the daemon has loaded its certificate).
    let member = client(&ca.pem, &a, &peer_addr);
    let t = Instant::now();
    while !works(&member, 1).await {
        assert!(t.elapsed() < Duration::from_secs(20), "member never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The same CA's certificate, not listed: refused.
    assert!(!works(&client(&ca.pem, &b, &peer_addr), 2).await);
    // Another CA's certificate: refused in the handshake.
    let other = Ca::new("c2");
    assert!(!works(&client(&ca.pem, &other.node(), &peer_addr), 3).await);
    // Plain TCP speaking the chunk protocol, even with the node's own local key:
    // refused (the peer port takes mutual TLS only).
    let key = cairn_chunkproto::auth::LocalKey::load(&dir.path().join("chunk.key")).unwrap();
    let plain = ChunkClient::local(peer_addr.clone(), 1, Duration::from_secs(5), key);
    assert!(!works(&plain, 4).await);

    // Membership changes: b listed, a removed. a's open connection is dropped and
    // it cannot reconnect; b now gets in.
    write_peers(&tls_dir, &[&fb]);
    let t = Instant::now();
    while works(&member, 5).await {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "a removed member kept its access"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!works(&client(&ca.pem, &a, &peer_addr), 6).await);
    assert!(works(&client(&ca.pem, &b, &peer_addr), 7).await);
}
