//! The tuple space: tables of merged prefix-length shapes, each a tag map
//! of buckets of entries, and a family's tables in probe order with their
//! cuts (see the parent module's docs).

use std::collections::BTreeMap;

use cfdp_filter::tagmap::{pair_hash, TagMap};
use cfdp_rules::AclRule;

use super::bucket::{Bucket, Entry, Found, Rank};
use super::compiled::{Answer, Hit};
use super::cuts::{count, Cover, Cuts, Mask, Span};
use super::word::{Packet, Word};

/// Largest prefix-length difference between a rule and the table that
/// takes it.
pub const RELAX: u8 = 8;
/// New tables round the rule's prefix lengths down to a multiple of this.
pub const ROUND: u8 = 8;
/// Rules one bucket takes before a rule goes to a table of its own shape.
pub const MAX_BUCKET: usize = 16;
/// Most tables per address family (a table is one bit of a cut mask).
pub const MAX_TABLES: usize = 32;
const _: () = assert!(MAX_TABLES <= Mask::BITS as usize);

/// A table's shape: the prefix bits it hashes. The protocol and the ports
/// are verified, never hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub v6: bool,
    pub src_len: u8,
    pub dst_len: u8,
}

impl Tuple {
    /// Whether a rule of shape `r` can live in a table of this shape.
    pub(super) fn admits(&self, r: &Tuple) -> bool {
        self.v6 == r.v6 && self.src_len <= r.src_len && self.dst_len <= r.dst_len
    }

    pub(super) fn specificity(&self) -> u16 {
        u16::from(self.src_len) + u16::from(self.dst_len)
    }

    pub(super) fn of(r: &AclRule) -> Tuple {
        Tuple {
            v6: r.matcher.v6(),
            src_len: r.matcher.src().len(),
            dst_len: r.matcher.dst().len(),
        }
    }

    /// Whether a rule of shape `r` is within [`RELAX`] bits of this shape.
    pub(super) fn close(&self, r: &Tuple) -> bool {
        r.src_len - self.src_len <= RELAX && r.dst_len - self.dst_len <= RELAX
    }
}

/// One table: rules of shapes its tuple admits, bucketed by their masked
/// prefixes, each bucket best first (a scan stops at its first match).
#[derive(Clone)]
pub(super) struct Table<W: Word> {
    pub(super) tuple: Tuple,
    pub(super) src_mask: W,
    pub(super) dst_mask: W,
    pub(super) buckets: TagMap<(W, W), Bucket<W>>,
    /// Priorities held, with their counts: the maximum in O(log n) after a
    /// delete.
    pub(super) priorities: BTreeMap<u32, u32>,
    /// The highest priority held, cached for the lookup's early exit.
    pub(super) top: u32,
    pub(super) rules: usize,
}

impl<W: Word> Table<W> {
    pub(super) fn new(tuple: Tuple) -> Self {
        Self {
            tuple,
            src_mask: W::mask(tuple.src_len),
            dst_mask: W::mask(tuple.dst_len),
            buckets: TagMap::default(),
            priorities: BTreeMap::new(),
            top: 0,
            rules: 0,
        }
    }

    pub(super) fn key(&self, e: &Entry<W>) -> (W, W) {
        (e.src & self.src_mask, e.dst & self.dst_mask)
    }

    #[inline(always)]
    pub(super) fn hash(key: (W, W)) -> u32 {
        pair_hash(key.0.fold(), key.1.fold())
    }

    pub(super) fn bucket_len(&self, e: &Entry<W>) -> usize {
        let key = self.key(e);
        self.buckets
            .get(Self::hash(key), &key)
            .map_or(0, Bucket::len)
    }

    pub(super) fn insert(&mut self, e: Entry<W>) {
        let key = self.key(&e);
        let h = Self::hash(key);
        match self.buckets.get_mut(h, &key) {
            Some(b) => b.insert(e),
            None => self.buckets.insert(h, key, Bucket::new(e)),
        }
        *self.priorities.entry(e.priority).or_default() += 1;
        self.top = self.top.max(e.priority);
        self.rules += 1;
    }

