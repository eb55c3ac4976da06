//! The safe, concurrent filter: lookups, the Bloom-Cuckoo insert path
//! (the Bloom-Cuckoo paper, Algorithm 2), delete (Algorithm 1), the Bloom-part side table
//! and migration.
//!
//! Writers never modify the table along a random walk as they go. They first
//! *plan* the whole walk of Algorithm 2 against a read of the table (the
//! plan is the list of entries that would move), then *execute* it backwards:
//! the last displaced entry moves first into its free slot (or into the
//! Bloom part), then the one before it into the slot just freed, and so on,
//! and the new item is written last. Every step is one move while the
//! stripes of both buckets of the moving entry are marked busy. Writers are
//! serialised (one at a time, see `raw.rs`), so the plan is still exact when
//! it runs and a failed insert has written nothing. So no entry is ever
//! absent from both its buckets, and readers, which validate both stripes'
//! versions, never see a move half done.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use crate::config::{BloomConfig, BloomMode, Config, ConfigError};
use crate::hash::{fp_displacement, hash_bytes, tag_mix};
use crate::layout::{kind, Bucket, Layout, ENTRIES_PER_BUCKET};
use crate::raw::{RawTable, ReadView, StripeGuard, WriteGuard};
use crate::sync::{AtomicUsize, Ordering};

/// Answer of a lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lookup {
    /// Definitely not in the filter.
    #[default]
    Miss,
    /// A matching fingerprint with its associated value (0 when the filter
    /// stores no values). May be a false positive.
    Entry(u32),
    /// Matched by the Bloom part (both Bloom fields of the item's buckets
    /// hold its bit or tag). Carries no value: the value of a Bloom-part
    /// element lives in the side table, which lookups do not read. May be a
    /// false positive.
    Bloom,
}

impl Lookup {
    #[inline]
    pub fn is_hit(self) -> bool {
        !matches!(self, Lookup::Miss)
    }
}

/// Where an insert put the new item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In a cuckoo entry.
    Entry,
    /// In the Bloom part (its two buckets' Bloom fields).
    Bloom,
}

/// Report of a successful insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    pub placement: Placement,
    /// True when the Bloom part grew by one element: the new item itself
    /// went there, or an entry evicted along the walk did (Algorithm 2,
    /// line 33).
    pub bloom_added: bool,
    /// The value of the entry evicted into the Bloom part along the walk
    /// (Algorithm 2, line 33), if one was: that item's lookups now answer
    /// [`Lookup::Bloom`], without its value — a caller that resolves items
    /// by value must learn which one moved.
    pub evicted: Option<u32>,
    /// Iterations (bucket accesses) of Algorithm 2: 1 when a candidate
    /// bucket had room.
    pub iterations: u32,
}

/// Why an insert did not happen. The filter is unchanged in every case: the
/// walk is planned completely before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// No free entry (and no free Bloom pair) within `max_kicks` iterations
    /// (the plain path: a breadth-first search of up to `max_kicks` bucket
    /// reads, then a random walk of `max_kicks`).
    Full { iterations: u32 },
    /// The value does not fit in the configured value bits.
    ValueTooWide { value: u32, bits: u32 },
}

impl std::fmt::Display for InsertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InsertError::Full { iterations } => {
                write!(f, "filter full: no room found in {iterations} iterations")
            }
            InsertError::ValueTooWide { value, bits } => {
                write!(f, "value {value} does not fit in {bits} value bits")
            }
        }
    }
}

impl std::error::Error for InsertError {}

/// Filter statistics at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Items held: cuckoo entries plus Bloom-part elements.
    pub items: usize,
    pub entries: usize,
    pub bloom_items: usize,
    pub buckets: usize,
    pub fingerprint_bits: u32,
    pub value_bits: u32,
    /// Width of the per-bucket Bloom field (0: none).
    pub bloom_field_bits: u32,
    /// Occupied entries / (4 × buckets).
    pub load_factor: f64,
    /// Table memory in bits (whole words) per item held.
    pub bits_per_item: f64,
    /// Estimated false-positive rate: cuckoo part plus Bloom part (crate docs).
    pub estimated_fpr: f64,
    /// The filter's theoretical upper bound 1 − (1 − 2^−f)^(2b).
    pub fpr_bound: f64,
    pub memory_bytes: usize,
}

/// An element of the Bloom part, as kept in the side table (the Bloom-Cuckoo paper keeps
/// `(h1, fp)`; we keep the bucket pair and the value too, so migration can
/// restore the entry exactly). Keyed by the lower bucket of the pair: each
/// bucket's Bloom field belongs to at most one element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BloomRecord {
    pub fp: u32,
    pub value: u32,
    pub high: usize,
}

/// An item's position in the table, derived from its hash.
#[derive(Clone, Copy, Debug, Default)]
struct Keyed {
    fp: u32,
    i1: usize,
    i2: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    bucket: usize,
    slot: usize,
}

/// One planned displacement: `placed` goes into `loc`, whose occupant at
/// planning time was `orig`.
#[derive(Clone, Copy, Debug)]
struct Step {
    loc: Loc,
    placed: u64,
    orig: u64,
}

#[derive(Clone, Copy, Debug)]
enum Terminal {
    Empty(Loc),
    Bloom { a: usize, b: usize },
}

#[derive(Debug)]
struct Plan {
    path: Vec<Step>,
    terminal: Terminal,
    iterations: u32,
}

/// A bucket the breadth-first search reached by moving `victim` out of
/// `slot` of the parent node's bucket.
#[derive(Clone, Copy, Debug)]
struct Node {
    bucket: usize,
    parent: u32,
    slot: u8,
    victim: u64,
}

