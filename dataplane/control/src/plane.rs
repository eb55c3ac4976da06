//! The control thread: owns the rule store and the journal, answers the
//! typed [`Command`]s that connection threads and in-process callers hand
//! over, one at a time, and migrates Bloom-part elements back into cuckoo
//! entries whenever no request waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_rules::protocol::Method;
use cfdp_rules::{Batch, Code, Match, Rule, RuleId, Update, UpdateError, UpdateResult};
use crossbeam::channel::{Receiver, RecvTimeoutError};
use hdrhistogram::Histogram;

use crate::api::{
    ApplyCommand, Capabilities, Command, ControlError, Hello, Job, KeyedBatch, KeyedReport,
    KeyedUpdate, MigrateReport, Pong, ReplaceBatch, ReplaceReport, RequestLimits, Response,
    SnapshotReport, API_VERSION,
};
use crate::journal::Journal;
use crate::stats::{BatchCounts, ControlStats, JournalStats, Latency, PlaneView, StatsBoard};
use crate::store::{ApplyError, BatchReport, CountSlot, RuleStore};

mod queries;

/// Control-thread settings.
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    /// Reported by `hello`; the socket enforces them while reading.
    pub requests: RequestLimits,
    /// Compact the journal into a snapshot after this many records...
    pub compact_every: u64,
    /// ...or once it holds this many bytes, whichever comes first (1,000
    /// records of large batches could otherwise grow it to gigabytes,
    /// all read again on restart).
    pub compact_bytes: u64,
    /// Bloom-part elements moved per filter per migration step.
    pub migrate_budget: usize,
    /// Pause between migration steps while elements remain.
    pub migrate_interval: Duration,
    /// A test hook, off unless set: each batch is held, before anything
    /// of it is applied, until `DIR/release` exists; `DIR/held` says one
    /// is held. Lets a test check what the server does while the control
    /// thread is busy by ordering, not by hoping a batch is slow enough.
    pub hold_batches: Option<std::path::PathBuf>,
}

impl Default for PlaneConfig {
    fn default() -> Self {
        Self {
            requests: RequestLimits::default(),
            compact_every: 1000,
            compact_bytes: 256 << 20,
            migrate_budget: 64,
            migrate_interval: Duration::from_millis(2),
            hold_batches: None,
        }
    }
}

/// The control thread's state.
pub struct ControlPlane {
    pub store: RuleStore,
    journal: Option<Journal>,
    cfg: PlaneConfig,
    started: Instant,
    /// Batch wall time, µs.
    batch_us: Histogram<u64>,
    batches_applied: u64,
    batches_refused: u64,
    migrated: u64,
    /// Answered requests (all methods).
    pub requests: Arc<AtomicU64>,
    board: StatsBoard,
    /// The `count` rules' list as last published, with the store's
    /// version of it: rebuilt only when it changed (it was rebuilt for
    /// every request: O(count rules) before each answer).
    count_rules: (u64, Arc<Vec<CountSlot>>),
    /// Where [`ControlPlane::free_id`] looks next (`None`: above the
    /// highest id, found on first use).
    next_id: Option<RuleId>,
    /// Where recent pages of `rules` ended: (generation, offset after the
    /// page, last id on it). A page asked at such an offset of the same
    /// generation continues after that id: reading the whole set page by
    /// page (P4Runtime Read, `cfdp ctl rules`) costs O(page + log N) a
    /// page instead of O(offset).
    page_ends: std::collections::VecDeque<(u64, u64, RuleId)>,
}

/// Page ends remembered (readers paging at once, each continuing).
const PAGE_ENDS: usize = 8;

impl ControlPlane {
    pub fn new(store: RuleStore, journal: Option<Journal>, cfg: PlaneConfig) -> Self {
        let live = Arc::clone(store.live_stats());
        let mut plane = Self {
            store,
            journal,
            cfg,
            started: Instant::now(),
            batch_us: Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds"),
            batches_applied: 0,
            batches_refused: 0,
            migrated: 0,
            requests: Arc::new(AtomicU64::new(0)),
            board: StatsBoard::new(Self::empty_view(), live),
            count_rules: (0, Arc::new(Vec::new())),
            next_id: None,
            page_ends: std::collections::VecDeque::with_capacity(PAGE_ENDS),
        };
        plane.publish_view();
        plane
    }

    fn empty_view() -> PlaneView {
        PlaneView {
            generation: 0,
            rules: 0,
            started: Instant::now(),
            count_rules: Arc::new(Vec::new()),
            filter: Default::default(),
            memory: Default::default(),
            batch_us: Latency::default(),
            batches: BatchCounts::default(),
            migrated: 0,
            requests: 0,
            journal: None,
            acl_compiles: Default::default(),
            conntrack: None,
        }
    }

