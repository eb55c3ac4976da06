//! Fragments: later fragments of a datagram get the ports of its first
//! fragment, so port rules apply to every fragment (a drop rule on a port
//! that lets later fragments through would be a security hole).
//!
//! * [`FragTable`] remembers the ports of first fragments. Bounded and
//!   allocation-free after construction: at most `capacity` datagrams, each
//!   for `ttl` of the backend's clock; when full, the oldest entry is
//!   forgotten (and counted).
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

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FragId {
    v6: bool,
    src: [u8; 16],
    dst: [u8; 16],
    proto: u8,
    id: u32,
}

impl FragId {
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

pub struct FragTable {
    map: HashMap<FragId, (u16, u16, u64)>,
    order: VecDeque<(FragId, u64)>,
    capacity: usize,
    ttl_ns: u64,
    pub evicted: u64,
}

impl FragTable {
    pub fn new(capacity: usize, ttl_ns: u64) -> Self {
        let capacity = capacity.max(1);
        Self {
            map: HashMap::with_capacity(capacity),
            order: VecDeque::with_capacity(capacity),
            capacity,
            ttl_ns,
            evicted: 0,
        }
    }

    /// Remembers the ports of a first fragment seen at time `now_ns`.
    pub fn first(&mut self, k: &FlowKey, id: u32, now_ns: u64) {
        self.expire(now_ns);
        let fid = FragId::of(k, id);
        if self.map.len() >= self.capacity && !self.map.contains_key(&fid) {
            self.evict_oldest();
        }
        self.map.insert(fid, (k.sport, k.dport, now_ns));
        if self.order.len() == self.capacity {
            // Stale order entries (replaced or expired keys) make room first.
            self.order.pop_front();
        }
        self.order.push_back((fid, now_ns));
    }

    /// Ports of the datagram a later fragment belongs to, if its first
    /// fragment was seen and has not expired.
    pub fn resolve(&mut self, k: &FlowKey, id: u32, now_ns: u64) -> Option<(u16, u16)> {
        let fid = FragId::of(k, id);
        match self.map.get(&fid) {
            Some(&(sp, dp, t)) if now_ns.saturating_sub(t) <= self.ttl_ns => Some((sp, dp)),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forgets entries older than the TTL at `now_ns`.
    pub fn expire(&mut self, now_ns: u64) {
        while let Some(&(fid, t)) = self.order.front() {
            if now_ns.saturating_sub(t) <= self.ttl_ns {
                break;
            }
            self.order.pop_front();
            if self.map.get(&fid).is_some_and(|e| e.2 == t) {
                self.map.remove(&fid);
            }
        }
    }

    fn evict_oldest(&mut self) {
        while let Some((fid, t)) = self.order.pop_front() {
            if self.map.get(&fid).is_some_and(|e| e.2 == t) {
                self.map.remove(&fid);
                self.evicted += 1;
                return;
            }
        }
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
    /// How long a datagram's fragments wait for the first one.
    pub ttl_ns: u64,
}

/// Why a fragment was not held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldRefused {
    /// Over a frame, byte or per-datagram limit.
    Full,
}

/// Later fragments waiting for their first fragment (see the module docs).
/// Copies are allocated only on this path: out-of-order fragments.
pub struct HoldTable {
    map: HashMap<FragId, (u64, Vec<Held>)>,
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
        let ts = frame.ts_ns;
        let e = self
            .map
            .entry(FragId::of(k, id))
            .or_insert_with(|| (ts, Vec::new()));
        if e.1.len() >= l.per_datagram {
            return Err(HoldRefused::Full);
        }
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
        self.map.retain(|_, (first, v)| {
            if due(*first) {
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

    #[test]
    fn resolves_expires_and_stays_bounded() {
        let mut t = FragTable::new(2, 1_000);
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
}
