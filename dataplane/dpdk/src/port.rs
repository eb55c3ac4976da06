//! Started ports and their queues.
//!
//! A [`StartedPort`] exists only for a port that was configured and started
//! with its queue counts; it hands out each of its queues once
//! ([`StartedPort::queues`]), as [`RxQueue`] / [`TxQueue`] handles that
//! borrow it. So a queue handle always names a configured queue of a
//! started port, one thread at a time uses it, and no handle (nor a burst
//! received through one) outlives the port, its mempool or the EAL: the
//! invariants `rte_eth_rx_burst` / `rte_eth_tx_burst` rely on and do not
//! check in release builds.

use std::ffi::c_int;
use std::marker::PhantomData;

use cfdp_dpdk_sys as sys;

use crate::eal::{rte_error, Eal, Mempool};
use crate::queue::{RxQueue, TxQueue};
use crate::DpdkError;

pub use sys::PortStats;

/// A configured and started port; stopped and closed when dropped.
pub struct StartedPort<'p> {
    id: u16,
    rxq: u16,
    txq: u16,
    rss: bool,
    l4_checksums: bool,
    split: bool,
    _pool: PhantomData<&'p Mempool<'p>>,
}

impl<'p> StartedPort<'p> {
    /// Configures port `id` with `rxq` receive and `txq` transmit queues of
    /// `descriptors` descriptors each (receive buffers from `pool`), and
    /// starts it. RSS on the 5-tuple with a symmetric key is enabled where
    /// the device offers it ([`StartedPort::rss`]), and so are its receive
    /// checksum checks ([`StartedPort::l4_checksums`]).
    pub fn start(
        _eal: &'p Eal,
        id: u16,
        rxq: u16,
        txq: u16,
        descriptors: u16,
        pool: &'p Mempool<'p>,
    ) -> Result<Self, DpdkError> {
        let (mut rss, mut csum): (c_int, c_int) = (0, 0);
        // SAFETY: the pool pointer is a live mempool (borrowed for 'p); rss
        // and csum are valid out pointers; the EAL is up (borrowed).
        let r = unsafe {
            sys::cfdp_port_start(
                id,
                rxq,
                txq,
                descriptors,
                descriptors,
                pool.ptr.as_ptr(),
                &mut rss,
                &mut csum,
            )
        };
        if r != 0 {
            return Err(rte_error(format!("starting port {id}"), r));
        }
        Ok(Self {
            id,
            rxq,
            txq,
            rss: rss != 0,
            l4_checksums: csum != 0,
            split: false,
            _pool: PhantomData,
        })
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    /// Whether RSS spreads received packets over the receive queues.
    pub fn rss(&self) -> bool {
        self.rss
    }

    /// Whether the device checks received TCP and UDP checksums: a frame
    /// it vouched for ([`crate::burst::RxBurst::l4_vouched`]) is not
    /// summed again by connection tracking, as Linux's conntrack trusts
    /// `CHECKSUM_UNNECESSARY`.
    pub fn l4_checksums(&self) -> bool {
        self.l4_checksums
    }

    /// Every queue of the port, once: receive queues `0..rxq`, transmit
    /// queues `0..txq`. A second call is an error.
    pub fn queues(&mut self) -> Result<(Vec<RxQueue<'_>>, Vec<TxQueue<'_>>), DpdkError> {
        if self.split {
            return Err(DpdkError::Usage(format!(
                "the queues of port {} were already handed out",
                self.id
            )));
        }
        self.split = true;
        let rx = (0..self.rxq)
            .map(|q| RxQueue {
                port: self.id,
                queue: q,
                _port: PhantomData,
            })
            .collect();
        let tx = (0..self.txq)
            .map(|q| TxQueue {
                port: self.id,
                queue: q,
                _port: PhantomData,
            })
            .collect();
        Ok((rx, tx))
    }

    /// The device's counters.
    pub fn stats(&self) -> Result<PortStats, DpdkError> {
        let mut s = PortStats::default();
        // SAFETY: s is a valid out pointer of the C struct's layout; the
        // port is started.
        let r = unsafe { sys::cfdp_port_stats(self.id, &mut s) };
        if r != 0 {
            return Err(rte_error(format!("stats of port {}", self.id), r));
        }
        Ok(s)
    }
}

impl Drop for StartedPort<'_> {
    fn drop(&mut self) {
        // SAFETY: the port was started by `start`; its queue handles borrow
        // it, so none is in use any more.
        unsafe { sys::cfdp_port_stop(self.id) }
    }
}
