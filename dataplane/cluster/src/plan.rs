//! A batch as one etcd transaction.
//!
//! The controller reads what the batch touches (its rules' keys, the match
//! keys its new rules need, the generation key), works out each update's
//! result in batch order against that view — the same rules as a node's
//! own `apply`: an insert needs a new id and a new match, modify and delete
//! an existing id — and writes the net effect in one transaction guarded
//! by compares on every key it read (`mod_revision` equal to what was read,
//! 0 for "absent"). If another controller changed any of them in between,
//! the transaction fails as a whole and the controller reads again; so of
//! two controllers writing at once, one wins and the other sees the new
//! state. All-or-nothing modes write nothing when an update fails;
//! `continue_on_error` writes the updates that succeed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use cfdp_rules::decide;
use cfdp_rules::{Batch, Code, Rule, RuleId, Update, UpdateResult};

use crate::keys::{canonical, Keys};

/// What the controller read: for every key the batch touches, its value
/// and mod revision if it exists.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Mod revision of the generation key (0: no batch yet).
    pub generation: i64,
    /// Rules by id, with the mod revision of their key.
    pub rules: HashMap<RuleId, (Rule, i64)>,
    /// Match keys (canonical match text) → owning rule id and mod revision.
    pub matches: HashMap<String, (RuleId, i64)>,
}

/// The keys to read before planning: the batch's rule ids and the matches
/// of the rules it inserts or modifies (old matches of modified or deleted
/// rules come with the rules).
pub fn reads(batch: &Batch) -> (BTreeSet<RuleId>, BTreeSet<String>) {
    let mut ids = BTreeSet::new();
    let mut matches = BTreeSet::new();
    for u in batch.updates.iter().flatten() {
        ids.insert(u.id());
        if let Update::Insert(r) | Update::Modify(r) = u {
            matches.insert(canonical(r).1);
        }
    }
    (ids, matches)
}

/// The transaction for a batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// One result per update, in batch order.
    pub results: Vec<UpdateResult>,
    /// Keys whose mod revision must still be what was read (0: absent).
    pub guards: Vec<(String, i64)>,
    pub puts: Vec<(String, String)>,
    pub deletes: Vec<String>,
}

impl Plan {
    /// Whether the transaction writes anything.
    pub fn writes(&self) -> bool {
        !self.puts.is_empty() || !self.deletes.is_empty()
    }

    /// Compares and operations (the generation key's put included), as
    /// etcd counts them against `--max-txn-ops`.
    pub fn ops(&self) -> (usize, usize) {
        (
            self.guards.len() + 1,
            self.puts.len() + self.deletes.len() + 1,
        )
    }

    /// Bytes of keys and values the request carries (a lower bound of its
    /// size, for `--max-request-bytes`).
    pub fn bytes(&self) -> usize {
        self.guards.iter().map(|(k, _)| k.len() + 8).sum::<usize>()
            + self
                .puts
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + self.deletes.iter().map(String::len).sum::<usize>()
    }
}

/// Works out `batch` against `view` (see the module docs).
pub fn plan(batch: &Batch, view: &View, keys: &Keys) -> Plan {
    let mut pic = Picture {
        view,
        rules: BTreeMap::new(),
        matches: BTreeMap::new(),
    };
    let mut results: Vec<UpdateResult> = batch
        .updates
        .iter()
        .map(|u| match u {
            Ok(u) => pic.step(u),
            Err(e) => UpdateResult::err(Code::InvalidArgument, e.to_string()),
        })
        .collect();
    let failed = results.iter().any(|r| r.code != Code::Ok);
    if failed && batch.atomicity.all_or_nothing() {
        decide::abort_others(&mut results, None);
        return Plan {
            results,
            ..Plan::default()
        };
    }
    let mut p = Plan {
        results,
        ..Plan::default()
    };
    guard(&mut p, batch, view, keys);
    // The net effect.
    for (id, r) in pic.rules {
        match r {
            Some(rule) => p.puts.push((keys.rule(id), canonical(&rule).0)),
            None if view.rules.contains_key(&id) => p.deletes.push(keys.rule(id)),
            None => {}
        }
    }
    for (m, owner) in pic.matches {
        match owner {
            Some(id) => p.puts.push((keys.match_key(&m), id.to_string())),
            None if view.matches.contains_key(&m) => p.deletes.push(keys.match_key(&m)),
            None => {}
        }
    }
    p
}

/// The batch's running picture over the fleet's view: id → rule (None:
/// deleted), match → id.
struct Picture<'v> {
    view: &'v View,
    rules: BTreeMap<RuleId, Option<Rule>>,
    matches: BTreeMap<String, Option<RuleId>>,
}

impl Picture<'_> {
    fn rule_now(&self, id: RuleId) -> Option<Rule> {
        match self.rules.get(&id) {
            Some(r) => *r,
            None => self.view.rules.get(&id).map(|(r, _)| *r),
        }
    }

    fn owner_now(&self, m: &str) -> Option<RuleId> {
        match self.matches.get(m) {
            Some(o) => *o,
            None => self.view.matches.get(m).map(|(id, _)| *id),
        }
    }

    /// One update against the picture so far ([`decide::check`]), which it
    /// changes when it succeeds.
    fn step(&mut self, u: &Update) -> UpdateResult {
        match decide::check(self, u) {
            Err(refused) => refused.result(),
            Ok(replaced) => {
                if let Some(old) = replaced {
                    self.matches.insert(canonical(&old).1, None);
                }
                match u {
                    Update::Insert(r) | Update::Modify(r) => {
                        self.rules.insert(r.id, Some(*r));
                        self.matches.insert(canonical(r).1, Some(r.id));
                    }
                    Update::Delete(id) => {
                        self.rules.insert(*id, None);
                    }
                }
                UpdateResult::ok()
            }
        }
    }
}

