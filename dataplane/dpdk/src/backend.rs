//! The DPDK backend: worker threads poll NIC receive queues
//! run-to-completion, l3fwd style — each runs the engine's one worker loop
//! (`cfdp_engine::run_worker`) over a [`DpdkBackend`]: receive a burst,
//! process it in place (zero-copy: the worker reads the mbufs' data),
//! transmit by verdict, free what is dropped or not accepted by a transmit
//! queue.
//!
//! Ports, two ways (see [`PortPlan`]):
//! * **one-way**: `rx_ports` are polled; forwarded packets leave through
//!   `tx_ports[0]`;
//! * **cross-connect** (`xconnect`, VPP's l2 xconnect, l2fwd's port
//!   pairs): every port of every pair is polled, and a packet received on
//!   one port of a pair and forwarded leaves by the other.
//!
//! In both, `tx_ports[n]` is output port n for `redirect N` (a redirect to
//! a port not listed is dropped and counted as `tx_dropped`). Queue w of
//! every polled port is polled by worker w (RSS with a symmetric key
//! spreads flows over the queues where the device offers it, so both
//! directions of a flow meet at one worker), and worker w transmits on
//! queue w of every output port. Bursts are stamped with a monotonic
//! clock, by which fragment entries age.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use cfdp_engine::backend::{Backend, Frames, Rx};
use cfdp_engine::{run_worker, PacketRef, Released, Verdict, Worker, WorkerContext, WorkerOptions};
use cfdp_packet::LinkType;
use serde::Serialize;

use crate::{
    DpdkError, DpdkOptions, Eal, Mempool, PortPlan, PortStats, RxBurst, RxQueue, StartedPort,
    ThreadRegistration, TxQueue, MAX_BURST,
};

const _: () = assert!(cfdp_dpdk_sys::MAX_BURST == MAX_BURST);

/// What a DPDK run reports beside the live statistics.
#[derive(Clone, Debug, Serialize)]
pub struct DpdkReport {
    pub elapsed_s: f64,
    /// Packets the workers processed per second over the run.
    pub mpps: f64,
    pub rss: Vec<bool>,
    pub tx_dropped: u64,
    pub ports: Vec<(String, PortStatsJson)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PortStatsJson {
    pub ipackets: u64,
    pub opackets: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

impl From<PortStats> for PortStatsJson {
    fn from(s: PortStats) -> Self {
        Self {
            ipackets: s.ipackets,
            opackets: s.opackets,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }
}

/// Initialises the EAL with `eal_args` (without the program name).
pub fn init_eal(eal_args: &[String]) -> Result<Eal, DpdkError> {
    let mut args = vec!["cfdp".to_string()];
    args.extend(eal_args.iter().cloned());
    Eal::init(&args)
}

/// A received burst with its arrival time and the queue it came from.
pub struct DpdkFrames<'p> {
    burst: RxBurst<'p>,
    ts_ns: u64,
    /// Index of the receive queue in [`DpdkBackend`]'s `rx`.
    from: usize,
}

impl Frames for DpdkFrames<'_> {
    fn len(&self) -> usize {
        self.burst.len()
    }

    fn packet(&self, i: usize) -> PacketRef<'_> {
        let (data, orig_len) = self.burst.frame(i);
        PacketRef {
            link: LinkType::Ethernet,
            ts_ns: self.ts_ns,
            orig_len,
            data,
            l4_vouched: self.burst.l4_vouched(i),
        }
    }
}

/// One worker's queues: its receive queue on each polled port, its
/// transmit queue on each output port, and where packets go.
pub struct DpdkBackend<'p, 's> {
    rx: Vec<RxQueue<'p>>,
    tx: Vec<TxQueue<'p>>,
    /// Receive queue i → index into `tx` of forwarded packets
    /// ([`NO_PORT`]: none; dropped and counted).
    forward: Vec<usize>,
    /// Output port n of `redirect N` → index into `tx`.
    out: Vec<usize>,
    /// Mbufs for released fragments (copies, sent after their burst).
    pool: &'p Mempool<'p>,
    next_rx: usize,
    burst: usize,
    stop: &'s AtomicBool,
    idle_limit: Option<Duration>,
    clock: Instant,
    /// When the last burst arrived, in `now_ns`'s clock.
    last_packet_ns: u64,
    /// `clock`'s reading, refreshed every [`CLOCK_EVERY`] bursts and when
    /// idle: fragment entries live 30 s, so a clock read (~20 ns) per burst
    /// would buy nothing.
    now_ns: u64,
    bursts: u32,
    /// Frames a transmit queue did not take, or sent to a missing port.
    pub tx_dropped: u64,
}

