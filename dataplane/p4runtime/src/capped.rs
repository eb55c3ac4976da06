//! A cap on the listener's TCP connections: each accepted connection holds
//! one slot until it closes; beyond the cap a new connection is closed at
//! once. gRPC bounds calls per connection, not connections: without this,
//! idle connections (a TLS handshake never finished, or finished and left
//! open) take file descriptors until the process has none left for its
//! journal and its Unix socket.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A connection and its slot.
pub struct Capped {
    inner: TcpStream,
    _slot: OwnedSemaphorePermit,
}

/// The listener's slots.
#[derive(Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    pub fn new(n: usize) -> Self {
        Self(Arc::new(Semaphore::new(n.max(1))))
    }

    /// `s` with a slot, or `None` (and `s` closed) when every slot is
    /// taken.
    pub fn admit(&self, s: TcpStream) -> Option<Capped> {
        let slot = Arc::clone(&self.0).try_acquire_owned().ok()?;
        Some(Capped {
            inner: s,
            _slot: slot,
        })
    }

    /// Slots free now.
    pub fn free(&self) -> usize {
        self.0.available_permits()
    }
}

impl AsyncRead for Capped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The peer's address, as for a plain `TcpStream` (and, under TLS, its
/// certificates beside it).
impl Connected for Capped {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}
