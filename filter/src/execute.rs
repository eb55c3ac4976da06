//! Carrying out a plan under the writer's locks: moves backwards along the
//! path (each move with both buckets' stripes marked busy), Bloom-part
//! placement, delete, value replacement and migration.

use crate::outcome::{InsertError, InsertOutcome, Placement};
use crate::path::{Final, Plan, Terminal};
use crate::raw::StripeGuard;
use crate::state::{bump, BloomRecord, Filter, Guard, Keyed, Loc, Writer};

impl Filter {
    #[inline]
    pub(crate) fn insert_locked(
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
                bump(&self.counts(w.part()).entries, 1);
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

    /// Executes a plan backwards (see the module docs). Returns where the
    /// planned item went and whether the Bloom part grew. The plan was made
    /// under the same writer guard, so what it expects of every slot still
    /// holds (debug builds check it).
    #[inline]
    pub(crate) fn execute(
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
    #[inline]
    pub(crate) fn move_entry(&self, w: &Guard<'_>, src: Loc, dst: Loc, entry: u64) {
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
    #[inline]
    pub(crate) fn write_tags(&self, g: &StripeGuard<'_, Writer>, a: usize, b: usize, tag: u64) {
        let l = &self.raw.layout;
        let (ba, bb) = (self.raw.load_locked(g, a), self.raw.load_locked(g, b));
        self.raw.store_locked(g, a, 0, l.with_tag(ba[0], tag));
        self.raw.store_locked(g, b, 0, l.with_tag(bb[0], tag));
    }

    /// Moves the entry at `src` into the Bloom part of its pair `(a, b)`
    /// (Algorithm 2, lines 33–35): tags first, then the entry is cleared,
    /// while both stripes are busy; then the side table records it, after
    /// the stripes are free again (no allocation while readers may wait).
    pub(crate) fn move_to_bloom(
        &self,
        w: &mut Guard<'_>,
        src: Loc,
        entry: u64,
        a: usize,
        b: usize,
    ) {
        let l = &self.raw.layout;
        debug_assert!(l.entry(&self.raw.load_hint(src.bucket), src.slot) == entry);
        debug_assert!(l.tag(&self.raw.load_hint(a)) == 0 && l.tag(&self.raw.load_hint(b)) == 0);
        let fp = l.entry_fp(entry);
        let tag = self.tag_for(fp, a, b);
        {
            let g = self.raw.lock_pair(w, a, b);
            self.keep_bloom_value(a.min(b), l.entry_value(entry));
            self.write_tags(&g, a, b, tag);
            let bs = self.raw.load_locked(&g, src.bucket);
            let (ws, vs) = l.set_entry(&bs, src.slot, 0);
            self.raw.store_locked(&g, src.bucket, ws, vs);
        }
        bump(&self.counts(w.part()).entries, -1);
        self.record_bloom(w, a, b, fp, l.entry_value(entry));
    }

    /// The value of the element about to take the Bloom fields of the
    /// pair whose lower bucket is `lo`, where readers find it
    /// ([`crate::Config::keep_bloom_values`]); called with the pair's
    /// stripes busy, before the fields are written (release: a reader
    /// that sees it sees the stripes odd, and looks again).
    fn keep_bloom_value(&self, lo: usize, value: u32) {
        if let Some(v) = self.bloom_values.get(lo) {
            v.store(value, crate::sync::Ordering::Release);
        }
    }

    pub(crate) fn record_bloom(&self, w: &mut Guard<'_>, a: usize, b: usize, fp: u32, value: u32) {
        let rec = BloomRecord {
            fp,
            value,
            high: a.max(b),
        };
        let prev = w.side.insert(a.min(b), rec);
        debug_assert!(prev.is_none(), "Bloom field owned twice");
        bump(&self.counts(w.part()).bloom_items, 1);
    }

    /// The new item goes straight into the Bloom part (Algorithm 2, line 8).
    pub(crate) fn place_new_in_bloom(
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
            self.keep_bloom_value(k.i1.min(k.i2), l.entry_value(entry));
            self.write_tags(&g, k.i1, k.i2, tag);
        }
        self.record_bloom(w, k.i1, k.i2, k.fp, l.entry_value(entry));
        (Placement::Bloom, true)
    }

    /// Last step of a plan: the planned item into the (now empty) `dst`.
    #[inline]
    pub(crate) fn place_final(
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
                bump(&self.counts(w.part()).entries, 1);
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
                bump(&self.counts(w.part()).entries, 1);
                bump(&self.counts(w.part()).bloom_items, -1);
            }
        }
        (Placement::Entry, false)
    }

    // ----- removal and updates ------------------------------------------

    pub(crate) fn remove_locked(&self, w: &mut Guard<'_>, h: u64, value: u32) -> bool {
        self.remove_placed_locked(w, h, value).is_some()
    }

    /// [`Self::remove_locked`], saying where the item was.
    pub(crate) fn remove_placed_locked(
        &self,
        w: &mut Guard<'_>,
        h: u64,
        value: u32,
    ) -> Option<Placement> {
        if value > self.max_value() {
            return None;
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
                bump(&self.counts(w.part()).entries, -1);
                return Some(Placement::Entry);
            }
        }
        if l.tag_bits == 0 {
            return None;
        }
        let (lo, hi) = (k.i1.min(k.i2), k.i1.max(k.i2));
        let expected = BloomRecord {
            fp: k.fp,
            value,
            high: hi,
        };
        if w.side.get(&lo) != Some(&expected) {
            return None;
        }
        {
            let g = self.raw.lock_pair(w, lo, hi);
            for bucket in [lo, hi] {
                let b = self.raw.load_locked(&g, bucket);
                self.raw.store_locked(&g, bucket, 0, l.with_tag(b[0], 0));
            }
        }
        w.side.remove(&lo);
        bump(&self.counts(w.part()).bloom_items, -1);
        Some(Placement::Bloom)
    }

    pub(crate) fn replace_locked(
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

    /// Migration of up to `budget` of `w`'s partition's elements: how many
    /// moved, and how many were tried.
    pub(crate) fn migrate_locked(&self, w: &mut Guard<'_>, budget: usize) -> (usize, usize) {
        if self.bloom.is_none() || budget == 0 {
            return (0, 0);
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
        let tried = candidates.len();
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
        (moved, tried)
    }

    // ----- statistics ----------------------------------------------------
}