    /// Where this plane publishes its statistics for other threads.
    pub fn board(&self) -> StatsBoard {
        self.board.clone()
    }

    fn view(&self) -> PlaneView {
        let h = &self.batch_us;
        PlaneView {
            generation: self.store.generation(),
            rules: self.store.len(),
            started: self.started,
            count_rules: Arc::clone(&self.count_rules.1),
            filter: self.store.filter_stats(),
            memory: self.store.memory(),
            batch_us: Latency {
                count: h.len(),
                p50: h.value_at_quantile(0.5),
                p99: h.value_at_quantile(0.99),
                max: h.max(),
            },
            batches: BatchCounts {
                applied: self.batches_applied,
                refused: self.batches_refused,
            },
            migrated: self.migrated,
            requests: self.requests.load(Ordering::Relaxed),
            journal: self.journal.as_ref().map(|j| JournalStats {
                records: j.records(),
            }),
            acl_compiles: self.store.compile_stats(),
            conntrack: self.store.conntrack().cloned(),
        }
    }

    /// Publishes the current view on the board.
    pub fn publish_view(&mut self) {
        let version = self.store.count_rules_version();
        if self.count_rules.0 != version {
            self.count_rules = (version, Arc::new(self.store.count_rule_slots()));
        }
        self.board.publish(self.view());
    }

