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
//! stripes of both buckets of the moving entry are marked busy. Writers of a
//! partition are serialised (one at a time, see `raw.rs`), and a walk never
//! leaves the partition of its item (an item's two buckets share the
//! partition bits), so the plan is still exact when it runs and a failed
//! insert has written nothing, while writers of other partitions go on. So
//! no entry is ever absent from both its buckets, and readers, which
//! validate both stripes' versions, never see a move half done.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use crate::config::{BloomMode, Config, ConfigError};
use crate::hash::hash_bytes;
use crate::layout::{kind, Bucket, Layout, ENTRIES_PER_BUCKET};
use crate::outcome::{Candidates, Lookup, Stats};
use crate::raw::{partition_shift, AltMask, RawTable, ReadView};
#[cfg(any(test, loom))]
use crate::state::Loc;
use crate::state::{alt_bucket, bloom_tag, Counts, Filter, Keyed, Rng, Writer};
use crate::sync::{AtomicU32, CachePadded, Ordering};

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
    alt_mask: AltMask,
    mode: Option<BloomMode>,
}

impl<L: Borrow<Layout>> Reader<'_, L> {
    #[inline(always)]
    fn derive(&self, h: u64) -> Keyed {
        Keyed::derive(
            self.layout.borrow().fp_mask,
            self.bucket_mask,
            self.alt_mask,
            h,
        )
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
    /// [`Self::lookup`] for one key: the Bloom field is read only on a
    /// miss (a branch the batch path avoids, where it would mispredict
    /// across keys; one key's caller branches on the answer anyway).
    #[inline(always)]
    fn lookup_one<const K: u8, const BLOOM: bool>(&self, k: &Keyed) -> Lookup {
        let l = self.layout.borrow();
        let (b1, b2) = self.view.read_pair::<K>(k.i1, k.i2);
        let (hit, value) = l.probe::<K>(&b1, &b2, l.broadcast(k.fp));
        if hit {
            return Lookup::Entry(value);
        }
        if BLOOM {
            let t1 = l.tag(&b1);
            if (t1 != 0) & (t1 == l.tag(&b2)) & (t1 == bloom_tag(self.mode, k.fp, k.i1, k.i2)) {
                return Lookup::Bloom;
            }
        }
        Lookup::Miss
    }

    #[inline(always)]
    fn get<const K: u8>(&self, h: u64) -> Lookup {
        // A predicted branch per key (not per batch) on the Bloom field.
        if self.layout.borrow().tag_bits != 0 {
            self.lookup_one::<K, true>(&self.derive(h))
        } else {
            self.lookup_one::<K, false>(&self.derive(h))
        }
    }

    /// Every entry of `h`'s two buckets whose fingerprint matches, and the
    /// Bloom field's answer, from one validated read of the pair.
    fn candidates<const K: u8>(&self, h: u64, values: &[AtomicU32]) -> Candidates {
        let l = self.layout.borrow();
        let k = self.derive(h);
        let lo = k.i1.min(k.i2);
        let ((b1, b2), kept) = self.view.read_pair_with::<K, _>(k.i1, k.i2, || {
            values.get(lo).map(|v| v.load(Ordering::Acquire))
        });
        let mut c = Candidates::default();
        // A bucket that is its own alternate is scanned once.
        let pair: &[&Bucket] = if k.i1 == k.i2 { &[&b1] } else { &[&b1, &b2] };
        for b in pair {
            for s in 0..ENTRIES_PER_BUCKET {
                let e = l.entry(b, s);
                if l.entry_fp(e) == k.fp {
                    c.values[c.len] = l.entry_value(e);
                    c.len += 1;
                }
            }
        }
        if l.tag_bits != 0 {
            let t1 = l.tag(&b1);
            c.bloom = t1 != 0 && t1 == l.tag(&b2) && t1 == bloom_tag(self.mode, k.fp, k.i1, k.i2);
            c.bloom_value = kept.filter(|_| c.bloom);
        }
        c
    }

    #[inline(always)]
    fn batch<const K: u8, const BLOOM: bool>(
        &self,
        hashes: &[u64],
        out: &mut [Lookup],
        each: &mut impl FnMut(Lookup),
    ) {
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
                each(*o);
            }
        }
    }
}

