//! The raw table: cache-line-aligned bucket words plus the per-stripe
//! sequence locks that make optimistic reads safe. Everything here is safe
//! code over atomics (the memory itself comes from [`crate::alloc`]); the
//! invariants it keeps are stated in the crate docs ("Concurrency protocol").
//!
//! Bucket reads are generic over `W`, the words per bucket (1 or 2), so the
//! hot paths compile to straight-line code for the table's layout; callers
//! dispatch on [`Layout::words`] once per call or per batch.

use std::ops::{Deref, DerefMut};

use crate::alloc::Words;
use crate::layout::{kind, Bucket, Layout};
use crate::sync::{lock, spin_hint, AtomicU64, CachePadded, Mutex, MutexGuard, Ordering};

/// The bits an item's two buckets may differ in: the bucket mask without
/// the partition bits, and the lowest of them. Computed once with the
/// table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AltMask {
    pub(crate) mask: usize,
    pub(crate) low: usize,
}

impl AltMask {
    pub(crate) fn new(bucket_mask: usize, part_mask: usize) -> Self {
        let mask = bucket_mask & !part_mask;
        AltMask {
            mask,
            low: mask & mask.wrapping_neg(),
        }
    }
}

/// Bucket-index bits below a partition's (`LINE_BITS`): with partitions,
/// a cache line's buckets (up to eight one-word buckets) and a cache
/// line's seqlock counters (eight) are one partition's, so writers of
/// different partitions never write one line (with the partition in the
/// lowest bits, eight partitions shared each line of counters; with the
/// connection table's epochs a line a stripe too, 16 threads' opens went
/// 1.06× faster on 16 cores: `bench/README.md`). 0 for one partition (the paper's
/// filter) and where the buckets are too few to give every partition's
/// items a choice of two buckets above those bits.
pub(crate) fn partition_shift(buckets: usize, parts: usize) -> u32 {
    const LINE_BITS: u32 = 3;
    if parts > 1 && parts << (LINE_BITS + 1) <= buckets {
        LINE_BITS
    } else {
        0
    }
}

/// A stripe's sequence counter: even = no write in progress, odd = the
/// writer is changing a bucket of the stripe. The writer bumps it to odd
/// before and to the next even value after, so a reader that sees the same
/// even value before and after its reads saw no write.
#[repr(transparent)]
struct Stripe(AtomicU64);

/// The table, generic over `S`, the state each partition's one writer at
/// a time keeps (the filter's side table and random generator), which
/// lives behind that partition's mutex.
pub(crate) struct RawTable<S> {
    pub layout: Layout,
    /// Buckets never straddle a cache line: the block is line-aligned and a
    /// bucket is one word or an aligned pair of words.
    words: Words,
    bucket_mask: usize,
    stripes: Box<[Stripe]>,
    stripe_mask: usize,
    /// The packed layout's bucket mask (`packed_bits` ones); 0 otherwise.
    packed_mask: u64,
    /// The partitions' writer locks. A partition is the buckets whose low
    /// bits are its index (`part_mask`); the stripes are at least as many
    /// as the partitions, so each stripe's buckets are all in one
    /// partition. Writers of a partition are serialised: one writer at a
    /// time changes its buckets, and nobody else changes them. So a stripe
    /// is "locked" by plain stores of its counter, no read-modify-write,
    /// and a plan made under this lock is still exact when it is executed
    /// (a plan never leaves its partition: an item's two buckets share
    /// the partition bits).
    writers: Box<[CachePadded<Mutex<S>>]>,
    part_mask: usize,
    /// Where the partition bits start in a bucket index
    /// ([`partition_shift`]).
    part_shift: u32,
    alt_mask: AltMask,
}

/// Proof that the caller is partition `part`'s one writer, with its state.
pub(crate) struct WriteGuard<'a, S> {
    guard: MutexGuard<'a, S>,
    part: usize,
}

impl<S> WriteGuard<'_, S> {
    /// The partition this guard writes.
    #[inline(always)]
    pub fn part(&self) -> usize {
        self.part
    }
}

impl<S> Deref for WriteGuard<'_, S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.guard
    }
}

