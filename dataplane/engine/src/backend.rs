//! Backends and the one worker loop.
//!
//! A backend is where packets enter and leave: the pcap replay
//! (`cfdp-pcap`), DPDK ports (`cfdp-dpdk`), or frames in memory
//! ([`MemoryBackend`], for benchmarks and tests). Every backend runs the
//! same loop, [`run_worker`], DPDK l3fwd's shape:
//!
//! ```text
//!   rx burst ─▶ enter the published tables ─▶ Worker::process ─▶ tx by verdict
//!      ▲                                                            │
//!      └────────────────────────────────────────────────────────────┘
//! ```
//!
//! so the glue that builds a burst of [`PacketRef`]s, enters the tables once
//! per burst and hands verdicts back exists once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cfdp_packet::LinkType;
use left_right::ReadHandle;

use crate::matcher::MAX_BURST;
use crate::tables::Tables;
use crate::worker::{PacketRef, Released, Verdict, Worker};

/// A received burst: up to [`MAX_BURST`] frames the backend owns until it
/// transmits them.
pub trait Frames {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Frame `i` (< `len()`), borrowed from the burst.
    fn packet(&self, i: usize) -> PacketRef<'_>;
}

/// What a receive poll found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rx {
    /// The burst holds at least one frame.
    Ready,
    /// Nothing right now; poll again.
    Idle,
    /// The backend slept until frames came (a replay's reader was slower
    /// than its worker); they are the next poll's. Apart from `Ready` so
    /// that the wait is not timed as the burst's ([`Worker::rx_idle`]
    /// marks the clock before that poll).
    Waited,
    /// The backend is finished (input exhausted, stop requested, idle limit).
    Done,
}

/// A source and sink of bursts for one worker.
///
/// The worker loop owns one burst buffer ([`Backend::burst`]) for its whole
/// run: `rx` fills it in place and `tx` empties it in place, so nothing the
/// size of a burst is moved or allocated per burst (a DPDK burst is ~800
/// bytes of mbuf pointers and lengths).
pub trait Backend {
    type Burst: Frames;
    /// An empty burst buffer.
    fn burst(&self) -> Self::Burst;
    /// Fills `burst` (empty on entry) with the next frames.
    fn rx(&mut self, burst: &mut Self::Burst) -> Rx;
    /// Hands a processed burst back with one verdict per frame: forwarded
    /// frames leave, dropped ones are released; `burst` is left empty.
    fn tx(&mut self, burst: &mut Self::Burst, verdicts: &[Verdict]);
    /// Sends held fragments the last burst released (copies the worker
    /// made; see `worker`), each by its verdict, after that burst's frames.
    /// `burst` is the burst just transmitted (emptied), for backends whose
    /// output depends on where it came in. Rare: out-of-order fragments.
    fn release(&mut self, burst: &mut Self::Burst, frames: &[Released]);
    /// The backend's clock in nanoseconds (capture time for a replay,
    /// monotonic time for a NIC), by which fragment entries age.
    fn now_ns(&self) -> u64;
}

/// Why [`run_worker`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunEnd {
    /// Bursts processed.
    pub bursts: u64,
    /// Frames processed.
    pub packets: u64,
}

/// The worker loop: polls `backend` until it is done, processing each
/// burst against one copy of the published tables. When the rule store is
/// gone (`enter` returns `None`, only at shutdown) frames are forwarded.
pub fn run_worker<B: Backend>(
    backend: &mut B,
    worker: &mut Worker,
    tables: &ReadHandle<Tables>,
) -> RunEnd {
    let mut end = RunEnd {
        bursts: 0,
        packets: 0,
    };
    let mut b = backend.burst();
    worker.rx_idle();
    loop {
        worker.rx_begin();
        match backend.rx(&mut b) {
            Rx::Ready => {
                let n = b.len().min(MAX_BURST);
                let mut verdicts = [Verdict::Forward; MAX_BURST];
                {
                    let refs: [PacketRef<'_>; MAX_BURST] =
                        std::array::from_fn(|i| if i < n { b.packet(i) } else { PacketRef::EMPTY });
                    if let Some(t) = tables.enter() {
                        worker.process(&t, &refs[..n], &mut verdicts);
                    }
                }
                backend.tx(&mut b, &verdicts[..n]);
                if !worker.released().is_empty() {
                    backend.release(&mut b, worker.released());
                    worker.clear_released();
                }
                worker.tx_done(n);
                end.bursts += 1;
                end.packets += n as u64;
            }
            Rx::Idle => {
                worker.rx_idle();
                worker.idle(backend.now_ns());
                std::hint::spin_loop();
            }
            Rx::Waited => worker.rx_idle(),
            Rx::Done => {
                worker.rx_idle();
                return end;
            }
        }
    }
}

/// Frames held in memory, replayed in bursts: the backend of the pipeline
/// benchmarks and of tests that need no files. Transmit only counts.
pub struct MemoryBackend<'a> {
    frames: &'a [Vec<u8>],
    pos: usize,
    link: LinkType,
    started: Instant,
    limit: Limit<'a>,
    bursts: u64,
    passes: u64,
    /// The frames come as from a NIC that checked their TCP and UDP
    /// checksums ([`PacketRef::l4_vouched`]).
    l4_vouched: bool,
    /// Verdicts seen, by kind: forwarded (incl. redirected), dropped.
    pub forwarded: u64,
    pub dropped: u64,
}

