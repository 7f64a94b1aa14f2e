//! RESP2 request reading, bounded.
//!
//! Written by hand rather than with `redis-protocol`: that crate decodes frames
//! from a buffer that must already hold the whole frame, so a 512 MiB SET would be
//! buffered twice over and its claimed length trusted before the bytes arrive.
//! Here a command is read straight off the socket: lines are capped, a bulk's
//! buffer grows with the bytes that actually arrive (at most [`CHUNK`] ahead of
//! them), and every length is checked before anything is allocated.

use crate::RespError;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The longest header or inline-command line accepted.
const MAX_LINE: usize = 64 << 10;
/// The most elements in one command (a 1 M-key MGET fits).
const MAX_ARGS: i64 = 4 << 20;
/// How long a command holding part of the intake budget may wait for its next
/// bytes (Redis itself has no such limit, but then it has no shared budget).
const STALL: std::time::Duration = std::time::Duration::from_secs(30);
/// How far ahead of the bytes received a bulk's buffer is grown.
const CHUNK: usize = 1 << 20;

/// Limits of one connection's reader.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The largest bulk string (a value).
    pub max_value: usize,
    /// The most bytes of arguments in one command.
    pub max_command: usize,
}

/// The node's budget for arguments being received, shared by every connection:
/// a bulk is read only once its bytes are granted, so a flood of SETs, of huge
/// MSETs or MGETs, or of clients, waits on the socket instead of growing the
/// daemon past its memory. Every bulk counts, at least one [`Intake::UNIT`]
/// (what an argument costs beyond its bytes); inline commands are bounded by the
/// line limit.
#[derive(Clone, Debug)]
pub struct Intake {
    units: Arc<Semaphore>,
    total: u32,
}

impl Intake {
    /// Granted in units of 256 bytes.
    pub const UNIT: usize = 256;

    /// A budget of `bytes` (at least one unit).
    pub fn new(bytes: u64) -> Intake {
        let total = (bytes / Self::UNIT as u64).clamp(1, u32::MAX as u64 / 2) as u32;
        Intake {
            units: Arc::new(Semaphore::new(total as usize)),
            total,
        }
    }

    /// Bytes granted to commands being received or run now.
    pub fn in_use(&self) -> u64 {
        (self.total as u64 - self.units.available_permits() as u64) * Self::UNIT as u64
    }

    /// The budget, in bytes.
    pub fn bytes(&self) -> u64 {
        self.total as u64 * Self::UNIT as u64
    }

    /// Grants `len` more bytes to a command that holds `held` already. Waiting
    /// while holding part of the budget could deadlock two commands each holding
    /// half of it, so the held grant is given back and the whole asked for at
    /// once (the semaphore is fair: the large request is not starved). A value
    /// larger than the whole budget takes the whole budget.
    async fn grant(&self, held: &mut Option<OwnedSemaphorePermit>, len: usize) {
        let more = len.div_ceil(Self::UNIT).clamp(1, u32::MAX as usize / 2) as u32;
        let have = held.as_ref().map_or(0, |p| p.num_permits() as u32);
        let want = (have + more).min(self.total);
        if want == have {
            return;
        }
        if let Ok(p) = self.units.clone().try_acquire_many_owned(want - have) {
            match held {
                Some(h) => h.merge(p),
                None => *held = Some(p),
            }
            return;
        }
        *held = None;
        // Never closed, so acquiring only fails if it were.
        *held = self.units.clone().acquire_many_owned(want).await.ok();
    }
}

/// One command's arguments, with the part of the intake budget its values hold
/// (given back when it is dropped, after the command has run).
pub struct Command {
    pub args: Vec<Bytes>,
    _granted: Option<OwnedSemaphorePermit>,
}

/// Reads one command; `Ok(None)` on a clean end of input between commands.
pub async fn read_command<R: AsyncBufRead + Unpin>(
    r: &mut R,
    lim: Limits,
    intake: Option<&Intake>,
) -> Result<Option<Command>, RespError> {
    let first = match r.fill_buf().await.map_err(RespError::Io)?.first() {
        None => return Ok(None),
        Some(b) => *b,
    };
    if first != b'*' {
        // Inline command (telnet, `redis-cli` never): words split on spaces.
        let line = read_line(r).await?;
        return Ok(Some(Command {
            args: line
                .split(|b| *b == b' ' || *b == b'\t')
                .filter(|w| !w.is_empty())
                .map(Bytes::copy_from_slice)
                .collect(),
            _granted: None,
        }));
    }
    let line = read_line(r).await?;
    let n = parse_len(&line[1..])?;
    if !(0..=MAX_ARGS).contains(&n) {
        return Err(RespError::Protocol("invalid multibulk length".into()));
    }
    let mut args = Vec::with_capacity((n as usize).min(1024));
    let mut total = 0usize;
    let mut granted = None;
    for _ in 0..n {
        let line = match granted.is_some() {
            true => tokio::time::timeout(STALL, read_line(r))
                .await
                .map_err(|_| RespError::Protocol("command stalled mid-command".into()))?,
            false => read_line(r).await,
        }?;
        if line.first() != Some(&b'$') {
            let got = line.first().map(|b| *b as char).unwrap_or(' ');
            return Err(RespError::Protocol(format!("expected '$', got '{got}'")));
        }
        let len = parse_len(&line[1..])?;
        if len < 0 || len as u64 > lim.max_value as u64 {
            return Err(RespError::Protocol("invalid bulk length".into()));
        }
        let len = len as usize;
        total += len;
        if total > lim.max_command {
            return Err(RespError::Protocol("command larger than the limit".into()));
        }
        if let Some(i) = intake {
            i.grant(&mut granted, len).await;
        }
        // Holding part of the budget, the command must keep arriving: a client
        // that stalls mid-command is cut off, so it cannot hold the budget (and
        // every other writer) for ever.
        let bulk = read_bulk(r, len);
        let bulk = match granted.is_some() {
            true => tokio::time::timeout(STALL, bulk)
                .await
                .map_err(|_| RespError::Protocol("command stalled mid-value".into()))?,
            false => bulk.await,
        };
        args.push(bulk?);
    }
    Ok(Some(Command {
        args,
        _granted: granted,
    }))
}

