//! A worker's side of flow export (`cfdp-export`): every IP frame the
//! worker decodes is noted with its own 5-tuple (the key `cfdp replay
//! --flows` counts it under), added to the worker's flow cache once the
//! burst's verdicts are known, and the records the cache finishes are
//! handed to the exporter's thread without waiting.

use cfdp_conntrack::state::tcp::{FIN, RST};
use cfdp_export::cache::{Close, Observed, Place};
use cfdp_export::{CacheSettings, EndReason, ExportSender, FlowCache, Forwarding};
use cfdp_packet::prefetch::prefetch_read;
use cfdp_packet::{transport, Transport};
use cfdp_rules::FlowKey;

use crate::frame::{PacketRef, Verdict};
use crate::stats::SlotCounters;
use crate::tables::RuleRef;
use crate::track::Decided;
use cfdp_conntrack::ConnTable;

/// Finished records a worker gathers before it hands them to the
/// exporter (a batch a burst, each a vector through the exporter's
/// queue, cost a sampled miss ~0.9 µs: `flow-export`, 1 in 100)…
const SEND_BATCH: usize = 64;
/// …or once the first of them has waited this long in packet time.
const SEND_WAIT_NS: u64 = 100_000_000;

/// What decided a burst's frames, a frame each: its connection (if one
/// did), its rule (if it was matched), and the 5-tuple it was matched by
/// (a later fragment's is its datagram's, not its own); and the table of
/// those connections.
pub(crate) struct Judged<'a> {
    pub(crate) decided: &'a [Option<Decided>],
    pub(crate) rules: &'a [Option<RuleRef>],
    pub(crate) matched: &'a [FlowKey],
    pub(crate) table: Option<&'a ConnTable>,
    /// The frames that opened a connection, a bit each.
    pub(crate) opens: u32,
}

impl Judged<'_> {
    /// Whether frame `i`, of own 5-tuple `own`, answers its connection's
    /// opener by the reversed 5-tuple (a later fragment, matched by its
    /// datagram's ports, keeps a record of its own, as `cfdp replay
    /// --flows` counts it).
    fn answer(&self, i: usize, own: &FlowKey) -> bool {
        matches!(
            self.decided[i],
            Some(Decided::Established { answer: true, .. })
        ) && self.matched[i] == *own
    }

    /// The slot of the rule that decided frame `i`: the one that opened
    /// the connection that decided it — looked up again by the 5-tuple
    /// (asked once a record, when a frame starts one; an ICMP echo or
    /// error, keyed otherwise, names none) — or else the one it matched.
    /// (A frame whose connection an earlier frame of its burst opened was
    /// matched too: its connection decided it, not that match.)
    fn slot(&self, i: usize) -> Option<u32> {
        match (self.decided[i], self.table) {
            (Some(_), Some(t)) => t.peek(&self.matched[i]).map(|h| h.slot),
            (Some(_), None) => None,
            (None, _) => self.rules[i].map(|r| r.slot),
        }
    }
}

/// What a TCP segment's flags say of its flow's end.
fn tcp_close(p: &PacketRef<'_>) -> Close {
    match transport(p.link, p.data) {
        Transport::Tcp(seg) if seg.flags & RST != 0 => Close::Reset,
        Transport::Tcp(seg) if seg.flags & FIN != 0 => Close::Fin,
        _ => Close::No,
    }
}

/// A worker's export options: its cache's bounds and timeouts, and the
/// exporter it sends to.
#[derive(Clone, Debug)]
pub struct FlowExport {
    pub cache: CacheSettings,
    pub sender: ExportSender,
    /// The Unix time, in ns, of packet time 0: 0 where packet times are
    /// Unix times already (a capture's), the run's start where the
    /// backend's clock starts at 0 (DPDK's). Records carry Unix times.
    pub clock_base_ns: u64,
    /// 1 in this many of the frames the worker receives goes to its cache
    /// (1: every frame; a frame taken that is not IP is not exported); the
    /// exporter states the rate (`[ipfix] sampling`).
    pub sampling: u32,
}

/// A worker's flow cache and the burst's frames noted for it.
#[derive(Debug)]
pub(crate) struct ExportState {
    cache: FlowCache,
    sender: ExportSender,
    clock_base_ns: u64,
    /// 1 in `sampling` frames is taken (systematic count-based
    /// selection over every frame the worker receives): the next one
    /// after `skip` more.
    sampling: u32,
    skip: usize,
    /// The packet time the oldest record waiting to be sent finished by.
    waiting_since: Option<u64>,
    /// (frame index in the burst, its 5-tuple, its length), this burst.
    noted: Vec<(usize, FlowKey, u32)>,
    /// Each noted frame's place in the cache (found once the burst is
    /// decoded).
    places: Vec<Place>,
}