/// When a [`MemoryBackend`] is done.
#[derive(Clone, Copy)]
pub enum Limit<'a> {
    /// After this many passes over the frames.
    Passes(u64),
    /// Once this much time has passed (checked every 64 bursts).
    Seconds(f64),
    /// Once the flag is set (checked every burst).
    Flag(&'a AtomicBool),
}

/// One burst of a [`MemoryBackend`]: a run of its frames.
pub struct MemoryBurst<'a> {
    frames: &'a [Vec<u8>],
    link: LinkType,
    l4_vouched: bool,
}

impl Frames for MemoryBurst<'_> {
    fn len(&self) -> usize {
        self.frames.len()
    }
    fn packet(&self, i: usize) -> PacketRef<'_> {
        let f = &self.frames[i];
        PacketRef {
            link: self.link,
            ts_ns: 0,
            orig_len: f.len() as u32,
            data: f,
            l4_vouched: self.l4_vouched,
        }
    }
}

impl<'a> MemoryBackend<'a> {
    /// Ethernet frames, replayed in bursts of [`MAX_BURST`] until `limit`.
    pub fn new(frames: &'a [Vec<u8>], limit: Limit<'a>) -> Self {
        Self {
            frames,
            pos: 0,
            link: LinkType::Ethernet,
            started: Instant::now(),
            limit,
            bursts: 0,
            passes: 0,
            l4_vouched: false,
            forwarded: 0,
            dropped: 0,
        }
    }

    /// The frames as a NIC that checked their TCP and UDP checksums (and
    /// found them right) hands them over: connection tracking does not
    /// sum them (the benchmarks' stateful rows with receive offload).
    pub fn nic_checked(mut self) -> Self {
        self.l4_vouched = true;
        self
    }

    fn done(&self) -> bool {
        match self.limit {
            Limit::Passes(p) => self.passes >= p,
            Limit::Seconds(s) => {
                self.bursts.is_multiple_of(64) && self.started.elapsed().as_secs_f64() >= s
            }
            Limit::Flag(f) => f.load(Ordering::Relaxed),
        }
    }
}

impl<'a> Backend for MemoryBackend<'a> {
    type Burst = MemoryBurst<'a>;

    fn burst(&self) -> MemoryBurst<'a> {
        MemoryBurst {
            frames: &[],
            link: self.link,
            l4_vouched: self.l4_vouched,
        }
    }

    fn rx(&mut self, b: &mut MemoryBurst<'a>) -> Rx {
        if self.frames.is_empty() {
            return Rx::Done;
        }
        if self.pos >= self.frames.len() {
            self.pos = 0;
            self.passes += 1;
        }
        if self.done() {
            return Rx::Done;
        }
        let end = (self.pos + MAX_BURST).min(self.frames.len());
        b.frames = &self.frames[self.pos..end];
        self.pos = end;
        self.bursts += 1;
        Rx::Ready
    }

    fn tx(&mut self, b: &mut MemoryBurst<'a>, verdicts: &[Verdict]) {
        b.frames = &[];
        for v in verdicts {
            match v {
                Verdict::Drop => self.dropped += 1,
                _ => self.forwarded += 1,
            }
        }
    }

    fn release(&mut self, _: &mut MemoryBurst<'a>, frames: &[Released]) {
        for r in frames {
            match r.verdict {
                Verdict::Drop => self.dropped += 1,
                _ => self.forwarded += 1,
            }
        }
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }
}
