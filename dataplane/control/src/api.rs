//! The control plane's typed API: what can be asked of the control thread
//! ([`Command`]), what it answers (one type per command), and why it
//! refuses ([`ControlError`]).
//!
//! In-process callers — the fleet agent, the CLI, tests and benches — use
//! [`ControlHandle`], whose methods take and return these types. JSON
//! exists only where bytes cross a process boundary: the socket server
//! turns a request line into a [`Command`] ([`crate::wire`]) and an answer
//! back into a line, and `cfdp ctl` reads those lines.

use cfdp_engine::Mode;
use cfdp_rules::protocol::code;
use cfdp_rules::{
    Action, Atomicity, Batch, BatchError, FlowKey, Match, ReplaceCounts, Rule, RuleId,
};

pub use crate::store::TraceReport;
use crossbeam::channel::{bounded, Sender};
use serde::Serialize;

use crate::journal::JournalError;
use crate::stats::ControlStats;
use crate::store::BatchReport;

/// An error with its causes, one line: `a: b: c` (a cause whose text the
/// message already carries is not repeated: thiserror messages often
/// include their source). For logs and the CLI.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out += ": ";
            out += &text;
        }
        cause = c.source();
    }
    out
}

/// Version reported by `hello`; bumped on incompatible changes.
pub use cfdp_rules::protocol::API_VERSION;

/// A request to the control thread.
#[derive(Debug)]
pub enum Command {
    /// Who is there and what it can do.
    Hello,
    Ping,
    Stats,
    /// A batch of updates.
    Apply(ApplyCommand),
    /// The whole intended rule set; only the difference is applied, as one
    /// atomic batch.
    Replace {
        rules: Vec<Rule>,
        expected_generation: Option<u64>,
    },
    /// A page of the rule set, in id order.
    Rules {
        offset: u64,
        limit: u64,
    },
    /// One rule with its counters.
    Get(RuleId),
    /// Move Bloom-part elements back to cuckoo entries now (`None`: all).
    Migrate {
        budget: Option<u64>,
    },
    /// Write a snapshot and empty the journal.
    Snapshot,
    /// Which rule a 5-tuple gets, every rule it matches, and the tables
    /// asked on the way (`cfdp ctl trace`).
    Trace(FlowKey),
    /// A batch whose rules are named by their match (P4Runtime's table
    /// entries).
    ApplyKeyed(KeyedBatch),
    /// Up to `limit` tracked connections that `query` selects.
    Conns {
        query: cfdp_conntrack::ConnQuery,
        limit: usize,
    },
}

/// A batch of updates that name rules by their match, priority included,
/// instead of by id: P4Runtime's table entries carry no id. The control
/// thread resolves it against the committed rule set, between two other
/// batches (an id it hands out cannot be taken by a socket client on the
/// way), and applies it as any batch: same checks, journal, atomicity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyedBatch {
    pub atomicity: Atomicity,
    pub updates: Vec<KeyedUpdate>,
}

/// One update of a [`KeyedBatch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedUpdate {
    /// A new rule; the control thread gives it an id no rule has.
    Insert(Match, Action),
    /// A new action for the rule with this match.
    Modify(Match, Action),
    /// Removes the rule with this match.
    Delete(Match),
}

/// The answer to a [`KeyedBatch`].
#[derive(Clone, Debug, Serialize)]
pub struct KeyedReport {
    /// As for any batch; an update whose match names no rule is answered
    /// `not_found` at its position.
    pub report: BatchReport,
    /// The id each update was resolved to (`None`: no rule has its match).
    pub ids: Vec<Option<RuleId>>,
}

/// An `apply` as the control thread takes it.
#[derive(Debug)]
pub struct ApplyCommand {
    /// The batch, or why the edge could not read it (the control thread
    /// counts the refusal and answers it).
    pub batch: Result<Batch, BatchError>,
    /// The updates' JSON text as received, when the whole batch came from
    /// one request line: the journal records it as it is instead of
    /// serializing the updates again.
    pub updates_text: Option<String>,
    /// µs the edge spent reading the batch (reported in its timing).
    pub parse_us: u64,
    /// The bound its size is held to.
    pub bound: BatchBound,
}

/// Which bound a batch's size is held to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchBound {
    /// `max_batch`: requests from the socket and from in-process clients.
    #[default]
    Request,
    /// The rule set's: twice `max_rules` (every rule deleted and another
    /// inserted). A fleet node's agent, whose batches are the fleet's etcd
    /// revisions and resyncs to the whole fleet rule set: refusing those
    /// would leave the node behind its fleet for good (a 100 k-update
    /// resync was refused by a 64 k `max_batch`).
    RuleSet,
}

