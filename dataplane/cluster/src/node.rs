//! The node agent: one thread in every `cfdp run` with `[cluster] etcd`
//! set.
//!
//! 1. Connects, takes a lease (its status key lives as long as the node).
//! 2. Catches up. It reads the fleet's rules at the current revision H.
//!    If it holds exactly those, it is caught up. Otherwise, when it knows
//!    the last revision it applied (kept in `state_dir/cluster.json`), the
//!    watch replays every later revision, one local batch each, until its
//!    rules are the fleet's at H (or it passes H); when there is no such
//!    revision, etcd has compacted past it, or the replay cannot reach H,
//!    it *resyncs*: the difference to the fleet's rules at H as one
//!    `dataplane_atomic` batch (as Ligato's agents resync). It enforces its
//!    journal's rules meanwhile (the control plane restored them before
//!    the agent started), and it counts as live — its leased status key,
//!    which `wait` reads — only once caught up.
//! 3. Follows the watch: the events of one revision (one batch
//!    transaction) become one local `dataplane_atomic` batch, applied in
//!    revision order; the node reports each revision once applied.
//!
//! Events are translated against the rules the node holds (a put of a rule
//! it already has is nothing, a delete of one it lacks is nothing), so a
//! revision replayed after a crash between its batch and the revision
//! file is not applied twice.
//!
//! Local batches go through the node's control thread like a socket
//! `apply` (journal with fsync, Bloom-assisted inserts, one publish), so a
//! node that restarts starts from its journal and resyncs the rest. A
//! batch the node cannot apply (e.g. its `max_rules` is lower than the
//! fleet's rule count) is not skipped: the node stays at the previous
//! generation, reports the error in its status (`cfdp ctl … fleet`, `stats`,
//! the `cfdp_cluster_*` metrics) and tries again, backing off from 0.25 s
//! to 8 s while errors repeat (also while etcd is unreachable; the node
//! forwards with the rules it has meanwhile).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cfdp_control::plane::Job;
use cfdp_control::server::ClusterMode;
use cfdp_engine::LiveStats;
use cfdp_rules::protocol::parse_request_line;
use cfdp_rules::{parse_rule, RuleId};
use crossbeam::channel::{bounded, Sender};
use serde_json::{json, Value};

use crate::etcd::{Etcd, Event, WatchBatch};
use crate::keys::{canonical, Keys};

/// The fleet's rules by id: canonical text (to compare) and JSON (to apply).
type FleetRules = HashMap<RuleId, (String, Value)>;

/// What a node needs to join its fleet.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub node: String,
    /// Where the last applied revision is kept (`[control] state_dir`);
    /// `None`: the node resyncs on every start.
    pub state_dir: Option<std::path::PathBuf>,
}

/// Lease of the node's status key: a node that stops renewing it (killed,
/// cut off) leaves the fleet's live set this long after.
const LEASE_TTL_S: i64 = 5;
/// Lease renewal.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(1);
/// Status refresh when nothing changed (packet counters): every status
/// write is an etcd revision, so not more often than this.
const STATUS_EVERY: Duration = Duration::from_secs(5);
/// Wait before trying again after an error: doubling from the first to
/// the last while errors repeat, back to the first after a good session.
const RETRY_FIRST: Duration = Duration::from_millis(250);
const RETRY_MAX: Duration = Duration::from_secs(8);

