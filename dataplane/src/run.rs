//! `cfdp run`: the long-running form, configured by TOML (the `config`
//! crate) with `CFDP_<SECTION>__<KEY>` environment overrides. The embedded
//! default is `configs/default.toml`, compiled in.
//!
//! With the pcap backend it replays the input (again and again when
//! `pcap.loop = true`, with the same workers and one continuous output),
//! printing one JSON line per pass on stdout, while the control thread
//! serves the control socket; it keeps serving after the input is exhausted
//! until SIGINT or SIGTERM. The first signal stops reading, lets the workers
//! drain, flushes the output, lets the control thread finish the request in
//! hand (batches are journaled before they are acknowledged) and prints the
//! final summary line; a second signal exits at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cfdp_filter::BloomMode;
use cfdp_rules::{Atomicity, Batch, Code, Rule};
use serde::Deserialize;

use crate::control::journal::{self, Journal};
use crate::control::metrics;
use crate::control::plane::{ControlPlane, PlaneConfig};
use crate::control::server::{self, Limits, ServerCtx};
use crate::control::{RuleStore, StoreConfig};
use crate::matcher::Mode;
use crate::replay::{replay, Dataplane, ReplayOptions};
use crate::stats::LiveStats;

/// The embedded default configuration.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/default.toml");

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub dataplane: DataplaneConfig,
    pub pcap: PcapConfig,
    pub rules: RulesConfig,
    pub filter: FilterConfig,
    pub control: ControlConfig,
    pub dpdk: DpdkConfig,
}

