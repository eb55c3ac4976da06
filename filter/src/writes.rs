//! The filter's write API: one operation under the key's partition's
//! writer lock (`Filter::insert_hash`, `remove_hash`, …), many under every
//! partition's (`FilterWriter`, a batch's), migration, and the prefetch of
//! an insert's first buckets. The work itself is `execute.rs`'s, planned by
//! `path.rs`.

use crate::hash::hash_bytes;
use crate::layout::ENTRIES_PER_BUCKET;
use crate::outcome::{InsertError, InsertOutcome, Placement};
use crate::state::{Filter, Guard};
#[cfg(any(test, loom))]
use crate::state::{Keyed, Loc};

impl Filter {
    // ----- writes ----------------------------------------------------------
    //
    // Every write goes through its partition's mutex (writers of a
    // partition are serialised). The methods on `Filter` take the key's
    // partition's for one operation; `Filter::writer` holds every
    // partition's across many, which is what a batch of updates wants: no
    // locked instruction per operation, so the CPU overlaps the cache misses
    // of consecutive inserts as it does for lookups.

    /// Partition `h`'s writer, for one operation on key `h`.
    fn part_writer(&self, h: u64) -> Guard<'_> {
        self.raw.write(self.partition_of(h))
    }

    /// Exclusive write access across many operations (e.g. one batch of
    /// rule updates): every partition's writer lock, taken in order.
    /// Readers are never blocked by it; other writers wait until the
    /// handle is dropped.
    pub fn writer(&self) -> FilterWriter<'_> {
        FilterWriter {
            filter: self,
            guards: self.raw.write_all(),
        }
    }

    /// Inserts a byte key with value 0.
    pub fn insert(&self, key: &[u8]) -> Result<InsertOutcome, InsertError> {
        self.insert_hash(hash_bytes(key), 0)
    }

    /// Inserts a pre-hashed key with an associated value, through Algorithm
    /// 2 of the Bloom-Cuckoo paper when the filter has a Bloom part, else through the
    /// plain cuckoo walk. On error the filter is unchanged.
    pub fn insert_hash(&self, h: u64, value: u32) -> Result<InsertOutcome, InsertError> {
        let t = self.bloom.map(|b| b.threshold);
        self.insert_locked(&mut self.part_writer(h), h, value, t)
    }

    /// Inserts with an explicit path: `Some(t)` runs Algorithm 2 with
    /// threshold `t` (needs a Bloom part, else it is the plain walk), `None`
    /// the plain cuckoo walk (e.g. to fill a Bloom-Cuckoo filter without
    /// touching its Bloom part, as the paper's experiments do).
    pub fn insert_hash_with(
        &self,
        h: u64,
        value: u32,
        threshold: Option<u32>,
    ) -> Result<InsertOutcome, InsertError> {
        self.insert_locked(&mut self.part_writer(h), h, value, threshold)
    }

    /// Removes a byte key inserted with value 0.
    pub fn remove(&self, key: &[u8]) -> bool {
        self.remove_hash(hash_bytes(key), 0)
    }

    /// Algorithm 1 of the Bloom-Cuckoo paper; see [`FilterWriter::remove_hash`].
    pub fn remove_hash(&self, h: u64, value: u32) -> bool {
        self.remove_locked(&mut self.part_writer(h), h, value)
    }

    /// See [`FilterWriter::remove_hash_placed`].
    pub fn remove_hash_placed(&self, h: u64, value: u32) -> Option<Placement> {
        self.remove_placed_locked(&mut self.part_writer(h), h, value)
    }

    /// See [`FilterWriter::replace_value`].
    pub fn replace_value(&self, h: u64, old: u32, new: u32) -> Result<bool, InsertError> {
        self.replace_locked(&mut self.part_writer(h), h, old, new)
    }

    /// See [`FilterWriter::migrate`]; each partition's writer lock is held
    /// only while its own elements move.
    pub fn migrate(&self, budget: usize) -> usize {
        spend(budget, self.partitions(), |p, left| {
            self.migrate_locked(&mut self.raw.write(p), left)
        })
    }

    /// Prefetch for an insert of `h` a few inserts ahead (the bulk build's
    /// leftovers, whose two buckets are full): the item's two buckets, and,
    /// with `children`, the alternate buckets of their entries, the first
    /// level of the breadth-first search. `children` reads the two buckets,
    /// so it pays when they were prefetched some inserts earlier. Only
    /// hints: the table may change before the insert, which then reads
    /// what it finds.
    pub(crate) fn prefetch_insert(&self, h: u64, children: bool) {
        let k = self.derive(h);
        if !children {
            self.raw.prefetch(k.i1);
            self.raw.prefetch(k.i2);
            return;
        }
        let l = &self.raw.layout;
        for bucket in [k.i1, k.i2] {
            let b = self.raw.load_hint(bucket);
            for slot in 0..ENTRIES_PER_BUCKET {
                let fp = l.entry_fp(l.entry(&b, slot));
                if fp != 0 {
                    self.raw.prefetch(self.alt(bucket, fp));
                }
            }
        }
    }
}

/// Exclusive write access to a [`Filter`], from [`Filter::writer`]. Holds
/// every partition's writer mutex until dropped; lookups go on meanwhile.
pub struct FilterWriter<'a> {
    filter: &'a Filter,
    /// By partition.
    guards: Vec<Guard<'a>>,
}

