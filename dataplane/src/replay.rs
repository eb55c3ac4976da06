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

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cfdp_rules::{Action, FlowKey};
use crossbeam::channel::{bounded, unbounded, Receiver, Sender, TrySendError};
use left_right::ReadHandleFactory;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use serde::Serialize;

use crate::capture::{Capture, CaptureError, Frame};
use crate::decode::{decode, Decoded, Frag, LinkType, Malformed, NonIp};
use crate::matcher::{Matcher, Mode, MAX_BURST};
use crate::stats::{LiveStats, Percentiles, Totals};
use crate::tables::Tables;
use crate::worker::{FlowTable, PacketRef, Verdict, Worker};

/// What the workers of a backend need: the matcher, read access to the
/// published tables, and the live statistics they write.
#[derive(Clone)]
pub struct Dataplane {
    pub matcher: Matcher,
    pub readers: ReadHandleFactory<Tables>,
    pub stats: Arc<LiveStats>,
}

impl Dataplane {
    /// A data plane over a fixed rule set, for `workers` workers. The
    /// returned store owns the tables: keep it alive while replaying.
    pub fn fixed(
        rules: &[cfdp_rules::Rule],
        mode: Mode,
        workers: usize,
    ) -> Result<(crate::control::RuleStore, Dataplane), String> {
        let cfg = crate::control::StoreConfig {
            mode,
            ..Default::default()
        };
        let stats = Arc::new(LiveStats::new(workers, cfg.max_rules.max(rules.len())));
        let store = crate::control::RuleStore::with_rules(cfg, Arc::clone(&stats), rules)?;
        let dp = Dataplane {
            matcher: store.matcher(),
            readers: store.readers(),
            stats,
        };
        Ok((store, dp))
    }
}

#[derive(Clone, Copy, Debug)]
struct Meta {
    off: u32,
    len: u32,
    orig_len: u32,
    ts_ns: u64,
    link: LinkType,
}

/// A burst of frames in one buffer, with the workers' verdicts.
struct Burst {
    data: Vec<u8>,
    meta: Vec<Meta>,
    verdicts: [Verdict; MAX_BURST],
}

impl Burst {
    fn new() -> Self {
        Self {
            data: Vec::with_capacity(MAX_BURST * 2048),
            meta: Vec::with_capacity(MAX_BURST),
            verdicts: [Verdict::Forward; MAX_BURST],
        }
    }

    fn clear(&mut self) {
        self.data.clear();
        self.meta.clear();
    }

    fn push(&mut self, f: &Frame<'_>) {
        self.meta.push(Meta {
            off: self.data.len() as u32,
            len: f.data.len() as u32,
            orig_len: f.orig_len,
            ts_ns: f.ts_ns,
            link: f.link,
        });
        self.data.extend_from_slice(f.data);
    }

