//! The reader of a replay: frames from the capture (or from memory after a
//! looped capture's first pass) into per-worker bursts by RSS, with pacing
//! and a progress bar.

use std::io::IsTerminal;
use std::time::Instant;

use cfdp_engine::{LiveStats, Verdict, MAX_BURST};
use cfdp_packet::LinkType;
use crossbeam::channel::{Receiver, Sender, TrySendError};

use crate::burst::Burst;
use crate::capture::{Capture, CaptureError, Frame};
use crate::options::ReplayOptions;
use crate::rss::Rss;

/// A looping replay keeps captures up to this size in memory after the
/// first pass.
pub const LOOP_CACHE_BYTES: usize = 256 << 20;

/// The frames of a looped capture: bytes, and (link, ts, orig_len, iface,
/// offset, length) per frame.
#[derive(Default)]
pub(crate) struct FrameCache {
    pub(crate) buf: Vec<u8>,
    pub(crate) metas: Vec<(LinkType, u64, u32, u32, usize, usize)>,
}

/// What the reader did: passes, frames, and how the last pass ended.
pub(crate) struct ReadOutcome {
    pub(crate) passes: u64,
    pub(crate) frames: u64,
    pub(crate) result: Result<u64, CaptureError>,
}

/// The reader thread's state: per-worker bursts being filled, the queues to
/// the workers and the pool of recycled bursts.
pub(crate) struct Reader<'a> {
    pub(crate) opts: &'a ReplayOptions,
    pub(crate) stats: &'a LiveStats,
    pub(crate) start: Instant,
    // Boxed: a full burst moves to its worker and a pooled one takes its
    // place, pointer-sized swaps.
    #[allow(clippy::vec_box)]
    pub(crate) pending: Vec<Box<Burst>>,
    /// Which worker each frame goes to.
    pub(crate) rss: Rss,
    pub(crate) to_workers: Vec<Sender<Box<Burst>>>,
    pub(crate) pool: (Sender<Box<Burst>>, Receiver<Box<Burst>>),
    pub(crate) total_frames: u64,
    pub(crate) progress: Option<Progress>,
}