    pub(super) fn remove(&mut self, e: &Entry<W>) -> bool {
        let key = self.key(e);
        let h = Self::hash(key);
        let Some(b) = self.buckets.get_mut(h, &key) else {
            return false;
        };
        let last = b.len() == 1 && b.first.id == e.id;
        if last {
            self.buckets.remove(h, &key);
        } else if !b.remove(e.id) {
            return false;
        }
        if let Some(n) = self.priorities.get_mut(&e.priority) {
            *n -= 1;
            if *n == 0 {
                self.priorities.remove(&e.priority);
            }
        }
        self.top = self.priorities.keys().next_back().copied().unwrap_or(0);
        self.rules -= 1;
        true
    }

    /// The best entry of this table matching `p`.
    #[inline(always)]
    pub(super) fn lookup(&self, p: &Packet<W>) -> Option<Found> {
        let key = (p.src & self.src_mask, p.dst & self.dst_mask);
        self.buckets.get(Self::hash(key), &key)?.find(p)
    }

    pub(super) fn bytes(&self) -> usize {
        self.buckets.bytes()
            + self.buckets.values().map(Bucket::bytes).sum::<usize>()
            + self.priorities.len() * 32
    }
}

/// The tables of one address family, ordered by the highest priority they
/// hold; `N` is the number of its cut windows (`W::CUT_AT.len()`).
#[derive(Clone)]
pub(super) struct Family<W: Word, const N: usize> {
    pub(super) tables: Vec<Table<W>>,
    /// Each table's [`Cover`], in the same order: apart from the tables, so
    /// that a lookup's walk over them reads nothing an update alone needs.
    pub(super) covers: Vec<Box<Cover<N>>>,
    /// Allocated with the family's first table (an IPv4-only set keeps
    /// no IPv6 cuts: 66 KB; a compiled set none until an update goes
    /// live), kept after its last.
    pub(super) cuts: Option<Cuts<N>>,
}

impl<W: Word, const N: usize> Default for Family<W, N> {
    fn default() -> Self {
        Self {
            tables: Vec::new(),
            covers: Vec::new(),
            cuts: None,
        }
    }
}

impl<W: Word, const N: usize> Family<W, N> {
    /// Heap bytes of the tables, their covers and the cuts.
    pub(super) fn bytes(&self) -> usize {
        self.tables.iter().map(Table::bytes).sum::<usize>()
            + self.covers.iter().map(|c| c.bytes()).sum::<usize>()
            + self.cuts.as_ref().map_or(0, |_| Cuts::<N>::bytes())
    }

    pub(super) fn position(&self, tuple: Tuple) -> Option<usize> {
        self.tables.iter().position(|t| t.tuple == tuple)
    }

