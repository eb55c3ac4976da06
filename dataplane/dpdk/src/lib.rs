//! # cfdp-dpdk — packets from NICs
//!
//! The safe layer over `cfdp-dpdk-sys` and the DPDK backend of the engine.
//!
//! * [`Eal`] (one per process) owns everything: [`Mempool`]s, started
//!   ports ([`StartedPort`]) and `net_ring` test ports borrow it, so none
//!   outlives [`Eal::cleanup`].
//! * A started port hands out each of its queues once, as [`RxQueue`] /
//!   [`TxQueue`] handles; a received [`RxBurst`] owns its mbufs and is tied
//!   to the port's lifetime. `unsafe` stays inside these types, each block
//!   with its argument; misuse (polling an unstarted port, a queue that was
//!   not configured, two threads on one queue, a burst after cleanup) does
//!   not compile or is an error.
//! * [`backend`]: the run-to-completion workers — each polls its queues and
//!   runs `cfdp_engine::run_worker`, like every other backend.
//!
//! Built only where the system DPDK (22.11) is found; elsewhere this crate
//! is empty ([`AVAILABLE`] is false) and the `cfdp` binary is built without
//! its `dpdk` feature.
// The links above name items built only with DPDK.
#![cfg_attr(not(dpdk), allow(rustdoc::broken_intra_doc_links))]

/// Whether this build has the DPDK backend.
pub const AVAILABLE: bool = cfg!(dpdk);

#[cfg(dpdk)]
pub mod backend;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
mod burst;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
mod eal;
mod options;
pub mod plan;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
mod port;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
mod queue;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
mod ring;
#[cfg(dpdk)]
#[allow(unsafe_code)] // DPDK FFI
pub mod telemetry;

#[cfg(dpdk)]
pub use burst::{Dispatched, RxBurst};
#[cfg(dpdk)]
pub use eal::{Eal, EalRef, Mempool, ThreadRegistration};
#[cfg(dpdk)]
pub use port::{PortStats, StartedPort};
#[cfg(dpdk)]
pub use queue::{RxQueue, TxQueue};
#[cfg(dpdk)]
pub use ring::Ring;

pub use options::DpdkOptions;
pub use plan::PortPlan;

/// Largest burst handled at once (the engine's burst).
pub const MAX_BURST: usize = cfdp_engine::MAX_BURST;

/// What went wrong in DPDK, or in how it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DpdkError {
    /// A DPDK call failed with an errno.
    Rte {
        what: String,
        errno: i32,
        message: String,
    },
    /// The request cannot be honoured (bad name, EAL twice, configuration).
    Usage(String),
}

impl std::fmt::Display for DpdkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpdkError::Rte {
                what,
                errno,
                message,
            } => write!(f, "{what}: {message} (errno {errno})"),
            DpdkError::Usage(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DpdkError {}
