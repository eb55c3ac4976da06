//! Queue handles of a started port: [`RxQueue`] and [`TxQueue`], each
//! handed out once by [`crate::StartedPort::queues`] and used by one
//! thread at a time. A burst receives through an `RxQueue` and sends
//! through `TxQueue`s (`burst.rs`).

use std::marker::PhantomData;

/// A receive queue of a started port, used by one thread at a time.
pub struct RxQueue<'p> {
    pub(crate) port: u16,
    pub(crate) queue: u16,
    pub(crate) _port: PhantomData<&'p mut ()>,
}

// SAFETY: a queue handle is unique (handed out once by `queues`), and DPDK
// queues may be polled from any one thread at a time.
unsafe impl Send for RxQueue<'_> {}

impl RxQueue<'_> {
    pub fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn ids(&self) -> (u16, u16) {
        (self.port, self.queue)
    }
}

/// A transmit queue of a started port, used by one thread at a time.
pub struct TxQueue<'p> {
    pub(crate) port: u16,
    pub(crate) queue: u16,
    pub(crate) _port: PhantomData<&'p mut ()>,
}

// SAFETY: as for RxQueue.
unsafe impl Send for TxQueue<'_> {}

impl TxQueue<'_> {
    pub fn port(&self) -> u16 {
        self.port
    }

    pub(crate) fn ids(&self) -> (u16, u16) {
        (self.port, self.queue)
    }
}
