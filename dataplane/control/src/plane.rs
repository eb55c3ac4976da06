//! The control thread: owns the rule store and the journal, answers the
//! requests the connection threads hand over, one at a time, and migrates
//! Bloom-part elements back into cuckoo entries whenever no request waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cfdp_rules::protocol::{
    check_params, code, param_u64, result_reply, ErrorReply, Method, ParsedRequest, Request,
    API_VERSION,
};
use cfdp_rules::{parse_batch, Batch, BatchError, RuleId};
use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use hdrhistogram::Histogram;
use serde_json::value::{to_raw_value, RawValue};
use serde_json::{json, Value};

use crate::journal::Journal;
use crate::stats::{BatchCounts, ControlStats, JournalStats, Latency, PlaneView, StatsBoard};
use crate::store::{ApplyError, CountSlot, RuleStore};

/// A request and where its response goes.
pub struct Job {
    /// The request, with `apply`'s batch when the connection thread parsed
    /// it already.
    pub request: ParsedRequest,
    /// The response as JSON text (one line, no newline).
    pub reply: Sender<Box<RawValue>>,
    /// µs the connection thread spent parsing the request line.
    pub parse_us: u64,
}

/// Control-thread settings.
#[derive(Clone, Debug)]
pub struct PlaneConfig {
    pub max_batch: usize,
    pub max_line_bytes: usize,
    /// Compact the journal into a snapshot after this many records.
    pub compact_every: u64,
    /// Bloom-part elements moved per filter per migration step.
    pub migrate_budget: usize,
    /// Pause between migration steps while elements remain.
    pub migrate_interval: Duration,
}

