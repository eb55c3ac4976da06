//! A multi-field classifier with priorities: tuple space search over a few
//! merged tuples, each table a cuckoo map of masked keys with 16-bit tags
//! ([`cfdp_filter::TagMap`]: a probe hashes once and reads two tag words,
//! a cell only on a tag match).
//!
//! Every rule lives in one table whose *tuple* (source and destination
//! prefix lengths) is no more specific than the rule itself, as TupleMerge
//! does (Daly, Liu, Torng, "A Difference Resolution Approach to Compressing
//! Access Control Lists", and "TupleMerge: Fast Software Packet Processing
//! for Online Packet Classification", IEEE/ACM ToN 2019): a table's key
//! keeps only the tuple's bits, so rules of many shapes share one table,
//! and a hit is verified against the rule's own fields (ports and the bits
//! the tuple left out). Ports never enter the key: ranges cost no
//! expansion.
//!
//! * A new rule goes into the most specific existing table it fits within
//!   [`RELAX`] bits per prefix, else into a new table whose tuple is the
//!   rule's lengths rounded down to a multiple of [`ROUND`] bits; a bucket
//!   that would exceed [`MAX_BUCKET`] rules sends the rule to a table of its
//!   exact shape instead (rules that differ only in ports share a bucket
//!   whatever its tuple, so a bucket can still grow: such rules are sorted
//!   and the scan stops at the first match).
//! * At most [`MAX_TABLES`] tables per address family: past it a rule goes
//!   into the most specific table it fits, so a crafted rule set cannot make
//!   a packet probe more tables (the Tuple Space Explosion attack).
//! * Tables are ordered by the highest priority they hold (OVS
//!   `classifier.c`); a lookup stops as soon as no later table can beat the
//!   best match found. A bucket keeps its rules best first, so its scan
//!   stops at its first match.
//! * Before any table, a few loads ([`Cuts`]: 12-bit windows of each
//!   address, and the protocol) name the tables that hold a rule covering
//!   the packet on each field; the lookup probes only those, and a packet
//!   no table covers costs no probe at all (the miss trace, and traffic
//!   aimed at a set of many shapes). IPv4 reads its leading 12 bits; IPv6,
//!   whose addresses mostly share their leading bits (2000::/3), reads two
//!   windows instead ([`Word::CUT_AT`]).
//!
//! Updates touch one table: insert and delete are a hash-table operation
//! plus a sorted insert into one bucket (no rebuild).

pub mod compiled;

use std::collections::BTreeMap;
use std::ops::BitAnd;
use std::sync::Arc;

use compiled::{Compiled, Dead, Hit, Input, LANES};

use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, RuleId};
use hashbrown::HashMap;

use cfdp_filter::tagmap::{pair_hash, TagMap};

/// Largest prefix-length difference between a rule and the table that
/// takes it.
pub const RELAX: u8 = 8;
/// New tables round the rule's prefix lengths down to a multiple of this.
pub const ROUND: u8 = 8;
/// Rules one bucket takes before a rule goes to a table of its own shape.
pub const MAX_BUCKET: usize = 16;
/// Most tables per address family (a table is one bit of a cut mask).
pub const MAX_TABLES: usize = 32;
/// Leading address bits that index the cut arrays (see [`Cuts`]).
pub const CUT_BITS: u32 = 12;
const CUTS: usize = 1 << CUT_BITS;
/// Prefixes shorter than this are counted once as covering every index
/// (at most 2^8 indices a rule otherwise).
pub const WIDE_BELOW: u32 = CUT_BITS - 8;
/// A set of tables, by position in the probe order (see [`Cuts`]).
type Mask = u32;
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
    fn admits(&self, r: &Tuple) -> bool {
        self.v6 == r.v6 && self.src_len <= r.src_len && self.dst_len <= r.dst_len
    }

    fn specificity(&self) -> u16 {
        u16::from(self.src_len) + u16::from(self.dst_len)
    }

    fn of(r: &AclRule) -> Tuple {
        Tuple {
            v6: r.matcher.v6(),
            src_len: r.matcher.src().len(),
            dst_len: r.matcher.dst().len(),
        }
    }

    /// Whether a rule of shape `r` is within [`RELAX`] bits of this shape.
    fn close(&self, r: &Tuple) -> bool {
        r.src_len - self.src_len <= RELAX && r.dst_len - self.dst_len <= RELAX
    }
}

/// An address as one machine word: `u32` for IPv4, `u128` for IPv6.
trait Word: Copy + Eq + BitAnd<Output = Self> + Default + std::fmt::Debug {
    fn of(a: &[u8; 16]) -> Self;
    /// The first `len` bits.
    fn mask(len: u8) -> Self;
    /// Where the address's cut windows start (see [`Cuts`]): the bit
    /// offsets of its [`CUT_BITS`]-bit indices, one cut array each.
    const CUT_AT: &'static [u32];
    /// 32 bits for the table hash.
    fn fold(self) -> u32;
    /// Bits `at..at + CUT_BITS`: the index into a window's cut array.
    fn cut(self, at: u32) -> usize;
    /// The bits set (a mask's prefix length).
    fn ones(self) -> u32;
}

impl Word for u32 {
    const CUT_AT: &'static [u32] = &[0];
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u32::from_be_bytes([a[0], a[1], a[2], a[3]])
    }
    #[inline(always)]
    fn mask(len: u8) -> Self {
        u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        self
    }
    #[inline(always)]
    fn cut(self, at: u32) -> usize {
        ((self << at) >> (32 - CUT_BITS)) as usize
    }
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

