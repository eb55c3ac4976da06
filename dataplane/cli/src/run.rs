//! `cfdp run`: the long-running form (configuration: `config.rs`).
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cfdp_control::journal::Journal;
use cfdp_control::metrics;
use cfdp_control::plane::{ControlPlane, PlaneConfig};
use cfdp_control::recover::connections::{self, Connections, StateFileError};
use cfdp_control::recover::{recover, Source};
use cfdp_control::server::{self, ServerCtx};
use cfdp_control::settings::{ControlSection, SettingError};
use cfdp_control::RuleStore;
use cfdp_engine::{LiveStats, WorkerContext};
use cfdp_pcap::{replay, ReplayOptions, MAX_WORKERS};
use serde_json::{json, Value};

use cfdp_config::{Overload, RunConfig};

/// Pause points for tests, set by hidden command-line flags: never part of
/// the configuration an operator writes.
#[derive(Clone, Debug, Default)]
pub struct TestHooks {
    /// `PlaneConfig::hold_batches`.
    pub hold_batches: Option<PathBuf>,
}
use crate::error::RunError;

mod ipfix;
mod p4runtime;

/// The connections the last graceful stop saved, restored into `table`
/// (or said lost), and what was found said.
fn restore_connections(
    dir: &Path,
    table: &cfdp_conntrack::ConnTable,
    store: &RuleStore,
) -> Result<(), RunError> {
    let file = dir.join(connections::FILE);
    match connections::restore(dir, table, store).map_err(state_file)? {
        Connections::Nothing => {}
        Connections::LostInCrash => eprintln!(
            "cfdp: the last run did not stop cleanly (a crash or SIGKILL): its tracked \
             connections are lost; stateful rules start with an empty connection table"
        ),
        Connections::Restored { taken, saved } => eprintln!(
            "cfdp: restored {taken} of {saved} tracked connections from {}",
            file.display()
        ),
        Connections::Damaged(e) => eprintln!(
            "cfdp: {}: {e}: tracked connections start empty",
            file.display()
        ),
    }
    Ok(())
}

/// A connection-table state file's error, as `cfdp run` reports I/O.
fn state_file(e: StateFileError) -> RunError {
    RunError::Io {
        what: e.what.to_string(),
        source: e.source,
    }
}

/// Builds the rule store: restored from `control.state_dir` when it holds
/// state, else loaded from `rules.file` (`cfdp_control::recover`, where
/// each branch is tested). Returns the journal to append to.
fn build_store(
    cfg: &RunConfig,
    stats: Arc<LiveStats>,
) -> Result<(RuleStore, Option<Journal>), RunError> {
    let scfg = crate::load::store_config(cfg)?;
    let rules_file = (!cfg.rules.file.is_empty()).then(|| Path::new(&cfg.rules.file));
    let dir = cfg.control.state_dir();
    if let Some(dir) = &dir {
        private_dir(dir, "control.state_dir")?;
    }
    let r = recover(dir.as_deref(), rules_file, scfg, stats)?;
    if let Some(w) = &r.dropped_tail {
        eprintln!("cfdp: warning: {w}");
    }
    let shown = dir
        .as_deref()
        .map_or_else(String::new, |d| d.display().to_string());
    match r.source {
        Source::Fallback => {}
        Source::SavedFallback => eprintln!(
            "cfdp: state_dir {shown} was empty: saved {} rules from {}",
            r.store.len(),
            if rules_file.is_some() {
                &cfg.rules.file
            } else {
                "nowhere"
            }
        ),
        Source::Restored {
            snapshot_generation,
            records,
        } => {
            if rules_file.is_some() {
                eprintln!(
                    "cfdp: rules.file {} ignored: restored the saved rule set instead",
                    cfg.rules.file
                );
            }
            eprintln!(
                "cfdp: restored {} rules at generation {} from {shown} (snapshot {snapshot_generation} + {records} journal records)",
                r.store.len(),
                r.store.generation(),
            );
        }
    }
    Ok((r.store, r.journal))
}

