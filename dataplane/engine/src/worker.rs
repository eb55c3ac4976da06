//! The worker: takes a burst of frames, and per burst decodes every frame,
//! resolves fragments, hashes each 5-tuple once, matches the burst through
//! the filters with batched prefetching lookups, applies the actions and
//! records a verdict per frame. Nothing in here allocates or locks (flow
//! accounting, optional, allocates once per new flow; a later fragment
//! that arrives before its first is copied into the hold table).
//!
//! Fragments: a later fragment takes the ports its first fragment left in
//! the fragment table. One that arrives first is held (a copy; the backend
//! frees the original), and when its first fragment comes, the held frames
//! get the first fragment's verdict and are handed back to the backend
//! ([`Worker::released`]) to leave after the burst. Held fragments whose
//! first fragment does not come within [`HOLD_LIMITS`]`.ttl_ns`, or that do
//! not fit, are dropped and counted (`fragments_timed_out`,
//! `fragments_overflow`).
//!
//! Counters are kept in plain integers during a burst and published to the
//! shared statistics once at its end (see `stats`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cfdp_conntrack::table::Probe;
use cfdp_conntrack::ConnTable;
use cfdp_packet::frag::{FragTable, Held, HoldLimits, HoldTable};
use cfdp_packet::prefetch::prefetch_read;
use cfdp_packet::{decode, decode_fast, Decoded};
use cfdp_rules::FlowKey;
use hdrhistogram::Histogram;
use left_right::ReadHandleFactory;

use crate::export::{ExportState, FlowExport, Judged};
use crate::judge::{Burst, Judge};
use crate::matcher::{match_burst, MatchCtx, Mode, MAX_BURST};
use crate::stages::{Laps, Stage, SAMPLE};
use crate::stats::{burst_histogram, LiveStats, LocalCounters, HIST_FOLD_INTERVAL};
use crate::tables::{RuleRef, Tables};
use crate::track::{self, Decided};

mod fragments;

pub use crate::frame::{PacketRef, Released, Verdict};

/// Per-flow packet and byte counts (exact flow accounting).
pub type FlowTable = HashMap<FlowKey, (u64, u64)>;

/// What every worker of a data plane shares: the matching mode, read
/// access to the published tables, and the live statistics they write.
#[derive(Clone)]
pub struct WorkerContext {
    pub mode: Mode,
    pub readers: ReadHandleFactory<Tables>,
    pub stats: Arc<LiveStats>,
    /// The connections of stateful rules, shared by every worker; `None`:
    /// a stateful rule acts as its plain action.
    pub conntrack: Option<Arc<ConnTable>>,
}

/// Per-worker options of a run.
#[derive(Clone, Debug, Default)]
pub struct WorkerOptions {
    /// Count packets and bytes per 5-tuple (`cfdp replay --flows`). Off in
    /// `cfdp run` and the benchmarks: nothing reads it there.
    pub account_flows: bool,
    /// Export flow records (IPFIX): a flow cache in the worker.
    pub export: Option<FlowExport>,
}

/// Fragment table size per worker and how long a first fragment is remembered.
pub const FRAG_CAPACITY: usize = 8192;
/// First fragments remembered at most per source (an IPv4 address or an
/// IPv6 /64): an eighth of the table, so a flood from one source leaves
/// the rest to everyone else.
pub const FRAG_PER_SOURCE: usize = FRAG_CAPACITY / 8;
pub const FRAG_TTL_NS: u64 = 30_000_000_000;

/// Per worker: out-of-order fragments held at most (frames, bytes, per
/// datagram) and for how long — VPP's shallow reassembly defaults are of
/// this order (1024 datagrams, 3 fragments each, 100 ms); a second covers a
/// WAN's reordering, and 4 MiB bounds the memory an attacker can pin; one
/// source address holds at most an eighth of the frames, so a spoofed flood
/// from one address leaves room for everyone else.
pub const HOLD_LIMITS: HoldLimits = HoldLimits {
    frames: 2048,
    bytes: 4 << 20,
    per_datagram: 16,
    per_source: 256,
    ttl_ns: 1_000_000_000,
};

/// Whether a rule of the burst opens connections (its packets go the
/// tracked way even while the table is empty).
fn tracked_rule(rules: &[Option<RuleRef>]) -> bool {
    rules
        .iter()
        .any(|r| r.is_some_and(|r| r.action.tracked().is_some()))
}