std::thread_local! {
    /// The search's node buffer, reused like the path buffer.
    static BFS_NODES: std::cell::Cell<Vec<Node>> = const { std::cell::Cell::new(Vec::new()) };

    /// Each writer thread's path buffer, reused from plan to plan: growing a
    /// fresh `Vec` on every insert that kicks was a fifth of the insert
    /// path's instructions (callgrind, filling 2^16 buckets to 95 %).
    static PATH_BUFFER: std::cell::Cell<Vec<Step>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Plan {
    fn buffer() -> Vec<Step> {
        let mut path = PATH_BUFFER
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        path.clear();
        path
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.capacity() == 0 {
            return; // nothing worth keeping (and keep the buffer there is)
        }
        // Fails only while the thread is being torn down; the buffer is then
        // simply freed.
        let _ = PATH_BUFFER.try_with(|b| b.set(path));
    }
}

/// What the last step of an executed plan does with the planned item.
#[derive(Clone, Copy)]
enum Final {
    /// Write a new item.
    Insert,
    /// Move a Bloom-part element (its record) into an entry.
    Migrate(BloomRecord),
}

/// The buckets a plan's path touches, as a 1024-bit set of `bucket mod
/// 1024`: most bucket reads of the walk skip the scan of the path. (A
/// 64-bit set saturated on the long walks near full load, and the scans
/// made planning quadratic in the walk's length.)
#[derive(Clone, Copy)]
struct OnPath([u64; 16]);

impl OnPath {
    fn new() -> Self {
        OnPath([0; 16])
    }
    #[inline(always)]
    fn split(bucket: usize) -> (usize, u64) {
        ((bucket >> 6) & 15, 1u64 << (bucket & 63))
    }
    #[inline(always)]
    fn insert(&mut self, bucket: usize) {
        let (w, b) = Self::split(bucket);
        self.0[w] |= b;
    }
    #[inline(always)]
    fn may_contain(&self, bucket: usize) -> bool {
        let (w, b) = Self::split(bucket);
        self.0[w] & b != 0
    }
    fn of(path: &[Step]) -> Self {
        let mut set = Self::new();
        for st in path {
            set.insert(st.loc.bucket);
        }
        set
    }
}

/// The writer's random choices (SplitMix64): reproducible from the
/// configured seed, and kept in the writer's state, away from readers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() >> 32) as usize * n) >> 32
    }
    /// A random set bit of `mask` (non-zero).
    fn pick_bit(&mut self, mask: u32) -> usize {
        let k = self.below(mask.count_ones() as usize);
        let mut m = mask;
        for _ in 0..k {
            m &= m - 1;
        }
        m.trailing_zeros() as usize
    }
}

/// What the one writer at a time keeps, behind the writers' mutex: never
/// read by lookups.
struct Writer {
    /// The Bloom part's elements, keyed by the lower bucket of their pair.
    side: BTreeMap<usize, BloomRecord>,
    rng: Rng,
    /// Where the next `migrate` starts in the side table, so that elements
    /// that cannot move yet do not keep the others from being tried.
    migrate_from: usize,
}

type Guard<'a> = WriteGuard<'a, Writer>;

/// A concurrent (Bloom-)cuckoo filter. See the crate docs.
pub struct Filter {
    raw: RawTable<Writer>,
    config: Config,
    bloom: Option<BloomConfig>,
    /// Counts, changed only by the writer (a load and a store, no
    /// read-modify-write), read by anyone.
    entries: AtomicUsize,
    bloom_items: AtomicUsize,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Filter")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The alternate bucket of an item with fingerprint `fp` in `bucket`.
#[inline(always)]
fn alt_bucket(bucket_mask: usize, bucket: usize, fp: u32) -> usize {
    let d = (fp_displacement(fp) as usize) & bucket_mask;
    // Never 0: the two buckets of an item always differ, so its Bloom
    // pair really is two buckets.
    bucket ^ if d == 0 { 1 } else { d }
}

impl Keyed {
    #[inline(always)]
    fn derive(fp_mask: u64, bucket_mask: usize, h: u64) -> Self {
        let fp = (h & fp_mask) as u32;
        let fp = if fp == 0 { 1 } else { fp };
        let i1 = ((h >> 32) as usize) & bucket_mask;
        Keyed {
            fp,
            i1,
            i2: alt_bucket(bucket_mask, i1, fp),
        }
    }
}

/// The Bloom-part value of an element with fingerprint `fp` whose buckets
/// are `a` and `b`: 1 in bit mode, a non-zero tag in tag mode.
#[inline(always)]
fn bloom_tag(mode: Option<BloomMode>, fp: u32, a: usize, b: usize) -> u64 {
    match mode {
        Some(BloomMode::Tag { bits }) => {
            // Multiply-shift range reduction onto 1..=2^bits-1.
            let range = (1u64 << bits) - 1;
            (((tag_mix(fp, a.min(b)) >> 32) * range) >> 32) + 1
        }
        _ => 1,
    }
}

/// Everything a lookup reads besides the table's words and stripes, copied
/// out of the filter once per call or batch so the loop keeps it in
/// registers (see [`ReadView`] for why).
///
/// `L` is the layout as a copy (`Layout`, for batches: the copy stays in
/// registers across the group) or as a reference (`&Layout`, for one key:
/// copying every field for one lookup cost more than it saved, callgrind
/// 111 → 121 instructions a single-key lookup).
#[derive(Clone, Copy)]
struct Reader<'a, L> {
    view: ReadView<'a>,
    layout: L,
    bucket_mask: usize,
    mode: Option<BloomMode>,
}

impl<L: Borrow<Layout>> Reader<'_, L> {
    #[inline(always)]
    fn derive(&self, h: u64) -> Keyed {
        Keyed::derive(self.layout.borrow().fp_mask, self.bucket_mask, h)
    }

    /// The lookup proper, for a layout of kind `K`: one validated read of
    /// both buckets, SWAR matching, then the Bloom field.
    #[inline(always)]
    fn lookup<const K: u8, const BLOOM: bool>(&self, k: &Keyed) -> Lookup {
        let l = self.layout.borrow();
        let (b1, b2) = self.view.read_pair::<K>(k.i1, k.i2);
        let (hit, value) = l.probe::<K>(&b1, &b2, l.broadcast(k.fp));
        // `&` rather than `&&`: no branch on the buckets' contents (see
        // `Layout::probe`); the Bloom-field test is cheap arithmetic.
        let bloom = BLOOM && {
            let t1 = l.tag(&b1);
            (t1 != 0) & (t1 == l.tag(&b2)) & (t1 == bloom_tag(self.mode, k.fp, k.i1, k.i2))
        };
        if hit {
            Lookup::Entry(value)
        } else if bloom {
            Lookup::Bloom
        } else {
            Lookup::Miss
        }
    }
    #[inline(always)]
    fn get<const K: u8>(&self, h: u64) -> Lookup {
        // A predicted branch per key (not per batch) on the Bloom field.
        if self.layout.borrow().tag_bits != 0 {
            self.lookup::<K, true>(&self.derive(h))
        } else {
            self.lookup::<K, false>(&self.derive(h))
        }
    }

    #[inline(always)]
    fn batch<const K: u8, const BLOOM: bool>(&self, hashes: &[u64], out: &mut [Lookup]) {
        let mut group = [Keyed::default(); Filter::BATCH];
        for (hs, os) in hashes
            .chunks(Filter::BATCH)
            .zip(out.chunks_mut(Filter::BATCH))
        {
            for (k, &h) in group.iter_mut().zip(hs) {
                *k = self.derive(h);
                self.view.prefetch::<K>(k.i1);
                self.view.prefetch::<K>(k.i2);
            }
            for (k, o) in group.iter().zip(os.iter_mut()) {
                *o = self.lookup::<K, BLOOM>(k);
            }
        }
    }
}

