//! The commands: one closed `match` on the command name, so the surface served is
//! visible in one place ([`Session::run`]).

use crate::expiry::{self, expired, expiry};
use crate::pools::{Pool, Which};
use crate::reply::{arity, array, bulk, error, int, nil, ok};
use crate::shared::Shared;
use crate::write::Expiry;
use crate::{RespConfig, RespError};
use bytes::Bytes;
use cairn_meta::{MetaError, ObjectRecord, Precondition};
use cairn_objects::{ObjectError, ObjectStore};
use cairn_qos::Way;
use futures::StreamExt;
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};

/// The object's user metadata entry that holds a key's expiry (Unix ms).
/// How long a wrong password waits for its answer: guessing is slowed, and the
/// wait does not tell an unknown user from a wrong secret.
const WRONGPASS_DELAY: std::time::Duration = std::time::Duration::from_millis(200);

/// What the connection does after a command.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Close,
}

/// One connection's state: who it is authenticated as.
pub struct Session {
    pub(crate) store: Arc<ObjectStore>,
    cfg: Arc<RespConfig>,
    pub(crate) shared: Arc<Shared>,
    tenant: Option<u64>,
    /// The keyspace commands work in: the tenant's default, or a KV pool.
    pub(crate) pool: Pool,
    /// The access key the session authenticated with: checked again before
    /// every command, so a key revoked, or a user or tenant disabled or deleted,
    /// stops an open session at its next command.
    access_key: Option<String>,
    /// The authenticated user may only read (role `read-only`).
    read_only: bool,
}

/// Keys looked up at once by a many-key command (MGET, EXISTS, CAIRN.PREFIXLEN).
const LOOKUP_BATCH: usize = 1024;

/// The commands that change data: refused to read-only users.
const WRITES: &[&str] = &[
    "SET",
    "MSET",
    "DEL",
    "UNLINK",
    "EXPIRE",
    "PEXPIRE",
    "EXPIREAT",
    "PEXPIREAT",
    "PERSIST",
    "CAIRN.PIN",
    "CAIRN.UNPIN",
];

impl Session {
    pub fn new(store: Arc<ObjectStore>, cfg: Arc<RespConfig>, shared: Arc<Shared>) -> Session {
        Session {
            store,
            cfg,
            shared,
            tenant: None,
            pool: Pool::default_for(0),
            access_key: None,
            read_only: false,
        }
    }

    pub(crate) fn cfg(&self) -> &RespConfig {
        &self.cfg
    }

