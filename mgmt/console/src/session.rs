//! One SSH connection: key authentication, and its session channels (one
//! command with `exec`, or an interactive console with line editing, history
//! and completion of the first word).

use crate::commands;
use crate::keys::AuthorizedKey;
use crate::{ConsoleConfig, Sessions};
use cairn_adminapi::Role;
use russh::server::{Auth, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

const PROMPT: &str = "cairn> ";

/// First words Tab completes: nodectl's commands a console runs, and its own.
const WORDS: &[&str] = &[
    "audit", "cluster", "dmesg", "drives", "exit", "export", "gc", "help", "key", "kv", "logs",
    "network", "nodectl", "scrub", "status", "tenant", "token", "user",
];

/// Lines of history kept per console.
const HISTORY: usize = 100;

/// A line as logged: at most 256 characters.
fn truncated(line: &str) -> &str {
    match line.char_indices().nth(256) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

pub(crate) struct Server {
    pub cfg: Arc<ConsoleConfig>,
    pub sessions: Arc<dyn Sessions>,
}

impl russh::server::Server for Server {
    type Handler = Conn;

    fn new_client(&mut self, peer: Option<SocketAddr>) -> Conn {
        Conn {
            cfg: self.cfg.clone(),
            sessions: self.sessions.clone(),
            peer,
            login: None,
            consoles: HashMap::new(),
        }
    }
}

/// An authenticated login: its key and the admin token minted for it.
struct Login {
    key: AuthorizedKey,
    token: String,
}

/// An interactive console's state.
#[derive(Default)]
struct Console {
    pty: bool,
    line: String,
    history: Vec<String>,
    /// Position while walking the history with the arrows (== len: the new line).
    at: usize,
    /// An escape sequence being read.
    esc: Vec<u8>,
    last_cr: bool,
}

pub(crate) struct Conn {
    cfg: Arc<ConsoleConfig>,
    sessions: Arc<dyn Sessions>,
    peer: Option<SocketAddr>,
    login: Option<Login>,
    consoles: HashMap<ChannelId, Console>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(l) = &self.login {
            self.sessions.close(&l.token);
            tracing::info!(key = %l.key.name, peer = ?self.peer, "SSH session ended");
        }
    }
}

impl Conn {
    fn known(&self, key: &russh::keys::PublicKey) -> Option<AuthorizedKey> {
        let from_api = self
            .sessions
            .keys()
            .into_iter()
            .filter_map(|line| crate::keys::parse_line(&line).ok().flatten());
        self.cfg
            .keys()
            .into_iter()
            .chain(from_api)
            .find(|k| k.key.key_data() == key.key_data())
    }

    /// The logged-in key's role (reader before a login, which never runs a line).
    fn role(&self) -> Role {
        self.login.as_ref().map_or(Role::Reader, |l| l.key.role)
    }

    fn token(&self) -> &str {
        self.login.as_ref().map_or("", |l| l.token.as_str())
    }

    /// Text to a console, with CRLF line ends when the client has a terminal.
    fn say(
        session: &mut Session,
        channel: ChannelId,
        pty: bool,
        bytes: &[u8],
    ) -> Result<(), russh::Error> {
        if bytes.is_empty() {
            return Ok(());
        }
        let out = if pty {
            let mut v = Vec::with_capacity(bytes.len() + bytes.len() / 32);
            for &b in bytes {
                if b == b'\n' {
                    v.push(b'\r');
                }
                v.push(b);
            }
            v
        } else {
            bytes.to_vec()
        };
        session.data(channel, out)
    }

    async fn submit(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        let Some(c) = self.consoles.get_mut(&channel) else {
            return Ok(());
        };
        let line = std::mem::take(&mut c.line).trim().to_string();
        let pty = c.pty;
        if pty {
            Self::say(session, channel, pty, b"\n")?;
        }
        if !line.is_empty() && c.history.last() != Some(&line) {
            if c.history.len() >= HISTORY {
                c.history.remove(0);
            }
            c.history.push(line.clone());
        }
        c.at = c.history.len();
        if matches!(line.as_str(), "exit" | "quit" | "logout") {
            return self.end(channel, session, 0);
        }
        let who = self
            .login
            .as_ref()
            .map(|l| l.key.name.clone())
            .unwrap_or_default();
        // Debug-formatted: a newline in a line cannot forge a log line.
        tracing::info!(key = %who, line = ?truncated(&line), "SSH console command");
        let r = commands::run(&self.cfg, self.token(), self.role(), &line).await;
        Self::say(session, channel, pty, &r.out)?;
        Self::say(session, channel, pty, &r.err)?;
        Self::say(session, channel, pty, PROMPT.as_bytes())
    }

    fn end(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
        code: u32,
    ) -> Result<(), russh::Error> {
        self.consoles.remove(&channel);
        session.exit_status_request(channel, code)?;
        session.eof(channel)?;
        session.close(channel)
    }

    /// The line replaced on screen (history, completion).
    fn redraw(session: &mut Session, channel: ChannelId, c: &Console) -> Result<(), russh::Error> {
        if c.pty {
            // Carriage return, the prompt and line, clear to the end of the line.
            session.data(channel, format!("\r{PROMPT}{}\x1b[K", c.line).into_bytes())?;
        }
        Ok(())
    }
}

impl russh::server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        // An unknown key is refused before the client signs anything with it.
        Ok(match self.known(offer.public_key) {
            Some(_) => Auth::Accept,
            None => {
                let fp = offer.public_key.fingerprint(russh::keys::HashAlg::Sha256);
                tracing::warn!(%user, %fp, peer = ?self.peer, "SSH key refused: not authorized");
                Auth::reject()
            }
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        let fp = key.public_key.fingerprint(russh::keys::HashAlg::Sha256);
        match self.known(key.public_key) {
            Some(k) => {
                tracing::info!(%user, key = %k.name, role = %k.role, peer = ?self.peer, "SSH login");
                let token = self.sessions.open(format!("ssh:{}", k.name), k.role);
                self.login = Some(Login { key: k, token });
                Ok(Auth::Accept)
            }
            None => {
                tracing::warn!(%user, %fp, peer = ?self.peer, "SSH key refused: not authorized");
                Ok(Auth::reject())
            }
        }
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: russh::server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    async fn pty_request(
        &mut self,
        channel: ChannelId,
        _term: &str,
        _col_width: u32,
        _row_height: u32,
        _pix_width: u32,
        _pix_height: u32,
        _modes: &[(russh::Pty, u32)],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.consoles.entry(channel).or_default().pty = true;
        session.channel_success(channel)
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        let line = String::from_utf8_lossy(data).into_owned();
        let who = self
            .login
            .as_ref()
            .map(|l| l.key.name.clone())
            .unwrap_or_default();
        tracing::info!(key = %who, line = ?truncated(&line), "SSH exec");
        let pty = self.consoles.get(&channel).is_some_and(|c| c.pty);
        let r = commands::run(&self.cfg, self.token(), self.role(), &line).await;
        Self::say(session, channel, pty, &r.out)?;
        if !r.err.is_empty() {
            session.extended_data(channel, 1, r.err)?;
        }
        self.end(channel, session, r.code)
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        let c = self.consoles.entry(channel).or_default();
        let pty = c.pty;
        let (name, role) = self
            .login
            .as_ref()
            .map(|l| (l.key.name.clone(), l.key.role.name()))
            .unwrap_or_default();
        let hello = format!(
            "Cairn admin console ({name}, role {role}). `help` lists the commands.\n{PROMPT}"
        );
        Self::say(session, channel, pty, hello.as_bytes())
    }

    async fn data(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        for &b in data {
            let Some(c) = self.consoles.get_mut(&channel) else {
                return Ok(());
            };
            let pty = c.pty;
            if !c.esc.is_empty() || b == 0x1b {
                c.esc.push(b);
                match c.esc.as_slice() {
                    [0x1b] | [0x1b, b'['] => continue,
                    [0x1b, b'[', b'A'] if c.at > 0 => {
                        c.at -= 1;
                        c.line = c.history[c.at].clone();
                    }
                    [0x1b, b'[', b'B'] if c.at < c.history.len() => {
                        c.at += 1;
                        c.line = c.history.get(c.at).cloned().unwrap_or_default();
                    }
                    _ => {}
                }
                c.esc.clear();
                Self::redraw(session, channel, c)?;
                continue;
            }
            let was_cr = std::mem::replace(&mut c.last_cr, b == b'\r');
            match b {
                b'\n' if was_cr => {}
                b'\r' | b'\n' => self.submit(channel, session).await?,
                0x7f | 0x08 if !c.line.is_empty() => {
                    c.line.pop();
                    if pty {
                        session.data(channel, b"\x08 \x08".to_vec())?;
                    }
                }
                0x03 => {
                    c.line.clear();
                    Self::say(session, channel, pty, format!("^C\n{PROMPT}").as_bytes())?;
                }
                0x04 if c.line.is_empty() => return self.end(channel, session, 0),
                // Completes the first word when one candidate fits.
                b'\t' if !c.line.contains(' ') => {
                    let found: Vec<&str> = WORDS
                        .iter()
                        .copied()
                        .filter(|w| w.starts_with(c.line.as_str()))
                        .collect();
                    if let [one] = found.as_slice() {
                        c.line = format!("{one} ");
                        Self::redraw(session, channel, c)?;
                    }
                }
                // A line past the limit is not kept growing: the command will
                // be refused for its length.
                b if b >= 0x20 && c.line.len() <= commands::MAX_LINE => {
                    c.line.push(b as char);
                    if pty {
                        session.data(channel, vec![b])?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    async fn channel_eof(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // A console fed from a pipe ends with its input: run the last line.
        if self
            .consoles
            .get(&channel)
            .is_some_and(|c| !c.line.trim().is_empty())
        {
            self.submit(channel, session).await?;
        }
        if self.consoles.contains_key(&channel) {
            self.end(channel, session, 0)?;
        }
        Ok(())
    }
}