/// Adds `delta` to a counter only the writer changes.
#[inline]
fn bump(counter: &AtomicUsize, delta: isize) {
    let v = counter.load(Ordering::Relaxed);
    counter.store(v.wrapping_add_signed(delta), Ordering::Relaxed);
}

impl Filter {
    /// Builds an empty filter.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.validate()?;
        let tag_bits = config.bloom.map_or(0, |b| b.mode.field_bits());
        let layout = Layout::new(
            config.fingerprint_bits,
            config.value_bits,
            tag_bits,
            config.packed,
        )?;
        let buckets = config.bucket_count()?;
        let stripes = if config.stripes == 0 {
            1024
        } else {
            config.stripes
        };
        let writer = Writer {
            side: BTreeMap::new(),
            rng: Rng(config.seed),
            migrate_from: 0,
        };
        Ok(Self {
            raw: RawTable::new(layout, buckets, stripes, writer),
            bloom: config.bloom,
            config,
            entries: AtomicUsize::new(0),
            bloom_items: AtomicUsize::new(0),
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.raw.layout
    }

    /// The entries counter, for the bulk build (which sets it once).
    pub(crate) fn entries_counter(&self) -> &AtomicUsize {
        &self.entries
    }

    /// Writes item `h` with `value` into a free slot of `bucket` (one of its
    /// two buckets) if there is one. Only for a filter no reader can see
    /// yet (the bulk build); the caller owns `bucket` and counts entries.
    pub(crate) fn place_unpublished(&self, bucket: usize, h: u64, value: u32, cap: u32) -> bool {
        let l = &self.raw.layout;
        let k = self.derive(h);
        debug_assert!(bucket == k.i1 || bucket == k.i2);
        let b = self.raw.load_hint(bucket);
        let empty = l.empty_slots(&b);
        if empty == 0 || ENTRIES_PER_BUCKET as u32 - empty.count_ones() >= cap {
            return false;
        }
        let (w, v) = l.set_entry(
            &b,
            empty.trailing_zeros() as usize,
            l.make_entry(k.fp, value),
        );
        self.raw.store_unpublished(bucket, w, v);
        true
    }

    pub(crate) fn stripe_count(&self) -> usize {
        self.raw.stripe_count()
    }

    pub fn buckets(&self) -> usize {
        self.raw.buckets()
    }

    /// Entries the cuckoo part can hold (4 per bucket).
    pub fn slots(&self) -> usize {
        self.raw.buckets() * ENTRIES_PER_BUCKET
    }

    /// Items held (cuckoo entries plus Bloom-part elements).
    pub fn len(&self) -> usize {
        self.entries.load(Ordering::Relaxed) + self.bloom_items.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements currently in the Bloom part.
    pub fn bloom_len(&self) -> usize {
        self.bloom_items.load(Ordering::Relaxed)
    }

    /// Largest value an entry can carry.
    pub fn max_value(&self) -> u32 {
        self.raw.layout.value_mask as u32
    }

    // ----- hashing -------------------------------------------------------

    #[inline(always)]
    fn alt(&self, bucket: usize, fp: u32) -> usize {
        alt_bucket(self.raw.bucket_mask(), bucket, fp)
    }

    #[inline(always)]
    fn derive(&self, h: u64) -> Keyed {
        Keyed::derive(self.raw.layout.fp_mask, self.raw.bucket_mask(), h)
    }

    /// The two candidate buckets and the fingerprint of a hashed key
    /// (diagnostics and tests).
    pub fn locate_hash(&self, h: u64) -> (usize, usize, u32) {
        let k = self.derive(h);
        (k.i1, k.i2, k.fp)
    }

    /// The Bloom-part value of an element with fingerprint `fp` whose
    /// buckets are `a` and `b`: 1 in bit mode, a non-zero tag in tag mode.
    #[inline(always)]
    fn tag_for(&self, fp: u32, a: usize, b: usize) -> u64 {
        bloom_tag(self.bloom.map(|b| b.mode), fp, a, b)
    }

    // ----- lookups -------------------------------------------------------

    /// What a lookup reads, copied out once per call or batch.
    #[inline(always)]
    fn reader<'a, L: Borrow<Layout>>(&'a self, layout: L) -> Reader<'a, L> {
        Reader {
            view: self.raw.view(),
            layout,
            bucket_mask: self.raw.bucket_mask(),
            mode: self.bloom.map(|b| b.mode),
        }
    }

    /// Looks up a pre-hashed key. Lock-free and write-free.
    #[inline]
    pub fn get_hash(&self, h: u64) -> Lookup {
        let r = self.reader(&self.raw.layout);
        match r.layout.kind() {
            kind::PACKED => r.get::<{ kind::PACKED }>(h),
            kind::TWO_WORDS => r.get::<{ kind::TWO_WORDS }>(h),
            _ => r.get::<{ kind::ONE_WORD }>(h),
        }
    }

    #[inline]
    pub fn contains_hash(&self, h: u64) -> bool {
        self.get_hash(h).is_hit()
    }

    pub fn get(&self, key: &[u8]) -> Lookup {
        self.get_hash(hash_bytes(key))
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.get_hash(hash_bytes(key)).is_hit()
    }

