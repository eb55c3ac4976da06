//! An exact table whose bulk both left-right copies share.
//!
//! The exact tables are most of a large rule set's memory, and
//! `left_right` keeps two copies of everything it publishes: at ten
//! million flow rules that was two 790 MB hash tables, the second a serial
//! clone of the first after a bulk load (~0.5–1 s of start-up on the
//! machines measured). A [`SharedMap`] keeps a frozen *base*, shared by
//! both copies behind an `Arc`, and per copy the changes made since (the
//! *delta*: added or replaced entries, and removals of base entries). A
//! bulk load becomes the base; batches change the deltas.
//!
//! When a delta outgrows its base the changes are folded into a new shared
//! base, so churn costs amortised O(1) per update and memory stays within
//! the two-copy layout's. A fold is O(entries) — seconds at ten million —
//! so it does not run on the control thread: [`Op::Freeze`] turns the
//! delta into a third, *frozen* layer both copies share (O(1)), a
//! background thread merges base and frozen layer into a new base
//! ([`merge`]), and [`Op::Rebase`] swaps it in (O(1)) with whichever batch
//! comes next. Meanwhile lookups probe delta, frozen layer, base.
//!
//! A lookup probes each layer only when it is not empty: a bulk-loaded,
//! unchanged table costs what a plain one did.
//!
//! [`Op::Freeze`]: crate::Op::Freeze
//! [`Op::Rebase`]: crate::Op::Rebase

use std::hash::Hash;
use std::sync::Arc;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

/// Deltas smaller than this are never folded (folding is for changes on
/// the scale of the base, not for a small rule set built by batches).
const FOLD_MIN: usize = 1 << 16;

/// Changes frozen for a fold: `Some` added or replaced, `None` removed.
pub type Changes<K, V> = HashMap<K, Option<V>>;

/// What a fold merges: a base and the frozen changes on top of it.
pub type FoldInput<K, V> = (Arc<HashMap<K, V>>, Arc<Changes<K, V>>);

/// A map of a frozen shared base, the changes a fold in progress is
/// merging into it, and this copy's changes since.
#[derive(Clone, Debug)]
pub struct SharedMap<K, V> {
    base: Arc<HashMap<K, V>>,
    /// Set while a fold is in progress (both copies share it).
    frozen: Option<Arc<Changes<K, V>>>,
    /// `Some`: added or replaced; `None`: an entry of a lower layer removed.
    delta: Changes<K, V>,
    len: usize,
}

impl<K, V> Default for SharedMap<K, V> {
    fn default() -> Self {
        Self {
            base: Arc::new(HashMap::new()),
            frozen: None,
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
            frozen: None,
            delta: HashMap::new(),
        }
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        self.view().get(k)
    }