/// Counts frame `i` for its 5-tuple when flow accounting is on, and
/// notes it for the flow cache when `export` (flows are exported and the
/// frame is one the sampling takes). Out of line: inlined, its body in
/// the decode loop made the loop slower with both off (flow-export's
/// rate without export 0.92x).
#[inline(never)]
fn account(
    flows: &mut Option<FlowTable>,
    export: Option<&mut ExportState>,
    i: usize,
    key: FlowKey,
    len: u32,
) {
    if let Some(flows) = flows {
        let e = flows.entry(key).or_insert((0, 0));
        e.0 += 1;
        e.1 += u64::from(len);
    }
    if let Some(x) = export {
        x.note(i, key, len);
    }
}

/// A burst's per-frame working arrays, kept by the worker between bursts.
struct Scratch {
    keys: [FlowKey; MAX_BURST],
    valid: [bool; MAX_BURST],
    /// Later fragments this burst held (true) or could not hold (false).
    held: [Option<bool>; MAX_BURST],
    rules: [Option<RuleRef>; MAX_BURST],
    /// What a tracked connection decided (set only when tracking).
    conns: [Option<Decided>; MAX_BURST],
    /// Each key's probe of the connection table (none when it was empty).
    probes: [Probe; MAX_BURST],
    /// Whether `probes` may hold an earlier burst's probes, which must not
    /// pass for this one's: cleared once when the table is found empty,
    /// not at every burst (a 1 KB fill).
    probed: bool,
}

/// A worker's state: its fragment table, flows, running counters, and its
/// share of the live statistics (counters, per-rule counters, histogram).
pub struct Worker {
    mode: Mode,
    stats: Arc<LiveStats>,
    index: usize,
    local: LocalCounters,
    histogram: Histogram<u64>,
    flows: Option<FlowTable>,
    /// The flow cache, when flows are exported.
    export: Option<ExportState>,
    frags: FragTable,
    hold: HoldTable,
    /// Held fragments released by the current burst, per first fragment
    /// (index in the burst); kept between bursts for its capacity.
    releasing: Vec<(usize, Vec<Held>)>,
    released: Vec<Released>,
    scratch: Box<Scratch>,
    sample: u32,
    /// When the local burst histogram was last folded into the shared one.
    folded: Instant,
    /// The worker loop's one clock reading a burst: taken when a burst
    /// has been sent ([`Self::tx_done`]), or when a poll found nothing or
    /// waited ([`Self::rx_idle`]). A burst's time is from the reading
    /// before it to the one after it: its receive, processing and
    /// transmit, one clock read each (two cost ~45 ns a burst here,
    /// ~4 % of an allow-all burst).
    mark: Instant,
    conntrack: Option<Arc<ConnTable>>,
    /// The next connection-table stripe this worker sweeps, and when (in
    /// packet time) it last swept one.
    sweep_next: usize,
    swept_ns: u64,
    /// This burst's stage clock, when it is one of the timed ones.
    laps: Laps,
}

/// A worker sweeps one stripe of the connection table at most this often
/// (packet time; after a burst or when idle, so an idle poll loop does not
/// spin on the stripes' locks): expired entries also go when a packet or a
/// new connection meets them.
const SWEEP_GAP_NS: u64 = 10_000_000;