/// Runs until a signal (or, without `pcap.loop`, until the input is replayed
/// and a signal arrives).
pub fn run(cfg: RunConfig, default_workers: usize, hooks: TestHooks) -> Result<(), RunError> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while stopping exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(RunError::io("cannot install signal handler"))?;
    }
    check(&cfg)?;
    let workers = worker_count(&cfg, default_workers)?;
    let stats = Arc::new(LiveStats::new(workers, cfg.control.max_rules));
    let (mut store, journal) = build_store(&cfg, Arc::clone(&stats))?;
    let table = conntrack_table(&cfg.conntrack)?;
    // The connections a graceful stop saved come back (state_dir only).
    let saved_in = cfg.control.state_dir();
    if let Some(dir) = &saved_in {
        restore_connections(dir, &table, &store)?;
    }
    store.set_conntrack(Arc::clone(&table));
    let cx = store.worker_context();
    let c = &cfg.control;
    let plane_cfg = PlaneConfig {
        hold_batches: hooks.hold_batches,
        ..c.plane()
    };
    let plane = ControlPlane::new(store, journal, plane_cfg);
    let (jobs_tx, jobs_rx) = crossbeam::channel::bounded(1024);
    let ctx = ServerCtx {
        limits: c.limits(rustix::process::getuid().as_raw()),
        control: cfdp_control::ControlHandle::new(jobs_tx),
        board: plane.board(),
        stop: Arc::clone(&stop),
        slots: cfdp_control::slots::Slots::new(c.slot_limits()),
        parsing: server::ParseBudget::new(c.max_parse_bytes),
        cluster: cluster_mode(&cfg)?,
    };
    // The P4Runtime door's metrics join the export.
    let p4_metrics = cfdp_p4runtime::P4Metrics::default();
    let extra = [p4_metrics.exporter()];
    // P4Runtime is bound before the listeners serve: once the control
    // socket answers, every door is open (scripts wait for the socket
    // alone). Its requests queue until the control thread starts below.
    let p4 = p4runtime::spawn_p4runtime(&cfg, &ctx.control, p4_metrics, &stop)?;
    // A configuration error in the listeners stops the start-up here.
    let mut listeners = match listen(c, &ctx, &extra) {
        Ok(l) => l,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            if let Some(p4) = p4 {
                let _ = p4.join();
            }
            return Err(e);
        }
    };
    listeners.extend(p4);
    let (ctx_cluster, handle, board) =
        (ctx.cluster.clone(), ctx.control.clone(), ctx.board.clone());
    drop(ctx);
    let control = {
        let stop = Arc::clone(&stop);
        let mut plane = plane;
        std::thread::Builder::new()
            .name("cfdp-control".into())
            .spawn(move || {
                plane.run(jobs_rx, &stop);
                plane
            })
            .map_err(RunError::io("control thread"))?
    };
    if let Some(link) = &ctx_cluster {
        listeners.push(spawn_agent(&cfg, &handle, &stats, link, &stop)?);
    }
    let running = Running {
        stop: Arc::clone(&stop),
        board,
        control,
        listeners,
        conntrack: saved_in.map(|dir| (table, dir)),
    };
    if cfg.dpdk.enabled {
        return run_dpdk(&cfg, &cx, running);
    }
    run_pcap(&cfg, &cx, workers, running)
}