impl decide::RuleView for Picture<'_> {
    fn rule(&self, id: RuleId) -> Option<Rule> {
        self.rule_now(id)
    }

    fn match_owner(&self, r: &Rule) -> Option<RuleId> {
        self.owner_now(&canonical(r).1)
    }
}

/// Guards on every key the batch's outcome depends on: all ids and matches
/// it read (a failed update's check counts too — it decided the result the
/// controller reports).
fn guard(p: &mut Plan, batch: &Batch, view: &View, keys: &Keys) {
    let (ids, ms) = reads(batch);
    for id in ids {
        p.guards.push((
            keys.rule(id),
            view.rules.get(&id).map_or(0, |(_, rev)| *rev),
        ));
    }
    // The new matches (a set already), and the old ones of the rules read.
    let mut guarded = ms;
    guarded.extend(view.rules.values().map(|(r, _)| canonical(r).1));
    for m in &guarded {
        p.guards.push((
            keys.match_key(m),
            view.matches.get(m).map_or(0, |(_, rev)| *rev),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::parse_batch;
    use serde_json::json;

    fn batch(v: serde_json::Value) -> Batch {
        parse_batch(&v, 1000).unwrap()
    }

    fn flow(id: u32, sport: u16) -> serde_json::Value {
        json!({"id": id, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2",
            "proto": "udp", "sport": sport, "dport": 53}}, "action": "drop"})
    }

    fn view_with(rules: &[(serde_json::Value, i64)]) -> View {
        let mut v = View::default();
        for (r, rev) in rules {
            let rule = cfdp_rules::parse_rule(r, None).unwrap();
            v.matches.insert(canonical(&rule).1, (rule.id, *rev));
            v.rules.insert(rule.id, (rule, *rev));
        }
        v
    }

    #[test]
    fn inserts_need_new_ids_and_matches_and_are_guarded() {
        let k = Keys::new("/f").unwrap();
        let b = batch(json!({"updates": [
            {"op": "insert", "rule": flow(1, 1000)},
            {"op": "insert", "rule": flow(2, 2000)}]}));
        let p = plan(&b, &View::default(), &k);
        assert!(p.results.iter().all(|r| r.code == Code::Ok));
        assert_eq!(p.puts.len(), 4, "{p:?}");
        assert!(p.deletes.is_empty());
        // Every key must still be absent when the transaction runs.
        assert_eq!(p.guards.len(), 4);
        assert!(p.guards.iter().all(|(_, rev)| *rev == 0));

        // Rule 1 exists: the id is taken; a new id with rule 1's match is
        // refused too; all-or-nothing aborts the rest and writes nothing.
        let v = view_with(&[(flow(1, 1000), 7)]);
        let b = batch(json!({"updates": [
            {"op": "insert", "rule": flow(3, 3000)},
            {"op": "insert", "rule": flow(1, 1111)},
            {"op": "insert", "rule": flow(4, 1000)}]}));
        let p = plan(&b, &v, &k);
        let codes: Vec<Code> = p.results.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [Code::Aborted, Code::AlreadyExists, Code::AlreadyExists]
        );
        assert!(!p.writes());
        // continue_on_error writes what succeeded, guarded on what it read.
        let mut b = b;
        b.atomicity = cfdp_rules::Atomicity::ContinueOnError;
        let p = plan(&b, &v, &k);
        let codes: Vec<Code> = p.results.iter().map(|r| r.code).collect();
        assert_eq!(codes, [Code::Ok, Code::AlreadyExists, Code::AlreadyExists]);
        assert_eq!(p.puts.len(), 2);
        assert!(p.guards.contains(&(k.rule(1), 7)));
    }

    #[test]
    fn modify_and_delete_move_and_free_matches_in_batch_order() {
        let k = Keys::new("/f").unwrap();
        let v = view_with(&[(flow(1, 1000), 5), (flow(2, 2000), 6)]);
        // Delete 2, then give 1 the match 2 had, then insert 3 with 1's
        // old match: legal in this order.
        let b = batch(json!({"updates": [
            {"op": "delete", "id": 2},
            {"op": "modify", "rule": flow(1, 2000)},
            {"op": "insert", "rule": flow(3, 1000)}]}));
        let p = plan(&b, &v, &k);
        assert!(p.results.iter().all(|r| r.code == Code::Ok), "{p:?}");
        assert_eq!(p.deletes, [k.rule(2)]);
        let put_keys: Vec<&str> = p.puts.iter().map(|(k, _)| k.as_str()).collect();
        assert!(put_keys.contains(&k.rule(1).as_str()) && put_keys.contains(&k.rule(3).as_str()));
        assert!(p.guards.contains(&(k.rule(2), 6)) && p.guards.contains(&(k.rule(1), 5)));
        // The other order fails: 1 cannot take 2's match while 2 has it.
        let b = batch(json!({"updates": [
            {"op": "modify", "rule": flow(1, 2000)},
            {"op": "delete", "id": 2}]}));
        let p = plan(&b, &v, &k);
        assert_eq!(p.results[0].code, Code::AlreadyExists);
        assert!(!p.writes());
        // Unknown ids.
        let b = batch(json!({"updates": [{"op": "delete", "id": 9}]}));
        assert_eq!(plan(&b, &v, &k).results[0].code, Code::NotFound);
    }
}
