use std::io::Cursor;
use std::sync::Arc;
use std::time::Instant;

use anyhow::anyhow;
use messages::{CompleteRpcMessage, HandleResult, IncomingRpcMessage, PackedRpcMessage};
use nfs3_types::rpc::{
    RPC_VERSION_2, accept_stat_data, auth_flavor, auth_stat, auth_unix, fragment_header,
};
use nfs3_types::xdr_codec::{Pack, Unpack};
use nfs3_types::{nfs3 as nfs, portmap};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tracing::{debug, error, trace, warn};

use crate::context::RPCContext;
use crate::transaction_tracker::{self, CallKey, TransactionError, TransactionLock};
use crate::units::KIBIBYTE;
use crate::vfs::NfsFileSystem;
use crate::{mount_handlers, nfs_handlers, portmap_handlers};

pub mod messages;

// Information from RFC 5531
// https://datatracker.ietf.org/doc/html/rfc5531

const NFS_ACL_PROGRAM: u32 = 100_227;
const NFS_ID_MAP_PROGRAM: u32 = 100_270;
const NFS_METADATA_PROGRAM: u32 = 200_024;

async fn handle_rpc_message<T>(
    mut context: RPCContext<T>,
    message: CompleteRpcMessage,
) -> anyhow::Result<HandleResult>
where
    T: NfsFileSystem,
{
    let message = IncomingRpcMessage::try_from(message)?;
    let xid = message.xid();
    let call = message.body();
    let prog = call.prog;

    if call.rpcvers != RPC_VERSION_2 {
        warn!("Invalid RPC version {} != {RPC_VERSION_2}", call.rpcvers);
        return message.into_rpc_mismatch();
    }

    let unix = call.cred.flavor == auth_flavor::AUTH_UNIX;
    if unix {
        let auth = auth_unix::unpack(&mut Cursor::new(&call.cred.body.0))?.0;
        context.auth = auth;
    }
    if prog != portmap::PROGRAM && !context.vfs.authorize(unix.then_some(&context.auth)) {
        warn!(
            "refusing a call from uid {} on {}",
            context.auth.uid, context.client_addr
        );
        return message.into_auth_error(auth_stat::AUTH_TOOWEAK);
    }

    let key = CallKey {
        prog,
        vers: call.vers,
        proc_: call.proc,
        digest: message.digest(),
    };
    // Cairn: only calls that change state are tracked; any other call resent
    // is simply handled again (upstream dropped every resend unanswered, and
    // a READ whose reply was lost went unanswered for minutes).
    let mut transaction = if changes_state(key) {
        match lock_transaction(&context.transaction_tracker, &context.client_addr, xid, key) {
            Ok(lock) => Some(lock),
            Err(Retransmission::Answer(reply)) => {
                return Ok(HandleResult::Reply(CompleteRpcMessage::from_kept(reply)));
            }
            // Still being handled: its reply will go out.
            Err(Retransmission::Drop) => return Ok(HandleResult::NoReply),
            Err(Retransmission::Refuse(err)) => return message.into_error_reply(err),
        }
    } else {
        None
    };

    let result = match prog {
        portmap::PROGRAM => portmap_handlers::handle_portmap(context, message).await,
        nfs3_types::mount::PROGRAM => mount_handlers::handle_mount(context, message).await,
        nfs::PROGRAM => nfs_handlers::handle_nfs(context, message).await,
        NFS_ACL_PROGRAM | NFS_ID_MAP_PROGRAM | NFS_METADATA_PROGRAM => {
            trace!("ignoring NFS_ACL packet");
            message.into_error_reply(accept_stat_data::PROG_UNAVAIL)
        }
        _ => {
            warn!("Unknown RPC Program number {prog} != {}", nfs::PROGRAM);
            message.into_error_reply(accept_stat_data::PROG_UNAVAIL)
        }
    };
    if let (Ok(HandleResult::Reply(reply)), Some(t)) = (&result, transaction.as_mut()) {
        t.keep_reply(reply.as_bytes());
    }
    result
}

/// Cairn: the NFS calls whose second handling would not answer as the first
/// did (a REMOVE done twice says NOENT, a RENAME's source is gone, an
/// exclusive CREATE meets its own file): their replies are kept, so that a
/// client resending one after a lost reply or a reconnect hears the outcome
/// of the first (the duplicate request cache of RFC 1813's servers).
fn changes_state(key: CallKey) -> bool {
    use nfs3_types::nfs3::NFS_PROGRAM as P;
    key.prog == nfs::PROGRAM
        && matches!(
            P::try_from(key.proc_),
            Ok(P::NFSPROC3_SETATTR
                | P::NFSPROC3_WRITE
                | P::NFSPROC3_CREATE
                | P::NFSPROC3_MKDIR
                | P::NFSPROC3_SYMLINK
                | P::NFSPROC3_MKNOD
                | P::NFSPROC3_REMOVE
                | P::NFSPROC3_RMDIR
                | P::NFSPROC3_RENAME
                | P::NFSPROC3_LINK
                | P::NFSPROC3_COMMIT)
        )
}