impl ApplyCommand {
    /// A batch built in process.
    pub fn new(batch: Batch) -> Self {
        Self {
            batch: Ok(batch),
            updates_text: None,
            parse_us: 0,
            bound: BatchBound::Request,
        }
    }
}

/// How large a request may be: the socket refuses longer lines and larger
/// batches while reading them, and `hello` reports both. One definition,
/// held by the control plane's settings and the listeners' limits alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    /// Most updates in one batch.
    pub max_batch: usize,
    /// Longest request line, bytes.
    pub max_line_bytes: usize,
}

impl Default for RequestLimits {
    fn default() -> Self {
        Self {
            max_batch: 65_536,
            max_line_bytes: 16 << 20,
        }
    }
}

/// Largest page of `rules`.
pub const MAX_PAGE: u64 = 10_000;

/// `hello`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct Hello {
    pub server: String,
    pub api_version: u32,
    pub methods: Vec<&'static str>,
    pub capabilities: Capabilities,
    pub generation: u64,
}

/// What this control plane can do.
#[derive(Clone, Debug, Serialize)]
pub struct Capabilities {
    pub atomicity: [Atomicity; 3],
    pub mode: Mode,
    /// `bit`, `tagN`, or none (plain cuckoo inserts).
    pub bloom: Option<String>,
    pub threshold: u32,
    pub auto_grow: bool,
    /// A journal makes every applied batch durable.
    pub durable: bool,
    pub max_rules: usize,
    pub max_batch: usize,
    pub max_line_bytes: usize,
}

/// `ping`'s answer.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Pong {
    pub pong: bool,
    pub generation: u64,
    pub uptime_s: f64,
    pub packets: u64,
}

/// A rule with its counters (`get`, and each entry of `rules`).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct RuleEntry {
    #[serde(flatten)]
    pub rule: Rule,
    /// Packets and bytes matched since it was installed.
    pub packets: u64,
    pub bytes: u64,
    /// Unix seconds of its last matched packet, `None` if none yet (a
    /// `modify` keeps the rule's slot: counters and last hit carry on).
    pub last_hit_unix_s: Option<u64>,
}

/// One tracked connection (`conns`), as the packet that opened it shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ConnEntry {
    pub src: std::net::IpAddr,
    pub dst: std::net::IpAddr,
    pub proto: u8,
    /// For ICMP echo, the identifier.
    pub sport: u16,
    pub dport: u16,
    /// Linux's name for its state.
    pub state: &'static str,
    /// The stateful rule that opened it, if the rule set still holds it.
    pub rule: Option<RuleId>,
    /// The action its packets take.
    pub action: &'static str,
    /// Seconds since its last packet and (with `[conntrack] accounting`)
    /// since it opened, in the packets' time, measured against the newest
    /// packet the table has seen.
    pub idle_s: f64,
    pub age_s: Option<f64>,
    /// Packets and bytes, original direction then reply (with
    /// `[conntrack] accounting`; `null` without, as Linux's `conntrack -L`
    /// shows none while `nf_conntrack_acct` is off).
    pub packets: Option<[u64; 2]>,
    pub bytes: Option<[u64; 2]>,
}

/// `conns`'s answer.
#[derive(Clone, Debug, Serialize)]
pub struct ConnsPage {
    /// Entries in the table, whatever the query.
    pub entries: usize,
    pub conns: Vec<ConnEntry>,
}

/// A page of `rules`.
#[derive(Clone, Debug, Serialize)]
pub struct RulesPage {
    pub generation: u64,
    /// Rules in the whole set.
    pub total: usize,
    pub offset: u64,
    /// Packets received before the counters were read: the counters cover
    /// at least every packet up to one burst before this count.
    pub packets: u64,
    pub matched: u64,
    pub dropped: u64,
    /// Packets received after the page was read.
    pub packets_after: u64,
    pub rules: Vec<RuleEntry>,
}

/// `migrate`'s answer.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MigrateReport {
    pub moved: usize,
    pub bloom_items_before: usize,
    pub bloom_items_after: usize,
    pub wall_us: u64,
}

/// `snapshot`'s answer.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SnapshotReport {
    pub generation: u64,
    pub rules: usize,
}