impl Word for u128 {
    /// Bits 16–28, below a regional registry's block: they tell apart the
    /// allocations of different organisations (/19–/32); and bits 32–44,
    /// below an organisation's /32: its sites (/36–/48). The leading bits
    /// would not help: global unicast addresses share 2000::/3. A prefix
    /// that ends before a window is wide in it (every index).
    const CUT_AT: &'static [u32] = &[16, 32];
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u128::from_be_bytes(*a)
    }
    #[inline(always)]
    fn mask(len: u8) -> Self {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }
    #[inline(always)]
    fn fold(self) -> u32 {
        let w = |i: u32| (self >> (32 * i)) as u32;
        w(3) ^ w(2).wrapping_mul(0xcc9e_2d51)
            ^ w(1).wrapping_mul(0x1b87_3593)
            ^ w(0).rotate_left(11)
    }
    #[inline(always)]
    fn cut(self, at: u32) -> usize {
        ((self << at) >> (128 - CUT_BITS)) as usize
    }
    fn ones(self) -> u32 {
        self.count_ones()
    }
}

/// A rule as a bucket holds it: every field an integer compare, with what
/// a match answers (id, action, the caller's tag), so a lookup never reads
/// the rule itself (in the classifier's slab at `slot`: a random read a
/// packet, which cost a 100k-rule set's worker path a quarter of its
/// rate). 48 bytes for IPv4.
#[derive(Clone, Copy, Debug)]
struct Entry<W> {
    src: W,
    src_mask: W,
    dst: W,
    dst_mask: W,
    sport: (u16, u16),
    dport: (u16, u16),
    /// 0..=255, or 256 for any.
    proto: u16,
    priority: u32,
    id: RuleId,
    action: Action,
    tag: u32,
    slot: u32,
}

impl<W: Word> Entry<W> {
    fn new(r: &AclRule, slot: u32, tag: u32) -> Self {
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
    fn matches(&self, p: &Packet<W>) -> bool {
        (p.src & self.src_mask) == self.src
            && (p.dst & self.dst_mask) == self.dst
            && (self.proto == 256 || self.proto == p.proto)
            && self.sport.0 <= p.sport
            && p.sport <= self.sport.1
            && self.dport.0 <= p.dport
            && p.dport <= self.dport.1
    }

    /// What a match answers, apart from the address width.
    #[inline(always)]
    fn answer(&self) -> Answer {
        Answer {
            id: self.id,
            action: self.action,
            tag: self.tag,
            slot: self.slot,
        }
    }

    /// Higher priority, then lower id: as [`AclRule::beats`].
    #[inline(always)]
    fn rank(&self) -> Rank {
        (self.priority, std::cmp::Reverse(self.id))
    }
}

/// A rule's rank: higher priority, then lower id, is greater.
type Rank = (u32, std::cmp::Reverse<RuleId>);

/// A winning entry's answer, the same for both families and both layers.
#[derive(Clone, Copy)]
struct Answer {
    id: RuleId,
    action: Action,
    tag: u32,
    slot: u32,
}

impl Answer {
    #[inline(always)]
    fn of_hit(h: &Hit) -> Self {
        Self {
            id: h.id,
            action: h.action,
            tag: h.tag,
            slot: h.slot,
        }
    }
}

/// One bucket's rules, best first: the first inline in the table's slot
/// (most buckets hold one rule, and a hit then reads no memory elsewhere),
/// the rest in a vector (empty: no allocation).
#[derive(Clone, Debug)]
struct Bucket<W> {
    first: Entry<W>,
    rest: Vec<Entry<W>>,
}

impl<W: Word> Bucket<W> {
    fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// Adds `e` at its place in the order.
    fn insert(&mut self, e: Entry<W>) {
        if e.rank() > self.first.rank() {
            let old = std::mem::replace(&mut self.first, e);
            self.rest.insert(0, old);
        } else {
            let at = self.rest.partition_point(|x| x.rank() > e.rank());
            self.rest.insert(at, e);
        }
    }

    /// The best entry matching `p`.
    #[inline(always)]
    fn find(&self, p: &Packet<W>) -> Option<&Entry<W>> {
        if self.first.matches(p) {
            return Some(&self.first);
        }
        if self.rest.is_empty() {
            return None;
        }
        scan(&self.rest, p)
    }
}

/// The first entry of `rest` matching `p`: out of line, so the scan of a
/// long bucket compiles to the same tight loop wherever a lookup inlines.
#[inline(never)]
fn scan<'a, W: Word>(rest: &'a [Entry<W>], p: &Packet<W>) -> Option<&'a Entry<W>> {
    rest.iter().find(|e| e.matches(p))
}

/// A packet's fields as the tables compare them.
struct Packet<W> {
    src: W,
    dst: W,
    proto: u16,
    sport: u16,
    dport: u16,
}

impl<W: Word> Packet<W> {
    #[inline(always)]
    fn of(k: &FlowKey) -> Self {
        Self {
            src: W::of(&k.src),
            dst: W::of(&k.dst),
            proto: u16::from(k.proto),
            sport: k.sport,
            dport: k.dport,
        }
    }
}