/// Starts the agent thread. It stops when `stop` is set, revoking its
/// lease so the fleet sees it leave at once.
pub fn spawn(
    opts: NodeOptions,
    jobs: Sender<Job>,
    stats: Arc<LiveStats>,
    link: Arc<ClusterMode>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, String> {
    let keys = Keys::new(&opts.prefix)?;
    std::thread::Builder::new()
        .name("cfdp-cluster".into())
        .spawn(move || {
            let mut a = Agent {
                opts,
                keys,
                jobs,
                stats,
                link,
                applied: 0,
                error: None,
                mirror: HashMap::new(),
                live: false,
                atomicity: "dataplane_atomic",
            };
            a.run(&stop);
        })
        .map_err(|e| e.to_string())
}

struct Agent {
    opts: NodeOptions,
    keys: Keys,
    jobs: Sender<Job>,
    stats: Arc<LiveStats>,
    link: Arc<ClusterMode>,
    /// The fleet generation (etcd revision) this node has applied.
    applied: i64,
    error: Option<String>,
    /// The rules this node holds: id → canonical JSON.
    mirror: HashMap<RuleId, String>,
    /// Caught up: the leased status key (what `wait` counts) is written.
    live: bool,
    /// Of the local batches: `dataplane_atomic`, or `rollback_on_error`
    /// on a node in filter-only mode (which cannot publish a batch as one
    /// switch; its batches are still all-or-nothing).
    atomicity: &'static str,
}

impl Agent {
    fn run(&mut self, stop: &AtomicBool) {
        let mut retry = RETRY_FIRST;
        let backoff = |r: &mut Duration| {
            sleep_unless(stop, *r);
            *r = (*r * 2).min(RETRY_MAX);
        };
        while !stop.load(Ordering::Relaxed) {
            let mut etcd = match Etcd::connect(&self.opts.endpoints) {
                Ok(e) => e,
                Err(e) => {
                    self.fail(None, e);
                    backoff(&mut retry);
                    continue;
                }
            };
            let mut lease = match etcd.lease(LEASE_TTL_S) {
                Ok(l) => l,
                Err(e) => {
                    self.fail(None, e);
                    backoff(&mut retry);
                    continue;
                }
            };
            let began = Instant::now();
            let result = self.session(
                &mut etcd,
                lease.id,
                &mut |etcd| etcd.keep_alive(&mut lease),
                stop,
            );
            if let Err(e) = result {
                self.fail(Some((&mut etcd, lease.id)), e);
                if began.elapsed() > RETRY_MAX {
                    retry = RETRY_FIRST; // the session ran a while: a new fault
                }
                backoff(&mut retry);
            }
            etcd.revoke(lease);
        }
    }

    /// Catch up, then follow the watch until an error or `stop`.
    fn session(
        &mut self,
        etcd: &mut Etcd,
        lease: i64,
        keep_alive: &mut dyn FnMut(&mut Etcd) -> Result<(), String>,
        stop: &AtomicBool,
    ) -> Result<(), String> {
        self.live = false;
        let hello = self.call(r#"{"jsonrpc":"2.0","id":"cluster","method":"hello"}"#)?;
        self.atomicity = if hello["result"]["capabilities"]["mode"] == "filter-only" {
            "rollback_on_error"
        } else {
            "dataplane_atomic"
        };
        self.mirror = self.local_rules()?;
        // The fleet now: what catching up must reach.
        let (head, fleet) = self.fleet(etcd)?;
        let last = self.applied.max(self.saved_revision());
        let same = self.same_as(&fleet);
        // Replay from the last applied revision when there is one and the
        // node differs; otherwise (or once that turns out impossible) the
        // difference as one batch.
        let mut target: Option<(i64, FleetRules)> = None;
        let mut watch = if same {
            self.caught_up(etcd, lease, head)?;
            etcd.watch(&self.keys.rules_prefix(), head + 1)?
        } else if last > 0 && last < head {
            target = Some((head, fleet));
            etcd.watch(&self.keys.rules_prefix(), last + 1)?
        } else {
            self.resync(&fleet)?;
            self.caught_up(etcd, lease, head)?;
            etcd.watch(&self.keys.rules_prefix(), head + 1)?
        };
        self.error = None;
        let (mut renewed, mut published, mut heard) =
            (Instant::now(), Instant::now(), Instant::now());
        while !stop.load(Ordering::Relaxed) {
            match etcd.next(&mut watch, Duration::from_millis(200))? {
                None => {
                    // Replaying, and the history has nothing more (or
                    // does not reach the fleet's state): resync.
                    if target.is_some() && heard.elapsed() >= Duration::from_secs(1) {
                        let (h, fleet) = target.take().expect("checked");
                        self.resync(&fleet)?;
                        self.caught_up(etcd, lease, h)?;
                        published = Instant::now();
                    }
                }
                Some(WatchBatch::Canceled {
                    compact_revision,
                    reason,
                }) => {
                    if let Some((h, fleet)) = target.take() {
                        // The history is compacted past the last applied
                        // revision: the difference as one batch.
                        self.resync(&fleet)?;
                        self.caught_up(etcd, lease, h)?;
                        watch = etcd.watch(&self.keys.rules_prefix(), h + 1)?;
                        continue;
                    }
                    return Err(format!(
                        "watch canceled (compacted to {compact_revision}: {reason}); resyncing"
                    ));
                }
                Some(WatchBatch::Events(events)) => {
                    heard = Instant::now();
                    // Events arrive in revision order; one revision is one
                    // batch transaction. Revisions the node already has
                    // (up to `applied`) are passed over.
                    let mut i = 0;
                    while i < events.len() {
                        let rev = events[i].kv.mod_revision;
                        let j = i + events[i..]
                            .iter()
                            .take_while(|e| e.kv.mod_revision == rev)
                            .count();
                        if rev > self.applied {
                            match self.apply_revision(&events[i..j]) {
                                Ok(()) => {
                                    self.applied = rev;
                                    self.save_revision();
                                }
                                // Replaying history that cannot be applied
                                // (e.g. a value that was not a rule, since
                                // removed): the head read at the start is
                                // valid, so take it whole.
                                Err(e) if target.is_some() => {
                                    eprintln!("cfdp: cluster: replay stopped ({e}); resyncing");
                                    let (h, fleet) = target.take().expect("checked");
                                    self.resync(&fleet)?;
                                    self.caught_up(etcd, lease, h)?;
                                    watch = etcd.watch(&self.keys.rules_prefix(), h + 1)?;
                                    break;
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        i = j;
                        let reached = target
                            .as_ref()
                            .is_some_and(|(h, fleet)| rev >= *h || self.same_as(fleet));
                        if reached {
                            let (h, _) = target.take().expect("checked");
                            self.caught_up(etcd, lease, h.max(rev))?;
                        }
                    }
                    if self.live {
                        self.publish(etcd, lease)?;
                    }
                    published = Instant::now();
                }
            }
            if renewed.elapsed() >= KEEP_ALIVE_EVERY {
                keep_alive(etcd)?;
                renewed = Instant::now();
            }
            if published.elapsed() >= STATUS_EVERY {
                self.publish(etcd, lease)?;
                published = Instant::now();
            }
        }
        Ok(())
    }

    /// The fleet's rules now, by id (canonical text, JSON), and the
    /// revision read.
    fn fleet(&self, etcd: &mut Etcd) -> Result<(i64, FleetRules), String> {
        let (rev, kvs) = etcd.get_prefix(&self.keys.rules_prefix())?;
        let mut fleet = HashMap::new();
        for kv in kvs {
            let Some(id) = self.keys.rule_id(&kv.key) else {
                continue;
            };
            let (v, rule) = kv.rule()?;
            fleet.insert(id, (canonical(&rule).0, v));
        }
        Ok((rev, fleet))
    }

    /// Whether the node holds exactly `fleet`.
    fn same_as(&self, fleet: &FleetRules) -> bool {
        self.mirror.len() == fleet.len()
            && fleet
                .iter()
                .all(|(id, (t, _))| self.mirror.get(id) == Some(t))
    }

    /// Everything up to `revision` is applied: the node counts as live.
    fn caught_up(&mut self, etcd: &mut Etcd, lease: i64, revision: i64) -> Result<(), String> {
        self.applied = self.applied.max(revision);
        self.error = None;
        self.save_revision();
        self.live = true;
        self.publish(etcd, lease)
    }

    fn state_file(&self) -> Option<std::path::PathBuf> {
        self.opts.state_dir.as_ref().map(|d| d.join("cluster.json"))
    }

    /// The last revision applied by an earlier run for this prefix.
    fn saved_revision(&self) -> i64 {
        let Some(text) = self
            .state_file()
            .and_then(|p| std::fs::read_to_string(p).ok())
        else {
            return 0;
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v["prefix"] == self.keys.prefix() {
            v["revision"].as_i64().unwrap_or(0)
        } else {
            0
        }
    }

    /// Records the applied revision (after its batch is journaled; a crash
    /// in between replays the revision, which translates to nothing).
    fn save_revision(&self) {
        let Some(path) = self.state_file() else {
            return;
        };
        let tmp = path.with_extension("json.tmp");
        let text = json!({"prefix": self.keys.prefix(), "revision": self.applied}).to_string();
        let ok = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = ok {
            eprintln!("cfdp: cluster: {}: {e}", path.display());
        }
    }

    /// Makes the node's rules equal `fleet` with one batch (the
    /// difference).
    fn resync(&mut self, fleet: &FleetRules) -> Result<(), String> {
        let local = &self.mirror;
        let mut deletes = Vec::new();
        let mut modifies = Vec::new();
        let mut inserts = Vec::new();
        for (id, text) in local {
            match fleet.get(id) {
                None => deletes.push(json!({"op": "delete", "id": id})),
                Some((t, v)) if t != text => modifies.push(json!({"op": "modify", "rule": v})),
                Some(_) => {}
            }
        }
        for (id, (_, v)) in fleet {
            if !local.contains_key(id) {
                inserts.push(json!({"op": "insert", "rule": v}));
            }
        }
        self.apply_local(deletes, modifies, inserts)?;
        self.mirror = fleet.iter().map(|(id, (t, _))| (*id, t.clone())).collect();
        Ok(())
    }

    /// One revision's events as one local batch.
    fn apply_revision(&mut self, events: &[Event]) -> Result<(), String> {
        let mut deletes = Vec::new();
        let mut modifies = Vec::new();
        let mut inserts = Vec::new();
        let mut next = self.mirror.clone();
        for e in events {
            let Some(id) = self.keys.rule_id(&e.kv.key) else {
                continue;
            };
            if e.put {
                let (v, rule) = e.kv.rule()?;
                let text = canonical(&rule).0;
                match next.get(&id) {
                    Some(t) if *t == text => {}
                    Some(_) => modifies.push(json!({"op": "modify", "rule": v})),
                    None => inserts.push(json!({"op": "insert", "rule": v})),
                }
                next.insert(id, text);
            } else if next.remove(&id).is_some() {
                deletes.push(json!({"op": "delete", "id": id}));
            }
        }
        self.apply_local(deletes, modifies, inserts)?;
        self.mirror = next;
        Ok(())
    }

    /// Applies deletes, then modifies, then inserts as one
    /// `dataplane_atomic` batch through the control thread. Should a
    /// modify need a match another modify frees later in the batch (a swap
    /// of matches), the batch is tried again with each modify as a delete
    /// and an insert — still one atomic batch.
    fn apply_local(
        &self,
        deletes: Vec<Value>,
        modifies: Vec<Value>,
        inserts: Vec<Value>,
    ) -> Result<(), String> {
        if deletes.is_empty() && modifies.is_empty() && inserts.is_empty() {
            return Ok(());
        }
        let mut updates = deletes.clone();
        updates.extend(modifies.iter().cloned());
        updates.extend(inserts.iter().cloned());
        match self.batch(updates) {
            Ok(()) => Ok(()),
            Err(e) if modifies.is_empty() => Err(e),
            Err(_) => {
                let mut updates = deletes;
                for m in &modifies {
                    updates.push(json!({"op": "delete", "id": m["rule"]["id"]}));
                }
                for m in modifies {
                    updates.push(json!({"op": "insert", "rule": m["rule"]}));
                }
                updates.extend(inserts);
                self.batch(updates)
            }
        }
    }

    fn batch(&self, updates: Vec<Value>) -> Result<(), String> {
        let n = updates.len();
        let line = json!({"jsonrpc": "2.0", "id": "cluster", "method": "apply",
            "params": {"atomicity": self.atomicity, "updates": updates}})
        .to_string();
        let reply = self.call(&line)?;
        if let Some(e) = reply.get("error") {
            return Err(format!(
                "local batch of {n} updates refused: {}",
                e["message"]
            ));
        }
        let r = &reply["result"];
        if r["applied"] != true {
            let first = r["results"]
                .as_array()
                .and_then(|v| {
                    v.iter()
                        .find(|u| u["code"] != "ok" && u["code"] != "aborted")
                })
                .cloned()
                .unwrap_or(Value::Null);
            return Err(format!("local batch of {n} updates not applied: {first}"));
        }
        Ok(())
    }

    /// The node's rules as canonical JSON, read page by page.
    fn local_rules(&self) -> Result<HashMap<RuleId, String>, String> {
        let mut out = HashMap::new();
        let mut offset = 0u64;
        loop {
            let line = json!({"jsonrpc": "2.0", "id": "cluster", "method": "rules",
                "params": {"offset": offset, "limit": 10_000}})
            .to_string();
            let reply = self.call(&line)?;
            let page = reply["result"]["rules"]
                .as_array()
                .ok_or_else(|| format!("local rules: unexpected answer {reply}"))?;
            for r in page {
                let v = json!({"id": r["id"], "match": r["match"], "action": r["action"]});
                let rule = parse_rule(&v, None).map_err(|e| format!("local rule: {e}"))?;
                out.insert(rule.id, canonical(&rule).0);
            }
            if page.len() < 10_000 {
                return Ok(out);
            }
            offset += page.len() as u64;
        }
    }

    /// One request through the node's control thread.
    fn call(&self, line: &str) -> Result<Value, String> {
        let request = parse_request_line(line.as_bytes(), usize::MAX)
            .map_err(|e| format!("internal request: {}", e.to_json()))?;
        let (tx, rx) = bounded(1);
        self.jobs
            .send(Job {
                request,
                reply: tx,
                parse_us: 0,
            })
            .map_err(|_| "the control thread has stopped".to_string())?;
        let reply = rx
            .recv()
            .map_err(|_| "the control thread dropped the request".to_string())?;
        serde_json::from_str(reply.get()).map_err(|e| format!("internal reply: {e}"))
    }

    fn status(&self) -> Value {
        let t = self.stats.totals();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        json!({"node": self.opts.node, "generation": self.applied, "error": self.error,
               "caught_up": self.live,
               "rules": self.mirror.len(), "packets": t.packets, "matched": t.matched,
               "dropped": t.dropped, "forwarded": t.forwarded, "updated_unix_s": now})
    }

    /// Writes the status locally and to etcd (live key under the lease,
    /// last-seen key without).
    fn publish(&self, etcd: &mut Etcd, lease: i64) -> Result<(), String> {
        let s = self.status();
        *self.link.status.lock().unwrap_or_else(|e| e.into_inner()) = s.clone();
        let text = s.to_string();
        if self.live {
            etcd.put(&self.keys.node(&self.opts.node), &text, lease)?;
        }
        etcd.put(&self.keys.seen(&self.opts.node), &text, 0)
    }

    /// Records an error; tells etcd too when connected.
    fn fail(&mut self, etcd: Option<(&mut Etcd, i64)>, e: String) {
        eprintln!("cfdp: cluster: {e}");
        self.error = Some(e);
        *self.link.status.lock().unwrap_or_else(|e| e.into_inner()) = self.status();
        if let Some((etcd, lease)) = etcd {
            let _ = self.publish(etcd, lease);
        }
    }
}

fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
}