/// `replace`'s answer: the batch it applied (none when nothing differed)
/// and what it changed.
#[derive(Clone, Debug, Serialize)]
pub struct ReplaceReport {
    #[serde(flatten)]
    pub batch: ReplaceBatch,
    pub replace: ReplaceCounts,
}

/// The batch a `replace` applied.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum ReplaceBatch {
    Applied(BatchReport),
    /// The rule set was already the one asked for.
    Nothing {
        applied: bool,
        generation: u64,
        results: [(); 0],
    },
}

/// Any answer of the control thread, for the socket's edge (each typed
/// call of [`ControlHandle`] takes its own variant out).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Response {
    Hello(Hello),
    Pong(Pong),
    Stats(Box<ControlStats>),
    Batch(BatchReport),
    Replace(ReplaceReport),
    Rules(RulesPage),
    Rule(RuleEntry),
    Migrated(MigrateReport),
    Snapshot(SnapshotReport),
    Trace(TraceReport),
    Keyed(KeyedReport),
    Conns(ConnsPage),
}

/// Why the control plane refused a request. Every variant has its
/// protocol error code ([`ControlError::code`]).
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A parameter is missing, unknown or malformed (the message names it).
    #[error("{0}")]
    InvalidParams(String),
    /// The batch itself could not be read.
    #[error("batch: {0}")]
    BadBatch(#[source] BatchError),
    /// The batch cannot be honoured in this configuration (the store says
    /// why); nothing was applied.
    #[error("{0}")]
    Refused(String),
    #[error("expected generation {expected}, but the rule set is at generation {current}")]
    GenerationMismatch { expected: u64, current: u64 },
    /// The journal could not make the batch durable: nothing was applied.
    #[error("batch not applied: journal: {0}")]
    NotDurable(#[source] JournalError),
    #[error("no rule with id {0}")]
    NotFound(u64),
    #[error("no state_dir configured: this cfdp keeps no snapshot")]
    NoStateDir,
    #[error("snapshot failed: {0}")]
    Snapshot(#[source] JournalError),
    /// A fleet node takes its rules from etcd: its socket refuses changes.
    #[error(
        "this node takes its rules from etcd (cluster prefix {prefix}): apply batches to the \
         fleet with `cfdp ctl --etcd URL --prefix {prefix} apply FILE`"
    )]
    FleetOwned { prefix: String },
    /// A TCP connection sent something other than `hello` with the right
    /// token first (the connection is then closed).
    #[error(
        "authenticate first: a TCP connection starts with hello and params.token, the \
         contents of the server's control.token_file"
    )]
    Unauthorized,
    #[error("cfdp is shutting down")]
    ShuttingDown,
    #[error("the control thread has stopped")]
    Stopped,
    #[error("the control thread dropped the request")]
    Dropped,
    /// The control thread answered with another kind of response (a bug).
    #[error("internal: unexpected answer to {0}")]
    UnexpectedAnswer(&'static str),
}

impl ControlError {
    /// The protocol's error code.
    pub fn code(&self) -> i64 {
        match self {
            Self::InvalidParams(_) | Self::BadBatch(_) | Self::Refused(_) => code::INVALID_PARAMS,
            Self::GenerationMismatch { .. } => code::GENERATION_MISMATCH,
            Self::NotDurable(_) | Self::Snapshot(_) => code::NOT_DURABLE,
            Self::NotFound(_) => code::NOT_FOUND,
            Self::NoStateDir | Self::FleetOwned { .. } => code::INVALID_REQUEST,
            Self::ShuttingDown | Self::Stopped => code::SHUTTING_DOWN,
            Self::Unauthorized => code::UNAUTHORIZED,
            Self::Dropped | Self::UnexpectedAnswer(_) => code::INTERNAL,
        }
    }

    /// The current generation, for a mismatch (the error's `data`).
    pub fn current_generation(&self) -> Option<u64> {
        match self {
            Self::GenerationMismatch { current, .. } => Some(*current),
            _ => None,
        }
    }
}

/// A fleet node's status, as its agent writes it to etcd and as `stats`
/// and the metrics report it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct NodeStatus {
    pub node: String,
    /// The fleet generation (etcd revision) the node has applied.
    pub generation: i64,
    /// The last error, until a session succeeds.
    pub error: Option<String>,
    /// Caught up with the fleet: counted as live.
    pub caught_up: bool,
    pub rules: usize,
    pub packets: u64,
    pub matched: u64,
    pub dropped: u64,
    pub forwarded: u64,
    pub updated_unix_s: u64,
}

