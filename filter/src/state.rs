//! The filter's state: the table, each partition's counters and its
//! writer's own part, with the small derivations every stage uses. The
//! stages add their methods in their own files: `filter` (construction and
//! lookups), `writes` (the write API, under the partitions' writer locks),
//! `path` (planning a walk), `execute` (carrying it out under the locks).

use std::collections::BTreeMap;

use crate::config::{BloomConfig, BloomMode, Config};
use crate::hash::{fp_displacement, tag_mix};
use crate::raw::{AltMask, RawTable, WriteGuard};
use crate::sync::{AtomicU32, AtomicUsize, CachePadded, Ordering};

/// An item's position in the table, derived from its hash.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Keyed {
    pub(crate) fp: u32,
    pub(crate) i1: usize,
    pub(crate) i2: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub(crate) bucket: usize,
    pub(crate) slot: usize,
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

/// The writer's random choices (SplitMix64): reproducible from the
/// configured seed, and kept in the writer's state, away from readers.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next() >> 32) as usize * n) >> 32
    }
    /// A random set bit of `mask` (non-zero).
    pub(crate) fn pick_bit(&mut self, mask: u32) -> usize {
        let k = self.below(mask.count_ones() as usize);
        let mut m = mask;
        for _ in 0..k {
            m &= m - 1;
        }
        m.trailing_zeros() as usize
    }
}

/// What a partition's one writer at a time keeps, behind its mutex: never
/// read by lookups.
pub(crate) struct Writer {
    /// The partition's Bloom-part elements, keyed by the lower bucket of
    /// their pair (both buckets are in the partition).
    pub(crate) side: BTreeMap<usize, BloomRecord>,
    pub(crate) rng: Rng,
    /// Where the next `migrate` starts in the side table, so that elements
    /// that cannot move yet do not keep the others from being tried.
    pub(crate) migrate_from: usize,
}

pub(crate) type Guard<'a> = WriteGuard<'a, Writer>;

/// A partition's counts, changed only by its writer (a load and a store,
/// no read-modify-write), read by anyone; a cache line of their own, so
/// that writers of different partitions do not share one.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) entries: AtomicUsize,
    pub(crate) bloom_items: AtomicUsize,
}

/// A concurrent (Bloom-)cuckoo filter. See the crate docs.
pub struct Filter {
    pub(crate) raw: RawTable<Writer>,
    pub(crate) config: Config,
    pub(crate) bloom: Option<BloomConfig>,
    /// Each partition's counts, by partition.
    pub(crate) counts: Box<[CachePadded<Counts>]>,
    /// With [`Config::keep_bloom_values`], by the lower bucket of a
    /// Bloom-part element's pair: its value, written under the pair's
    /// stripes before its Bloom fields (empty otherwise).
    pub(crate) bloom_values: Box<[AtomicU32]>,
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
/// The XOR distance leaves the partition bits alone, so both buckets of an
/// item are in one partition (with one partition, every bucket bit moves).
#[inline(always)]
pub(crate) fn alt_bucket(alt: AltMask, bucket: usize, fp: u32) -> usize {
    let d = (fp_displacement(fp) as usize) & alt.mask;
    // Never 0: the two buckets of an item always differ, so its Bloom
    // pair really is two buckets (the lowest bit the distance may have).
    bucket ^ if d == 0 { alt.low } else { d }
}

impl Keyed {
    #[inline(always)]
    pub(crate) fn derive(fp_mask: u64, bucket_mask: usize, alt_mask: AltMask, h: u64) -> Self {
        let fp = (h & fp_mask) as u32;
        let fp = if fp == 0 { 1 } else { fp };
        let i1 = ((h >> 32) as usize) & bucket_mask;
        Keyed {
            fp,
            i1,
            i2: alt_bucket(alt_mask, i1, fp),
        }
    }
}

/// The Bloom-part value of an element with fingerprint `fp` whose buckets
/// are `a` and `b`: 1 in bit mode, a non-zero tag in tag mode.
#[inline(always)]
pub(crate) fn bloom_tag(mode: Option<BloomMode>, fp: u32, a: usize, b: usize) -> u64 {
    match mode {
        Some(BloomMode::Tag { bits }) => {
            // Multiply-shift range reduction onto 1..=2^bits-1.
            let range = (1u64 << bits) - 1;
            (((tag_mix(fp, a.min(b)) >> 32) * range) >> 32) + 1
        }
        _ => 1,
    }
}

/// Adds `delta` to a counter only its partition's writer changes.
#[inline]
pub(crate) fn bump(counter: &AtomicUsize, delta: isize) {
    let v = counter.load(Ordering::Relaxed);
    counter.store(v.wrapping_add_signed(delta), Ordering::Relaxed);
}
