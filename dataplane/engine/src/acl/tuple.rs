//! The tuple space: tables of merged prefix-length shapes, each a tag map
//! of buckets of entries, and a family's tables in probe order with their
//! cuts (see the parent module's docs).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use cfdp_filter::tagmap::{pair_hash, TagMap};
use cfdp_rules::{AclMatch, AclRule, Action, IpPrefix, PortRange, RuleId};

use super::compiled::{Answer, Input, Layer, Overlay};
use super::cuts::{count, Cover, Cuts, Mask, Span};
use super::word::{Packet, Word};

/// Largest prefix-length difference between a rule and the table that
/// takes it.
pub const RELAX: u8 = 8;
/// New tables round the rule's prefix lengths down to a multiple of this.
pub const ROUND: u8 = 8;
/// Rules one bucket takes before a rule goes to a table of its own shape.
pub const MAX_BUCKET: usize = 16;
/// Rules past which a bucket keeps a small compiled tree of them, walked
/// instead of a scan (see the parent module's docs).
pub const LONG_BUCKET: usize = 32;
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

/// A rule as a bucket holds it: every field an integer compare, with what
/// a match answers (id, action, the caller's tag), so a lookup never reads
/// the rule itself (in the classifier's slab at `slot`: a random read a
/// packet, which cost a 100k-rule set's worker path a quarter of its
/// rate). 48 bytes for IPv4.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry<W> {
    pub(super) src: W,
    pub(super) src_mask: W,
    pub(super) dst: W,
    pub(super) dst_mask: W,
    pub(super) sport: (u16, u16),
    pub(super) dport: (u16, u16),
    /// 0..=255, or 256 for any.
    pub(super) proto: u16,
    pub(super) priority: u32,
    pub(super) id: RuleId,
    pub(super) action: Action,
    pub(super) tag: u32,
    pub(super) slot: u32,
}

impl<W: Word> Entry<W> {
    pub(super) fn new(r: &AclRule, slot: u32, tag: u32) -> Self {
        let m = &r.matcher;
        Self {
            src: W::of(m.src().addr()),
            src_mask: W::mask(m.src().len()),
            dst: W::of(m.dst().addr()),
            dst_mask: W::mask(m.dst().len()),
            sport: (m.sport().lo(), m.sport().hi()),
            dport: (m.dport().lo(), m.dport().hi()),
            proto: m.proto().map_or(256, u16::from),
            priority: r.priority,
            id: r.id,
            action: r.action,
            tag,
            slot,
        }
    }

    #[inline(always)]
    pub(super) fn matches(&self, p: &Packet<W>) -> bool {
        (p.src & self.src_mask) == self.src
            && (p.dst & self.dst_mask) == self.dst
            && (self.proto == 256 || self.proto == p.proto)
            && self.sport.0 <= p.sport
            && p.sport <= self.sport.1
            && self.dport.0 <= p.dport
            && p.dport <= self.dport.1
    }

    /// Whether every packet of the family matches: no address bit, no
    /// protocol and every port.
    pub(super) fn matches_all(&self) -> bool {
        self.src_mask == W::default()
            && self.dst_mask == W::default()
            && self.proto == 256
            && self.sport == (0, u16::MAX)
            && self.dport == (0, u16::MAX)
    }

    /// What a match answers, apart from the address width.
    #[inline(always)]
    pub(super) fn answer(&self) -> Answer {
        Answer {
            id: self.id,
            action: self.action,
            tag: self.tag,
            slot: self.slot,
        }
    }

    /// Higher priority, then lower id: as [`AclRule::beats`].
    #[inline(always)]
    pub(super) fn rank(&self) -> Rank {
        (self.priority, std::cmp::Reverse(self.id))
    }

    /// The rule this entry was made from, as a compile takes it; `None`
    /// if its fields are no rule's (never: see [`Small::build`]).
    fn input(&self) -> Option<Input> {
        let prefix = |a: W, mask: W| IpPrefix::new(W::V6, a.bytes(), mask.ones() as u8).ok();
        let range = |r: (u16, u16)| PortRange::new(r.0, r.1);
        let matcher = AclMatch::new(
            prefix(self.src, self.src_mask)?,
            prefix(self.dst, self.dst_mask)?,
            u8::try_from(self.proto).ok(),
            range(self.sport)?,
            range(self.dport)?,
        )
        .ok()?;
        Some(Input {
            rule: AclRule {
                id: self.id,
                priority: self.priority,
                matcher,
                action: self.action,
            },
            tag: self.tag,
            slot: self.slot,
        })
    }
}

/// A rule's rank: higher priority, then lower id, is greater.
pub(super) type Rank = (u32, std::cmp::Reverse<RuleId>);