impl ExportState {
    pub(crate) fn new(x: FlowExport) -> Self {
        ExportState {
            cache: FlowCache::new(x.cache),
            sender: x.sender,
            clock_base_ns: x.clock_base_ns,
            sampling: x.sampling.max(1),
            skip: 0,
            waiting_since: None,
            noted: Vec::with_capacity(crate::matcher::MAX_BURST),
            places: Vec::with_capacity(crate::matcher::MAX_BURST),
        }
    }

    /// Frame `i` of the burst is IP, with its own 5-tuple `key`: noted,
    /// its place in the cache found after the decode ([`Self::burst_done`]).
    /// Not hashed here: the key was stored a moment ago by the decode in
    /// narrower pieces than the hash reads it in, and a load that spans
    /// several stores still in flight waits for them (`perf` had ~25 % of
    /// the export's cost on the first load of the key).
    #[inline]
    pub(crate) fn note(&mut self, i: usize, key: FlowKey, len: u32) {
        self.noted.push((i, key, len));
    }

    /// The index in the next burst of its first frame the sampling takes
    /// (a frame taken that is not IP is not exported).
    pub(crate) fn first_taken(&self) -> usize {
        self.skip
    }

    /// Frames between two taken (1: every frame).
    pub(crate) fn every(&self) -> usize {
        self.sampling as usize
    }

    /// A burst of `n` frames is decoded; `next` is the index its next
    /// taken frame would have had (at least `n`): the next burst starts
    /// counting from there. Finds the noted frames' places in the cache
    /// (and fetches them) for [`Self::after_burst`].
    pub(crate) fn burst_done(&mut self, n: usize, next: usize) {
        self.skip = next - n;
        self.find_places();
    }

    /// Each noted flow's set in the cache, fetched now, while the burst is
    /// matched, so that `after_burst` finds it in cache (l3fwd's prefetch,
    /// for the flow cache: a cache of a million flows is 64 MB).
    fn find_places(&mut self) {
        self.places.clear();
        for (_, key, _) in &self.noted {
            let at = self.cache.place(key);
            let set = self.cache.address(at);
            for line in 0..cfdp_export::cache::WAYS {
                prefetch_read(set.wrapping_add(line * 64));
            }
            if let Some(side) = self.cache.side_address(at) {
                prefetch_read(side);
            }
            self.places.push(at);
        }
    }

    /// The burst's verdicts are in: its noted frames into the cache, and
    /// what the cache finished to the exporter. A held fragment's verdict
    /// here is the drop of its original (its copy goes out later, with
    /// its datagram's verdict): its flow's status may say dropped.
    /// `judged`: what decided each frame (the connection a biflow record
    /// counts an answer with, the rule a record names: `names` gives a
    /// slot's rule id).
    pub(crate) fn after_burst(
        &mut self,
        pkts: &[PacketRef<'_>],
        verdicts: &[Verdict],
        judged: &Judged<'_>,
        names: &SlotCounters,
    ) {
        let biflow = self.cache.biflow();
        if self.places.len() != self.noted.len() {
            // Noted since the burst's places were found (none is lost).
            self.find_places();
        }
        for (&(i, key, len), &at) in self.noted.iter().zip(&self.places) {
            // A TCP segment's FIN or RST (read again here: the fast decode
            // keeps no flags).
            let close = if key.proto == cfdp_rules::proto::TCP {
                tcp_close(&pkts[i])
            } else {
                Close::No
            };
            self.cache.observe_at(
                at,
                &Observed {
                    key,
                    ts_ns: pkts[i].ts_ns,
                    len,
                    port: 0,
                    forwarding: match verdicts[i] {
                        Verdict::Forward => Forwarding::Forwarded,
                        Verdict::Redirect(_) => Forwarding::Redirected,
                        Verdict::Drop => Forwarding::Dropped,
                    },
                    close,
                    reply: biflow && judged.answer(i, &key),
                    opens: judged.opens >> i & 1 != 0,
                },
                || judged.slot(i).and_then(|slot| names.rule(slot)),
            );
        }
        self.noted.clear();
        let now = pkts.last().map_or(0, |p| p.ts_ns);
        let waiting = self.cache.finished();
        if waiting == 0 {
            return;
        }
        let since = *self.waiting_since.get_or_insert(now);
        if waiting >= SEND_BATCH || now.saturating_sub(since) >= SEND_WAIT_NS {
            self.send();
        }
    }

    /// The cache's flows and table bytes.
    pub(crate) fn footprint(&self) -> (usize, usize) {
        (self.cache.len(), self.cache.memory_bytes())
    }

    /// Records finished early so far (a full cache).
    pub(crate) fn early(&self) -> u64 {
        self.cache.early()
    }

    /// No burst, the backend's clock at `now_ns`: the records the sweep
    /// finishes by then go out (a quiet link's flows end on time).
    pub(crate) fn idle(&mut self, now_ns: u64) {
        self.cache.tick(now_ns);
        self.send();
    }

    fn send(&mut self) {
        self.waiting_since = None;
        let mut done = self.cache.take();
        if done.is_empty() {
            return;
        }
        if self.clock_base_ns != 0 {
            for r in &mut done {
                r.first_ns += self.clock_base_ns;
                r.last_ns += self.clock_base_ns;
            }
        }
        self.sender.send(done);
    }

    /// The end of the worker's run: every record finished (forced end)
    /// and sent.
    pub(crate) fn finish(&mut self) {
        self.cache.flush(EndReason::Forced);
        self.send();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::MAX_BURST;
    use cfdp_export::Exporter;
    use cfdp_packet::LinkType;
    use etherparse::PacketBuilder;

    fn tcp(flags: u8) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1, 1024);
        let b = if flags & FIN != 0 { b.fin() } else { b };
        let b = if flags & RST != 0 { b.rst() } else { b };
        let mut out = Vec::new();
        b.write(&mut out, &[]).unwrap();
        out
    }