/// `[dpdk]`: the NIC backend (cargo feature `dpdk`). See `dpdk.rs`.
#[derive(Clone, Debug, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DpdkConfig {
    /// Use DPDK instead of pcap replay.
    pub enabled: bool,
    /// EAL arguments (without the program name), e.g. `["-l", "0-1",
    /// "--vdev", "net_null0"]`.
    pub eal_args: Vec<String>,
    /// Devices polled for packets (DPDK device names, e.g. `0000:01:00.0`
    /// or `net_pcap0`).
    pub rx_ports: Vec<String>,
    /// Output ports: index n is output port n.
    pub tx_ports: Vec<String>,
    /// Worker threads = receive queues per rx port = transmit queues per
    /// tx port.
    pub workers: u16,
    /// CPU of each worker (worker w is pinned to `worker_cpus[w]`); empty:
    /// not pinned. Keep them off the EAL's main lcore (`-l`).
    pub worker_cpus: Vec<usize>,
    pub mempool_size: u32,
    pub descriptors: u16,
    /// Packets per receive burst (1..=32).
    pub burst: usize,
    /// Stop after this long without a packet on any queue (0: never; for
    /// replays of finite captures through net_pcap).
    pub stop_when_idle_ms: u64,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Overload {
    Block,
    Drop,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    pub workers: usize,
    pub mode: Mode,
    pub overload: Overload,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcapConfig {
    pub input: PathBuf,
    pub output: String,
    #[serde(rename = "loop")]
    pub repeat: bool,
    /// Frames per second to replay at (0: as fast as possible).
    pub pps: u64,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// Empty: no rules (everything forwarded).
    pub file: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum InsertPath {
    Bloom,
    Cuckoo,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterConfig {
    pub flow_capacity: usize,
    pub prefix_capacity: usize,
    pub insert: InsertPath,
    pub bloom_tag_bits: u32,
    pub threshold: u32,
    pub max_kicks: u32,
    pub auto_grow: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlConfig {
    pub socket: String,
    pub allowed_uids: Vec<u32>,
    pub allowed_gids: Vec<u32>,
    pub tcp: String,
    pub tcp_allow_remote: bool,
    pub metrics: String,
    pub state_dir: String,
    pub compact_every: u64,
    pub max_rules: usize,
    pub max_batch: usize,
    pub max_line_bytes: usize,
    pub idle_timeout_s: u64,
    pub max_connections: usize,
    pub migrate_budget: usize,
}

impl RunConfig {
    /// The rule store's parameters.
    pub fn store_config(&self) -> Result<StoreConfig, String> {
        let f = &self.filter;
        let bloom = match (f.insert, f.bloom_tag_bits) {
            (InsertPath::Cuckoo, _) => None,
            (InsertPath::Bloom, 0) => Some(BloomMode::Bit),
            (InsertPath::Bloom, b @ 2..=32) => Some(BloomMode::Tag { bits: b }),
            (InsertPath::Bloom, b) => {
                return Err(format!("filter.bloom_tag_bits = {b}: must be 0 or 2..=32"))
            }
        };
        if !(1..=cfdp_filter::MAX_KICKS_LIMIT).contains(&f.max_kicks) {
            return Err(format!(
                "filter.max_kicks = {}: must be 1..={}",
                f.max_kicks,
                cfdp_filter::MAX_KICKS_LIMIT
            ));
        }
        let c = &self.control;
        if c.max_batch == 0 || c.max_line_bytes < 1024 || c.max_connections == 0 {
            return Err("control: max_batch and max_connections must be ≥ 1, \
                        max_line_bytes ≥ 1024"
                .into());
        }
        Ok(StoreConfig {
            mode: self.dataplane.mode,
            flow_capacity: f.flow_capacity,
            prefix_capacity: f.prefix_capacity,
            bloom,
            threshold: f.threshold,
            max_kicks: f.max_kicks,
            auto_grow: f.auto_grow,
            max_rules: c.max_rules,
        })
    }
}

/// Loads the embedded default, then `path` over it, then the environment.
pub fn load_config(path: Option<&Path>) -> Result<RunConfig, String> {
    use config::{Environment, File, FileFormat};
    let mut b =
        config::Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Toml));
    if let Some(p) = path {
        if !p.exists() {
            return Err(format!("config file {} does not exist", p.display()));
        }
        b = b.add_source(File::from(p).format(FileFormat::Toml));
    }
    b = b.add_source(
        Environment::with_prefix("CFDP")
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true),
    );
    let what = path.map_or("embedded default".to_string(), |p| p.display().to_string());
    b.build()
        .and_then(|c| c.try_deserialize::<RunConfig>())
        .map_err(|e| format!("{what}: {e}"))
}

/// Builds the rule store: restored from `control.state_dir` when it holds
/// state, else loaded from `rules.file`. Returns the journal to append to.
fn build_store(
    cfg: &RunConfig,
    stats: Arc<LiveStats>,
) -> Result<(RuleStore, Option<Journal>), String> {
    let scfg = cfg.store_config()?;
    let file_rules = || -> Result<Vec<Rule>, String> {
        if cfg.rules.file.is_empty() {
            return Ok(Vec::new());
        }
        let set = cfdp_rules::load_rule_file(Path::new(&cfg.rules.file))
            .map_err(|e| format!("{}: {e}", cfg.rules.file))?;
        Ok(set.rules().to_vec())
    };
    if cfg.control.state_dir.is_empty() {
        let store = RuleStore::with_rules(scfg, stats, &file_rules()?)?;
        return Ok((store, None));
    }
    let dir = Path::new(&cfg.control.state_dir);
    let restored = journal::restore(dir).map_err(|e| format!("state_dir: {e}"))?;
    if let Some(w) = &restored.dropped_tail {
        eprintln!("cfdp: warning: {w}");
    }
    if restored.is_empty() {
        let rules = file_rules()?;
        let store = RuleStore::with_rules(scfg, stats, &rules)?;
        let mut j = Journal::open(dir, 0)?;
        j.compact(store.generation(), &store.rules())?;
        eprintln!(
            "cfdp: state_dir {} was empty: saved {} rules from {}",
            dir.display(),
            store.len(),
            if cfg.rules.file.is_empty() {
                "nowhere"
            } else {
                &cfg.rules.file
            }
        );
        return Ok((store, Some(j)));
    }
    let mut store = RuleStore::with_rules(scfg, stats, &restored.rules)
        .map_err(|e| format!("state_dir snapshot does not load: {e}"))?;
    store.set_generation(restored.snapshot_generation);
    for (g, updates) in &restored.records {
        let batch = Batch {
            atomicity: Atomicity::RollbackOnError,
            expected_generation: None,
            updates: updates.iter().map(|u| Ok(*u)).collect(),
        };
        let r = store
            .apply(&batch, |_, _| Ok(()))
            .map_err(|e| format!("journal record {g}: {e}"))?;
        if let Some((i, res)) = r
            .results
            .iter()
            .enumerate()
            .find(|(_, r)| r.code != Code::Ok)
        {
            return Err(format!(
                "journal record {g}, update {}: {:?}: {} (does the configuration still fit \
                 the saved rules?)",
                i + 1,
                res.code,
                res.message
            ));
        }
        if store.generation() != *g {
            return Err(format!(
                "journal record {g} restored as generation {}",
                store.generation()
            ));
        }
    }
    if !cfg.rules.file.is_empty() {
        eprintln!(
            "cfdp: rules.file {} ignored: restored the saved rule set instead",
            cfg.rules.file
        );
    }
    eprintln!(
        "cfdp: restored {} rules at generation {} from {} (snapshot {} + {} journal records)",
        store.len(),
        store.generation(),
        dir.display(),
        restored.snapshot_generation,
        restored.records.len()
    );
    let j = Journal::open(dir, restored.records.len() as u64)?;
    Ok((store, Some(j)))
}

/// Runs until a signal (or, without `pcap.loop`, until the input is replayed
/// and a signal arrives).
pub fn run(cfg: RunConfig, default_workers: usize) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while stopping exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    let workers = if cfg.dpdk.enabled {
        if !cfg!(feature = "dpdk") {
            return Err(
                "dpdk.enabled = true, but this cfdp was built without DPDK: \
                        cargo build --release -p cfdp-dataplane --features dpdk"
                    .into(),
            );
        }
        usize::from(cfg.dpdk.workers.max(1))
    } else if cfg.dataplane.workers == 0 {
        default_workers
    } else {
        cfg.dataplane.workers
    };
    if workers > crate::replay::MAX_WORKERS {
        return Err(format!(
            "dataplane.workers = {workers}: at most {} are supported",
            crate::replay::MAX_WORKERS
        ));
    }
    let stats = Arc::new(LiveStats::new(workers, cfg.control.max_rules));
    let (store, journal) = build_store(&cfg, Arc::clone(&stats))?;
    let dp = Dataplane {
        matcher: store.matcher(),
        readers: store.readers(),
        stats,
    };
    let c = &cfg.control;
    let plane_cfg = PlaneConfig {
        max_batch: c.max_batch,
        max_line_bytes: c.max_line_bytes,
        compact_every: c.compact_every.max(1),
        migrate_budget: c.migrate_budget.max(1),
        ..PlaneConfig::default()
    };
    let (jobs_tx, jobs_rx) = crossbeam::channel::bounded(1024);
    let ctx = ServerCtx {
        limits: Limits {
            max_line_bytes: c.max_line_bytes,
            idle_timeout: Duration::from_secs(c.idle_timeout_s.max(1)),
            max_connections: c.max_connections,
            allowed_uids: if c.allowed_uids.is_empty() && c.allowed_gids.is_empty() {
                vec![rustix::process::getuid().as_raw()]
            } else {
                c.allowed_uids.clone()
            },
            allowed_gids: c.allowed_gids.clone(),
        },
        jobs: jobs_tx,
        stop: Arc::clone(&stop),
        active: Arc::new(AtomicUsize::new(0)),
    };
    // Listeners first: a configuration error stops the start-up here.
    let mut listeners = Vec::new();
    if !c.socket.is_empty() {
        let path = PathBuf::from(&c.socket);
        let l = server::bind_unix(&path).map_err(|e| format!("control.socket: {e}"))?;
        listeners.push(server::serve_unix(l, path, ctx.clone()).map_err(|e| e.to_string())?);
        eprintln!("cfdp: control socket {}", c.socket);
    }
    if !c.tcp.is_empty() {
        let l = bind_tcp(&c.tcp, c.tcp_allow_remote, "control.tcp")?;
        listeners.push(server::serve_tcp(l, ctx.clone()).map_err(|e| e.to_string())?);
        eprintln!("cfdp: control over TCP on {}", c.tcp);
    }
    if !c.metrics.is_empty() {
        let l = bind_tcp(&c.metrics, false, "control.metrics")?;
        listeners.push(metrics::serve(l, ctx.clone()).map_err(|e| e.to_string())?);
        eprintln!("cfdp: metrics on http://{}/metrics", c.metrics);
    }
    drop(ctx);
    let control = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("cfdp-control".into())
            .spawn(move || {
                let mut plane = ControlPlane::new(store, journal, plane_cfg);
                plane.run(jobs_rx, &stop);
                plane
            })
            .map_err(|e| e.to_string())?
    };

    let opts = ReplayOptions {
        input: cfg.pcap.input.clone(),
        out: (!cfg.pcap.output.is_empty()).then(|| PathBuf::from(&cfg.pcap.output)),
        workers,
        flows_csv: None,
        progress: false,
        stop: Some(Arc::clone(&stop)),
        repeat: cfg.pcap.repeat,
        drop_when_full: cfg.dataplane.overload == Overload::Drop,
        pps: cfg.pcap.pps,
    };
    let started = std::time::Instant::now();
    let mut last_line: Option<std::time::Instant> = None;
    let mut on_pass = |pass: u64, frames: u64| {
        // A short capture in a loop finishes thousands of passes a second:
        // one line per 100 ms at most.
        if last_line.is_some_and(|t| t.elapsed() < Duration::from_millis(100)) {
            return;
        }
        last_line = Some(std::time::Instant::now());
        let line = serde_json::json!({
            "pass": pass, "packets": frames, "workers": workers,
            "rx_dropped": dp.stats.rx_dropped(),
            "elapsed_s": started.elapsed().as_secs_f64(),
        });
        println!("{line}");
    };
    if cfg.dpdk.enabled {
        return finish_dpdk(&cfg, &dp, &stop, control, listeners);
    }
    let result = replay(&opts, &dp, &mut on_pass);
    if result.is_ok() && !stop.load(Ordering::Relaxed) {
        eprintln!("cfdp: input exhausted; serving until SIGINT/SIGTERM");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Stop: the reader has stopped and the workers drained; the control
    // thread finishes the request in hand (the journal is synced per batch).
    stop.store(true, Ordering::Relaxed);
    let plane = control
        .join()
        .map_err(|_| "control thread panicked".to_string())?;
    for l in listeners {
        let _ = l.join();
    }
    let report = result.map_err(|e| e.to_string())?;
    let mut line = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    line["final"] = true.into();
    line["generation"] = plane.store.generation().into();
    line["rule_counters"] = plane.stats()["rule_counters"].clone();
    println!("{line}");
    if let Some(e) = &report.capture_error {
        eprintln!("cfdp: {}: {e}", cfg.pcap.input.display());
    }
    eprintln!("cfdp: stopped after {} pass(es)", report.passes);
    Ok(())
}