impl<'p> Backend for DpdkBackend<'p, '_> {
    type Burst = DpdkFrames<'p>;

    fn burst(&self) -> DpdkFrames<'p> {
        DpdkFrames {
            burst: RxBurst::new(),
            ts_ns: 0,
            from: 0,
        }
    }

    fn rx(&mut self, b: &mut DpdkFrames<'p>) -> Rx {
        if self.stop.load(Ordering::Relaxed) {
            return Rx::Done;
        }
        let n = self.rx.len();
        for _ in 0..n {
            let i = self.next_rx;
            self.next_rx = (i + 1) % n;
            if b.burst.receive_from(&mut self.rx[i], self.burst) > 0 {
                self.bursts = self.bursts.wrapping_add(1);
                if self.bursts.is_multiple_of(CLOCK_EVERY) {
                    self.tick();
                }
                self.last_packet_ns = self.now_ns;
                b.ts_ns = self.now_ns;
                b.from = i;
                return Rx::Ready;
            }
        }
        self.tick();
        if self
            .idle_limit
            .is_some_and(|l| self.now_ns - self.last_packet_ns > l.as_nanos() as u64)
        {
            return Rx::Done;
        }
        Rx::Idle
    }

    fn tx(&mut self, b: &mut DpdkFrames<'p>, verdicts: &[Verdict]) {
        // The common burst, every frame forwarded: out as received, with
        // no per-frame destination list built and scanned.
        let q = self.forward[b.from];
        if q < self.tx.len() && verdicts.iter().all(|&v| v == Verdict::Forward) {
            self.tx_dropped += b.burst.send_all(&mut self.tx[q]).tx_dropped;
            return;
        }
        let mut dest = [None; MAX_BURST];
        for (d, v) in dest.iter_mut().zip(verdicts) {
            *d = self.dest(b.from, *v);
        }
        self.tx_dropped += b.burst.dispatch(&dest, &mut self.tx).tx_dropped;
    }

    fn release(&mut self, b: &mut DpdkFrames<'p>, frames: &[Released]) {
        // Held fragments came in where their first fragment did (one
        // datagram, one direction): they leave as it did.
        for chunk in frames.chunks(MAX_BURST) {
            let data: Vec<&[u8]> = chunk.iter().map(|r| &r.frame.data[..]).collect();
            let made = b.burst.copy_in(self.pool, &data);
            self.tx_dropped += (chunk.len() - made) as u64;
            let mut dest = [None; MAX_BURST];
            for (d, r) in dest.iter_mut().zip(&chunk[..made]) {
                *d = self.dest(b.from, r.verdict);
            }
            self.tx_dropped += b.burst.dispatch(&dest, &mut self.tx).tx_dropped;
        }
    }

    fn now_ns(&self) -> u64 {
        self.now_ns
    }
}

/// Bursts between clock reads.
const CLOCK_EVERY: u32 = 16;

/// A transmit index that names no queue: `dispatch` frees the frame and
/// counts it as `tx_dropped`.
const NO_PORT: usize = usize::MAX;

impl DpdkBackend<'_, '_> {
    /// Transmit index of a frame received on queue `from` with verdict `v`
    /// (`NO_PORT`: no such output port; dispatch counts it dropped).
    fn dest(&self, from: usize, v: Verdict) -> Option<usize> {
        match v {
            Verdict::Forward => Some(self.forward[from]),
            Verdict::Redirect(p) => Some(self.out.get(usize::from(p)).copied().unwrap_or(NO_PORT)),
            Verdict::Drop => None,
        }
    }

    fn tick(&mut self) {
        self.now_ns = self.clock.elapsed().as_nanos() as u64;
    }
}

