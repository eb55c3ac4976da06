//! A lock stripe: its share of the slots, its free list, the early-drop
//! clock hand, and the slot lifecycle that runs under its lock — reserve,
//! fill (the filter insert and the Bloom part's pairs), free, remove, drop
//! one to make room.

use crate::sync::fence;
use crate::sync::Ordering::*;

use cfdp_rules::Action;

use super::slot::{
    action_bits, rmw, state_of, Fields, Shard, ACTION_SHIFT, ASSURED, DROP_SCAN, GEN_MASK,
    GEN_SHIFT, IDENTITY, LOCK, NONE, USED,
};
use super::{Acct, ConnTable};
use crate::key::ConnKey;
use crate::tcp;

/// Slots past the early-drop clock hand fetched ahead for the stripe's
/// next drop: a SYN flood's rate +6-10 % (3 slots, `conntrack` bench's
/// flood, alternated runs).
pub(super) const PREFETCH_AHEAD: u32 = 3;

/// Slots an early drop's scan prefetches ahead of the one it reads.
const SCAN_AHEAD: u32 = 8;

/// Whether the connection in control word `c` may be dropped to make room
/// for a new one, as Linux's early drop takes it: not assured (no answer
/// yet, a handshake not completed, UDP that is not a stream, ICMP, other
/// protocols, a TCP connection picked up and not answered), or closing.
pub(super) fn droppable(c: u64) -> bool {
    c & ASSURED == 0 || state_of(c).closing()
}

impl ConnTable {
    /// A free slot of `shard` for a new connection, counted against the
    /// capacity: room under it, or an embryonic entry's place. `None`:
    /// refused.
    pub(super) fn reserve(&self, shard: &mut Shard, now_ns: u64) -> Option<u32> {
        // Full: the dropped entry's count is this one's (its removal
        // gives back what this took; the count never stays above the
        // capacity).
        if !self.take(shard) && !self.drop_one(shard, now_ns) {
            self.give(shard);
            return None;
        }
        let i = match self.alloc(shard) {
            Some(i) => i,
            // The stripe's share is used up though the table is not full
            // (six standard deviations of bad luck): make room in it.
            None if self.drop_one(shard, now_ns) => self.alloc(shard)?,
            None => {
                self.give(shard);
                return None;
            }
        };
        Some(i)
    }

    /// Writes a new connection into reserved slot `i` and puts it in the
    /// filter; `false` (the slot freed again, the length taken back) when
    /// the filter has no room around its hash even with its Bloom part.
    #[allow(clippy::too_many_arguments)] // the connection's fields
    pub(super) fn fill(
        &self,
        shard: &mut Shard,
        i: u32,
        w: &([u64; 4], u64),
        h: u64,
        ctl: u64,
        action: Action,
        last_ns: u64,
        acct: Acct,
        ext: &[u64; tcp::WORDS],
    ) -> bool {
        let s = &self.slots[i as usize];
        // The seqlock's write side: the generation was bumped when the
        // slot was freed; this fence orders that before the words below,
        // so a reader that sees any of them sees the new generation.
        fence(Release);
        for (a, &x) in s.addr().iter().zip(&w.0) {
            a.store(x, Relaxed);
        }
        s.meta()
            .store(w.1 | action_bits(action) << ACTION_SHIFT, Relaxed);
        s.last().store(last_ns, Relaxed);
        for (x, &v) in s.ext().iter().zip(ext) {
            x.store(v, Relaxed);
        }
        if let Some(a) = &self.acct {
            let a = &a[i as usize];
            a.opened.store(acct.opened_ns, Relaxed);
            for d in 0..2 {
                a.packets[d].store(acct.packets[d], Relaxed);
                a.bytes[d].store(acct.bytes[d], Relaxed);
            }
        }
        rmw(s.ctl(), |c| c & GEN_MASK | ctl);
        // Only now in the filter: a reader that finds the index finds the
        // slot whole. The filter partition's writer lock is the stripe's
        // own (nobody else writes the partition): never waited for.
        if self.filter.insert_hash(h, i).is_err() {
            self.free(shard, i);
            return false;
        }
        // After the insert (release): a probe that reads the old count
        // may have missed it, and its holder will look again. The stripe
        // is the only writer of its epochs.
        let e = self.epoch(h);
        e.store(e.load(Relaxed) + 1, Release);
        true
    }

    /// Slot `i` of `shard` back on its free list: its generation bumped
    /// first (readers of what it held see the change), the length taken
    /// back. For a slot that never reached the filter.
    pub(super) fn free(&self, shard: &mut Shard, i: u32) {
        rmw(self.slots[i as usize].ctl(), |c| {
            (c + (1 << GEN_SHIFT)) & GEN_MASK
        });
        self.recycle(shard, i);
    }

    /// Slot `i`, already marked free (its generation bumped), on its
    /// stripe's free list; its count given back.
    pub(super) fn recycle(&self, shard: &mut Shard, i: u32) {
        self.slots[i as usize]
            .meta()
            .store(u64::from(shard.free), Relaxed);
        shard.free = i;
        self.give(shard);
    }