    /// Batched lookup of pre-hashed keys, the DPDK bulk-lookup pattern: for
    /// each group of up to [`Filter::BATCH`] keys, every key's position is
    /// derived and both its buckets are prefetched first, then the keys are
    /// probed, so the cache misses of a whole group overlap instead of
    /// adding up. Answers are identical to [`Filter::get_hash`] on each key.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn get_batch_hashes(&self, hashes: &[u64], out: &mut [Lookup]) {
        assert!(out.len() >= hashes.len(), "output slice too short");
        let r = self.reader(self.raw.layout);
        // Specialised on the Bloom field as well as the layout: a loop that
        // never reads the field has registers to spare, and both kinds of
        // filter measured faster so (see `ReadView`).
        let bloom = r.layout.tag_bits != 0;
        match r.layout.kind() {
            kind::PACKED if bloom => r.batch::<{ kind::PACKED }, true>(hashes, out),
            kind::PACKED => r.batch::<{ kind::PACKED }, false>(hashes, out),
            kind::TWO_WORDS if bloom => r.batch::<{ kind::TWO_WORDS }, true>(hashes, out),
            kind::TWO_WORDS => r.batch::<{ kind::TWO_WORDS }, false>(hashes, out),
            _ if bloom => r.batch::<{ kind::ONE_WORD }, true>(hashes, out),
            _ => r.batch::<{ kind::ONE_WORD }, false>(hashes, out),
        }
    }

    /// Keys whose buckets one batched-lookup group prefetches before probing.
    /// 32 keys are 64 outstanding lines: enough to cover DRAM latency, few
    /// enough that the first lines are still in L1 when they are probed.
    pub const BATCH: usize = 32;

    /// Batched lookup of byte keys (hashes, then [`Filter::get_batch_hashes`]),
    /// in groups of 64 on the stack: no allocation.
    pub fn get_batch<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut [Lookup]) {
        assert!(out.len() >= keys.len(), "output slice too short");
        let mut hashes = [0u64; 64];
        for (ks, os) in keys.chunks(64).zip(out.chunks_mut(64)) {
            for (h, k) in hashes.iter_mut().zip(ks) {
                *h = hash_bytes(k.as_ref());
            }
            self.get_batch_hashes(&hashes[..ks.len()], os);
        }
    }

    // ----- writes ----------------------------------------------------------
    //
    // Every write goes through the writers' mutex (writers are serialised).
    // The methods on `Filter` take it for one operation; `Filter::writer`
    // holds it across many, which is what a batch of updates wants: no
    // locked instruction per operation, so the CPU overlaps the cache misses
    // of consecutive inserts as it does for lookups.

    /// Exclusive write access across many operations (e.g. one batch of
    /// rule updates). Readers are never blocked by it; other writers wait
    /// until the handle is dropped.
    pub fn writer(&self) -> FilterWriter<'_> {
        FilterWriter {
            filter: self,
            guard: self.raw.write(),
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
        self.writer().insert_hash(h, value)
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
        self.writer().insert_hash_with(h, value, threshold)
    }

    /// Removes a byte key inserted with value 0.
    pub fn remove(&self, key: &[u8]) -> bool {
        self.remove_hash(hash_bytes(key), 0)
    }

    /// Algorithm 1 of the Bloom-Cuckoo paper; see [`FilterWriter::remove_hash`].
    pub fn remove_hash(&self, h: u64, value: u32) -> bool {
        self.writer().remove_hash(h, value)
    }

    /// See [`FilterWriter::replace_value`].
    pub fn replace_value(&self, h: u64, old: u32, new: u32) -> Result<bool, InsertError> {
        self.writer().replace_value(h, old, new)
    }

    /// See [`FilterWriter::migrate`].
    pub fn migrate(&self, budget: usize) -> usize {
        self.writer().migrate(budget)
    }

    fn insert_locked(
        &self,
        w: &mut Guard<'_>,
        h: u64,
        value: u32,
        threshold: Option<u32>,
    ) -> Result<InsertOutcome, InsertError> {
        let threshold = threshold.filter(|_| self.bloom.is_some());
        if value > self.max_value() {
            return Err(InsertError::ValueTooWide {
                value,
                bits: self.config.value_bits,
            });
        }
        let k = self.derive(h);
        let l = &self.raw.layout;
        let entry = l.make_entry(k.fp, value);
        // Fast path, iteration 1 of the walk when it finds room (most
        // inserts below high load): the primary bucket, then the alternate
        // only when the primary is full (one cache miss, not two, as in the
        // paper authors' code), written in place without a plan.
        for bucket in [k.i1, k.i2] {
            let b = self.raw.load_hint(bucket);
            let empty = l.empty_slots(&b);
            if empty != 0 {
                let (wi, v) = l.set_entry(&b, empty.trailing_zeros() as usize, entry);
                let g = self.raw.lock_pair(w, bucket, bucket);
                self.raw.store_locked(&g, bucket, wi, v);
                drop(g);
                bump(&self.entries, 1);
                return Ok(InsertOutcome {
                    placement: Placement::Entry,
                    bloom_added: false,
                    evicted: None,
                    iterations: 1,
                });
            }
        }
        let plan = self
            .plan(&k, entry, threshold, &mut w.rng)
            .map_err(|iterations| InsertError::Full { iterations })?;
        let evicted = match (plan.terminal, plan.path.last()) {
            (Terminal::Bloom { .. }, Some(last)) => Some(self.raw.layout.entry_value(last.orig)),
            _ => None,
        };
        let (placement, bloom_added) = self.execute(w, &k, entry, &plan, Final::Insert);
        Ok(InsertOutcome {
            placement,
            bloom_added,
            evicted,
            iterations: plan.iterations,
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

    /// A bucket as the plan sees it: the table with the plan's placements.
    /// `on_path` holds every bucket the path
    /// touches, so most reads skip the scan of the path.
    fn sim_bucket(&self, bucket: usize, path: &[Step], on_path: &OnPath) -> Bucket {
        let l = &self.raw.layout;
        let mut b = self.raw.load_hint(bucket);
        if !on_path.may_contain(bucket) {
            return b;
        }
        for st in path.iter().filter(|st| st.loc.bucket == bucket) {
            let (w, v) = l.set_entry(&b, st.loc.slot, st.placed);
            b[w] = v;
        }
        b
    }

    /// Plans Algorithm 2 for item `entry` at `k` without changing anything.
    /// `threshold`: `Some(t)` allows the Bloom part from iteration `t + 1`;
    /// `None` is the plain cuckoo filter's walk (Fan et al.), also used by
    /// migration: no Bloom part, and every eviction is from the bucket the
    /// homeless entry could not enter.
    ///
    /// The walk is loop-erased: when it evicts an entry that it placed
    /// itself earlier, the entries between form a cycle that would end where
    /// they started, so that part of the path is dropped and the walk goes
    /// on with the evicted entry. Iterations still count every step.
    /// Fails with the iterations spent when the walk finds no room.
    #[allow(clippy::too_many_lines)] // longer than 80 lines: split pending (issue 29)
    fn plan(
        &self,
        k: &Keyed,
        entry: u64,
        threshold: Option<u32>,
        rng: &mut Rng,
    ) -> Result<Plan, u32> {
        let l = &self.raw.layout;
        let bloom_ok = |i: u32| threshold.is_some_and(|t| i > t);
        let max = self.config.max_kicks;
        let mut path = Plan::buffer();
        let done = |path: Vec<Step>, terminal, iterations| {
            Ok(Plan {
                path,
                terminal,
                iterations,
            })
        };

        // Iteration 1: both candidate buckets, the primary first, and the
        // alternate only when the primary is full, as the paper authors'
        // code does: below high load most inserts then cost one cache miss,
        // not two (2^22 buckets, empty to 95 %: 1.25× the insert rate).
        let mut i = 1;
        let b1 = self.raw.load_hint(k.i1);
        let e1 = l.empty_slots(&b1);
        if e1 != 0 {
            let loc = Loc {
                bucket: k.i1,
                slot: e1.trailing_zeros() as usize,
            };
            return done(path, Terminal::Empty(loc), i);
        }
        let b2 = self.raw.load_hint(k.i2);
        let e2 = l.empty_slots(&b2);
        if e2 != 0 {
            let loc = Loc {
                bucket: k.i2,
                slot: e2.trailing_zeros() as usize,
            };
            return done(path, Terminal::Empty(loc), i);
        }
        // The plain path searches breadth-first; should that find nothing
        // within `max_kicks` bucket reads (it explores only about four
        // levels), the random walk, which can follow longer paths, gets
        // another `max_kicks`: near full load this is what keeps the load
        // factor the walk alone reached.
        let mut spent = 0;
        if threshold.is_none() {
            match self.plan_bfs(k, entry, path) {
                Ok(plan) => return Ok(plan),
                Err(reads) => {
                    spent = reads;
                    path = Plan::buffer();
                }
            }
        }
        if bloom_ok(i) && l.tag(&b1) == 0 && l.tag(&b2) == 0 {
            return done(path, Terminal::Bloom { a: k.i1, b: k.i2 }, i + spent);
        }
        let mut a = if rng.coin() { k.i1 } else { k.i2 };
        let slot = rng.below(ENTRIES_PER_BUCKET);
        let victim = l.entry(if a == k.i1 { &b1 } else { &b2 }, slot);
        path.push(Step {
            loc: Loc { bucket: a, slot },
            placed: entry,
            orig: victim,
        });
        let mut on_path = OnPath::new();
        on_path.insert(a);
        let mut homeless = victim;

        while i < max {
            i += 1;
            let be = self.alt(a, l.entry_fp(homeless));
            let bb = self.sim_bucket(be, &path, &on_path);
            let empty = l.empty_slots(&bb);
            if empty != 0 {
                let loc = Loc {
                    bucket: be,
                    slot: rng.pick_bit(empty),
                };
                return done(path, Terminal::Empty(loc), i + spent);
            }
            if bloom_ok(i) && l.tag(&bb) == 0 && l.tag(&self.raw.load_hint(a)) == 0 {
                return done(path, Terminal::Bloom { a, b: be }, i + spent);
            }
            // Algorithm 2 (line 37) picks the next bucket at random between
            // the pair; the plain cuckoo filter of Fan et al. always evicts
            // from the bucket the homeless entry could not enter.
            let next = if threshold.is_some() && rng.coin() {
                a
            } else {
                be
            };
            let contents = if next == be {
                bb
            } else {
                self.sim_bucket(a, &path, &on_path)
            };
            let loc = Loc {
                bucket: next,
                slot: rng.below(ENTRIES_PER_BUCKET),
            };
            let victim = l.entry(&contents, loc.slot);
            let seen = on_path.may_contain(loc.bucket);
            let erase_at = if seen {
                path.iter().position(|st| st.loc == loc)
            } else {
                None
            };
            if let Some(j) = erase_at {
                // Loop erasure: `victim` is the entry the plan put at `loc`.
                path.truncate(j);
                on_path = OnPath::of(&path);
            } else {
                path.push(Step {
                    loc,
                    placed: homeless,
                    orig: victim,
                });
                on_path.insert(loc.bucket);
            }
            homeless = victim;
            a = next;
        }
        // Back to the thread's buffer, as a dropped plan would give it.
        drop(Plan {
            path,
            terminal: Terminal::Empty(Loc { bucket: 0, slot: 0 }),
            iterations: i,
        });
        Err(i + spent)
    }

    /// The plain cuckoo path (no Bloom part), found by breadth-first search
    /// from both full candidate buckets, as libcuckoo does, instead of the
    /// random walk: the shortest path to a free slot, and the buckets of a
    /// whole level are prefetched together, so a search costs about one
    /// memory latency per level rather than one per step of a walk. Bounded
    /// by `max_kicks` bucket reads. Buckets are visited at most once, so the
    /// path's slots are all distinct.
    fn plan_bfs(&self, k: &Keyed, entry: u64, path: Vec<Step>) -> Result<Plan, u32> {
        const ROOT: u32 = u32::MAX;
        let max = self.config.max_kicks;
        // Seen buckets, as a 4096-bit set of `bucket mod 4096`: a collision
        // only skips a bucket, which can make a path longer, never wrong.
        let mut seen = [0u64; 64];
        let mut mark = |b: usize| {
            let (w, bit) = ((b >> 6) & 63, 1u64 << (b & 63));
            let fresh = seen[w] & bit == 0;
            seen[w] |= bit;
            fresh
        };
        let root = |bucket| Node {
            bucket,
            parent: ROOT,
            slot: 0,
            victim: 0,
        };
        let mut nodes = BFS_NODES
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        nodes.clear();
        nodes.push(root(k.i1));
        nodes.push(root(k.i2));
        let result = self.bfs(k, entry, path, &mut nodes, &mut mark, max);
        // On failure the path buffer was dropped inside; the node buffer
        // goes back to the thread either way.
        let _ = BFS_NODES.try_with(|b| b.set(nodes));
        result
    }

    /// The search proper, over `nodes` (the two roots already in it).
    fn bfs(
        &self,
        k: &Keyed,
        entry: u64,
        mut path: Vec<Step>,
        nodes: &mut Vec<Node>,
        mark: &mut impl FnMut(usize) -> bool,
        max: u32,
    ) -> Result<Plan, u32> {
        const ROOT: u32 = u32::MAX;
        let l = &self.raw.layout;
        mark(k.i1);
        mark(k.i2);
        let mut reads = 2u32;
        let mut level = 0..nodes.len();
        while !level.is_empty() {
            // Expand: every entry of a full bucket could move to its other
            // bucket; prefetch those buckets all at once.
            let next = nodes.len();
            for n in level {
                let node = nodes[n];
                let b = self.raw.load_hint(node.bucket);
                for slot in 0..ENTRIES_PER_BUCKET {
                    let victim = l.entry(&b, slot);
                    let child = self.alt(node.bucket, l.entry_fp(victim));
                    if mark(child) {
                        self.raw.prefetch(child);
                        nodes.push(Node {
                            bucket: child,
                            parent: n as u32,
                            slot: slot as u8,
                            victim,
                        });
                    }
                }
            }
            for c in next..nodes.len() {
                if reads >= max {
                    return Err(reads);
                }
                reads += 1;
                let empty = l.empty_slots(&self.raw.load_hint(nodes[c].bucket));
                if empty == 0 {
                    continue;
                }
                // Found: walk back to the root emitting the steps last
                // first, then put them in order (see `Step` and `execute`).
                let mut moved = nodes[c];
                while moved.parent != ROOT {
                    let here = nodes[moved.parent as usize];
                    path.push(Step {
                        loc: Loc {
                            bucket: here.bucket,
                            slot: moved.slot as usize,
                        },
                        placed: if here.parent == ROOT {
                            entry
                        } else {
                            here.victim
                        },
                        orig: moved.victim,
                    });
                    moved = here;
                }
                path.reverse();
                let dst = Loc {
                    bucket: nodes[c].bucket,
                    slot: empty.trailing_zeros() as usize,
                };
                return Ok(Plan {
                    path,
                    terminal: Terminal::Empty(dst),
                    iterations: reads,
                });
            }
            level = next..nodes.len();
        }
        Err(reads)
    }

    /// Executes a plan backwards (see the module docs). Returns where the
    /// planned item went and whether the Bloom part grew. The plan was made
    /// under the same writer guard, so what it expects of every slot still
    /// holds (debug builds check it).
    fn execute(
        &self,
        w: &mut Guard<'_>,
        k: &Keyed,
        entry: u64,
        plan: &Plan,
        fin: Final,
    ) -> (Placement, bool) {
        let path = &plan.path;
        let mut bloom_added = false;
        match (plan.terminal, path.last()) {
            (Terminal::Empty(dst), None) => return self.place_final(w, k, entry, dst, fin),
            (Terminal::Bloom { .. }, None) => return self.place_new_in_bloom(w, k, entry, fin),
            (Terminal::Empty(dst), Some(last)) => self.move_entry(w, last.loc, dst, last.orig),
            (Terminal::Bloom { a, b }, Some(last)) => {
                self.move_to_bloom(w, last.loc, last.orig, a, b);
                bloom_added = true;
            }
        }
        for j in (1..path.len()).rev() {
            self.move_entry(w, path[j - 1].loc, path[j].loc, path[j].placed);
        }
        let (placement, grew) = self.place_final(w, k, entry, path[0].loc, fin);
        (placement, grew || bloom_added)
    }

    /// Moves `entry` from `src` to the empty slot `dst` (the two buckets of
    /// that entry): the destination is written before the source is
    /// cleared, while both buckets' stripes are busy. The new words are
    /// computed first, so the stripes are busy for two stores only.
    fn move_entry(&self, w: &Guard<'_>, src: Loc, dst: Loc, entry: u64) {
        let l = &self.raw.layout;
        let bs = self.raw.load_hint(src.bucket);
        let bd = self.raw.load_hint(dst.bucket);
        debug_assert!(l.entry(&bs, src.slot) == entry && l.is_empty(&bd, dst.slot));
        let (wd, vd) = l.set_entry(&bd, dst.slot, entry);
        let mut bs = bs;
        if dst.bucket == src.bucket {
            bs[wd] = vd;
        }
        let (ws, vs) = l.set_entry(&bs, src.slot, 0);
        let g = self.raw.lock_pair(w, src.bucket, dst.bucket);
        self.raw.store_locked(&g, dst.bucket, wd, vd);
        self.raw.store_locked(&g, src.bucket, ws, vs);
    }

    /// Sets the Bloom fields of the pair `(a, b)` to the element's tag.
    fn write_tags(&self, g: &StripeGuard<'_, Writer>, a: usize, b: usize, tag: u64) {
        let l = &self.raw.layout;
        let (ba, bb) = (self.raw.load_locked(g, a), self.raw.load_locked(g, b));
        self.raw.store_locked(g, a, 0, l.with_tag(ba[0], tag));
        self.raw.store_locked(g, b, 0, l.with_tag(bb[0], tag));
    }

    /// Moves the entry at `src` into the Bloom part of its pair `(a, b)`
    /// (Algorithm 2, lines 33–35): tags first, then the entry is cleared,
    /// while both stripes are busy; then the side table records it, after
    /// the stripes are free again (no allocation while readers may wait).
    fn move_to_bloom(&self, w: &mut Guard<'_>, src: Loc, entry: u64, a: usize, b: usize) {
        let l = &self.raw.layout;
        debug_assert!(l.entry(&self.raw.load_hint(src.bucket), src.slot) == entry);
        debug_assert!(l.tag(&self.raw.load_hint(a)) == 0 && l.tag(&self.raw.load_hint(b)) == 0);
        let fp = l.entry_fp(entry);
        let tag = self.tag_for(fp, a, b);
        {
            let g = self.raw.lock_pair(w, a, b);
            self.write_tags(&g, a, b, tag);
            let bs = self.raw.load_locked(&g, src.bucket);
            let (ws, vs) = l.set_entry(&bs, src.slot, 0);
            self.raw.store_locked(&g, src.bucket, ws, vs);
        }
        bump(&self.entries, -1);
        self.record_bloom(w, a, b, fp, l.entry_value(entry));
    }

    fn record_bloom(&self, w: &mut Guard<'_>, a: usize, b: usize, fp: u32, value: u32) {
        let rec = BloomRecord {
            fp,
            value,
            high: a.max(b),
        };
        let prev = w.side.insert(a.min(b), rec);
        debug_assert!(prev.is_none(), "Bloom field owned twice");
        bump(&self.bloom_items, 1);
    }

    /// The new item goes straight into the Bloom part (Algorithm 2, line 8).
    fn place_new_in_bloom(
        &self,
        w: &mut Guard<'_>,
        k: &Keyed,
        entry: u64,
        fin: Final,
    ) -> (Placement, bool) {
        debug_assert!(
            matches!(fin, Final::Insert),
            "migration never ends in the Bloom part"
        );
        let l = &self.raw.layout;
        let tag = self.tag_for(k.fp, k.i1, k.i2);
        {
            let g = self.raw.lock_pair(w, k.i1, k.i2);
            self.write_tags(&g, k.i1, k.i2, tag);
        }
        self.record_bloom(w, k.i1, k.i2, k.fp, l.entry_value(entry));
        (Placement::Bloom, true)
    }

    /// Last step of a plan: the planned item into the (now empty) `dst`.
    fn place_final(
        &self,
        w: &mut Guard<'_>,
        k: &Keyed,
        entry: u64,
        dst: Loc,
        fin: Final,
    ) -> (Placement, bool) {
        let l = &self.raw.layout;
        let bd = self.raw.load_hint(dst.bucket);
        debug_assert!(l.is_empty(&bd, dst.slot));
        let (wd, vd) = l.set_entry(&bd, dst.slot, entry);
        match fin {
            Final::Insert => {
                let g = self.raw.lock_pair(w, k.i1, k.i2);
                self.raw.store_locked(&g, dst.bucket, wd, vd);
                drop(g);
                bump(&self.entries, 1);
            }
            Final::Migrate(rec) => {
                let (lo, hi) = (k.i1.min(k.i2), k.i1.max(k.i2));
                debug_assert_eq!(w.side.get(&lo), Some(&rec));
                {
                    // Fingerprint first, then the Bloom fields are cleared:
                    // the element is visible through one or the other at all
                    // times (and readers see both stores or neither).
                    let g = self.raw.lock_pair(w, lo, hi);
                    self.raw.store_locked(&g, dst.bucket, wd, vd);
                    for bucket in [lo, hi] {
                        let b = self.raw.load_locked(&g, bucket);
                        self.raw.store_locked(&g, bucket, 0, l.with_tag(b[0], 0));
                    }
                }
                w.side.remove(&lo);
                bump(&self.entries, 1);
                bump(&self.bloom_items, -1);
            }
        }
        (Placement::Entry, false)
    }

    // ----- removal and updates ------------------------------------------

    fn remove_locked(&self, w: &mut Guard<'_>, h: u64, value: u32) -> bool {
        if value > self.max_value() {
            return false;
        }
        let l = &self.raw.layout;
        let k = self.derive(h);
        let entry = l.make_entry(k.fp, value);
        for bucket in [k.i1, k.i2] {
            let b = self.raw.load_hint(bucket);
            if let Some(s) = l.find_entry(&b, entry) {
                let (wi, v) = l.set_entry(&b, s, 0);
                let g = self.raw.lock_pair(w, bucket, bucket);
                self.raw.store_locked(&g, bucket, wi, v);
                drop(g);
                bump(&self.entries, -1);
                return true;
            }
        }
        if l.tag_bits == 0 {
            return false;
        }
        let (lo, hi) = (k.i1.min(k.i2), k.i1.max(k.i2));
        let expected = BloomRecord {
            fp: k.fp,
            value,
            high: hi,
        };
        if w.side.get(&lo) != Some(&expected) {
            return false;
        }
        {
            let g = self.raw.lock_pair(w, lo, hi);
            for bucket in [lo, hi] {
                let b = self.raw.load_locked(&g, bucket);
                self.raw.store_locked(&g, bucket, 0, l.with_tag(b[0], 0));
            }
        }
        w.side.remove(&lo);
        bump(&self.bloom_items, -1);
        true
    }

    fn replace_locked(
        &self,
        w: &mut Guard<'_>,
        h: u64,
        old: u32,
        new: u32,
    ) -> Result<bool, InsertError> {
        if new > self.max_value() {
            return Err(InsertError::ValueTooWide {
                value: new,
                bits: self.config.value_bits,
            });
        }
        if old > self.max_value() {
            return Ok(false);
        }
        let l = &self.raw.layout;
        let k = self.derive(h);
        let entry = l.make_entry(k.fp, old);
        for bucket in [k.i1, k.i2] {
            let b = self.raw.load_hint(bucket);
            if let Some(s) = l.find_entry(&b, entry) {
                let (wi, v) = l.set_entry(&b, s, l.make_entry(k.fp, new));
                let g = self.raw.lock_pair(w, bucket, bucket);
                self.raw.store_locked(&g, bucket, wi, v);
                return Ok(true);
            }
        }
        let (lo, hi) = (k.i1.min(k.i2), k.i1.max(k.i2));
        match w.side.get_mut(&lo) {
            Some(r) if r.fp == k.fp && r.value == old && r.high == hi => {
                r.value = new;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    // ----- migration -----------------------------------------------------

    fn migrate_locked(&self, w: &mut Guard<'_>, budget: usize) -> usize {
        if self.bloom.is_none() || budget == 0 {
            return 0;
        }
        let from = w.migrate_from;
        let candidates: Vec<(usize, BloomRecord)> = w
            .side
            .range(from..)
            .chain(w.side.range(..from))
            .take(budget)
            .map(|(&lo, &r)| (lo, r))
            .collect();
        let l = &self.raw.layout;
        let mut moved = 0;
        for (lo, rec) in candidates {
            w.migrate_from = lo + 1;
            let k = Keyed {
                fp: rec.fp,
                i1: lo,
                i2: rec.high,
            };
            let entry = l.make_entry(rec.fp, rec.value);
            let Ok(plan) = self.plan(&k, entry, None, &mut w.rng) else {
                continue;
            };
            self.execute(w, &k, entry, &plan, Final::Migrate(rec));
            moved += 1;
        }
        moved
    }

    // ----- statistics ----------------------------------------------------

    pub fn stats(&self) -> Stats {
        let l = &self.raw.layout;
        let entries = self.entries.load(Ordering::Relaxed);
        let bloom_items = self.bloom_items.load(Ordering::Relaxed);
        let items = entries + bloom_items;
        let buckets = self.raw.buckets();
        let load = entries as f64 / (buckets * ENTRIES_PER_BUCKET) as f64;
        let f = l.fp_bits as i32;
        // Each of the 2b probed entries holds a fingerprint with probability
        // `load`, equal to the probe's with probability 1/(2^f − 1).
        let per_entry = load / (2f64.powi(f) - 1.0);
        let fpr_cf = 1.0 - (1.0 - per_entry).powi(2 * ENTRIES_PER_BUCKET as i32);
        let fpr_bf = match self.bloom.map(|b| b.mode) {
            None => 0.0,
            Some(mode) => {
                let occupied = (2.0 * bloom_items as f64 / buckets as f64).min(1.0);
                let tags = match mode {
                    BloomMode::Bit => 1.0,
                    BloomMode::Tag { bits } => 2f64.powi(bits as i32) - 1.0,
                };
                (occupied / tags).powi(2)
            }
        };
        let memory_bytes = buckets * l.bucket_bits() / 8;
        Stats {
            items,
            entries,
            bloom_items,
            buckets,
            fingerprint_bits: l.fp_bits,
            value_bits: l.value_bits,
            bloom_field_bits: l.tag_bits,
            load_factor: load,
            bits_per_item: if items == 0 {
                f64::INFINITY
            } else {
                (memory_bytes * 8) as f64 / items as f64
            },
            estimated_fpr: 1.0 - (1.0 - fpr_cf) * (1.0 - fpr_bf),
            fpr_bound: 1.0 - (1.0 - 2f64.powi(-f)).powi(2 * ENTRIES_PER_BUCKET as i32),
            memory_bytes,
        }
    }

    // ----- snapshot support ---------------------------------------------

    /// Everything `to_bytes` needs, read while writers are excluded.
    pub(crate) fn image_parts(&self) -> (Vec<u64>, Vec<(usize, BloomRecord)>, usize, usize) {
        let w = self.raw.write();
        let words = self.raw.words_snapshot();
        let side = w.side.iter().map(|(&k, &r)| (k, r)).collect();
        (
            words,
            side,
            self.entries.load(Ordering::Relaxed),
            self.bloom_items.load(Ordering::Relaxed),
        )
    }

    /// Builds a filter from validated image parts.
    pub(crate) fn from_parts(
        config: Config,
        words: &[u64],
        side: Vec<(usize, BloomRecord)>,
        entries: usize,
    ) -> Result<Self, ConfigError> {
        let f = Self::new(config)?;
        f.raw.load_words(words);
        let bloom = side.len();
        f.raw.write().side = side.into_iter().collect();
        f.entries.store(entries, Ordering::Relaxed);
        f.bloom_items.store(bloom, Ordering::Relaxed);
        Ok(f)
    }

    /// Expected Bloom tag of a side-table record (snapshot validation).
    pub(crate) fn record_tag(&self, lo: usize, rec: &BloomRecord) -> u64 {
        self.tag_for(rec.fp, lo, rec.high)
    }

    /// Whether `high` is the alternate bucket of `lo` for fingerprint `fp`.
    pub(crate) fn is_pair(&self, lo: usize, high: usize, fp: u32) -> bool {
        self.alt(lo, fp) == high
    }
}

/// Exclusive write access to a [`Filter`], from [`Filter::writer`]. Holds
/// the writers' mutex until dropped; lookups go on meanwhile.
pub struct FilterWriter<'a> {
    filter: &'a Filter,
    guard: Guard<'a>,
}

impl std::fmt::Debug for FilterWriter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterWriter").finish_non_exhaustive()
    }
}

impl FilterWriter<'_> {
    /// [`Filter::insert_hash`] under this handle.
    pub fn insert_hash(&mut self, h: u64, value: u32) -> Result<InsertOutcome, InsertError> {
        let t = self.filter.bloom.map(|b| b.threshold);
        self.filter.insert_locked(&mut self.guard, h, value, t)
    }

    /// [`Filter::insert_hash_with`] under this handle.
    pub fn insert_hash_with(
        &mut self,
        h: u64,
        value: u32,
        threshold: Option<u32>,
    ) -> Result<InsertOutcome, InsertError> {
        self.filter
            .insert_locked(&mut self.guard, h, value, threshold)
    }

    /// Algorithm 1 of the Bloom-Cuckoo paper: removes one copy of the item (fingerprint
    /// and value) from its cuckoo entries, else from the Bloom part. Only
    /// items that were inserted may be removed (as for any cuckoo filter);
    /// the Bloom part is cleared only when the side table confirms that the
    /// element holding the pair is this one, so a stray remove cannot clear
    /// another element's bits. Returns false when nothing matched.
    pub fn remove_hash(&mut self, h: u64, value: u32) -> bool {
        self.filter.remove_locked(&mut self.guard, h, value)
    }

    /// Changes the value of one copy of an item in place (atomically for
    /// readers: they see the old or the new value, never a miss). Returns
    /// false when no copy with `old` exists.
    pub fn replace_value(&mut self, h: u64, old: u32, new: u32) -> Result<bool, InsertError> {
        self.filter.replace_locked(&mut self.guard, h, old, new)
    }

    /// Moves up to `budget` elements from the Bloom part back into cuckoo
    /// entries (the Bloom-Cuckoo paper, end of section III), restoring the FPR and the
    /// room for the next burst. Each element's fingerprint is written before
    /// its Bloom fields are cleared. Elements with no room within
    /// `max_kicks` stay in the Bloom part. Returns how many moved.
    ///
    /// Calls take turns over the side table: each call starts after the last
    /// element the previous call tried, so elements that cannot move yet
    /// never keep the others from being tried.
    pub fn migrate(&mut self, budget: usize) -> usize {
        self.filter.migrate_locked(&mut self.guard, budget)
    }
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
        let w = self.raw.write();
        self.move_entry(&w, src, dst, entry);
    }

    /// Moves the item's entry into the Bloom part of its pair.
    pub(crate) fn test_evict_to_bloom(&self, h: u64, value: u32) {
        let (k, entry, src) = self.test_find(h, value);
        let mut w = self.raw.write();
        self.move_to_bloom(&mut w, src, entry, k.i1, k.i2);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn tiny(log2: u32, bloom: Option<BloomConfig>) -> Filter {
        Filter::new(Config {
            buckets_log2: Some(log2),
            fingerprint_bits: 12,
            value_bits: 4,
            bloom,
            max_kicks: 1000,
            ..Config::default()
        })
        .unwrap()
    }

    #[test]
    fn plan_paths_have_distinct_slots_and_valid_moves() {
        let f = tiny(4, None);
        let mut x = 1u64;
        let mut rng = Rng(7);
        for _ in 0..60 {
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
            let _ = f.insert_hash(x, 1);
        }
        for n in 0..200u64 {
            let k = f.derive(n.wrapping_mul(0x1234_5678_9abc_def1));
            let entry = f.layout().make_entry(k.fp, 2);
            let Ok(plan) = f.plan(&k, entry, None, &mut rng) else {
                continue;
            };
            let locs: Vec<Loc> = plan.path.iter().map(|s| s.loc).collect();
            for (i, a) in locs.iter().enumerate() {
                assert!(!locs[i + 1..].contains(a), "slot repeated in plan");
            }
            for w in plan.path.windows(2) {
                // The entry placed at step j+1 was the occupant of step j's slot,
                // and its destination bucket is one of its two buckets.
                assert_eq!(w[1].placed, w[0].orig);
                let fp = f.layout().entry_fp(w[1].placed);
                let b = w[0].loc.bucket;
                assert!(w[1].loc.bucket == b || w[1].loc.bucket == f.alt(b, fp));
            }
        }
    }

    #[test]
    fn protocol_steps_keep_item_visible_and_counts_right() {
        let f = tiny(
            3,
            Some(BloomConfig {
                mode: BloomMode::Bit,
                threshold: 0,
            }),
        );
        let h = 0x0123_4567_89ab_cdef;
        f.insert_hash(h, 3).unwrap();
        f.test_relocate(h, 3);
        assert_eq!(f.get_hash(h), Lookup::Entry(3));
        f.test_evict_to_bloom(h, 3);
        assert_eq!(f.get_hash(h), Lookup::Bloom);
        assert_eq!((f.len(), f.bloom_len()), (1, 1));
        assert_eq!(f.migrate(1), 1);
        assert_eq!(f.get_hash(h), Lookup::Entry(3));
        assert_eq!((f.len(), f.bloom_len()), (1, 0));
    }

    #[test]
    fn value_too_wide_is_refused_and_changes_nothing() {
        let f = tiny(4, None);
        assert_eq!(
            f.insert_hash(5, 16),
            Err(InsertError::ValueTooWide { value: 16, bits: 4 })
        );
        assert!(f.is_empty());
    }
}
