//! What one classifier copy changes over a shared compiled tree: the
//! rules deleted since the compile (the dead bitmap), and the leaves it
//! rewrote to take rules inserted since ("patches").
//!
//! The tree itself is shared by the copies through an `Arc` and never
//! written after its build. A rule inserted after the compile goes into
//! the tree where its box (its range on each field) touches at most
//! [`PATCH_LEAVES`] leaves: each of those leaves gets a new list, the old
//! one's live rules with the new rule at its rank, written into the
//! overlay's own item array, and the overlay's span of that leaf points
//! there. A lookup reads the leaf's span from the overlay and its items
//! from the tree or the overlay: the same walk, the same scan, one more
//! predictable branch. So a churned set (rules deleted and inserted back,
//! a modify) keeps the tree's speed with no recompile, and an update stays
//! a few microseconds: a walk down the tree for the leaves, a copy of a
//! few short lists.
//!
//! A rule put back with the id, match and priority of a compiled rule
//! deleted since (a modify that changes the action, or a delete undone) is
//! *revived* instead, however many leaves it touches: the compiled rule's
//! entries are already where the rule belongs, in its rank, so the overlay
//! only maps the dead index to the new rule's answer (`Overlay::alias`,
//! and for the scans `Overlay::to`, which gives every index's answer in
//! one load once a rule died), which is why rewritten lists keep the
//! compiled rules' dead entries.
//! A rule put back under a *new* id (a modify that renames the rule, as
//! a controller that numbers its flow entries anew does) takes a deleted
//! compiled rule's place the same way when it has that rule's match and
//! priority and no other rule, compiled or patched, ranks between the two
//! (equal priorities are ranked by id): its entries then stand where the
//! new rule's would. Each compiled entry is taken over at most once a
//! compile, and from then on patches rank the entry as the rule that took
//! it, so the lists stay in rank order. The deleted rule is found in the
//! one leaf its box's first corner reaches (it is listed in every leaf
//! it can match in). Before this, a 10 % churn under new ids left 209 of
//! ipc1_10k's 952 such rules (too wide to patch) in the tuple space, and
//! its bursts ran at 0.54x the fresh set's; now none.
//!
//! A rule whose box touches more leaves (a wide rule over a finely cut
//! region), or that would make a leaf longer than its build's leaf size
//! plus [`PATCH_EXTRA`], is refused ([`PatchRefused`]) and the caller keeps
//! it in its tuple space: a packet's scan stays bounded whatever is
//! inserted. Rewritten lists leave their old copies behind in the overlay;
//! once those exceed a quarter of the tree's own entry count the overlay
//! compacts (O(leaves), amortised over at least that many patched
//! entries).
//!
//! A rewritten list is kept only as the leaf kernel reads it (blocks of
//! eight rules, 24 bytes a rule for IPv4); a patch reads a list back from
//! its blocks, as it does a compiled leaf's. (A second copy rule by rule
//! cost 32 bytes more a rule: after every rule of acl1_1k was replaced the
//! classifier took 1.28 MB with it, 0.93 MB without; the price, the
//! read-back and compactions four times as often, is 1.0-1.4x the
//! classifier's insert p99, still under 7 us:
//! `bench/results/classbench_overlay_ab.csv`.)
//!
//! The rewritten lists live in chunks of `CHUNK` entries that never
//! move: one growing array would be copied whole, onto fresh pages, each
//! time it doubled, and the insert that made it double paid for it (44 to
//! 180 µs on acl1_1k against ~8 µs for a patch: most of the store's
//! insert p99). A chunk is allocated when the last is full, a few pages.

use super::node::{Hit, Item, Word};
use cfdp_acl_simd::LANES;
use cfdp_rules::RuleId;
use hashbrown::HashMap;

/// An entry of `Overlay::to` no live rule answers for.
const GONE: u32 = u32::MAX;
/// Entries of `Overlay::to` up to which a scan reads it before the dead
/// bitmap (128 KB: a second-level cache's share).
pub(super) const TO_FIRST: usize = 32 * 1024;

/// Leaves a patched rule may touch.
pub const PATCH_LEAVES: usize = 4;
/// Entries a patched leaf may hold beyond the build's leaf size.
pub const PATCH_EXTRA: usize = 16;
/// A span's start with this bit set is in the overlay's items.
pub(super) const PATCHED: u32 = 1 << 31;
/// Entries a chunk of rewritten lists holds (a multiple of the kernel's
/// block, and more than the longest list a patch writes); a list starts
/// at `chunk * CHUNK + offset`, a multiple of the block (see the module
/// docs).
pub(super) const CHUNK: usize = 256;
const _: () = assert!(CHUNK.is_multiple_of(LANES));

/// Why a rule was not patched into the tree (the caller keeps it in its
/// tuple space: exact either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchRefused {
    #[error("a rule of the other address family than the tree's")]
    WrongFamily,
    #[error("the rule touches more than {PATCH_LEAVES} leaves")]
    TooWide,
    #[error("a leaf would hold more than its leaf size plus {PATCH_EXTRA} rules")]
    LeafFull,
    /// 2^32 rules patched or revived since the compile: the next compile
    /// starts the numbering again.
    #[error("the overlay has numbered 2^32 rules since the compile")]
    Numbered,
}

