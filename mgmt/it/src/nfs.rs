//! A userspace NFSv3 client for the tests (`nfs3_client`, a separate
//! implementation from the server's): mount an export from a chosen source
//! address, and the calls the tests make, each answering the NFS status.

use nfs3_client::nfs3_types::nfs3::{
    cookieverf3, createhow3, diropargs3, fattr3, filename3, nfs_fh3, nfsstat3, sattr3, stable_how,
    COMMIT3args, CREATE3args, FSSTAT3args, FSSTAT3resok, GETATTR3args, LOOKUP3args, MKDIR3args,
    Nfs3Option, Nfs3Result, READ3args, READDIRPLUS3args, REMOVE3args, RENAME3args, RMDIR3args,
    SETATTR3args, WRITE3args,
};
use nfs3_client::nfs3_types::rpc::{
    call_body, fragment_header, msg_body, opaque_auth, rpc_msg, RPC_VERSION_2,
};
use nfs3_client::nfs3_types::xdr_codec::{Opaque, Pack};
use nfs3_client::tokio::TokioIo;
use nfs3_client::{Nfs3Connection, Nfs3ConnectionBuilder};
use std::net::{IpAddr, SocketAddr};
use tokio::net::{TcpSocket, TcpStream};

/// Connects from a chosen local address (a client network an export may or
/// may not allow).
#[derive(Debug)]
pub struct Source(pub IpAddr);

impl nfs3_client::net::Connector for Source {
    type Connection = TokioIo<TcpStream>;

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<Self::Connection> {
        let s = TcpSocket::new_v4()?;
        s.bind(SocketAddr::new(self.0, 0))?;
        Ok(TokioIo::new(s.connect(addr).await?))
    }

    async fn connect_with_port(
        &self,
        addr: SocketAddr,
        port: u16,
    ) -> std::io::Result<Self::Connection> {
        let s = TcpSocket::new_v4()?;
        s.bind(SocketAddr::new(self.0, port))?;
        Ok(TokioIo::new(s.connect(addr).await?))
    }
}

pub type Res<T> = Result<T, nfsstat3>;

fn ok<T, E>(r: Nfs3Result<T, E>) -> Res<T> {
    match r {
        Nfs3Result::Ok(v) => Ok(v),
        Nfs3Result::Err((s, _)) => Err(s),
    }
}

/// A mounted export.
pub struct Mount {
    pub conn: Nfs3Connection<TokioIo<TcpStream>>,
    pub root: nfs_fh3,
}

fn name(n: &str) -> filename3<'static> {
    filename3(Opaque::owned(n.as_bytes().to_vec()))
}

/// `n` in the directory `dir`, as calls name it.
pub fn at(dir: &nfs_fh3, n: &str) -> diropargs3<'static> {
    diropargs3 {
        dir: dir.clone(),
        name: name(n),
    }
}

