//! A cuckoo hash map with tags, the map behind each table of the engine's
//! multi-field classifier: a cuckoo hash table whose buckets
//! keep 16-bit tags apart from the cells, so a probe reads two 8-byte tag
//! words and touches a cell only on a tag match (the cuckoo filter's layout,
//! Fan et al., CoNEXT 2014, with the exact key behind every tag).
//!
//! Why not `hashbrown`: a classifier lookup probes several tables per
//! packet and almost every probe misses. Here a miss costs one 32-bit hash,
//! two word loads and a few ALU operations, always two buckets whatever the
//! keys (no probe sequence a crafted packet could lengthen); a hashbrown
//! miss costs its hasher and a group scan of its own. Measured against
//! hashbrown on ClassBench, and an AVX-512 probe of one table for sixteen
//! packets at once (slower): `bench/README.md`, "Each table a cuckoo tag
//! map; vector probes tried".
//!
//! The caller hashes (the classifier's keys are masked address pairs,
//! hashed by [`pair_hash`]):
//! bits 16..32 give the tag (0 means empty, so a zero tag becomes 1), the
//! low bits the first bucket, and the second bucket is the first xor a hash
//! of the tag (partial-key cuckoo hashing), so a cell can move between its
//! two buckets without its key. Inserts walk a random eviction path; a walk
//! that fails grows the table when it is at least half full, else leaves
//! the cell it holds in a small stash every lookup also checks (so an
//! insert always ends, whatever the keys).

/// Slots per bucket (4 tags of 16 bits: one `u64`).
const SLOTS: usize = 4;
/// Evictions one insert may try before it grows the table or stashes.
const MAX_KICKS: usize = 128;
/// One in each 16-bit lane.
const LANE: u64 = 0x0001_0001_0001_0001;

/// The hash of a key made of two 32-bit words (an IPv4 source and
/// destination, masked). A fixed function: a probe reads two buckets
/// whatever the keys, so crafted packets cannot lengthen a lookup, and
/// only inserts (rule sets, which the operator pushes) place keys.
#[inline(always)]
pub fn pair_hash(a: u32, b: u32) -> u32 {
    let mut h = a.wrapping_mul(K1) ^ b.rotate_left(16).wrapping_mul(K2);
    h ^= h >> 15;
    h = h.wrapping_mul(K3);
    h ^ (h >> 13)
}

const K1: u32 = 0x9e37_79b1;
const K2: u32 = 0x85eb_ca77;
const K3: u32 = 0x2c1b_3c6d;

#[derive(Clone, Debug)]
struct Cell<K, V> {
    hash: u32,
    key: K,
    value: V,
}

/// Where a key sits: its index in `cells`, or in the stash.
enum Spot {
    Cell(usize),
    Stash(usize),
}

/// A cuckoo map with tags; see the module docs.
#[derive(Clone, Debug)]
pub struct TagMap<K, V> {
    /// Per bucket, four 16-bit tags (0: empty slot).
    tags: Vec<u64>,
    /// Bucket `i`'s slot `s` is `cells[i * SLOTS + s]`.
    cells: Vec<Option<Cell<K, V>>>,
    /// Cells no bucket took (see the module docs).
    stash: Vec<Cell<K, V>>,
    mask: u32,
    len: usize,
    /// xorshift state for the eviction walk (deterministic per map).
    rng: u32,
}

#[inline(always)]
fn tag_of(h: u32) -> u16 {
    ((h >> 16) as u16).max(1)
}

#[inline(always)]
fn alt(i: usize, tag: u16, mask: u32) -> usize {
    ((i as u32) ^ u32::from(tag).wrapping_mul(0x5bd1_e995)) as usize & mask as usize
}

/// The lanes of `word` that may hold `tag`: bit 16·s+15 for slot `s`. The
/// lowest lane reported is exact; a lane above a true match may be
/// reported too (the borrow of the zero test), which the key compare
/// rejects.
#[inline(always)]
fn lanes(word: u64, tag: u16) -> u64 {
    let x = word ^ (u64::from(tag) * LANE);
    x.wrapping_sub(LANE) & !x & (LANE << 15)
}

