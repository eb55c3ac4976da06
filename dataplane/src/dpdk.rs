//! The DPDK backend (cargo feature `dpdk`): worker threads poll NIC receive
//! queues run-to-completion, l3fwd style — receive a burst, enter the
//! published tables once, decode and match the burst in place (zero-copy:
//! the worker reads the mbufs' data), transmit by verdict, free what is
//! dropped or not accepted by a transmit queue.
//!
//! Ports: `rx_ports` are polled (queue w of each by worker w, with RSS on
//! the 5-tuple across queues where the device offers it); `tx_ports[n]` is
//! output port n: forwarded packets leave through `tx_ports[0]`, `redirect
//! N` through `tx_ports[N]` (a redirect to a port not listed is dropped and
//! counted as `tx_dropped`). Worker w transmits on queue w of its port.
//!
//! The control plane, statistics and rule updates are the same as with the
//! pcap backend: workers share the [`Dataplane`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_dpdk_sys::{Eal, PortStats, RxBurst, ThreadRegistration, MAX_BURST as DPDK_BURST};
use serde::Serialize;

use crate::decode::LinkType;
use crate::matcher::MAX_BURST;
use crate::replay::Dataplane;
pub use crate::run::DpdkConfig;
use crate::worker::{PacketRef, Verdict, Worker};

const _: () = assert!(DPDK_BURST == MAX_BURST);

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

/// Initialises the EAL with `cfg.eal_args` (once per process).
pub fn init_eal(cfg: &DpdkConfig) -> Result<Eal, String> {
    let mut args = vec!["cfdp".to_string()];
    args.extend(cfg.eal_args.iter().cloned());
    Eal::init(&args)
}

/// Runs the workers on the EAL's ports until `stop` (or idle). The caller
/// owns the EAL (and cleans it up).
pub fn run(
    eal: &Eal,
    cfg: &DpdkConfig,
    dp: &Dataplane,
    stop: &Arc<AtomicBool>,
) -> Result<DpdkReport, String> {
    let workers = cfg.workers.max(1);
    if dp.stats.workers.len() < workers as usize {
        return Err(format!(
            "statistics for {} workers, {workers} asked for",
            dp.stats.workers.len()
        ));
    }
    if cfg.rx_ports.is_empty() {
        return Err("dpdk.rx_ports is empty".into());
    }
    if !cfg.worker_cpus.is_empty() && cfg.worker_cpus.len() != usize::from(workers) {
        return Err(format!(
            "dpdk.worker_cpus lists {} CPUs for {workers} workers",
            cfg.worker_cpus.len()
        ));
    }
    if !(1..=MAX_BURST).contains(&cfg.burst) {
        return Err(format!(
            "dpdk.burst = {}: must be 1..={MAX_BURST}",
            cfg.burst
        ));
    }
    let id = |name: &String| eal.port_by_name(name);
    let rx: Vec<u16> = cfg.rx_ports.iter().map(id).collect::<Result<_, _>>()?;
    let tx: Vec<u16> = cfg.tx_ports.iter().map(id).collect::<Result<_, _>>()?;
    let pool = eal.mempool("cfdp_mbufs", cfg.mempool_size, 256)?;
    let mut all: Vec<u16> = rx.iter().chain(&tx).copied().collect();
    all.sort_unstable();
    all.dedup();
    let mut rss = Vec::new();
    for &p in &all {
        let rxq = if rx.contains(&p) { workers } else { 0 };
        let txq = if tx.contains(&p) { workers } else { 0 };
        rss.push(eal.port_start(p, rxq, txq, cfg.descriptors, &pool)?);
    }
    let idle_limit =
        (cfg.stop_when_idle_ms > 0).then(|| Duration::from_millis(cfg.stop_when_idle_ms));
    let start = Instant::now();
    let burst = cfg.burst;
    let result: Result<Vec<u64>, String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (rx, tx) = (rx.clone(), tx.clone());
                let tables = dp.readers.handle();
                let matcher = dp.matcher;
                let stats = Arc::clone(&dp.stats);
                let stop = Arc::clone(stop);
                let cpu = cfg.worker_cpus.get(usize::from(w)).copied();
                s.spawn(move || -> Result<u64, String> {
                    if let Some(cpu) = cpu {
                        let mut set = rustix::thread::CpuSet::new();
                        set.set(cpu);
                        rustix::thread::sched_setaffinity(None, &set)
                            .map_err(|e| format!("pinning worker {w} to CPU {cpu}: {e}"))?;
                    }
                    let _reg = ThreadRegistration::new()?;
                    let mut worker = Worker::new(Arc::clone(&stats), w as usize, false);
                    let mut b = RxBurst::new();
                    let mut tx_dropped = 0u64;
                    let mut last_packet = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let mut got = 0;
                        for &port in &rx {
                            let n = b.receive(port, w, burst);
                            if n == 0 {
                                continue;
                            }
                            got += n;
                            let refs: [PacketRef<'_>; MAX_BURST] = std::array::from_fn(|i| {
                                let (data, orig_len) =
                                    if i < n { b.frame(i) } else { (&[][..], 0) };
                                PacketRef {
                                    link: LinkType::Ethernet,
                                    ts_ns: 0,
                                    orig_len,
                                    data,
                                }
                            });
                            let mut verdicts = [Verdict::Forward; MAX_BURST];
                            if let Some(t) = tables.enter() {
                                worker.process(&matcher, &t, &refs[..n], &mut verdicts);
                            }
                            let mut dest = [None; MAX_BURST];
                            for i in 0..n {
                                dest[i] = match verdicts[i] {
                                    Verdict::Forward => tx.first().map(|&p| (p, w)),
                                    Verdict::Redirect(p) => tx.get(p as usize).map(|&p| (p, w)),
                                    Verdict::Drop => None,
                                };
                                if dest[i].is_none() && verdicts[i] != Verdict::Drop {
                                    tx_dropped += 1; // no such output port
                                }
                            }
                            tx_dropped += b.dispatch(&dest[..n]).tx_dropped;
                        }
                        if got > 0 {
                            last_packet = Instant::now();
                        } else if idle_limit.is_some_and(|l| last_packet.elapsed() > l) {
                            break;
                        }
                    }
                    worker.flush_histogram();
                    stats.workers[w as usize]
                        .tx_dropped
                        .fetch_add(tx_dropped, Ordering::Relaxed);
                    Ok(tx_dropped)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "DPDK worker panicked".to_string())?)
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let tx_dropped = result?.iter().sum();
    let ports = all
        .iter()
        .map(|&p| {
            let name = cfg
                .rx_ports
                .iter()
                .chain(&cfg.tx_ports)
                .find(|n| eal.port_by_name(n).ok() == Some(p))
                .cloned()
                .unwrap_or_default();
            (
                name,
                eal.port_stats(p)
                    .map(PortStatsJson::from)
                    .unwrap_or(PortStatsJson::from(PortStats::default())),
            )
        })
        .collect();
    for &p in &all {
        eal.port_stop(p);
    }
    let packets = dp.stats.totals().packets;
    Ok(DpdkReport {
        elapsed_s: elapsed,
        mpps: packets as f64 / elapsed.max(1e-9) / 1e6,
        rss,
        tx_dropped,
        ports,
    })
}
