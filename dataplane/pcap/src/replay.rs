//! The pcap replay backend: the reader thread plays the NIC, workers process
//! bursts, a writer thread writes what is forwarded (with `--out`).
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
//! * Without `--out` there is no writer thread: workers hand bursts straight
//!   back to the reader's pool. Where every thread has a core, an idle
//!   worker polls its queue for tens of microseconds before it sleeps, so
//!   the reader seldom has to wake one (a system call per burst: on a
//!   16-core machine under gVisor, 4–15 workers replayed 3.2–3.8 Mpps
//!   before, 4.9–5.3 after; `bench/README.md`, multi-core scaling).
//! * A damaged capture stops the reader; everything read before the damage
//!   is processed and reported, and the error is reported beside it.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use cfdp_engine::backend::{Backend, Rx};
use cfdp_engine::export::FlowExport;
use cfdp_engine::{
    run_worker, FlowTable, Mode, Released, RuleCount, StatsSnapshot, Verdict, Worker,
    WorkerContext, WorkerOptions, MAX_BURST,
};
use cfdp_export::Exporter;
use cfdp_packet::LinkType;
use cfdp_rules::FlowKey;
use crossbeam::channel::{bounded, unbounded, Receiver, Sender, TryRecvError};
use serde::Serialize;

use crate::burst::{Burst, Slot};
use crate::capture::{Capture, CaptureError, Frame};
use crate::options::{ReplayOptions, MAX_WORKERS};
use crate::output::{writer_loop, OutputError, Outputs};
use crate::reader::{Progress, Reader};

/// A worker's side of the replay: bursts from the reader in, processed
/// bursts out to the writer (which recycles them to the reader).
struct ChannelBackend {
    from_reader: Receiver<Box<Burst>>,
    /// To the writer thread, or straight back to the reader's pool when
    /// there is no output capture to write.
    to_writer: Sender<Box<Burst>>,
    /// Poll an empty queue for a while before sleeping on it (when every
    /// thread of the replay has a core of its own, see `replay`).
    spin: bool,
    /// Recycled bursts, for released fragments (see `release`).
    pool: Receiver<Box<Burst>>,
    /// A burst a sleeping receive got, handed out at the next poll
    /// ([`Rx::Waited`]: the sleep is not the burst's time).
    woken: Option<Box<Burst>>,
    last_ts_ns: u64,
}

impl Backend for ChannelBackend {
    type Burst = Slot;

    fn burst(&self) -> Slot {
        Slot(None)
    }

