//! A worker's flow cache: a record per flow, finished when the flow is
//! idle, active too long, ended (TCP FIN or RST), or when the cache is
//! full (its oldest records first, counted), and handed out to be sent.
//!
//! Time is the packets' own (a capture's timestamps in a replay), so a
//! replay exports what a live run would have, and tests set it.

use std::collections::hash_map::Entry as Slot;
use std::collections::HashMap;

use cfdp_rules::FlowKey;

use crate::record::{EndReason, FlowRecord, Forwarding};

/// A cache's bounds and timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// Flows held at most; a new flow in a full cache first finishes the
    /// oldest sixteenth of them (by last packet), counted as early.
    pub capacity: usize,
    /// A flow with no packet for this long is finished (`flowEndReason`
    /// idle).
    pub idle_ns: u64,
    /// A flow older than this is finished and starts a new record
    /// (`flowEndReason` active timeout), so that long flows are reported
    /// while they last.
    pub active_ns: u64,
}

impl Default for CacheSettings {
    /// 65,536 flows, idle 15 s, active 30 min: the inactive and active
    /// timeouts NetFlow exporters ship with.
    fn default() -> Self {
        CacheSettings {
            capacity: 1 << 16,
            idle_ns: 15_000_000_000,
            active_ns: 1_800_000_000_000,
        }
    }
}

/// What the cache keeps of a flow besides its key.
#[derive(Clone, Copy, Debug)]
struct Entry {
    packets: u64,
    bytes: u64,
    first_ns: u64,
    last_ns: u64,
    port: u16,
    forwarding: Forwarding,
}

impl Entry {
    fn record(&self, key: FlowKey, end: EndReason) -> FlowRecord {
        FlowRecord {
            key,
            packets: self.packets,
            bytes: self.bytes,
            first_ns: self.first_ns,
            last_ns: self.last_ns,
            port: self.port,
            forwarding: self.forwarding,
            end,
        }
    }
}

/// A packet's facts for [`FlowCache::observe`].
#[derive(Clone, Copy, Debug)]
pub struct Observed {
    pub key: FlowKey,
    pub ts_ns: u64,
    /// The frame's length on the wire.
    pub len: u32,
    pub port: u16,
    pub forwarding: Forwarding,
    /// A TCP segment with FIN or RST: the flow's record ends with it.
    pub ends: bool,
}

/// One worker's flows (see the module docs).
/// The cache's map: keys hashed by rapidhash under a random seed of the
/// map's own (a flow key comes off the wire: nobody can compute offline
/// keys that collide in it). std's SipHash cost the worker ~3× the
/// packet's own cost with export on (`bench --bin flow-export`).
type Flows = HashMap<FlowKey, Entry, rapidhash::quality::RandomState>;

#[derive(Debug)]
pub struct FlowCache {
    flows: Flows,
    settings: CacheSettings,
    /// Finished records not yet taken ([`Self::take`]).
    done: Vec<FlowRecord>,
    /// Packet time at which the next sweep for timeouts is due.
    next_sweep_ns: u64,
    /// Records finished early because the cache was full.
    early: u64,
}

/// Packet time between two sweeps for timeouts.
const SWEEP_NS: u64 = 1_000_000_000;

impl FlowCache {
    pub fn new(settings: CacheSettings) -> Self {
        FlowCache {
            flows: HashMap::with_capacity_and_hasher(
                settings.capacity.min(1 << 12),
                rapidhash::quality::RandomState::new(),
            ),
            settings: CacheSettings {
                capacity: settings.capacity.max(1),
                ..settings
            },
            done: Vec::new(),
            next_sweep_ns: 0,
            early: 0,
        }
    }

    /// Flows held.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Bytes the cache's table holds (its buckets: key, record and the
    /// map's control byte each), whether full or not.
    pub fn memory_bytes(&self) -> usize {
        let per = std::mem::size_of::<(FlowKey, Entry)>() + 1;
        // The map's buckets: its capacity is 7/8 of a power of two.
        (self.flows.capacity() * 8 / 7).next_power_of_two() * per
    }

    /// Records finished early because the cache was full, so far.
    pub fn early(&self) -> u64 {
        self.early
    }