    /// A slot of `shard` never used or freed; the one the stripe's next
    /// open will take is fetched meanwhile (a new connection's slot is
    /// written whole, and its lines' misses, waited for by the control
    /// word's compare-and-swap, were the largest part of an open: `fill`
    /// 22 → 6 % of the `conntrack` bench's scaling part, `perf record`).
    pub(super) fn alloc(&self, shard: &mut Shard) -> Option<u32> {
        let i = if shard.free != NONE {
            let i = shard.free;
            shard.free = self.slots[i as usize].meta().load(Relaxed) as u32;
            i
        } else if shard.fresh < self.per_shard {
            shard.fresh += 1;
            shard.base + shard.fresh - 1
        } else {
            return None;
        };
        self.prefetch_slot(if shard.free != NONE {
            shard.free
        } else {
            shard.base + shard.fresh
        });
        Some(i)
    }

    /// Removes slot `i`'s connection (control word `c` as read, hash `h`;
    /// `shard` its stripe, held) if it still holds it and `cond` says so of
    /// its control word and last time; counts an expiry. `true` if removed.
    ///
    /// The slot is marked free by a compare-and-swap from the control word
    /// `cond` judged, before its index leaves the filter: a reader's
    /// compare-and-swap (a reply that makes an embryonic connection
    /// assured) and the removal are then ordered — if the reader's comes
    /// first, `cond` is judged again on what it wrote (an assured
    /// connection is not dropped); if the removal's comes first, the
    /// reader's fails and its packet is new. A reader that finds the index
    /// in the filter meanwhile sees a freed slot: no connection. The slot
    /// is reused only once its index left the filter.
    pub(super) fn remove_if(
        &self,
        shard: &mut Shard,
        i: u32,
        c: u64,
        h: u64,
        cond: impl Fn(u64, u64) -> bool,
    ) -> bool {
        let s = &self.slots[i as usize];
        let mut now = s.ctl().load(Acquire);
        loop {
            if (now ^ c) & IDENTITY != 0 {
                return false;
            }
            if now & LOCK != 0 {
                // A packet is moving its TCP windows: a moment.
                crate::sync::spin();
                now = s.ctl().load(Acquire);
                continue;
            }
            if !cond(now, s.last().load(Relaxed)) {
                return false;
            }
            let freed = (now + (1 << GEN_SHIFT)) & GEN_MASK;
            match s.ctl().compare_exchange(now, freed, AcqRel, Acquire) {
                Ok(_) => break,
                Err(x) => now = x,
            }
        }
        let removed = self.filter.remove_hash(h, i);
        debug_assert!(removed, "a connection's slot was not in the filter");
        self.recycle(shard, i);
        shard.expired += 1;
        true
    }

    /// The hash of the connection in slot `i` (its stripe held: the key
    /// cannot change).
    pub(super) fn hash_at(&self, i: u32) -> u64 {
        let s = &self.slots[i as usize];
        self.hash(&ConnKey::from_words(
            [0, 1, 2, 3].map(|j| s.addr()[j].load(Relaxed)),
            s.meta().load(Relaxed),
        ))
    }

    /// Removes an embryonic (or expired) entry of `shard` to make room: the
    /// next one after the stripe's clock hand. `false` when it has none.
    pub(super) fn drop_one(&self, shard: &mut Shard, now_ns: u64) -> bool {
        let n = shard.fresh;
        let scan = n.min(DROP_SCAN);
        // The scan's slots on their way, SCAN_AHEAD ahead of it: a scan
        // that finds nothing reads ~104 lines of a table far larger than
        // the caches, and each read used to wait for its own miss.
        for step in 0..scan.min(SCAN_AHEAD) {
            let s = &self.slots[(shard.base + (shard.hand + step) % n) as usize];
            cfdp_filter::prefetch_read(std::ptr::from_ref(s).cast());
        }
        for step in 0..scan {
            let off = (shard.hand + step) % n;
            let i = shard.base + off;
            if step + SCAN_AHEAD < scan {
                let ahead = &self.slots[(shard.base + (off + SCAN_AHEAD) % n) as usize];
                cfdp_filter::prefetch_read(std::ptr::from_ref(ahead).cast());
            }
            let s = &self.slots[i as usize];
            let c = s.ctl().load(Acquire);
            if c & USED == 0 {
                continue;
            }
            let expired = self.expired(c, s.last().load(Relaxed), now_ns);
            if !(expired || droppable(c)) {
                continue;
            }
            shard.hand = (off + 1) % n;
            // The next drop in this stripe starts at the hand: its first
            // slots on their way (under a flood of SYNs a drop reads ~3).
            for j in 1..=PREFETCH_AHEAD {
                let s = &self.slots[(shard.base + (off + j) % n) as usize];
                cfdp_filter::prefetch_read(std::ptr::from_ref(s).cast());
            }
            let h = self.hash_at(i);
            // A reader's compare-and-swap may have moved it on since:
            // drop it only if it is still droppable or expired.
            if self.remove_if(shard, i, c, h, |c, last| {
                droppable(c) || self.expired(c, last, now_ns)
            }) {
                if !expired {
                    shard.expired -= 1;
                    shard.early_dropped += 1;
                }
                return true;
            }
        }
        // Nothing to drop in this stretch: the next refused open looks at
        // the next one.
        shard.hand = (shard.hand + DROP_SCAN.min(n.max(1))) % n.max(1);
        false
    }
}
