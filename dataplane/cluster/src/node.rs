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

use cfdp_control::api::NodeStatus;
use cfdp_control::server::ClusterMode;
use cfdp_control::ControlHandle;
use cfdp_engine::{LiveStats, Mode};
use cfdp_rules::{Atomicity, Batch, Code, Rule, RuleId, Update};

use crate::error::ClusterError;
use crate::etcd::{Etcd, Event, Watch, WatchBatch};
use crate::keys::Keys;

/// The fleet's rules by id.
type FleetRules = HashMap<RuleId, Rule>;

/// What `state_dir/cluster.json` keeps: the last revision applied for a
/// prefix.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedRevision {
    prefix: String,
    revision: i64,
}

/// What a node needs to join its fleet.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub endpoints: Vec<String>,
    /// TLS and authentication towards etcd.
    pub security: crate::EtcdSecurity,
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
    control: ControlHandle,
    stats: Arc<LiveStats>,
    link: Arc<ClusterMode>,
    stop: Arc<AtomicBool>,
) -> Result<JoinHandle<()>, ClusterError> {
    let keys = Keys::new(&opts.prefix)?;
    std::thread::Builder::new()
        .name("cfdp-cluster".into())
        .spawn(move || {
            let mut a = Agent {
                opts,
                keys,
                control,
                stats,
                link,
                applied: 0,
                error: None,
                mirror: HashMap::new(),
                live: false,
                atomicity: Atomicity::DataplaneAtomic,
            };
            a.run(&stop);
        })
        .map_err(ClusterError::Spawn)
}

struct Agent {
    opts: NodeOptions,
    keys: Keys,
    control: ControlHandle,
    stats: Arc<LiveStats>,
    link: Arc<ClusterMode>,
    /// The fleet generation (etcd revision) this node has applied.
    applied: i64,
    error: Option<String>,
    /// The rules this node holds.
    mirror: HashMap<RuleId, Rule>,
    /// Caught up: the leased status key (what `wait` counts) is written.
    live: bool,
    /// Of the local batches: `dataplane_atomic`, or `rollback_on_error`
    /// on a node in filter-only mode (which cannot publish a batch as one
    /// switch; its batches are still all-or-nothing).
    atomicity: Atomicity,
}