impl<S> DerefMut for WriteGuard<'_, S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.guard
    }
}

/// Stripes marked busy (one or two); marked free again on drop.
pub(crate) struct StripeGuard<'a, S> {
    table: &'a RawTable<S>,
    held: [usize; 2],
    /// The odd version each held stripe was locked at.
    locked_at: [u64; 2],
    count: usize,
}

impl<S> Drop for StripeGuard<'_, S> {
    fn drop(&mut self) {
        for (&s, &v) in self.held.iter().zip(&self.locked_at).take(self.count) {
            // Odd -> next even: publishes every store made while odd.
            self.table.stripes[s].0.store(v + 1, Ordering::Release);
        }
    }
}

impl<S> RawTable<S> {
    /// A table of `buckets`, `stripes` seqlock stripes (at least as many
    /// as the partitions, times `2^part_shift`) and one partition per
    /// writer state, whose bits start at bit `part_shift` of a bucket index.
    pub fn new(
        layout: Layout,
        buckets: usize,
        stripes: usize,
        writers: Vec<S>,
        part_shift: u32,
    ) -> Self {
        let parts = writers.len();
        debug_assert!(buckets.is_power_of_two() && stripes.is_power_of_two());
        debug_assert!(parts.is_power_of_two() && parts << part_shift <= buckets / 2);
        // A stripe's buckets share its index's bits, which hold the
        // partition's: every stripe lies in one partition.
        let stripes = stripes.min(buckets).max(parts << part_shift);
        let bits = layout.packed_bits;
        let (words, packed_mask) = if bits == 0 {
            (buckets * layout.words, 0)
        } else {
            // One spare word: the last bucket's read of its second word.
            let mask = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            ((buckets * bits as usize).div_ceil(64) + 1, mask)
        };
        Self {
            layout,
            words: Words::zeroed(words),
            packed_mask,
            bucket_mask: buckets - 1,
            stripes: (0..stripes).map(|_| Stripe(AtomicU64::new(0))).collect(),
            stripe_mask: stripes - 1,
            writers: writers
                .into_iter()
                .map(|w| CachePadded::new(Mutex::new(w)))
                .collect(),
            part_mask: parts - 1,
            part_shift,
            alt_mask: AltMask::new(buckets - 1, (parts - 1) << part_shift),
        }
    }

