//! `cfdp ctl --etcd URL[,URL…] --prefix P …`: the fleet's rule set in etcd.
//!
//! * `apply FILE` — a batch (the socket's `apply` JSON: updates, the three
//!   atomicity modes, `expected_generation`) as one etcd transaction (see
//!   [`crate::plan`]); prints `generation` and the per-update results.
//! * `wait G [--timeout S]` — until every live node has applied ≥ G.
//! * `fleet` — the generation and every node seen, live or not.
//! * `rules`, `get ID` — the rule set as etcd holds it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use cfdp_rules::batch::ReplaceCounts;
use cfdp_rules::{Atomicity, Batch, Code, Rule, UpdateResult};
use serde::Serialize;
use serde_json::{json, Value};

use crate::error::ClusterError;
use crate::etcd::Etcd;
use crate::keys::{canonical, Keys};
use crate::plan::{plan, reads, View};
use crate::security::EtcdSecurity;

/// etcd's defaults for `--max-txn-ops` and `--max-request-bytes`; `cfdp
/// ctl` refuses a batch that would not fit them (etcd would too) unless
/// told the servers allow more.
#[derive(Clone, Copy, Debug)]
pub struct TxnLimits {
    pub max_txn_ops: usize,
    pub max_request_bytes: usize,
}

impl Default for TxnLimits {
    fn default() -> Self {
        Self {
            max_txn_ops: 128,
            max_request_bytes: 1536 * 1024,
        }
    }
}

/// A ctl command against the fleet.
#[derive(Clone, Debug)]
pub enum Command {
    Apply {
        batch: Batch,
        limits: TxnLimits,
    },
    /// The whole intended rule set: the difference to the fleet's, as one
    /// transaction.
    Replace {
        rules: Vec<Rule>,
        expected_generation: Option<u64>,
        limits: TxnLimits,
    },
    Wait {
        generation: i64,
        timeout: Duration,
    },
    Fleet,
    Rules,
    Get {
        id: u64,
    },
}

/// Runs `cmd`, prints its JSON, returns the exit code (0 done, 1 failed or
/// timed out).
pub fn run(endpoints: &[String], security: &EtcdSecurity, prefix: &str, cmd: Command) -> u8 {
    let out = Keys::new(prefix)
        .and_then(|keys| Ok((Etcd::connect(endpoints, security)?, keys)))
        .and_then(|(mut etcd, keys)| match cmd {
            Command::Apply { batch, limits } => apply(&mut etcd, &keys, &batch, limits),
            Command::Replace {
                rules,
                expected_generation,
                limits,
            } => replace(&mut etcd, &keys, &rules, expected_generation, limits),
            Command::Wait {
                generation,
                timeout,
            } => wait(&mut etcd, &keys, generation, timeout),
            Command::Fleet => fleet(&mut etcd, &keys).map(|v| (v, true)),
            Command::Rules => rules(&mut etcd, &keys),
            Command::Get { id } => get(&mut etcd, &keys, id),
        });
    match out {
        Ok((v, ok)) => {
            println!("{}", serde_json::to_string(&v).expect("answers serialize"));
            u8::from(!ok)
        }
        Err(e) => {
            println!("{}", json!({"error": e.to_string()}));
            eprintln!("cfdp ctl: {e}");
            1
        }
    }
}

/// How often a transaction is retried when another writer changed what
/// it read.
const RETRIES: usize = 20;

/// What `apply` and `replace` print.
#[derive(Debug, Serialize)]
struct Applied {
    /// The fleet's generation after the batch (before it, when nothing
    /// was written).
    generation: i64,
    applied: bool,
    results: Vec<UpdateResult>,
    /// Transactions tried (another writer can make one retry).
    #[serde(skip_serializing_if = "Option::is_none")]
    attempts: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replace: Option<ReplaceCounts>,
}

