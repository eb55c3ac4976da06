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

/// Finished records a worker gathers before it hands them to the
/// exporter (a batch a burst, each a vector through the exporter's
/// queue, cost a sampled miss ~0.9 µs: `flow-export`, 1 in 100)…
const SEND_BATCH: usize = 64;
/// …or once the first of them has waited this long in packet time.
const SEND_WAIT_NS: u64 = 100_000_000;

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
    /// (frame index in the burst, its record's place, its 5-tuple, its
    /// length), this burst.
    noted: Vec<(usize, Place, FlowKey, u32)>,
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
        }
    }

    /// Frame `i` of the burst is IP, with its own 5-tuple `key`. Its
    /// flow's set in the cache is fetched now, while the burst is matched,
    /// so that `after_burst` finds it in cache (l3fwd's prefetch, for the
    /// flow cache: a cache of a million flows is 64 MB).
    #[inline]
    pub(crate) fn note(&mut self, i: usize, key: FlowKey, len: u32) {
        let at = self.cache.place(&key);
        let set = self.cache.address(at);
        for line in 0..cfdp_export::cache::WAYS {
            prefetch_read(set.wrapping_add(line * 64));
        }
        self.noted.push((i, at, key, len));
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
    /// counting from there.
    pub(crate) fn burst_done(&mut self, n: usize, next: usize) {
        self.skip = next - n;
    }

    /// The burst's verdicts are in: its noted frames into the cache, and
    /// what the cache finished to the exporter. A held fragment's verdict
    /// here is the drop of its original (its copy goes out later, with
    /// its datagram's verdict): its flow's status may say dropped.
    /// `answers`: a bit for each frame that answers its connection's
    /// opener by the reversed 5-tuple, `matched` each frame's matched
    /// 5-tuple: an answer whose own 5-tuple is the one matched is counted
    /// in the opener's record when the cache makes biflow records (a later
    /// fragment, matched by its datagram's ports, keeps a record of its
    /// own, as `cfdp replay --flows` counts it).
    pub(crate) fn after_burst(
        &mut self,
        pkts: &[PacketRef<'_>],
        verdicts: &[Verdict],
        answers: u32,
        matched: &[FlowKey],
    ) {
        for &(i, at, key, len) in &self.noted {
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
                    reply: answers >> i & 1 != 0 && matched[i] == key,
                },
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

    /// Whether the cache makes biflow records (the worker then says which
    /// frames are answers).
    pub(crate) fn biflow(&self) -> bool {
        self.cache.biflow()
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
        s.after_burst(&pkts[..2], &verdicts, 0, &[]);
        assert!(s.cache.is_empty(), "the FIN's flow is still cached");
        // Then the ACK after it starts a record, the RST ends it, and the
        // last segment starts a third, sent at the end of the run.
        for (i, p) in pkts[2..].iter().enumerate() {
            s.note(i, key, p.orig_len);
        }
        s.after_burst(&pkts[2..], &verdicts, 0, &[]);
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
            s.after_burst(&pkts[part.clone()], &verdicts[part], 0, &[]);
        }
        s.cache.flush(EndReason::Forced);
        let r = s.cache.take();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].packets, r[0].bytes), (4, 100 + 103 + 106 + 109));
        assert_eq!((r[0].first_ns, r[0].last_ns), (1_000_000, 10_000_000));
    }
}