impl std::fmt::Debug for FilterWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterWriter").finish_non_exhaustive()
    }
}

impl<'a> FilterWriter<'a> {
    /// The guard of `h`'s partition.
    #[inline(always)]
    fn guard(&mut self, h: u64) -> &mut Guard<'a> {
        &mut self.guards[self.filter.partition_of(h)]
    }

    /// [`Filter::insert_hash`] under this handle.
    pub fn insert_hash(&mut self, h: u64, value: u32) -> Result<InsertOutcome, InsertError> {
        let t = self.filter.bloom.map(|b| b.threshold);
        let f = self.filter;
        f.insert_locked(self.guard(h), h, value, t)
    }

    /// [`Filter::insert_hash_with`] under this handle.
    pub fn insert_hash_with(
        &mut self,
        h: u64,
        value: u32,
        threshold: Option<u32>,
    ) -> Result<InsertOutcome, InsertError> {
        let f = self.filter;
        f.insert_locked(self.guard(h), h, value, threshold)
    }

    /// Algorithm 1 of the Bloom-Cuckoo paper: removes one copy of the item (fingerprint
    /// and value) from its cuckoo entries, else from the Bloom part. Only
    /// items that were inserted may be removed (as for any cuckoo filter);
    /// the Bloom part is cleared only when the side table confirms that the
    /// element holding the pair is this one, so a stray remove cannot clear
    /// another element's bits. Returns false when nothing matched.
    pub fn remove_hash(&mut self, h: u64, value: u32) -> bool {
        let f = self.filter;
        f.remove_locked(self.guard(h), h, value)
    }

    /// [`Self::remove_hash`], saying where the item was: in an entry or in
    /// the Bloom part (`None`: not found). A caller that keeps the values
    /// of Bloom-part items aside (they have no entry) knows then whether
    /// to look there.
    pub fn remove_hash_placed(&mut self, h: u64, value: u32) -> Option<Placement> {
        let f = self.filter;
        f.remove_placed_locked(self.guard(h), h, value)
    }

    /// Changes the value of one copy of an item in place (atomically for
    /// readers: they see the old or the new value, never a miss). Returns
    /// false when no copy with `old` exists.
    pub fn replace_value(&mut self, h: u64, old: u32, new: u32) -> Result<bool, InsertError> {
        let f = self.filter;
        f.replace_locked(self.guard(h), h, old, new)
    }

    /// Moves up to `budget` elements from the Bloom part back into cuckoo
    /// entries (the Bloom-Cuckoo paper, end of section III), restoring the FPR and the
    /// room for the next burst. Each element's fingerprint is written before
    /// its Bloom fields are cleared. Elements with no room within
    /// `max_kicks` stay in the Bloom part. Returns how many moved.
    ///
    /// Calls take turns over the side table: each call starts after the last
    /// element the previous call tried, so elements that cannot move yet
    /// never keep the others from being tried. The budget (elements tried)
    /// is spent partition by partition.
    pub fn migrate(&mut self, budget: usize) -> usize {
        let (f, guards) = (self.filter, &mut self.guards);
        spend(budget, guards.len(), |p, left| {
            f.migrate_locked(&mut guards[p], left)
        })
    }
}

/// A migration budget (elements tried) spent partition by partition:
/// `one(p, left)` migrates in partition `p` and says how many moved and
/// how many it tried. Returns how many moved in all.
fn spend(
    budget: usize,
    partitions: usize,
    mut one: impl FnMut(usize, usize) -> (usize, usize),
) -> usize {
    let (mut moved, mut left) = (0, budget);
    for p in 0..partitions {
        if left == 0 {
            break;
        }
        let (m, tried) = one(p, left);
        moved += m;
        left -= tried;
    }
    moved
}

/// Single protocol steps, for the loom model and unit tests.
#[cfg(any(test, loom))]
impl Filter {
    fn test_find(&self, h: u64, value: u32) -> (Keyed, u64, Loc) {
        let k = self.derive(h);
        let l = &self.raw.layout;
        let entry = l.make_entry(k.fp, value);
        for bucket in [k.i1, k.i2] {
            if let Some(slot) = l.find_entry(&self.raw.load_hint(bucket), entry) {
                return (k, entry, Loc { bucket, slot });
            }
        }
        panic!("item not in a cuckoo entry");
    }

    /// Moves the item's entry to a free slot of its other bucket.
    pub(crate) fn test_relocate(&self, h: u64, value: u32) {
        let (k, entry, src) = self.test_find(h, value);
        let other = if src.bucket == k.i1 { k.i2 } else { k.i1 };
        let empty = self.raw.layout.empty_slots(&self.raw.load_hint(other));
        assert!(empty != 0, "no room in the other bucket");
        let dst = Loc {
            bucket: other,
            slot: empty.trailing_zeros() as usize,
        };
        let w = self.part_writer(h);
        self.move_entry(&w, src, dst, entry);
    }

    /// Moves the item's entry into the Bloom part of its pair.
    pub(crate) fn test_evict_to_bloom(&self, h: u64, value: u32) {
        let (k, entry, src) = self.test_find(h, value);
        let mut w = self.part_writer(h);
        self.move_to_bloom(&mut w, src, entry, k.i1, k.i2);
    }
}