    /// Becomes partition `part`'s writer (waits for the current one).
    pub fn write(&self, part: usize) -> WriteGuard<'_, S> {
        WriteGuard {
            guard: lock(&self.writers[part]),
            part,
        }
    }

    /// Every partition's writer, taken in index order (so two callers of
    /// this never deadlock; a writer of one partition holds no other).
    pub fn write_all(&self) -> Vec<WriteGuard<'_, S>> {
        (0..self.writers.len()).map(|p| self.write(p)).collect()
    }

    #[inline(always)]
    pub fn partitions(&self) -> usize {
        self.part_mask + 1
    }

    /// The partition of bucket `b`.
    #[inline(always)]
    pub fn part_of(&self, bucket: usize) -> usize {
        (bucket >> self.part_shift) & self.part_mask
    }

    /// Where the partition bits start in a bucket index.
    #[inline(always)]
    pub fn part_shift(&self) -> u32 {
        self.part_shift
    }

    /// The bucket mask without the partition bits: the bits an item's two
    /// buckets may differ in.
    #[inline(always)]
    pub fn alt_mask(&self) -> AltMask {
        self.alt_mask
    }

    #[inline(always)]
    pub fn buckets(&self) -> usize {
        self.bucket_mask + 1
    }

    #[inline(always)]
    pub fn bucket_mask(&self) -> usize {
        self.bucket_mask
    }

    pub fn stripe_count(&self) -> usize {
        self.stripe_mask + 1
    }

    #[inline(always)]
    fn word(&self, idx: usize) -> &AtomicU64 {
        &self.words[idx]
    }

    #[inline(always)]
    fn stripe_of(&self, bucket: usize) -> usize {
        bucket & self.stripe_mask
    }

    /// Prefetches a bucket (the writer's search; readers use [`ReadView`]).
    #[inline(always)]
    pub fn prefetch(&self, bucket: usize) {
        let v = self.view();
        match self.layout.kind() {
            kind::PACKED => v.prefetch::<{ kind::PACKED }>(bucket),
            kind::TWO_WORDS => v.prefetch::<{ kind::TWO_WORDS }>(bucket),
            _ => v.prefetch::<{ kind::ONE_WORD }>(bucket),
        }
    }

    /// Where a packed bucket's bits start: word index and bit offset.
    #[inline(always)]
    fn packed_pos(&self, bucket: usize) -> (usize, u32) {
        let bit = bucket * self.layout.packed_bits as usize;
        (bit >> 6, (bit & 63) as u32)
    }

    /// A bucket in the one- or two-word form, read with `order` (the
    /// writer's and the image's reads; lookups go through [`ReadView`],
    /// which compiles the layout in).
    #[inline(always)]
    fn load(&self, bucket: usize, order: Ordering) -> Bucket {
        let v = self.view();
        match self.layout.kind() {
            kind::PACKED => v.load::<{ kind::PACKED }>(bucket, order),
            kind::TWO_WORDS => v.load::<{ kind::TWO_WORDS }>(bucket, order),
            _ => v.load::<{ kind::ONE_WORD }>(bucket, order),
        }
    }

    /// Writes a packed bucket into the one or two words it spans, keeping
    /// the neighbours' bits. With one partition only the writer writes, so
    /// the read of each word is its current value; a reader of a neighbour
    /// bucket sees its own bits unchanged whichever version of the word it
    /// loads. With more, a neighbour bucket may be another partition's,
    /// whose writer may change its bits of the same word meanwhile: the
    /// word is then changed by a compare-and-swap of this bucket's bits.
    #[inline]
    fn store_packed(&self, bucket: usize, value: u64, order: Ordering) {
        let (w, o) = self.packed_pos(bucket);
        let m = self.packed_mask;
        self.merge_word(w, m << o, value << o, order);
        if o + self.layout.packed_bits > 64 {
            let sh = 64 - o; // the bits that went into the first word
            self.merge_word(w + 1, m >> sh, value >> sh, order);
        }
    }

    /// Word `w`'s bits under `mask` set to `bits`, the others kept.
    #[inline(always)]
    fn merge_word(&self, w: usize, mask: u64, bits: u64, order: Ordering) {
        let word = self.word(w);
        let mut cur = word.load(Ordering::Relaxed);
        if self.part_mask == 0 {
            word.store((cur & !mask) | bits, order);
            return;
        }
        while let Err(now) =
            word.compare_exchange_weak(cur, (cur & !mask) | bits, order, Ordering::Relaxed)
        {
            cur = now;
        }
    }

    /// Unvalidated read, for the writer (whose reads are exact: nobody
    /// else writes) and for the bulk build.
    #[inline]
    pub fn load_hint(&self, bucket: usize) -> Bucket {
        self.load(bucket, Ordering::Relaxed)
    }

    /// A store without marking the stripe busy: only for a table that no
    /// reader can see yet (the bulk build, whose threads own disjoint
    /// bucket ranges).
    #[inline]
    pub fn store_unpublished(&self, bucket: usize, word: usize, value: u64) {
        self.store_word(bucket, word, value, Ordering::Relaxed);
    }

    #[inline(always)]
    fn store_word(&self, bucket: usize, word: usize, value: u64, order: Ordering) {
        if self.packed_mask != 0 {
            debug_assert_eq!(word, 0);
            self.store_packed(bucket, value, order);
        } else {
            self.word(bucket * self.layout.words + word)
                .store(value, order);
        }
    }

    /// The table as readers see it, copied out once per lookup call or
    /// batch (see [`ReadView`]).
    #[inline(always)]
    pub fn view(&self) -> ReadView<'_> {
        ReadView {
            words: &self.words,
            stripes: &self.stripes,
            stripe_mask: self.stripe_mask,
            packed_bits: self.layout.packed_bits as usize,
            packed_mask: self.packed_mask,
        }
    }

    /// Marks the stripes of `b1` and `b2` busy (odd) for a change of those
    /// buckets; the writer guard of their partition proves no other writer
    /// can do the same.
    #[inline(always)]
    pub fn lock_pair(
        &self,
        writer: &WriteGuard<'_, S>,
        b1: usize,
        b2: usize,
    ) -> StripeGuard<'_, S> {
        if (self.part_of(b1) ^ writer.part) | (self.part_of(b2) ^ writer.part) != 0 {
            not_in_partition(b1, b2, writer.part);
        }
        let (a, b) = (self.stripe_of(b1), self.stripe_of(b2));
        let va = self.mark_busy(a);
        let (vb, count) = if a == b {
            (va, 1)
        } else {
            (self.mark_busy(b), 2)
        };
        StripeGuard {
            table: self,
            held: [a, b],
            locked_at: [va, vb],
            count,
        }
    }

    /// Makes one stripe's counter odd; returns the odd value. A relaxed
    /// store is enough: every bucket store that follows is a release store,
    /// so a reader that sees one of them also sees this odd value.
    fn mark_busy(&self, s: usize) -> u64 {
        let st = &self.stripes[s].0;
        let v = st.load(Ordering::Relaxed);
        debug_assert!(v & 1 == 0, "stripe already busy: writers not serialised");
        st.store(v + 1, Ordering::Relaxed);
        v + 1
    }

    /// Read a bucket under its stripe lock (the guard proves it is held).
    #[inline]
    pub fn load_locked(&self, _guard: &StripeGuard<'_, S>, bucket: usize) -> Bucket {
        debug_assert!(_guard.holds(self.stripe_of(bucket)));
        self.load(bucket, Ordering::Relaxed)
    }

    /// Store one word of a bucket under its stripe lock. Release ordering:
    /// a reader that sees this value also sees the stripe's odd version.
    #[inline]
    pub fn store_locked(
        &self,
        _guard: &StripeGuard<'_, S>,
        bucket: usize,
        word: usize,
        value: u64,
    ) {
        debug_assert!(_guard.holds(self.stripe_of(bucket)));
        self.store_word(bucket, word, value, Ordering::Release);
    }

    /// Every bucket's words in the word layout's form (`layout.words` per
    /// bucket; a packed bucket as its extracted word), read relaxed: the
    /// image format, independent of packing. Only meaningful while writers
    /// are excluded.
    pub fn words_snapshot(&self) -> Vec<u64> {
        let w = self.layout.words;
        let mut out = Vec::with_capacity(self.buckets() * w);
        for b in 0..self.buckets() {
            out.extend_from_slice(&self.load(b, Ordering::Relaxed)[..w]);
        }
        out
    }

    /// Occupied entries by partition, counted from the table (a table
    /// being built or loaded, that no writer changes meanwhile).
    pub fn entries_by_part(&self) -> Vec<usize> {
        let mut out = vec![0; self.partitions()];
        for b in 0..self.buckets() {
            let empty = self.layout.empty_slots(&self.load(b, Ordering::Relaxed));
            out[self.part_of(b)] += crate::layout::ENTRIES_PER_BUCKET - empty.count_ones() as usize;
        }
        out
    }

    /// Fill from an image in the [`RawTable::words_snapshot`] form. Only
    /// called on a table nobody else can see yet.
    pub fn load_words(&self, words: &[u64]) {
        for (b, bucket) in words.chunks(self.layout.words).enumerate() {
            for (i, &v) in bucket.iter().enumerate() {
                self.store_word(b, i, v, Ordering::Relaxed);
            }
        }
    }
}