impl Reader<'_> {
    fn stopped(&self) -> bool {
        self.opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Reads every pass (one without `repeat`). Loops keep the frames of
    /// the first pass in memory (up to LOOP_CACHE_BYTES) and replay them
    /// from there: no re-opening and re-parsing per pass (pcap-file
    /// allocates an 8 MiB buffer per reader, which for a short capture
    /// looping thousands of times a second cost throughput and, through
    /// the allocator, memory).
    pub(crate) fn read_all(
        &mut self,
        mut cap: Capture,
        on_pass: &mut dyn FnMut(u64, u64),
    ) -> ReadOutcome {
        let mut cache: Option<FrameCache> = self.opts.repeat.then(FrameCache::default);
        let mut pass = 0u64;
        let result = loop {
            pass += 1;
            let r = match (&cache, pass > 1) {
                (Some(c), true) => Ok(self.replay_cached(c)),
                _ => self.read_file(&mut cap, &mut cache),
            };
            if r.is_err() || self.stopped() {
                break r;
            }
            let frames = *r.as_ref().expect("checked");
            on_pass(pass, frames);
            if !self.opts.repeat {
                break r;
            }
            if cache.is_none() {
                // Next pass: the same file from the start.
                match Capture::open(&self.opts.input) {
                    Ok(c) => cap = c,
                    Err(e) => break Err(e),
                }
            }
            if frames == 0 {
                // An empty capture would spin: wait for the stop signal.
                while !self.stopped() {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        };
        if let Some(p) = &self.progress {
            p.done();
        }
        ReadOutcome {
            passes: pass,
            frames: self.total_frames,
            result,
        }
    }

    /// One pass over the file, keeping its frames in `cache` while they fit.
    fn read_file(
        &mut self,
        cap: &mut Capture,
        cache: &mut Option<FrameCache>,
    ) -> Result<u64, CaptureError> {
        let mut frames = 0u64;
        cap.for_each(|f| {
            if let Some(FrameCache { buf, metas }) = cache {
                if buf.len() + f.data.len() > LOOP_CACHE_BYTES {
                    *cache = None; // too big: later passes re-read the file
                } else {
                    metas.push((
                        f.link,
                        f.ts_ns,
                        f.orig_len,
                        f.iface,
                        buf.len(),
                        f.data.len(),
                    ));
                    buf.extend_from_slice(f.data);
                }
            }
            frames += 1;
            self.push(f)
        })
        .map(|_| frames)
    }

    /// One pass over the frames cached by the first.
    fn replay_cached(&mut self, c: &FrameCache) -> u64 {
        let mut frames = 0u64;
        for &(link, ts_ns, orig_len, iface, off, len) in &c.metas {
            let f = Frame {
                link,
                ts_ns,
                orig_len,
                iface,
                data: &c.buf[off..off + len],
            };
            frames += 1;
            if self.push(&f).is_break() {
                break;
            }
        }
        frames
    }

    /// Adds a frame to its worker's burst (RSS), sending the burst when full.
    fn push(&mut self, f: &Frame<'_>) -> std::ops::ControlFlow<()> {
        if self.stopped() {
            return std::ops::ControlFlow::Break(());
        }
        self.total_frames += 1;
        self.pace();
        let wi = self.rss.worker(f.link, f.data);
        self.pending[wi].push(f);
        if self.pending[wi].meta.len() == MAX_BURST {
            self.send(wi);
        }
        if let Some(p) = &mut self.progress {
            p.frame(f);
        }
        std::ops::ControlFlow::Continue(())
    }

    /// Sleeps to keep to `pps` frames a second, when set.
    fn pace(&self) {
        let pps = self.opts.pps;
        if pps > 0 && self.total_frames.is_multiple_of(32) {
            let due = self.start
                + std::time::Duration::from_secs_f64(self.total_frames as f64 / pps as f64);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
    }

    /// Hands worker `wi` its full burst (dropping it, counted, when the
    /// worker's queue is full and `drop_when_full` is set).
    fn send(&mut self, wi: usize) {
        let fresh = self
            .pool
            .1
            .try_recv()
            .unwrap_or_else(|_| Box::new(Burst::new()));
        let mut full = std::mem::replace(&mut self.pending[wi], fresh);
        self.pending[wi].clear();
        full.verdicts = [Verdict::Forward; MAX_BURST];
        if self.opts.drop_when_full {
            if let Err(TrySendError::Full(b)) = self.to_workers[wi].try_send(full) {
                self.stats.workers[wi]
                    .rx_dropped
                    .fetch_add(b.meta.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let _ = self.pool.0.send(b);
            }
        } else {
            let _ = self.to_workers[wi].send(full);
        }
    }

    /// Sends the partly filled bursts and closes the workers' queues.
    pub(crate) fn finish(self) {
        for (wi, b) in self.pending.into_iter().enumerate() {
            if !b.meta.is_empty() {
                let _ = self.to_workers[wi].send(b);
            }
        }
    }
}

/// A progress bar on a terminal, for captures over 64 MiB.
pub(crate) struct Progress {
    file_len: u64,
    read_bytes: u64,
    last_report: Instant,
}

impl Progress {
    pub(crate) fn new(opts: &ReplayOptions) -> Option<Self> {
        let file_len = std::fs::metadata(&opts.input).map_or(0, |m| m.len());
        (opts.progress && std::io::stderr().is_terminal() && file_len > (64 << 20)).then(|| {
            Progress {
                file_len,
                read_bytes: 0,
                last_report: Instant::now(),
            }
        })
    }

    fn frame(&mut self, f: &Frame<'_>) {
        self.read_bytes += u64::from(f.orig_len.min(f.data.len() as u32)) + 16;
        if self.last_report.elapsed().as_millis() >= 100 {
            self.last_report = Instant::now();
            let frac = (self.read_bytes as f64 / self.file_len.max(1) as f64).min(1.0);
            let done = (frac * 40.0) as usize;
            eprint!(
                "\rreplaying [{}{}] {:5.1} %",
                "#".repeat(done),
                " ".repeat(40 - done),
                frac * 100.0
            );
        }
    }

    fn done(&self) {
        eprintln!("\rreplaying [{}] done   ", "#".repeat(40));
    }
}
