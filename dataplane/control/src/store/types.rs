//! The store's vocabulary: a committed rule, the domain its key lives in,
//! what a batch reports, and why a batch or a store is refused. Shared by
//! every stage; depends on none of them.

use std::sync::Arc;

use cfdp_filter::Filter;
use cfdp_rules::{Atomicity, Code, HashSecret, Match, PrefixClass, Rule, RuleId, UpdateResult};
use serde::Serialize;

use crate::journal::JournalError;

/// A committed rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Stored {
    pub(super) rule: Rule,
    pub(super) slot: u32,
}

/// Why a batch was refused as a whole (no update was applied).
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("expected generation {expected}, but the rule set is at generation {current}")]
    GenerationMismatch { expected: u64, current: u64 },
    /// The durability hook failed: nothing was published.
    #[error("batch not applied: journal: {0}")]
    NotDurable(#[source] JournalError),
    /// The batch cannot be honoured in this configuration.
    #[error("{0}")]
    Refused(String),
}

/// How a batch's filter inserts went.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct InsertReport {
    /// Filter inserts performed (inserts, and modifies that change a match).
    pub inserts: u64,
    /// Landed in a cuckoo entry.
    pub cuckoo: u64,
    /// Landed in the Bloom part (the item itself).
    pub bloom: u64,
    /// Inserts that grew the Bloom part (the item or an entry it evicted).
    pub bloom_added: u64,
    pub max_iterations: u32,
    pub mean_iterations: f64,
    /// Filters rebuilt at twice the size during this batch.
    pub grown: Vec<String>,
}

/// Where a batch's time went, µs: what the controller waits for, stage by
/// stage (the request's JSON parse happens on the connection thread; the
/// response's serialization and write after this report).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Timing {
    /// Request line → JSON (connection thread) and JSON → typed batch.
    pub parse_us: u64,
    /// Every update checked against the overlay (all-or-nothing modes).
    pub validate_us: u64,
    /// Filter inserts and table operations.
    pub filter_us: u64,
    /// The durability hook: journal write + sync.
    pub journal_us: u64,
    pub journal_write_us: u64,
    pub journal_sync_us: u64,
    /// Publish to the workers, wait for them to leave the old copy, remove
    /// deleted keys.
    pub publish_us: u64,
}

/// The answer to a batch.
#[derive(Clone, Debug, Serialize)]
pub struct BatchReport {
    /// True when the batch changed the rule set.
    pub applied: bool,
    pub atomicity: Atomicity,
    /// Rule-set generation after the batch.
    pub generation: u64,
    pub wall_us: u64,
    pub results: Vec<UpdateResult>,
    pub filter: InsertReport,
    pub timing: Timing,
}

impl BatchReport {
    /// Whether every update succeeded.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| r.code == Code::Ok)
    }
}

/// Where a rule's key lives.
pub(super) enum Domain {
    Flow,
    Class(PrefixClass),
    /// A multi-field rule: in the tables' classifier, in no filter.
    Acl,
}

pub(super) fn domain_and_hash(secret: &HashSecret, m: &Match) -> (Domain, u64) {
    match (m, PrefixClass::of(m)) {
        (Match::Flow(k), _) => (Domain::Flow, k.hash_with(secret)),
        (_, Some((class, addr))) => (Domain::Class(class), class.hash_masked(secret, &addr)),
        (Match::Acl { .. }, _) => (Domain::Acl, 0),
        (Match::Prefix(_), None) => unreachable!("a prefix match has a class"),
    }
}

/// The prefix class a rule's filter key lives in (prefix rules only).
pub(super) fn class_of(m: &Match) -> Option<PrefixClass> {
    match m {
        Match::Prefix(_) => PrefixClass::of(m).map(|(c, _)| c),
        _ => None,
    }
}

/// A version number no earlier call returned (in this process).
pub(super) fn fresh_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Why a rule store could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Slots are `u32`: `max_rules` must fit.
    #[error("max_rules = {0}: must be 1..=2^32-1")]
    MaxRules(usize),
    #[error(transparent)]
    Fingerprint(#[from] cfdp_engine::FingerprintTooNarrow),
    #[error("filter: {0}")]
    FilterConfig(#[from] cfdp_filter::ConfigError),
    #[error("no random bytes for the hash secret: {0}")]
    Random(String),
    /// A filter that cannot hold its keys even at the largest size.
    #[error("{name} filter: {placed} of {total} keys placed at 2^30 buckets")]
    TooLarge {
        name: String,
        placed: usize,
        total: usize,
    },
    #[error("{name} filter: {source} (enable auto_grow or raise its capacity)")]
    Build {
        name: String,
        #[source]
        source: cfdp_filter::BuildError,
    },
    /// A rule the set cannot take (a taken id or match, a bad value);
    /// `index` is its 0-based position.
    #[error("rule #{} (id {id}): {why}", index + 1)]
    Rule {
        index: usize,
        id: RuleId,
        why: String,
    },
}

/// Why an insert is refused: its id is taken (batches and rule files say
/// the same).
pub(super) fn id_taken(id: RuleId) -> String {
    cfdp_rules::decide::Refusal::IdTaken(id).to_string()
}

/// Why an insert or modify is refused: another rule has its match.
pub(super) fn match_taken(other: RuleId) -> String {
    cfdp_rules::decide::Refusal::MatchTaken { by: other }.to_string()
}

pub(super) fn prefix_addr(m: &Match) -> [u8; 16] {
    PrefixClass::of(m).expect("flow rules have no prefix").1
}

/// What a commit leaves for [`RuleStore::settle`].
#[derive(Default)]
pub(super) struct Unsettled {
    pub(super) removals: Vec<(Arc<Filter>, u64, u32)>,
    pub(super) freed_slots: Vec<u32>,
    pub(super) emptied: Vec<PrefixClass>,
}

/// What the background compiles did, for `stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CompileStats {
    pub started: u64,
    pub landed: u64,
    /// Builds refused, whole or for one family (over the compiled layer's
    /// budget; a family compiled in part counts too: its whole tree was
    /// refused).
    pub refused: u64,
    /// The last finished build's time on its thread, seconds.
    pub last_build_s: f64,
    /// The last install's time on the control thread (both copies),
    /// seconds.
    pub last_install_s: f64,
}

/// What a build gives back: the layers, or why not, its time, and its
/// input's buffer (for the next input).
pub(super) type Built = (
    Result<cfdp_engine::acl::compiled::Compiled, cfdp_engine::acl::compiled::CompileError>,
    std::time::Duration,
    Vec<cfdp_engine::acl::compiled::Input>,
);

/// The compile thread's two ends (see `recompile`): started by the first
/// recompile and kept for the next ones.
pub(super) struct Compiler {
    /// A build's input; the thread ends when this end drops.
    pub(super) jobs: crossbeam::channel::Sender<Vec<cfdp_engine::acl::compiled::Input>>,
    pub(super) built: crossbeam::channel::Receiver<Built>,
    /// Rules of the build in flight, if one is.
    pub(super) in_flight: Option<usize>,
    /// The last build's input, handed back: the next input is written
    /// into it.
    pub(super) spare: Vec<cfdp_engine::acl::compiled::Input>,
}
