//! # cfdp-control — where rules change
//!
//! The control plane: the rule store (the single writer of the published
//! tables), the control thread, the control socket and its limits, the
//! journal and snapshots, the statistics board and its Prometheus exporter,
//! and the `cfdp ctl` client.
//!
//! ```text
//!  cfdp ctl / socat ──▶ server (one thread per connection: limits, parsing)
//!                            │ requests          ▲ responses   ▲ stats
//!                            ▼                   │             │
//!                       control thread ── journal (fsync) ── snapshot
//!                            │ batches, migration, growth      │
//!                            ▼                                 │
//!                       RuleStore ──publish──▶ Tables ◀── workers (per burst)
//!                            └──────▶ StatsBoard ◀── metrics ──┘
//! ```
#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod budget;
pub mod client;
pub mod files;
pub mod heads;
pub mod journal;
pub mod lines;
pub mod metrics;
pub mod plane;
pub mod recover;
pub mod server;
pub mod settings;
pub mod slots;
pub mod stats;
pub mod store;
pub mod wire;

pub use api::{Command, ControlError, ControlHandle};
pub use stats::{ControlStats, StatsBoard};
pub use store::{ApplyError, BatchReport, RuleStore, StoreConfig, StoreError, Timing};