/// A write of buckets outside its writer's partition: a bug of the
/// filter's own (a walk never leaves its item's partition), stopped before
/// it could race another partition's writer.
#[cold]
#[inline(never)]
fn not_in_partition(b1: usize, b2: usize, part: usize) -> ! {
    panic!("buckets {b1} and {b2} are not in partition {part}")
}

/// What a reader needs from the table, copied out of [`RawTable`] into a
/// value a batched lookup's loop keeps in registers. Why a copy:
/// `RawTable` holds atomics, so the compiler cannot treat `&RawTable` as
/// read-only, and it reloaded the words' address and length, the masks and
/// the layout from memory after every acquire load of the seqlock read.
/// With this copy, the loop specialised on the Bloom field and a
/// branch-free probe (`Layout::probe`), a batched lookup went from 144 to
/// 107 instructions (callgrind, f = 12, one-word buckets) and from 58 to
/// 72 M lookups/s at 2^22 buckets (`bench/results/filter_read_ab.csv`).
#[derive(Clone, Copy)]
pub(crate) struct ReadView<'a> {
    words: &'a [AtomicU64],
    stripes: &'a [Stripe],
    stripe_mask: usize,
    packed_bits: usize,
    packed_mask: u64,
}

impl ReadView<'_> {
    /// One bucket, extracted into the one- or two-word form.
    #[inline(always)]
    fn load<const K: u8>(&self, bucket: usize, order: Ordering) -> Bucket {
        match K {
            kind::PACKED => {
                let bit = bucket * self.packed_bits;
                let (w, o) = (bit >> 6, (bit & 63) as u32);
                let lo = self.words[w].load(order);
                let hi = self.words[w + 1].load(order);
                // `hi << (64 - o)`, written so that o = 0 shifts by 64 safely.
                [((lo >> o) | ((hi << 1) << (63 - o))) & self.packed_mask, 0]
            }
            kind::TWO_WORDS => [
                self.words[2 * bucket].load(order),
                self.words[2 * bucket + 1].load(order),
            ],
            _ => [self.words[bucket].load(order), 0],
        }
    }

    /// Prefetches a bucket: its line, and in the packed layout also the
    /// next word's (a packed bucket may straddle two lines).
    #[inline(always)]
    pub fn prefetch<const K: u8>(&self, bucket: usize) {
        let w = match K {
            kind::PACKED => (bucket * self.packed_bits) >> 6,
            kind::TWO_WORDS => 2 * bucket,
            _ => bucket,
        };
        // An address, not an access: no bounds check (a prefetch of any
        // address is harmless), so none in the group's first loop.
        let p = self.words.as_ptr().wrapping_add(w).cast::<u8>();
        crate::prefetch::read(p);
        if K == kind::PACKED {
            crate::prefetch::read(p.wrapping_add(8));
        }
    }

    /// Consistent snapshot of two buckets without taking a lock and without
    /// writing shared memory: a seqlock read over both buckets' stripes.
    /// The returned pair existed, as a whole, at one instant during the call.
    #[inline(always)]
    pub fn read_pair<const K: u8>(&self, b1: usize, b2: usize) -> (Bucket, Bucket) {
        let ((x, y), ()) = self.read_pair_with::<K, ()>(b1, b2, || ());
        (x, y)
    }

    /// [`Self::read_pair`], and `also` (acquire loads of what the writer
    /// changes under the same two stripes) read in the same validated
    /// window: all of it as of one instant.
    #[inline(always)]
    pub fn read_pair_with<const K: u8, T>(
        &self,
        b1: usize,
        b2: usize,
        also: impl Fn() -> T,
    ) -> ((Bucket, Bucket), T) {
        let s1 = &self.stripes[b1 & self.stripe_mask].0;
        let s2 = &self.stripes[b2 & self.stripe_mask].0;
        loop {
            let v1 = s1.load(Ordering::Acquire);
            let v2 = s2.load(Ordering::Acquire);
            if (v1 | v2) & 1 == 0 {
                // Acquire loads: the re-check below cannot be hoisted above them.
                let x = self.load::<K>(b1, Ordering::Acquire);
                let y = self.load::<K>(b2, Ordering::Acquire);
                let t = also();
                if s1.load(Ordering::Acquire) == v1 && s2.load(Ordering::Acquire) == v2 {
                    return ((x, y), t);
                }
            }
            spin_hint();
        }
    }
}

impl<S> StripeGuard<'_, S> {
    fn holds(&self, s: usize) -> bool {
        self.held[..self.count].contains(&s)
    }
}