impl Filter {
    /// Builds an empty filter.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        let shift = partition_shift(config.bucket_count()?, config.partitions);
        Self::with_part_shift(config, shift)
    }

    /// [`Self::new`] with the partition bits at `part_shift` (an image's:
    /// format version 3 put them at 0).
    pub(crate) fn with_part_shift(config: Config, part_shift: u32) -> Result<Self, ConfigError> {
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
        let parts = config.partitions;
        let writers = (0..parts)
            .map(|p| Writer {
                side: BTreeMap::new(),
                // Partition 0 draws what one partition always drew.
                rng: Rng(config.seed ^ (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                migrate_from: 0,
            })
            .collect();
        Ok(Self {
            raw: RawTable::new(layout, buckets, stripes, writers, part_shift),
            bloom: config.bloom,
            counts: (0..parts).map(|_| CachePadded::default()).collect(),
            bloom_values: (0..if config.keep_bloom_values && config.bloom.is_some() {
                buckets
            } else {
                0
            })
                .map(|_| AtomicU32::new(0))
                .collect(),
            config,
        })
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.raw.layout
    }

    /// Partition `p`'s counts.
    #[inline(always)]
    pub(crate) fn counts(&self, p: usize) -> &Counts {
        &self.counts[p]
    }

    /// Writer partitions ([`Config::partitions`]).
    pub fn partitions(&self) -> usize {
        self.raw.partitions()
    }

    /// The partition of a pre-hashed key: bits of its primary bucket
    /// from [`Self::partition_shift`] up, which its alternate shares.
    /// Writes of keys of different partitions never wait for each other.
    #[inline(always)]
    pub fn partition_of(&self, h: u64) -> usize {
        self.raw.part_of((h >> 32) as usize)
    }

    /// The lowest bit of a bucket index that names its partition: 3 with
    /// partitions (the bits below choose a bucket within a cache line, so
    /// writers of different partitions share no line of buckets or of
    /// seqlock counters), 0 with one, or with too few buckets for that.
    /// A key's partition is `(h >> 32 >> shift) & (partitions - 1)`.
    pub fn partition_shift(&self) -> u32 {
        self.raw.part_shift()
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

    /// Items held (cuckoo entries plus Bloom-part elements): a sum over
    /// the partitions, each read as of its own instant.
    pub fn len(&self) -> usize {
        self.entries() + self.bloom_len()
    }

    /// Cuckoo entries held.
    pub(crate) fn entries(&self) -> usize {
        self.counts
            .iter()
            .map(|c| c.entries.load(Ordering::Relaxed))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements currently in the Bloom part.
    pub fn bloom_len(&self) -> usize {
        self.counts
            .iter()
            .map(|c| c.bloom_items.load(Ordering::Relaxed))
            .sum()
    }

    /// Largest value an entry can carry.
    pub fn max_value(&self) -> u32 {
        self.raw.layout.value_mask as u32
    }

    // ----- hashing -------------------------------------------------------

    #[inline(always)]
    pub(crate) fn alt(&self, bucket: usize, fp: u32) -> usize {
        alt_bucket(self.raw.alt_mask(), bucket, fp)
    }

    #[inline(always)]
    pub(crate) fn derive(&self, h: u64) -> Keyed {
        Keyed::derive(
            self.raw.layout.fp_mask,
            self.raw.bucket_mask(),
            self.raw.alt_mask(),
            h,
        )
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
    pub(crate) fn tag_for(&self, fp: u32, a: usize, b: usize) -> u64 {
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
            alt_mask: self.raw.alt_mask(),
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

    /// Every value stored under `h`'s fingerprint in its two buckets (up
    /// to eight) and whether the Bloom part may hold `h`, read as of one
    /// instant. [`Filter::get_hash`] gives the first matching entry's
    /// value only: a caller that keeps items by value and finds that value
    /// is another item's (their fingerprints collided), or is answered
    /// [`Lookup::Bloom`], reads this to know every place its item can be.
    pub fn candidates_hash(&self, h: u64) -> Candidates {
        let r = self.reader(&self.raw.layout);
        let v = &self.bloom_values;
        match r.layout.kind() {
            kind::PACKED => r.candidates::<{ kind::PACKED }>(h, v),
            kind::TWO_WORDS => r.candidates::<{ kind::TWO_WORDS }>(h, v),
            _ => r.candidates::<{ kind::ONE_WORD }>(h, v),
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
        self.get_batch_hashes_each(hashes, out, |_| {});
    }

    /// [`Filter::get_batch_hashes`], calling `each` with every answer as
    /// soon as it is known, in order: a caller whose next step reads
    /// memory an answer points at (a table of values) starts that read
    /// there, while the rest of the group is probed, rather than after.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    #[inline]
    pub fn get_batch_hashes_each(
        &self,
        hashes: &[u64],
        out: &mut [Lookup],
        mut each: impl FnMut(Lookup),
    ) {
        assert!(out.len() >= hashes.len(), "output slice too short");
        let each = &mut each;
        let r = self.reader(self.raw.layout);
        // Specialised on the Bloom field as well as the layout: a loop that
        // never reads the field has registers to spare, and both kinds of
        // filter measured faster so (see `ReadView`).
        let bloom = r.layout.tag_bits != 0;
        match r.layout.kind() {
            kind::PACKED if bloom => r.batch::<{ kind::PACKED }, true>(hashes, out, each),
            kind::PACKED => r.batch::<{ kind::PACKED }, false>(hashes, out, each),
            kind::TWO_WORDS if bloom => r.batch::<{ kind::TWO_WORDS }, true>(hashes, out, each),
            kind::TWO_WORDS => r.batch::<{ kind::TWO_WORDS }, false>(hashes, out, each),
            _ if bloom => r.batch::<{ kind::ONE_WORD }, true>(hashes, out, each),
            _ => r.batch::<{ kind::ONE_WORD }, false>(hashes, out, each),
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

    pub fn stats(&self) -> Stats {
        let l = &self.raw.layout;
        let entries = self.entries();
        let bloom_items = self.bloom_len();
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
        let memory_bytes = buckets * l.bucket_bits() / 8 + self.bloom_values.len() * 4;
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
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::config::BloomConfig;
    use crate::outcome::InsertError;

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