fn apply(
    etcd: &mut Etcd,
    keys: &Keys,
    batch: &Batch,
    limits: TxnLimits,
) -> Result<(Value, bool), ClusterError> {
    apply_typed(etcd, keys, batch, limits).map(|(a, ok)| (to_value(&a), ok))
}

fn to_value(a: &impl Serialize) -> Value {
    serde_json::to_value(a).expect("answers serialize")
}

fn apply_typed(
    etcd: &mut Etcd,
    keys: &Keys,
    batch: &Batch,
    limits: TxnLimits,
) -> Result<(Applied, bool), ClusterError> {
    let (ids, matches) = reads(batch);
    let gen_key = keys.generation();
    for attempt in 0..RETRIES {
        let view = read_view(etcd, keys, &ids, &matches, limits.max_txn_ops.max(1))?;
        if let Some(g) = batch.expected_generation {
            if g as i64 != view.generation {
                return Err(ClusterError::GenerationMismatch {
                    expected: g,
                    current: view.generation,
                });
            }
        }
        let p = plan(batch, &view, keys);
        let all_ok = p.results.iter().all(|r| r.code == Code::Ok);
        if !p.writes() {
            return Ok((
                Applied {
                    generation: view.generation,
                    applied: false,
                    results: p.results,
                    attempts: None,
                    replace: None,
                },
                all_ok,
            ));
        }
        check_limits(&p, limits)?;
        let mut guards = p.guards.clone();
        guards.push((gen_key.clone(), view.generation));
        let mut puts = p.puts.clone();
        puts.push((gen_key.clone(), String::new()));
        match etcd.txn(&guards, &puts, &p.deletes)? {
            Some(rev) => {
                return Ok((
                    Applied {
                        generation: rev,
                        applied: true,
                        results: p.results,
                        attempts: Some(attempt + 1),
                        replace: None,
                    },
                    all_ok,
                ))
            }
            // Another writer changed something this batch read: read again.
            None => std::thread::sleep(Duration::from_millis(2 << attempt.min(6))),
        }
    }
    Err(ClusterError::Contended(format!(
        "the rule set kept changing under this batch ({RETRIES} attempts); nothing was applied"
    )))
}

/// What a batch touches, read from etcd: the generation, the rules of its
/// ids, and the owners of its matches and of the matches those rules hold.
fn read_view(
    etcd: &mut Etcd,
    keys: &Keys,
    ids: &std::collections::BTreeSet<cfdp_rules::RuleId>,
    matches: &std::collections::BTreeSet<String>,
    per_txn: usize,
) -> Result<View, ClusterError> {
    let gen_key = keys.generation();
    let mut want: Vec<String> = vec![gen_key.clone()];
    want.extend(ids.iter().map(|&id| keys.rule(id)));
    want.extend(matches.iter().map(|m| keys.match_key(m)));
    let got = etcd.get_many(&want, per_txn)?;
    let mut view = View::default();
    let mut old_matches = Vec::new();
    for kv in &got {
        if kv.key == gen_key {
            view.generation = kv.mod_revision;
        } else if let Some(id) = keys.rule_id(&kv.key) {
            let (_, r) = kv.rule()?;
            old_matches.push(keys.match_key(&canonical(&r).1));
            view.rules.insert(id, (r, kv.mod_revision));
        }
    }
    // The matches of rules that will be modified or deleted.
    let more: Vec<String> = old_matches
        .into_iter()
        .filter(|k| !want.contains(k))
        .collect();
    let mut match_kvs = got;
    match_kvs.extend(etcd.get_many(&more, per_txn)?);
    let mprefix = keys.match_key("");
    for kv in &match_kvs {
        if let Some(m) = kv.key.strip_prefix(&mprefix) {
            let owner: u32 = std::str::from_utf8(&kv.value)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| ClusterError::BadOwner(kv.key.clone()))?;
            view.matches.insert(m.to_string(), (owner, kv.mod_revision));
        }
    }
    Ok(view)
}

