//! The worker: takes a burst of frames, and per burst decodes every frame,
//! resolves fragments, hashes each 5-tuple once, matches the burst through
//! the filters with batched prefetching lookups, applies the actions and
//! records a verdict per frame. Nothing in here allocates or locks (flow
//! accounting, optional, allocates once per new flow).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cfdp_rules::{Action, FlowKey};
use hdrhistogram::Histogram;

use crate::decode::{decode, Decoded, Frag, LinkType};
use crate::frag::FragTable;
use crate::matcher::{Matcher, MAX_BURST};
use crate::stats::{burst_histogram, LiveStats, WorkerCounters, WorkerStats, HIST_FOLD_BURSTS};
use crate::tables::{Entry, Tables};

/// What happens to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Forward out of port 0 (default route) or of the given port.
    #[default]
    Forward,
    Redirect(u16),
    Drop,
}

/// One frame of a burst, as the backend hands it over.
#[derive(Clone, Copy, Debug)]
pub struct PacketRef<'a> {
    pub link: LinkType,
    pub ts_ns: u64,
    /// Length on the wire (counted in bytes).
    pub orig_len: u32,
    pub data: &'a [u8],
}

/// Per-flow packet and byte counts (exact flow accounting).
pub type FlowTable = HashMap<FlowKey, (u64, u64)>;

/// A worker's state: its fragment table, flows, and its share of the live
/// statistics (counters, per-rule counters, histogram).
pub struct Worker {
    stats: Arc<LiveStats>,
    index: usize,
    histogram: Histogram<u64>,
    pub flows: Option<FlowTable>,
    frags: FragTable,
    sample: u32,
}

/// Fragment table size per worker and how long a first fragment is remembered.
pub const FRAG_CAPACITY: usize = 8192;
pub const FRAG_TTL_NS: u64 = 30_000_000_000;

impl Worker {
    /// Worker `index` of `stats` (which must have that many workers).
    pub fn new(stats: Arc<LiveStats>, index: usize, account_flows: bool) -> Self {
        assert!(index < stats.workers.len(), "worker {index} has no stats");
        Self {
            stats,
            index,
            histogram: burst_histogram(),
            flows: account_flows.then(|| HashMap::with_capacity(1 << 12)),
            frags: FragTable::new(FRAG_CAPACITY, FRAG_TTL_NS),
            sample: 0,
        }
    }

    /// Folds the local burst histogram into the shared one now (at the end
    /// of a run; during it, `process` does so every few hundred bursts).
    pub fn flush_histogram(&mut self) {
        let stats = Arc::clone(&self.stats);
        let mut g = stats.workers[self.index]
            .histogram
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        g.add(&self.histogram).expect("same histogram bounds");
        self.histogram.reset();
    }

    /// Processes one burst (at most [`MAX_BURST`] frames) against one copy
    /// of the tables, writing one verdict per frame.
    pub fn process(
        &mut self,
        m: &Matcher,
        t: &Tables,
        pkts: &[PacketRef<'_>],
        verdicts: &mut [Verdict],
    ) {
        let n = pkts.len();
        assert!(n <= MAX_BURST && verdicts.len() >= n);
        let start = Instant::now();
        let shared: &WorkerStats = &self.stats.workers[self.index];
        let c = &shared.counters;
        let inc = WorkerCounters::inc;
        let mut keys = [FlowKey::v4([0; 4], [0; 4], 0, 0, 0); MAX_BURST];
        let mut valid = [false; MAX_BURST];
        let mut rules: [Option<Entry>; MAX_BURST] = [None; MAX_BURST];

        // Prefetch every frame's first line before decoding (l3fwd's pattern):
        // the frames' cache misses overlap instead of adding up.
        for p in pkts {
            cfdp_filter::prefetch_read(p.data.as_ptr());
        }
        for (i, p) in pkts.iter().enumerate() {
            inc(&c.packets, 1);
            inc(&c.bytes, u64::from(p.orig_len));
            match decode(p.link, p.data) {
                Decoded::Ip(ip) => {
                    inc(if ip.key.v6 { &c.ipv6 } else { &c.ipv4 }, 1);
                    if let Some(a) = ip.anomaly {
                        inc(&c.malformed, 1);
                        inc(&c.malformed_by[a as usize], 1);
                    }
                    let mut key = ip.key;
                    match ip.frag {
                        Frag::None => {}
                        Frag::First { id } => {
                            inc(&c.fragments, 1);
                            self.frags.first(&key, id, p.ts_ns);
                        }
                        Frag::Later { id } => {
                            inc(&c.fragments, 1);
                            match self.frags.resolve(&key, id, p.ts_ns) {
                                Some((sp, dp)) => {
                                    key.sport = sp;
                                    key.dport = dp;
                                    inc(&c.fragments_resolved, 1);
                                }
                                None => inc(&c.fragments_unresolved, 1),
                            }
                        }
                    }
                    if let Some(flows) = &mut self.flows {
                        // Accounting keys on the frame's own 5-tuple.
                        let e = flows.entry(ip.key).or_insert((0, 0));
                        e.0 += 1;
                        e.1 += u64::from(p.orig_len);
                    }
                    keys[i] = key;
                    valid[i] = true;
                }
                Decoded::NonIp(kind) => {
                    inc(&c.non_ip, 1);
                    inc(&c.non_ip_by[kind as usize], 1);
                }
                Decoded::Malformed(r) => {
                    inc(&c.malformed, 1);
                    inc(&c.malformed_by[r as usize], 1);
                }
            }
        }

        m.match_burst(
            t,
            &keys[..n],
            &valid[..n],
            &mut rules[..n],
            c,
            &mut self.sample,
        );

        for i in 0..n {
            verdicts[i] = match rules[i] {
                None => Verdict::Forward,
                Some(r) => {
                    inc(&c.matched, 1);
                    shared.rules.add(r.slot, u64::from(pkts[i].orig_len));
                    match r.action {
                        Action::Drop => Verdict::Drop,
                        Action::Allow => {
                            inc(&c.allowed, 1);
                            Verdict::Forward
                        }
                        Action::Count => {
                            inc(&c.counted, 1);
                            Verdict::Forward
                        }
                        Action::Redirect(port) => Verdict::Redirect(port),
                    }
                }
            };
            match verdicts[i] {
                Verdict::Drop => inc(&c.dropped, 1),
                Verdict::Forward => inc(&c.forwarded, 1),
                Verdict::Redirect(_) => {
                    inc(&c.forwarded, 1);
                    inc(&c.redirected, 1);
                }
            }
        }
        let bursts = c.bursts.load(std::sync::atomic::Ordering::Relaxed) + 1;
        inc(&c.bursts, 1);
        self.histogram
            .saturating_record(start.elapsed().as_nanos() as u64);
        if bursts % HIST_FOLD_BURSTS == 0 {
            if let Ok(mut g) = shared.histogram.try_lock() {
                g.add(&self.histogram).expect("same histogram bounds");
                self.histogram.reset();
            }
        }
    }
}