/// A copy's changes over a compiled tree (see the module docs). Made by
/// [`Layer::overlay`](super::Layer::overlay); meaningful only with the tree that made it.
#[derive(Clone, Debug)]
pub struct Overlay<W: Word> {
    pub(super) dead: Dead,
    /// Every leaf's (start, len): the tree's own, or with [`PATCHED`] set
    /// in `blocks` below.
    pub(super) spans: Vec<(u32, u32)>,
    /// The rewritten leaves' lists as the leaf kernel reads them, in
    /// chunks of [`CHUNK`] entries (a chunk's block `k` holds its entries
    /// `8k..8k + 8`), each list from a block of its own ([`Self::put`]; the
    /// lanes past a list's end never match).
    pub(super) blocks: Vec<Vec<W::Block>>,
    /// Answers of the rules patched in: index `i` is rule `base + i`.
    pub(super) hits: Vec<Hit>,
    /// Live patched rules by id.
    pub(super) index: HashMap<RuleId, u32>,
    /// Revived compiled rules: the dead compiled index to the index of the
    /// rule that took its place (see the module docs).
    pub(super) alias: HashMap<u32, u32>,
    /// `alias` the other way: the rule that took a place to the place.
    pub(super) taken: HashMap<u32, u32>,
    /// What a scan answers for each index once a rule died (empty until
    /// then): the index itself while it lives, the live rule revived in
    /// its place, or [`GONE`]: the dead bitmap and `alias` in one load,
    /// and no branch between a live rule and a revived one (see
    /// `Layer::scan_blocks`).
    pub(super) to: Vec<u32>,
    /// The tree's rule count: the first patched rule's index.
    pub(super) base: u32,
    /// Entries of `items` no span points to any more.
    pub(super) garbage: usize,
}

// By hand: a derived Default would ask `W: Default` of every user.
impl<W: Word> Default for Overlay<W> {
    fn default() -> Self {
        Self {
            dead: Dead::default(),
            spans: Vec::new(),
            blocks: Vec::new(),
            hits: Vec::new(),
            index: HashMap::new(),
            alias: HashMap::new(),
            taken: HashMap::new(),
            to: Vec::new(),
            base: 0,
            garbage: 0,
        }
    }
}

impl<W: Word> Overlay<W> {
    /// The index the next patched or revived rule gets, if one is left.
    pub(super) fn next_index(&self) -> Option<u32> {
        u32::try_from(self.hits.len())
            .ok()
            .and_then(|n| self.base.checked_add(n))
            .filter(|&i| i != GONE)
    }

    /// A new live rule's index and answer (the caller checked
    /// [`Self::next_index`]).
    pub(super) fn add(&mut self, hit: Hit) -> u32 {
        let idx = self.next_index().expect("checked by the caller");
        self.dead.grow(idx as usize + 1);
        if !self.to.is_empty() {
            self.to.push(idx);
        }
        self.hits.push(hit);
        self.index.insert(hit.answer.id, idx);
        idx
    }

    /// What a scan answers for a matching entry `idx` (see `to`): the
    /// live rule, or `None` for a dead entry no rule took the place of.
    #[inline(always)]
    pub(super) fn answer_of(&self, idx: u32) -> Option<u32> {
        // A small `to` first: one load, no branch between a live rule and
        // a revived one. A large one stays out of the cache where the
        // bitmap (a bit a rule) is in it: the bitmap first, and `to` only
        // for the dead (acl1_100k's churned bursts: 0.83x of fresh with
        // `to` first, 0.86x so; acl1_1k's: 0.89x, 0.80x so;
        // `bench/results/classbench_answer_index_size_ab.csv`).
        if self.to.len() > TO_FIRST && !self.dead.get(idx) {
            return Some(idx);
        }
        let a = self.to.get(idx as usize).copied().unwrap_or(idx);
        (a != GONE).then_some(a)
    }

    /// Marks rule `idx` (compiled or patched) deleted; false if it was.
    pub fn kill(&mut self, idx: u32) -> bool {
        if let Some(h) = idx
            .checked_sub(self.base)
            .and_then(|i| self.hits.get(i as usize))
        {
            self.index.remove(&h.answer.id);
        }
        if self.to.is_empty() {
            let n = self.next_index().unwrap_or(GONE);
            self.to = (0..n).collect();
        }
        for i in [Some(idx), self.taken.get(&idx).copied()]
            .into_iter()
            .flatten()
        {
            if let Some(t) = self.to.get_mut(i as usize) {
                *t = GONE;
            }
        }
        self.dead.set(idx)
    }

    /// Puts live rule `idx` in the place of dead compiled entry `old`.
    pub(super) fn alias(&mut self, old: u32, idx: u32) {
        if let Some(prev) = self.alias.insert(old, idx) {
            self.taken.remove(&prev);
        }
        self.taken.insert(idx, old);
        if let Some(t) = self.to.get_mut(old as usize) {
            *t = idx;
        }
    }

    /// Rules patched in since the compile (live or deleted since).
    pub fn patched(&self) -> usize {
        self.hits.len()
    }