    /// The map's layers as plain references, for many lookups in a row
    /// (a worker's burst): the `Arc`s are followed once, not on every
    /// lookup (measured: exact-mode matching at 1 M rules lost 2–6 % to
    /// that dependent load, DRAM misses behind it).
    #[inline]
    pub fn view(&self) -> SharedView<'_, K, V> {
        SharedView {
            base: &self.base,
            frozen: self.frozen.as_deref(),
            delta: (!self.delta.is_empty()).then_some(&self.delta),
        }
    }

    /// The entry below the delta: the frozen layer's word, else the base's.
    fn below(&self, k: &K) -> Option<V> {
        match self.frozen.as_ref().and_then(|f| f.get(k)) {
            Some(v) => *v,
            None => self.base.get(k).copied(),
        }
    }

    /// Adds or replaces; the entry it replaced. One probe of the delta
    /// (and of the layers below only for a key the delta does not hold):
    /// the control thread does this twice per insert, once per copy.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let old = match self.delta.entry(k) {
            Entry::Occupied(mut e) => e.insert(Some(v)),
            Entry::Vacant(e) => {
                let old = match self.frozen.as_ref().and_then(|f| f.get(e.key())) {
                    Some(v) => *v,
                    None => self.base.get(e.key()).copied(),
                };
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
        let old = match self.delta.get(k) {
            // Added or replaced in this delta: a key the layers below hold
            // keeps a tombstone (`None`), any other leaves the delta.
            Some(v) => {
                let old = (*v)?;
                if self.below(k).is_some() {
                    self.delta.insert(k.clone(), None);
                } else {
                    self.delta.remove(k);
                }
                old
            }
            None => {
                let old = self.below(k)?;
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

    /// Whether to start a fold before `incoming` more changes, none being in
    /// progress: when the changes have outgrown the base (see
    /// `FOLD_MIN`), or when they are a quarter of it and `incoming` could
    /// make them double — a hash table grows by rehashing every entry at
    /// once, on the control thread (measured: pairs of 100–130 ms batches
    /// at 1.8 M changes), while a fold merges on a thread of its own.
    pub fn needs_fold(&self, incoming: usize) -> bool {
        let n = self.delta.len();
        let doubling = n + incoming > self.delta.capacity() && 4 * n >= self.base.len();
        self.frozen.is_none() && n >= FOLD_MIN && (n > self.base.len() || doubling)
    }

    /// Starts a fold: this copy's changes become the frozen layer, which
    /// the other copy takes with [`SharedMap::adopt`].
    pub fn freeze(&mut self) -> Arc<Changes<K, V>> {
        debug_assert!(self.frozen.is_none(), "one fold at a time");
        let f = Arc::new(std::mem::take(&mut self.delta));
        self.frozen = Some(Arc::clone(&f));
        f
    }

    /// Takes the frozen layer the other copy made of the same changes (both
    /// copies are in the same state at this point of the operation log).
    pub fn adopt(&mut self, frozen: &Arc<Changes<K, V>>) {
        debug_assert_eq!(self.delta.len(), frozen.len());
        self.delta = HashMap::new();
        self.frozen = Some(Arc::clone(frozen));
    }

    /// The base and frozen layer of a fold in progress, for [`merge`].
    pub fn fold_input(&self) -> Option<FoldInput<K, V>> {
        let f = self.frozen.as_ref()?;
        Some((Arc::clone(&self.base), Arc::clone(f)))
    }

    /// Ends a fold: `base` (the [`merge`] of this map's base and `frozen`)
    /// replaces both. False, changing nothing, when `frozen` is not this
    /// map's frozen layer (the map was replaced since the fold started).
    pub fn rebase(&mut self, frozen: &Arc<Changes<K, V>>, base: &Arc<HashMap<K, V>>) -> bool {
        if !self.frozen.as_ref().is_some_and(|f| Arc::ptr_eq(f, frozen)) {
            return false;
        }
        self.base = Arc::clone(base);
        self.frozen = None;
        true
    }

    /// Heap bytes of the shared layers (count them once for all copies).
    pub fn shared_bytes(&self) -> usize {
        table_bytes(&self.base) + self.frozen.as_deref().map_or(0, table_bytes)
    }

    /// Heap bytes of this copy's own changes.
    pub fn own_bytes(&self) -> usize {
        table_bytes(&self.delta)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let frozen = self.frozen.as_deref();
        let hidden = move |k: &K| self.delta.contains_key(k);
        self.base
            .iter()
            .filter(move |(k, _)| !hidden(k) && !frozen.is_some_and(|f| f.contains_key(*k)))
            .chain(
                frozen
                    .into_iter()
                    .flatten()
                    .filter(move |(k, _)| !hidden(k))
                    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v))),
            )
            .chain(
                self.delta
                    .iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| (k, v))),
            )
    }
}

/// `base` with `changes` applied, as a new base (what a fold's background
/// thread computes; built at its final size).
pub fn merge<K: Eq + Hash + Clone, V: Copy>(
    base: &HashMap<K, V>,
    changes: &Changes<K, V>,
) -> HashMap<K, V> {
    let mut n = base.len();
    for (k, v) in changes {
        match (v.is_some(), base.contains_key(k)) {
            (true, false) => n += 1,
            (false, true) => n -= 1,
            _ => {}
        }
    }
    let mut m = HashMap::with_capacity(n);
    m.extend(
        base.iter()
            .filter(|(k, _)| !changes.contains_key(*k))
            .map(|(k, v)| (k.clone(), *v)),
    );
    m.extend(
        changes
            .iter()
            .filter_map(|(k, v)| v.map(|v| (k.clone(), v))),
    );
    m
}

/// A [`SharedMap`] for reading: see [`SharedMap::view`].
pub struct SharedView<'a, K, V> {
    base: &'a HashMap<K, V>,
    /// `None` when no fold is in progress.
    frozen: Option<&'a Changes<K, V>>,
    /// `None` when there are no changes.
    delta: Option<&'a Changes<K, V>>,
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
        for layer in [self.delta, self.frozen].into_iter().flatten() {
            if let Some(v) = layer.get(k) {
                return v.as_ref();
            }
        }
        self.base.get(k)
    }
}