/// One bucket's rules, best first: the first inline in the table's slot
/// (most buckets hold one rule, and a hit then reads no memory elsewhere),
/// the rest in a vector (empty: no allocation).
#[derive(Clone, Debug)]
pub(super) struct Bucket<W: Word> {
    pub(super) first: Entry<W>,
    /// A deque, so that rules arriving best first (appended) and worst
    /// first (prepended: a set loaded in ascending priority, O(K²) moves in
    /// a vector) both cost O(1) a rule.
    pub(super) rest: VecDeque<Entry<W>>,
    /// Past [`LONG_BUCKET`] rules, a small compiled tree of them all
    /// ([`compiled`](super::compiled)'s), which a lookup walks instead of
    /// scanning the rest: rules that share their masked prefixes and
    /// differ in ports and protocol (a firewall's wildcards: 233 in one
    /// bucket of ClassBench's fw4) are told apart by the tree's cuts, not
    /// checked one by one. Changed as the compiled layer is: a rule
    /// removed is marked dead in the overlay, one added is patched into
    /// the leaves it touches, and the tree is built again only when a
    /// patch is refused or the dead outnumber the living.
    pub(super) tree: Option<Box<Small<W>>>,
}

/// A long bucket's tree (shared by the classifier's clones), this copy's
/// overlay over it, and the rules added since that the overlay refused
/// (a rule wide on the field the tree cuts touches every leaf), scanned
/// after the tree until there are enough of them to build it again.
#[derive(Clone, Debug)]
pub(super) struct Small<W: Word> {
    layer: Arc<Layer<W>>,
    overlay: Overlay<W>,
    /// Best first. At most a quarter of the bucket (or half of
    /// [`LONG_BUCKET`]): the builds a bucket growing one rule at a time
    /// costs stay a geometric series.
    pending: Vec<Entry<W>>,
}

/// A bucket's match for a packet: its rank and what it answers.
pub(super) type Found = (Rank, Answer);

impl<W: Word> Bucket<W> {
    pub(super) fn new(e: Entry<W>) -> Self {
        Bucket {
            first: e,
            rest: VecDeque::new(),
            tree: None,
        }
    }

    pub(super) fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// Adds `e` at its place in the order (and to the tree).
    pub(super) fn insert(&mut self, e: Entry<W>) {
        if e.rank() > self.first.rank() {
            let old = std::mem::replace(&mut self.first, e);
            self.rest.push_front(old);
        } else {
            let at = self.rest.partition_point(|x| x.rank() > e.rank());
            self.rest.insert(at, e);
        }
        let room = (self.len() / 4).max(LONG_BUCKET / 2);
        let added = match &mut self.tree {
            Some(t) => t.add(&e, room),
            None => false,
        };
        if !added && self.len() > LONG_BUCKET {
            self.retree();
        }
    }

    /// Takes rule `id` out; false if the bucket has no such rule.
    /// The bucket may be left empty: its caller removes it.
    pub(super) fn remove(&mut self, id: RuleId) -> bool {
        if self.first.id == id {
            match self.rest.pop_front() {
                Some(next) => self.first = next,
                None => return true,
            }
        } else {
            let Some(i) = self.rest.iter().position(|x| x.id == id) else {
                return false;
            };
            self.rest.remove(i);
        }
        let len = self.len();
        let Some(t) = &mut self.tree else {
            return true;
        };
        if len <= LONG_BUCKET / 2 {
            self.tree = None;
        } else if !t.kill(id) || t.overlay.dead() > len {
            self.retree();
        }
        true
    }

    /// The tree of the bucket's rules, built again (none if the build is
    /// refused: the scan is exact either way).
    fn retree(&mut self) {
        self.tree = Small::build(std::iter::once(&self.first).chain(&self.rest)).map(Box::new);
    }

    /// The best entry matching `p`.
    #[inline(always)]
    pub(super) fn find(&self, p: &Packet<W>) -> Option<Found> {
        if self.first.matches(p) {
            return Some((self.first.rank(), self.first.answer()));
        }
        if self.rest.is_empty() {
            return None;
        }
        if let Some(t) = &self.tree {
            return t.find(p);
        }
        let (a, b) = self.rest.as_slices();
        scan(a, p)
            .or_else(|| scan(b, p))
            .map(|e| (e.rank(), e.answer()))
    }
}

