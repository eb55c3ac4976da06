//! The node agent: one thread in every `cfdp run` with `[cluster] etcd`
//! set.
//!
//! 1. Connects, takes a lease (its status key lives as long as the node).
//! 2. Resyncs: lists the fleet's rules at revision R and applies the
//!    difference to what the node holds as one `dataplane_atomic` batch
//!    (after a restart, a lost connection, a compacted watch or a failed
//!    batch — as Ligato's agents resync), then reports generation R.
//! 3. Watches the rules from R + 1: the events of one revision (one batch
//!    transaction) become one local `dataplane_atomic` batch, applied in
//!    revision order; the node reports each revision once applied.
//!
//! Local batches go through the node's control thread like a socket
//! `apply` (journal with fsync, Bloom-assisted inserts, one publish), so a
//! node that restarts starts from its journal and resyncs the rest. A
//! batch the node cannot apply (e.g. its `max_rules` is lower than the
//! fleet's rule count) is not skipped: the node stays at the previous
//! generation, reports the error in its status (`cfdp ctl … fleet`) and
//! resyncs every few seconds.

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

/// What a node needs to join its fleet.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub node: String,
}

/// Lease of the node's status key: a node that stops renewing it (killed,
/// cut off) leaves the fleet's live set this long after.
const LEASE_TTL_S: i64 = 5;
/// Lease renewal.
const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(1);
/// Status refresh when nothing changed (packet counters): every status
/// write is an etcd revision, so not more often than this.
const STATUS_EVERY: Duration = Duration::from_secs(5);
/// Wait before trying again after an error.
const RETRY: Duration = Duration::from_secs(2);

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
    /// The rules this node holds from the fleet: id → canonical JSON.
    mirror: HashMap<RuleId, String>,
}

impl Agent {
    fn run(&mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            let mut etcd = match Etcd::connect(&self.opts.endpoints) {
                Ok(e) => e,
                Err(e) => {
                    self.fail(None, e);
                    sleep_unless(stop, RETRY);
                    continue;
                }
            };
            let mut lease = match etcd.lease(LEASE_TTL_S) {
                Ok(l) => l,
                Err(e) => {
                    self.fail(None, e);
                    sleep_unless(stop, RETRY);
                    continue;
                }
            };
            let result = self.session(
                &mut etcd,
                lease.id,
                &mut |etcd| etcd.keep_alive(&mut lease),
                stop,
            );
            if let Err(e) = result {
                self.fail(Some((&mut etcd, lease.id)), e);
                sleep_unless(stop, RETRY);
            }
            etcd.revoke(lease);
        }
    }

    /// Resync, then follow the watch until an error or `stop`.
    fn session(
        &mut self,
        etcd: &mut Etcd,
        lease: i64,
        keep_alive: &mut dyn FnMut(&mut Etcd) -> Result<(), String>,
        stop: &AtomicBool,
    ) -> Result<(), String> {
        let rev = self.resync(etcd)?;
        self.applied = self.applied.max(rev);
        self.error = None;
        self.publish(etcd, lease)?;
        let mut watch = etcd.watch(&self.keys.rules_prefix(), rev + 1)?;
        let (mut renewed, mut published) = (Instant::now(), Instant::now());
        while !stop.load(Ordering::Relaxed) {
            match etcd.next(&mut watch, Duration::from_millis(200))? {
                None => {}
                Some(WatchBatch::Canceled {
                    compact_revision,
                    reason,
                }) => {
                    return Err(format!(
                        "watch canceled (compacted to {compact_revision}: {reason}); resyncing"
                    ))
                }
                Some(WatchBatch::Events(events)) => {
                    // Events arrive in revision order; one revision is one
                    // batch transaction.
                    let mut i = 0;
                    while i < events.len() {
                        let rev = events[i].kv.mod_revision;
                        let j = i + events[i..]
                            .iter()
                            .take_while(|e| e.kv.mod_revision == rev)
                            .count();
                        self.apply_revision(&events[i..j])?;
                        self.applied = rev;
                        i = j;
                    }
                    self.publish(etcd, lease)?;
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

    /// Makes the node's rules equal the fleet's; returns the revision read.
    fn resync(&mut self, etcd: &mut Etcd) -> Result<i64, String> {
        let (rev, kvs) = etcd.get_prefix(&self.keys.rules_prefix())?;
        let mut fleet: HashMap<RuleId, (String, Value)> = HashMap::new();
        for kv in kvs {
            let Some(id) = self.keys.rule_id(&kv.key) else {
                continue;
            };
            let v: Value = serde_json::from_slice(&kv.value)
                .map_err(|e| format!("{}: not JSON: {e}", kv.key))?;
            let rule = parse_rule(&v, None).map_err(|e| format!("{}: {e}", kv.key))?;
            fleet.insert(id, (canonical(&rule).0, v));
        }
        let local = self.local_rules()?;
        let mut deletes = Vec::new();
        let mut modifies = Vec::new();
        let mut inserts = Vec::new();
        for (id, text) in &local {
            match fleet.get(id) {
                None => deletes.push(json!({"op": "delete", "id": id})),
                Some((t, v)) if t != text => modifies.push(json!({"op": "modify", "rule": v})),
                Some(_) => {}
            }
        }
        for (id, (_, v)) in &fleet {
            if !local.contains_key(id) {
                inserts.push(json!({"op": "insert", "rule": v}));
            }
        }
        self.apply_local(deletes, modifies, inserts)?;
        self.mirror = fleet.into_iter().map(|(id, (t, _))| (id, t)).collect();
        Ok(rev)
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
                let v: Value = serde_json::from_slice(&e.kv.value)
                    .map_err(|err| format!("{}: not JSON: {err}", e.kv.key))?;
                let rule = parse_rule(&v, None).map_err(|err| format!("{}: {err}", e.kv.key))?;
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
            "params": {"atomicity": "dataplane_atomic", "updates": updates}})
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
        rx.recv()
            .map_err(|_| "the control thread dropped the request".to_string())
    }

    fn status(&self) -> Value {
        let t = self.stats.totals();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        json!({"node": self.opts.node, "generation": self.applied, "error": self.error,
               "rules": self.mirror.len(), "packets": t.packets, "matched": t.matched,
               "dropped": t.dropped, "forwarded": t.forwarded, "updated_unix_s": now})
    }

    /// Writes the status locally and to etcd (live key under the lease,
    /// last-seen key without).
    fn publish(&self, etcd: &mut Etcd, lease: i64) -> Result<(), String> {
        let s = self.status();
        *self.link.status.lock().unwrap_or_else(|e| e.into_inner()) = s.clone();
        let text = s.to_string();
        etcd.put(&self.keys.node(&self.opts.node), &text, lease)?;
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
