//! Fragments: later fragments of a datagram get the ports of its first
//! fragment, so port rules apply to every fragment (a drop rule on a port
//! that lets later fragments through would be a security hole).
//!
//! * [`FragTable`] remembers the ports of first fragments. Bounded and
//!   allocation-free after construction: at most `capacity` datagrams, each
//!   for `ttl` of the backend's clock; when full, the oldest entry is
//!   forgotten (and counted). One source ([`Source`]: an IPv4 address, or
//!   an IPv6 /64, which one host can fill with addresses) holds at most
//!   `per_source` entries: a further first fragment of that source is not
//!   remembered (counted in `source_refused`; its later fragments are held
//!   and dropped as if it had not come), so a flood from one source cannot
//!   push out everyone else's datagrams.
//! * [`HoldTable`] holds later fragments that arrive *before* their first
//!   fragment — VPP's shallow virtual reassembly: copies of them wait,
//!   bounded in frames, bytes and time, until the first fragment gives the
//!   ports and one verdict applies to all; what times out or does not fit
//!   is dropped and counted, never matched with made-up ports (an attacker
//!   who sends fragments out of order would otherwise slip past port
//!   rules).

use std::collections::{HashMap, VecDeque};

use cfdp_rules::FlowKey;

use crate::LinkType;

/// Where fragments come from, as the per-source bounds count them: an
/// IPv4 address, or the /64 of an IPv6 address (a host holds a whole /64
/// and can send from any address in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    v6: bool,
    prefix: [u8; 16],
}

impl Source {
    pub fn of(v6: bool, src: &[u8; 16]) -> Self {
        let mut prefix = *src;
        if v6 {
            prefix[8..].fill(0);
        }
        Self { v6, prefix }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FragId {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    id: u32,
}

impl FragId {
    fn source(&self) -> Source {
        Source::of(self.v6, &self.src)
    }

    fn of(k: &FlowKey, id: u32) -> Self {
        Self {
            v6: k.v6,
            src: k.src,
            dst: k.dst,
            proto: k.proto,
            id,
        }
    }
}

/// The ports of first fragments, as an LRU bounded in entries.
///
/// Every live entry has exactly one record in `order` carrying its
/// generation; a record whose generation no longer matches its entry (the
/// entry was refreshed by a duplicate first fragment, or expired) is stale
/// and skipped. Stale records are compacted away in place when `order`
/// reaches twice the capacity, so the queue stays bounded however the
/// first fragments repeat, and no live entry ever loses its record (it
/// would then never expire nor be evicted: a remote attacker could pin the
/// whole table with duplicates).
pub struct FragTable {
    map: HashMap<FragId, FragEntry>,
    /// Records in arrival order: the entry, its generation, and when it
    /// was stored (so that expiry reads no map entry while the oldest
    /// record is young: one check per first fragment, not a lookup).
    order: VecDeque<(FragId, u64, u64)>,
    capacity: usize,
    ttl_ns: u64,
    next_gen: u64,
    /// Live entries per source (sources at zero are removed).
    sources: HashMap<Source, usize>,
    per_source: usize,
    pub evicted: u64,
    /// First fragments not remembered: their source held `per_source`.
    pub source_refused: u64,
}

#[derive(Clone, Copy)]
struct FragEntry {
    sport: u16,
    dport: u16,
    seen_ns: u64,
    generation: u64,
    /// The bytes of the datagram seen so far, as disjoint ranges (runs of
    /// fragments, merged when they touch); `None` once they did not fit
    /// ([`RANGES`]: no overlap is looked for then).
    seen: Option<[(u32, u32); RANGES]>,
    /// A fragment overlapped another: the datagram is discarded.
    overlapped: bool,
}

/// Disjoint runs of bytes a datagram's entry keeps (in-order fragments
/// make one; a datagram whose fragments leave more gaps than this is no
/// longer checked for overlaps).
pub const RANGES: usize = 4;

/// What a fragment's bytes are beside those of its datagram seen before
/// ([`FragTable::cover`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// New bytes (or the datagram is not checked: too many gaps, or its
    /// first fragment was not remembered).
    Fresh,
    /// Bytes all seen before, in one run: a duplicate, dropped (the
    /// datagram lives on), as Linux drops it.
    Duplicate,
    /// Some bytes seen before and some not: the datagram is discarded
    /// (RFC 5722; Linux does so for IPv4 too), this fragment and every
    /// later one — overlapping fragments are how a sender makes a
    /// receiver reassemble other bytes than a firewall judged.
    Overlap,
}

impl FragTable {
    /// A table of `capacity` datagrams, each remembered `ttl_ns`; one
    /// source holds at most `per_source` of them.
    pub fn new(capacity: usize, per_source: usize, ttl_ns: u64) -> Self {
        let capacity = capacity.max(1);
        Self {
            map: HashMap::with_capacity(capacity),
            order: VecDeque::with_capacity(2 * capacity),
            capacity,
            ttl_ns,
            next_gen: 0,
            sources: HashMap::with_capacity(capacity),
            per_source: per_source.max(1),
            evicted: 0,
            source_refused: 0,
        }
    }