/// Checks the options against the statistics; returns the worker count.
fn check_options(opts: &DpdkOptions, cx: &WorkerContext) -> Result<u16, DpdkError> {
    let workers = opts.workers.max(1);
    if cx.stats.workers.len() < usize::from(workers) {
        return Err(DpdkError::Usage(format!(
            "statistics for {} workers, {workers} asked for",
            cx.stats.workers.len()
        )));
    }
    if !opts.worker_cpus.is_empty() && opts.worker_cpus.len() != usize::from(workers) {
        return Err(DpdkError::Usage(format!(
            "dpdk.worker_cpus lists {} CPUs for {workers} workers",
            opts.worker_cpus.len()
        )));
    }
    if !(1..=MAX_BURST).contains(&opts.burst) {
        return Err(DpdkError::Usage(format!(
            "dpdk.burst = {}: must be 1..={MAX_BURST}",
            opts.burst
        )));
    }
    Ok(workers)
}

/// The plan's port names with their port ids; two names of one device
/// would make one port two, and are refused.
fn resolve_ports(eal: &Eal, plan: &PortPlan) -> Result<Vec<(String, u16)>, DpdkError> {
    let mut ids: Vec<(String, u16)> = Vec::new();
    for name in plan.all() {
        let id = eal.port_by_name(name)?;
        if let Some((other, _)) = ids.iter().find(|(_, i)| *i == id) {
            return Err(DpdkError::Usage(format!(
                "dpdk: {name:?} and {other:?} name the same port ({id})"
            )));
        }
        ids.push((name.clone(), id));
    }
    Ok(ids)
}

/// Starts every port: `workers` receive queues if polled and `workers`
/// transmit queues if an output; queue w of each is worker w's.
fn start_ports<'p>(
    eal: &'p Eal,
    pool: &'p Mempool<'p>,
    plan: &PortPlan,
    ids: &[(String, u16)],
    workers: u16,
    descriptors: u16,
) -> Result<Vec<StartedPort<'p>>, DpdkError> {
    let mut ports = Vec::with_capacity(ids.len());
    for (name, p) in ids {
        let rxq = if plan.polled.contains(name) {
            workers
        } else {
            0
        };
        let txq = if plan.outputs.contains(name) {
            workers
        } else {
            0
        };
        ports.push(
            StartedPort::start(eal, *p, rxq, txq, descriptors, pool)
                .map_err(|e| DpdkError::Usage(format!("{name}: {e}")))?,
        );
    }
    Ok(ports)
}

/// One worker's queues: receive queues, then transmit queues.
type WorkerQueues<'p> = (Vec<RxQueue<'p>>, Vec<TxQueue<'p>>);

/// Hands every worker its queues, in the plan's orders: receive queue w of
/// each polled port, transmit queue w of each output port.
fn queues_per_worker<'p>(
    ports: &'p mut [StartedPort<'_>],
    plan: &PortPlan,
    ids: &[(String, u16)],
    workers: u16,
) -> Result<Vec<WorkerQueues<'p>>, DpdkError> {
    let id = |name: &String| ids.iter().find(|(n, _)| n == name).expect("resolved").1;
    let mut rxq_of: Vec<(u16, Vec<RxQueue<'_>>)> = Vec::new();
    let mut txq_of: Vec<(u16, Vec<TxQueue<'_>>)> = Vec::new();
    for port in ports {
        let pid = port.id();
        let (rxq, txq) = port.queues()?;
        rxq_of.push((pid, rxq));
        txq_of.push((pid, txq));
    }
    let mut per_worker: Vec<WorkerQueues<'p>> =
        (0..workers).map(|_| (Vec::new(), Vec::new())).collect();
    for name in &plan.polled {
        let (_, qs) = rxq_of
            .iter_mut()
            .find(|(p, _)| *p == id(name))
            .expect("polled port started");
        for (w, q) in qs.drain(..).enumerate() {
            per_worker[w].0.push(q);
        }
    }
    for name in &plan.outputs {
        let (_, qs) = txq_of
            .iter_mut()
            .find(|(p, _)| *p == id(name))
            .expect("output port started");
        for (w, q) in qs.drain(..).enumerate() {
            per_worker[w].1.push(q);
        }
    }
    Ok(per_worker)
}

/// Worker `w`'s thread: pinned to `cpu` if given, registered with the EAL,
/// runs the engine's worker loop over `backend` until it is done.
fn poll(
    w: usize,
    cpu: Option<usize>,
    token: crate::EalRef<'_>,
    cx: &WorkerContext,
    mut backend: DpdkBackend<'_, '_>,
    wopts: WorkerOptions,
) -> Result<u64, DpdkError> {
    if let Some(cpu) = cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set)
            .map_err(|e| DpdkError::Usage(format!("pinning worker {w} to CPU {cpu}: {e}")))?;
    }
    let _reg = ThreadRegistration::new(token)?;
    let tables = cx.readers.handle();
    let mut worker = Worker::new(cx, w, wopts);
    run_worker(&mut backend, &mut worker, &tables);
    worker.finish();
    cx.stats.workers[w]
        .tx_dropped
        .fetch_add(backend.tx_dropped, Ordering::Relaxed);
    Ok(backend.tx_dropped)
}