/// Which tables can match a packet, from a window of its address bits and
/// its protocol: bit `b` of `src` at index `i` is set when the table at
/// position `b` of the probe order holds a rule whose source prefix covers
/// window bits `i`, and likewise for `dst` and `proto`. A lookup probes
/// only the tables set in every array, in order, by walking the bits, so a
/// packet far from a table's rules costs a few loads for all tables
/// instead of a probe each (a cut on each field ahead of the tuple space,
/// in the spirit of CutTSS's field cuts); a miss stops at once. The bits
/// follow the tables' positions: a table that moves in the order moves its
/// bit in every mask ([`Cuts::remap`], a few bit operations a word).
///
/// An address family reads `N` windows of each address ([`Word::CUT_AT`]:
/// IPv4 its leading 12 bits, IPv6 bits 16–28 and 32–44), an array each; a
/// table passes when it passes all of them.
///
/// Kept exact under updates by each table's [`Cover`] counts. The fields
/// and windows are independent (a table passes when *some* rule covers the
/// source bits and *some* rule the destination's), which keeps an update
/// to a few hundred counter steps per array where a joint array would take
/// their product.
#[derive(Clone)]
struct Cuts<const N: usize> {
    src: [Cut<CUTS>; N],
    dst: [Cut<CUTS>; N],
    proto: Cut<256>,
}

impl<const N: usize> Default for Cuts<N> {
    fn default() -> Self {
        Self {
            src: std::array::from_fn(|_| Cut::default()),
            dst: std::array::from_fn(|_| Cut::default()),
            proto: Cut::default(),
        }
    }
}

/// One field's cut: a mask of tables per index, and the tables holding a
/// rule that covers every index (`wide`: a prefix shorter than
/// [`WIDE_BELOW`] bits, or any protocol), so that such a rule costs an
/// update one step instead of thousands.
#[derive(Clone)]
struct Cut<const N: usize> {
    masks: Box<[Mask; N]>,
    wide: Mask,
}

impl<const N: usize> Default for Cut<N> {
    fn default() -> Self {
        Self {
            masks: Box::new([0; N]),
            wide: 0,
        }
    }
}

impl<const N: usize> Cut<N> {
    #[inline(always)]
    fn get(&self, i: usize) -> Mask {
        self.masks[i] | self.wide
    }

    fn remap(&mut self, f: impl Fn(Mask) -> Mask) {
        for m in self.masks.iter_mut() {
            *m = f(*m);
        }
        self.wide = f(self.wide);
    }
}

impl<const N: usize> Cuts<N> {
    /// Applies `f` to every mask.
    fn remap(&mut self, f: impl Fn(Mask) -> Mask + Copy) {
        for c in self.src.iter_mut().chain(&mut self.dst) {
            c.remap(f);
        }
        self.proto.remap(f);
    }

    /// Heap bytes of the arrays.
    fn bytes() -> usize {
        (2 * N * CUTS + 256) * std::mem::size_of::<Mask>()
    }

    /// Moves every mask's bit `from` to `to`, shifting the bits between.
    fn relocate(&mut self, from: u32, to: u32) {
        let low_from: Mask = (1 << from) - 1;
        let low_to: Mask = (1 << to) - 1;
        self.remap(|m| {
            let b = (m >> from) & 1;
            let m = (m & low_from) | ((m >> 1) & !low_from);
            (m & low_to) | ((m & !low_to) << 1) | (b << to)
        });
    }

    /// Drops bit `at` (a removed table's, clear in every mask), shifting
    /// the bits above it down.
    fn close(&mut self, at: u32) {
        let low: Mask = (1 << at) - 1;
        self.remap(|m| (m & low) | ((m >> 1) & !low));
    }

    /// The tables that may hold a match for `p` (`W::CUT_AT` has `N`
    /// windows).
    #[inline(always)]
    fn candidates<W: Word>(&self, p: &Packet<W>) -> Mask {
        let mut m = self.proto.get(usize::from(p.proto as u8));
        for (w, &at) in W::CUT_AT.iter().enumerate().take(N) {
            m &= self.src[w].get(p.src.cut(at)) & self.dst[w].get(p.dst.cut(at));
        }
        m
    }
}

/// One table's rules counted by the cut indices they cover: its position's
/// bit in [`Cuts`] is set exactly where its count is not zero. Read only by
/// updates.
#[derive(Clone)]
struct Cover<const N: usize> {
    src: [FieldCover<CUTS>; N],
    dst: [FieldCover<CUTS>; N],
    proto: FieldCover<256>,
}

impl<const N: usize> Default for Cover<N> {
    fn default() -> Self {
        Self {
            src: std::array::from_fn(|_| FieldCover::default()),
            dst: std::array::from_fn(|_| FieldCover::default()),
            proto: FieldCover::default(),
        }
    }
}

#[derive(Clone)]
struct FieldCover<const N: usize> {
    counts: [u32; N],
    wide: u32,
}

impl<const N: usize> Default for FieldCover<N> {
    fn default() -> Self {
        Self {
            counts: [0; N],
            wide: 0,
        }
    }
}

/// The indices of a field one rule covers.
enum Span {
    /// Every index (see [`Cut`]).
    Wide,
    Some(std::ops::Range<usize>),
}

impl Span {
    /// A prefix's (`addr` under `mask`) in the window at bit `at`: one
    /// index for a prefix that reaches [`CUT_BITS`] into the window, the
    /// indices it leaves open for one that ends inside it, down to
    /// [`WIDE_BELOW`] bits into it, and wide below that (a prefix that ends
    /// before the window covers all of it).
    fn of_prefix<W: Word>(addr: W, mask: W, at: u32) -> Self {
        let len = mask.ones();
        if len < at + WIDE_BELOW {
            return Span::Wide;
        }
        // `addr` has no host bits (an `IpPrefix` is valid by construction).
        let start = addr.cut(at);
        Span::Some(start..start + (1 << CUT_BITS.saturating_sub(len - at)))
    }