/// Refuses a transaction etcd would refuse for its size.
fn check_limits(p: &crate::plan::Plan, limits: TxnLimits) -> Result<(), ClusterError> {
    let (compares, ops) = p.ops();
    if compares > limits.max_txn_ops || ops > limits.max_txn_ops {
        return Err(ClusterError::TooManyOps {
            ops,
            compares,
            max: limits.max_txn_ops,
        });
    }
    if p.bytes() > limits.max_request_bytes {
        return Err(ClusterError::TooManyBytes {
            bytes: p.bytes(),
            max: limits.max_request_bytes,
        });
    }
    Ok(())
}

/// `replace`: reads the fleet's rules, works out the difference to
/// `desired` (`cfdp_rules::replace_updates`) and applies it as one batch
/// guarded on the generation it read — if another batch lands in between,
/// it reads again (unless the caller gave `expected_generation`: then that
/// is the only generation it applies to).
fn replace(
    etcd: &mut Etcd,
    keys: &Keys,
    desired: &[Rule],
    expected: Option<u64>,
    limits: TxnLimits,
) -> Result<(Value, bool), ClusterError> {
    for _ in 0..RETRIES {
        let g = generation(etcd, keys)?;
        let (_, kvs) = etcd.get_prefix(&keys.rules_prefix())?;
        if generation(etcd, keys)? != g {
            continue; // a batch landed during the read
        }
        let current: Vec<cfdp_rules::Rule> = kvs
            .iter()
            .map(|kv| kv.rule().map(|(_, r)| r))
            .collect::<Result<_, ClusterError>>()?;
        let (updates, counts) =
            cfdp_rules::replace_updates(&current, desired).map_err(ClusterError::BadReplace)?;
        let expected_generation = expected.unwrap_or(g as u64);
        if updates.is_empty() {
            if expected.is_some_and(|e| e as i64 != g) {
                return Err(ClusterError::GenerationMismatch {
                    expected: expected_generation,
                    current: g,
                });
            }
            let a = Applied {
                generation: g,
                applied: true,
                results: Vec::new(),
                attempts: None,
                replace: Some(counts),
            };
            return Ok((to_value(&a), true));
        }
        let batch = Batch {
            atomicity: Atomicity::DataplaneAtomic,
            expected_generation: Some(expected_generation),
            updates: updates.into_iter().map(Ok).collect(),
        };
        match apply_typed(etcd, keys, &batch, limits) {
            Ok((mut a, ok)) => {
                a.replace = Some(counts);
                return Ok((to_value(&a), ok));
            }
            Err(ClusterError::GenerationMismatch { .. }) if expected.is_none() => continue,
            Err(e) => return Err(e),
        }
    }
    Err(ClusterError::Contended(format!(
        "the rule set kept changing under this replace ({RETRIES} attempts); nothing was applied"
    )))
}

/// Every node seen: its last status, and whether it is live (its leased
/// key exists).
fn nodes(etcd: &mut Etcd, keys: &Keys) -> Result<Vec<Value>, ClusterError> {
    let (_, live) = etcd.get_prefix(&keys.nodes_prefix())?;
    let live: HashMap<String, Value> = live
        .into_iter()
        .filter_map(|kv| {
            let name = kv.key.strip_prefix(&keys.nodes_prefix())?.to_string();
            Some((name, serde_json::from_slice(&kv.value).ok()?))
        })
        .collect();
    let (_, seen) = etcd.get_prefix(&keys.seen_prefix())?;
    let mut out = Vec::new();
    for kv in seen {
        let Some(name) = kv.key.strip_prefix(&keys.seen_prefix()) else {
            continue;
        };
        let mut v: Value = live
            .get(name)
            .cloned()
            .or_else(|| serde_json::from_slice(&kv.value).ok())
            .unwrap_or_else(|| json!({}));
        v["node"] = json!(name);
        v["live"] = json!(live.contains_key(name));
        out.push(v);
    }
    Ok(out)
}

