//! The node-local credential: what a client of a datapathd's local listener must
//! prove before a byte of the chunk protocol is read.
//!
//! The node's mgmtd and datapathd share a 32-byte random key in a file only root
//! can read ([`LocalKey::load_or_create`]). On every connection both sides prove
//! they hold it, without sending it, by a mutual challenge–response:
//!
//! ```text
//! client -> server   "CAIRNAU1" | client nonce (32)
//! server -> client   "CAIRNAU1" | server nonce (32) | HMAC-SHA256(key, "server" | cn | sn)
//! client -> server   HMAC-SHA256(key, "client" | cn | sn)
//! server -> client   1 byte: 1 accepted, 0 refused (then the connection closes)
//! ```
//!
//! The client checks the server's proof too, so mgmtd never takes chunks from a
//! process that merely bound the port first. The label in each MAC keeps one
//! side's proof from being replayed as the other's; fresh nonces on both sides keep
//! a recorded exchange from being replayed at all. Comparisons are constant-time
//! (`ring::hmac::verify`). *Why not TLS here:* the local listener is loopback, and
//! a pre-shared key needs no certificate authority on a single node; peers between
//! nodes keep mutual TLS.

use crate::ProtoError;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Protocol magic and version of the handshake.
pub const AUTH_MAGIC: [u8; 8] = *b"CAIRNAU1";
/// Length of the key and of each nonce.
pub const KEY_LEN: usize = 32;
/// How long either side waits for the other's half of the handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;

/// The node-local chunk key.
#[derive(Clone)]
pub struct LocalKey(hmac::Key);

impl std::fmt::Debug for LocalKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalKey(..)")
    }
}

impl LocalKey {
    /// A key from its raw bytes.
    pub fn from_bytes(raw: &[u8; KEY_LEN]) -> LocalKey {
        LocalKey(hmac::Key::new(hmac::HMAC_SHA256, raw))
    }

    /// Reads the key file: exactly 32 bytes, in a regular file that neither its
    /// group nor others may read or write (a key others can read is no credential).
    pub fn load(path: &Path) -> Result<LocalKey, ProtoError> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path)?;
        if !meta.is_file() {
            return Err(ProtoError::Auth(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(ProtoError::Auth(format!(
                "{} is open to group or others (mode {mode:o}): chmod 600 it",
                path.display()
            )));
        }
        let raw = std::fs::read(path)?;
        let raw: [u8; KEY_LEN] = raw.as_slice().try_into().map_err(|_| {
            ProtoError::Auth(format!(
                "{} holds {} bytes, not a {KEY_LEN}-byte chunk key",
                path.display(),
                raw.len()
            ))
        })?;
        Ok(LocalKey::from_bytes(&raw))
    }

    /// Reads the key file, or creates it with a fresh random key (mode 0600,
    /// complete or absent, never partial). Two processes racing to create it
    /// agree: the second finds the first's key in place and reads that one.
    pub fn load_or_create(path: &Path) -> Result<LocalKey, ProtoError> {
        match LocalKey::load(path) {
            Ok(k) => return Ok(k),
            Err(ProtoError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut raw = [0u8; KEY_LEN];
        SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| ProtoError::Auth("no randomness for a chunk key".into()))?;
        // First writer wins: a process racing this one gets its key instead.
        if cairn_sysutil::create_once(path, &raw, Some(0o600))? {
            Ok(LocalKey::from_bytes(&raw))
        } else {
            LocalKey::load(path)
        }
    }

    fn proof(&self, label: &[u8], cn: &[u8], sn: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(label);
        ctx.update(cn);
        ctx.update(sn);
        ctx.sign()
    }

    fn verify(&self, label: &[u8], cn: &[u8], sn: &[u8], tag: &[u8]) -> bool {
        let mut msg = Vec::with_capacity(label.len() + 2 * KEY_LEN);
        msg.extend_from_slice(label);
        msg.extend_from_slice(cn);
        msg.extend_from_slice(sn);
        hmac::verify(&self.0, &msg, tag).is_ok()
    }
}

fn nonce() -> Result<[u8; KEY_LEN], ProtoError> {
    let mut n = [0u8; KEY_LEN];
    SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| ProtoError::Auth("no randomness for a nonce".into()))?;
    Ok(n)
}

async fn timed<T>(
    limit: Duration,
    f: impl std::future::Future<Output = Result<T, ProtoError>>,
) -> Result<T, ProtoError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| ProtoError::Auth("handshake timed out".into()))?
}