/// One `\r\n`-terminated line, without the terminator; at most [`MAX_LINE`].
async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<u8>, RespError> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await.map_err(RespError::Io)?;
        if buf.is_empty() {
            return Err(RespError::Eof);
        }
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                break;
            }
            None => {
                let n = buf.len();
                line.extend_from_slice(buf);
                r.consume(n);
            }
        }
        if line.len() > MAX_LINE {
            return Err(RespError::Protocol("too big inline request".into()));
        }
    }
    if line.len() > MAX_LINE {
        return Err(RespError::Protocol("too big inline request".into()));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

fn parse_len(s: &[u8]) -> Result<i64, RespError> {
    std::str::from_utf8(s)
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 20)
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| RespError::Protocol("invalid length".into()))
}

/// `len` bytes and their `\r\n`; the buffer grows with what arrives.
async fn read_bulk<R: AsyncBufRead + Unpin>(r: &mut R, len: usize) -> Result<Bytes, RespError> {
    let mut buf = BytesMut::with_capacity(len.min(CHUNK));
    while buf.len() < len {
        if buf.capacity() == buf.len() {
            buf.reserve((len - buf.len()).min(CHUNK));
        }
        let want = (len - buf.len()).min(buf.capacity() - buf.len());
        let n = (&mut *r)
            .take(want as u64)
            .read_buf(&mut buf)
            .await
            .map_err(RespError::Io)?;
        if n == 0 {
            return Err(RespError::Eof);
        }
    }
    let mut crlf = [0u8; 2];
    r.read_exact(&mut crlf).await.map_err(|_| RespError::Eof)?;
    if crlf != *b"\r\n" {
        return Err(RespError::Protocol("bulk not terminated by CRLF".into()));
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        max_value: 16,
        max_command: 32,
    };

    async fn parse(input: &[u8]) -> Result<Option<Vec<Bytes>>, RespError> {
        let mut r = tokio::io::BufReader::new(input);
        Ok(read_command(&mut r, LIM, None).await?.map(|c| c.args))
    }

    #[tokio::test]
    async fn values_wait_for_the_intake_budget() {
        let intake = Intake::new(8 * Intake::UNIT as u64);
        let lim = Limits {
            max_value: 1 << 20,
            max_command: 1 << 21,
        };
        let value = vec![7u8; 3 * Intake::UNIT];
        let mut wire = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", value.len()).into_bytes();
        wire.extend_from_slice(&value);
        wire.extend_from_slice(b"\r\n");
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let first = read_command(&mut r, lim, Some(&intake))
            .await
            .unwrap()
            .unwrap();
        // Every argument counts: a unit each for SET and k, three for the value.
        assert_eq!(intake.in_use(), 5 * Intake::UNIT as u64);
        // A second command of the same size does not fit beside the first: it waits.
        let mut r2 = tokio::io::BufReader::new(&wire[..]);
        let second = read_command(&mut r2, lim, Some(&intake));
        tokio::pin!(second);
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(100), &mut second)
                .await
                .is_err(),
            "read while the budget was taken"
        );
        drop(first);
        let second = second.await.unwrap().unwrap();
        assert_eq!(second.args[2].len(), value.len());
        drop(second);
        assert_eq!(intake.in_use(), 0);
        // A value larger than the whole budget takes all of it, and still passes.
        let big = vec![1u8; 10 * Intake::UNIT];
        let mut wire = format!("*1\r\n${}\r\n", big.len()).into_bytes();
        wire.extend_from_slice(&big);
        wire.extend_from_slice(b"\r\n");
        let mut r = tokio::io::BufReader::new(&wire[..]);
        let c = read_command(&mut r, lim, Some(&intake))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(intake.in_use(), intake.bytes());
        assert_eq!(c.args[0].len(), big.len());
    }

    #[tokio::test]
    async fn commands_and_garbage() {
        let ok = parse(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ok, vec![Bytes::from("GET"), Bytes::from("k")]);
        let inline = parse(b"PING  x\r\n").await.unwrap().unwrap();
        assert_eq!(inline, vec![Bytes::from("PING"), Bytes::from("x")]);
        assert!(parse(b"").await.unwrap().is_none());
        for bad in [
            &b"*1\r\n$-1\r\n"[..],
            b"*1\r\n$99999999999\r\n",
            b"*1\r\n$17\r\n",
            b"*-5\r\n",
            b"*x\r\n",
            b"*1\r\n:1\r\n",
            b"*1\r\n$1\r\nab\r\n",
        ] {
            assert!(
                matches!(parse(bad).await, Err(RespError::Protocol(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse(b"*2\r\n$1\r\na\r\n").await,
            Err(RespError::Eof)
        ));
        assert!(matches!(
            parse(b"*3\r\n$16\r\naaaaaaaaaaaaaaaa\r\n$16\r\naaaaaaaaaaaaaaaa\r\n$1\r\n").await,
            Err(RespError::Protocol(_))
        ));
    }
}
