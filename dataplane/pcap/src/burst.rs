//! Bursts of captured frames: up to [`MAX_BURST`] frames in one buffer,
//! recycled between the reader, the workers and the writer so that nothing
//! is allocated per packet after warm-up.

use cfdp_engine::{Frames, PacketRef, Verdict, MAX_BURST};
use cfdp_packet::LinkType;

use crate::capture::Frame;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Meta {
    pub off: u32,
    pub len: u32,
    pub orig_len: u32,
    pub ts_ns: u64,
    pub link: LinkType,
}

/// A burst of frames in one buffer, with the workers' verdicts.
pub(crate) struct Burst {
    pub data: Vec<u8>,
    pub meta: Vec<Meta>,
    pub verdicts: [Verdict; MAX_BURST],
}

impl Burst {
    pub fn new() -> Self {
        Self {
            data: Vec::with_capacity(MAX_BURST * 2048),
            meta: Vec::with_capacity(MAX_BURST),
            verdicts: [Verdict::Forward; MAX_BURST],
        }
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.meta.clear();
    }

    pub fn push(&mut self, f: &Frame<'_>) {
        self.meta.push(Meta {
            off: self.data.len() as u32,
            len: f.data.len() as u32,
            orig_len: f.orig_len,
            ts_ns: f.ts_ns,
            link: f.link,
        });
        self.data.extend_from_slice(f.data);
    }

    pub fn frame(&self, i: usize) -> &[u8] {
        let m = &self.meta[i];
        &self.data[m.off as usize..(m.off + m.len) as usize]
    }
}

/// A worker's burst slot: the burst it holds between receive and transmit
/// (bursts travel boxed through the channels, so only a pointer moves).
pub(crate) struct Slot(pub Option<Box<Burst>>);

impl Frames for Slot {
    fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |b| b.meta.len())
    }

    fn packet(&self, i: usize) -> PacketRef<'_> {
        let b = self.0.as_ref().expect("a received burst");
        let m = &b.meta[i];
        PacketRef {
            link: m.link,
            ts_ns: m.ts_ns,
            orig_len: m.orig_len,
            data: b.frame(i),
            l4_vouched: false,
        }
    }
}
