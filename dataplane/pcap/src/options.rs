//! What a replay is asked to do.

use std::path::PathBuf;
use std::sync::Arc;

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
    /// Export every flow's records as IPFIX to these collectors (UDP),
    /// with the capture's timestamps; empty: no export.
    pub ipfix: Vec<std::net::SocketAddr>,
    /// Each worker's flow cache, when exporting.
    pub ipfix_cache: cfdp_export::CacheSettings,
    /// The observation domain id of the messages.
    pub ipfix_domain: u32,
    /// 1 in this many of the frames each worker receives is exported (1:
    /// every frame).
    pub ipfix_sampling: u32,
    /// The PEN each record names its rule under (0: not named; the
    /// caches then keep no rule).
    pub ipfix_rule_pen: u32,
}

impl ReplayOptions {
    /// A plain lossless replay of `input` on `workers` workers: no output
    /// capture, no flow CSV, no progress line, no pacing, read once.
    pub fn new(input: PathBuf, workers: usize) -> Self {
        Self {
            input,
            out: None,
            workers,
            flows_csv: None,
            progress: false,
            stop: None,
            repeat: false,
            drop_when_full: false,
            pps: 0,
            ipfix: Vec::new(),
            ipfix_cache: cfdp_export::CacheSettings::default(),
            ipfix_domain: 0,
            ipfix_sampling: 1,
            ipfix_rule_pen: 0,
        }
    }
}
