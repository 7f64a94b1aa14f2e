use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::{debug, error, info};

use crate::context::RPCContext;
use crate::rpcwire::{SocketMessageHandler, write_fragment};
use crate::transaction_tracker::{Cleaner, TransactionTracker};
use crate::units::KIBIBYTE;
use crate::vfs::adapters::ReadOnlyAdapter;
use crate::vfs::{NfsFileSystem, NfsReadFileSystem};

/// A NFS Tcp Connection Handler
pub struct NFSTcpListener<T: NfsFileSystem + 'static> {
    listener: TcpListener,
    port: u16,
    arcfs: Arc<T>,
    mount_signal: Option<mpsc::Sender<bool>>,
    export_name: Arc<String>,
    transaction_tracker: Arc<TransactionTracker>,
    file_handle_converter: crate::vfs::handle::FileHandleConverter,
    stop_notify: Arc<tokio::sync::Notify>,
    // Cairn: the file system a connection sees, chosen by its peer's address
    // (none: the connection is closed at once). Unset: every connection sees
    // `arcfs`.
    connection_fs: Option<ConnectionFs<T>>,
}

/// Chooses, from a connection's peer address, the file system it is served
/// (`None`: the connection is refused).
pub type ConnectionFs<T> = Arc<dyn Fn(SocketAddr) -> Option<Arc<T>> + Send + Sync>;

impl<T: NfsFileSystem + 'static> Drop for NFSTcpListener<T> {
    fn drop(&mut self) {
        self.stop_notify.notify_waiters();
    }
}

#[must_use]
pub fn generate_host_ip(hostnum: u16) -> String {
    format!(
        "127.88.{}.{}",
        ((hostnum >> 8) & 0xFF) as u8,
        (hostnum & 0xFF) as u8
    )
}

/// processes an established socket
pub(crate) async fn process_socket<IO, T>(
    socket: IO,
    context: RPCContext<T>,
) -> Result<(), anyhow::Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: NfsFileSystem + 'static,
{
    let (mut message_handler, mut socksend, mut msgrecvchan) =
        SocketMessageHandler::new(context.clone());

    // Cairn: stopped with the connection, so requests a gone client left
    // buffered are not read and handled one by one for seconds afterwards.
    let _abort_reader = AbortOnDrop(tokio::spawn(async move {
        loop {
            if let Err(e) = message_handler.read().await {
                debug!("Message loop broken due to {e}");
                break;
            }
        }
    }));
    // Cairn: replies are written by their own task. A request's in-flight
    // permit is let go only once its reply is written, so the loop reading
    // the socket must never be what writes replies: blocked handing bytes to
    // a handler that waits for permits, it would never free one (upstream
    // wrote replies from this loop, but let permits go when handlers ended).
    let (mut rd, mut wr) = tokio::io::split(socket);
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<anyhow::Error>();
    let writer = tokio::spawn(async move {
        while let Some(reply) = msgrecvchan.recv().await {
            match reply {
                Err(e) => {
                    let _ = stop.send(e);
                    return;
                }
                Ok((msg, _in_flight)) => {
                    // Cairn: the first failed write ends the writer (upstream
                    // logged an error for every reply to a gone client).
                    if let Err(e) = write_fragment(&mut wr, msg).await {
                        debug!("write error, connection closed: {e}");
                        let _ = stop.send(e);
                        return;
                    }
                }
            }
        }
    });
    // The writer ends with the connection (a client gone, or one that never
    // reads, would leave it waiting on the socket).
    let _abort_writer = AbortOnDrop(writer);
    let mut buf = vec![0u8; 128 * KIBIBYTE as usize].into_boxed_slice();
    loop {
        tokio::select! {
            result = rd.read(&mut buf) => {
                match result {
                    Ok(0) => {
                        return Ok(());
                    }
                    Ok(n) => {
                        let _ = socksend.write_all(&buf[..n]).await;
                    }
                    Err(ref e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => {
                        debug!("Message handling closed : {e}");
                        return Err(e.into());
                    }
                }
            },
            e = &mut stopped => {
                let e = e.unwrap_or_else(|_| anyhow::anyhow!("Unexpected socket context termination"));
                debug!("Message handling closed : {e}");
                return Err(e);
            }
        }
    }
}

/// Cairn: aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub trait NFSTcp: Send + Sync {
    /// Gets the true listening port. Useful if the bound port number is 0
    fn get_listen_port(&self) -> u16;

    /// Gets the true listening IP. Useful on windows when the IP may be random
    fn get_listen_ip(&self) -> IpAddr;

    /// Sets a mount listener. A "true" signal will be sent on a mount
    /// and a "false" will be sent on an unmount
    fn set_mount_listener(&mut self, signal: mpsc::Sender<bool>);

    /// Loops forever and never returns handling all incoming connections.
    fn handle_forever(&self) -> impl Future<Output = io::Result<()>> + Send;
}