type ControlThread = std::thread::JoinHandle<ControlPlane>;

/// The DPDK backend's run: workers poll until a signal (or idle), then the
/// control thread stops and the final line is printed.
#[cfg(feature = "dpdk")]
fn finish_dpdk(
    cfg: &RunConfig,
    dp: &Dataplane,
    stop: &Arc<AtomicBool>,
    control: ControlThread,
    listeners: Vec<std::thread::JoinHandle<()>>,
) -> Result<(), String> {
    let eal = crate::dpdk::init_eal(&cfg.dpdk)?;
    let result = crate::dpdk::run(&eal, &cfg.dpdk, dp, stop);
    stop.store(true, Ordering::Relaxed);
    let plane = control
        .join()
        .map_err(|_| "control thread panicked".to_string())?;
    for l in listeners {
        let _ = l.join();
    }
    eal.cleanup();
    let report = result?;
    let (malformed_by, non_ip_by) = crate::replay::causes(&dp.stats);
    let mut line = serde_json::to_value(dp.stats.totals()).map_err(|e| e.to_string())?;
    line["backend"] = "dpdk".into();
    line["dpdk"] = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    line["mpps"] = report.mpps.into();
    line["elapsed_s"] = report.elapsed_s.into();
    line["workers"] = dp.stats.workers.len().into();
    line["malformed_by"] = serde_json::to_value(malformed_by).map_err(|e| e.to_string())?;
    line["non_ip_by"] = serde_json::to_value(non_ip_by).map_err(|e| e.to_string())?;
    line["final"] = true.into();
    line["generation"] = plane.store.generation().into();
    line["rule_counters"] = plane.stats()["rule_counters"].clone();
    println!("{line}");
    eprintln!("cfdp: stopped");
    Ok(())
}

#[cfg(not(feature = "dpdk"))]
fn finish_dpdk(
    _: &RunConfig,
    _: &Dataplane,
    _: &Arc<AtomicBool>,
    _: ControlThread,
    _: Vec<std::thread::JoinHandle<()>>,
) -> Result<(), String> {
    unreachable!("refused at start-up without the dpdk feature")
}

/// Binds a TCP listener; a non-loopback address needs `allow_remote`.
fn bind_tcp(addr: &str, allow_remote: bool, what: &str) -> Result<std::net::TcpListener, String> {
    let sa: std::net::SocketAddr = addr
        .parse()
        .map_err(|e| format!("{what} = {addr:?}: not an IP:port address ({e})"))?;
    if !sa.ip().is_loopback() && !allow_remote {
        return Err(format!(
            "{what} = {addr}: not a loopback address (set control.tcp_allow_remote = true \
             to accept that; the protocol has no authentication on TCP)"
        ));
    }
    std::net::TcpListener::bind(sa).map_err(|e| format!("{what} = {addr}: {e}"))
}
