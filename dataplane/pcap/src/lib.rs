//! # cfdp-pcap — packets from capture files
//!
//! The backend that needs no NIC and no root: capture files are read
//! ([`capture`]: pcap and pcapng with the `pcap-file` crate), spread over
//! workers like a NIC's symmetric RSS would ([`rss`]), processed by the
//! engine's one worker loop, and written out by verdict (`output.rs`).
//!
//! ```text
//!  capture ──reader──▶ RSS ──▶ worker 0 ─┐  (cfdp_engine::run_worker)
//!   (pcap-file)         │ ──▶ worker 1 ─┼──▶ writer ──▶ OUT.pcap (port 0)
//!                       │ ──▶ ...      ─┘      │    └─▶ OUT.portN.pcap (redirects)
//!                       ◀────────── recycled bursts ─┘
//! ```
#![forbid(unsafe_code)]

mod burst;
pub mod capture;
mod options;
mod output;
mod reader;
pub mod replay;
pub mod rss;

pub use capture::{Capture, CaptureError, Frame};
pub use options::{ReplayOptions, MAX_WORKERS};
pub use output::create_output;
pub use replay::{replay, write_flows, ReplayError, ReplayReport};
