//! The pcap replay backend: the reader thread plays the NIC, workers process
//! bursts, a writer thread writes what is forwarded.
//!
//! ```text
//!  capture ──reader──▶ RSS ──▶ worker 0 ─┐
//!   (pcap-file)         │ ──▶ worker 1 ─┼──▶ writer ──▶ OUT.pcap (port 0)
//!                       │ ──▶ ...      ─┘      │    └─▶ OUT.portN.pcap (redirects)
//!                       ◀────────── recycled bursts ─┘
//! ```
//!
//! * RSS: like a NIC, the reader spreads frames over workers by a symmetric
//!   hash of the 5-tuple, so both directions of a flow land on one worker
//!   and per-flow order is kept end to end. Fragments are spread by the
//!   symmetric hash of addresses and protocol only (as NICs do), so every
//!   fragment of a datagram reaches the worker that saw its first fragment.
//! * Bursts of up to 32 frames carry their bytes in one buffer and return to
//!   the reader for reuse: after warm-up nothing is allocated per packet.
//! * A damaged capture stops the reader; everything read before the damage
//!   is processed and reported, and the error is reported beside it.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cfdp_engine::backend::{Backend, Rx};
use cfdp_engine::{
    run_worker, FlowTable, LiveStats, Mode, Released, RuleCount, StatsSnapshot, Verdict, Worker,
    WorkerContext, WorkerOptions, MAX_BURST,
};
use cfdp_packet::LinkType;
use cfdp_rules::FlowKey;
use crossbeam::channel::{bounded, unbounded, Receiver, Sender, TrySendError};
use serde::Serialize;

use crate::burst::{Burst, Slot};
use crate::capture::{Capture, CaptureError, Frame};
use crate::output::{writer_loop, OutputError, Outputs};
use crate::rss::rss_worker;

/// A worker's side of the replay: bursts from the reader in, processed
/// bursts out to the writer (which recycles them to the reader).
struct ChannelBackend {
    from_reader: Receiver<Box<Burst>>,
    to_writer: Sender<Box<Burst>>,
    /// Recycled bursts, for released fragments (see `release`).
    pool: Receiver<Box<Burst>>,
    last_ts_ns: u64,
}

impl Backend for ChannelBackend {
    type Burst = Slot;

    fn burst(&self) -> Slot {
        Slot(None)
    }

    fn rx(&mut self, slot: &mut Slot) -> Rx {
        // The reader closes the channel when the capture is done (or a
        // stop was asked for): everything it sent is still processed.
        match self.from_reader.recv() {
            Ok(b) => {
                if let Some(m) = b.meta.last() {
                    self.last_ts_ns = m.ts_ns;
                }
                slot.0 = Some(b);
                Rx::Ready
            }
            Err(_) => Rx::Done,
        }
    }

    fn tx(&mut self, slot: &mut Slot, verdicts: &[Verdict]) {
        if let Some(mut burst) = slot.0.take() {
            burst.verdicts[..verdicts.len()].copy_from_slice(verdicts);
            // A writer that stopped has reported its error: keep draining.
            let _ = self.to_writer.send(burst);
        }
    }

    fn release(&mut self, _: &mut Slot, frames: &[Released]) {
        // Released fragments travel to the writer like a burst of their own,
        // in a recycled burst when one is free.
        for chunk in frames.chunks(MAX_BURST) {
            let mut b = self
                .pool
                .try_recv()
                .unwrap_or_else(|_| Box::new(Burst::new()));
            b.clear();
            for (i, r) in chunk.iter().enumerate() {
                b.push(&Frame {
                    link: r.frame.link,
                    ts_ns: r.frame.ts_ns,
                    orig_len: r.frame.orig_len,
                    iface: 0,
                    data: &r.frame.data,
                });
                b.verdicts[i] = r.verdict;
            }
            let _ = self.to_writer.send(b);
        }
    }

    fn now_ns(&self) -> u64 {
        // Capture time: fragments age as they did on the wire.
        self.last_ts_ns
    }
}

/// A looping replay keeps captures up to this size in memory after the
/// first pass.
pub const LOOP_CACHE_BYTES: usize = 256 << 20;

/// The frames of a looped capture: bytes, and (link, ts, orig_len, iface,
/// offset, length) per frame.
#[derive(Default)]
struct FrameCache {
    buf: Vec<u8>,
    metas: Vec<(LinkType, u64, u32, u32, usize, usize)>,
}

/// Upper bound on worker threads (each has its own queue and counters).
pub const MAX_WORKERS: usize = 1024;

/// What `replay` needs besides the matcher.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    pub input: PathBuf,
    pub out: Option<PathBuf>,
    pub workers: usize,
    /// Write exact per-flow counters here (turns flow accounting on).
    pub flows_csv: Option<PathBuf>,
    /// Show a progress line on stderr when it is a terminal.
    pub progress: bool,
    /// Set from outside (a signal) to stop reading; frames already read
    /// are still processed, written and reported.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Replay the capture again and again until `stop`.
    pub repeat: bool,
    /// Like a NIC: when a worker's queue is full, drop the burst and count
    /// it in `rx_dropped` instead of waiting for the worker. Off: the reader
    /// waits (lossless replay).
    pub drop_when_full: bool,
    /// Pace the reader to this many frames per second (0: as fast as the
    /// workers go).
    pub pps: u64,
}