    fn frame(&self, i: usize) -> &[u8] {
        let m = &self.meta[i];
        &self.data[m.off as usize..(m.off + m.len) as usize]
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

/// Per-rule counter of a `count` rule.
#[derive(Clone, Debug, Serialize)]
pub struct RuleCount {
    pub id: u32,
    pub packets: u64,
    pub bytes: u64,
}

/// The JSON summary `cfdp replay` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    #[serde(flatten)]
    pub totals: Totals,
    /// Frames the reader dropped because a worker's queue was full.
    pub rx_dropped: u64,
    /// Frames read from the capture (all passes): `packets + rx_dropped`.
    pub frames_read: u64,
    /// Times the capture was read.
    pub passes: u64,
    pub flows: u64,
    pub elapsed_s: f64,
    pub mpps: f64,
    pub workers: usize,
    pub mode: Mode,
    pub rules: usize,
    pub actions: HashMap<&'static str, u64>,
    pub malformed_by: HashMap<&'static str, u64>,
    pub non_ip_by: HashMap<&'static str, u64>,
    pub rule_counters: Vec<RuleCount>,
    pub filter: FilterReport,
    pub burst_ns: Percentiles,
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
#[derive(Debug)]
pub enum ReplayError {
    Capture(CaptureError),
    Output(String),
    Config(String),
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::Capture(e) => write!(f, "{e}"),
            ReplayError::Output(e) => write!(f, "output: {e}"),
            ReplayError::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

/// The worker a frame goes to (symmetric RSS, see the module docs).
pub fn rss_worker(link: LinkType, frame: &[u8], workers: usize) -> usize {
    if workers <= 1 {
        return 0;
    }
    let h = match decode(link, frame) {
        Decoded::Ip(ip) => {
            let mut k = ip.key;
            if ip.frag != Frag::None {
                k.sport = 0;
                k.dport = 0;
            }
            k.symmetric_hash()
        }
        _ => 0,
    };
    ((h >> 32) as usize * workers) >> 32
}

/// Output files: port 0 to `out`, port N to `out` with `.portN` before the extension.
struct Outputs {
    base: PathBuf,
    pcapng: bool,
    link: LinkType,
    files: HashMap<u16, Sink>,
}

enum Sink {
    Pcap(PcapWriter<BufWriter<File>>),
    PcapNg(PcapNgWriter<BufWriter<File>>, HashMap<LinkType, u32>),
}

fn port_path(base: &Path, port: u16) -> PathBuf {
    if port == 0 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().and_then(|s| s.to_str()).unwrap_or("out");
    let ext = base.extension().and_then(|s| s.to_str()).unwrap_or("pcap");
    base.with_file_name(format!("{stem}.port{port}.{ext}"))
}

impl Outputs {
    fn sink(&mut self, port: u16) -> Result<&mut Sink, String> {
        if !self.files.contains_key(&port) {
            let path = port_path(&self.base, port);
            let f = File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let w = BufWriter::with_capacity(1 << 20, f);
            let sink = if self.pcapng {
                Sink::PcapNg(
                    PcapNgWriter::new(w).map_err(|e| e.to_string())?,
                    HashMap::new(),
                )
            } else {
                let header = PcapHeader {
                    datalink: DataLink::from(self.link.to_linktype()),
                    ts_resolution: pcap_file::TsResolution::NanoSecond,
                    ..PcapHeader::default()
                };
                Sink::Pcap(PcapWriter::with_header(w, header).map_err(|e| e.to_string())?)
            };
            self.files.insert(port, sink);
        }
        Ok(self.files.get_mut(&port).expect("just inserted"))
    }

    fn write(&mut self, port: u16, m: &Meta, data: &[u8]) -> Result<(), String> {
        let ts = std::time::Duration::from_nanos(m.ts_ns);
        match self.sink(port)? {
            Sink::Pcap(w) => w
                .write_packet(&PcapPacket::new(ts, m.orig_len, data))
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Sink::PcapNg(w, ifaces) => {
                let next = ifaces.len() as u32;
                let iface = *ifaces.entry(m.link).or_insert(next);
                if iface == next {
                    let idb = InterfaceDescriptionBlock {
                        linktype: DataLink::from(m.link.to_linktype()),
                        snaplen: 0,
                        options: vec![],
                    };
                    w.write_pcapng_block(idb).map_err(|e| e.to_string())?;
                }
                let epb = EnhancedPacketBlock {
                    interface_id: iface,
                    timestamp: ts,
                    original_len: m.orig_len,
                    data: std::borrow::Cow::Borrowed(data),
                    options: vec![],
                };
                w.write_pcapng_block(epb)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        }
    }

    /// Flushes and closes every output file, reporting write errors.
    fn finish(self) -> Result<(), String> {
        for (_, s) in self.files {
            match s {
                Sink::Pcap(w) => w.into_writer().flush(),
                Sink::PcapNg(w, _) => w.into_inner().flush(),
            }
            .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

fn writer_loop(
    rx: Receiver<Box<Burst>>,
    pool: Sender<Box<Burst>>,
    mut outputs: Option<Outputs>,
) -> Result<(), String> {
    let mut err = None;
    if let Some(o) = &mut outputs {
        // The port-0 output exists even when nothing is forwarded.
        if let Err(e) = o.sink(0) {
            err = Some(e);
        }
    }
    for burst in rx {
        if let (Some(o), None) = (&mut outputs, &err) {
            for (i, m) in burst.meta.iter().enumerate() {
                let port = match burst.verdicts[i] {
                    Verdict::Forward => 0,
                    Verdict::Redirect(p) => p,
                    Verdict::Drop => continue,
                };
                if let Err(e) = o.write(port, m, burst.frame(i)) {
                    // Keep draining so workers never block; report once.
                    err = Some(e);
                    break;
                }
            }
        }
        let _ = pool.send(burst);
    }
    if let Some(e) = err {
        return Err(e);
    }
    match outputs {
        Some(o) => o.finish(),
        None => Ok(()),
    }
}

/// Replays a capture through the workers. Returns the report (with
/// `capture_error` set if the file was damaged part-way). `on_pass(n,
/// frames)` is called each time the reader finishes pass `n`.
pub fn replay(
    opts: &ReplayOptions,
    dp: &Dataplane,
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
    let mut cap = Capture::open(&opts.input).map_err(ReplayError::Capture)?;
    let file_len = std::fs::metadata(&opts.input).map(|m| m.len()).unwrap_or(0);
    let pcapng = cap.is_pcapng();
    let outputs = opts.out.as_ref().map(|base| Outputs {
        base: base.clone(),
        pcapng,
        link: cap.link_type().unwrap_or(LinkType::Ethernet),
        files: HashMap::new(),
    });
    let account = true;
    let start = Instant::now();

    let (pool_tx, pool_rx) = unbounded::<Box<Burst>>();
    let (out_tx, out_rx) = bounded::<Box<Burst>>(256);
    let mut to_workers = Vec::with_capacity(workers);
    let mut from_reader = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, rx) = bounded::<Box<Burst>>(64);
        to_workers.push(tx);
        from_reader.push(rx);
    }

    let (finished, writer_result, capture_result, pass, total_frames) = std::thread::scope(|s| {
        let writer = {
            let pool_tx = pool_tx.clone();
            s.spawn(move || writer_loop(out_rx, pool_tx, outputs))
        };
        let handles: Vec<_> = from_reader
            .into_iter()
            .enumerate()
            .map(|(wi, rx)| {
                let out_tx = out_tx.clone();
                let m = dp.matcher;
                let tables = dp.readers.handle();
                let stats = Arc::clone(&dp.stats);
                s.spawn(move || {
                    let mut w = Worker::new(stats, wi, account);
                    for mut burst in rx {
                        let b: &Burst = &burst;
                        let refs: [PacketRef<'_>; MAX_BURST] =
                            std::array::from_fn(|i| match b.meta.get(i) {
                                Some(mm) => PacketRef {
                                    link: mm.link,
                                    ts_ns: mm.ts_ns,
                                    orig_len: mm.orig_len,
                                    data: b.frame(i),
                                },
                                None => PacketRef {
                                    link: LinkType::Ethernet,
                                    ts_ns: 0,
                                    orig_len: 0,
                                    data: &[],
                                },
                            });
                        let mut verdicts = [Verdict::Forward; MAX_BURST];
                        // One copy of the tables for the whole burst. None:
                        // the rule store is gone (shutdown): forward.
                        if let Some(t) = tables.enter() {
                            w.process(&m, &t, &refs[..b.meta.len()], &mut verdicts);
                        }
                        burst.verdicts = verdicts;
                        if out_tx.send(burst).is_err() {
                            break;
                        }
                    }
                    w.flush_histogram();
                    w
                })
            })
            .collect();
        drop(out_tx);

        // Reader: fill per-worker bursts, hand them over when full.
        let mut pending: Vec<Box<Burst>> = (0..workers).map(|_| Box::new(Burst::new())).collect();
        let progress = opts.progress && std::io::stderr().is_terminal() && file_len > (64 << 20);
        let mut read_bytes = 0u64;
        let mut last_report = Instant::now();
        let stop = opts.stop.clone();
        let mut pass = 0u64;
        let mut total_frames = 0u64;
        let stopped = || {
            stop.as_ref()
                .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
        };
        let stats = &dp.stats;
        // Loops keep the frames of the first pass in memory (up to
        // LOOP_CACHE_BYTES) and replay them from there: no re-opening and
        // re-parsing per pass (pcap-file allocates an 8 MiB buffer per
        // reader, which for a short capture looping thousands of times a
        // second cost throughput and, through the allocator, memory).
        let mut cache: Option<FrameCache> = opts.repeat.then(FrameCache::default);
        let mut handle = |f: &Frame<'_>| {
            if stopped() {
                return std::ops::ControlFlow::Break(());
            }
            total_frames += 1;
            if opts.pps > 0 && total_frames % 32 == 0 {
                let due = start
                    + std::time::Duration::from_secs_f64(total_frames as f64 / opts.pps as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            let wi = rss_worker(f.link, f.data, workers);
            let b = &mut pending[wi];
            b.push(f);
            if b.meta.len() == MAX_BURST {
                let fresh = pool_rx
                    .try_recv()
                    .unwrap_or_else(|_| Box::new(Burst::new()));
                let mut full = std::mem::replace(&mut pending[wi], fresh);
                pending[wi].clear();
                full.verdicts = [Verdict::Forward; MAX_BURST];
                if opts.drop_when_full {
                    if let Err(TrySendError::Full(b)) = to_workers[wi].try_send(full) {
                        stats.workers[wi]
                            .rx_dropped
                            .fetch_add(b.meta.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        let _ = pool_tx.send(b);
                    }
                } else {
                    let _ = to_workers[wi].send(full);
                }
            }
            if progress {
                read_bytes += u64::from(f.orig_len.min(f.data.len() as u32)) + 16;
                if last_report.elapsed().as_millis() >= 100 {
                    last_report = Instant::now();
                    let frac = (read_bytes as f64 / file_len.max(1) as f64).min(1.0);
                    let done = (frac * 40.0) as usize;
                    eprint!(
                        "\rreplaying [{}{}] {:5.1} %",
                        "#".repeat(done),
                        " ".repeat(40 - done),
                        frac * 100.0
                    );
                }
            }
            std::ops::ControlFlow::Continue(())
        };
        let capture_result = loop {
            pass += 1;
            let mut frames = 0u64;
            let r = if let (true, Some(FrameCache { buf, metas })) = (pass > 1, &cache) {
                for &(link, ts_ns, orig_len, iface, off, len) in metas {
                    let f = Frame {
                        link,
                        ts_ns,
                        orig_len,
                        iface,
                        data: &buf[off..off + len],
                    };
                    frames += 1;
                    if handle(&f).is_break() {
                        break;
                    }
                }
                Ok(frames)
            } else {
                cap.for_each(|f| {
                    if let Some(FrameCache { buf, metas }) = &mut cache {
                        if buf.len() + f.data.len() > LOOP_CACHE_BYTES {
                            cache = None; // too big: later passes re-read the file
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
                    handle(f)
                })
            };
            if r.is_err() || stopped() {
                break r;
            }
            on_pass(pass, frames);
            if !opts.repeat {
                break r;
            }
            if cache.is_none() {
                // Next pass: the same file from the start.
                match Capture::open(&opts.input) {
                    Ok(c) => cap = c,
                    Err(e) => break Err(e),
                }
            }
            if frames == 0 {
                // An empty capture would spin: wait for the stop signal.
                while !stopped() {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        };
        if progress {
            eprintln!("\rreplaying [{}] done   ", "#".repeat(40));
        }
        for (wi, b) in pending.into_iter().enumerate() {
            if !b.meta.is_empty() {
                let _ = to_workers[wi].send(b);
            }
        }
        drop(to_workers);
        let finished: Vec<Worker> = handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect();
        let writer_result = writer.join().expect("writer thread panicked");
        (finished, writer_result, capture_result, pass, total_frames)
    });
    writer_result.map_err(ReplayError::Output)?;
    let elapsed = start.elapsed().as_secs_f64();
    let mut r = report(dp, finished, elapsed, pass, capture_result.err(), opts)?;
    r.frames_read = total_frames;
    Ok(r)
}

/// Counters of every worker by cause, merged.
pub fn causes(stats: &LiveStats) -> (HashMap<&'static str, u64>, HashMap<&'static str, u64>) {
    let mut malformed_by: HashMap<&'static str, u64> = HashMap::new();
    let mut non_ip_by: HashMap<&'static str, u64> = HashMap::new();
    for w in &stats.workers {
        for (i, m) in Malformed::ALL.iter().enumerate() {
            *malformed_by.entry(m.name()).or_default() +=
                w.counters.malformed_by[i].load(std::sync::atomic::Ordering::Relaxed);
        }
        for (i, k) in NonIp::ALL.iter().enumerate() {
            *non_ip_by.entry(k.name()).or_default() +=
                w.counters.non_ip_by[i].load(std::sync::atomic::Ordering::Relaxed);
        }
    }
    (malformed_by, non_ip_by)
}

fn report(
    dp: &Dataplane,
    workers: Vec<Worker>,
    elapsed_s: f64,
    passes: u64,
    capture_error: Option<CaptureError>,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let totals: Totals = dp.stats.totals();
    let (malformed_by, non_ip_by) = causes(&dp.stats);
    let hist = dp.stats.burst_histogram();
    let mut flows: FlowTable = HashMap::new();
    let nworkers = workers.len();
    for w in workers {
        if let Some(f) = w.flows {
            for (k, (p, b)) in f {
                let e = flows.entry(k).or_insert((0, 0));
                e.0 += p;
                e.1 += b;
            }
        }
    }
    if let Some(path) = &opts.flows_csv {
        write_flows(path, &flows)
            .map_err(|e| ReplayError::Output(format!("{}: {e}", path.display())))?;
    }
    let sampled = totals.filter_only_sampled;
    let mut actions = HashMap::new();
    actions.insert("drop", totals.dropped);
    actions.insert("allow", totals.allowed);
    actions.insert("count", totals.counted);
    actions.insert("redirect", totals.redirected);
    actions.insert("no_rule", totals.packets - totals.matched);
    let handle = dp.readers.handle();
    let (rules, mut rule_counters) = match handle.enter() {
        Some(t) => (
            t.len(),
            t.slots
                .iter()
                .flatten()
                .filter(|e| e.action == Action::Count)
                .map(|e| {
                    let (packets, bytes) = dp.stats.slot_totals(e.slot);
                    RuleCount {
                        id: e.id,
                        packets,
                        bytes,
                    }
                })
                .collect::<Vec<_>>(),
        ),
        None => (0, Vec::new()),
    };
    rule_counters.sort_by_key(|r| r.id);
    Ok(ReplayReport {
        rx_dropped: dp.stats.rx_dropped(),
        frames_read: 0,
        passes,
        flows: flows.len() as u64,
        elapsed_s,
        mpps: totals.packets as f64 / elapsed_s.max(1e-9) / 1e6,
        workers: nworkers,
        mode: dp.matcher.mode(),
        rules,
        actions,
        malformed_by,
        non_ip_by,
        rule_counters,
        filter: FilterReport {
            verified: totals.filter_verified,
            false_positives_caught: totals.filter_false_positives,
            filter_only_sampled: sampled,
            filter_only_sampled_false: totals.filter_only_sampled_false,
            filter_only_fp_rate: (sampled > 0)
                .then(|| totals.filter_only_sampled_false as f64 / sampled as f64),
        },
        burst_ns: Percentiles::of(&hist),
        capture_error: capture_error.map(|e| e.to_string()),
        totals,
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