fn handle(h: Nfs3Option<nfs_fh3>) -> Res<nfs_fh3> {
    match h {
        Nfs3Option::Some(h) => Ok(h),
        Nfs3Option::None => Err(nfsstat3::NFS3ERR_SERVERFAULT),
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Mount {
    /// Mounts `path` (`/TENANT/BUCKET`) of the server at `server` from `from`.
    pub async fn new(server: SocketAddr, path: &str, from: IpAddr) -> Result<Mount, String> {
        let mount = Nfs3ConnectionBuilder::new(Source(from), server.ip().to_string(), path)
            .connect_from_privileged_port(false)
            .mount_port(server.port())
            .nfs3_port(server.port())
            .mount();
        let conn = tokio::time::timeout(std::time::Duration::from_secs(20), mount)
            .await
            .map_err(|_| format!("mount {path} from {from}: no answer in 20 s"))?
            .map_err(|e| format!("mount {path} from {from}: {e}"))?;
        let root = conn.root_nfs_fh3();
        Ok(Mount { conn, root })
    }

    pub async fn lookup(&mut self, dir: &nfs_fh3, n: &str) -> Res<nfs_fh3> {
        let r = self
            .conn
            .lookup(&LOOKUP3args { what: at(dir, n) })
            .await
            .expect("rpc");
        ok(r).map(|r| r.object)
    }

    /// The handle of `path` (`a/b/c`) from the root.
    pub async fn walk(&mut self, path: &str) -> Res<nfs_fh3> {
        let mut h = self.root.clone();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            h = self.lookup(&h, part).await?;
        }
        Ok(h)
    }

    pub async fn getattr(&mut self, h: &nfs_fh3) -> Res<fattr3> {
        let r = self
            .conn
            .getattr(&GETATTR3args { object: h.clone() })
            .await
            .expect("rpc");
        ok(r).map(|r| r.obj_attributes)
    }

    pub async fn setattr(&mut self, h: &nfs_fh3, set: sattr3) -> Res<()> {
        let args = SETATTR3args {
            object: h.clone(),
            new_attributes: set,
            guard: Nfs3Option::None,
        };
        ok(self.conn.setattr(&args).await.expect("rpc")).map(|_| ())
    }

    pub async fn mkdir(&mut self, dir: &nfs_fh3, n: &str) -> Res<nfs_fh3> {
        let args = MKDIR3args {
            where_: at(dir, n),
            attributes: sattr3::default(),
        };
        handle(ok(self.conn.mkdir(&args).await.expect("rpc"))?.obj)
    }

    pub async fn create(&mut self, dir: &nfs_fh3, n: &str) -> Res<nfs_fh3> {
        let args = CREATE3args {
            where_: at(dir, n),
            how: createhow3::UNCHECKED(sattr3::default()),
        };
        handle(ok(self.conn.create(&args).await.expect("rpc"))?.obj)
    }

    /// One WRITE: (bytes taken, how stable, the verifier).
    pub async fn write(
        &mut self,
        h: &nfs_fh3,
        offset: u64,
        data: &[u8],
        stable: stable_how,
    ) -> Res<(u32, stable_how, [u8; 8])> {
        let args = WRITE3args {
            file: h.clone(),
            offset,
            count: data.len() as u32,
            stable,
            data: Opaque::owned(data.to_vec()),
        };
        ok(self.conn.write(&args).await.expect("rpc")).map(|r| (r.count, r.committed, r.verf.0))
    }

    /// Writes `data` from `offset` in 1 MiB UNSTABLE writes (as kernel clients
    /// do), then COMMITs; the verifier of the commit.
    pub async fn write_all(&mut self, h: &nfs_fh3, offset: u64, data: &[u8]) -> Res<[u8; 8]> {
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            self.write(
                h,
                offset + (i as u64) * (1 << 20),
                chunk,
                stable_how::UNSTABLE,
            )
            .await?;
        }
        self.commit(h).await
    }

    pub async fn commit(&mut self, h: &nfs_fh3) -> Res<[u8; 8]> {
        let args = COMMIT3args {
            file: h.clone(),
            offset: 0,
            count: 0,
        };
        ok(self.conn.commit(&args).await.expect("rpc")).map(|r| r.verf.0)
    }

    pub async fn read_all(&mut self, h: &nfs_fh3) -> Res<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            let args = READ3args {
                file: h.clone(),
                offset: out.len() as u64,
                count: 1 << 20,
            };
            let r = ok(self.conn.read(&args).await.expect("rpc"))?;
            out.extend_from_slice(&r.data);
            if r.eof || r.data.is_empty() {
                return Ok(out);
            }
        }
    }

    /// Up to `count` bytes of `h` at `offset`.
    pub async fn read(&mut self, h: &nfs_fh3, offset: u64, count: u32) -> Res<Vec<u8>> {
        let args = READ3args {
            file: h.clone(),
            offset,
            count,
        };
        ok(self.conn.read(&args).await.expect("rpc")).map(|r| r.data.to_vec())
    }

    /// The names in `dir`, read in replies of at most `maxcount` bytes.
    pub async fn names(&mut self, dir: &nfs_fh3, maxcount: u32) -> Res<Vec<String>> {
        let (mut out, mut cookie, mut verf) = (Vec::new(), 0, cookieverf3::default());
        loop {
            let args = READDIRPLUS3args {
                dir: dir.clone(),
                cookie,
                cookieverf: verf,
                dircount: maxcount,
                maxcount,
            };
            let r = ok(self.conn.readdirplus(&args).await.expect("rpc"))?;
            verf = r.cookieverf;
            for e in &r.reply.entries.0 {
                cookie = e.cookie;
                let n = String::from_utf8_lossy(&e.name.0).to_string();
                if n != "." && n != ".." {
                    out.push(n);
                }
            }
            if r.reply.eof {
                return Ok(out);
            }
        }
    }

    pub async fn rename(&mut self, from: &nfs_fh3, a: &str, to: &nfs_fh3, b: &str) -> Res<()> {
        let args = RENAME3args {
            from: at(from, a),
            to: at(to, b),
        };
        ok(self.conn.rename(&args).await.expect("rpc")).map(|_| ())
    }

    pub async fn remove(&mut self, dir: &nfs_fh3, n: &str) -> Res<()> {
        ok(self
            .conn
            .remove(&REMOVE3args { object: at(dir, n) })
            .await
            .expect("rpc"))
        .map(|_| ())
    }

    /// FSSTAT of the export (the root's handle): total and free bytes, files.
    pub async fn fsstat(&mut self) -> Res<FSSTAT3resok> {
        let args = FSSTAT3args {
            fsroot: self.root.clone(),
        };
        ok(self.conn.fsstat(&args).await.expect("rpc"))
    }

    pub async fn rmdir(&mut self, dir: &nfs_fh3, n: &str) -> Res<()> {
        ok(self
            .conn
            .rmdir(&RMDIR3args { object: at(dir, n) })
            .await
            .expect("rpc"))
        .map(|_| ())
    }
}