    /// `n` frames of `frame`'s bytes, 60 bytes on the wire, at 1 µs.
    fn copies(frame: &[u8], n: usize) -> Vec<PacketRef<'_>> {
        (0..n)
            .map(|_| PacketRef {
                link: LinkType::Ethernet,
                ts_ns: 1_000,
                orig_len: 60,
                data: frame,
                l4_vouched: false,
            })
            .collect()
    }

    /// A burst in which nothing was decided by a connection or a rule,
    /// its frames matched as `matched` says.
    fn undecided(matched: &[FlowKey]) -> Judged<'_> {
        Judged {
            decided: &[None; MAX_BURST],
            rules: &[None; MAX_BURST],
            matched,
            table: None,
            opens: 0,
        }
    }

    /// A worker's export state taking 1 in `sampling` frames, sending to
    /// an exporter whose collector (the socket returned) nobody reads.
    fn state(sampling: u32) -> (std::net::UdpSocket, Exporter, ExportState) {
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let x = Exporter::start(vec![sink.local_addr().unwrap()], 0).unwrap();
        let s = ExportState::new(FlowExport {
            cache: CacheSettings::default(),
            sender: x.sender(),
            clock_base_ns: 0,
            sampling,
        });
        (sink, x, s)
    }

    /// A TCP segment with FIN or RST ends its flow's record there (end of
    /// flow), finished at once; the segments after it start a new one.
    #[test]
    fn fin_and_rst_end_the_flows_record() {
        // The exporter's count of records handed over is what is checked.
        let (_sink, x, mut s) = state(1);
        let key = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40000, 80);
        let matched = [key; MAX_BURST];
        let frames = [tcp(0), tcp(FIN), tcp(0), tcp(RST), tcp(0)];
        let pkts: Vec<PacketRef<'_>> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| PacketRef {
                link: LinkType::Ethernet,
                ts_ns: 1_000 + i as u64,
                orig_len: f.len() as u32,
                data: f,
                l4_vouched: false,
            })
            .collect();
        let verdicts = [Verdict::Forward; 5];
        // One burst of two: the FIN ends the record, none is left.
        for (i, p) in pkts[..2].iter().enumerate() {
            s.note(i, key, p.orig_len);
        }
        s.burst_done(2, 2);
        s.after_burst(
            &pkts[..2],
            &verdicts,
            &undecided(&matched),
            &SlotCounters::new(1),
        );
        assert!(s.cache.is_empty(), "the FIN's flow is still cached");
        // Then the ACK after it starts a record, the RST ends it, and the
        // last segment starts a third, sent at the end of the run.
        for (i, p) in pkts[2..].iter().enumerate() {
            s.note(i, key, p.orig_len);
        }
        s.burst_done(3, 3);
        s.after_burst(
            &pkts[2..],
            &verdicts,
            &undecided(&matched),
            &SlotCounters::new(1),
        );
        assert_eq!(s.cache.len(), 1);
        s.finish();
        drop(s);
        let c = x.finish();
        assert_eq!(c.records.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    /// 1 in N: the first frame of the worker and every Nth after it go to
    /// the cache, the others nowhere — across bursts (the count goes on),
    /// as the worker's decode loop asks (`first_taken`, `every`,
    /// `burst_done`).
    #[test]
    fn sampling_takes_the_first_frame_and_every_nth_after_it() {
        let (_sink, _x, mut s) = state(3);
        let key = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40000, 80);
        let matched = [key; MAX_BURST];
        let frame = tcp(0);
        let pkts: Vec<PacketRef<'_>> = (0..10)
            .map(|i| PacketRef {
                link: LinkType::Ethernet,
                ts_ns: (1 + i) * 1_000_000,
                orig_len: 100 + i as u32,
                data: &frame,
                l4_vouched: false,
            })
            .collect();
        let verdicts = [Verdict::Forward; 10];
        // Bursts of 4, 4 and 2: frames 0, 3, 6 and 9 are taken.
        for part in [0..4, 4..8, 8..10] {
            let mut next = s.first_taken();
            for i in 0..part.len() {
                if i == next {
                    next += s.every();
                    s.note(i, key, pkts[part.start + i].orig_len);
                }
            }
            s.burst_done(part.len(), next);
            s.after_burst(
                &pkts[part.clone()],
                &verdicts[part],
                &undecided(&matched),
                &SlotCounters::new(1),
            );
        }
        s.cache.flush(EndReason::Forced);
        let r = s.cache.take();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].packets, r[0].bytes), (4, 100 + 103 + 106 + 109));
        assert_eq!((r[0].first_ns, r[0].last_ns), (1_000_000, 10_000_000));
    }

    /// The rule a record names: the one the packet matched, or the one
    /// that opened the connection that decided it, by the id its slot was
    /// handed to; with biflow records, an answer's counts go to its
    /// initiator's record (matched by the datagram's 5-tuple only).
    #[test]
    fn a_record_names_the_rule_that_decided_it() {
        use cfdp_rules::{Action, Allowing};
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let x = Exporter::start(vec![sink.local_addr().unwrap()], 0).unwrap();
        let mut s = ExportState::new(FlowExport {
            cache: CacheSettings {
                rules: true,
                biflow: true,
                ..CacheSettings::default()
            },
            sender: x.sender(),
            clock_base_ns: 0,
            sampling: 1,
        });
        let names = SlotCounters::new(16);
        assert!(names.ensure(5, 77) && names.ensure(6, 88));
        let frame = tcp(0);
        let a = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40000, 80);
        let b = FlowKey::v4([10, 0, 0, 3], [10, 0, 0, 4], 17, 5000, 53);
        // Frame 0: flow a, matched rule slot 6; frame 1: b's answer,
        // decided by b's connection.
        let keys = [a, b.reply()];
        let pkts = copies(&frame, keys.len());
        for (i, k) in keys.iter().enumerate() {
            s.note(i, *k, 60);
        }
        // b's connection, opened by the rule in slot 5.
        let table =
            ConnTable::new(64, Default::default(), cfdp_rules::HashSecret::from_seed(1)).unwrap();
        let opened = table.open(&b, cfdp_conntrack::table::L4::None, 5, Action::Allow, 60, 1);
        assert!(opened.is_ok());
        let judged = Judged {
            decided: &[
                None,
                Some(Decided::Established {
                    allowing: Allowing::Allow,
                    answer: true,
                }),
            ],
            rules: &[
                Some(RuleRef {
                    action: Action::Allow,
                    slot: 6,
                }),
                // Matched too (its connection opened earlier in the
                // burst): the connection decided it.
                Some(RuleRef {
                    action: Action::Drop,
                    slot: 6,
                }),
            ],
            matched: &keys,
            table: Some(&table),
            opens: 0,
        };
        s.burst_done(2, 2);
        s.after_burst(&pkts, &[Verdict::Forward; 2], &judged, &names);
        s.cache.flush(EndReason::Forced);
        let mut r = s.cache.take();
        r.sort_by_key(|r| r.key.src);
        let got: Vec<_> = r
            .iter()
            .map(|r| (r.key, r.packets, r.reverse.map(|c| c.packets), r.rule))
            .collect();
        assert_eq!(got, [(a, 1, None, Some(88)), (b, 0, Some(1), Some(77))]);
    }

    /// Frames noted after the burst's places were found (or with none
    /// found) still reach the cache: `after_burst` finds what is missing.
    #[test]
    fn frames_noted_without_their_places_are_not_lost() {
        let (_sink, _x, mut s) = state(1);
        let key = FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 5000, 53);
        let frame = tcp(0);
        let pkts = copies(&frame, 2);
        let matched = [key; MAX_BURST];
        s.note(0, key, 60);
        s.burst_done(1, 1);
        s.note(1, key, 60);
        s.after_burst(
            &pkts,
            &[Verdict::Forward; 2],
            &undecided(&matched),
            &SlotCounters::new(1),
        );
        s.cache.flush(EndReason::Forced);
        let records = s.cache.take();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].packets, 2);
    }
}