    /// Remembers the ports of a first fragment seen at time `now_ns` (a
    /// duplicate refreshes its datagram: it becomes the newest). A new
    /// datagram of a source that holds `per_source` already is not
    /// remembered (`false`).
    pub fn first(&mut self, k: &FlowKey, id: u32, now_ns: u64) -> bool {
        self.expire(now_ns);
        let fid = FragId::of(k, id);
        let known = self.map.contains_key(&fid);
        if !known {
            if self.sources.get(&fid.source()).copied().unwrap_or(0) >= self.per_source {
                self.source_refused += 1;
                return false;
            }
            if self.map.len() >= self.capacity {
                self.evict_oldest();
            }
            *self.sources.entry(fid.source()).or_insert(0) += 1;
        }
        let generation = self.next_gen;
        self.next_gen += 1;
        // A duplicate first fragment keeps what the datagram's entry saw.
        let (seen, overlapped) = self
            .map
            .get(&fid)
            .map_or((Some([(0, 0); RANGES]), false), |e| (e.seen, e.overlapped));
        self.map.insert(
            fid,
            FragEntry {
                sport: k.sport,
                dport: k.dport,
                seen_ns: now_ns,
                generation,
                seen,
                overlapped,
            },
        );
        if self.order.len() >= 2 * self.capacity {
            self.compact();
        }
        self.order.push_back((fid, generation, now_ns));
        true
    }

    /// `fid` left the table.
    fn forget(&mut self, fid: &FragId) {
        if self.map.remove(fid).is_some() {
            release_source(&mut self.sources, fid.source(), 1);
        }
    }

    /// Ports of the datagram a later fragment belongs to, if its first
    /// fragment was seen and has not expired.
    pub fn resolve(&mut self, k: &FlowKey, id: u32, now_ns: u64) -> Option<(u16, u16)> {
        let fid = FragId::of(k, id);
        match self.map.get(&fid) {
            Some(e) if now_ns.saturating_sub(e.seen_ns) <= self.ttl_ns => Some((e.sport, e.dport)),
            _ => None,
        }
    }