/// A request and where its answer goes.
pub struct Job {
    pub command: Command,
    pub reply: Sender<Result<Response, ControlError>>,
}

/// The typed way into a running control thread from another thread of the
/// same process. Cloning is cheap; every call waits for its answer.
#[derive(Clone)]
pub struct ControlHandle {
    jobs: Sender<Job>,
}

/// Takes one variant out of a [`Response`], or says the answer was not it.
macro_rules! answer {
    ($r:expr, $v:ident, $what:literal) => {
        match $r? {
            Response::$v(x) => Ok(x),
            _ => Err(ControlError::UnexpectedAnswer($what)),
        }
    };
}

impl ControlHandle {
    pub fn new(jobs: Sender<Job>) -> Self {
        Self { jobs }
    }

    /// Any command, answered.
    pub fn call(&self, command: Command) -> Result<Response, ControlError> {
        let (tx, rx) = bounded(1);
        self.jobs
            .send(Job { command, reply: tx })
            .map_err(|_| ControlError::Stopped)?;
        rx.recv().map_err(|_| ControlError::Dropped)?
    }

    pub fn hello(&self) -> Result<Hello, ControlError> {
        answer!(self.call(Command::Hello), Hello, "hello")
    }

    pub fn ping(&self) -> Result<Pong, ControlError> {
        answer!(self.call(Command::Ping), Pong, "ping")
    }

    pub fn stats(&self) -> Result<ControlStats, ControlError> {
        answer!(self.call(Command::Stats), Stats, "stats").map(|s| *s)
    }

    /// Applies a batch; an update that failed is in the report, not an
    /// error (see [`BatchReport::applied`]).
    pub fn apply(&self, batch: Batch) -> Result<BatchReport, ControlError> {
        self.apply_bounded(batch, BatchBound::Request)
    }

    /// [`ControlHandle::apply`] held to `bound` (a fleet agent's batches:
    /// [`BatchBound::RuleSet`]).
    pub fn apply_bounded(
        &self,
        batch: Batch,
        bound: BatchBound,
    ) -> Result<BatchReport, ControlError> {
        let cmd = ApplyCommand {
            bound,
            ..ApplyCommand::new(batch)
        };
        answer!(self.call(Command::Apply(cmd)), Batch, "apply")
    }

    /// Applies a batch of updates named by match (see [`KeyedBatch`]).
    pub fn apply_keyed(&self, batch: KeyedBatch) -> Result<KeyedReport, ControlError> {
        answer!(self.call(Command::ApplyKeyed(batch)), Keyed, "apply_keyed")
    }

    /// Tracked connections (see [`Command::Conns`]).
    pub fn conns(
        &self,
        query: cfdp_conntrack::ConnQuery,
        limit: usize,
    ) -> Result<ConnsPage, ControlError> {
        answer!(self.call(Command::Conns { query, limit }), Conns, "conns")
    }

    /// Which rule the published tables give `k` (see [`Command::Trace`]).
    pub fn trace(&self, k: FlowKey) -> Result<TraceReport, ControlError> {
        answer!(self.call(Command::Trace(k)), Trace, "trace")
    }

    pub fn replace(
        &self,
        rules: Vec<Rule>,
        expected_generation: Option<u64>,
    ) -> Result<ReplaceReport, ControlError> {
        let c = Command::Replace {
            rules,
            expected_generation,
        };
        answer!(self.call(c), Replace, "replace")
    }

    pub fn rules(&self, offset: u64, limit: u64) -> Result<RulesPage, ControlError> {
        answer!(self.call(Command::Rules { offset, limit }), Rules, "rules")
    }

    /// Every rule, read page by page.
    pub fn all_rules(&self) -> Result<Vec<RuleEntry>, ControlError> {
        let mut out = Vec::new();
        loop {
            let page = self.rules(out.len() as u64, MAX_PAGE)?;
            let n = page.rules.len();
            out.extend(page.rules);
            if n < MAX_PAGE as usize {
                return Ok(out);
            }
        }
    }

    pub fn get(&self, id: RuleId) -> Result<RuleEntry, ControlError> {
        answer!(self.call(Command::Get(id)), Rule, "get")
    }

    pub fn migrate(&self, budget: Option<u64>) -> Result<MigrateReport, ControlError> {
        answer!(self.call(Command::Migrate { budget }), Migrated, "migrate")
    }

    pub fn snapshot(&self) -> Result<SnapshotReport, ControlError> {
        answer!(self.call(Command::Snapshot), Snapshot, "snapshot")
    }
}
