//! A worker's side of flow export (`cfdp-export`): every IP frame the
//! worker decodes is noted with its own 5-tuple (the key `cfdp replay
//! --flows` counts it under), added to the worker's flow cache once the
//! burst's verdicts are known, and the records the cache finishes are
//! handed to the exporter's thread without waiting.

use cfdp_conntrack::state::tcp::{FIN, RST};
use cfdp_export::cache::{Observed, Place};
use cfdp_export::{CacheSettings, EndReason, ExportSender, FlowCache, Forwarding};
use cfdp_packet::prefetch::prefetch_read;
use cfdp_packet::{transport, Transport};
use cfdp_rules::FlowKey;

use crate::frame::{PacketRef, Verdict};

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
}

/// A worker's flow cache and the burst's frames noted for it.
#[derive(Debug)]
pub(crate) struct ExportState {
    cache: FlowCache,
    sender: ExportSender,
    clock_base_ns: u64,
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

    /// The burst's verdicts are in: its noted frames into the cache, and
    /// what the cache finished to the exporter. A held fragment's verdict
    /// here is the drop of its original (its copy goes out later, with
    /// its datagram's verdict): its flow's status may say dropped.
    pub(crate) fn after_burst(&mut self, pkts: &[PacketRef<'_>], verdicts: &[Verdict]) {
        for &(i, at, key, len) in &self.noted {
            // A TCP segment with FIN or RST ends its flow's record (read
            // again here: the fast decode keeps no flags).
            let ends = key.proto == cfdp_rules::proto::TCP
                && matches!(
                    transport(pkts[i].link, pkts[i].data),
                    Transport::Tcp(seg) if seg.flags & (FIN | RST) != 0
                );
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
                    ends,
                },
            );
        }
        self.noted.clear();
        self.send();
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

    /// A TCP segment with FIN or RST ends its flow's record there (end of
    /// flow), sent at once; the segments after it start a new one.
    #[test]
    fn fin_and_rst_end_the_flows_record() {
        // The exporter sends to a socket nobody reads; its count of
        // records handed over is what is checked.
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let x = Exporter::start(vec![sink.local_addr().unwrap()], 0).unwrap();
        let mut s = ExportState::new(FlowExport {
            cache: CacheSettings::default(),
            sender: x.sender(),
            clock_base_ns: 0,
        });
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
            })
            .collect();
        let verdicts = [Verdict::Forward; 5];
        // One burst of two: the FIN ends the record, none is left.
        for (i, p) in pkts[..2].iter().enumerate() {
            s.note(i, key, p.orig_len);
        }
        s.after_burst(&pkts[..2], &verdicts);
        assert!(s.cache.is_empty(), "the FIN's flow is still cached");
        // Then the ACK after it starts a record, the RST ends it, and the
        // last segment starts a third, sent at the end of the run.
        for (i, p) in pkts[2..].iter().enumerate() {
            s.note(i, key, p.orig_len);
        }
        s.after_burst(&pkts[2..], &verdicts);
        assert_eq!(s.cache.len(), 1);
        s.finish();
        drop(s);
        let c = x.finish();
        assert_eq!(c.records.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
}