    /// A protocol's (256: any).
    fn of_proto(proto: u16) -> Self {
        if proto == 256 {
            Span::Wide
        } else {
            let p = usize::from(proto);
            Span::Some(p..p + 1)
        }
    }
}

/// Counts one rule in (`add`) or out of `cover` over `span`, setting or
/// clearing `bit` in `cut` where a count leaves or reaches zero.
fn count<const N: usize>(
    cover: &mut FieldCover<N>,
    cut: &mut Cut<N>,
    span: Span,
    bit: Mask,
    add: bool,
) {
    match span {
        Span::Wide if add => {
            cover.wide += 1;
            cut.wide |= bit;
        }
        Span::Wide => {
            cover.wide -= 1;
            if cover.wide == 0 {
                cut.wide &= !bit;
            }
        }
        Span::Some(r) => {
            let pairs = cover.counts[r.clone()].iter_mut().zip(&mut cut.masks[r]);
            // Branch-free bodies: the loops vectorize.
            if add {
                for (n, m) in pairs {
                    *n += 1;
                    *m |= bit;
                }
            } else {
                for (n, m) in pairs {
                    *n -= 1;
                    *m &= !(bit * Mask::from(*n == 0));
                }
            }
        }
    }
}

/// One table: rules of shapes its tuple admits, bucketed by their masked
/// prefixes, each bucket best first (a scan stops at its first match).
#[derive(Clone)]
struct Table<W> {
    tuple: Tuple,
    src_mask: W,
    dst_mask: W,
    buckets: TagMap<(W, W), Bucket<W>>,
    /// Priorities held, with their counts: the maximum in O(log n) after a
    /// delete.
    priorities: BTreeMap<u32, u32>,
    /// The highest priority held, cached for the lookup's early exit.
    top: u32,
    rules: usize,
}

