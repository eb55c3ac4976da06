//! # cfdp-p4runtime — SDN controllers program cfdp
//!
//! P4Runtime (the P4 community's gRPC API, what ONOS and p4runtime-shell
//! speak) in front of the control thread:
//!
//! ```text
//!  controller ──gRPC──▶ service (device, primary, atomicity)
//!                         │ entry: table entry ⇄ cfdp rule
//!                         ▼
//!                    ControlHandle ──▶ control thread (same path as the socket)
//! ```
//!
//! `pipeline` describes cfdp's fixed pipeline as a P4Info (`text` writes
//! it in text format for `configs/p4/`), `arbitration` keeps the primary
//! election, `server` runs the listener. The message definitions in
//! `proto/` are the subset of the specification cfdp serves, written for
//! this project with the specification's field numbers.
#![forbid(unsafe_code)]

#[cfg(feature = "server")]
pub mod arbitration;
#[cfg(feature = "server")]
pub mod capped;
pub mod entry;
#[cfg(feature = "server")]
pub mod metrics;
pub mod pipeline;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod service;
#[cfg(feature = "server")]
pub mod settings;
#[cfg(feature = "server")]
pub mod text;

/// The generated messages and service.
#[allow(clippy::all, clippy::pedantic)]
pub mod proto {
    pub mod google {
        pub mod rpc {
            include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
        }
    }
    pub mod p4 {
        pub mod v1 {
            include!(concat!(env!("OUT_DIR"), "/p4.v1.rs"));
        }
        pub mod config {
            pub mod v1 {
                include!(concat!(env!("OUT_DIR"), "/p4.config.v1.rs"));
            }
        }
    }
}

#[cfg(feature = "server")]
pub use metrics::P4Metrics;
#[cfg(feature = "server")]
pub use server::{spawn, P4Error, P4Options, TlsFiles};
#[cfg(feature = "server")]
pub use settings::P4RuntimeSection;
