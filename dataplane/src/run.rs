//! `cfdp run`: the long-running form, configured by TOML (the `config`
//! crate) with `CFDP_<SECTION>__<KEY>` environment overrides. The embedded
//! default is `configs/default.toml`, compiled in.
//!
//! With the pcap backend it replays the input (again and again when
//! `pcap.loop = true`), printing one JSON summary line per pass on stdout,
//! and keeps running after the input is exhausted (the control socket of
//! the next milestone will serve there) until SIGINT or SIGTERM. The first
//! signal stops reading, lets the workers drain, flushes the output and
//! prints the final line; a second signal exits at once.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::matcher::{Matcher, Mode};
use crate::replay::{replay, ReplayOptions};

/// The embedded default configuration.
pub const DEFAULT_CONFIG: &str = include_str!("../../configs/default.toml");

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    pub dataplane: DataplaneConfig,
    pub pcap: PcapConfig,
    pub rules: RulesConfig,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneConfig {
    pub workers: usize,
    pub mode: Mode,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcapConfig {
    pub input: PathBuf,
    pub output: String,
    #[serde(rename = "loop")]
    pub repeat: bool,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RulesConfig {
    /// Empty: no rules (everything forwarded).
    pub file: String,
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

/// Runs until a signal. Returns the process exit code.
pub fn run(cfg: RunConfig, default_workers: usize) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while stopping exits at once.
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(sig, Arc::clone(&stop)))
            .map_err(|e| format!("cannot install signal handler: {e}"))?;
    }
    let rules = if cfg.rules.file.is_empty() {
        cfdp_rules::RuleSet::default()
    } else {
        cfdp_rules::load_rule_file(Path::new(&cfg.rules.file))
            .map_err(|e| format!("{}: {e}", cfg.rules.file))?
    };
    let matcher = Arc::new(Matcher::new(rules, cfg.dataplane.mode)?);
    let workers = if cfg.dataplane.workers == 0 {
        default_workers
    } else {
        cfg.dataplane.workers
    };
    let opts = ReplayOptions {
        input: cfg.pcap.input.clone(),
        out: (!cfg.pcap.output.is_empty()).then(|| PathBuf::from(&cfg.pcap.output)),
        workers,
        flows_csv: None,
        progress: false,
        stop: Some(Arc::clone(&stop)),
    };
    let mut pass = 0u64;
    loop {
        pass += 1;
        let report = replay(&opts, Arc::clone(&matcher)).map_err(|e| e.to_string())?;
        let mut line = serde_json::to_value(&report).map_err(|e| e.to_string())?;
        line["pass"] = pass.into();
        println!("{line}");
        if let Some(e) = &report.capture_error {
            eprintln!("cfdp: {}: {e}", cfg.pcap.input.display());
        }
        if stop.load(Ordering::Relaxed) || !cfg.pcap.repeat {
            break;
        }
    }
    if !stop.load(Ordering::Relaxed) {
        eprintln!("cfdp: input exhausted; serving until SIGINT/SIGTERM");
        while !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!("cfdp: stopped after {pass} pass(es)");
    Ok(())
}
