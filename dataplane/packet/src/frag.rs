//! The fragment table: later fragments of a datagram get the ports of its
//! first fragment, so port rules apply to every fragment (a drop rule on a
//! port that lets later fragments through would be a security hole).
//!
//! Bounded and allocation-free after construction: at most `capacity`
//! datagrams are remembered, each for `ttl` of capture time; when full, the
//! oldest entry is forgotten (and counted). Later fragments whose first
//! fragment was not seen (lost, out of order, evicted) stay unresolved: the
//! worker counts them and matches them with ports 0.

use std::collections::{HashMap, VecDeque};

use cfdp_rules::FlowKey;

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

#[cfg(test)]
mod tests {
    use super::*;

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