    /// The index of the table a rule of shape `shape` (as entry `e`) goes
    /// into, creating it when needed (see the module docs).
    pub(super) fn table_for(&mut self, shape: Tuple, e: &Entry<W>) -> usize {
        let best = self
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| {
                t.tuple.admits(&shape) && t.tuple.close(&shape) && t.bucket_len(e) < MAX_BUCKET
            })
            .max_by_key(|(_, t)| t.tuple.specificity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return i;
        }
        // The last table a family may open is its catch-all, which every
        // rule of the family fits: the bound holds whatever comes next.
        let full = self.tables.len() + 1 >= MAX_TABLES;
        if full {
            if let Some((i, _)) = self
                .tables
                .iter()
                .enumerate()
                .filter(|(_, t)| t.tuple.admits(&shape))
                .max_by_key(|(_, t)| t.tuple.specificity())
            {
                return i;
            }
        }
        let crowded = self.tables.iter().any(|t| {
            t.tuple.admits(&shape) && t.tuple.close(&shape) && t.bucket_len(e) >= MAX_BUCKET
        });
        let tuple = if full {
            Tuple {
                v6: shape.v6,
                src_len: 0,
                dst_len: 0,
            }
        } else if crowded {
            shape
        } else {
            Tuple {
                src_len: shape.src_len - shape.src_len % ROUND,
                dst_len: shape.dst_len - shape.dst_len % ROUND,
                ..shape
            }
        };
        if let Some(i) = self.position(tuple) {
            return i;
        }
        // A new table is last in the order, its bit clear in every mask.
        self.tables.push(Table::new(tuple));
        self.covers.push(Box::default());
        self.tables.len() - 1
    }

    /// The cuts, allocated on first use.
    fn cuts_mut(&mut self) -> &mut Cuts<N> {
        self.cuts.get_or_insert_with(Cuts::default)
    }

    /// Moves table `i` to its place in the order.
    pub(super) fn reorder(&mut self, i: usize) {
        let t = self.tables.remove(i);
        let at = self.tables.partition_point(|x| x.top >= t.top);
        self.tables.insert(at, t);
        if at != i {
            let c = self.covers.remove(i);
            self.covers.insert(at, c);
            // Positions are below MAX_TABLES, which fits a Mask.
            self.cuts_mut().relocate(i as u32, at as u32);
        }
    }

    /// Counts `e` in or out of table `i`'s cover and the cut masks.
    pub(super) fn cover(&mut self, i: usize, e: &Entry<W>, add: bool) {
        let t = &mut self.covers[i];
        let c = self.cuts.get_or_insert_with(Cuts::default);
        let bit: Mask = 1 << i;
        for (w, &at) in W::CUT_AT.iter().enumerate().take(N) {
            for (cover, cut, addr, mask) in [
                (&mut t.src[w], &mut c.src[w], e.src, e.src_mask),
                (&mut t.dst[w], &mut c.dst[w], e.dst, e.dst_mask),
            ] {
                count(cover, cut, Span::of_prefix(addr, mask, at), bit, add);
            }
        }
        count(
            &mut t.proto,
            &mut c.proto,
            Span::of_proto(e.proto),
            bit,
            add,
        );
    }

    pub(super) fn insert(&mut self, shape: Tuple, e: Entry<W>) -> Tuple {
        let i = self.table_for(shape, &e);
        self.tables[i].insert(e);
        self.cover(i, &e, true);
        let tuple = self.tables[i].tuple;
        self.reorder(i);
        tuple
    }

    pub(super) fn remove(&mut self, tuple: Tuple, e: &Entry<W>) {
        let i = self.position(tuple).expect("a rule's table exists");
        let removed = self.tables[i].remove(e);
        debug_assert!(removed, "the index and the table agree");
        self.cover(i, e, false);
        if self.tables[i].rules == 0 {
            self.tables.remove(i);
            self.covers.remove(i);
            self.cuts_mut().close(i as u32);
        } else {
            self.reorder(i);
        }
    }

    /// The best entry for `p`: the candidate tables (see [`Cuts`]) in
    /// order, stopping once none is left or no later table can beat the
    /// best match found.
    ///
    /// `floor` is the rank a match must beat (the compiled layer's winner):
    /// only a better entry is returned.
    #[inline(always)]
    pub(super) fn classify(
        &self,
        p: &Packet<W>,
        probes: &mut Probes,
        floor: Option<Rank>,
    ) -> Option<Answer> {
        // An empty layer (a compiled set with no change since): no cut to
        // read.
        let cuts = self.cuts.as_ref().filter(|_| !self.tables.is_empty())?;
        let mut best: Option<Answer> = None;
        let mut bound = floor;
        let mut left = cuts.candidates(p);
        while left != 0 {
            let Some(t) = self.tables.get(left.trailing_zeros() as usize) else {
                break;
            };
            if bound.is_some_and(|b| b.0 > t.top) {
                break;
            }
            left &= left - 1;
            probes.tables += 1;
            if let Some((rank, answer)) = t.lookup(p) {
                if bound.is_none_or(|b| rank > b) {
                    best = Some(answer);
                    bound = Some(rank);
                }
            }
        }
        best
    }
}

impl<W: Word, const N: usize> Family<W, N> {
    /// Whether the family holds no rule (a lookup reads no table).
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// The better of a compiled hit and this family's winner for `p` (the
    /// hit's rank is the one to beat).
    #[inline(always)]
    pub(super) fn merge(
        &self,
        p: &Packet<W>,
        hit: Option<&Hit>,
        probes: &mut Probes,
    ) -> Option<Answer> {
        // No table (a set compiled and not changed since): the hit, with
        // no rank computed for a floor nothing reads.
        if self.is_empty() {
            return hit.map(|h| h.answer);
        }
        match self.classify(p, probes, hit.map(Hit::rank)) {
            Some(a) => Some(a),
            None => hit.map(|h| h.answer),
        }
    }
}

/// Counters of lookups, for the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub packets: u64,
    pub tables: u64,
}