/// Heap bytes of a hashbrown table: one control byte and one entry per
/// bucket, plus a group of trailing control bytes.
pub fn table_bytes<K, V, S>(t: &HashMap<K, V, S>) -> usize {
    let buckets = match t.capacity() {
        0 => return 0,
        c if c < 8 => (c + 1).next_power_of_two(),
        c => (c * 8 / 7).next_power_of_two(),
    };
    buckets * (1 + std::mem::size_of::<(K, V)>()) + 16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Random inserts, replacements and removals over a bulk-loaded base,
    /// applied to two copies as left-right does, with folds started
    /// (freeze), carried on through (changes on top of the frozen layer)
    /// and finished (merge, rebase) in between: both copies answer like a
    /// plain map at every step.
    #[test]
    fn answers_like_a_plain_map_through_changes_and_folds() {
        let base: HashMap<u32, u32> = (0..1000).map(|k| (k, k)).collect();
        let mut a = SharedMap::from_base(base);
        let mut b = a.clone();
        let untouched = a.clone();
        let mut want: BTreeMap<u32, u32> = (0..1000).map(|k| (k, k)).collect();
        let mut x = 0x9e37_79b9u32;
        let mut fold: Option<FoldInput<u32, u32>> = None;
        let (mut started, mut finished) = (0, 0);
        for step in 0..30_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let k = x % 2000;
            if x.is_multiple_of(3) {
                let w = want.remove(&k);
                assert_eq!(a.remove(&k), w, "remove {k}");
                assert_eq!(b.remove(&k), w, "remove {k}, copy b");
            } else {
                let w = want.insert(k, step);
                assert_eq!(a.insert(k, step), w, "insert {k}");
                assert_eq!(b.insert(k, step), w, "insert {k}, copy b");
            }
            assert_eq!((a.len(), b.len()), (want.len(), want.len()));
            match step % 4000 {
                1000 => {
                    let f = a.freeze();
                    b.adopt(&f);
                    fold = a.fold_input();
                    started += 1;
                }
                3000 => {
                    let (base, frozen) = fold.take().expect("a fold in progress");
                    let merged = Arc::new(merge(&base, &frozen));
                    assert!(a.rebase(&frozen, &merged) && b.rebase(&frozen, &merged));
                    assert!(!a.rebase(&frozen, &merged), "a fold lands once");
                    finished += 1;
                }
                _ => {}
            }
            if step % 997 == 0 {
                for k in 0..2000 {
                    assert_eq!(a.get(&k), want.get(&k), "key {k} at step {step}");
                    assert_eq!(b.get(&k), want.get(&k), "key {k} at step {step}, copy b");
                }
            }
        }
        assert_eq!((started, finished), (8, 7));
        assert!(a.frozen.is_some(), "the last fold is still in progress");
        for m in [&a, &b] {
            let mut all: Vec<(u32, u32)> = m.iter().map(|(k, v)| (*k, *v)).collect();
            all.sort_unstable();
            assert_eq!(all, want.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
        }
        // A clone taken before the changes still shows the base alone.
        let mut c = untouched;
        assert_eq!(c.len(), 1000);
        assert_eq!(c.remove(&7), Some(7));
        assert_eq!(c.get(&7), None);
        assert_eq!(c.len(), 999);
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
        assert!(!m.needs_fold(1 << 20), "small deltas are never folded");
        // Frozen: a key of the frozen layer removed above it leaves a
        // tombstone; the merge drops it and the frozen tombstone's key.
        let f = m.freeze();
        assert_eq!(m.remove(&1), Some(11));
        assert!(m.delta.contains_key(&1));
        assert_eq!(m.insert(4, 40), None);
        let merged = merge(&m.base, &f);
        assert_eq!(merged.len(), 2, "base 1 and 2, 1 replaced: {merged:?}");
        assert!(m.rebase(&f, &Arc::new(merged)));
        let mut all: Vec<(u8, u8)> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, [(2, 20), (4, 40)]);
        assert_eq!(m.len(), 2);
    }

    /// A fold starts before a batch could make the changes double (a
    /// whole-table rehash on the control thread), once they are a quarter
    /// of the base; below that, or when the batch fits, it does not.
    #[test]
    fn a_fold_starts_before_the_changes_would_double() {
        for (base_len, starts) in [(200_000u32, true), (400_000, false)] {
            let mut m = SharedMap::from_base((0..base_len).map(|k| (k, k)).collect());
            let mut k = base_len;
            while m.delta.len() < FOLD_MIN {
                m.insert(k, 0);
                k += 1;
            }
            let room = m.delta.capacity() - m.delta.len();
            assert!(!m.needs_fold(room), "base {base_len}: the batch fits");
            assert_eq!(m.needs_fold(room + 1), starts, "base {base_len}");
            m.freeze();
            assert!(!m.needs_fold(usize::MAX), "one fold at a time");
        }
    }
}
