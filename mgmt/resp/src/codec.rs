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
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest header or inline-command line accepted.
const MAX_LINE: usize = 64 << 10;
/// The most elements in one command (a 1 M-key MGET fits).
const MAX_ARGS: i64 = 4 << 20;
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

/// Reads one command; `Ok(None)` on a clean end of input between commands.
pub async fn read_command<R: AsyncBufRead + Unpin>(
    r: &mut R,
    lim: Limits,
) -> Result<Option<Vec<Bytes>>, RespError> {
    let first = match r.fill_buf().await.map_err(RespError::Io)?.first() {
        None => return Ok(None),
        Some(b) => *b,
    };
    if first != b'*' {
        // Inline command (telnet, `redis-cli` never): words split on spaces.
        let line = read_line(r).await?;
        return Ok(Some(
            line.split(|b| *b == b' ' || *b == b'\t')
                .filter(|w| !w.is_empty())
                .map(Bytes::copy_from_slice)
                .collect(),
        ));
    }
    let line = read_line(r).await?;
    let n = parse_len(&line[1..])?;
    if !(0..=MAX_ARGS).contains(&n) {
        return Err(RespError::Protocol("invalid multibulk length".into()));
    }
    let mut args = Vec::with_capacity((n as usize).min(1024));
    let mut total = 0usize;
    for _ in 0..n {
        let line = read_line(r).await?;
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
        args.push(read_bulk(r, len).await?);
    }
    Ok(Some(args))
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
        read_command(&mut r, LIM).await
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