impl Default for PlaneConfig {
    fn default() -> Self {
        Self {
            max_batch: 65_536,
            max_line_bytes: 16 << 20,
            compact_every: 1000,
            migrate_budget: 64,
            migrate_interval: Duration::from_millis(2),
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
}

/// Largest page of `rules`.
const MAX_PAGE: u64 = 10_000;

fn err(id: &Value, code: i64, msg: impl Into<String>) -> Value {
    ErrorReply::new(id.clone(), code, msg).to_json()
}

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
                    let ParsedRequest {
                        req,
                        batch,
                        updates_text,
                    } = job.request;
                    let reply = match batch {
                        Some(b) if req.method == Method::Apply => self.apply_parsed_text(
                            &req.id,
                            b,
                            updates_text.as_deref(),
                            job.parse_us,
                        ),
                        _ => to_raw_value(&self.handle_timed(&req, job.parse_us))
                            .expect("JSON serializes"),
                    };
                    self.requests.fetch_add(1, Ordering::Relaxed);
                    // Published before the response: a client that reads
                    // `stats` after an answer sees its effect.
                    self.publish_view();
                    let _ = job.reply.send(reply);
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
                    if moved > 0 || folded {
                        self.publish_view();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// The response to one request.
    pub fn handle(&mut self, req: &Request) -> Value {
        self.handle_timed(req, 0)
    }

    /// The response to one request whose line took `parse_us` to parse.
    fn handle_timed(&mut self, req: &Request, parse_us: u64) -> Value {
        let id = &req.id;
        let p = &req.params;
        let r = match req.method {
            Method::Hello => check_params(p, &[]).map(|_| self.hello()),
            Method::Ping => check_params(p, &[]).map(|_| {
                json!({"pong": true, "generation": self.store.generation(),
                       "uptime_s": self.started.elapsed().as_secs_f64(),
                       "packets": self.store.live_stats().totals().packets})
            }),
            Method::Stats => check_params(p, &[])
                .map(|_| serde_json::to_value(self.stats()).expect("stats serialize")),
            Method::Apply => return self.apply(req, parse_us),
            Method::Replace => return self.replace(req, parse_us),
            Method::Rules => return self.rules(req),
            Method::Get => {
                let n = check_params(p, &["id"]).and_then(|_| param_u64(p, "id"));
                match n {
                    Ok(Some(n)) => match RuleId::try_from(n)
                        .ok()
                        .and_then(|i| self.store.rule_json(i))
                    {
                        Some(v) => Ok(v),
                        None => return err(id, code::NOT_FOUND, format!("no rule with id {n}")),
                    },
                    Ok(None) => Err("id: missing".into()),
                    Err(e) => Err(e),
                }
            }
            Method::Migrate => check_params(p, &["budget"])
                .and_then(|_| param_u64(p, "budget"))
                .map(|b| self.migrate_now(b.map(|b| b as usize))),
            Method::Snapshot => {
                if let Err(e) = check_params(p, &[]) {
                    return err(id, code::INVALID_PARAMS, e);
                }
                return match self.compact() {
                    Ok(Some(v)) => result_reply(id, v),
                    Ok(None) => err(
                        id,
                        code::INVALID_REQUEST,
                        "no state_dir configured: this cfdp keeps no snapshot",
                    ),
                    Err(e) => err(id, code::NOT_DURABLE, format!("snapshot failed: {e}")),
                };
            }
        };
        match r {
            Ok(v) => result_reply(id, v),
            Err(e) => err(id, code::INVALID_PARAMS, e),
        }
    }

    fn hello(&self) -> Value {
        let c = self.store.config();
        json!({
            "server": format!("cfdp {}", env!("CARGO_PKG_VERSION")),
            "api_version": API_VERSION,
            "methods": Method::ALL.iter().map(|m| m.name()).collect::<Vec<_>>(),
            "capabilities": {
                "atomicity": ["continue_on_error", "rollback_on_error", "dataplane_atomic"],
                "mode": c.mode,
                "bloom": c.bloom.map(|m| match m {
                    cfdp_filter::BloomMode::Bit => "bit".to_string(),
                    cfdp_filter::BloomMode::Tag { bits } => format!("tag{bits}"),
                }),
                "threshold": c.threshold,
                "auto_grow": c.auto_grow,
                "durable": self.journal.is_some(),
                "max_rules": c.max_rules,
                "max_batch": self.cfg.max_batch,
                "max_line_bytes": self.cfg.max_line_bytes,
            },
            "generation": self.store.generation(),
        })
    }

    /// `replace`: `{"rules": [...], "expected_generation"?}` — the whole
    /// intended rule set; the difference to the current one is applied as
    /// one `dataplane_atomic` batch (a controller resyncing after its
    /// restart, without deleting and reinstalling everything).
    fn replace(&mut self, req: &Request, line_parse_us: u64) -> Value {
        let t0 = Instant::now();
        let p = &req.params;
        if let Err(e) = check_params(p, &["rules", "expected_generation"]) {
            return err(&req.id, code::INVALID_PARAMS, e);
        }
        let expected = match param_u64(p, "expected_generation") {
            Ok(g) => g,
            Err(e) => return err(&req.id, code::INVALID_PARAMS, e),
        };
        let Some(list) = p.get("rules").filter(|v| v.is_array()) else {
            return err(
                &req.id,
                code::INVALID_PARAMS,
                "rules: a list of rules is required",
            );
        };
        let desired = match cfdp_rules::parse_rule_list(&list.to_string()) {
            Ok(r) => r,
            Err(e) => return err(&req.id, code::INVALID_PARAMS, e.to_string()),
        };
        let (updates, counts) = match cfdp_rules::replace_updates(&self.store.rules(), &desired) {
            Ok(x) => x,
            Err(e) => return err(&req.id, code::INVALID_PARAMS, e),
        };
        // Workers see the old set or the new one; filter-only mode cannot
        // publish a batch that way, so there it is all-or-nothing only.
        let atomicity = if self.store.mode() == cfdp_engine::Mode::FilterOnly {
            cfdp_rules::Atomicity::RollbackOnError
        } else {
            cfdp_rules::Atomicity::DataplaneAtomic
        };
        let batch = Batch {
            atomicity,
            expected_generation: expected,
            updates: updates.into_iter().map(Ok).collect(),
        };
        let parse_us = line_parse_us + t0.elapsed().as_micros() as u64;
        let mut reply = if batch.updates.is_empty() {
            self.check_generation(&req.id, expected).unwrap_or_else(|| {
                result_reply(
                    &req.id,
                    json!({"applied": true, "generation": self.store.generation(),
                           "results": []}),
                )
            })
        } else {
            self.apply_parsed(&req.id, Ok(batch), parse_us)
        };
        if let Some(r) = reply.get_mut("result").and_then(Value::as_object_mut) {
            r.insert(
                "replace".into(),
                serde_json::to_value(counts).expect("counts serialize"),
            );
        }
        reply
    }

    /// A generation mismatch error, when `expected` is given and differs.
    fn check_generation(&self, id: &Value, expected: Option<u64>) -> Option<Value> {
        let current = self.store.generation();
        expected.filter(|&g| g != current).map(|g| {
            ErrorReply::new(
                id.clone(),
                code::GENERATION_MISMATCH,
                format!("expected generation {g}, current {current}"),
            )
            .with_data(json!({"current_generation": current}))
            .to_json()
        })
    }

    fn apply(&mut self, req: &Request, line_parse_us: u64) -> Value {
        let t0 = Instant::now();
        let parsed = parse_batch(&req.params, self.cfg.max_batch);
        let parse_us = line_parse_us + t0.elapsed().as_micros() as u64;
        self.apply_parsed(&req.id, parsed, parse_us)
    }

    /// Applies a parsed batch (`parse_us`: time spent parsing it), the
    /// answer as a `Value` (for callers that edit it; the journal records
    /// the updates re-serialized: these batches come without their text).
    fn apply_parsed(
        &mut self,
        id: &Value,
        parsed: Result<Batch, BatchError>,
        parse_us: u64,
    ) -> Value {
        match self.apply_batch(id, parsed, None, parse_us) {
            Ok(report) => result_reply(
                id,
                serde_json::to_value(&report).expect("report serializes"),
            ),
            Err(reply) => reply,
        }
    }

    /// As [`Self::apply_parsed`] (`updates_text`: the updates as received,
    /// journaled as they are when the whole batch applies), the answer as
    /// JSON text serialized straight from the typed report: building it
    /// as a `Value` first (a map per update result) cost ~0.75 ms for a
    /// 1024-update batch, the text directly ~10 µs.
    fn apply_parsed_text(
        &mut self,
        id: &Value,
        parsed: Result<Batch, BatchError>,
        updates_text: Option<&str>,
        parse_us: u64,
    ) -> Box<RawValue> {
        #[derive(serde::Serialize)]
        struct Answer<'a> {
            jsonrpc: &'static str,
            id: &'a Value,
            result: &'a crate::BatchReport,
        }
        match self.apply_batch(id, parsed, updates_text, parse_us) {
            Ok(report) => to_raw_value(&Answer {
                jsonrpc: "2.0",
                id,
                result: &report,
            })
            .expect("report serializes"),
            Err(reply) => to_raw_value(&reply).expect("JSON serializes"),
        }
    }

    /// Applies a batch: its report, or the error reply.
    fn apply_batch(
        &mut self,
        id: &Value,
        parsed: Result<Batch, BatchError>,
        updates_text: Option<&str>,
        parse_us: u64,
    ) -> Result<crate::BatchReport, Value> {
        let batch = match parsed {
            Ok(b) => b,
            Err(e) => {
                self.batches_refused += 1;
                return Err(err(id, code::INVALID_PARAMS, format!("batch: {e}")));
            }
        };
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
        match r {
            Ok(mut report) => {
                report.timing.parse_us = parse_us;
                if report.applied {
                    if let Some(j) = &self.journal {
                        let (w, s) = j.last_timing();
                        report.timing.journal_write_us = w;
                        report.timing.journal_sync_us = s;
                    }
                }
                self.batch_us.saturating_record(report.wall_us.max(1));
                self.board
                    .batch_seconds
                    .observe(report.wall_us as f64 / 1e6);
                if report.applied {
                    self.batches_applied += 1;
                } else {
                    self.batches_refused += 1;
                }
                let due = self
                    .journal
                    .as_ref()
                    .is_some_and(|j| j.records() >= self.cfg.compact_every);
                if due {
                    if let Err(e) = self.compact() {
                        // The journal still holds everything: keep going.
                        eprintln!("cfdp: control: journal compaction failed: {e}");
                    }
                }
                Ok(report)
            }
            Err(e) => {
                self.batches_refused += 1;
                let (c, data) = match &e {
                    ApplyError::GenerationMismatch { current, .. } => (
                        code::GENERATION_MISMATCH,
                        Some(json!({"current_generation": current})),
                    ),
                    ApplyError::NotDurable(_) => (code::NOT_DURABLE, None),
                    ApplyError::Refused(_) => (code::INVALID_PARAMS, None),
                };
                let mut reply = ErrorReply::new(id.clone(), c, e.to_string());
                if let Some(d) = data {
                    reply = reply.with_data(d);
                }
                Err(reply.to_json())
            }
        }
    }

    fn rules(&self, req: &Request) -> Value {
        let id = &req.id;
        let p = &req.params;
        let parsed = check_params(p, &["offset", "limit"])
            .and_then(|_| Ok((param_u64(p, "offset")?, param_u64(p, "limit")?)));
        let (offset, limit) = match parsed {
            Ok((o, l)) => (o.unwrap_or(0), l.unwrap_or(1000)),
            Err(e) => return err(id, code::INVALID_PARAMS, e),
        };
        if limit > MAX_PAGE {
            return err(
                id,
                code::INVALID_PARAMS,
                format!("limit: at most {MAX_PAGE}"),
            );
        }
        // Packets received so far, read before the counters: the counters
        // below cover at least every packet up to one burst before this
        // count (a worker counts a packet when its burst starts, the rule
        // hit when it ends). The soak harness relies on it.
        let totals = self.store.live_stats().totals();
        let all = self.store.rules();
        let page: Vec<Value> = all
            .iter()
            .skip(offset.min(all.len() as u64) as usize)
            .take(limit as usize)
            .filter_map(|r| self.store.rule_json(r.id))
            .collect();
        let packets_after = self.store.live_stats().totals().packets;
        result_reply(
            id,
            json!({"generation": self.store.generation(), "total": all.len(),
                   "offset": offset, "packets": totals.packets, "matched": totals.matched,
                   "dropped": totals.dropped, "packets_after": packets_after, "rules": page}),
        )
    }

    /// Migrates until the Bloom part is empty or a step moves nothing.
    fn migrate_now(&mut self, budget: Option<usize>) -> Value {
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
        json!({"moved": moved, "bloom_items_before": before,
               "bloom_items_after": self.store.bloom_items(),
               "wall_us": start.elapsed().as_micros() as u64})
    }

    /// Writes a snapshot and empties the journal. `None` without a journal.
    fn compact(&mut self) -> Result<Option<Value>, String> {
        let Some(j) = &mut self.journal else {
            return Ok(None);
        };
        let rules = self.store.rules();
        let g = self.store.generation();
        j.compact(g, &rules)?;
        Ok(Some(json!({"generation": g, "rules": rules.len()})))
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