    /// Notes that a fragment of the datagram (its first fragment already
    /// remembered) carries bytes `off..off + len`: whether they are new,
    /// a duplicate, or overlap bytes seen before (then the datagram is
    /// discarded: this and every later [`Cover::Overlap`]).
    pub fn cover(&mut self, k: &FlowKey, id: u32, off: u32, len: u32) -> Cover {
        let Some(e) = self.map.get_mut(&FragId::of(k, id)) else {
            return Cover::Fresh;
        };
        if e.overlapped {
            return Cover::Overlap;
        }
        let Some(runs) = &mut e.seen else {
            return Cover::Fresh;
        };
        let end = off.saturating_add(len);
        if len == 0 {
            return Cover::Fresh;
        }
        // Empty runs are (0, 0); a run is [start, end).
        let live = |r: &&(u32, u32)| r.1 > r.0;
        if runs.iter().filter(live).any(|&(a, b)| a <= off && end <= b) {
            return Cover::Duplicate;
        }
        if runs.iter().filter(live).any(|&(a, b)| off < b && a < end) {
            e.overlapped = true;
            return Cover::Overlap;
        }
        // New bytes: merged with the runs they touch (at most one each
        // side: the runs are disjoint and never touch each other).
        let (mut a, mut b) = (off, end);
        let mut next = [(0, 0); RANGES];
        let mut n = 0;
        for &(x, y) in runs.iter().filter(live) {
            if y == a || x == b {
                (a, b) = (a.min(x), b.max(y));
            } else {
                next[n] = (x, y);
                n += 1;
            }
        }
        if n == RANGES {
            e.seen = None; // one gap too many: no longer checked
            return Cover::Fresh;
        }
        next[n] = (a, b);
        *runs = next;
        Cover::Fresh
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The live entry `fid`'s record is `(fid, generation)`.
    fn live(&self, fid: &FragId, generation: u64) -> Option<FragEntry> {
        self.map
            .get(fid)
            .copied()
            .filter(|e| e.generation == generation)
    }

    /// Forgets entries older than the TTL at `now_ns` (records are in
    /// arrival order, so the oldest live one is the first live record).
    pub fn expire(&mut self, now_ns: u64) {
        while let Some(&(fid, generation, stored_ns)) = self.order.front() {
            // Every later record was stored no earlier: none has expired.
            if now_ns.saturating_sub(stored_ns) <= self.ttl_ns {
                break;
            }
            if let Some(e) = self.live(&fid, generation) {
                if now_ns.saturating_sub(e.seen_ns) <= self.ttl_ns {
                    break;
                }
                self.forget(&fid);
            }
            self.order.pop_front();
        }
    }

    fn evict_oldest(&mut self) {
        while let Some((fid, generation, _)) = self.order.pop_front() {
            if self.live(&fid, generation).is_some() {
                self.forget(&fid);
                self.evicted += 1;
                return;
            }
        }
    }

    /// Drops stale records, in place (no allocation): afterwards `order`
    /// holds one record per live entry, at most `capacity`.
    fn compact(&mut self) {
        let map = &self.map;
        self.order
            .retain(|(fid, g, _)| map.get(fid).is_some_and(|e| e.generation == *g));
    }
}

/// A later fragment held until its first fragment arrives: a copy of the
/// frame (the backend releases the original at once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub link: LinkType,
    pub ts_ns: u64,
    pub orig_len: u32,
    pub data: Vec<u8>,
}

/// Limits of a [`HoldTable`].
#[derive(Clone, Copy, Debug)]
pub struct HoldLimits {
    /// Frames held at most, over all datagrams.
    pub frames: usize,
    /// Bytes held at most, over all datagrams.
    pub bytes: usize,
    /// Frames held at most per datagram (a datagram of more fragments
    /// than this arriving before its first is not worth the memory).
    pub per_datagram: usize,
    /// Frames held at most per source address: one source (or one
    /// spoofed address) cannot take the table from everyone else.
    pub per_source: usize,
    /// How long a datagram's fragments wait for the first one.
    pub ttl_ns: u64,
}

/// Why a fragment was not held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldRefused {
    /// Over a frame, byte or per-datagram limit.
    Full,
    /// Its source address holds its quota already.
    SourceQuota,
}

/// Gives back `n` of `source`'s quota.
fn release_source(sources: &mut HashMap<Source, usize>, source: Source, n: usize) {
    if let Some(c) = sources.get_mut(&source) {
        *c = c.saturating_sub(n);
        if *c == 0 {
            sources.remove(&source);
        }
    }
}

/// Later fragments waiting for their first fragment (see the module docs).
/// Copies are allocated only on this path: out-of-order fragments.
pub struct HoldTable {
    map: HashMap<FragId, (u64, Vec<Held>)>,
    /// Frames held per source (entries at zero are removed).
    sources: HashMap<Source, usize>,
    limits: HoldLimits,
    frames: usize,
    bytes: usize,
    /// Earliest time any entry expires (`u64::MAX`: none held).
    next_expiry_ns: u64,
}

impl HoldTable {
    pub fn new(limits: HoldLimits) -> Self {
        Self {
            map: HashMap::new(),
            sources: HashMap::new(),
            limits,
            frames: 0,
            bytes: 0,
            next_expiry_ns: u64::MAX,
        }
    }

    /// Holds a later fragment of the datagram `(k, id)` seen at `ts_ns`
    /// (k's ports are ignored: later fragments have none).
    pub fn hold(&mut self, k: &FlowKey, id: u32, frame: Held) -> Result<(), HoldRefused> {
        let l = self.limits;
        if self.frames >= l.frames || self.bytes + frame.data.len() > l.bytes {
            return Err(HoldRefused::Full);
        }
        let source = Source::of(k.v6, &k.src);
        let from = self.sources.get(&source).copied().unwrap_or(0);
        if from >= l.per_source {
            return Err(HoldRefused::SourceQuota);
        }
        let ts = frame.ts_ns;
        let e = self
            .map
            .entry(FragId::of(k, id))
            .or_insert_with(|| (ts, Vec::new()));
        if e.1.len() >= l.per_datagram {
            if e.1.is_empty() {
                self.map.remove(&FragId::of(k, id));
            }
            return Err(HoldRefused::Full);
        }
        *self.sources.entry(source).or_insert(0) += 1;
        self.frames += 1;
        self.bytes += frame.data.len();
        e.1.push(frame);
        self.next_expiry_ns = self.next_expiry_ns.min(e.0.saturating_add(l.ttl_ns));
        Ok(())
    }