impl Agent {
    fn run(&mut self, stop: &AtomicBool) {
        let mut retry = RETRY_FIRST;
        let backoff = |r: &mut Duration| {
            sleep_unless(stop, *r);
            *r = (*r * 2).min(RETRY_MAX);
        };
        while !stop.load(Ordering::Relaxed) {
            let mut etcd = match Etcd::connect(&self.opts.endpoints, &self.opts.security) {
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
        keep_alive: &mut dyn FnMut(&mut Etcd) -> Result<(), ClusterError>,
        stop: &AtomicBool,
    ) -> Result<(), ClusterError> {
        let (mut watch, mut target) = self.begin(etcd, lease)?;
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
                    return Err(ClusterError::WatchCanceled {
                        compact_revision,
                        reason,
                    });
                }
                Some(WatchBatch::Events(events)) => {
                    heard = Instant::now();
                    self.on_events(etcd, lease, &events, &mut target, &mut watch)?;
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

    /// The start of a session: the node's mode and rules, the fleet's head,
    /// and the watch — from the head when the node holds the fleet's rules
    /// (or after a resync), from the revision after the last applied one
    /// when the history can be replayed (then with the head as the target).
    fn begin(
        &mut self,
        etcd: &mut Etcd,
        lease: i64,
    ) -> Result<(Watch, Option<(i64, FleetRules)>), ClusterError> {
        self.live = false;
        let hello = self.control.hello()?;
        self.atomicity = if hello.capabilities.mode == Mode::FilterOnly {
            Atomicity::RollbackOnError
        } else {
            Atomicity::DataplaneAtomic
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
        let watch = if same {
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
        Ok((watch, target))
    }

    /// One watch message's events, revision by revision (one revision is
    /// one batch transaction; revisions the node has are passed over).
    fn on_events(
        &mut self,
        etcd: &mut Etcd,
        lease: i64,
        events: &[Event],
        target: &mut Option<(i64, FleetRules)>,
        watch: &mut Watch,
    ) -> Result<(), ClusterError> {
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
                        *watch = etcd.watch(&self.keys.rules_prefix(), h + 1)?;
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
        Ok(())
    }

    /// The fleet's rules now, by id, and the revision read.
    fn fleet(&self, etcd: &mut Etcd) -> Result<(i64, FleetRules), ClusterError> {
        let (rev, kvs) = etcd.get_prefix(&self.keys.rules_prefix())?;
        let mut fleet = HashMap::new();
        for kv in kvs {
            let Some(id) = self.keys.rule_id(&kv.key) else {
                continue;
            };
            fleet.insert(id, kv.rule()?.1);
        }
        Ok((rev, fleet))
    }

    /// Whether the node holds exactly `fleet`.
    fn same_as(&self, fleet: &FleetRules) -> bool {
        self.mirror == *fleet
    }

    /// Everything up to `revision` is applied: the node counts as live.
    fn caught_up(
        &mut self,
        etcd: &mut Etcd,
        lease: i64,
        revision: i64,
    ) -> Result<(), ClusterError> {
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
        match serde_json::from_str::<SavedRevision>(&text) {
            Ok(saved) if saved.prefix == self.keys.prefix() => saved.revision,
            _ => 0,
        }
    }

    /// Records the applied revision (after its batch is journaled; a crash
    /// in between replays the revision, which translates to nothing).
    fn save_revision(&self) {
        let Some(path) = self.state_file() else {
            return;
        };
        let tmp = path.with_extension("json.tmp");
        let saved = SavedRevision {
            prefix: self.keys.prefix().to_string(),
            revision: self.applied,
        };
        let text = serde_json::to_string(&saved).unwrap_or_default();
        let ok = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, &path));
        if let Err(e) = ok {
            eprintln!("cfdp: cluster: {}: {e}", path.display());
        }
    }

    /// Makes the node's rules equal `fleet` with one batch: the difference,
    /// as `cfdp ctl replace` computes it (`cfdp_rules::replace_updates`,
    /// which orders it so that every match a modify needs is free by then).
    fn resync(&mut self, fleet: &FleetRules) -> Result<(), ClusterError> {
        let current: Vec<Rule> = self.mirror.values().copied().collect();
        let desired: Vec<Rule> = fleet.values().copied().collect();
        let (updates, _) = cfdp_rules::replace_updates(&current, &desired)?;
        if !updates.is_empty() {
            self.batch(updates)?;
        }
        self.mirror = fleet.clone();
        Ok(())
    }

    /// One revision's events as one local batch.
    fn apply_revision(&mut self, events: &[Event]) -> Result<(), ClusterError> {
        let mut deletes = Vec::new();
        let mut modifies = Vec::new();
        let mut inserts = Vec::new();
        let mut next = self.mirror.clone();
        for e in events {
            let Some(id) = self.keys.rule_id(&e.kv.key) else {
                continue;
            };
            if e.put {
                let rule = e.kv.rule()?.1;
                match next.get(&id) {
                    Some(r) if *r == rule => {}
                    Some(_) => modifies.push(rule),
                    None => inserts.push(Update::Insert(rule)),
                }
                next.insert(id, rule);
            } else if next.remove(&id).is_some() {
                deletes.push(Update::Delete(id));
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
        deletes: Vec<Update>,
        modifies: Vec<Rule>,
        inserts: Vec<Update>,
    ) -> Result<(), ClusterError> {
        if deletes.is_empty() && modifies.is_empty() && inserts.is_empty() {
            return Ok(());
        }
        let mut updates = deletes.clone();
        updates.extend(modifies.iter().map(|r| Update::Modify(*r)));
        updates.extend(inserts.iter().copied());
        match self.batch(updates) {
            Ok(()) => Ok(()),
            Err(e) if modifies.is_empty() => Err(e),
            Err(_) => {
                let mut updates = deletes;
                updates.extend(modifies.iter().map(|r| Update::Delete(r.id)));
                updates.extend(modifies.iter().map(|r| Update::Insert(*r)));
                updates.extend(inserts);
                self.batch(updates)
            }
        }
    }

    fn batch(&self, updates: Vec<Update>) -> Result<(), ClusterError> {
        let n = updates.len();
        // Held to the rule set's size, not to the socket's max_batch: a
        // revision or a resync refused would leave the node behind.
        let batch = Batch {
            atomicity: self.atomicity,
            expected_generation: None,
            updates: updates.into_iter().map(Ok).collect(),
        };
        let report = self
            .control
            .apply_bounded(batch, cfdp_control::api::BatchBound::RuleSet)?;
        if !report.applied {
            let first = report
                .results
                .iter()
                .find(|u| u.code != Code::Ok && u.code != Code::Aborted)
                .map_or_else(String::new, |u| format!("{:?}: {}", u.code, u.message));
            return Err(ClusterError::NotApplied { n, first });
        }
        Ok(())
    }

    /// The node's rules, read page by page.
    fn local_rules(&self) -> Result<HashMap<RuleId, Rule>, ClusterError> {
        let entries = self.control.all_rules()?;
        Ok(entries.into_iter().map(|e| (e.rule.id, e.rule)).collect())
    }

    fn status(&self) -> NodeStatus {
        let t = self.stats.totals();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        NodeStatus {
            node: self.opts.node.clone(),
            generation: self.applied,
            error: self.error.clone(),
            caught_up: self.live,
            rules: self.mirror.len(),
            packets: t.packets,
            matched: t.matched,
            dropped: t.dropped,
            forwarded: t.forwarded,
            updated_unix_s: now,
        }
    }

    /// Writes the status locally and to etcd (live key under the lease,
    /// last-seen key without).
    fn publish(&self, etcd: &mut Etcd, lease: i64) -> Result<(), ClusterError> {
        let s = self.status();
        let text = serde_json::to_string(&s).unwrap_or_default();
        *self
            .link
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = s;
        if self.live {
            etcd.put(&self.keys.node(&self.opts.node), &text, lease)?;
        }
        etcd.put(&self.keys.seen(&self.opts.node), &text, 0)
    }

    /// Records an error; tells etcd too when connected.
    fn fail(&mut self, etcd: Option<(&mut Etcd, i64)>, e: ClusterError) {
        let e = cfdp_control::api::error_chain(&e);
        eprintln!("cfdp: cluster: {e}");
        self.error = Some(e);
        *self
            .link
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = self.status();
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