    /// Rules marked deleted, compiled or patched.
    pub fn dead(&self) -> usize {
        self.dead.count()
    }

    /// Heap bytes.
    pub fn bytes(&self) -> usize {
        let chunks = self.blocks.capacity() * std::mem::size_of::<Vec<W::Block>>()
            + self.blocks.iter().map(Vec::capacity).sum::<usize>()
                * std::mem::size_of::<W::Block>();
        self.dead.bytes()
            + chunks
            + self.spans.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.hits.capacity() * std::mem::size_of::<Hit>()
            + self.index.capacity() * (std::mem::size_of::<(RuleId, u32)>() + 1)
            + (self.alias.capacity() + self.taken.capacity())
                * (std::mem::size_of::<(u32, u32)>() + 1)
            + self.to.capacity() * std::mem::size_of::<u32>()
    }

    /// No leaf rewritten: every span is the tree's own.
    #[inline(always)]
    pub(super) fn rewrote_none(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Entries the rewritten lists take, garbage and padding included.
    #[cfg(test)]
    pub(super) fn stored(&self) -> usize {
        self.blocks.iter().map(Vec::len).sum::<usize>() * LANES
    }

    /// Appends a leaf list's blocks to the last chunk, or to a new chunk
    /// where they would not fit; its start with [`PATCHED`] set.
    pub(super) fn put(&mut self, list: &[Item<W>]) -> u32 {
        let (chunk, start) = self.room(list.len().div_ceil(LANES));
        Item::push_blocks(list, &mut self.blocks[chunk]);
        start
    }

    /// [`Self::put`] for a list already in blocks.
    fn put_blocks(&mut self, list: &[W::Block]) -> u32 {
        let (chunk, start) = self.room(list.len());
        self.blocks[chunk].extend_from_slice(list);
        start
    }

    /// The chunk `n` more blocks go to (a new one where the last has no
    /// room for them), and where they start, with [`PATCHED`] set.
    fn room(&mut self, n: usize) -> (usize, u32) {
        let per_chunk = CHUNK / LANES;
        assert!(n <= per_chunk, "a list longer than a chunk");
        let fits = self.blocks.last().is_some_and(|c| c.len() + n <= per_chunk);
        if !fits {
            self.blocks.push(Vec::with_capacity(per_chunk));
        }
        let chunk = self.blocks.len() - 1;
        let start = u32::try_from(chunk * CHUNK + self.blocks[chunk].len() * LANES)
            .ok()
            .filter(|&s| s < PATCHED)
            .expect("compaction keeps the overlay under 2^31 entries");
        (chunk, start | PATCHED)
    }

    /// The blocks of the list at `start` (with [`PATCHED`] set) of `len`
    /// entries.
    #[inline(always)]
    pub(super) fn blocks_of(&self, start: u32, len: u32) -> &[W::Block] {
        blocks_in(&self.blocks, start, len)
    }

    /// Copies the lists spans point to into fresh chunks, dropping the old
    /// copies.
    pub(super) fn compact(&mut self) {
        let old = std::mem::take(&mut self.blocks);
        let mut spans = std::mem::take(&mut self.spans);
        for (start, len) in &mut spans {
            if *start & PATCHED != 0 {
                *start = self.put_blocks(blocks_in(&old, *start, *len));
            }
        }
        self.spans = spans;
        self.garbage = 0;
    }
}

/// The blocks of the list at `start` (with [`PATCHED`] set) of `len`
/// entries in `chunks` (see the module docs).
#[inline(always)]
fn blocks_in<B>(chunks: &[Vec<B>], start: u32, len: u32) -> &[B] {
    let s = (start & !PATCHED) as usize;
    let (chunk, at) = (s / CHUNK, s % CHUNK / LANES);
    &chunks[chunk][at..at + (len as usize).div_ceil(LANES)]
}

/// Compiled rules deleted or replaced since the compile: one bit each.
#[derive(Clone, Debug, Default)]
pub struct Dead {
    words: Vec<u64>,
    count: usize,
}

impl Dead {
    /// None of `n` rules dead.
    pub fn new(n: usize) -> Self {
        Self {
            words: vec![0; n.div_ceil(64)],
            count: 0,
        }
    }

    /// Room for `n` rules (the new ones live).
    pub(super) fn grow(&mut self, n: usize) {
        if n > self.words.len() * 64 {
            self.words.resize(n.div_ceil(64), 0);
        }
    }

    #[inline(always)]
    pub fn get(&self, idx: u32) -> bool {
        self.words[(idx / 64) as usize] & (1 << (idx % 64)) != 0
    }

    /// Marks `idx` dead; false if it was already.
    pub fn set(&mut self, idx: u32) -> bool {
        let w = &mut self.words[(idx / 64) as usize];
        let bit = 1 << (idx % 64);
        let was = *w & bit != 0;
        *w |= bit;
        self.count += usize::from(!was);
        !was
    }

    /// Rules marked dead.
    pub fn count(&self) -> usize {
        self.count
    }

    pub fn bytes(&self) -> usize {
        self.words.capacity() * 8
    }
}
