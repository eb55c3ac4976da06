//! A worker's flow cache: a record per flow, finished when the flow is
//! idle, active too long, ended (TCP FIN or RST), or when its place in
//! the cache is wanted by a new flow (the oldest record there first,
//! counted as early), and handed out to be sent.
//!
//! Time is the packets' own (a capture's timestamps in a replay), so a
//! replay exports what a live run would have, and tests set it. The cache
//! keeps it to the millisecond, what IPFIX's `flowStartMilliseconds` and
//! `flowEndMilliseconds` carry: a timeout falls on the millisecond tick.
//!
//! Layout: a set-associative table, [`WAYS`] records a set, each record
//! one 64-byte cache line holding its key too (`Way`): a packet's flow
//! is found by hashing its 5-tuple to one set and comparing at most
//! [`WAYS`] keys; a new flow in a full set takes the place of that set's
//! oldest record (by last packet), which is finished early
//! (`flowEndReason` "lack of resources", counted). So a cached flow costs
//! 64 bytes whatever the family, the table never grows or rehashes, and a
//! full cache costs a new flow one record's export, not a scan of the
//! cache — the flow caches of switching hardware work this way. The
//! alternative it replaced, a `HashMap` evicting its oldest sixteenth by a
//! select over every record, took ~160 bytes a flow and a scan of the
//! whole cache every sixteenth of its capacity.
//!
//! Idle and active timeouts are found by a sweep that goes round the sets
//! a [`SWEEP_PARTS`]th of the table at a time, one part each
//! [`SWEEP_STEP_MS`] of packet time (a whole turn per ~1 s, as the sweep of
//! the whole table each second did before), so no packet waits behind a
//! sweep of the whole cache.

use std::hash::BuildHasher;

use cfdp_rules::FlowKey;

use crate::record::{EndReason, FlowRecord, Forwarding};

mod way;

use way::{forwarding_bits, Side, Way, BIFLOW, FIN_FWD, FIN_REV, FWD_SHIFT};

/// A cache's bounds and timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// Flows held at most (rounded up to whole sets of [`WAYS`]); a new
    /// flow whose set is full first finishes that set's oldest record,
    /// counted as early.
    pub capacity: usize,
    /// A flow with no packet for this long is finished (`flowEndReason`
    /// idle).
    pub idle_ns: u64,
    /// A flow older than this is finished and starts a new record
    /// (`flowEndReason` active timeout), so that long flows are reported
    /// while they last.
    pub active_ns: u64,
    /// Biflow records (RFC 5103): an answer of a tracked connection
    /// ([`Observed::reply`]) is counted in the reverse direction of its
    /// initiator's record, not in a record of its own. Costs 16 bytes a
    /// record beside its line (the answers' counts), and a key's set is
    /// chosen by a hash that is the same both ways.
    pub biflow: bool,
    /// Keep the id of the rule that decided each record's first packet
    /// (the rule [`FlowCache::observe_at`] asks for; `[ipfix] rule_pen`):
    /// 16 bytes a record beside its line, shared with biflow's answer
    /// counts.
    pub rules: bool,
}

impl Default for CacheSettings {
    /// 65,536 flows, idle 15 s, active 30 min: the inactive and active
    /// timeouts NetFlow exporters ship with.
    fn default() -> Self {
        CacheSettings {
            capacity: 1 << 16,
            idle_ns: 15_000_000_000,
            active_ns: 1_800_000_000_000,
            biflow: false,
            rules: false,
        }
    }
}

/// Records a set.
pub const WAYS: usize = 4;
/// The sweep's parts: one part of the sets each [`SWEEP_STEP_MS`].
pub const SWEEP_PARTS: usize = 64;
/// Packet time between two parts of the sweep (64 parts: 1.024 s a turn).
pub const SWEEP_STEP_MS: u64 = 16;