/// The slot of the lowest lane in a [`lanes`] mask.
#[inline(always)]
fn slot_of(m: u64) -> usize {
    (m.trailing_zeros() / 16) as usize
}

impl<K: Eq, V> Default for TagMap<K, V> {
    fn default() -> Self {
        Self {
            tags: vec![0],
            cells: (0..SLOTS).map(|_| None).collect(),
            stash: Vec::new(),
            mask: 0,
            len: 0,
            rng: 0x9e37_79b9,
        }
    }
}

impl<K: Eq, V> TagMap<K, V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value for `key` (hashed to `h`).
    #[inline(always)]
    pub fn get(&self, h: u32, key: &K) -> Option<&V> {
        match self.find(h, key)? {
            Spot::Cell(k) => self.cells[k].as_ref().map(|c| &c.value),
            Spot::Stash(k) => Some(&self.stash[k].value),
        }
    }

    pub fn get_mut(&mut self, h: u32, key: &K) -> Option<&mut V> {
        match self.find(h, key)? {
            Spot::Cell(k) => self.cells[k].as_mut().map(|c| &mut c.value),
            Spot::Stash(k) => Some(&mut self.stash[k].value),
        }
    }

    /// Where `key` is.
    #[inline(always)]
    fn find(&self, h: u32, key: &K) -> Option<Spot> {
        let tag = tag_of(h);
        let i1 = (h & self.mask) as usize;
        let i2 = alt(i1, tag, self.mask);
        for i in [i1, i2] {
            let mut m = lanes(self.tags[i], tag);
            while m != 0 {
                let s = slot_of(m);
                m &= m - 1;
                if self.cells[i * SLOTS + s]
                    .as_ref()
                    .is_some_and(|c| c.key == *key)
                {
                    return Some(Spot::Cell(i * SLOTS + s));
                }
            }
        }
        if self.stash.is_empty() {
            return None;
        }
        self.stash
            .iter()
            .position(|c| c.key == *key)
            .map(Spot::Stash)
    }

    /// Adds `key` (hashed to `h`), which must not be in the map.
    pub fn insert(&mut self, h: u32, key: K, value: V) {
        debug_assert!(self.find(h, &key).is_none(), "the key is new");
        self.len += 1;
        if self.len * 8 > self.tags.len() * SLOTS * 7 {
            self.resize(self.tags.len() * 2);
        }
        if let Some(left) = self.place(Cell {
            hash: h,
            key,
            value,
        }) {
            self.overflow(left);
        }
    }

    /// A cell the eviction walk could not seat: grow when the table is at
    /// least half full, else stash it.
    fn overflow(&mut self, left: Cell<K, V>) {
        if self.len * 2 >= self.tags.len() * SLOTS {
            self.resize(self.tags.len() * 2);
            if let Some(left) = self.place(left) {
                self.stash.push(left);
            }
        } else {
            self.stash.push(left);
        }
    }

    /// Seats `c` in one of its buckets, evicting along a random walk;
    /// returns the cell left in hand when the walk fails.
    fn place(&mut self, mut c: Cell<K, V>) -> Option<Cell<K, V>> {
        let tag = tag_of(c.hash);
        let mut i = (c.hash & self.mask) as usize;
        let i2 = alt(i, tag, self.mask);
        for b in [i, i2] {
            let free = lanes(self.tags[b], 0);
            if free != 0 {
                self.seat(b, slot_of(free), c);
                return None;
            }
        }
        if self.rng & 1 == 0 {
            i = i2;
        }
        for _ in 0..MAX_KICKS {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 17;
            self.rng ^= self.rng << 5;
            let s = self.rng as usize % SLOTS;
            let out = self.cells[i * SLOTS + s]
                .take()
                .expect("a full bucket's slots hold cells");
            self.seat(i, s, c);
            c = out;
            let j = alt(i, tag_of(c.hash), self.mask);
            let free = lanes(self.tags[j], 0);
            if free != 0 {
                self.seat(j, slot_of(free), c);
                return None;
            }
            i = j;
        }
        Some(c)
    }

    fn seat(&mut self, i: usize, s: usize, c: Cell<K, V>) {
        let shift = 16 * s;
        self.tags[i] = (self.tags[i] & !(0xffff << shift)) | (u64::from(tag_of(c.hash)) << shift);
        self.cells[i * SLOTS + s] = Some(c);
    }

    /// Rebuilds with `buckets` buckets (a power of two), doubling again
    /// while a walk fails; once the table is at most an eighth full a cell
    /// no walk seats goes to the stash instead (keys whose hashes collide
    /// in full would otherwise double it forever).
    fn resize(&mut self, mut buckets: usize) {
        let mut pending: Vec<Cell<K, V>> = std::mem::take(&mut self.cells)
            .into_iter()
            .flatten()
            .chain(std::mem::take(&mut self.stash))
            .collect();
        let n = pending.len();
        loop {
            self.tags = vec![0; buckets];
            self.cells = (0..buckets * SLOTS).map(|_| None).collect();
            self.mask = (buckets - 1) as u32;
            let sparse = buckets * SLOTS >= 8 * n;
            let mut rest = pending.into_iter();
            let mut failed = None;
            for c in rest.by_ref() {
                if let Some(left) = self.place(c) {
                    if sparse {
                        self.stash.push(left);
                    } else {
                        failed = Some(left);
                        break;
                    }
                }
            }
            let Some(left) = failed else {
                return;
            };
            pending = std::mem::take(&mut self.cells)
                .into_iter()
                .flatten()
                .chain(std::iter::once(left))
                .chain(rest)
                .collect();
            buckets *= 2;
        }
    }

    /// Removes `key` (hashed to `h`), returning its value.
    pub fn remove(&mut self, h: u32, key: &K) -> Option<V> {
        let spot = self.find(h, key)?;
        self.len -= 1;
        match spot {
            Spot::Cell(k) => {
                self.tags[k / SLOTS] &= !(0xffff << (16 * (k % SLOTS)));
                self.cells[k].take().map(|c| c.value)
            }
            Spot::Stash(k) => Some(self.stash.swap_remove(k).value),
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.cells
            .iter()
            .flatten()
            .chain(&self.stash)
            .map(|c| &c.value)
    }

    /// Heap bytes of the tags, cells and stash.
    pub fn bytes(&self) -> usize {
        self.tags.capacity() * 8
            + self.cells.capacity() * std::mem::size_of::<Option<Cell<K, V>>>()
            + self.stash.capacity() * std::mem::size_of::<Cell<K, V>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u32),
        Remove(u32),
    }

    /// Keys hash to a few values only (in `0..spread`), so buckets fill,
    /// walks fail, the table grows and the stash takes keys whose hashes
    /// collide in full.
    fn ops(spread: u32) -> impl Strategy<Value = Vec<Op>> {
        prop::collection::vec(
            prop_oneof![
                3 => (0..400u32, 0..spread).prop_map(|(k, h)| Op::Insert(k, h)),
                1 => (0..400u32).prop_map(Op::Remove),
            ],
            0..600,
        )
    }

    fn check(ops: Vec<Op>) {
        let mut m = TagMap::default();
        let mut model: HashMap<u32, (u32, u32)> = HashMap::new();
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Insert(k, h) => {
                    let h = pair_hash(h, 0);
                    if let Some(&(mh, _)) = model.get(&k) {
                        *m.get_mut(mh, &k).expect("present") = n as u32;
                        model.insert(k, (mh, n as u32));
                    } else {
                        m.insert(h, k, n as u32);
                        model.insert(k, (h, n as u32));
                    }
                }
                Op::Remove(k) => {
                    let want = model.remove(&k);
                    let h = want.map_or(0, |(h, _)| h);
                    assert_eq!(m.remove(h, &k), want.map(|(_, v)| v), "remove {k}");
                }
            }
            assert_eq!(m.len(), model.len());
        }
        for (k, (h, v)) in &model {
            assert_eq!(m.get(*h, k), Some(v), "key {k}");
        }
        assert_eq!(m.values().count(), model.len());
    }

    proptest! {
        #[test]
        fn agrees_with_a_hash_map(ops in ops(u32::MAX)) {
            check(ops);
        }

        #[test]
        fn colliding_hashes_grow_or_stash_and_lose_nothing(ops in ops(3)) {
            check(ops);
        }

    }
}