impl<RO> NFSTcpListener<ReadOnlyAdapter<RO>>
where
    RO: NfsReadFileSystem + 'static,
{
    /// Create a new `NFSTcpListener` with a read-only file system.
    ///
    /// It binds to a ipstr of the form [ip address]:port. For instance,
    /// "127.0.0.1:12000". `fs` is an instance of an implementation
    /// of [`NfsReadFileSystem`].
    pub async fn bind_ro(ipstr: &str, fs: RO) -> io::Result<Self> {
        Self::bind(ipstr, ReadOnlyAdapter::new(fs)).await
    }
}

impl<T: NfsFileSystem + 'static> NFSTcpListener<T> {
    /// Create a new `NFSTcpListener`.
    ///
    /// It binds to a ipstr of the form [ip address]:port. For instance,
    /// "127.0.0.1:12000". `fs` is an instance of an implementation
    /// of [`NfsFileSystem`].
    pub async fn bind(ipstr: &str, fs: T) -> io::Result<Self> {
        Self::bind_inner(ipstr, fs, None).await
    }

    /// Create a new `NFSTcpListener` with a specific generation number.
    ///
    /// The generation number is embedded in file handles and used to detect
    /// stale handles from previous server instances. When multiple NFS server
    /// instances share the same generation number, file handles remain valid
    /// across all instances (e.g. behind a load balancer).
    pub async fn bind_with_generation(
        ipstr: &str,
        fs: T,
        generation_number: u64,
    ) -> io::Result<Self> {
        Self::bind_inner(ipstr, fs, Some(generation_number)).await
    }

    async fn bind_inner(ipstr: &str, fs: T, generation_number: Option<u64>) -> io::Result<Self> {
        let (ip, port) = ipstr.split_once(':').ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "IP Address must be of form ip:port",
            )
        })?;
        let port = port.parse::<u16>().map_err(|_| {
            io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                "Port not in range 0..=65535",
            )
        })?;

        let arcfs: Arc<T> = Arc::new(fs);

        if ip == "auto" {
            let mut num_tries_left = 32;

            for try_ip in 1u16.. {
                let ip = generate_host_ip(try_ip);

                let result = Self::bind_internal(&ip, port, arcfs.clone(), generation_number).await;

                match result {
                    Err(_) => {
                        if num_tries_left == 0 {
                            return result;
                        }
                        num_tries_left -= 1;
                    }
                    Ok(_) => {
                        return result;
                    }
                }
            }
            unreachable!(); // Does not detect automatically that loop above never terminates.
        } else {
            // Otherwise, try this.
            Self::bind_internal(ip, port, arcfs, generation_number).await
        }
    }

    async fn bind_internal(
        ip: &str,
        port: u16,
        arcfs: Arc<T>,
        generation_number: Option<u64>,
    ) -> io::Result<Self> {
        let ipstr = format!("{ip}:{port}");
        let listener = TcpListener::bind(&ipstr).await?;
        info!("Listening on {:?}", &ipstr);
        Self::with_listener(listener, arcfs, generation_number)
    }

    /// Cairn: serves on a listener the caller bound (so it can bind before the
    /// file system exists, and learn the port at once), with handles of
    /// generation `generation_number` if given.
    pub fn from_listener(
        listener: TcpListener,
        fs: T,
        generation_number: Option<u64>,
    ) -> io::Result<Self> {
        Self::with_listener(listener, Arc::new(fs), generation_number)
    }

    fn with_listener(
        listener: TcpListener,
        arcfs: Arc<T>,
        generation_number: Option<u64>,
    ) -> io::Result<Self> {
        let port = match listener.local_addr()? {
            SocketAddr::V4(s) => s.port(),
            SocketAddr::V6(s) => s.port(),
        };

        let file_handle_converter = generation_number.map_or_else(
            crate::vfs::handle::FileHandleConverter::new,
            crate::vfs::handle::FileHandleConverter::with_generation_number,
        );

        Ok(Self {
            listener,
            port,
            arcfs,
            mount_signal: None,
            export_name: Arc::from("/".to_string()),
            transaction_tracker: Self::new_transaction_tracker(),
            stop_notify: Arc::new(tokio::sync::Notify::new()),
            file_handle_converter,
            connection_fs: None,
        })
    }

    fn new_transaction_tracker() -> Arc<TransactionTracker> {
        // Cairn: two minutes (upstream's one): a kept reply must outlive a
        // client's reconnect and resend (Linux waits `timeo`, 60 s, by default).
        const TRANSACTION_LIFETIME: Duration = Duration::from_secs(120);
        const MAX_ACTIVE_TRANSACTIONS: u16 = 256;
        // Cairn: 16384 (upstream's 2048): only calls that change state are
        // tracked now, and a client must not push a kept reply out within
        // the two minutes a resend may take.
        const TRANSACTION_TRIM_THRESHOLD: usize = 16384;

        Arc::new(TransactionTracker::new(
            TRANSACTION_LIFETIME,
            MAX_ACTIVE_TRANSACTIONS,
            TRANSACTION_TRIM_THRESHOLD,
        ))
    }

    /// Serves each connection the file system `choose` gives for its peer's
    /// address, and closes at once a connection it gives none (Cairn: exports
    /// allowed by client network).
    pub fn with_connection_fs(&mut self, choose: ConnectionFs<T>) {
        self.connection_fs = Some(choose);
    }

    /// Sets an optional NFS export name.
    ///
    /// - `export_name`: The desired export name without slashes.
    ///
    /// Example: Name `foo` results in the export path `/foo`.
    /// Default path is `/` if not set.
    pub fn with_export_name<S: AsRef<str>>(&mut self, export_name: S) {
        self.export_name = Arc::new(format!(
            "/{}",
            export_name
                .as_ref()
                .trim_end_matches('/')
                .trim_start_matches('/')
        ));
    }
}