    /// Runs one command and writes its reply. An error returned means the
    /// connection cannot go on (the socket failed, or a value broke off mid-reply);
    /// a command's own failure is answered with `-ERR` and the connection stays.
    pub async fn run<W: AsyncWrite + Unpin>(
        &mut self,
        args: &[Bytes],
        w: &mut W,
    ) -> Result<Next, RespError> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let rest = &args[1..];
        let started = std::time::Instant::now();
        let done = self.dispatch(&name, rest, w).await;
        self.shared.stats.ran(&name, started.elapsed());
        match done {
            Ok(next) => Ok(next),
            Err(RespError::Objects(e)) => {
                error(w, &format!("ERR {e}")).await?;
                Ok(Next::Continue)
            }
            Err(RespError::BadKey(m)) => {
                error(w, &format!("ERR {m}")).await?;
                Ok(Next::Continue)
            }
            Err(e) => Err(e),
        }
    }

    async fn dispatch<W: AsyncWrite + Unpin>(
        &mut self,
        name: &str,
        a: &[Bytes],
        w: &mut W,
    ) -> Result<Next, RespError> {
        // Before AUTH only the handshake commands are answered.
        let tenant = match (self.tenant, name) {
            (_, "AUTH" | "HELLO" | "PING" | "QUIT") => self.tenant.unwrap_or(0),
            (Some(t), _) => t,
            (None, _) => {
                error(w, "NOAUTH Authentication required.").await?;
                return Ok(Next::Continue);
            }
        };
        if !matches!(name, "AUTH" | "HELLO" | "PING" | "QUIT") && !self.still_authorized() {
            error(w, "NOAUTH Authentication required.").await?;
            return Ok(Next::Continue);
        }
        if self.read_only && WRITES.contains(&name) {
            // Redis's answer to a command its ACL denies.
            let lower = name.to_ascii_lowercase();
            error(
                w,
                &format!("NOPERM this user has no permissions to run the '{lower}' command"),
            )
            .await?;
            return Ok(Next::Continue);
        }
        if !matches!(name, "AUTH" | "HELLO" | "PING" | "QUIT") {
            let way = match WRITES.contains(&name) {
                true => Way::Write,
                false => Way::Read,
            };
            // Over the tenant's request rate: the command waits its turn, or
            // is refused when that is too far off (the connection stays).
            if let Err(e) = self.store.qos().request(tenant, way).await {
                error(w, &format!("ERR {e}")).await?;
                return Ok(Next::Continue);
            }
        }
        match name {
            "AUTH" => {
                let (user, pass) = match a {
                    [p] => (Bytes::from(self.cfg.default_user.clone()), p),
                    [u, p] => (u.clone(), p),
                    _ => return arity(w, "auth").await,
                };
                self.auth(&user, pass, w).await?;
            }
            "HELLO" => self.hello(a, w).await?,
            "PING" => match a {
                [] => w.write_all(b"+PONG\r\n").await.map_err(RespError::Io)?,
                [m] => bulk(w, m).await?,
                _ => return arity(w, "ping").await,
            },
            "QUIT" => {
                ok(w).await?;
                return Ok(Next::Close);
            }
            "CLIENT" => {
                let sub = a
                    .first()
                    .map(|s| String::from_utf8_lossy(s).to_ascii_uppercase());
                match sub.as_deref() {
                    Some("SETINFO" | "SETNAME") => ok(w).await?,
                    Some("GETNAME") => nil(w).await?,
                    Some("ID") => int(w, 1).await?,
                    _ => error(w, "ERR unknown subcommand for 'client'").await?,
                }
            }
            "SELECT" => match a {
                [db] => self.select(tenant, db, w).await?,
                _ => return arity(w, "select").await,
            },
            "CAIRN.PIN" | "CAIRN.UNPIN" => match a {
                [k] => self.pin(tenant, k, name == "CAIRN.PIN", w).await?,
                _ => return arity(w, &name.to_ascii_lowercase()).await,
            },
            // Enough for redis-cli, which asks for command docs to show hints.
            "COMMAND" => match a.first().map(|s| s.to_ascii_uppercase()).as_deref() {
                Some(b"COUNT") => int(w, 0).await?,
                _ => w.write_all(b"*0\r\n").await.map_err(RespError::Io)?,
            },
            "SET" => match a {
                [k, v, opts @ ..] => self.set(tenant, k, v.clone(), opts, w).await?,
                _ => return arity(w, "set").await,
            },
            "MSET" => {
                if a.is_empty() || !a.len().is_multiple_of(2) {
                    return arity(w, "mset").await;
                }
                // One object per key, committed in order; not atomic across keys.
                for kv in a.chunks(2) {
                    self.put(
                        tenant,
                        &kv[0],
                        kv[1].clone(),
                        Expiry::Default,
                        Precondition::default(),
                    )
                    .await?;
                }
                ok(w).await?;
            }
            "GET" => match a {
                [k] => {
                    let rec = self.lookup(tenant, std::slice::from_ref(k)).await?;
                    self.count_lookups(&rec);
                    self.value(tenant, rec.into_iter().next().flatten(), w)
                        .await?;
                }
                _ => return arity(w, "get").await,
            },
            // Many keys are looked up a batch at a time, so a million-key command
            // holds a batch of manifests, not a million.
            "MGET" => {
                if a.is_empty() {
                    return arity(w, "mget").await;
                }
                array(w, a.len()).await?;
                for batch in a.chunks(LOOKUP_BATCH) {
                    let recs = self.lookup(tenant, batch).await?;
                    self.count_lookups(&recs);
                    for rec in recs {
                        self.value(tenant, rec, w).await?;
                    }
                }
            }
            "EXISTS" => {
                if a.is_empty() {
                    return arity(w, "exists").await;
                }
                let mut n = 0;
                for batch in a.chunks(LOOKUP_BATCH) {
                    let recs = self.lookup(tenant, batch).await?;
                    n += recs.iter().filter(|r| r.is_some()).count() as i64;
                }
                int(w, n).await?;
            }
            // The Cairn extension for LMCache's batched_contains: how many leading
            // keys exist, in one round trip instead of one EXISTS per key.
            "CAIRN.PREFIXLEN" => {
                let mut n = 0;
                for batch in a.chunks(LOOKUP_BATCH) {
                    let recs = self.lookup(tenant, batch).await?;
                    let hit = recs.iter().take_while(|r| r.is_some()).count();
                    n += hit as i64;
                    if hit < batch.len() {
                        break;
                    }
                }
                int(w, n).await?;
            }
            "STRLEN" => match a {
                [k] => {
                    let rec = self.lookup(tenant, std::slice::from_ref(k)).await?;
                    let size = rec.into_iter().flatten().next().map_or(0, |r| r.size);
                    int(w, size as i64).await?;
                }
                _ => return arity(w, "strlen").await,
            },
            "TTL" | "PTTL" => match a {
                [k] => {
                    let rec = self.lookup(tenant, std::slice::from_ref(k)).await?;
                    let left = match rec.into_iter().flatten().next() {
                        None => -2,
                        Some(r) => match expiry(&r) {
                            None => -1,
                            Some(at) => {
                                let ms = (at - cairn_meta::now_ms()).max(0);
                                if name == "TTL" {
                                    (ms + 500) / 1000
                                } else {
                                    ms
                                }
                            }
                        },
                    };
                    int(w, left).await?;
                }
                _ => return arity(w, "ttl").await,
            },
            "DEL" | "UNLINK" => {
                if a.is_empty() {
                    return arity(w, "del").await;
                }
                let mut n = 0;
                let bucket = self.pool.bucket.clone();
                for (k, rec) in a.iter().zip(self.lookup_raw(tenant, a).await?) {
                    let Some(rec) = rec else { continue };
                    match self
                        .store
                        .delete_object(
                            tenant,
                            &bucket,
                            &self.pool.object_key(k)?,
                            Precondition::default(),
                        )
                        .await
                    {
                        Ok(()) => n += i64::from(expiry(&rec).is_none_or(|at| at > now())),
                        Err(ObjectError::Meta(MetaError::NoSuchKey(_))) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                int(w, n).await?;
            }
            "DBSIZE" => {
                if !a.is_empty() {
                    return arity(w, "dbsize").await;
                }
                let n = self.count_keys(tenant).await?.keys;
                int(w, n).await?;
            }
            "INFO" => self.info(tenant, a, w).await?,
            "SCAN" => match a {
                [cursor, opts @ ..] => self.scan(tenant, cursor, opts, w).await?,
                _ => return arity(w, "scan").await,
            },
            "TYPE" => match a {
                [k] => {
                    let rec = self.lookup(tenant, std::slice::from_ref(k)).await?;
                    let t = if rec.iter().any(Option::is_some) {
                        "+string\r\n"
                    } else {
                        "+none\r\n"
                    };
                    w.write_all(t.as_bytes()).await.map_err(RespError::Io)?;
                }
                _ => return arity(w, "type").await,
            },
            "EXPIRE" | "PEXPIRE" | "EXPIREAT" | "PEXPIREAT" => match a {
                [k, n, opts @ ..] => self.expire(tenant, name, k, n, opts, w).await?,
                _ => return arity(w, &name.to_ascii_lowercase()).await,
            },
            "PERSIST" => match a {
                [k] => self.persist(tenant, k, w).await?,
                _ => return arity(w, "persist").await,
            },
            _ => {
                let shown: String = name.chars().take(64).collect();
                error(w, &format!("ERR unknown command '{shown}'")).await?;
            }
        }
        Ok(Next::Continue)
    }

    async fn auth<W: AsyncWrite + Unpin>(
        &mut self,
        user: &[u8],
        pass: &[u8],
        w: &mut W,
    ) -> Result<bool, RespError> {
        // `AUTH key/pool secret` names a KV pool of the key's tenant (a client
        // that sends nothing but AUTH, as LMCache's resp://, chooses its pool so).
        let (user, pool) = match user.iter().position(|b| *b == b'/') {
            Some(i) => (&user[..i], Some(&user[i + 1..])),
            None => (user, None),
        };
        let found = match (std::str::from_utf8(user), std::str::from_utf8(pass)) {
            (Ok(u), Ok(p)) => self.cfg.keys.verify(u, p),
            _ => None,
        };
        match found {
            Some(id) => {
                let pool = match pool {
                    None => Pool::default_for(id.tenant),
                    Some(name) => {
                        let name = String::from_utf8_lossy(name);
                        match self.find_pool(id.tenant, Which::Name(&name)).await? {
                            Some(p) => p,
                            None => {
                                error(w, &format!("ERR no KV pool '{name}' for this key")).await?;
                                return Ok(false);
                            }
                        }
                    }
                };
                self.tenant = Some(id.tenant);
                self.enter(pool);
                self.access_key = std::str::from_utf8(user).ok().map(str::to_string);
                self.read_only = id.role == cairn_meta::Role::ReadOnly;
                ok(w).await?;
                Ok(true)
            }
            None => {
                tracing::info!("RESP AUTH refused");
                tokio::time::sleep(WRONGPASS_DELAY).await;
                error(
                    w,
                    "WRONGPASS invalid username-password pair or user is disabled.",
                )
                .await?;
                Ok(false)
            }
        }
    }

    /// Whether the session's key still stands for its tenant (not revoked, its
    /// user and tenant enabled and existing); if not, the session is logged out.
    /// The role is read again too.
    fn still_authorized(&mut self) -> bool {
        let Some(ak) = &self.access_key else {
            return true;
        };
        match self.cfg.keys.identity(ak) {
            Some(id) if !id.disabled && Some(id.tenant) == self.tenant => {
                self.read_only = id.role == cairn_meta::Role::ReadOnly;
                true
            }
            _ => {
                tracing::info!("RESP session's key no longer valid: logged out");
                self.tenant = None;
                self.access_key = None;
                false
            }
        }
    }

    /// `HELLO [2 [AUTH user pass] [SETNAME name]]`: RESP3 is refused, RESP2 is
    /// answered with the server's description as a flat array of pairs.
    async fn hello<W: AsyncWrite + Unpin>(
        &mut self,
        a: &[Bytes],
        w: &mut W,
    ) -> Result<(), RespError> {
        if let Some(v) = a.first() {
            if &v[..] != b"2" {
                return error(w, "NOPROTO unsupported protocol version").await;
            }
        }
        let mut i = 1;
        while i < a.len() {
            if a[i].eq_ignore_ascii_case(b"AUTH") && a.len() >= i + 3 {
                let tenant = self.tenant;
                let mut sink = Vec::new();
                if !self.auth(&a[i + 1], &a[i + 2], &mut sink).await? {
                    self.tenant = tenant;
                    return w.write_all(&sink).await.map_err(RespError::Io);
                }
                i += 3;
            } else if a[i].eq_ignore_ascii_case(b"SETNAME") && a.len() >= i + 2 {
                i += 2;
            } else {
                return error(w, "ERR syntax error").await;
            }
        }
        if self.tenant.is_none() {
            return error(w, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time").await;
        }
        let pairs: [(&str, &[u8]); 6] = [
            ("server", b"redis"),
            ("version", b"7.2.0"),
            ("mode", b"standalone"),
            ("role", b"master"),
            ("proto", b""),
            ("id", b""),
        ];
        array(w, 14).await?;
        for (k, v) in pairs {
            bulk(w, k.as_bytes()).await?;
            match k {
                "proto" => int(w, 2).await?,
                "id" => int(w, 1).await?,
                _ => bulk(w, v).await?,
            }
        }
        bulk(w, b"modules").await?;
        array(w, 0).await
    }

    fn count_lookups(&self, recs: &[Option<ObjectRecord>]) {
        let hits = recs.iter().filter(|r| r.is_some()).count() as u64;
        self.shared.stats.hits.inc_by(hits);
        self.shared.stats.misses.inc_by(recs.len() as u64 - hits);
    }

    pub(crate) async fn bucket_exists(&self, tenant: u64) -> Result<bool, RespError> {
        match self.store.bucket(tenant, &self.pool.bucket).await {
            Ok(_) => Ok(true),
            Err(ObjectError::Meta(MetaError::NoSuchBucket(_))) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The manifests of `keys` (expired ones included), read after one barrier:
    /// `bucket` brings this node's metadata up to the cluster's commit point, so
    /// whatever was acknowledged anywhere before the command is seen.
    pub(crate) async fn lookup_raw(
        &self,
        tenant: u64,
        keys: &[Bytes],
    ) -> Result<Vec<Option<ObjectRecord>>, RespError> {
        if !self.bucket_exists(tenant).await? {
            return Ok(vec![None; keys.len()]);
        }
        let bucket = &self.pool.id;
        keys.iter()
            .map(|k| {
                self.store
                    .meta()
                    .object(bucket, &self.pool.object_key(k)?)
                    .map_err(|e| RespError::Objects(e.into()))
            })
            .collect()
    }

    /// [`Session::lookup_raw`] with expired keys as misses.
    pub(crate) async fn lookup(
        &self,
        tenant: u64,
        keys: &[Bytes],
    ) -> Result<Vec<Option<ObjectRecord>>, RespError> {
        let t = now();
        let found = self.lookup_raw(tenant, keys).await?;
        Ok(keys
            .iter()
            .zip(found)
            .map(|(k, r)| match r {
                Some(r) if expired(&r, t) => {
                    // Found, so its key maps (lookup_raw mapped it).
                    if let Ok(key) = self.pool.object_key(k) {
                        let bucket = self.pool.bucket.clone();
                        expiry::forget(&self.store, tenant, bucket, key, &r);
                    }
                    None
                }
                r => r,
            })
            .collect())
    }

    /// Writes a value as a bulk string, streamed from the store. The first piece
    /// is read before the header, so a value that cannot be read is an `-ERR`;
    /// a failure after that can only cut the connection (the length is sent).
    async fn value<W: AsyncWrite + Unpin>(
        &self,
        tenant: u64,
        rec: Option<ObjectRecord>,
        w: &mut W,
    ) -> Result<(), RespError> {
        let Some(rec) = rec else { return nil(w).await };
        self.store.ram().count_traffic(&self.pool.id, 0, rec.size);
        // A value read is likely read again (a KV cache's is, by every decode
        // server): it is brought into the RAM tier on the way.
        let mut s = self
            .store
            .read_hot(tenant, &self.pool.id, &rec, 0, rec.size);
        let first = match s.next().await {
            Some(Err(e)) => return error(w, &format!("ERR {e}")).await,
            other => other,
        };
        w.write_all(format!("${}\r\n", rec.size).as_bytes())
            .await
            .map_err(RespError::Io)?;
        let mut sent = 0u64;
        let mut piece = first;
        while let Some(b) = piece {
            // The header is out: an error now cannot be a reply (the client
            // would take it for the value's bytes). The connection is closed
            // instead, so the client sees a short read, never wrong bytes.
            let b = b.map_err(|e| RespError::Io(std::io::Error::other(e.to_string())))?;
            sent += b.len() as u64;
            w.write_all(&b).await.map_err(RespError::Io)?;
            piece = s.next().await;
        }
        if sent != rec.size {
            return Err(RespError::Protocol(format!(
                "value read back {sent} of {} bytes",
                rec.size
            )));
        }
        w.write_all(b"\r\n").await.map_err(RespError::Io)
    }
}

pub(crate) fn now() -> i64 {
    cairn_meta::now_ms()
}
