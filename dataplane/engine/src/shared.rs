//! An exact table whose bulk both left-right copies share.
//!
//! The exact tables are most of a large rule set's memory, and
//! `left_right` keeps two copies of everything it publishes: at ten
//! million flow rules that was two 790 MB hash tables, the second a serial
//! clone of the first after a bulk load (~0.5–1 s of start-up on the
//! machines measured). A [`SharedMap`] keeps a frozen *base*, shared by
//! both copies behind an `Arc`, and per copy the changes made since (the
//! *delta*: added or replaced entries, and removals of base entries). A
//! bulk load becomes the base; batches change the deltas; and when a delta
//! outgrows its base the changes are folded into a new shared base
//! ([`Op::Fold`](crate::Op::Fold)), so churn costs amortised O(1) per
//! update and memory stays within the two-copy layout's.
//!
//! A lookup probes the delta only when it is not empty (one load), then
//! the base: a bulk-loaded, unchanged table costs what a plain one did.

use std::hash::Hash;
use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::tables::table_bytes;

/// Deltas smaller than this are never folded (folding is for changes on
/// the scale of the base, not for a small rule set built by batches).
const FOLD_MIN: usize = 1 << 16;

/// A map of a frozen shared base and this copy's changes since.
#[derive(Clone, Debug)]
pub struct SharedMap<K, V> {
    base: Arc<HashMap<K, V>>,
    /// `Some`: added or replaced; `None`: a base entry removed.
    delta: HashMap<K, Option<V>>,
    len: usize,
}

impl<K, V> Default for SharedMap<K, V> {
    fn default() -> Self {
        Self {
            base: Arc::new(HashMap::new()),
            delta: HashMap::new(),
            len: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V: Copy> SharedMap<K, V> {
    /// A map holding exactly `base`, shared by every clone.
    pub fn from_base(base: HashMap<K, V>) -> Self {
        Self {
            len: base.len(),
            base: Arc::new(base),
            delta: HashMap::new(),
        }
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        self.view().get(k)
    }

    /// The map's two parts as plain references, for many lookups in a row
    /// (a worker's burst): the base's `Arc` is followed once, not on every
    /// lookup (measured: exact-mode matching at 1 M rules lost 2–6 % to
    /// that dependent load, DRAM misses behind it).
    #[inline]
    pub fn view(&self) -> SharedView<'_, K, V> {
        SharedView {
            base: &self.base,
            delta: (!self.delta.is_empty()).then_some(&self.delta),
        }
    }

    /// Adds or replaces; the entry it replaced. One probe of the delta
    /// (and of the base only for a key the delta does not hold): the
    /// control thread does this twice per insert, once per copy.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let old = match self.delta.entry(k) {
            Entry::Occupied(mut e) => e.insert(Some(v)),
            Entry::Vacant(e) => {
                let old = self.base.get(e.key()).copied();
                e.insert(Some(v));
                old
            }
        };
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes; the entry removed.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let old = match self.delta.get_mut(k) {
            // Added or replaced since the base: a base key keeps a
            // tombstone (`None`), any other leaves the delta.
            Some(slot) => {
                let old = slot.take()?;
                if !self.base.contains_key(k) {
                    self.delta.remove(k);
                }
                old
            }
            None => {
                let old = *self.base.get(k)?;
                self.delta.insert(k.clone(), None);
                old
            }
        };
        self.len -= 1;
        Some(old)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the changes have outgrown the base (see [`FOLD_MIN`]).
    pub fn needs_fold(&self) -> bool {
        self.delta.len() >= FOLD_MIN && self.delta.len() > self.base.len()
    }

    /// The whole map as one new base: what [`SharedMap::rebase`] takes.
    pub fn folded(&self) -> Arc<HashMap<K, V>> {
        let mut m = HashMap::with_capacity(self.len);
        m.extend(self.iter().map(|(k, v)| (k.clone(), *v)));
        Arc::new(m)
    }

    /// Replaces base and delta by `base`, which must hold exactly this
    /// map's entries (a [`SharedMap::folded`] of it or of a copy in the
    /// same state).
    pub fn rebase(&mut self, base: Arc<HashMap<K, V>>) {
        debug_assert_eq!(base.len(), self.len);
        self.base = base;
        self.delta = HashMap::new();
    }

    /// Heap bytes of the shared base (count it once for all copies).
    pub fn shared_bytes(&self) -> usize {
        table_bytes(&self.base)
    }

    /// Heap bytes of this copy's own changes.
    pub fn own_bytes(&self) -> usize {
        table_bytes(&self.delta)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.base
            .iter()
            .filter(|(k, _)| !self.delta.contains_key(*k))
            .chain(
                self.delta
                    .iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v))),
            )
    }
}

/// A [`SharedMap`] for reading: see [`SharedMap::view`].
pub struct SharedView<'a, K, V> {
    base: &'a HashMap<K, V>,
    /// `None` when there are no changes.
    delta: Option<&'a HashMap<K, Option<V>>>,
}

impl<K, V> Clone for SharedView<'_, K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for SharedView<'_, K, V> {}

impl<'a, K: Eq + Hash, V> SharedView<'a, K, V> {
    #[inline]
    pub fn get(self, k: &K) -> Option<&'a V> {
        if let Some(d) = self.delta {
            if let Some(v) = d.get(k) {
                return v.as_ref();
            }
        }
        self.base.get(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random inserts, replacements and removals over a bulk-loaded base,
    /// with folds and clones between: the map answers like a plain map.
    #[test]
    fn answers_like_a_plain_map_through_changes_and_folds() {
        let base: HashMap<u32, u32> = (0..1000).map(|k| (k, k)).collect();
        let mut m = SharedMap::from_base(base);
        let mut clone = m.clone();
        let mut want: BTreeMap<u32, u32> = (0..1000).map(|k| (k, k)).collect();
        let mut x = 0x9e37_79b9u32;
        for step in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let k = x % 2000;
            if x.is_multiple_of(3) {
                assert_eq!(m.remove(&k), want.remove(&k), "remove {k}");
            } else {
                assert_eq!(m.insert(k, step), want.insert(k, step), "insert {k}");
            }
            assert_eq!(m.len(), want.len());
            if step % 5000 == 4999 {
                let f = m.folded();
                m.rebase(Arc::clone(&f));
                assert!(m.delta.is_empty());
            }
        }
        for k in 0..2000 {
            assert_eq!(m.get(&k), want.get(&k), "key {k}");
        }
        let mut all: Vec<(u32, u32)> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, want.into_iter().collect::<Vec<_>>());
        // The clone taken before the changes still shows the base alone.
        assert_eq!(clone.len(), 1000);
        assert_eq!(clone.remove(&7), Some(7));
        assert_eq!(clone.get(&7), None);
        assert_eq!(clone.len(), 999);
    }

    #[test]
    fn a_removed_base_entry_stays_removed_and_can_come_back() {
        let mut m = SharedMap::from_base([(1u8, 10u8), (2, 20)].into_iter().collect());
        assert_eq!(m.remove(&1), Some(10));
        assert_eq!(m.remove(&1), None);
        assert_eq!((m.get(&1), m.len()), (None, 1));
        assert_eq!(m.insert(1, 11), None);
        assert_eq!((m.get(&1), m.len()), (Some(&11), 2));
        // A key added after the load and removed again leaves no trace.
        assert_eq!(m.insert(3, 30), None);
        assert_eq!(m.remove(&3), Some(30));
        assert!(!m.delta.contains_key(&3));
        assert!(!m.needs_fold(), "small deltas are never folded");
    }
}