fn generation(etcd: &mut Etcd, keys: &Keys) -> Result<i64, ClusterError> {
    Ok(etcd
        .get_many(&[keys.generation()], 1)?
        .first()
        .map_or(0, |kv| kv.mod_revision))
}

fn fleet(etcd: &mut Etcd, keys: &Keys) -> Result<Value, ClusterError> {
    let g = generation(etcd, keys)?;
    let nodes = nodes(etcd, keys)?;
    Ok(json!({"prefix": keys.prefix(), "generation": g, "nodes": nodes}))
}

/// Waits until every live node reports generation ≥ `g` (and at least one
/// node is live: an empty fleet has applied nothing).
fn wait(
    etcd: &mut Etcd,
    keys: &Keys,
    g: i64,
    timeout: Duration,
) -> Result<(Value, bool), ClusterError> {
    let start = Instant::now();
    loop {
        let nodes = nodes(etcd, keys)?;
        let live: Vec<&Value> = nodes.iter().filter(|n| n["live"] == true).collect();
        let lagging: Vec<Value> = live
            .iter()
            .filter(|n| n["generation"].as_i64().unwrap_or(0) < g)
            .map(|n| json!({"node": n["node"], "generation": n["generation"], "error": n["error"]}))
            .collect();
        if !live.is_empty() && lagging.is_empty() {
            return Ok((
                json!({"generation": g, "nodes": live.len(), "waited_s": start.elapsed().as_secs_f64()}),
                true,
            ));
        }
        if start.elapsed() >= timeout {
            let names: Vec<String> = lagging
                .iter()
                .map(|n| n["node"].as_str().unwrap_or("?").to_string())
                .collect();
            eprintln!(
                "cfdp ctl wait: generation {g} not reached in {:.1} s; lagging: {}",
                timeout.as_secs_f64(),
                if live.is_empty() {
                    "no live node".to_string()
                } else {
                    names.join(", ")
                }
            );
            return Ok((
                json!({"generation": g, "timed_out": true, "lagging": lagging,
                       "live_nodes": live.len()}),
                false,
            ));
        }
        // Two small reads per poll: cheap for etcd, and `wait` returns
        // within ~20 ms of the last node reporting.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rule set; a value under the rules' prefix that is not a rule
/// (written by something other than cfdp) is listed under `invalid` and
/// makes the exit status 1 — nodes refuse it too, and say so.
fn rules(etcd: &mut Etcd, keys: &Keys) -> Result<(Value, bool), ClusterError> {
    let g = generation(etcd, keys)?;
    let (_, kvs) = etcd.get_prefix(&keys.rules_prefix())?;
    let mut rules = Vec::with_capacity(kvs.len());
    let mut invalid = Vec::new();
    for kv in &kvs {
        match kv.rule() {
            Ok((v, _)) => rules.push(v),
            Err(e) => invalid.push(json!({"key": kv.key, "error": e.to_string()})),
        }
    }
    let ok = invalid.is_empty();
    let mut out = json!({"generation": g, "total": rules.len(), "rules": rules});
    if !ok {
        out["invalid"] = json!(invalid);
    }
    Ok((out, ok))
}

fn get(etcd: &mut Etcd, keys: &Keys, id: u64) -> Result<(Value, bool), ClusterError> {
    let g = generation(etcd, keys)?;
    let Ok(id) = u32::try_from(id) else {
        return Ok((
            json!({"generation": g, "error": format!("no rule {id}")}),
            false,
        ));
    };
    match etcd.get_many(&[keys.rule(id)], 1)?.first() {
        Some(kv) => {
            let rule: Value =
                serde_json::from_slice(&kv.value).map_err(|source| ClusterError::NotJson {
                    key: kv.key.clone(),
                    source,
                })?;
            Ok((json!({"generation": g, "rule": rule}), true))
        }
        None => Ok((
            json!({"generation": g, "error": format!("no rule {id}")}),
            false,
        )),
    }
}