/// A packet's facts for [`FlowCache::observe`].
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    pub key: FlowKey,
    pub ts_ns: u64,
    /// The frame's length on the wire.
    pub len: u32,
    pub port: u16,
    pub forwarding: Forwarding,
    /// A TCP segment's FIN or RST: a uniflow record ends with either, a
    /// biflow record at a RST or once both sides have sent a FIN.
    pub close: Close,
    /// An answer of a tracked connection (its 5-tuple is the reverse of
    /// the one the connection was opened by): with [`CacheSettings::biflow`],
    /// counted in the reverse direction of the initiator's record.
    pub reply: bool,
    /// The packet opened a tracked connection: a record its 5-tuple still
    /// has belongs to a connection that is gone, and ends
    /// ([`EndReason::ConnectionExpired`]) before the packet starts the
    /// new connection's.
    pub opens: bool,
}

/// What a packet's TCP flags say of its flow's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Close {
    /// Nothing (not TCP, or neither flag).
    No,
    /// FIN: this side is done sending.
    Fin,
    /// RST: the connection is gone.
    Reset,
}

/// A key's set in a [`FlowCache`] ([`FlowCache::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place(usize);

/// One set: [`WAYS`] records.
type Set = [Way; WAYS];

/// A worker's flow cache (plain data: one worker owns it).
#[derive(Debug)]
pub struct FlowCache {
    sets: Box<[Set]>,
    /// What each way keeps beside it: answers' counts and rule (biflow
    /// caches and caches that keep rules; empty otherwise).
    side: Box<[[Side; WAYS]]>,
    biflow: bool,
    rules: bool,
    /// The 5-tuple hash's seeds, random per cache: nobody can choose
    /// addresses that crowd one set.
    seeds: [u64; 5],
    idle_ms: u64,
    /// The active timeout, at most what a way's `last_ms` can hold.
    active_ms: u64,
    len: usize,
    /// Records finished and not yet taken.
    done: Vec<FlowRecord>,
    /// The sweep's next set and when its next part is due (ms).
    sweep_at: usize,
    sweep_due_ms: u64,
    /// Records finished early because their set was full.
    early: u64,
}