impl<T: NfsFileSystem + 'static> NFSTcp for NFSTcpListener<T> {
    /// Gets the true listening port. Useful if the bound port number is 0
    fn get_listen_port(&self) -> u16 {
        let addr = self
            .listener
            .local_addr()
            .expect("failed to get local address");
        addr.port()
    }

    fn get_listen_ip(&self) -> IpAddr {
        let addr = self
            .listener
            .local_addr()
            .expect("failed to get local address");
        addr.ip()
    }

    /// Sets a mount listener. A "true" signal will be sent on a mount
    /// and a "false" will be sent on an unmount
    fn set_mount_listener(&mut self, signal: mpsc::Sender<bool>) {
        self.mount_signal = Some(signal);
    }

    /// Loops forever and never returns handling all incoming connections.
    async fn handle_forever(&self) -> io::Result<()> {
        let cleaner_future = Cleaner::new(
            self.transaction_tracker.clone(),
            Duration::from_secs(10),
            Arc::clone(&self.stop_notify),
        )
        .run();
        tokio::spawn(cleaner_future);

        loop {
            // Cairn: a failed accept (out of file descriptors, a connection
            // reset before it was taken) ends neither the server nor the
            // process; the peer's address is taken from accept, which cannot
            // fail to give one as `peer_addr` on a closed socket can.
            let (socket, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    error!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let vfs = match &self.connection_fs {
                None => self.arcfs.clone(),
                Some(choose) => match choose(peer) {
                    Some(fs) => fs,
                    None => {
                        info!("refused connection from {peer}: no export allows it");
                        continue;
                    }
                },
            };
            let context = RPCContext {
                local_port: self.port,
                client_addr: peer.to_string(),
                auth: nfs3_types::rpc::auth_unix::default(),
                vfs,
                mount_signal: self.mount_signal.clone(),
                export_name: self.export_name.clone(),
                transaction_tracker: self.transaction_tracker.clone(),
                file_handle_converter: self.file_handle_converter,
            };
            info!("Accepting connection from {}", context.client_addr);
            debug!("Accepting socket {:?} {:?}", socket, context);
            tokio::spawn(async move {
                let _ = socket.set_nodelay(true);
                let _ = process_socket(socket, context).await;
            });
        }
    }
}
