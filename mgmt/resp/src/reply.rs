//! Replies, RESP2-encoded exactly as Redis writes them.

use crate::commands::Next;
use crate::RespError;
use tokio::io::{AsyncWrite, AsyncWriteExt};

pub(crate) async fn ok<W: AsyncWrite + Unpin>(w: &mut W) -> Result<(), RespError> {
    w.write_all(b"+OK\r\n").await.map_err(RespError::Io)
}

pub(crate) async fn nil<W: AsyncWrite + Unpin>(w: &mut W) -> Result<(), RespError> {
    w.write_all(b"$-1\r\n").await.map_err(RespError::Io)
}

pub(crate) async fn int<W: AsyncWrite + Unpin>(w: &mut W, n: i64) -> Result<(), RespError> {
    w.write_all(format!(":{n}\r\n").as_bytes())
        .await
        .map_err(RespError::Io)
}

pub(crate) async fn array<W: AsyncWrite + Unpin>(w: &mut W, n: usize) -> Result<(), RespError> {
    w.write_all(format!("*{n}\r\n").as_bytes())
        .await
        .map_err(RespError::Io)
}

pub(crate) async fn bulk<W: AsyncWrite + Unpin>(w: &mut W, b: &[u8]) -> Result<(), RespError> {
    w.write_all(format!("${}\r\n", b.len()).as_bytes())
        .await
        .map_err(RespError::Io)?;
    w.write_all(b).await.map_err(RespError::Io)?;
    w.write_all(b"\r\n").await.map_err(RespError::Io)
}

/// An error reply; line breaks in the message would end it early, so they go.
pub(crate) async fn error<W: AsyncWrite + Unpin>(w: &mut W, msg: &str) -> Result<(), RespError> {
    let clean: String = msg.chars().map(|c| if c < ' ' { ' ' } else { c }).collect();
    w.write_all(format!("-{clean}\r\n").as_bytes())
        .await
        .map_err(RespError::Io)
}

pub(crate) async fn arity<W: AsyncWrite + Unpin>(w: &mut W, cmd: &str) -> Result<Next, RespError> {
    error(
        w,
        &format!("ERR wrong number of arguments for '{cmd}' command"),
    )
    .await?;
    Ok(Next::Continue)
}