/// A handle from raw bytes (a forged or stale one).
pub fn raw_handle(bytes: Vec<u8>) -> nfs_fh3 {
    nfs_fh3 {
        data: Opaque::owned(bytes),
    }
}

/// Sends one NFS call with a chosen xid as raw RPC on `stream` and reads the
/// reply record (a client resending a call whose reply it lost keeps its xid).
pub async fn call_with_xid<A: Pack>(
    stream: &mut TcpStream,
    xid: u32,
    procedure: u32,
    args: &A,
) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    send_call(stream, xid, procedure, args).await?;
    let read = async {
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await?;
        let len = u32::from_be_bytes(head) & 0x7fff_ffff;
        let mut reply = vec![0u8; len as usize];
        stream.read_exact(&mut reply).await?;
        Ok(reply)
    };
    // A server that drops the call never answers it.
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in 10 s"))?
}

/// The NFS status of an accepted, successful RPC reply (the word after its
/// 24-byte header with an empty verifier).
pub fn reply_status(reply: &[u8]) -> u32 {
    u32::from_be_bytes(reply[24..28].try_into().expect("a reply with a status"))
}

/// Sends one NFS call with a chosen xid as raw RPC on `stream`, reading nothing.
pub async fn send_call<A: Pack, W: tokio::io::AsyncWrite + Unpin>(
    stream: &mut W,
    xid: u32,
    procedure: u32,
    args: &A,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let msg = rpc_msg {
        xid,
        body: msg_body::CALL(call_body {
            rpcvers: RPC_VERSION_2,
            prog: nfs3_client::nfs3_types::nfs3::PROGRAM,
            vers: nfs3_client::nfs3_types::nfs3::VERSION,
            proc: procedure,
            cred: opaque_auth::default(),
            verf: opaque_auth::default(),
        }),
    };
    let mut body = Vec::new();
    msg.pack(&mut body).expect("packs into memory");
    args.pack(&mut body).expect("packs into memory");
    let mut record = Vec::new();
    fragment_header::new(body.len() as u32, true)
        .pack(&mut record)
        .expect("packs into memory");
    record.extend_from_slice(&body);
    stream.write_all(&record).await
}