    /// The held fragments of datagram `(k, id)`, whose first fragment just
    /// arrived, in arrival order.
    pub fn take(&mut self, k: &FlowKey, id: u32) -> Option<Vec<Held>> {
        if self.map.is_empty() {
            return None;
        }
        let (_, v) = self.map.remove(&FragId::of(k, id))?;
        release_source(&mut self.sources, Source::of(k.v6, &k.src), v.len());
        self.frames -= v.len();
        self.bytes -= v.iter().map(|h| h.data.len()).sum::<usize>();
        if self.map.is_empty() {
            self.next_expiry_ns = u64::MAX;
        }
        Some(v)
    }

    /// Drops the datagrams whose first held fragment is older than the TTL
    /// at `now_ns`; returns how many frames were dropped. Cheap when
    /// nothing is due.
    pub fn expire(&mut self, now_ns: u64) -> u64 {
        if now_ns < self.next_expiry_ns {
            return 0;
        }
        let ttl = self.limits.ttl_ns;
        self.expire_if(|first| now_ns.saturating_sub(first) > ttl)
    }

    /// Drops everything held (the end of a run); returns how many frames.
    pub fn clear(&mut self) -> u64 {
        self.expire_if(|_| true)
    }

    fn expire_if(&mut self, due: impl Fn(u64) -> bool) -> u64 {
        let mut dropped = 0u64;
        let mut next = u64::MAX;
        let ttl = self.limits.ttl_ns;
        let (mut frames, mut bytes) = (self.frames, self.bytes);
        let sources = &mut self.sources;
        self.map.retain(|fid, (first, v)| {
            if due(*first) {
                release_source(sources, fid.source(), v.len());
                dropped += v.len() as u64;
                frames -= v.len();
                bytes -= v.iter().map(|h| h.data.len()).sum::<usize>();
                false
            } else {
                next = next.min(first.saturating_add(ttl));
                true
            }
        });
        (self.frames, self.bytes) = (frames, bytes);
        self.next_expiry_ns = next;
        dropped
    }