impl<W: Word> Table<W> {
    fn new(tuple: Tuple) -> Self {
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

    fn key(&self, e: &Entry<W>) -> (W, W) {
        (e.src & self.src_mask, e.dst & self.dst_mask)
    }

    #[inline(always)]
    fn hash(key: (W, W)) -> u32 {
        pair_hash(key.0.fold(), key.1.fold())
    }

    fn bucket_len(&self, e: &Entry<W>) -> usize {
        let key = self.key(e);
        self.buckets
            .get(Self::hash(key), &key)
            .map_or(0, Bucket::len)
    }

    fn insert(&mut self, e: Entry<W>) {
        let key = self.key(&e);
        let h = Self::hash(key);
        match self.buckets.get_mut(h, &key) {
            Some(b) => b.insert(e),
            None => self.buckets.insert(
                h,
                key,
                Bucket {
                    first: e,
                    rest: Vec::new(),
                },
            ),
        }
        *self.priorities.entry(e.priority).or_default() += 1;
        self.top = self.top.max(e.priority);
        self.rules += 1;
    }

    fn remove(&mut self, e: &Entry<W>) -> bool {
        let key = self.key(e);
        let h = Self::hash(key);
        let Some(b) = self.buckets.get_mut(h, &key) else {
            return false;
        };
        if b.first.id == e.id {
            if b.rest.is_empty() {
                self.buckets.remove(h, &key);
            } else {
                b.first = b.rest.remove(0);
            }
        } else {
            let Some(i) = b.rest.iter().position(|x| x.id == e.id) else {
                return false;
            };
            b.rest.remove(i);
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
    fn lookup(&self, p: &Packet<W>) -> Option<&Entry<W>> {
        let key = (p.src & self.src_mask, p.dst & self.dst_mask);
        self.buckets.get(Self::hash(key), &key)?.find(p)
    }

    fn bytes(&self) -> usize {
        self.buckets.bytes()
            + self
                .buckets
                .values()
                .map(|b| b.rest.capacity() * std::mem::size_of::<Entry<W>>())
                .sum::<usize>()
            + self.priorities.len() * 32
    }
}

/// The tables of one address family, ordered by the highest priority they
/// hold; `N` is the number of its cut windows (`W::CUT_AT.len()`).
#[derive(Clone)]
struct Family<W, const N: usize> {
    tables: Vec<Table<W>>,
    /// Each table's [`Cover`], in the same order: apart from the tables, so
    /// that a lookup's walk over them reads nothing an update alone needs.
    covers: Vec<Box<Cover<N>>>,
    cuts: Cuts<N>,
}

impl<W, const N: usize> Default for Family<W, N> {
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
    fn bytes(&self) -> usize {
        self.tables.iter().map(Table::bytes).sum::<usize>()
            + self.covers.len() * std::mem::size_of::<Cover<N>>()
            + Cuts::<N>::bytes()
    }

    fn position(&self, tuple: Tuple) -> Option<usize> {
        self.tables.iter().position(|t| t.tuple == tuple)
    }

    /// The index of the table a rule of shape `shape` (as entry `e`) goes
    /// into, creating it when needed (see the module docs).
    fn table_for(&mut self, shape: Tuple, e: &Entry<W>) -> usize {
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
    fn reorder(&mut self, i: usize) {
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
    fn cover(&mut self, i: usize, e: &Entry<W>, add: bool) {
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

    fn insert(&mut self, shape: Tuple, e: Entry<W>) -> Tuple {
        let i = self.table_for(shape, &e);
        self.tables[i].insert(e);
        self.cover(i, &e, true);
        let tuple = self.tables[i].tuple;
        self.reorder(i);
        tuple
    }

    fn remove(&mut self, tuple: Tuple, e: &Entry<W>) {
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
    fn classify(
        &self,
        p: &Packet<W>,
        probes: &mut Probes,
        floor: Option<Rank>,
    ) -> Option<&Entry<W>> {
        let mut best: Option<&Entry<W>> = None;
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
            if let Some(e) = t.lookup(p) {
                if bound.is_none_or(|b| e.rank() > b) {
                    best = Some(e);
                    bound = Some(e.rank());
                }
            }
        }
        best
    }
}

/// Why a rule could not be added or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("rule id {0} exists")]
    IdTaken(RuleId),
    #[error("no rule with id {0}")]
    NotFound(RuleId),
}

/// Counters of lookups, for the benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Probes {
    pub packets: u64,
    pub tables: u64,
}

/// The classifier: each family's tables, and the rules in a slab with a
/// tag each (the caller's: the rule store's counter slot).
///
/// IPv4 rules live in one of two layers. [`AclClassifier::compile`] moves
/// every IPv4 rule into the compiled layer ([`compiled`]: a decision tree,
/// shared by the clones through an `Arc`); rules inserted after it go into
/// the tuple space, the live layer, updated in microseconds; a compiled
/// rule deleted or replaced is marked in the dead bitmap, which each clone
/// keeps for itself. A lookup takes the better of the compiled layer's
/// first live match and the live layer's winner (the live layer's walk
/// starts with the compiled winner as the rank to beat). IPv6 rules stay in
/// the tuple space.
#[derive(Clone, Default)]
pub struct AclClassifier {
    v4: Family<u32, { <u32 as Word>::CUT_AT.len() }>,
    v6: Family<u128, { <u128 as Word>::CUT_AT.len() }>,
    compiled: Option<Arc<Compiled>>,
    dead: Dead,
    slab: Vec<(AclRule, u32)>,
    free: Vec<u32>,
    /// Each rule's table and slot (a compiled rule's tuple is its shape,
    /// unused).
    by_id: HashMap<RuleId, (Tuple, u32)>,
    /// Each (match, priority): the rule store refuses a second rule with
    /// both the same.
    by_match: HashMap<(AclMatch, u32), RuleId>,
}

/// The layers' sizes (see [`AclClassifier`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    /// Rules in the compiled layer, dead ones included.
    pub compiled: usize,
    /// Compiled rules deleted or replaced since the compile.
    pub dead: usize,
    /// IPv4 rules in the live layer (inserted since the compile).
    pub live_v4: usize,
    /// IPv6 rules (always in the tuple space).
    pub v6: usize,
}

impl AclClassifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// A classifier holding `rules` (ids must be unique).
    pub fn with_rules(rules: &[AclRule]) -> Result<Self, AclError> {
        let mut c = Self::new();
        // Best first: the tables a set's first rules open are the ones
        // most packets stop in.
        let mut order: Vec<&AclRule> = rules.iter().collect();
        order.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        for r in order {
            c.insert(*r)?;
        }
        Ok(c)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Tables in use (both families).
    pub fn tables(&self) -> usize {
        self.v4.tables.len() + self.v6.tables.len()
    }

    /// Each table in probe order (IPv4's, then IPv6's): its tuple, rules,
    /// buckets and longest bucket.
    pub fn table_shapes(&self) -> Vec<(Tuple, usize, usize, usize)> {
        fn shapes<W: Word, const N: usize>(
            f: &Family<W, N>,
        ) -> impl Iterator<Item = (Tuple, usize, usize, usize)> + '_ {
            f.tables.iter().map(|t| {
                let longest = t.buckets.values().map(Bucket::len).max().unwrap_or(0);
                (t.tuple, t.rules, t.buckets.len(), longest)
            })
        }
        shapes(&self.v4).chain(shapes(&self.v6)).collect()
    }

    /// Heap bytes of the tables, the cuts, the compiled layer, the slab and
    /// the id index.
    pub fn bytes(&self) -> usize {
        self.v4.bytes()
            + self.v6.bytes()
            + self.compiled.as_ref().map_or(0, |c| c.bytes())
            + self.dead.bytes()
            + self.slab.capacity() * std::mem::size_of::<(AclRule, u32)>()
            + self.by_id.capacity() * (std::mem::size_of::<(RuleId, (Tuple, u32))>() + 1)
            + self.by_match.capacity() * (std::mem::size_of::<((AclMatch, u32), RuleId)>() + 1)
    }

    pub fn rule(&self, id: RuleId) -> Option<&AclRule> {
        self.by_id
            .get(&id)
            .map(|&(_, slot)| &self.slab[slot as usize].0)
    }

    /// The rule with this match and priority, with its tag.
    pub fn by_match(&self, m: &AclMatch, priority: u32) -> Option<(RuleId, u32)> {
        let id = *self.by_match.get(&(*m, priority))?;
        let &(_, slot) = self.by_id.get(&id)?;
        Some((id, self.slab[slot as usize].1))
    }

    /// Adds a rule to the table it fits best (see the module docs).
    pub fn insert(&mut self, r: AclRule) -> Result<(), AclError> {
        self.insert_tagged(r, 0)
    }

    /// [`Self::insert`], with a tag [`Self::classify_action`] returns.
    pub fn insert_tagged(&mut self, r: AclRule, tag: u32) -> Result<(), AclError> {
        // One family and lengths within it: `AclMatch` holds both by
        // construction.
        if self.by_id.contains_key(&r.id) {
            return Err(AclError::IdTaken(r.id));
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = (r, tag);
                s
            }
            None => {
                self.slab.push((r, tag));
                (self.slab.len() - 1) as u32
            }
        };
        self.by_match.insert((r.matcher, r.priority), r.id);
        let shape = Tuple::of(&r);
        let tuple = if shape.v6 {
            self.v6.insert(shape, Entry::new(&r, slot, tag))
        } else {
            self.v4.insert(shape, Entry::new(&r, slot, tag))
        };
        self.by_id.insert(r.id, (tuple, slot));
        Ok(())
    }

    /// Removes rule `id`.
    pub fn remove(&mut self, id: RuleId) -> Result<AclRule, AclError> {
        let (tuple, slot) = self.by_id.remove(&id).ok_or(AclError::NotFound(id))?;
        let (r, tag) = self.slab[slot as usize];
        if self.by_match.get(&(r.matcher, r.priority)) == Some(&id) {
            self.by_match.remove(&(r.matcher, r.priority));
        }
        if let Some(idx) = self.compiled_index(id) {
            // A compiled rule: dead from now on (an id deleted before and
            // inserted again is already dead there, and lives in a table).
            self.dead.set(idx);
        } else if tuple.v6 {
            self.v6.remove(tuple, &Entry::new(&r, slot, tag));
        } else {
            self.v4.remove(tuple, &Entry::new(&r, slot, tag));
        }
        self.free.push(slot);
        Ok(r)
    }

    /// The winning rule for one packet.
    #[inline]
    pub fn classify(&self, k: &FlowKey) -> Option<&AclRule> {
        self.classify_counted(k, &mut Probes::default())
    }

    /// [`Self::classify`], counting the tables probed.
    #[inline]
    pub fn classify_counted(&self, k: &FlowKey, probes: &mut Probes) -> Option<&AclRule> {
        probes.packets += 1;
        self.winner(k, probes)
            .map(|a| &self.slab[a.slot as usize].0)
    }

    /// The winning entry's answer for one packet, from its family and
    /// layer.
    #[inline(always)]
    fn winner(&self, k: &FlowKey, probes: &mut Probes) -> Option<Answer> {
        if k.v6 {
            return self
                .v6
                .classify(&Packet::of(k), probes, None)
                .map(Entry::answer);
        }
        let p = Packet::of(k);
        let hit = self.compiled.as_ref().and_then(|c| {
            c.lookup(
                &compiled::fields(p.src, p.dst, p.sport, p.dport, k.proto),
                &self.dead,
            )
        });
        self.merge(&p, hit, probes)
    }

    /// The better of a compiled hit and the live layer's winner for `p`.
    #[inline(always)]
    fn merge(&self, p: &Packet<u32>, hit: Option<&Hit>, probes: &mut Probes) -> Option<Answer> {
        match self.v4.classify(p, probes, hit.map(Hit::rank)) {
            Some(e) => Some(e.answer()),
            None => hit.map(Answer::of_hit),
        }
    }

    /// The compiled index of rule `id` while it is live there.
    fn compiled_index(&self, id: RuleId) -> Option<u32> {
        let idx = self.compiled.as_ref()?.index_of(id)?;
        (!self.dead.get(idx)).then_some(idx)
    }

    /// Moves every IPv4 rule into a new compiled layer (built from them
    /// now, on this thread), leaving the live layer empty: see
    /// [`AclClassifier`]. [`Self::compile_input`] and [`Self::install`]
    /// do the same in two steps, the build between them on any thread.
    ///
    /// A set whose tree would exceed the compiled layer's budget
    /// ([`compiled::BUDGET_PER_LEAF_RULE`]) is refused and stays where it is.
    pub fn compile(&mut self) -> Result<(), compiled::CompileError> {
        let c = Compiled::build(&self.compile_input())?;
        self.install(Arc::new(c));
        Ok(())
    }

    /// The IPv4 rules as a compile takes them.
    pub fn compile_input(&self) -> Vec<Input> {
        self.by_id
            .values()
            .filter(|(t, _)| !t.v6)
            .map(|&(_, slot)| {
                let (rule, tag) = self.slab[slot as usize];
                Input { rule, tag, slot }
            })
            .collect()
    }

    /// Installs a compiled layer built from [`Self::compile_input`]. Rules
    /// changed since that input was taken stay exact: a compiled rule whose
    /// id is gone, or now names another rule or tag, is dead at once;
    /// every IPv4 rule the layer holds alive leaves the live layer.
    pub fn install(&mut self, c: Arc<Compiled>) {
        let mut dead = Dead::new(c.len());
        for idx in 0..c.len() as u32 {
            let h = c.hit(idx);
            let same = self.by_id.get(&h.id).is_some_and(|&(_, slot)| {
                let (r, tag) = &self.slab[slot as usize];
                r == c.rule(idx) && *tag == h.tag && slot == h.slot
            });
            if !same {
                dead.set(idx);
            }
        }
        // The live layer keeps only the IPv4 rules the new layer does not
        // hold alive (inserted or replaced after the input was taken).
        let mut live: Vec<(AclRule, u32, u32)> = self
            .by_id
            .iter()
            .filter(|&(&id, &(t, _))| !t.v6 && c.index_of(id).is_none_or(|i| dead.get(i)))
            .map(|(_, &(_, slot))| {
                let (r, tag) = self.slab[slot as usize];
                (r, tag, slot)
            })
            .collect();
        live.sort_by(|a, b| b.0.priority.cmp(&a.0.priority).then(a.0.id.cmp(&b.0.id)));
        self.v4 = Family::default();
        for (r, tag, slot) in live {
            let tuple = self.v4.insert(Tuple::of(&r), Entry::new(&r, slot, tag));
            self.by_id.insert(r.id, (tuple, slot));
        }
        self.compiled = Some(c);
        self.dead = dead;
    }

    /// The layers' sizes.
    pub fn layers(&self) -> Layers {
        let v6 = self.by_id.values().filter(|(t, _)| t.v6).count();
        Layers {
            compiled: self.compiled.as_ref().map_or(0, |c| c.len()),
            dead: self.dead.count(),
            live_v4: self.by_id.len()
                - v6
                - self
                    .compiled
                    .as_ref()
                    .map_or(0, |c| c.len() - self.dead.count()),
            v6,
        }
    }

    /// The compiled layer, if any.
    pub fn compiled(&self) -> Option<&Compiled> {
        self.compiled.as_deref()
    }

    /// The compiled layer's cost for one IPv4 packet (see
    /// [`Compiled::cost`]); `None` for IPv6 or without a compiled layer.
    pub fn compiled_cost(&self, k: &FlowKey) -> Option<(u32, u32)> {
        let c = self.compiled.as_deref().filter(|_| !k.v6)?;
        let p = Packet::<u32>::of(k);
        Some(c.cost(
            &compiled::fields(p.src, p.dst, p.sport, p.dport, k.proto),
            &self.dead,
        ))
    }

    /// The winning rule's action and tag for one packet, from the table's
    /// entry (the rule itself is not read).
    #[inline]
    pub fn classify_action(&self, k: &FlowKey) -> Option<(Action, u32)> {
        self.winner(k, &mut Probes::default())
            .map(|a| (a.action, a.tag))
    }

    /// The winning rule's id for one packet, from the table's entry.
    #[inline]
    pub fn classify_id(&self, k: &FlowKey) -> Option<RuleId> {
        self.winner(k, &mut Probes::default()).map(|a| a.id)
    }

    /// The winning rule's id for each key of a burst (`None`: no rule). The
    /// id comes from the table's entry: the rule itself is not read.
    pub fn classify_burst(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        self.burst(keys, |i, a| out[i] = a.map(|a| a.id));
    }

    /// The winning rule's action and tag for each key of a burst.
    pub fn classify_burst_action(&self, keys: &[FlowKey], out: &mut [Option<(Action, u32)>]) {
        self.burst(keys, |i, a| out[i] = a.map(|a| (a.action, a.tag)));
    }

    /// Each key's answer, handed to `put` with its index: IPv4 keys walk
    /// the compiled layer [`LANES`] at a time, then the live layer.
    #[inline]
    fn burst(&self, keys: &[FlowKey], mut put: impl FnMut(usize, Option<Answer>)) {
        let mut probes = Probes::default();
        let Some(c) = self.compiled.as_deref() else {
            for (i, k) in keys.iter().enumerate() {
                put(i, self.winner(k, &mut probes));
            }
            return;
        };
        for (base, chunk) in keys.chunks(LANES).enumerate() {
            let mut fs = [[0u32; 8]; LANES];
            let mut at = [0usize; LANES];
            let mut n = 0;
            for (j, k) in chunk.iter().enumerate() {
                let i = base * LANES + j;
                if k.v6 {
                    put(i, self.winner(k, &mut probes));
                } else {
                    let p = Packet::<u32>::of(k);
                    fs[n] = compiled::fields(p.src, p.dst, p.sport, p.dport, k.proto);
                    at[n] = i;
                    n += 1;
                }
            }
            let mut hits = [None; LANES];
            c.lookup_lanes(&fs[..n], &self.dead, &mut hits);
            for j in 0..n {
                let p = Packet::<u32>::of(&keys[at[j]]);
                put(at[j], self.merge(&p, hits[j], &mut probes));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::acl::first_match;
    use cfdp_rules::{AclMatch, IpPrefix, PortRange};

    fn rule(
        id: u32,
        prio: u32,
        src: &str,
        dst: &str,
        proto: Option<u8>,
        dport: (u16, u16),
    ) -> AclRule {
        AclRule {
            id,
            priority: prio,
            matcher: AclMatch::new(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                proto,
                PortRange::ANY,
                PortRange::new(dport.0, dport.1).unwrap(),
            )
            .unwrap(),
            action: Action::Drop,
        }
    }

    fn key(src: &str, dst: &str, proto: u8, dport: u16) -> FlowKey {
        FlowKey::new(
            src.parse().unwrap(),
            dst.parse().unwrap(),
            proto,
            1234,
            dport,
        )
    }

    #[test]
    fn the_highest_priority_wins_across_tables_and_ties_go_to_the_lower_id() {
        let rules = [
            rule(1, 10, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)),
            rule(2, 20, "10.1.0.0/16", "192.168.0.0/16", Some(6), (80, 80)),
            rule(3, 20, "10.1.2.0/24", "192.168.1.0/24", Some(6), (0, 65535)),
            rule(4, 5, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535)),
        ];
        let c = AclClassifier::with_rules(&rules).unwrap();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        // 2 and 3 both match at priority 20: the lower id.
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.classify(&key("10.1.2.3", "192.168.1.9", 6, 81))
                .unwrap()
                .id,
            3
        );
        assert_eq!(
            c.classify(&key("10.9.9.9", "1.1.1.1", 17, 53)).unwrap().id,
            1
        );
        assert_eq!(
            c.classify(&key("11.0.0.1", "1.1.1.1", 17, 53)).unwrap().id,
            4
        );
    }

    #[test]
    fn updates_change_answers_without_a_rebuild() {
        let mut c = AclClassifier::new();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        assert!(c.classify(&k).is_none());
        c.insert(rule(1, 1, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)))
            .unwrap();
        c.insert(rule(
            2,
            9,
            "10.1.2.0/24",
            "192.168.1.0/24",
            Some(6),
            (80, 80),
        ))
        .unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.insert(rule(2, 3, "1.0.0.0/8", "0.0.0.0/0", None, (0, 65535))),
            Err(AclError::IdTaken(2))
        );
        c.remove(2).unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 1);
        c.remove(1).unwrap();
        assert!(c.classify(&k).is_none());
        assert_eq!((c.tables(), c.len()), (0, 0));
        assert_eq!(c.remove(1), Err(AclError::NotFound(1)));
    }

    #[test]
    fn the_cuts_probe_only_tables_that_can_match_and_follow_deletes() {
        let mut c = AclClassifier::new();
        c.insert(rule(1, 9, "10.0.0.0/8", "20.0.0.0/8", Some(6), (0, 65535)))
            .unwrap();
        // Two rules in one table (shape 0/16), under different leading
        // destination bits (30.16/12 and 30.32/12); rule 2 takes any
        // protocol, rule 3 TCP only.
        c.insert(rule(2, 5, "0.0.0.0/0", "30.16.0.0/16", None, (0, 65535)))
            .unwrap();
        c.insert(rule(3, 4, "0.0.0.0/0", "30.32.0.0/16", Some(6), (0, 65535)))
            .unwrap();
        assert_eq!(c.tables(), 2);
        let probed = |c: &AclClassifier, k: &FlowKey| {
            let mut p = Probes::default();
            let id = c.classify_counted(k, &mut p).map(|r| r.id);
            (id, p.tables)
        };
        // No rule's destination covers 50/12; rule 1 names TCP only.
        assert_eq!(probed(&c, &key("40.1.1.1", "50.1.1.1", 6, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "20.1.1.1", 17, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "20.1.1.1", 6, 1)), (Some(1), 1));
        assert_eq!(
            probed(&c, &key("10.1.1.1", "30.16.2.3", 17, 1)),
            (Some(2), 1)
        );
        assert_eq!(probed(&c, &key("10.1.1.1", "30.32.2.3", 17, 1)), (None, 1));
        // Rule 2's table stays (rule 3), but no longer for 30.16/12 nor
        // for any protocol but TCP.
        c.remove(2).unwrap();
        assert_eq!(c.tables(), 2);
        assert_eq!(probed(&c, &key("10.1.1.1", "30.16.2.3", 6, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "30.32.2.3", 17, 1)), (None, 0));
        assert_eq!(
            probed(&c, &key("10.1.1.1", "30.32.2.3", 6, 1)),
            (Some(3), 1)
        );
    }

    #[test]
    fn ipv6_cuts_read_below_the_shared_leading_bits() {
        // Two sites of one organisation's /32 (they differ in bits 32–44)
        // and another organisation's /32 (bits 16–28 differ): every
        // address starts 2001:, so the leading bits alone would pass every
        // packet to both tables.
        let mut c = AclClassifier::new();
        for (id, prio, src) in [
            (1, 9, "2001:db8:1000::/48"),
            (2, 8, "2001:db8:2000::/48"),
            (3, 7, "2001:ab0::/32"),
        ] {
            c.insert(rule(id, prio, src, "::/0", None, (0, 65535)))
                .unwrap();
        }
        assert_eq!(c.tables(), 2);
        let probed = |c: &AclClassifier, src: &str| {
            let mut p = Probes::default();
            let k = key(src, "2001:db8:ffff::1", 17, 53);
            let id = c.classify_counted(&k, &mut p).map(|r| r.id);
            (id, p.tables)
        };
        assert_eq!(probed(&c, "2001:db8:1000::5"), (Some(1), 1));
        assert_eq!(probed(&c, "2001:ab0:7::1"), (Some(3), 1));
        // A third site of the first /32, and a third organisation.
        assert_eq!(probed(&c, "2001:db8:3000::5"), (None, 0));
        assert_eq!(probed(&c, "2001:cb0::1"), (None, 0));
        // Rule 1's site leaves the second window with it; rule 2 keeps the
        // table.
        c.remove(1).unwrap();
        assert_eq!(probed(&c, "2001:db8:1000::5"), (None, 0));
        assert_eq!(probed(&c, "2001:db8:2000::5"), (Some(2), 1));
    }

    #[test]
    fn a_crafted_set_of_many_shapes_stays_within_the_table_bound() {
        // Every (source, destination) length pair: 33 × 33 shapes.
        let mut rules = Vec::new();
        for s in 0..=32u8 {
            for d in 0..=32u8 {
                let id = u32::from(s) * 33 + u32::from(d) + 1;
                let prefix = |first: u8, len: u8| {
                    let mut a = [0u8; 16];
                    a[..4].copy_from_slice(&[first, 1, 2, 3]);
                    IpPrefix::covering(false, &a, len).unwrap()
                };
                let mut r = rule(id, id, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535));
                r.matcher = AclMatch::new(
                    prefix(10, s),
                    prefix(20, d),
                    None,
                    PortRange::ANY,
                    PortRange::ANY,
                )
                .unwrap();
                rules.push(r);
            }
        }
        let c = AclClassifier::with_rules(&rules).unwrap();
        assert!(c.tables() <= MAX_TABLES, "{} tables", c.tables());
        for k in [
            key("10.1.2.3", "20.1.2.3", 6, 1),
            key("10.1.2.4", "20.1.3.3", 6, 1),
            key("9.1.2.3", "20.1.2.3", 6, 1),
        ] {
            assert_eq!(
                c.classify(&k).map(|r| r.id),
                first_match(&rules, &k).map(|r| r.id)
            );
        }
    }
}