/// Each port's name and counters, at the end of a run.
fn port_report(ports: &[StartedPort<'_>], ids: &[(String, u16)]) -> Vec<(String, PortStatsJson)> {
    ports
        .iter()
        .map(|p| {
            let name = ids
                .iter()
                .find(|(_, i)| *i == p.id())
                .map(|(n, _)| n.clone())
                .unwrap_or_default();
            let st = p.stats().unwrap_or_default();
            (name, PortStatsJson::from(st))
        })
        .collect()
}

/// Runs the workers on the EAL's ports until `stop` (or idle), each with
/// `wopts` (flow export: its clock base is set here, where the workers'
/// clock starts). The caller owns the EAL (and cleans it up).
pub fn run(
    eal: &Eal,
    opts: &DpdkOptions,
    cx: &WorkerContext,
    stop: &AtomicBool,
    wopts: &WorkerOptions,
) -> Result<DpdkReport, DpdkError> {
    let workers = check_options(opts, cx)?;
    let plan = PortPlan::new(&opts.rx_ports, &opts.tx_ports, &opts.xconnect)?;
    let ids = resolve_ports(eal, &plan)?;
    // DPDK names pools process-wide and never frees them: a unique name
    // per run lets one process run the backend more than once (tests).
    static RUNS: AtomicU32 = AtomicU32::new(0);
    let pool_name = format!("cfdp_mbufs{}", RUNS.fetch_add(1, Ordering::Relaxed));
    let pool = eal.mempool(&pool_name, opts.mempool_size, 256)?;
    let mut ports = start_ports(eal, &pool, &plan, &ids, workers, opts.descriptors)?;
    let rss: Vec<bool> = ports.iter().map(StartedPort::rss).collect();
    let idle_limit =
        (opts.stop_when_idle_ms > 0).then(|| Duration::from_millis(opts.stop_when_idle_ms));
    let start = Instant::now();
    let mut wopts = wopts.clone();
    if let Some(x) = &mut wopts.export {
        // Packet times count from `start`; records carry Unix times.
        x.clock_base_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }
    let per_worker = queues_per_worker(&mut ports, &plan, &ids, workers)?;
    let forward: Vec<usize> = plan.forward.iter().map(|f| f.unwrap_or(NO_PORT)).collect();
    let token = eal.token();
    // Scripts wait for this line (bench/dpdk.sh): the rules are loaded and
    // the ports started; the workers poll from here on.
    eprintln!(
        "cfdp: dpdk: polling {} port(s) with {workers} worker(s), rss {:?}",
        plan.polled.len(),
        rss
    );
    let result: Result<Vec<u64>, DpdkError> = std::thread::scope(|s| {
        let handles: Vec<_> = per_worker
            .into_iter()
            .enumerate()
            .map(|(w, (rx, tx))| {
                let backend = DpdkBackend {
                    rx,
                    tx,
                    forward: forward.clone(),
                    out: plan.redirect.clone(),
                    pool: &pool,
                    next_rx: 0,
                    burst: opts.burst,
                    stop,
                    idle_limit,
                    clock: start,
                    last_packet_ns: 0,
                    now_ns: 0,
                    bursts: 0,
                    tx_dropped: 0,
                };
                let cpu = opts.worker_cpus.get(w).copied();
                let wopts = wopts.clone();
                std::thread::Builder::new()
                    .name(format!("cfdp-worker-{w}"))
                    .spawn_scoped(s, move || poll(w, cpu, token, cx, backend, wopts))
                    .expect("spawning a worker thread")
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| DpdkError::Usage("DPDK worker panicked".into()))?
            })
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let tx_dropped = result?.iter().sum();
    let report = port_report(&ports, &ids);
    drop(ports);
    let packets = cx.stats.totals().packets;
    Ok(DpdkReport {
        elapsed_s: elapsed,
        mpps: packets as f64 / elapsed.max(1e-9) / 1e6,
        rss,
        tx_dropped,
        ports: report,
    })
}
