//! # cfdp-conntrack
//!
//! Connection tracking for stateful rules: an allowing rule marked
//! `track` opens a connection entry for the packet it allows, and while
//! the entry lives the packets of that connection in both directions get
//! the rule's action before any rule is consulted — what `ct state
//! established accept` at the top of an nftables chain does.
//!
//! * [`key`]: a connection's key, the same for both directions, and which
//!   direction a packet goes.
//! * [`state`]: TCP, UDP and ICMP states as Linux's conntrack names them,
//!   the transitions a packet makes, and Linux's default timeouts
//!   ([`Timeouts`], the `[conntrack]` section).
//! * [`tcp`]: Linux's TCP tracking: windows, the state table, RSTs,
//!   mid-stream pickup.
//! * [`table`]: the table the workers share ([`ConnTable`]).
//! * [`settings`]: the `[conntrack]` section.
//! * [`persist`]: the table across a graceful restart.
//!
//! Parsing the packet (TCP flags, ICMP type and identifier) is the
//! decoder's; deciding which rule allowed a packet is the classifier's.
//! This crate only keeps connections: it depends on the filter and the
//! rule model, and nothing of the data plane depends on it but the worker.
#![forbid(unsafe_code)]

pub mod key;
#[cfg(all(test, loom))]
mod loom_tests;
pub mod persist;
pub mod settings;
pub mod state;
mod sync;
pub mod table;
pub mod tcp;

pub use key::{ConnKey, Dir};
pub use settings::ConntrackSection;
pub use state::{State, Timeouts};
pub use table::{ConnInfo, ConnQuery, ConnTable, Counts, Hit, OpenError};