    /// Frames held now.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram's bytes: new ones are taken (merged into runs), bytes
    /// all seen in one run are a duplicate, bytes partly seen are an
    /// overlap — and after one, every fragment of the datagram is; more
    /// gaps than `RANGES` stop the checks rather than guess.
    #[test]
    fn overlapping_fragments_discard_their_datagram() {
        let k = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 5000, 53);
        let mut t = FragTable::new(16, 16, 1_000);
        assert_eq!(
            t.cover(&k, 7, 0, 64),
            Cover::Fresh,
            "not remembered: unchecked"
        );
        assert!(t.first(&k, 7, 0));
        assert_eq!(t.cover(&k, 7, 0, 64), Cover::Fresh);
        assert_eq!(t.cover(&k, 7, 64, 64), Cover::Fresh);
        assert_eq!(
            t.cover(&k, 7, 16, 96),
            Cover::Duplicate,
            "inside the run 0..128"
        );
        assert_eq!(t.cover(&k, 7, 256, 64), Cover::Fresh);
        assert_eq!(t.cover(&k, 7, 120, 16), Cover::Overlap, "half seen");
        assert_eq!(
            t.cover(&k, 7, 400, 8),
            Cover::Overlap,
            "the datagram is discarded"
        );
        // A duplicate first fragment keeps the verdict.
        assert!(t.first(&k, 7, 1));
        assert_eq!(t.cover(&k, 7, 500, 8), Cover::Overlap);
        // Gaps: four runs are checked, a fifth stops the checks.
        assert!(t.first(&k, 8, 0));
        for off in [0, 100, 200, 300] {
            assert_eq!(t.cover(&k, 8, off, 8), Cover::Fresh);
        }
        assert_eq!(t.cover(&k, 8, 4, 8), Cover::Overlap);
        assert!(t.first(&k, 9, 0));
        for off in [0, 100, 200, 300, 400] {
            assert_eq!(t.cover(&k, 9, off, 8), Cover::Fresh);
        }
        assert_eq!(
            t.cover(&k, 9, 4, 8),
            Cover::Fresh,
            "unchecked past RANGES runs"
        );
    }

    fn held(ts_ns: u64, len: usize) -> Held {
        Held {
            link: LinkType::Ethernet,
            ts_ns,
            orig_len: len as u32,
            data: vec![0xab; len],
        }
    }

    #[test]
    fn holds_until_the_first_fragment_within_every_limit() {
        let mut t = HoldTable::new(HoldLimits {
            frames: 4,
            bytes: 1000,
            per_datagram: 3,
            per_source: 8,
            ttl_ns: 1_000,
        });
        let k = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        let other = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 3], 17, 0, 0);
        t.hold(&k, 7, held(0, 100)).unwrap();
        t.hold(&k, 7, held(10, 100)).unwrap();
        t.hold(&k, 7, held(20, 100)).unwrap();
        assert_eq!(
            t.hold(&k, 7, held(30, 100)),
            Err(HoldRefused::Full),
            "per datagram"
        );
        assert_eq!(
            t.hold(&other, 7, held(30, 901)),
            Err(HoldRefused::Full),
            "bytes"
        );
        t.hold(&other, 7, held(30, 100)).unwrap();
        assert_eq!(
            t.hold(&other, 8, held(30, 1)),
            Err(HoldRefused::Full),
            "frames"
        );
        assert_eq!((t.frames(), t.bytes()), (4, 400));
        // The first fragment of (k, 7) releases its three, in order.
        let v = t.take(&k, 7).unwrap();
        assert_eq!(v.iter().map(|h| h.ts_ns).collect::<Vec<_>>(), [0, 10, 20]);
        assert_eq!(t.take(&k, 7), None);
        assert_eq!((t.frames(), t.bytes()), (1, 100));
        // (other, 7) times out 1000 ns after it was first held.
        assert_eq!(t.expire(1_030), 0);
        assert_eq!(t.expire(1_031), 1);
        assert_eq!((t.frames(), t.bytes()), (0, 0));
        t.hold(&k, 9, held(2_000, 10)).unwrap();
        assert_eq!(t.clear(), 1);
        assert_eq!(t.take(&k, 9), None);
    }

    /// Room for everyone; 10 frames a source.
    fn quota_of_ten() -> HoldLimits {
        HoldLimits {
            frames: 100,
            bytes: 1 << 20,
            per_datagram: 4,
            per_source: 10,
            ttl_ns: 1_000,
        }
    }

    /// A flood from one source (a spoofed address) fills its quota, not
    /// the table: another source's out-of-order fragments are still held,
    /// and the quota comes back when the flood's datagrams time out.
    #[test]
    fn one_source_cannot_take_the_hold_table() {
        let mut t = HoldTable::new(quota_of_ten());
        let flood = FlowKey::v4([6, 6, 6, 6], [2, 2, 2, 2], 17, 0, 0);
        let real = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        let mut held_ok = 0;
        for id in 0..1000 {
            if t.hold(&flood, id, held(0, 10)).is_ok() {
                held_ok += 1;
            }
        }
        assert_eq!(held_ok, 10);
        assert_eq!(
            t.hold(&flood, 5000, held(0, 10)),
            Err(HoldRefused::SourceQuota)
        );
        t.hold(&real, 1, held(10, 10)).unwrap();
        assert_eq!(t.take(&real, 1).map(|v| v.len()), Some(1));
        assert_eq!(t.expire(1_001), 10);
        assert!(t.sources.is_empty(), "quotas given back");
        t.hold(&flood, 1, held(2_000, 10)).unwrap();
    }

    /// The review's poisoning: a full table, then many duplicates of one
    /// first fragment. Every other entry must still expire, and later
    /// datagrams must not evict each other.
    #[test]
    fn duplicate_first_fragments_cannot_pin_the_table() {
        let cap = 64;
        let ttl = 1_000;
        let mut t = FragTable::new(cap, cap, ttl);
        let k = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 53, 5353);
        let later = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        for id in 0..cap as u32 {
            t.first(&k, id, 0);
        }
        for n in 0..4 * cap as u64 {
            t.first(&k, 0, 1 + n % 8);
        }
        assert_eq!(t.len(), cap);
        assert!(t.order.len() <= 2 * cap, "records stay bounded");
        // Past the TTL everything has gone: nothing is pinned.
        t.expire(10 + ttl);
        assert_eq!(t.len(), 0, "every entry expires");
        // Two interleaved datagrams both resolve (the poisoned table made
        // each new first fragment evict the previous live one).
        t.first(&k, 100, 2 * ttl);
        t.first(&k, 101, 2 * ttl);
        assert_eq!(t.resolve(&later, 100, 2 * ttl + 1), Some((53, 5353)));
        assert_eq!(t.resolve(&later, 101, 2 * ttl + 1), Some((53, 5353)));
        assert_eq!(t.evicted, 0);
    }

    /// A duplicate first fragment refreshes its datagram: it is evicted
    /// last, not first.
    #[test]
    fn a_refreshed_entry_is_the_newest() {
        let mut t = FragTable::new(2, 100, 1_000);
        let k = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 53, 5353);
        let later = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        t.first(&k, 1, 0);
        t.first(&k, 2, 1);
        t.first(&k, 1, 2);
        t.first(&k, 3, 3);
        assert_eq!(t.resolve(&later, 1, 4), Some((53, 5353)));
        assert_eq!(t.resolve(&later, 2, 4), None, "2 was the oldest");
        assert_eq!(t.evicted, 1);
    }

    #[test]
    fn resolves_expires_and_stays_bounded() {
        let mut t = FragTable::new(2, 100, 1_000);
        let k1 = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 53, 5353);
        let later = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        t.first(&k1, 7, 0);
        assert_eq!(t.resolve(&later, 7, 500), Some((53, 5353)));
        assert_eq!(t.resolve(&later, 8, 500), None);
        assert_eq!(t.resolve(&later, 7, 2_000), None, "expired");
        t.first(&k1, 1, 10_000);
        t.first(&k1, 2, 10_001);
        t.first(&k1, 3, 10_002);
        assert_eq!(t.len(), 2);
        assert_eq!(t.evicted, 1);
        assert_eq!(t.resolve(&later, 1, 10_003), None, "oldest evicted");
        assert_eq!(t.resolve(&later, 3, 10_003), Some((53, 5353)));
    }

    /// A flood of first fragments from one source (an IPv4 address, or any
    /// addresses of one IPv6 /64) fills its share only: another source's
    /// first fragment is remembered and resolves its later fragments.
    #[test]
    fn one_source_cannot_push_out_the_others_first_fragments() {
        let mut t = FragTable::new(64, 8, 1_000_000);
        let real = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 53, 5353);
        t.first(&real, 7, 0);
        let mut remembered = 0;
        for id in 0..10_000u32 {
            let mut src = [0u8; 16];
            src[..8].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1]);
            src[8..12].copy_from_slice(&id.to_be_bytes()); // a new address each time
            let flood = FlowKey {
                v6: true,
                src,
                dst: [9; 16],
                proto: 17,
                sport: 1,
                dport: 2,
            };
            remembered += usize::from(t.first(&flood, id, 1));
        }
        assert_eq!(remembered, 8, "one /64 holds its share");
        assert_eq!(t.source_refused, 10_000 - 8);
        let later = FlowKey::v4([1, 1, 1, 1], [2, 2, 2, 2], 17, 0, 0);
        assert_eq!(t.resolve(&later, 7, 2), Some((53, 5353)));
        assert_eq!(t.evicted, 0);
        // Expired, the flood's entries give their share back.
        t.expire(2_000_000);
        assert!(t.sources.is_empty());
    }

    /// The hold table's quota counts an IPv6 /64 as one source: eight
    /// spoofed addresses of one /64 no longer get eight quotas.
    #[test]
    fn an_ipv6_slash64_is_one_source_for_the_hold_table() {
        let mut t = HoldTable::new(quota_of_ten());
        let from = |host: u8| FlowKey {
            v6: true,
            src: [0x20, 1, 0xd, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, host],
            dst: [9; 16],
            proto: 17,
            sport: 0,
            dport: 0,
        };
        let held_ok = (0..100u8)
            .filter(|&h| t.hold(&from(h), u32::from(h), held(0, 10)).is_ok())
            .count();
        assert_eq!(held_ok, 10);
        assert_eq!(
            t.hold(&from(200), 200, held(0, 10)),
            Err(HoldRefused::SourceQuota)
        );
    }
}