/// The JSON summary `cfdp replay` prints: the data plane's statistics
/// snapshot (the same shape as `stats` on the control socket) and what is
/// particular to a replay.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    #[serde(flatten)]
    pub stats: StatsSnapshot,
    /// Frames read from the capture (all passes): `packets + rx_dropped`.
    pub frames_read: u64,
    /// Times the capture was read.
    pub passes: u64,
    /// Distinct 5-tuples seen, when flow accounting was on (`--flows`).
    pub flows: Option<u64>,
    pub elapsed_s: f64,
    pub mpps: f64,
    pub workers: usize,
    pub mode: Mode,
    pub rules: usize,
    pub actions: BTreeMap<&'static str, u64>,
    /// Counters of the `count` rules, by id. Left empty here: the published
    /// tables know rules by counter slot only, so the caller, which holds
    /// the rule store, fills it (`RuleStore::count_rule_counters`).
    pub rule_counters: Vec<RuleCount>,
    pub filter: FilterReport,
    /// Set when the capture was damaged: what was read before is reported.
    pub capture_error: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct FilterReport {
    pub verified: u64,
    pub false_positives_caught: u64,
    pub filter_only_sampled: u64,
    pub filter_only_sampled_false: u64,
    pub filter_only_fp_rate: Option<f64>,
}

/// Errors that stop a replay before it produces a report.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Capture(CaptureError),
    #[error("output: {0}")]
    Output(#[source] OutputError),
    #[error("flows: {}: {source}", path.display())]
    Flows {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
}

/// Replays a capture through the workers. Returns the report (with
/// `capture_error` set if the file was damaged part-way). `on_pass(n,
/// frames)` is called each time the reader finishes pass `n`.
pub fn replay(
    opts: &ReplayOptions,
    dp: &WorkerContext,
    on_pass: &mut dyn FnMut(u64, u64),
) -> Result<ReplayReport, ReplayError> {
    let workers = opts.workers.max(1);
    if workers > MAX_WORKERS {
        return Err(ReplayError::Config(format!(
            "workers = {workers}: at most {MAX_WORKERS} are supported"
        )));
    }
    if dp.stats.workers.len() < workers {
        return Err(ReplayError::Config(format!(
            "statistics for {} workers, {workers} asked for",
            dp.stats.workers.len()
        )));
    }
    let cap = Capture::open(&opts.input).map_err(ReplayError::Capture)?;
    let outputs = opts.out.as_ref().map(|base| {
        Outputs::new(
            base.clone(),
            cap.is_pcapng(),
            cap.link_type().unwrap_or(LinkType::Ethernet),
        )
    });
    let wopts = WorkerOptions {
        account_flows: opts.flows_csv.is_some(),
    };
    let start = Instant::now();
    let (pool_tx, pool_rx) = unbounded::<Box<Burst>>();
    let (out_tx, out_rx) = bounded::<Box<Burst>>(256);
    let (to_workers, from_reader): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| bounded::<Box<Burst>>(64)).unzip();
    let (finished, writer_result, read) = std::thread::scope(|s| {
        let writer = {
            let pool_tx = pool_tx.clone();
            std::thread::Builder::new()
                .name("cfdp-writer".into())
                .spawn_scoped(s, move || writer_loop(out_rx, pool_tx, outputs))
                .expect("spawning the writer thread")
        };
        let handles = spawn_workers(s, dp, wopts, from_reader, &out_tx, &pool_rx);
        drop(out_tx);
        let mut reader = Reader {
            opts,
            stats: &dp.stats,
            start,
            pending: (0..workers).map(|_| Box::new(Burst::new())).collect(),
            to_workers,
            pool: (pool_tx, pool_rx),
            total_frames: 0,
            progress: Progress::new(opts),
        };
        let read = reader.read_all(cap, on_pass);
        reader.finish();
        let finished: Vec<Option<FlowTable>> = handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect();
        let writer_result = writer.join().expect("writer thread panicked");
        (finished, writer_result, read)
    });
    writer_result.map_err(ReplayError::Output)?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = report(dp, &finished, elapsed, read.passes, read.result.err(), opts)?;
    r.frames_read = read.frames;
    Ok(r)
}

