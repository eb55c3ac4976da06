//! A worker's side of flow export (`cfdp-export`): every IP frame the
//! worker decodes is noted with its own 5-tuple (the key `cfdp replay
//! --flows` counts it under), added to the worker's flow cache once the
//! burst's verdicts are known, and the records the cache finishes are
//! handed to the exporter's thread without waiting.

use cfdp_export::cache::Observed;
use cfdp_export::{CacheSettings, EndReason, ExportSender, FlowCache, Forwarding};
use cfdp_rules::FlowKey;

use crate::frame::{PacketRef, Verdict};

/// A worker's export options: its cache's bounds and timeouts, and the
/// exporter it sends to.
#[derive(Clone, Debug)]
pub struct FlowExport {
    pub cache: CacheSettings,
    pub sender: ExportSender,
}

/// A worker's flow cache and the burst's frames noted for it.
#[derive(Debug)]
pub(crate) struct ExportState {
    cache: FlowCache,
    sender: ExportSender,
    /// (frame index in the burst, its 5-tuple, its length), this burst.
    noted: Vec<(usize, FlowKey, u32)>,
}

impl ExportState {
    pub(crate) fn new(x: FlowExport) -> Self {
        ExportState {
            cache: FlowCache::new(x.cache),
            sender: x.sender,
            noted: Vec::with_capacity(crate::matcher::MAX_BURST),
        }
    }

    /// Frame `i` of the burst is IP, with its own 5-tuple `key`.
    #[inline]
    pub(crate) fn note(&mut self, i: usize, key: FlowKey, len: u32) {
        self.noted.push((i, key, len));
    }

    /// The burst's verdicts are in: its noted frames into the cache, and
    /// what the cache finished to the exporter. A held fragment's verdict
    /// here is the drop of its original (its copy goes out later, with
    /// its datagram's verdict): its flow's status may say dropped.
    pub(crate) fn after_burst(&mut self, pkts: &[PacketRef<'_>], verdicts: &[Verdict]) {
        for &(i, key, len) in &self.noted {
            self.cache.observe(&Observed {
                key,
                ts_ns: pkts[i].ts_ns,
                len,
                port: 0,
                forwarding: match verdicts[i] {
                    Verdict::Forward => Forwarding::Forwarded,
                    Verdict::Redirect(_) => Forwarding::Redirected,
                    Verdict::Drop => Forwarding::Dropped,
                },
                ends: false,
            });
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

    fn send(&mut self) {
        let done = self.cache.take();
        if !done.is_empty() {
            self.sender.send(done);
        }
    }

    /// The end of the worker's run: every record finished (forced end)
    /// and sent.
    pub(crate) fn finish(&mut self) {
        self.cache.flush(EndReason::Forced);
        self.send();
    }
}