impl<W: Word> Small<W> {
    /// The tree of `entries` (each back to the rule it was made from);
    /// `None` if one is not a valid rule again (it always is: each was
    /// made from one) or the build is refused.
    fn build<'a>(entries: impl Iterator<Item = &'a Entry<W>>) -> Option<Self> {
        let inputs: Vec<Input> = entries.map(Entry::input).collect::<Option<_>>()?;
        let refs: Vec<&Input> = inputs.iter().collect();
        let layer = Layer::build(&refs).ok()?;
        let overlay = layer.overlay();
        Some(Small {
            layer: Arc::new(layer),
            overlay,
            pending: Vec::new(),
        })
    }

    /// `e` into the tree through the overlay (revived in place, or
    /// patched into its leaves), else among the pending while they are
    /// fewer than `room`; false when neither takes it.
    fn add(&mut self, e: &Entry<W>, room: usize) -> bool {
        let Some(inp) = e.input() else {
            return false;
        };
        let l = &self.layer;
        if l.revive(&mut self.overlay, &inp).is_some() || l.patch(&mut self.overlay, &inp).is_ok() {
            return true;
        }
        if self.pending.len() >= room {
            return false;
        }
        let at = self.pending.partition_point(|x| x.rank() > e.rank());
        self.pending.insert(at, *e);
        true
    }

    /// Heap bytes: the tree (counted in each copy that shares it), the
    /// overlay and the pending rules.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.layer.bytes()
            + self.overlay.bytes()
            + self.pending.capacity() * std::mem::size_of::<Entry<W>>()
    }

    /// Rule `id` out (pending) or marked dead (in the tree); false if
    /// neither holds it alive.
    fn kill(&mut self, id: RuleId) -> bool {
        if let Some(i) = self.pending.iter().position(|x| x.id == id) {
            self.pending.remove(i);
            return true;
        }
        self.layer
            .live_index(&self.overlay, id)
            .is_some_and(|i| self.overlay.kill(i))
    }

    /// The best rule of the tree matching `p`: out of line, as [`scan`].
    #[inline(never)]
    fn find(&self, p: &Packet<W>) -> Option<Found> {
        let f = super::compiled::fields(p.src, p.dst, p.sport, p.dport, p.proto);
        let hit = self
            .layer
            .lookup(&f, &self.overlay)
            .map(|h| ((h.priority, std::cmp::Reverse(h.answer.id)), h.answer));
        let pending = self.pending.iter().find(|e| e.matches(p));
        match (hit, pending) {
            (Some(h), Some(e)) if e.rank() <= h.0 => Some(h),
            (_, Some(e)) => Some((e.rank(), e.answer())),
            (h, None) => h,
        }
    }
}

/// The first entry of `rest` matching `p`: out of line, so the scan of a
/// long bucket compiles to the same tight loop wherever a lookup inlines.
#[inline(never)]
pub(super) fn scan<'a, W: Word>(rest: &'a [Entry<W>], p: &Packet<W>) -> Option<&'a Entry<W>> {
    rest.iter().find(|e| e.matches(p))
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
            + self
                .buckets
                .values()
                .map(|b| {
                    b.rest.capacity() * std::mem::size_of::<Entry<W>>()
                        + b.tree.as_ref().map_or(0, |t| t.bytes())
                })
                .sum::<usize>()
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
    pub(super) cuts: Cuts<N>,
}

impl<W: Word, const N: usize> Default for Family<W, N> {
    fn default() -> Self {
        Self {
            tables: Vec::new(),
            covers: Vec::new(),
            cuts: Cuts::default(),
        }
    }
}

impl<W: Word, const N: usize> Family<W, N> {
    /// Heap bytes of the tables, their covers and the cuts.
    pub(super) fn bytes(&self) -> usize {
        self.tables.iter().map(Table::bytes).sum::<usize>()
            + self.covers.len() * std::mem::size_of::<Cover<N>>()
            + Cuts::<N>::bytes()
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

    /// Moves table `i` to its place in the order.
    pub(super) fn reorder(&mut self, i: usize) {
        let t = self.tables.remove(i);
        let at = self.tables.partition_point(|x| x.top >= t.top);
        self.tables.insert(at, t);
        if at != i {
            let c = self.covers.remove(i);
            self.covers.insert(at, c);
            // Positions are below MAX_TABLES, which fits a Mask.
            self.cuts.relocate(i as u32, at as u32);
        }
    }

    /// Counts `e` in or out of table `i`'s cover and the cut masks.
    pub(super) fn cover(&mut self, i: usize, e: &Entry<W>, add: bool) {
        let t = &mut self.covers[i];
        let c = &mut self.cuts;
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
            self.cuts.close(i as u32);
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
        if self.tables.is_empty() {
            return None;
        }
        let mut best: Option<Answer> = None;
        let mut bound = floor;
        let mut left = self.cuts.candidates(p);
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

/// Counters of lookups, for the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub packets: u64,
    pub tables: u64,
}
