//! The count of connections against the capacity: each stripe's own
//! within its quota, the table's one shared count past it
//! ([`ConnTable::quota`]), and the flag a worker asks once a burst
//! whether the table holds anything at all.

use crate::sync::lock;
use crate::sync::Ordering::*;

use super::slot::Shard;
use super::ConnTable;

impl ConnTable {
    /// Counts one more connection of `shard` against the capacity: within
    /// the stripe's quota a store under its lock, past it the table's one
    /// shared count. `false` when that takes the count past the capacity;
    /// the connection is counted all the same (the caller drops one, whose
    /// removal gives its count back, or calls [`Self::give`]).
    pub(super) fn take(&self, shard: &mut Shard) -> bool {
        if !self.occupied.load(Relaxed) {
            self.occupied.store(true, Relaxed);
        }
        shard.held += 1;
        shard.held <= self.quota || self.len.fetch_add(1, Relaxed) < self.capacity
    }

    /// Gives back one connection's count of `shard` (see [`Self::take`]).
    pub(super) fn give(&self, shard: &mut Shard) {
        if shard.held > self.quota {
            self.len.fetch_sub(1, Relaxed);
        }
        shard.held -= 1;
    }

    /// Entries held (expired ones not yet removed included). Locks each
    /// stripe in turn to read what it holds within its quota: for
    /// statistics, not for a packet's path.
    pub fn len(&self) -> usize {
        let within: usize = self
            .shards
            .iter()
            .map(|s| lock(s).held.min(self.quota) as usize)
            .sum();
        self.len.load(Relaxed) + within - self.shards.len() * self.quota as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the table certainly holds no connection: one load, for a
    /// burst's decision to skip its lookups. `false` may also mean the
    /// table emptied since its last sweep turn of its last stripe.
    pub fn surely_empty(&self) -> bool {
        !self.occupied.load(Relaxed)
    }

    /// Clears the flag behind [`Self::surely_empty`] if no stripe holds a
    /// connection, every stripe's lock held meanwhile (in index order, as
    /// nothing else takes two): an open can neither be under way nor
    /// start until the flag is decided.
    pub(super) fn forget_if_empty(&self) {
        if !self.occupied.load(Relaxed) {
            return;
        }
        let held: Vec<_> = self.shards.iter().map(|s| lock(s)).collect();
        if held.iter().all(|s| s.held == 0) {
            self.occupied.store(false, Relaxed);
        }
    }
}