    /// Adds packet `p` to its flow's record (starting one), and finishes
    /// records whose timeouts passed by `p`'s time. One hash of the key
    /// but when a new flow meets a full cache.
    pub fn observe(&mut self, p: &Observed) {
        if p.ts_ns >= self.next_sweep_ns {
            self.sweep(p.ts_ns);
        }
        let fresh = Entry {
            packets: 1,
            bytes: u64::from(p.len),
            first_ns: p.ts_ns,
            last_ns: p.ts_ns,
            port: p.port,
            forwarding: p.forwarding,
        };
        let full = self.flows.len() >= self.settings.capacity;
        match self.flows.entry(p.key) {
            Slot::Occupied(mut o) => {
                let e = o.get_mut();
                if p.ts_ns.saturating_sub(e.first_ns) >= self.settings.active_ns {
                    self.done.push(e.record(p.key, EndReason::Active));
                    *e = fresh;
                } else {
                    e.packets += 1;
                    e.bytes += u64::from(p.len);
                    e.last_ns = e.last_ns.max(p.ts_ns);
                    e.forwarding = p.forwarding;
                }
                if p.ends {
                    let e = o.remove();
                    self.done.push(e.record(p.key, EndReason::EndOfFlow));
                }
            }
            Slot::Vacant(v) if !full => {
                if p.ends {
                    self.done.push(fresh.record(p.key, EndReason::EndOfFlow));
                } else {
                    v.insert(fresh);
                }
            }
            Slot::Vacant(_) => {
                self.evict_oldest();
                if p.ends {
                    self.done.push(fresh.record(p.key, EndReason::EndOfFlow));
                } else {
                    self.flows.insert(p.key, fresh);
                }
            }
        }
    }

    /// Finishes every record whose idle or active timeout passed at
    /// `now_ns` (called by [`Self::observe`] once a second of packet
    /// time; a worker with no packets calls it with its clock).
    pub fn sweep(&mut self, now_ns: u64) {
        self.next_sweep_ns = now_ns.saturating_add(SWEEP_NS);
        let s = self.settings;
        let done = &mut self.done;
        self.flows.retain(|k, e| {
            let end = if now_ns.saturating_sub(e.last_ns) >= s.idle_ns {
                EndReason::Idle
            } else if now_ns.saturating_sub(e.first_ns) >= s.active_ns {
                EndReason::Active
            } else {
                return true;
            };
            done.push(e.record(*k, end));
            false
        });
    }

    /// The cache is full: its oldest sixteenth (by last packet) finished
    /// now, counted as early (`flowEndReason` lack of resources).
    fn evict_oldest(&mut self) {
        let n = (self.flows.len() / 16).max(1);
        let mut lasts: Vec<u64> = self.flows.values().map(|e| e.last_ns).collect();
        let (_, &mut cut, _) = lasts.select_nth_unstable(n - 1);
        let mut left = n;
        let done = &mut self.done;
        self.flows.retain(|k, e| {
            if left == 0 || e.last_ns > cut {
                return true;
            }
            left -= 1;
            done.push(e.record(*k, EndReason::LackOfResources));
            false
        });
        self.early += (n - left) as u64;
    }

    /// Every record finished now, with `reason` (the end of a capture, a
    /// shutdown: forced end).
    pub fn flush(&mut self, reason: EndReason) {
        let done = &mut self.done;
        done.extend(self.flows.drain().map(|(k, e)| e.record(k, reason)));
    }

    /// The records finished so far, taken out.
    pub fn take(&mut self) -> Vec<FlowRecord> {
        std::mem::take(&mut self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            ends: false,
        }
    }

    const S: u64 = 1_000_000_000;

    fn settings() -> CacheSettings {
        CacheSettings {
            capacity: 64,
            idle_ns: 15 * S,
            active_ns: 60 * S,
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

    /// A full cache finishes its oldest sixteenth early, counted, and
    /// every packet is in exactly one record.
    #[test]
    fn a_full_cache_exports_its_oldest_records_early() {
        let mut c = FlowCache::new(settings());
        for i in 0..200u32 {
            c.observe(&packet(i, S + u64::from(i)));
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
        // The oldest went first: every early record is older than every
        // record still held at the flush.
        let newest_early = r
            .iter()
            .filter(|r| r.end == EndReason::LackOfResources)
            .map(|r| r.last_ns)
            .max();
        let oldest_kept = r
            .iter()
            .filter(|r| r.end == EndReason::Forced)
            .map(|r| r.last_ns)
            .min();
        assert!(newest_early < oldest_kept);
    }

    /// A FIN or RST ends its flow's record at once.
    #[test]
    fn a_tcp_end_finishes_the_record() {
        let mut c = FlowCache::new(settings());
        c.observe(&packet(1, S));
        c.observe(&Observed {
            ends: true,
            ..packet(1, 2 * S)
        });
        let r = c.take();
        assert_eq!(
            (r.len(), r[0].packets, r[0].end),
            (1, 2, EndReason::EndOfFlow)
        );
        assert!(c.is_empty());
    }
}