/// Handles the RPC message and returns a result. The handler is an async function
pub async fn handle<I, O, T>(
    context: RPCContext<T>,
    mut message: IncomingRpcMessage,
    handler: impl AsyncFnOnce(RPCContext<T>, u32, I) -> O,
) -> anyhow::Result<HandleResult>
where
    I: Unpack,
    O: Pack + Send + 'static,
    T: NfsFileSystem,
{
    let mut cursor = message.take_data();
    let (args, _) = match I::unpack(&mut cursor) {
        Ok(ok) => ok,
        Err(err) => {
            error!("Failed to unpack message: {err}");
            return message.into_error_reply(accept_stat_data::GARBAGE_ARGS);
        }
    };
    if cursor.position() != cursor.get_ref().len() as u64 {
        error!("Unpacked message size does not match expected size");
        return message.into_error_reply(accept_stat_data::GARBAGE_ARGS);
    }

    let result = handler(context, message.xid(), args).await;
    message.into_success_reply(&result)
}

/// Cairn: what is done with a call that cannot be handled now.
enum Retransmission {
    /// A retransmission answered with its first handling's reply.
    Answer(Vec<u8>),
    /// A retransmission of a call still being handled, not answered.
    Drop,
    /// Refused (too many calls in progress).
    Refuse(accept_stat_data),
}

fn lock_transaction(
    transaction_tracker: &transaction_tracker::TransactionTracker,
    client_addr: &str,
    xid: u32,
    key: CallKey,
) -> Result<TransactionLock, Retransmission> {
    let transaction = transaction_tracker.start_transaction(client_addr, xid, key, Instant::now());

    match transaction {
        Ok(lock) => Ok(lock),
        // Cairn: at debug level and without the call (credentials and all):
        // a client resending in a loop made 45 MB/s of log at info level.
        Err(TransactionError::AlreadyExists(reply)) => {
            debug!(
                "retransmission, xid {xid} from {client_addr}: answered again {}",
                reply.is_some()
            );
            Err(reply.map_or(Retransmission::Drop, Retransmission::Answer))
        }
        Err(TransactionError::TooManyRequests) => {
            warn!("too many requests in progress from {client_addr} (xid {xid})");

            Err(Retransmission::Refuse(accept_stat_data::SYSTEM_ERR))
        }
    }
}

#[allow(clippy::cast_possible_truncation)]
pub async fn write_fragment<IO: tokio::io::AsyncWrite + Unpin>(
    socket: &mut IO,
    buf: CompleteRpcMessage,
) -> Result<(), anyhow::Error> {
    // TODO: split into many fragments
    let buf = buf.into_inner();
    assert!(buf.len() < (1 << 31));
    let fragment_header = fragment_header::new(buf.len() as u32, true);
    let header_buf = fragment_header.into_xdr_buf();
    socket.write_all(&header_buf).await?;
    trace!("Writing fragment length: {}", buf.len());
    socket.write_all(&buf).await?;
    Ok(())
}

/// A reply, with the in-flight permit of its request (Cairn), or an error.
pub type SocketMessageType =
    Result<(CompleteRpcMessage, tokio::sync::OwnedSemaphorePermit), anyhow::Error>;

/// The Socket Message Handler reads from a `TcpStream` and spawns off
/// subtasks to handle each message. replies are queued into the
/// `reply_send_channel`.
#[derive(Debug)]
pub struct SocketMessageHandler<T: NfsFileSystem + 'static> {
    cur_fragment: PackedRpcMessage,
    socket_receive_channel: DuplexStream,
    reply_send_channel: mpsc::UnboundedSender<SocketMessageType>,
    context: RPCContext<T>,
    // Cairn: requests of this connection being handled or waiting for their
    // replies to be written; past it the socket is not read (a client
    // pipelining without end, or never reading, is slowed, not fed memory).
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// Cairn: requests one connection may have in flight.
const MAX_IN_FLIGHT: usize = 64;

impl<T> SocketMessageHandler<T>
where
    T: NfsFileSystem + 'static,
{
    /// Creates a new `SocketMessageHandler` with the receiver for queued message replies
    pub fn new(
        context: RPCContext<T>,
    ) -> (
        Self,
        DuplexStream,
        mpsc::UnboundedReceiver<SocketMessageType>,
    ) {
        let (socksend, sockrecv) = tokio::io::duplex(256 * KIBIBYTE as usize);
        let (msgsend, msgrecv) = mpsc::unbounded_channel();
        (
            Self {
                cur_fragment: PackedRpcMessage::new(),
                socket_receive_channel: sockrecv,
                reply_send_channel: msgsend,
                context,
                in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            },
            socksend,
            msgrecv,
        )
    }

    /// Reads a fragment from the socket. This should be looped.
    pub async fn read(&mut self) -> Result<(), anyhow::Error> {
        let is_last = self
            .cur_fragment
            .recv(&mut self.socket_receive_channel)
            .await?;
        if is_last {
            let message = std::mem::replace(&mut self.cur_fragment, PackedRpcMessage::new());
            let message = match message {
                PackedRpcMessage::Complete(data) => data,
                PackedRpcMessage::Incomplete(_) => {
                    unreachable!()
                }
            };

            let context = self.context.clone();
            let send = self.reply_send_channel.clone();
            let permit = self.in_flight.clone().acquire_owned().await?;
            tokio::spawn(async move {
                let result = handle_rpc_message(context, message).await;

                match result {
                    // Cairn: the permit goes with the reply and is let go once
                    // the reply is written: a client that sends and never reads
                    // holds at most MAX_IN_FLIGHT replies in memory, where
                    // upstream queued every reply without bound.
                    Ok(HandleResult::Reply(reply)) => {
                        let _ = send.send(Ok((reply, permit)));
                    }
                    Ok(HandleResult::NoReply) => {
                        // No reply needed
                    }
                    Err(err) => {
                        error!("Error handling RPC message: {err}");
                        let _ = send.send(Err(anyhow!("Error handling RPC message")));
                    }
                }
            });
        }

        Ok(())
    }
}