    fn rx(&mut self, slot: &mut Slot) -> Rx {
        if let Some(b) = self.woken.take() {
            return self.take(slot, b);
        }
        // The reader closes the channel when the capture is done (or a
        // stop was asked for): everything it sent is still processed.
        // A worker that sleeps on its queue must be woken by the reader
        // (a futex call per burst in the reader's loop); one that polls a
        // little first (`spin`) is found awake while frames flow.
        let polls = if self.spin { SPIN_POLLS } else { 1 };
        for _ in 0..polls {
            match self.from_reader.try_recv() {
                Ok(b) => return self.take(slot, b),
                Err(TryRecvError::Disconnected) => return Rx::Done,
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
            }
        }
        match self.from_reader.recv() {
            Ok(b) => {
                self.woken = Some(b);
                Rx::Waited
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

impl ChannelBackend {
    /// Puts a received burst in the worker's slot.
    fn take(&mut self, slot: &mut Slot, b: Box<Burst>) -> Rx {
        if let Some(m) = b.meta.last() {
            self.last_ts_ns = m.ts_ns;
        }
        slot.0 = Some(b);
        Rx::Ready
    }
}

/// Empty polls of its queue a spinning worker makes before it sleeps on
/// it (tens of microseconds).
const SPIN_POLLS: u32 = 4096;

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
    let exporter = start_export(opts, dp)?;
    let wopts = WorkerOptions {
        account_flows: opts.flows_csv.is_some(),
        export: exporter.as_ref().map(|x| worker_export(opts, x)),
    };
    // Spin before sleeping only where every thread has a core: polling
    // workers on a machine with fewer cores would take the reader's.
    let threads = 1 + workers + usize::from(outputs.is_some());
    let spin = std::thread::available_parallelism().is_ok_and(|n| threads <= n.get());
    let start = Instant::now();
    let (pool_tx, pool_rx) = unbounded::<Box<Burst>>();
    let (to_workers, from_reader): (Vec<_>, Vec<_>) =
        (0..workers).map(|_| bounded::<Box<Burst>>(64)).unzip();
    let (finished, writer_result, read) = std::thread::scope(|s| {
        // Without an output capture there is nothing to write: workers
        // hand processed bursts straight back to the reader's pool (the
        // reader takes from it without waiting, so no thread is woken).
        let (out_tx, writer) = match outputs {
            Some(outputs) => {
                let (out_tx, out_rx) = bounded::<Box<Burst>>(256);
                let pool_tx = pool_tx.clone();
                let w = std::thread::Builder::new()
                    .name("cfdp-writer".into())
                    .spawn_scoped(s, move || writer_loop(out_rx, pool_tx, outputs))
                    .expect("spawning the writer thread");
                (out_tx, Some(w))
            }
            None => (pool_tx.clone(), None),
        };
        let handles = spawn_workers(s, dp, wopts, from_reader, &out_tx, &pool_rx, spin);
        drop(out_tx);
        let mut reader = Reader {
            opts,
            stats: &dp.stats,
            start,
            pending: (0..workers).map(|_| Box::new(Burst::new())).collect(),
            rss: crate::rss::Rss::new(workers),
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
        let writer_result = writer.map_or(Ok(()), |w| w.join().expect("writer thread panicked"));
        (finished, writer_result, read)
    });
    // Every worker's cache was flushed into the queue: what is left is
    // sent before the report (whose `export` counts it).
    if let Some(x) = exporter {
        x.finish();
    }
    writer_result.map_err(ReplayError::Output)?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = report(dp, &finished, elapsed, read.passes, read.result.err(), opts)?;
    r.frames_read = read.frames;
    Ok(r)
}

/// A worker's side of the export to `x`: its cache (keeping rules when
/// they are named) and the sampling rate.
fn worker_export(opts: &ReplayOptions, x: &Exporter) -> FlowExport {
    FlowExport {
        cache: cfdp_export::CacheSettings {
            rules: opts.ipfix_rule_pen != 0,
            ..opts.ipfix_cache
        },
        sender: x.sender(),
        // Packet times are the capture's Unix times.
        clock_base_ns: 0,
        sampling: opts.ipfix_sampling,
    }
}

/// The IPFIX exporter `--ipfix` asks for, started, counting into the
/// data plane's statistics (the report's and the metrics' `export`).
fn start_export(opts: &ReplayOptions, dp: &WorkerContext) -> Result<Option<Exporter>, ReplayError> {
    if opts.ipfix.is_empty() {
        return Ok(None);
    }
    let setup = cfdp_export::Setup {
        domain: opts.ipfix_domain,
        sampling: opts.ipfix_sampling,
        rule_pen: opts.ipfix_rule_pen,
    };
    Exporter::start_counting(
        opts.ipfix.clone(),
        setup,
        std::sync::Arc::clone(&dp.stats.export),
    )
    .map(Some)
    .map_err(|e| ReplayError::Config(e.to_string()))
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
    spin: bool,
) -> Vec<std::thread::ScopedJoinHandle<'s, Option<FlowTable>>> {
    from_reader
        .into_iter()
        .enumerate()
        .map(|(wi, rx)| {
            let out_tx = out_tx.clone();
            let pool = pool_rx.clone();
            let tables = dp.readers.handle();
            let wopts = wopts.clone();
            // Named per worker (`top -H`, and the control-path bench reads
            // a worker's CPU time by this name).
            std::thread::Builder::new()
                .name(format!("cfdp-worker-{wi}"))
                .spawn_scoped(s, move || {
                    let mut w = Worker::new(dp, wi, wopts);
                    let mut backend = ChannelBackend {
                        from_reader: rx,
                        to_writer: out_tx,
                        spin,
                        pool,
                        woken: None,
                        last_ts_ns: 0,
                    };
                    run_worker(&mut backend, &mut w, &tables);
                    w.finish()
                })
                .expect("spawning a worker thread")
        })
        .collect()
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
    let mut w = BufWriter::new(crate::output::create_output(path)?);
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
