//! The raw table: cache-line-aligned bucket words plus the per-stripe
//! sequence locks that make optimistic reads safe. Everything here is safe
//! code over atomics (the memory itself comes from [`crate::alloc`]); the
//! invariants it keeps are stated in the crate docs ("Concurrency protocol").
//!
//! Bucket reads are generic over `W`, the words per bucket (1 or 2), so the
//! hot paths compile to straight-line code for the table's layout; callers
//! dispatch on [`Layout::words`] once per call or per batch.

use crate::alloc::Words;
use crate::layout::{Bucket, Layout};
use crate::sync::{spin_hint, AtomicU64, Ordering};

/// A stripe's sequence lock: even = free, odd = a writer holds it. Writers
/// bump it to odd to lock and to the next even value to unlock, so a reader
/// that sees the same even value before and after its reads saw no write.
#[repr(transparent)]
struct Stripe(AtomicU64);

pub(crate) struct RawTable {
    pub layout: Layout,
    /// Buckets never straddle a cache line: the block is line-aligned and a
    /// bucket is one word or an aligned pair of words.
    words: Words,
    bucket_mask: usize,
    stripes: Box<[Stripe]>,
    stripe_mask: usize,
}

/// Held stripe locks (one or two, in ascending order); unlocks on drop.
pub(crate) struct StripeGuard<'a> {
    table: &'a RawTable,
    held: [usize; 2],
    count: usize,
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        for &s in &self.held[..self.count] {
            // Odd -> next even: publishes every store made under the lock.
            self.table.stripes[s].0.fetch_add(1, Ordering::Release);
        }
    }
}

impl RawTable {
    pub fn new(layout: Layout, buckets: usize, stripes: usize) -> Self {
        debug_assert!(buckets.is_power_of_two() && stripes.is_power_of_two());
        let stripes = stripes.min(buckets);
        Self {
            layout,
            words: Words::zeroed(buckets * layout.words),
            bucket_mask: buckets - 1,
            stripes: (0..stripes).map(|_| Stripe(AtomicU64::new(0))).collect(),
            stripe_mask: stripes - 1,
        }
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

    /// Address of a bucket's first word, for prefetching.
    #[inline(always)]
    pub fn bucket_ptr(&self, bucket: usize) -> *const u8 {
        self.word(bucket * self.layout.words) as *const AtomicU64 as *const u8
    }

    #[inline(always)]
    fn load_w<const W: usize>(&self, bucket: usize, order: Ordering) -> Bucket {
        let base = bucket * W;
        let w0 = self.word(base).load(order);
        let w1 = if W == 2 {
            self.word(base + 1).load(order)
        } else {
            0
        };
        [w0, w1]
    }

    #[inline(always)]
    fn load(&self, bucket: usize, order: Ordering) -> Bucket {
        if self.layout.words == 1 {
            self.load_w::<1>(bucket, order)
        } else {
            self.load_w::<2>(bucket, order)
        }
    }

    /// Unvalidated read, for writers' path planning (hints only: every step
    /// is checked again under the locks before it is executed).
    #[inline]
    pub fn load_hint(&self, bucket: usize) -> Bucket {
        self.load(bucket, Ordering::Relaxed)
    }

    /// Consistent snapshot of two buckets without taking a lock and without
    /// writing shared memory: a seqlock read over both buckets' stripes.
    /// The returned pair existed, as a whole, at one instant during the call.
    #[inline(always)]
    pub fn read_pair<const W: usize>(&self, b1: usize, b2: usize) -> (Bucket, Bucket) {
        debug_assert_eq!(W, self.layout.words);
        let s1 = &self.stripes[self.stripe_of(b1)].0;
        let s2 = &self.stripes[self.stripe_of(b2)].0;
        loop {
            let v1 = s1.load(Ordering::Acquire);
            let v2 = s2.load(Ordering::Acquire);
            if (v1 | v2) & 1 == 0 {
                // Acquire loads: the re-check below cannot be hoisted above them.
                let x = self.load_w::<W>(b1, Ordering::Acquire);
                let y = self.load_w::<W>(b2, Ordering::Acquire);
                if s1.load(Ordering::Acquire) == v1 && s2.load(Ordering::Acquire) == v2 {
                    return (x, y);
                }
            }
            spin_hint();
        }
    }

    /// Locks the stripes of `b1` and `b2` (deduplicated, ascending order so
    /// that two writers can never deadlock).
    pub fn lock_pair(&self, b1: usize, b2: usize) -> StripeGuard<'_> {
        let (mut a, mut b) = (self.stripe_of(b1), self.stripe_of(b2));
        if a > b {
            std::mem::swap(&mut a, &mut b);
        }
        self.lock_stripe(a);
        let count = if a == b {
            1
        } else {
            self.lock_stripe(b);
            2
        };
        StripeGuard {
            table: self,
            held: [a, b],
            count,
        }
    }

    fn lock_stripe(&self, s: usize) {
        let st = &self.stripes[s].0;
        loop {
            let v = st.load(Ordering::Relaxed);
            if v & 1 == 0
                && st
                    .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            spin_hint();
        }
    }

    /// Read a bucket under its stripe lock (the guard proves it is held).
    #[inline]
    pub fn load_locked(&self, _guard: &StripeGuard<'_>, bucket: usize) -> Bucket {
        debug_assert!(_guard.holds(self.stripe_of(bucket)));
        self.load(bucket, Ordering::Relaxed)
    }

    /// Store one word of a bucket under its stripe lock. Release ordering:
    /// a reader that sees this value also sees the stripe's odd version.
    #[inline]
    pub fn store_locked(&self, _guard: &StripeGuard<'_>, bucket: usize, word: usize, value: u64) {
        debug_assert!(_guard.holds(self.stripe_of(bucket)));
        self.word(bucket * self.layout.words + word)
            .store(value, Ordering::Release);
    }

    /// All words, read relaxed. Only meaningful while writers are excluded.
    pub fn words_snapshot(&self) -> Vec<u64> {
        let n = self.buckets() * self.layout.words;
        (0..n)
            .map(|i| self.word(i).load(Ordering::Relaxed))
            .collect()
    }

    /// Fill from an image. Only called on a table nobody else can see yet.
    pub fn load_words(&self, words: &[u64]) {
        for (i, &w) in words.iter().enumerate() {
            self.word(i).store(w, Ordering::Relaxed);
        }
    }
}

impl StripeGuard<'_> {
    fn holds(&self, s: usize) -> bool {
        self.held[..self.count].contains(&s)
    }
}
