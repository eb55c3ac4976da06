//! The control plane: the rule store (the single writer of the published
//! tables), the control socket and its protocol, persistence, and the
//! `cfdp ctl` client.
//!
//! ```text
//!  cfdp ctl / socat ──▶ server (one thread per connection: limits, parsing)
//!                            │ requests          ▲ responses
//!                            ▼                   │
//!                       control thread ── journal (fsync) ── snapshot
//!                            │ batches, migration, growth
//!                            ▼
//!                       RuleStore ──publish──▶ Tables ◀── workers (per burst)
//! ```

pub mod client;
pub mod journal;
pub mod metrics;
pub mod plane;
pub mod server;
pub mod store;

pub use store::{ApplyError, BatchReport, RuleStore, StoreConfig};