/// Checks (and creates) a directory cfdp keeps private: another owner or
/// a link is refused, an open mode is tightened to 0700 and said so.
fn private_dir(dir: &Path, what: &str) -> Result<(), RunError> {
    match cfdp_control::files::private_dir(dir) {
        Ok(Some(mode)) => {
            eprintln!(
                "cfdp: warning: {what} {} had mode {mode:o}: set to 0700",
                dir.display()
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(RunError::io(format!("{what} {}", dir.display()))(e)),
    }
}

/// Workers: DPDK's, the configured number, or the default.
fn worker_count(cfg: &RunConfig, default_workers: usize) -> Result<usize, RunError> {
    let workers = if cfg.dpdk.enabled {
        usize::from(cfg.dpdk.workers.max(1))
    } else if cfg.dataplane.workers == 0 {
        default_workers
    } else {
        cfg.dataplane.workers
    };
    if workers > MAX_WORKERS {
        return Err(RunError::Setting(SettingError::new(
            "dataplane",
            "workers",
            workers,
            format!("at most {MAX_WORKERS} are supported"),
        )));
    }
    Ok(workers)
}

/// Binds and serves the configured listeners: the Unix socket, TCP, the
/// metrics endpoint.
fn listen(
    c: &ControlSection,
    ctx: &ServerCtx,
    extra_metrics: &[metrics::ExtraMetrics],
) -> Result<Vec<std::thread::JoinHandle<()>>, RunError> {
    let mut listeners = Vec::new();
    if !c.socket.is_empty() {
        let path = PathBuf::from(&c.socket);
        let access = c.socket_access(rustix::process::getuid().as_raw());
        let l = server::bind_unix(&path, access)?;
        listeners.push(
            server::serve_unix(l, path, ctx.clone())
                .map_err(RunError::io("control socket thread"))?,
        );
        eprintln!("cfdp: control socket {}", c.socket);
    }
    if let Some(addr) = c.tcp_addr()? {
        // The address is checked (and bound) before the token file is
        // touched: a refused address leaves no token behind.
        let l = bind_tcp(addr, "tcp")?;
        let bound = local_addr(&l, "control.tcp")?;
        if let Some(d) = Path::new(&c.token_file)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            private_dir(d, "control.token_file's directory")?;
        }
        let token = cfdp_control::auth::Token::load_or_create(Path::new(&c.token_file))
            .map_err(RunError::Token)?;
        listeners.push(
            server::serve_tcp(l, ctx.clone(), token).map_err(RunError::io("control TCP thread"))?,
        );
        eprintln!(
            "cfdp: control over TCP on {bound} (token in {})",
            c.token_file
        );
    }
    if let Some(addr) = c.metrics_addr()? {
        let l = bind_tcp(addr, "metrics")?;
        let bound = local_addr(&l, "control.metrics")?;
        listeners.push(
            metrics::serve(l, ctx.clone(), extra_metrics)
                .map_err(RunError::io("metrics thread"))?,
        );
        eprintln!("cfdp: metrics on http://{bound}/metrics");
    }
    Ok(listeners)
}

/// What the backends hand back when they are done.
struct Running {
    stop: Arc<AtomicBool>,
    /// The control thread's statistics, for readers beside the socket
    /// (DPDK telemetry).
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    board: cfdp_control::stats::StatsBoard,
    control: std::thread::JoinHandle<ControlPlane>,
    listeners: Vec<std::thread::JoinHandle<()>>,
    /// The connection table and the state_dir it is saved in at a
    /// graceful stop.
    conntrack: Option<(Arc<cfdp_conntrack::ConnTable>, std::path::PathBuf)>,
}

impl Running {
    /// Stops the control thread (it finishes the request in hand: batches
    /// are journaled before they are acknowledged) and the listeners, and
    /// returns the final line's common part: the control plane's typed
    /// statistics, `final: true` and the backend's name.
    fn finish(self, backend: &str) -> Result<Value, RunError> {
        self.stop.store(true, Ordering::Relaxed);
        let plane = self.control.join().map_err(|_| RunError::ControlPanicked)?;
        for l in self.listeners {
            let _ = l.join();
        }
        // The workers have stopped: the table is still.
        if let Some((table, dir)) = &self.conntrack {
            let n = connections::save(dir, table, &plane.store).map_err(state_file)?;
            eprintln!("cfdp: saved {n} tracked connections for the next start");
        }
        let mut line = serde_json::to_value(plane.stats()).map_err(RunError::Json)?;
        line["final"] = true.into();
        line["backend"] = backend.into();
        Ok(line)
    }
}

fn run_pcap(
    cfg: &RunConfig,
    cx: &WorkerContext,
    workers: usize,
    running: Running,
) -> Result<(), RunError> {
    let stop = Arc::clone(&running.stop);
    let (collectors, cache) = ipfix::settings(cfg)?;
    let opts = ReplayOptions {
        out: (!cfg.pcap.output.is_empty()).then(|| PathBuf::from(&cfg.pcap.output)),
        stop: Some(Arc::clone(&stop)),
        repeat: cfg.pcap.repeat,
        drop_when_full: cfg.dataplane.overload == Overload::Drop,
        pps: cfg.pcap.pps,
        ipfix: collectors,
        ipfix_cache: cache,
        ipfix_domain: cfg.ipfix.observation_domain,
        ipfix_sampling: cfg.ipfix.sampling,
        ipfix_rule_pen: cfg.ipfix.rule_pen,
        ..ReplayOptions::new(cfg.pcap.input.clone(), workers)
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
        let line = json!({
            "pass": pass, "packets": frames, "workers": workers,
            "rx_dropped": cx.stats.rx_dropped(),
            "elapsed_s": started.elapsed().as_secs_f64(),
        });
        println!("{line}");
    };
    let result = replay(&opts, cx, &mut on_pass);
    if result.is_ok() && !stop.load(Ordering::Relaxed) {
        eprintln!("cfdp: input exhausted; serving until SIGINT/SIGTERM");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // The reader has stopped and the workers drained.
    let mut line = running.finish("pcap")?;
    let report = result.map_err(RunError::PcapReplay)?;
    line["replay"] = json!({
        "passes": report.passes,
        "frames_read": report.frames_read,
        "elapsed_s": report.elapsed_s,
        "mpps": report.mpps,
        "workers": report.workers,
        "capture_error": report.capture_error,
    });
    println!("{line}");
    if let Some(e) = &report.capture_error {
        eprintln!("cfdp: {}: {e}", cfg.pcap.input.display());
    }
    eprintln!("cfdp: stopped after {} pass(es)", report.passes);
    Ok(())
}

/// The DPDK backend's run: workers poll until a signal (or idle), then the
/// control thread stops and the final line is printed.
#[cfg(feature = "dpdk")]
fn run_dpdk(cfg: &RunConfig, cx: &WorkerContext, running: Running) -> Result<(), RunError> {
    let d = &cfg.dpdk;
    // Before the EAL, as its start-up errors are: a refusal leaves
    // nothing to clean up.
    let (exporter, wopts) = ipfix::start(cfg, cx)?;
    let eal = cfdp_dpdk::backend::init_eal(&d.eal_args).map_err(|source| RunError::Dpdk {
        what: "EAL",
        source,
    })?;
    // Telemetry is an extra window on the statistics: a failure to
    // register (telemetry disabled with --no-telemetry) is reported, not
    // fatal.
    if let Err(e) = crate::telemetry::register(&eal, &running.board) {
        eprintln!("cfdp: DPDK telemetry commands not registered: {e}");
    }
    let result = cfdp_dpdk::backend::run(&eal, d, cx, &running.stop, &wopts);
    // Every worker's cache was flushed into the queue: what is left is
    // sent before the final statistics (whose `export` counts it).
    drop(wopts);
    if let Some(x) = exporter {
        x.finish();
    }
    let finished = running.finish("dpdk");
    eal.cleanup();
    let report = result.map_err(|source| RunError::Dpdk {
        what: "DPDK backend",
        source,
    })?;
    let mut line = finished?;
    line["dpdk"] = serde_json::to_value(&report).map_err(RunError::Json)?;
    println!("{line}");
    eprintln!("cfdp: stopped");
    Ok(())
}

#[cfg(not(feature = "dpdk"))]
fn run_dpdk(_: &RunConfig, _: &WorkerContext, running: Running) -> Result<(), RunError> {
    // Refused at start-up without the dpdk feature; stop cleanly anyway.
    running.finish("dpdk")?;
    Err(RunError::NotBuiltWith {
        setting: "dpdk.enabled",
        feature: "dpdk",
    })
}

/// The address a listener bound: what `cfdp run` prints for each door,
/// so that a configured port 0 (the kernel's choice) can be read back.
fn local_addr(l: &std::net::TcpListener, what: &str) -> Result<std::net::SocketAddr, RunError> {
    l.local_addr().map_err(RunError::io(what.to_string()))
}

/// Binds a door's (checked) address.
fn bind_tcp(addr: std::net::SocketAddr, key: &str) -> Result<std::net::TcpListener, RunError> {
    std::net::TcpListener::bind(addr).map_err(RunError::io(format!("control.{key} = {addr}")))
}

/// What the configuration asks of this build and of its ports and fleet,
/// checked before anything starts (the rules load, which can take
/// seconds; the EAL): a refusal here is a configuration error (exit 2).
pub fn check(cfg: &RunConfig) -> Result<(), RunError> {
    cfg.control.check()?;
    conntrack_check(&cfg.conntrack)?;
    ipfix::settings(cfg)?;
    crate::descriptors::ensure(cfg)?;
    if cfg.dpdk.enabled && !cfg!(feature = "dpdk") {
        return Err(RunError::NotBuiltWith {
            setting: "dpdk.enabled",
            feature: "dpdk",
        });
    }
    #[cfg(feature = "dpdk")]
    if cfg.dpdk.enabled {
        cfdp_dpdk::PortPlan::new(&cfg.dpdk.rx_ports, &cfg.dpdk.tx_ports, &cfg.dpdk.xconnect)
            .map_err(|source| RunError::Dpdk {
                what: "dpdk ports",
                source,
            })?;
    }
    p4runtime::p4runtime_options(cfg)?;
    cluster_mode(cfg).map(|_| ())
}

/// `[conntrack]`, checked.
fn conntrack_check(c: &cfdp_conntrack::ConntrackSection) -> Result<(), RunError> {
    c.check().map_err(setting)
}

fn setting(b: cfdp_conntrack::settings::BadSetting) -> RunError {
    RunError::Setting(SettingError::new("conntrack", b.key, b.value, b.need))
}

/// The connection table of `[conntrack]`, keyed by random secrets (its
/// keys come from the network).
pub fn conntrack_table(
    c: &cfdp_conntrack::ConntrackSection,
) -> Result<Arc<cfdp_conntrack::ConnTable>, RunError> {
    let secret = cfdp_control::store::random_secret().map_err(|e| {
        RunError::io("drawing the connection table's secret")(std::io::Error::other(e))
    })?;
    c.table(secret).map(Arc::new).map_err(setting)
}

/// `[cluster]`: checked (and the link to the agent made) before anything
/// starts.
fn cluster_mode(cfg: &RunConfig) -> Result<Option<Arc<server::ClusterMode>>, RunError> {
    let c = &cfg.cluster;
    if !c.enabled() {
        return Ok(None);
    }
    if !cfdp_cluster::AVAILABLE {
        return Err(RunError::NotBuiltWith {
            setting: "cluster.etcd",
            feature: "etcd",
        });
    }
    c.check()?;
    let keys = c.keys()?;
    Ok(Some(Arc::new(server::ClusterMode {
        prefix: keys.prefix().to_string(),
        status: std::sync::Mutex::new(cfdp_control::api::NodeStatus {
            node: c.node_name(),
            error: Some("not connected to etcd yet".into()),
            ..Default::default()
        }),
    })))
}

#[cfg(feature = "etcd")]
fn spawn_agent(
    cfg: &RunConfig,
    jobs: &cfdp_control::ControlHandle,
    stats: &Arc<LiveStats>,
    link: &Arc<server::ClusterMode>,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, RunError> {
    let opts = cfg.cluster.node_options(cfg.control.state_dir());
    eprintln!(
        "cfdp: cluster node {} of {} at {}",
        opts.node,
        link.prefix,
        opts.endpoints.join(",")
    );
    cfdp_cluster::node::spawn(
        opts,
        jobs.clone(),
        Arc::clone(stats),
        Arc::clone(link),
        Arc::clone(stop),
    )
    .map_err(RunError::Cluster)
}

#[cfg(not(feature = "etcd"))]
fn spawn_agent(
    _: &RunConfig,
    _: &cfdp_control::ControlHandle,
    _: &Arc<LiveStats>,
    _: &Arc<server::ClusterMode>,
    _: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, RunError> {
    Err(RunError::NotBuiltWith {
        setting: "cluster.etcd",
        feature: "etcd",
    })
}