    /// Serves `jobs` until the channel closes or `stop` is set and no job
    /// waits. A batch in progress always completes (or rolls back) first:
    /// requests are handled whole.
    pub fn run(&mut self, jobs: Receiver<Job>, stop: &AtomicBool) {
        loop {
            let idle = if self.store.bloom_items() > 0 {
                self.cfg.migrate_interval
            } else {
                Duration::from_millis(50)
            };
            match jobs.recv_timeout(idle) {
                Ok(job) => {
                    let answer = self.handle(job.command);
                    // Published before the response: a client that reads
                    // `stats` after an answer sees its effect.
                    self.publish_view();
                    let _ = job.reply.send(answer);
                    // The rest of the commit, after the answer.
                    self.store.settle();
                }
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    // Nothing pending: one small migration step, and a
                    // fold of the exact tables lands once merged.
                    let moved = self.store.migrate(self.cfg.migrate_budget) as u64;
                    self.migrated += moved;
                    let folded = self.store.finish_fold(false);
                    let compiled = self.store.finish_compile(false);
                    if moved > 0 || folded || compiled {
                        self.publish_view();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// The answer to one command (counted in `requests`).
    pub fn handle(&mut self, command: Command) -> Result<Response, ControlError> {
        let answer = self.answer(command);
        self.requests.fetch_add(1, Ordering::Relaxed);
        answer
    }

    fn answer(&mut self, command: Command) -> Result<Response, ControlError> {
        Ok(match command {
            Command::Hello => Response::Hello(self.hello()),
            Command::Ping => Response::Pong(self.ping()),
            Command::Stats => Response::Stats(Box::new(self.stats())),
            Command::Apply(a) => Response::Batch(self.apply(a)?),
            Command::Replace {
                rules,
                expected_generation,
            } => Response::Replace(self.replace(rules, expected_generation)?),
            Command::Rules { offset, limit } => Response::Rules(self.rules(offset, limit)?),
            Command::Get(id) => Response::Rule(self.rule(id)?),
            Command::Migrate { budget } => {
                Response::Migrated(self.migrate_now(budget.map(|b| b as usize)))
            }
            Command::Snapshot => Response::Snapshot(self.snapshot()?),
            Command::Trace(k) => Response::Trace(self.store.trace(&k)),
            Command::ApplyKeyed(b) => Response::Keyed(self.apply_keyed(b)?),
            Command::Conns { query, limit } => Response::Conns(self.conns(&query, limit)),
        })
    }

    /// Resolves a batch named by matches into one named by ids (inserts
    /// get free ids, modifies and deletes the id of the committed rule with
    /// their match) and applies it. An update whose match names no rule
    /// takes its place in the batch as an unreadable update (so that an
    /// all-or-nothing batch aborts), answered `not_found`.
    pub fn apply_keyed(&mut self, b: KeyedBatch) -> Result<KeyedReport, ControlError> {
        let mut inserted: HashMap<Match, RuleId> = HashMap::new();
        let mut ids = Vec::with_capacity(b.updates.len());
        let mut updates = Vec::with_capacity(b.updates.len());
        for u in &b.updates {
            let found = |m: &Match, inserted: &HashMap<Match, RuleId>| {
                inserted
                    .get(m)
                    .copied()
                    .or_else(|| self.store.rule_with_match(m).map(|r| r.id))
            };
            let resolved = match *u {
                KeyedUpdate::Insert(matcher, action) => {
                    let id = self.free_id();
                    inserted.insert(matcher, id);
                    Some(Update::Insert(Rule {
                        id,
                        matcher,
                        action,
                    }))
                }
                KeyedUpdate::Modify(matcher, action) => found(&matcher, &inserted).map(|id| {
                    Update::Modify(Rule {
                        id,
                        matcher,
                        action,
                    })
                }),
                KeyedUpdate::Delete(m) => found(&m, &inserted).map(Update::Delete),
            };
            ids.push(resolved.map(|u| u.id()));
            updates.push(resolved.ok_or(UpdateError::NoMatch));
        }
        let batch = Batch {
            atomicity: b.atomicity,
            expected_generation: None,
            updates,
        };
        let mut report = self.apply(ApplyCommand::new(batch))?;
        for (r, id) in report.results.iter_mut().zip(&ids) {
            if id.is_none() {
                *r = UpdateResult::err(Code::NotFound, UpdateError::NoMatch.to_string());
            }
        }
        Ok(KeyedReport { report, ids })
    }

    /// An id no committed rule has, searched upward from the last one
    /// handed out (wrapping): the hint moves past every id it returns, so
    /// one batch's inserts never share an id.
    fn free_id(&mut self) -> RuleId {
        let mut id = match self.next_id {
            Some(id) => id,
            None => self
                .store
                .iter()
                .map(|r| r.id)
                .max()
                .map_or(1, |m| m.wrapping_add(1)),
        };
        while self.store.rule(id).is_some() {
            id = id.wrapping_add(1);
        }
        self.next_id = Some(id.wrapping_add(1));
        id
    }

    /// Who is there and what it can do.
    pub fn hello(&self) -> Hello {
        use cfdp_rules::Atomicity::*;
        let c = self.store.config();
        Hello {
            server: format!("cfdp {}", env!("CARGO_PKG_VERSION")),
            api_version: API_VERSION,
            methods: Method::ALL.iter().map(|m| m.name()).collect(),
            capabilities: Capabilities {
                atomicity: [ContinueOnError, RollbackOnError, DataplaneAtomic],
                mode: c.mode,
                bloom: c.bloom.map(|m| match m {
                    cfdp_filter::BloomMode::Bit => "bit".to_string(),
                    cfdp_filter::BloomMode::Tag { bits } => format!("tag{bits}"),
                }),
                threshold: c.threshold,
                auto_grow: c.auto_grow,
                durable: self.journal.is_some(),
                max_rules: c.max_rules,
                max_batch: self.cfg.requests.max_batch,
                max_line_bytes: self.cfg.requests.max_line_bytes,
            },
            generation: self.store.generation(),
        }
    }

    pub fn ping(&self) -> Pong {
        Pong {
            pong: true,
            generation: self.store.generation(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            packets: self.store.live_stats().totals().packets,
        }
    }

    /// `replace`: the whole intended rule set; the difference to the
    /// current one is applied as one `dataplane_atomic` batch (a controller
    /// resyncing after its restart, without deleting and reinstalling
    /// everything).
    pub fn replace(
        &mut self,
        desired: Vec<cfdp_rules::Rule>,
        expected: Option<u64>,
    ) -> Result<ReplaceReport, ControlError> {
        let t0 = Instant::now();
        let (updates, counts) = cfdp_rules::replace_updates(&self.store.rules(), &desired)
            .map_err(|e| ControlError::InvalidParams(e.to_string()))?;
        // Workers see the old set or the new one; filter-only mode cannot
        // publish a batch that way, so there it is all-or-nothing only.
        let atomicity = if self.store.mode() == cfdp_engine::Mode::FilterOnly {
            cfdp_rules::Atomicity::RollbackOnError
        } else {
            cfdp_rules::Atomicity::DataplaneAtomic
        };
        let batch = if updates.is_empty() {
            self.check_generation(expected)?;
            ReplaceBatch::Nothing {
                applied: true,
                generation: self.store.generation(),
                results: [],
            }
        } else {
            let batch = Batch {
                atomicity,
                expected_generation: expected,
                updates: updates.into_iter().map(Ok).collect(),
            };
            ReplaceBatch::Applied(self.apply(ApplyCommand {
                batch: Ok(batch),
                updates_text: None,
                parse_us: t0.elapsed().as_micros() as u64,
                bound: crate::api::BatchBound::Request,
            })?)
        };
        Ok(ReplaceReport {
            batch,
            replace: counts,
        })
    }

    /// A generation mismatch, when `expected` is given and differs.
    fn check_generation(&self, expected: Option<u64>) -> Result<(), ControlError> {
        let current = self.store.generation();
        match expected {
            Some(expected) if expected != current => {
                Err(ControlError::GenerationMismatch { expected, current })
            }
            _ => Ok(()),
        }
    }

    /// Applies a batch: its report (an update that failed is in it), or why
    /// the whole batch was refused. When `updates_text` is given and every
    /// update applies, the journal records that text as it is.
    pub fn apply(&mut self, cmd: ApplyCommand) -> Result<BatchReport, ControlError> {
        let max = match cmd.bound {
            crate::api::BatchBound::Request => self.cfg.requests.max_batch,
            crate::api::BatchBound::RuleSet => self.store.config().max_rules.saturating_mul(2),
        };
        let batch = match cmd.batch {
            // In-process callers are held to the socket's bound too.
            Ok(b) if b.updates.len() > max => {
                Err(cfdp_rules::batch::too_many(b.updates.len(), max))
            }
            other => other,
        };
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                self.batches_refused += 1;
                return Err(ControlError::BadBatch(e));
            }
        };
        if let Some(dir) = &self.cfg.hold_batches {
            hold(dir);
        }
        let updates_text = cmd.updates_text.as_deref();
        let journal = &mut self.journal;
        let all = batch.updates.len();
        let r = self.store.apply(&batch, |updates, generation| {
            match (journal, updates_text) {
                // Every update took effect (a batch's effective updates are
                // its successful ones, in order): the request's own text is
                // the record.
                (Some(j), Some(text)) if updates.len() == all => j.append_text(generation, text),
                (Some(j), _) => j.append(generation, updates),
                (None, _) => Ok(()),
            }
        });
        let mut report = match r {
            Ok(report) => report,
            Err(e) => {
                self.batches_refused += 1;
                return Err(match e {
                    ApplyError::GenerationMismatch { expected, current } => {
                        ControlError::GenerationMismatch { expected, current }
                    }
                    ApplyError::NotDurable(j) => ControlError::NotDurable(j),
                    ApplyError::Refused(why) => ControlError::Refused(why),
                });
            }
        };
        report.timing.parse_us = cmd.parse_us;
        if report.applied {
            if let Some(j) = &self.journal {
                let (w, s) = j.last_timing();
                report.timing.journal_write_us = w;
                report.timing.journal_sync_us = s;
            }
            self.batches_applied += 1;
        } else {
            self.batches_refused += 1;
        }
        self.batch_us.saturating_record(report.wall_us.max(1));
        self.board
            .batch_seconds
            .observe(report.wall_us as f64 / 1e6);
        let due = self.journal.as_ref().is_some_and(|j| {
            j.records() >= self.cfg.compact_every || j.bytes() >= self.cfg.compact_bytes
        });
        if due {
            if let Err(e) = self.compact() {
                // The journal still holds everything: keep going.
                eprintln!("cfdp: control: journal compaction failed: {e}");
            }
        }
        Ok(report)
    }

    /// Migrates until the Bloom part is empty or a step moves nothing.
    pub fn migrate_now(&mut self, budget: Option<usize>) -> MigrateReport {
        let before = self.store.bloom_items();
        let start = Instant::now();
        let mut moved = 0;
        let mut left = budget.unwrap_or(usize::MAX);
        while left > 0 && self.store.bloom_items() > 0 {
            let step = self.store.migrate(left.min(4096));
            if step == 0 {
                break;
            }
            moved += step;
            left = left.saturating_sub(step);
        }
        self.migrated += moved as u64;
        MigrateReport {
            moved,
            bloom_items_before: before,
            bloom_items_after: self.store.bloom_items(),
            wall_us: start.elapsed().as_micros() as u64,
        }
    }

    /// Writes a snapshot and empties the journal.
    pub fn snapshot(&mut self) -> Result<SnapshotReport, ControlError> {
        match self.compact() {
            Ok(Some(r)) => Ok(r),
            Ok(None) => Err(ControlError::NoStateDir),
            Err(e) => Err(ControlError::Snapshot(e)),
        }
    }

    /// Writes a snapshot and empties the journal. `None` without a journal.
    fn compact(&mut self) -> Result<Option<SnapshotReport>, crate::journal::JournalError> {
        let Some(j) = &mut self.journal else {
            return Ok(None);
        };
        let rules = self.store.rules();
        let generation = self.store.generation();
        j.compact(generation, &rules)?;
        Ok(Some(SnapshotReport {
            generation,
            rules: rules.len(),
        }))
    }

    /// The statistics as of now.
    pub fn stats(&self) -> ControlStats {
        let mut v = self.view();
        // Not yet published (a request handled outside `run`): as it is.
        if self.count_rules.0 != self.store.count_rules_version() {
            v.count_rules = Arc::new(self.store.count_rule_slots());
        }
        ControlStats::read(&v, self.store.live_stats())
    }
}

/// The [`PlaneConfig::hold_batches`] pause point: announces the held
/// batch, then waits for the release file.
fn hold(dir: &std::path::Path) {
    let _ = std::fs::write(dir.join("held"), b"");
    while !dir.join("release").exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
}