/// Reads exactly `buf.len()` bytes; an early end of stream is a refusal (or a
/// peer that does not speak the handshake), said as such.
async fn read_all<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    what: &str,
) -> Result<(), ProtoError> {
    match s.read_exact(buf).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(ProtoError::Auth(format!(
            "connection closed during the key handshake, before {what}"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The client's half: proves the key and checks the server's proof.
pub async fn client_handshake<S>(s: &mut S, key: &LocalKey) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    timed(HANDSHAKE_TIMEOUT, async {
        let cn = nonce()?;
        let mut hello = Vec::with_capacity(8 + KEY_LEN);
        hello.extend_from_slice(&AUTH_MAGIC);
        hello.extend_from_slice(&cn);
        s.write_all(&hello).await?;
        let mut reply = [0u8; 8 + 2 * KEY_LEN];
        read_all(
            s,
            &mut reply,
            "the server's proof (is it an older datapathd?)",
        )
        .await?;
        if reply[..8] != AUTH_MAGIC {
            return Err(ProtoError::Auth(
                "the chunk service does not speak the local-key handshake".into(),
            ));
        }
        let sn = &reply[8..8 + KEY_LEN];
        if !key.verify(b"server", &cn, sn, &reply[8 + KEY_LEN..]) {
            return Err(ProtoError::Auth(
                "the chunk service does not hold this node's chunk key".into(),
            ));
        }
        s.write_all(key.proof(b"client", &cn, sn).as_ref()).await?;
        let mut verdict = [0u8; 1];
        read_all(s, &mut verdict, "the verdict").await?;
        if verdict[0] != ACCEPTED {
            return Err(ProtoError::Auth("the chunk service refused our key".into()));
        }
        Ok(())
    })
    .await
}

/// The server's half: checks the client's proof; answers with the verdict.
pub async fn server_handshake<S>(s: &mut S, key: &LocalKey) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    server_handshake_within(s, key, HANDSHAKE_TIMEOUT).await
}

/// [`server_handshake`], given up after `limit`.
pub async fn server_handshake_within<S>(
    s: &mut S,
    key: &LocalKey,
    limit: Duration,
) -> Result<(), ProtoError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    timed(limit, async {
        let mut hello = [0u8; 8 + KEY_LEN];
        read_all(s, &mut hello, "the client's hello").await?;
        if hello[..8] != AUTH_MAGIC {
            return Err(ProtoError::Auth(
                "the client did not start the local-key handshake".into(),
            ));
        }
        let cn = &hello[8..];
        let sn = nonce()?;
        let mut reply = Vec::with_capacity(8 + 2 * KEY_LEN);
        reply.extend_from_slice(&AUTH_MAGIC);
        reply.extend_from_slice(&sn);
        reply.extend_from_slice(key.proof(b"server", cn, &sn).as_ref());
        s.write_all(&reply).await?;
        let mut proof = [0u8; KEY_LEN];
        read_all(s, &mut proof, "the client's proof").await?;
        if !key.verify(b"client", cn, &sn, &proof) {
            let _ = s.write_all(&[REFUSED]).await;
            return Err(ProtoError::Auth(
                "the client does not hold the chunk key".into(),
            ));
        }
        s.write_all(&[ACCEPTED]).await?;
        Ok(())
    })
    .await
}

/// For the fuzz targets and their stable stand-in: runs each half of the
/// handshake against `data` as everything the other side sends. Neither may
/// panic, and neither may accept: no input can know the fresh nonce of this run,
/// so a proof that passes would be a forgery.
#[doc(hidden)]
pub fn fuzz_handshake(data: &[u8]) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return;
    };
    let key = LocalKey::from_bytes(&[0x5a; KEY_LEN]);
    rt.block_on(async {
        let mut s = tokio::io::join(data, tokio::io::sink());
        let r = server_handshake_within(&mut s, &key, Duration::from_secs(1)).await;
        assert!(r.is_err(), "the server accepted bytes that hold no key");
        let mut s = tokio::io::join(data, tokio::io::sink());
        let r = timed(Duration::from_secs(1), client_handshake(&mut s, &key)).await;
        assert!(r.is_err(), "the client accepted a server that holds no key");
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn same_key_passes_wrong_key_is_refused_on_both_sides() {
        let k1 = LocalKey::from_bytes(&[7; KEY_LEN]);
        let k2 = LocalKey::from_bytes(&[8; KEY_LEN]);
        let (mut a, mut b) = tokio::io::duplex(1024);
        let (c, s) = tokio::join!(client_handshake(&mut a, &k1), server_handshake(&mut b, &k1));
        assert!(c.is_ok() && s.is_ok());

        // A client with the wrong key: the server's proof fails at the client.
        let (a, mut b) = tokio::io::duplex(1024);
        let (c, _s) = tokio::join!(
            async move {
                let mut a = a;
                client_handshake(&mut a, &k2).await
            },
            server_handshake(&mut b, &k1)
        );
        assert!(matches!(c, Err(ProtoError::Auth(_))), "{c:?}");

        // A client that skips the handshake and sends a frame is refused.
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0u8; 40]).await.unwrap();
        let s = server_handshake(&mut b, &k1).await;
        assert!(matches!(s, Err(ProtoError::Auth(_))), "{s:?}");
    }

    #[test]
    fn key_file_is_created_once_private_and_reread() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("chunk.key");
        let a = LocalKey::load_or_create(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = LocalKey::load_or_create(&p).unwrap();
        let tag = |k: &LocalKey| k.proof(b"x", b"y", b"z").as_ref().to_vec();
        assert_eq!(tag(&a), tag(&b));
        std::fs::write(&p, b"short").unwrap();
        assert!(matches!(LocalKey::load(&p), Err(ProtoError::Auth(_))));
        // A key others can read is refused, whatever it holds.
        std::fs::write(&p, [5u8; KEY_LEN]).unwrap();
        assert!(LocalKey::load(&p).is_ok());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = LocalKey::load(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        assert!(LocalKey::load_or_create(&p).is_err());
    }
}
