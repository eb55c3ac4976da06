//! The rule store: the control thread's authoritative rule set, and the
//! only writer of the published [`Tables`](cfdp_engine::Tables).
//!
//! A batch goes through three stages:
//!
//! 1. **Validate** every update in order against the rule set as the
//!    earlier updates of the batch leave it (an overlay over the committed
//!    state). For `rollback_on_error` and `dataplane_atomic` a batch with
//!    any invalid update stops here: nothing was touched.
//! 2. **Execute**: new keys go into their filters through the filter's
//!    insert path (Bloom-assisted when configured), table changes are
//!    collected as [`Op`](cfdp_engine::Op)s. A filter that cannot take a key is rebuilt at
//!    twice the size from the rule set when `auto_grow` is on (off the packet
//!    path: workers keep using the old one), else the update fails with
//!    `capacity_exhausted`; in the all-or-nothing modes every filter insert
//!    of the batch is then undone.
//! 3. **Commit**: the durability hook (the journal) runs first, then the
//!    operations are published with one swap; after the answer (`settle`,
//!    or first thing in the next batch) the store waits until no worker
//!    reads the previous copy (a second publish) and only then removes
//!    deleted keys from the filters and recycles their slots.
//!
//! The code follows the stages: `transaction` (the overlay, validation,
//! execution and undo), `config` (filter sizing and growth), `publish` (the
//! commit and its safety argument; its second half, `settle`, runs after
//! the answer) and `views` (read-only answers, memory accounting);
//! `ruleset` holds the committed rules compactly (by counter slot), and
//! `bulk` loads a whole rule set at once (start-up, `cfdp replay`).
//!
//! Every batch is published with one swap whatever its atomicity mode, so
//! in verify and exact mode every packet sees the rule set from before or
//! after a whole batch. In filter-only mode the action comes from the
//! filter's value, which changes key by key: that mode refuses
//! `dataplane_atomic`.

//!
//! Files: `types` (the vocabulary every stage shares) and `config` (the
//! settings) depend on nothing here; `state` holds the store's fields;
//! `slots` keeps the counter slots and the `count` rules' index behind
//! methods that hold their invariants (a slot recycled only once
//! released, with its baseline; the index's version moving with every
//! change); each stage adds its methods beside it. In `transaction`,
//! `step` carries an update out and `dry_step` only checks it (the answer
//! of a failed all-or-nothing batch); both record it in the overlay the
//! same way.

mod bulk;
mod config;
mod grow;
mod publish;
mod recompile;
mod ruleset;
mod slots;
mod state;
mod trace;
mod transaction;
mod types;
mod views;

pub use config::{hash_secret_for, random_secret, StoreConfig};
pub use recompile::{RECOMPILE_AFTER, RECOMPILE_FRACTION};
pub use state::RuleStore;
pub use trace::{TraceKey, TraceReport};
pub use types::{ApplyError, BatchReport, CompileStats, InsertReport, StoreError, Timing};
pub use views::{class_name, CountSlot, FilterStats, MemoryStats, OneFilter, RuleCount};
