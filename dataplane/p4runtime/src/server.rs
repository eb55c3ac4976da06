//! The P4Runtime listener: a gRPC server on its own thread and Tokio
//! runtime, plain or TLS (with optional client certificates), stopped by
//! the data plane's stop flag.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cfdp_control::ControlHandle;
use tokio_stream::StreamExt;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

use crate::proto::p4::v1::p4_runtime_server::P4RuntimeServer;
use crate::service::Service;

/// HTTP/2 flow-control window per stream, bytes.
const WINDOW: u32 = 4 << 20;
/// Calls in progress at once on one connection.
const CONCURRENT_CALLS: usize = 32;
/// Connections at once per controller stream allowed (a controller may
/// hold a stream and make calls on other connections; readers come too).
const CONNECTIONS_PER_CONTROLLER: usize = 4;
/// Most time a connection has to finish its TLS handshake (with client
/// certificates: to authenticate) before its slot is released.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(5);

/// TCP connections the listener keeps at once for `max_controllers`.
pub fn max_connections(max_controllers: usize) -> usize {
    (max_controllers * CONNECTIONS_PER_CONTROLLER).max(16)
}

/// How the listener is set up.
#[derive(Clone, Debug)]
pub struct P4Options {
    pub listen: SocketAddr,
    /// The device id controllers address (P4Runtime's `device_id`).
    pub device_id: u64,
    /// Controllers connected at once (each holds a stream).
    pub max_controllers: usize,
    pub tls: Option<TlsFiles>,
    /// The client certificates (by SAN DNS name) that may write; empty:
    /// every client that connects (every certificate the client CA
    /// signed, or anyone on a plaintext loopback door).
    pub allowed_clients: Vec<rustls_pki_types::DnsName<'static>>,
}

/// PEM files for TLS.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients must present a certificate this CA signed.
    pub client_ca: Option<PathBuf>,
}

/// Why the listener did not start.
#[derive(Debug, thiserror::Error)]
pub enum P4Error {
    #[error("p4runtime.listen = {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("p4runtime: {what} {path}: {source}")]
    File {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("p4runtime: TLS: {0}")]
    Tls(#[source] tonic::transport::Error),
    #[error("p4runtime: {0}")]
    Io(#[source] std::io::Error),
}

fn read(what: &'static str, path: &PathBuf) -> Result<Vec<u8>, P4Error> {
    std::fs::read(path).map_err(|source| P4Error::File {
        what,
        path: path.clone(),
        source,
    })
}

fn tls_config(t: &TlsFiles) -> Result<ServerTlsConfig, P4Error> {
    let identity = Identity::from_pem(read("tls_cert", &t.cert)?, read("tls_key", &t.key)?);
    let mut c = ServerTlsConfig::new()
        .identity(identity)
        .timeout(HANDSHAKE_DEADLINE);
    if let Some(ca) = &t.client_ca {
        c = c.client_ca_root(Certificate::from_pem(read("tls_client_ca", ca)?));
    }
    Ok(c)
}

/// Binds the address (so that a bad one fails the start-up) and serves
/// P4Runtime on a thread of its own until `stop` is set. Returns the
/// thread and the address bound (port 0 in `listen` takes a free one).
pub fn spawn(
    opts: &P4Options,
    control: ControlHandle,
    metrics: crate::P4Metrics,
    stop: Arc<AtomicBool>,
) -> Result<(std::thread::JoinHandle<()>, std::net::SocketAddr), P4Error> {
    let listener = std::net::TcpListener::bind(opts.listen).map_err(|source| P4Error::Bind {
        addr: opts.listen,
        source,
    })?;
    let bound = listener.local_addr().map_err(P4Error::Io)?;
    listener.set_nonblocking(true).map_err(P4Error::Io)?;
    // A 1024-entry Write is ~100 KB: with HTTP/2's default 64 KB window
    // the client waits a round trip for more credit in the middle of it.
    let mut builder = Server::builder()
        .initial_stream_window_size(Some(WINDOW))
        .initial_connection_window_size(Some(2 * WINDOW))
        .concurrency_limit_per_connection(CONCURRENT_CALLS);
    if let Some(t) = &opts.tls {
        builder = builder.tls_config(tls_config(t)?).map_err(P4Error::Tls)?;
    }
    let service = Service::new(
        control,
        opts.device_id,
        opts.max_controllers.max(1),
        opts.allowed_clients.clone(),
        metrics,
    );
    let slots = crate::capped::Slots::new(max_connections(opts.max_controllers.max(1)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cfdp-p4rt")
        .enable_all()
        .build()
        .map_err(P4Error::Io)?;
    std::thread::Builder::new()
        .name("cfdp-p4runtime".into())
        .spawn(move || {
            runtime.block_on(async move {
                let incoming = match tokio::net::TcpListener::from_std(listener) {
                    // No Nagle: a Write's answer is one small frame, and
                    // Nagle held it for the peer's delayed ACK (40 ms
                    // round trips, measured). Past the cap a connection
                    // is closed as soon as it is accepted.
                    Ok(l) => {
                        tokio_stream::wrappers::TcpListenerStream::new(l).filter_map(move |s| {
                            match s.and_then(|s| s.set_nodelay(true).map(|()| s)) {
                                Ok(s) => slots.admit(s).map(Ok),
                                Err(e) => Some(Err(e)),
                            }
                        })
                    }
                    Err(e) => {
                        eprintln!("cfdp: p4runtime: {e}");
                        return;
                    }
                };
                let stopped = async move {
                    while !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                let served = builder
                    .add_service(P4RuntimeServer::new(service))
                    .serve_with_incoming_shutdown(incoming, stopped)
                    .await;
                if let Err(e) = served {
                    eprintln!("cfdp: p4runtime: {e}");
                }
            });
            // Streams still open end with the runtime.
            runtime.shutdown_timeout(Duration::from_secs(1));
        })
        .map(|t| (t, bound))
        .map_err(P4Error::Io)
}