/// Starts one worker thread per queue, each running the engine's worker
/// loop over the bursts the reader sends it.
fn spawn_workers<'s, 'e>(
    s: &'s std::thread::Scope<'s, 'e>,
    dp: &'e WorkerContext,
    wopts: WorkerOptions,
    from_reader: Vec<Receiver<Box<Burst>>>,
    out_tx: &Sender<Box<Burst>>,
    pool_rx: &Receiver<Box<Burst>>,
) -> Vec<std::thread::ScopedJoinHandle<'s, Option<FlowTable>>> {
    from_reader
        .into_iter()
        .enumerate()
        .map(|(wi, rx)| {
            let out_tx = out_tx.clone();
            let pool = pool_rx.clone();
            let tables = dp.readers.handle();
            // Named per worker (`top -H`, and the control-path bench reads
            // a worker's CPU time by this name).
            std::thread::Builder::new()
                .name(format!("cfdp-worker-{wi}"))
                .spawn_scoped(s, move || {
                    let mut w = Worker::new(dp, wi, wopts);
                    let mut backend = ChannelBackend {
                        from_reader: rx,
                        to_writer: out_tx,
                        pool,
                        last_ts_ns: 0,
                    };
                    run_worker(&mut backend, &mut w, &tables);
                    w.finish()
                })
                .expect("spawning a worker thread")
        })
        .collect()
}

/// What the reader did: passes, frames, and how the last pass ended.
struct ReadOutcome {
    passes: u64,
    frames: u64,
    result: Result<u64, CaptureError>,
}

/// The reader thread's state: per-worker bursts being filled, the queues to
/// the workers and the pool of recycled bursts.
struct Reader<'a> {
    opts: &'a ReplayOptions,
    stats: &'a LiveStats,
    start: Instant,
    // Boxed: a full burst moves to its worker and a pooled one takes its
    // place, pointer-sized swaps.
    #[allow(clippy::vec_box)]
    pending: Vec<Box<Burst>>,
    to_workers: Vec<Sender<Box<Burst>>>,
    pool: (Sender<Box<Burst>>, Receiver<Box<Burst>>),
    total_frames: u64,
    progress: Option<Progress>,
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
    fn read_all(&mut self, mut cap: Capture, on_pass: &mut dyn FnMut(u64, u64)) -> ReadOutcome {
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
        let wi = rss_worker(f.link, f.data, self.pending.len());
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
    fn finish(self) {
        for (wi, b) in self.pending.into_iter().enumerate() {
            if !b.meta.is_empty() {
                let _ = self.to_workers[wi].send(b);
            }
        }
    }
}

/// A progress bar on a terminal, for captures over 64 MiB.
struct Progress {
    file_len: u64,
    read_bytes: u64,
    last_report: Instant,
}

impl Progress {
    fn new(opts: &ReplayOptions) -> Option<Self> {
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

fn report(
    dp: &WorkerContext,
    workers: &[Option<FlowTable>],
    elapsed_s: f64,
    passes: u64,
    capture_error: Option<CaptureError>,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let stats = dp.stats.snapshot();
    let totals = &stats.totals;
    let accounted = workers.iter().any(Option::is_some);
    let mut flows: FlowTable = HashMap::new();
    for f in workers.iter().flatten() {
        for (k, (p, b)) in f {
            let e = flows.entry(*k).or_insert((0, 0));
            e.0 += p;
            e.1 += b;
        }
    }
    if let Some(path) = &opts.flows_csv {
        write_flows(path, &flows).map_err(|source| ReplayError::Flows {
            path: path.clone(),
            source,
        })?;
    }
    let sampled = totals.filter_only_sampled;
    let actions = BTreeMap::from([
        ("drop", totals.dropped),
        ("allow", totals.allowed),
        ("count", totals.counted),
        ("redirect", totals.redirected),
        ("no_rule", totals.packets - totals.matched),
    ]);
    let rules = dp.readers.handle().enter().map_or(0, |t| t.len());
    let filter = FilterReport {
        verified: totals.filter_verified,
        false_positives_caught: totals.filter_false_positives,
        filter_only_sampled: sampled,
        filter_only_sampled_false: totals.filter_only_sampled_false,
        filter_only_fp_rate: (sampled > 0)
            .then(|| totals.filter_only_sampled_false as f64 / sampled as f64),
    };
    Ok(ReplayReport {
        frames_read: 0,
        passes,
        flows: accounted.then_some(flows.len() as u64),
        elapsed_s,
        mpps: totals.packets as f64 / elapsed_s.max(1e-9) / 1e6,
        workers: workers.len(),
        mode: dp.mode,
        rules,
        actions,
        rule_counters: Vec::new(),
        filter,
        capture_error: capture_error.map(|e| e.to_string()),
        stats,
    })
}

/// Writes per-flow counters as CSV (`src,dst,proto,sport,dport,packets,bytes`),
/// sorted for stable output.
pub fn write_flows(path: &Path, flows: &FlowTable) -> std::io::Result<()> {
    let mut rows: Vec<(&FlowKey, &(u64, u64))> = flows.iter().collect();
    rows.sort();
    let mut w = BufWriter::new(File::create(path)?);
    writeln!(w, "src,dst,proto,sport,dport,packets,bytes")?;
    for (k, (p, b)) in rows {
        writeln!(
            w,
            "{},{},{},{},{},{p},{b}",
            k.src_ip(),
            k.dst_ip(),
            k.proto,
            k.sport,
            k.dport
        )?;
    }
    w.flush()
}