impl Worker {
    /// Worker `index` of `cx` (whose statistics must have that many
    /// workers). Counting continues from what the index already published.
    pub fn new(cx: &WorkerContext, index: usize, opts: WorkerOptions) -> Self {
        assert!(
            index < cx.stats.workers.len(),
            "worker {index} has no stats"
        );
        Self {
            mode: cx.mode,
            local: cx.stats.workers[index].counters.load(),
            stats: Arc::clone(&cx.stats),
            index,
            histogram: burst_histogram(),
            flows: opts.account_flows.then(|| HashMap::with_capacity(1 << 12)),
            export: opts.export.map(ExportState::new),
            frags: FragTable::new(FRAG_CAPACITY, FRAG_PER_SOURCE, FRAG_TTL_NS),
            hold: HoldTable::new(HOLD_LIMITS),
            releasing: Vec::new(),
            released: Vec::new(),
            scratch: Box::new(Scratch {
                keys: [FlowKey::v4([0; 4], [0; 4], 0, 0, 0); MAX_BURST],
                valid: [false; MAX_BURST],
                held: [None; MAX_BURST],
                rules: [None; MAX_BURST],
                conns: [None; MAX_BURST],
                probes: [Probe::default(); MAX_BURST],
                probed: false,
            }),
            sample: 0,
            folded: Instant::now(),
            mark: Instant::now(),
            conntrack: cx.conntrack.clone(),
            sweep_next: index,
            swept_ns: 0,
            laps: Laps::default(),
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// The flow cache's flows and bytes, when flows are exported.
    pub fn export_footprint(&self) -> Option<(usize, usize)> {
        self.export.as_ref().map(ExportState::footprint)
    }

    /// The backend is about to receive a burst: one in [`SAMPLE`] is timed
    /// stage by stage from here ([`crate::stages`]).
    #[inline]
    pub fn rx_begin(&mut self) {
        if self.local.totals.bursts.is_multiple_of(SAMPLE) {
            self.laps.start();
        }
    }

    /// The receive brought nothing (or waited): nothing is timed, and the
    /// next burst's time starts now. Also before the first receive.
    #[inline]
    pub fn rx_idle(&mut self) {
        self.laps.cancel();
        self.mark = Instant::now();
    }

    /// The backend has sent (or freed) the burst of `n` frames
    /// [`Self::process`] judged: the burst's time into the histogram, and
    /// a timed burst's stages published.
    #[inline]
    pub fn tx_done(&mut self, n: usize) {
        let now = Instant::now();
        if self.laps.on() {
            self.laps.lap_at(Stage::Tx, now);
            self.laps.finish(n, &self.stats.workers[self.index].stages);
        }
        self.histogram
            .saturating_record(now.saturating_duration_since(self.mark).as_nanos() as u64);
        self.mark = now;
        if now.saturating_duration_since(self.folded) >= HIST_FOLD_INTERVAL {
            self.fold_histogram(false);
        }
    }

    /// Called when the backend had nothing: ages the fragment tables by the
    /// backend's clock, so entries expire without traffic too.
    pub fn idle(&mut self, now_ns: u64) {
        self.frags.expire(now_ns);
        self.sweep(now_ns);
        if let Some(x) = &mut self.export {
            x.idle(now_ns);
        }
        // Bursts recorded but not yet folded show up once traffic pauses.
        if !self.histogram.is_empty() && self.folded.elapsed() >= HIST_FOLD_INTERVAL {
            self.fold_histogram(false);
        }
        let expired = self.hold.expire(now_ns);
        if expired > 0 {
            self.count_timed_out(expired);
            self.stats.workers[self.index].counters.publish(&self.local);
        }
    }

    /// Held fragments released by the last burst, with their verdicts: the
    /// backend sends them ([`crate::Backend::release`]) after the burst.
    pub fn released(&self) -> &[Released] {
        &self.released
    }

    /// Forgets the released fragments (the backend has sent them).
    pub fn clear_released(&mut self) {
        self.released.clear();
    }

    /// Sweeps the next stripe of the connection table, when the last
    /// sweep is [`SWEEP_GAP_NS`] old.
    fn sweep(&mut self, now_ns: u64) {
        let Some(t) = &self.conntrack else {
            return;
        };
        t.advance(self.index, now_ns);
        if now_ns.abs_diff(self.swept_ns) < SWEEP_GAP_NS {
            return;
        }
        self.swept_ns = now_ns;
        t.sweep_shard(self.sweep_next, now_ns);
        self.sweep_next = (self.sweep_next + 1) % t.stripes();
    }

    fn count_timed_out(&mut self, n: u64) {
        self.local.totals.fragments_timed_out += n;
        self.local.totals.dropped += n;
    }

    /// Drops what is still held (counted as timed out), folds the local
    /// burst histogram into the shared one and returns the flow table (when
    /// accounting): the end of a worker's run.
    pub fn finish(mut self) -> Option<FlowTable> {
        let held = self.hold.clear();
        if held > 0 {
            self.count_timed_out(held);
            self.stats.workers[self.index].counters.publish(&self.local);
        }
        if let Some(x) = &mut self.export {
            x.finish();
        }
        self.fold_histogram(true);
        self.flows.take()
    }

    fn fold_histogram(&mut self, wait: bool) {
        let shared = &self.stats.workers[self.index].histogram;
        let guard = if wait {
            Some(
                shared
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            )
        } else {
            shared.try_lock().ok()
        };
        if let Some(mut g) = guard {
            g.add(&self.histogram).expect("same histogram bounds");
            self.histogram.reset();
            self.folded = Instant::now();
        }
    }

    /// Processes one burst (at most [`MAX_BURST`] frames) against one copy
    /// of the tables, writing one verdict per frame.
    pub fn process(&mut self, t: &Tables, pkts: &[PacketRef<'_>], verdicts: &mut [Verdict]) {
        let n = pkts.len();
        assert!(n <= MAX_BURST && verdicts.len() >= n);
        self.laps.lap(Stage::Rx);
        // Announce the burst before its rule hits are counted: a reader that
        // loads `packets` (acquire) then per-rule counters sees every hit of
        // the packets before this burst, and no hit beyond the packets it
        // read. (The soak harness's exact accounting relies on both.)
        self.stats.workers[self.index].counters.packets.store(
            self.local.totals.packets + n as u64,
            std::sync::atomic::Ordering::Release,
        );
        if let Some(last) = pkts.last() {
            let expired = self.hold.expire(last.ts_ns);
            if expired > 0 {
                self.count_timed_out(expired);
            }
        }
        self.released.clear();
        self.decode_burst(pkts);
        self.laps.lap(Stage::Decode);
        let table = self.conntrack.as_deref();
        let looked_up = table.is_some_and(|t| {
            // Before this burst opens anything: no sweep runs ahead of it.
            if let Some(first) = pkts.first() {
                t.advance(self.index, first.ts_ns);
            }
            Self::track_burst(t, &mut self.scratch, pkts)
        });
        self.laps.lap(Stage::Track);
        // The burst's scratch arrays live in the worker: set per frame by
        // `decode_burst`, never cleared as a whole (a 1.3 KB memset a burst).
        let s = &mut *self.scratch;
        let mut cx = MatchCtx {
            mode: self.mode,
            counters: &mut self.local.totals,
            sample: &mut self.sample,
        };
        match_burst(&mut cx, t, &s.keys[..n], &s.valid[..n], &mut s.rules[..n]);
        // An empty table and no stateful rule in the burst: nothing to
        // open or find, each packet judged by its rule alone (the
        // stateless path's inline run, not the tracked one a packet).
        let tracking = table.filter(|_| looked_up || tracked_rule(&s.rules[..n]));
        self.laps.lap(Stage::Classify);
        let shared = &self.stats.workers[self.index];
        let mut judge = Judge::new(
            &mut self.local.totals,
            &shared.rules,
            // The burst's time in seconds: the loop's last reading (the
            // previous burst's end, or the poll before this one).
            self.stats.clock(self.mark),
        );
        let facts = Burst {
            pkts,
            keys: &s.keys[..n],
            held: &s.held[..n],
            rules: &s.rules[..n],
            conns: &s.conns[..n],
            probes: &s.probes[..n],
        };
        judge.burst(tracking, &facts, verdicts);
        judge.release(&mut self.releasing, &mut self.released, &s.rules[..n]);
        judge.flush();
        judge.c.bursts += 1;
        // The burst's IP frames into the flow cache with their verdicts
        // and what decided them, when flows are exported.
        if let Some(x) = &mut self.export {
            let judged = Judged {
                decided: judge.decided(n),
                rules: &s.rules[..n],
                matched: &s.keys[..n],
                table,
                opens: judge.opens(),
            };
            x.after_burst(pkts, verdicts, &judged, &shared.rules);
            judge.c.export_early = x.early();
        }
        self.laps.lap(Stage::Act);
        shared.counters.publish(&self.local);
        if let Some(last) = pkts.last() {
            self.sweep(last.ts_ns);
        }
    }

    /// Looks each matchable packet of the burst up in the connection table
    /// (skipped while it is empty: `false`): a packet of a tracked
    /// connection is decided by it and not matched against the rules.
    fn track_burst(t: &ConnTable, s: &mut Scratch, pkts: &[PacketRef<'_>]) -> bool {
        let n = pkts.len();
        s.conns[..n].fill(None);
        if t.surely_empty() {
            if s.probed {
                s.probes.fill(Probe::default());
                s.probed = false;
            }
            return false;
        }
        s.probed = true;
        // The whole burst against the table's filter first: most packets
        // belong to no connection, and their probes overlap. A candidate
        // is then looked up from its probe (not hashed again).
        t.probe(&s.keys[..n], &mut s.probes[..n]);
        for (i, p) in pkts.iter().enumerate() {
            // An ICMP packet's connection is not keyed by its 5-tuple (an
            // echo by its identifier, an error by what it quotes).
            if s.valid[i] && track::looked_up(&s.keys[i], &s.probes[i]) {
                s.conns[i] = track::lookup(t, p, &s.keys[i], Some(&s.probes[i]));
                s.valid[i] = s.conns[i].is_none();
            }
        }
        true
    }

    /// Decodes a burst into the scratch arrays: each frame's key, whether
    /// it is matched (`valid`), and whether it was held (a later fragment
    /// before its first: `held[i] = Some(room was found)`).
    #[inline]
    fn decode_burst(&mut self, pkts: &[PacketRef<'_>]) {
        // Prefetch every frame's headers before decoding (l3fwd's
        // pattern): the frames' cache misses overlap instead of adding up.
        // Its first 64 bytes, which span two lines where the frame does
        // not start on one: a DPDK mbuf's data does, a frame in a pcap
        // buffer or on the heap mostly does not (its ports or TCP flags
        // were then a second miss, waited for in the decode).
        for p in pkts {
            let at = p.data.as_ptr();
            prefetch_read(at);
            prefetch_read(at.wrapping_add(63));
        }
        // Asked once a burst: a call a packet with the key copied into it
        // cost ~23 instructions a packet with both off (callgrind). With
        // export, `next` is the burst's next frame the sampling takes
        // (every frame without sampling): a frame not taken costs a
        // compare.
        let flows = self.flows.is_some();
        let (mut next, every) = self
            .export
            .as_ref()
            .map_or((usize::MAX, 0), |x| (x.first_taken(), x.every()));
        // The burst's counts in registers, added once after the loop: a
        // `+=` a packet on the totals in memory chains each packet's
        // update to the last one's store.
        let (mut bytes, mut v6) = (0u64, 0u64);
        let mut fast = 0u64;
        for (i, p) in pkts.iter().enumerate() {
            let taken = i == next;
            if taken {
                next += every;
            }
            bytes += u64::from(p.orig_len);
            let s = &mut *self.scratch;
            s.held[i] = None;
            s.valid[i] = false;
            // The common frame (Ethernet, IPv4 without options or IPv6
            // without extension headers, TCP/UDP, not a fragment) straight
            // into the burst: what `decode` would say.
            if let Some(key) = decode_fast(p.link, p.data) {
                fast += 1;
                v6 += u64::from(key.v6);
                if flows || taken {
                    let x = self.export.as_mut().filter(|_| taken);
                    account(&mut self.flows, x, i, key, p.orig_len);
                }
                s.keys[i] = key;
                s.valid[i] = true;
                continue;
            }
            self.decode_slow(i, p, taken);
        }
        let c = &mut self.local.totals;
        c.packets += pkts.len() as u64;
        c.bytes += bytes;
        c.ipv6 += v6;
        c.ipv4 += fast - v6;
        if let Some(x) = &mut self.export {
            x.burst_done(pkts.len(), next);
        }
    }

    /// Any frame `decode_fast` does not take: every link type, IPv6 with extension headers,
    /// options, fragments, non-IP and malformed frames.
    fn decode_slow(&mut self, i: usize, p: &PacketRef<'_>, taken: bool) {
        let l = &mut self.local;
        let c = &mut l.totals;
        match decode(p.link, p.data) {
            Decoded::Ip(ip) => {
                if ip.key.v6 {
                    c.ipv6 += 1;
                } else {
                    c.ipv4 += 1;
                }
                if let Some(a) = ip.anomaly {
                    c.malformed += 1;
                    l.malformed_by[a as usize] += 1;
                }
                let mut key = ip.key;
                let held = self.fragment(i, p, &mut key, ip.frag);
                // Accounting keys on the frame's own 5-tuple.
                let x = self.export.as_mut().filter(|_| taken);
                account(&mut self.flows, x, i, ip.key, p.orig_len);
                let s = &mut *self.scratch;
                s.keys[i] = key;
                s.held[i] = held;
                s.valid[i] = held.is_none();
            }
            Decoded::NonIp(kind) => {
                c.non_ip += 1;
                l.non_ip_by[kind as usize] += 1;
            }
            Decoded::Malformed(r) => {
                c.malformed += 1;
                l.malformed_by[r as usize] += 1;
            }
        }
    }
}