/// The 64×64→128-bit multiply folded to 64 bits (rapidhash's mix).
#[inline(always)]
fn mix(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// What packet `p` starts a record's side entry with: its counts, if it
/// is an answer (`reply`), and its rule.
fn started(p: &Observed, reply: bool, rule: Option<cfdp_rules::RuleId>) -> Side {
    Side {
        bytes: if reply { u64::from(p.len) } else { 0 },
        packets: u32::from(reply),
        rule: rule.unwrap_or(0),
    }
}

/// Marks `close` on record `w` (a packet of it just counted; `reply`: from
/// the responder) and says whether the record ends with it: at a RST; at a
/// FIN of a uniflow record; of a biflow record, once both sides' FINs are
/// in (the FIN of one side of a connection that goes on answering does not
/// cut its record in two).
fn closes(w: &mut Way, close: Close, reply: bool) -> bool {
    match close {
        Close::No => false,
        Close::Reset => true,
        Close::Fin => {
            w.flags |= if reply { FIN_REV } else { FIN_FWD };
            w.flags & BIFLOW == 0 || w.flags & (FIN_FWD | FIN_REV) == FIN_FWD | FIN_REV
        }
    }
}

impl FlowCache {
    pub fn new(settings: CacheSettings) -> Self {
        let sets = settings.capacity.max(1).div_ceil(WAYS);
        // Seeds from the standard library's random keys (SipHash keyed
        // per process and per `RandomState`).
        let rs = std::collections::hash_map::RandomState::new();
        let seeds = std::array::from_fn(|i| rs.hash_one(i) | 1);
        let side = if settings.biflow || settings.rules {
            sets
        } else {
            0
        };
        FlowCache {
            sets: vec![[Way::default(); WAYS]; sets].into_boxed_slice(),
            side: vec![[Side::default(); WAYS]; side].into_boxed_slice(),
            biflow: settings.biflow,
            rules: settings.rules,
            seeds,
            idle_ms: ms(settings.idle_ns),
            active_ms: ms(settings.active_ns).min(u64::from(u32::MAX)),
            len: 0,
            done: Vec::new(),
            sweep_at: 0,
            sweep_due_ms: 0,
            early: 0,
        }
    }

    /// Flows held now.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Flows the cache holds at most (its sets times [`WAYS`]).
    pub fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// The table's bytes (allocated whole at the start), with what its
    /// records keep beside their lines.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.sets) + std::mem::size_of_val(&*self.side)
    }

    /// Whether it makes biflow records ([`CacheSettings::biflow`]).
    pub fn biflow(&self) -> bool {
        self.biflow
    }

    /// Whether it keeps the rule of each record ([`CacheSettings::rules`]).
    pub fn keeps_rules(&self) -> bool {
        self.rules
    }

    /// Records finished early so far because their set was full.
    pub fn early(&self) -> u64 {
        self.early
    }

    /// The set of `k`: its keyed hash reduced to the set count by a
    /// multiply (no power of two needed). The hash mixes the key's words
    /// as they are (three folded multiplies with random seeds, as the
    /// connection table's does): the `rapidhash` crate's API takes bytes,
    /// and this skips laying the 38-byte key out as bytes first (not
    /// measured against it). A biflow cache orders the two ends first, so
    /// that a key and its reply share a set (an answer's record is its
    /// initiator's, found where the answer's own key was prefetched).
    #[inline]
    fn set_of(&self, k: &FlowKey) -> usize {
        let (mut s, mut d) = (u128::from_ne_bytes(k.src), u128::from_ne_bytes(k.dst));
        let (mut sp, mut dp) = (k.sport, k.dport);
        if self.biflow && (d, dp) < (s, sp) {
            (s, d, sp, dp) = (d, s, dp, sp);
        }
        let rest =
            u64::from(sp) | u64::from(dp) << 16 | u64::from(k.proto) << 32 | u64::from(k.v6) << 40;
        let z = &self.seeds;
        let a = mix(s as u64 ^ z[0], (s >> 64) as u64 ^ z[1]);
        let b = mix(d as u64 ^ z[2], (d >> 64) as u64 ^ z[3]);
        let h = mix(a ^ rest, b ^ z[4]);
        ((u128::from(h) * self.sets.len() as u128) >> 64) as usize
    }

    /// Where `k`'s record is in this cache: hashed once a packet, for a
    /// prefetch ([`Self::address`]) a little ahead of
    /// [`Self::observe_at`].
    #[inline]
    pub fn place(&self, k: &FlowKey) -> Place {
        Place(self.set_of(k))
    }

    /// The address of a place's set (four cache lines), to prefetch.
    #[inline]
    pub fn address(&self, at: Place) -> *const u8 {
        std::ptr::from_ref(&self.sets[at.0]).cast()
    }

    /// The address of what a place's records keep beside their lines
    /// (one line a set: answers' counts, rules), to prefetch; `None` for
    /// a cache that keeps nothing there.
    #[inline]
    pub fn side_address(&self, at: Place) -> Option<*const u8> {
        self.side.get(at.0).map(|r| std::ptr::from_ref(r).cast())
    }

    /// Adds a packet to its flow's record (starting one if none).
    pub fn observe(&mut self, p: &Observed) {
        self.observe_at(self.place(&p.key), p, || None);
    }

    /// [`Self::observe`] with the place this cache's [`Self::place`] gave
    /// for `p.key` (another key's place would file the record in the
    /// wrong set, where its flow's later packets would not find it), and
    /// `rule`: the id of the rule that decided the packet (for a tracked
    /// connection's packet, the rule that opened it), asked for only when
    /// the packet starts a record in a cache that keeps rules
    /// ([`CacheSettings::rules`]).
    pub fn observe_at(
        &mut self,
        at: Place,
        p: &Observed,
        rule: impl FnOnce() -> Option<cfdp_rules::RuleId>,
    ) {
        // An answer of a tracked connection counts in its initiator's
        // record (a biflow cache: the same set either way).
        let reply = self.biflow && p.reply;
        let keeps = self.rules;
        let rule = move || if keeps { rule() } else { None };
        let key = if reply { p.key.reply() } else { p.key };
        debug_assert_eq!(at.0, self.set_of(&key), "a place of another key");
        let now = ms(p.ts_ns);
        self.sweep_if_due(now);
        let set = at.0;
        if let Some(j) = self.sets[set].iter().position(|w| w.holds(&key)) {
            self.add(set, j, p, reply, rule, now);
            return;
        }
        let rule = rule();
        let mut way = Way::new(p, &key, reply, rule.is_some(), now);
        let side = started(p, reply, rule);
        if closes(&mut way, p.close, reply) {
            // Over with its first packet: sent at once, no record kept.
            self.done
                .push(way.record(Some(&side), EndReason::EndOfFlow));
            return;
        }
        // The place a new record takes: a free way, or else the way with
        // the oldest last packet.
        let j = match self.sets[set].iter().position(|w| !w.used()) {
            Some(j) => {
                self.len += 1;
                j
            }
            None => {
                let ways = &self.sets[set];
                let j = (0..WAYS).min_by_key(|&j| ways[j].last()).expect("WAYS > 0");
                // Its place is taken at once (written over below).
                self.send_off(set, j, EndReason::LackOfResources);
                self.early += 1;
                j
            }
        };
        self.sets[set][j] = way;
        // What is kept beside the line is read only under [`BIFLOW`] and
        // [`RULE`]: written when the record has either (a new flow's miss
        // is one line, not two, when it has neither).
        if reply || rule.is_some() {
            self.side[set][j] = side;
        }
    }

    /// Packet `p` into the record at way `j` of `set`, which holds its
    /// flow (`reply`: into the answers' counts); a record past a timeout
    /// the sweep has not reached yet ends first, as the sweep would have
    /// ended it, and the packet starts the next.
    fn add(
        &mut self,
        set: usize,
        j: usize,
        p: &Observed,
        reply: bool,
        rule: impl FnOnce() -> Option<cfdp_rules::RuleId>,
        now: u64,
    ) {
        let w = &mut self.sets[set][j];
        let mut spare = Side::default();
        let side = self.side.get_mut(set).map_or(&mut spare, |r| &mut r[j]);
        let age = now.saturating_sub(w.first_ms);
        // The answers' counts are read only under [`BIFLOW`] (a uniflow
        // record's packet does not touch their line).
        let biflow = w.flags & BIFLOW != 0;
        let end = if now.saturating_sub(w.last()) >= self.idle_ms {
            Some(EndReason::Idle)
        } else if p.opens {
            Some(EndReason::ConnectionExpired)
        } else if age >= self.active_ms
            || w.packets == u32::MAX
            || biflow && side.packets == u32::MAX
        {
            Some(EndReason::Active)
        } else {
            None
        };
        if let Some(end) = end {
            self.done.push(w.record(Some(side), end));
            let rule = rule();
            *w = Way::new(p, &w.key(), reply, rule.is_some(), now);
            if reply || rule.is_some() {
                *side = started(p, reply, rule);
            }
        } else {
            if reply {
                // The record's first answer: its counts start from nothing
                // (a record before it in this way may have left some).
                if !biflow {
                    (side.packets, side.bytes) = (0, 0);
                }
                side.packets += 1;
                side.bytes += u64::from(p.len);
                w.flags |= BIFLOW;
            } else {
                w.packets += 1;
                w.bytes += u64::from(p.len);
            }
            // `age` < `active_ms` ≤ u32::MAX.
            w.last_ms = w.last_ms.max(age as u32);
            w.flags = w.flags & !(3 << FWD_SHIFT) | forwarding_bits(p.forwarding);
        }
        if closes(w, p.close, reply) {
            self.finish(set, j, EndReason::EndOfFlow);
        }
    }

    /// The record at way `j` of `set` finished for `end`, its place freed.
    fn finish(&mut self, set: usize, j: usize, end: EndReason) {
        self.send_off(set, j, end);
        self.sets[set][j] = Way::default();
        self.len -= 1;
    }

    /// The record at way `j` of `set` into the finished ones, for `end`
    /// (its place still taken).
    fn send_off(&mut self, set: usize, j: usize, end: EndReason) {
        let side = self.side.get(set).map(|r| &r[j]);
        self.done.push(self.sets[set][j].record(side, end));
    }

    /// Finishes the records of sets `range` that are idle or active too
    /// long at `now` (ms).
    fn sweep_sets(&mut self, range: std::ops::Range<usize>, now: u64) {
        let (idle, active) = (self.idle_ms, self.active_ms);
        for set in range {
            for j in 0..WAYS {
                let w = &self.sets[set][j];
                if !w.used() {
                    continue;
                }
                let end = if now.saturating_sub(w.last()) >= idle {
                    EndReason::Idle
                } else if now.saturating_sub(w.first_ms) >= active {
                    EndReason::Active
                } else {
                    continue;
                };
                self.finish(set, j, end);
            }
        }
    }

    /// The sweep's parts due at `now` (ms): one, or all of them after a
    /// gap in packet time of a whole turn or more.
    fn sweep_parts(&mut self, now: u64) {
        let behind = now.saturating_sub(self.sweep_due_ms) / SWEEP_STEP_MS + 1;
        let parts = behind.min(SWEEP_PARTS as u64) as usize;
        let n = self.sets.len();
        let per = n.div_ceil(SWEEP_PARTS);
        for _ in 0..parts {
            let end = (self.sweep_at + per).min(n);
            self.sweep_sets(self.sweep_at..end, now);
            self.sweep_at = if end == n { 0 } else { end };
        }
        self.sweep_due_ms = now + SWEEP_STEP_MS;
    }

    /// The sweep's parts due at `now_ns`, with no packet to observe: a
    /// worker polling quiet queues calls it, so that a flow's record ends
    /// within its idle timeout (and a turn of the sweep) though no packet
    /// of any flow arrives. As cheap as a compare when no part is due.
    pub fn tick(&mut self, now_ns: u64) {
        self.sweep_if_due(ms(now_ns));
    }

    /// The sweep's parts due at `now` (ms), if any is.
    #[inline]
    fn sweep_if_due(&mut self, now: u64) {
        if now >= self.sweep_due_ms {
            self.sweep_parts(now);
        }
    }

    /// Finishes every record that is idle or active too long at `now_ns`
    /// (the whole table at once: tests).
    pub fn sweep(&mut self, now_ns: u64) {
        self.sweep_sets(0..self.sets.len(), ms(now_ns));
    }

    /// Every record finished now, with `reason` (the end of a capture, a
    /// shutdown: forced end).
    pub fn flush(&mut self, reason: EndReason) {
        for set in 0..self.sets.len() {
            for j in 0..WAYS {
                if self.sets[set][j].used() {
                    self.finish(set, j, reason);
                }
            }
        }
    }

    /// Records finished and not yet taken.
    pub fn finished(&self) -> usize {
        self.done.len()
    }

    /// The records finished so far, taken out; the next ones gather in a
    /// vector as large (one allocation a batch, not a doubling series).
    pub fn take(&mut self) -> Vec<FlowRecord> {
        let room = self.done.len();
        std::mem::replace(&mut self.done, Vec::with_capacity(room))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Counts;
    use std::net::Ipv4Addr;

    fn key(i: u32) -> FlowKey {
        FlowKey::new(
            Ipv4Addr::from(0x0a00_0000 + i).into(),
            Ipv4Addr::new(192, 0, 2, 1).into(),
            17,
            4000,
            53,
        )
    }

    fn packet(i: u32, ts_ns: u64) -> Observed {
        Observed {
            key: key(i),
            ts_ns,
            len: 100,
            port: 1,
            forwarding: Forwarding::Forwarded,
            close: Close::No,
            reply: false,
            opens: false,
        }
    }

    const S: u64 = 1_000_000_000;

    fn settings() -> CacheSettings {
        CacheSettings {
            capacity: 64,
            idle_ns: 15 * S,
            active_ns: 60 * S,
            biflow: false,
            rules: false,
        }
    }

    /// Idle: a flow last seen 15 s ago is finished at the sweep one tick
    /// after, not one tick before.
    #[test]
    fn idle_timeout_one_tick_either_side() {
        let mut c = FlowCache::new(settings());
        c.observe(&packet(1, 10 * S));
        c.sweep(25 * S - 1);
        assert!(c.take().is_empty() && c.len() == 1);
        c.sweep(25 * S);
        let r = c.take();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].end, r[0].packets, r[0].bytes),
            (EndReason::Idle, 1, 100)
        );
        assert!(c.is_empty());
    }

    /// Active: a flow with packets all along is cut at 60 s into a
    /// record, and the next packet starts a new one; nothing is lost.
    #[test]
    fn active_timeout_cuts_a_long_flow_into_records() {
        let mut c = FlowCache::new(settings());
        for t in 0..=60u64 {
            c.observe(&packet(1, 1000 * S + t * S - u64::from(t == 60)));
        }
        // The 61st packet, 1 ns before 60 s after the first: still one.
        assert!(c.take().is_empty());
        c.observe(&packet(1, 1060 * S));
        let r = c.take();
        assert_eq!(
            (r.len(), r[0].end, r[0].packets),
            (1, EndReason::Active, 61)
        );
        c.flush(EndReason::Forced);
        let r = c.take();
        assert_eq!((r[0].packets, r[0].end), (1, EndReason::Forced));
    }

    /// A new flow in a full set finishes that set's oldest record early,
    /// counted, and every packet is in exactly one record.
    #[test]
    fn a_full_set_exports_its_oldest_record_early() {
        let mut c = FlowCache::new(settings());
        for i in 0..200u32 {
            c.observe(&packet(i, S + u64::from(i) * 1_000_000));
        }
        assert!(c.len() <= 64);
        c.flush(EndReason::Forced);
        let r = c.take();
        let early = r
            .iter()
            .filter(|r| r.end == EndReason::LackOfResources)
            .count();
        assert_eq!(early as u64, c.early());
        assert!(early >= 200 - 64);
        assert_eq!(r.iter().map(|r| r.packets).sum::<u64>(), 200);
        // The oldest of its set went first: in every set, each early
        // record is older than every record still held at the flush.
        let c = &c;
        for set in 0..c.sets.len() {
            let of = |end: EndReason| {
                r.iter()
                    .filter(move |r| r.end == end && c.set_of(&r.key) == set)
                    .map(|r| r.last_ns)
            };
            let newest_early = of(EndReason::LackOfResources).max();
            let oldest_kept = of(EndReason::Forced).min();
            assert!(newest_early < oldest_kept, "set {set}");
        }
    }

    /// A cached flow costs one 64-byte line, whatever its family.
    #[test]
    fn a_cached_flow_is_64_bytes() {
        let c = FlowCache::new(settings());
        assert_eq!(c.capacity(), 64);
        assert_eq!(c.memory_bytes(), 64 * 64);
    }

    /// A packet of a flow idle for the timeout starts a new record even
    /// before a sweep has come by (one tick either side).
    #[test]
    fn a_packet_after_the_idle_timeout_starts_a_new_record() {
        let mut c = FlowCache::new(settings());
        c.observe(&packet(1, 10 * S));
        c.observe(&packet(1, 25 * S - 1));
        // Another flow's packet 10 ms before the timeout: the sweep it
        // brings about finds flow 1 not yet idle, and the next part of the
        // sweep is not due for 16 ms.
        c.observe(&packet(2, 40 * S - 10_000_000 - 1));
        assert!(c.take().is_empty());
        c.observe(&packet(1, 40 * S - 1));
        let r = c.take();
        assert_eq!((r.len(), r[0].packets, r[0].end), (1, 2, EndReason::Idle));
        assert_eq!(c.len(), 2);
    }

    /// Flow 1's only packet at 10 s (idle timeout 15 s), then `advance`
    /// called every `every` ns of the clock until a record is finished:
    /// it must be flow 1's, idle, within one turn of the sweep (~1 s)
    /// after its timeout, never before it.
    fn idle_flow_ends_within_a_turn(every: u64, mut advance: impl FnMut(&mut FlowCache, u64)) {
        let mut c = FlowCache::new(CacheSettings {
            capacity: 1024,
            ..settings()
        });
        c.observe(&packet(1, 10 * S));
        let step = SWEEP_STEP_MS * 1_000_000;
        let turn = SWEEP_PARTS as u64 * step;
        let mut t = 10 * S;
        let finished = loop {
            t += every;
            assert!(t < 30 * S, "flow 1 never finished");
            advance(&mut c, t);
            if let Some(r) = c.take().first() {
                break (t, r.key, r.end);
            }
        };
        assert_eq!((finished.1, finished.2), (key(1), EndReason::Idle));
        assert!(
            (25 * S..=25 * S + turn + step).contains(&finished.0),
            "{finished:?}"
        );
    }

    /// Under steady traffic (another flow's packets) the sweep goes round
    /// in parts.
    #[test]
    fn the_sweep_in_parts_finishes_an_idle_flow_within_a_turn() {
        idle_flow_ends_within_a_turn(SWEEP_STEP_MS * 1_000_000, |c, t| {
            c.observe(&packet(2, t));
        });
    }

    /// With no packet at all (a quiet link), the worker's idle ticks,
    /// far more often than parts are due, go round it the same way.
    #[test]
    fn ticks_without_packets_finish_an_idle_flow_within_a_turn() {
        idle_flow_ends_within_a_turn(SWEEP_STEP_MS * 1_000_000 / 4, FlowCache::tick);
    }

    /// A packet that opens a connection ends the record its 5-tuple has
    /// (the old connection's) and starts the new one's; past the idle
    /// timeout the old record is idle, as the sweep would have said.
    #[test]
    fn a_new_connection_on_the_same_five_tuple_ends_the_old_ones_record() {
        let mut c = FlowCache::new(settings());
        let opener = |ts| Observed {
            opens: true,
            ..packet(1, ts)
        };
        c.observe(&opener(S));
        c.observe(&packet(1, 2 * S));
        assert!(c.take().is_empty(), "the connection's own packets");
        c.observe(&opener(3 * S));
        c.observe(&packet(1, 4 * S));
        let r = c.take();
        assert_eq!(
            (r.len(), r[0].packets, r[0].last_ns, r[0].end),
            (1, 2, 2 * S, EndReason::ConnectionExpired)
        );
        assert_eq!(EndReason::ConnectionExpired.ipfix(), 1);
        c.observe(&opener(30 * S));
        c.flush(EndReason::Forced);
        let r = c.take();
        assert_eq!(
            r.iter().map(|r| (r.packets, r.end)).collect::<Vec<_>>(),
            [(2, EndReason::Idle), (1, EndReason::Forced)]
        );
    }

    /// A FIN or RST ends its flow's record at once.
    #[test]
    fn a_tcp_end_finishes_the_record() {
        let mut c = FlowCache::new(settings());
        c.observe(&packet(1, S));
        c.observe(&Observed {
            close: Close::Fin,
            ..packet(1, 2 * S)
        });
        let r = c.take();
        assert_eq!(
            (r.len(), r[0].packets, r[0].end),
            (1, 2, EndReason::EndOfFlow)
        );
        assert!(c.is_empty());
    }

    fn biflow() -> FlowCache {
        FlowCache::new(CacheSettings {
            biflow: true,
            ..settings()
        })
    }

    /// Packet `i`'s answer (flow `i` the other way), `len` bytes.
    fn answer(i: u32, ts_ns: u64, len: u32) -> Observed {
        let p = packet(i, ts_ns);
        Observed {
            key: p.key.reply(),
            len,
            reply: true,
            ..p
        }
    }

    /// With biflow records, a connection's answers count in the reverse
    /// direction of its initiator's record; without, each direction is a
    /// record of its own.
    #[test]
    fn answers_count_in_the_initiators_record() {
        for (mut c, biflow) in [(biflow(), true), (FlowCache::new(settings()), false)] {
            c.observe(&packet(1, S));
            c.observe(&answer(1, 2 * S, 40));
            c.observe(&answer(1, 3 * S, 60));
            c.observe(&packet(1, 4 * S));
            c.flush(EndReason::Forced);
            let mut r = c.take();
            r.sort_by_key(|r| r.key.src);
            if biflow {
                assert_eq!(r.len(), 1);
                assert_eq!((r[0].key, r[0].packets, r[0].bytes), (key(1), 2, 200));
                assert_eq!(
                    r[0].reverse,
                    Some(Counts {
                        packets: 2,
                        bytes: 100
                    })
                );
                assert_eq!((r[0].first_ns, r[0].last_ns), (S, 4 * S));
            } else {
                assert_eq!(r.len(), 2);
                assert_eq!((r[0].key, r[0].packets, r[0].reverse), (key(1), 2, None));
                assert_eq!(
                    (r[1].key, r[1].packets, r[1].bytes),
                    (key(1).reply(), 2, 100)
                );
            }
        }
    }

    /// An answer whose initiator's record is gone (ended, or never seen on
    /// this worker) starts that record, with no packet of its own.
    #[test]
    fn an_answer_first_starts_its_initiators_record() {
        let mut c = biflow();
        c.observe(&answer(1, S, 40));
        c.flush(EndReason::Forced);
        let r = c.take();
        assert_eq!((r.len(), r[0].key, r[0].packets), (1, key(1), 0));
        assert_eq!(r[0].reverse.map(|r| r.packets), Some(1));
    }

    /// A FIN ends a biflow record only once both sides have sent one; a
    /// RST at once. A record that never saw an answer stays uniflow, and
    /// its FIN ends it.
    #[test]
    fn a_biflow_record_ends_at_both_fins_or_a_reset() {
        let mut c = biflow();
        let fin = |p: Observed| Observed {
            close: Close::Fin,
            ..p
        };
        c.observe(&packet(1, S));
        c.observe(&answer(1, 2 * S, 40));
        c.observe(&fin(packet(1, 3 * S)));
        c.observe(&answer(1, 4 * S, 40));
        assert!(c.take().is_empty(), "one side's FIN");
        c.observe(&fin(answer(1, 5 * S, 40)));
        let r = c.take();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].end, r[0].packets, r[0].reverse.map(|r| r.packets)),
            (EndReason::EndOfFlow, 2, Some(3))
        );
        c.observe(&packet(2, S));
        c.observe(&answer(2, 2 * S, 40));
        c.observe(&Observed {
            close: Close::Reset,
            ..answer(2, 3 * S, 40)
        });
        let r = c.take();
        assert_eq!((r.len(), r[0].end), (1, EndReason::EndOfFlow));
        c.observe(&packet(3, S));
        c.observe(&fin(packet(3, 2 * S)));
        let r = c.take();
        assert_eq!((r.len(), r[0].packets, r[0].reverse), (1, 2, None));
        assert!(c.is_empty());
    }

    /// A biflow cache keeps the answers' counts beside each line.
    #[test]
    fn a_biflow_record_is_80_bytes() {
        assert_eq!(biflow().memory_bytes(), 64 * 80);
    }

    /// A cache that keeps rules names each record by the rule of its
    /// first packet (an answer's record by the connection's), and a
    /// record no rule decided by none; one that does not keeps none.
    #[test]
    fn a_record_keeps_the_rule_of_its_first_packet() {
        for keep in [true, false] {
            let mut c = FlowCache::new(CacheSettings {
                rules: keep,
                biflow: true,
                ..settings()
            });
            let mut ruled = |p: Observed, rule| c.observe_at(c.place(&p.key), &p, || Some(rule));
            ruled(packet(1, S), 7);
            ruled(packet(1, 2 * S), 8);
            ruled(answer(1, 3 * S, 40), 7);
            ruled(answer(2, S, 40), 9);
            c.observe(&packet(3, S));
            c.flush(EndReason::Forced);
            let mut r = c.take();
            r.sort_by_key(|r| r.key.src);
            let rules: Vec<_> = r.iter().map(|r| (r.key, r.rule)).collect();
            let named = |rule| Some(rule).filter(|_| keep);
            assert_eq!(
                rules,
                [(key(1), named(7)), (key(2), named(9)), (key(3), None)]
            );
            assert_eq!(r[0].reverse.map(|c| c.packets), Some(1));
        }
    }
}
