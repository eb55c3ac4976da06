//! What an update does to a rule set, decided in one place.
//!
//! The control store (a node's own rules), the fleet's planner (the rules
//! in etcd) and P4Runtime answer a batch with the same results and the same
//! messages because each of them asks [`check`] against its own view of
//! the rule set so far (the set as it was, with the batch's earlier
//! successful updates laid over it), and marks an all-or-nothing batch's
//! other updates with [`abort_others`]. What a successful update then
//! costs (filter slots, etcd keys) is the caller's business; whether it
//! succeeds is decided here.

use crate::batch::{Code, Update, UpdateResult};
use crate::rule::{Rule, RuleId};

/// The rule set an update is checked against.
pub trait RuleView {
    /// The rule with this id now.
    fn rule(&self, id: RuleId) -> Option<Rule>;
    /// The rule that now holds `r`'s match (the set's second key: a match,
    /// and for multi-field rules its priority, belongs to one rule).
    fn match_owner(&self, r: &Rule) -> Option<RuleId>;
}

/// Why an update is refused by the rule set it meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// An insert's id is in use.
    #[error("id: rule id {0} exists")]
    IdTaken(RuleId),
    /// Another rule has this match (and priority).
    #[error("match: same match as rule id {by}")]
    MatchTaken { by: RuleId },
    /// A modify or delete names no rule.
    #[error("no rule with id {0}")]
    NotFound(RuleId),
}

impl Refusal {
    /// The result code a batch answers with.
    pub fn code(self) -> Code {
        match self {
            Refusal::IdTaken(_) | Refusal::MatchTaken { .. } => Code::AlreadyExists,
            Refusal::NotFound(_) => Code::NotFound,
        }
    }

    /// The update's result.
    pub fn result(self) -> UpdateResult {
        UpdateResult::err(self.code(), self.to_string())
    }
}

/// What a successful update changes: the rule it replaces or removes (None
/// for an insert). The caller lays the change over its view.
pub type Replaced = Option<Rule>;

/// Whether `u` succeeds against `view` (see the module docs): an insert
/// needs a new id and a match no rule holds; a modify needs its id, and a
/// match no *other* rule holds; a delete needs its id.
pub fn check(view: &impl RuleView, u: &Update) -> Result<Replaced, Refusal> {
    match u {
        Update::Insert(r) => {
            if view.rule(r.id).is_some() {
                return Err(Refusal::IdTaken(r.id));
            }
            match view.match_owner(r) {
                Some(by) => Err(Refusal::MatchTaken { by }),
                None => Ok(None),
            }
        }
        Update::Modify(r) => {
            let old = view.rule(r.id).ok_or(Refusal::NotFound(r.id))?;
            match view.match_owner(r) {
                Some(by) if by != r.id => Err(Refusal::MatchTaken { by }),
                _ => Ok(Some(old)),
            }
        }
        Update::Delete(id) => view.rule(*id).ok_or(Refusal::NotFound(*id)).map(Some),
    }
}

/// The message of an update not applied because another failed.
pub const ABORTED: &str = "not applied: another update of the batch failed";

/// Marks every update still `ok` in `results` aborted but `failed` (an
/// all-or-nothing batch in which an update failed applies none).
pub fn abort_others(results: &mut [UpdateResult], failed: Option<usize>) {
    for (i, r) in results.iter_mut().enumerate() {
        if Some(i) != failed && r.code == Code::Ok {
            *r = UpdateResult::err(Code::Aborted, ABORTED);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::{Action, Match};
    use crate::ExactFlow;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Set(HashMap<RuleId, Rule>);

    impl RuleView for Set {
        fn rule(&self, id: RuleId) -> Option<Rule> {
            self.0.get(&id).copied()
        }
        fn match_owner(&self, r: &Rule) -> Option<RuleId> {
            self.0
                .values()
                .find(|o| o.matcher == r.matcher)
                .map(|o| o.id)
        }
    }

    fn flow(id: RuleId, sport: u16) -> Rule {
        let a: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        Rule {
            id,
            matcher: Match::Flow(ExactFlow::new(a, a, 17, sport, 53).unwrap()),
            action: Action::Drop,
        }
    }

    #[test]
    fn each_form_is_refused_for_its_reason() {
        let mut s = Set::default();
        s.0.insert(1, flow(1, 100));
        s.0.insert(2, flow(2, 200));
        assert_eq!(check(&s, &Update::Insert(flow(3, 300))), Ok(None));
        assert_eq!(
            check(&s, &Update::Insert(flow(1, 300))),
            Err(Refusal::IdTaken(1))
        );
        assert_eq!(
            check(&s, &Update::Insert(flow(3, 200))),
            Err(Refusal::MatchTaken { by: 2 })
        );
        // A modify may keep its own match, not take another's.
        assert_eq!(
            check(&s, &Update::Modify(flow(1, 100))),
            Ok(Some(flow(1, 100)))
        );
        assert_eq!(
            check(&s, &Update::Modify(flow(1, 200))),
            Err(Refusal::MatchTaken { by: 2 })
        );
        assert_eq!(
            check(&s, &Update::Modify(flow(9, 900))),
            Err(Refusal::NotFound(9))
        );
        assert_eq!(check(&s, &Update::Delete(2)), Ok(Some(flow(2, 200))));
        assert_eq!(check(&s, &Update::Delete(9)), Err(Refusal::NotFound(9)));
        assert_eq!(Refusal::NotFound(9).code(), Code::NotFound);
        assert_eq!(Refusal::IdTaken(1).result().code, Code::AlreadyExists);
    }

    #[test]
    fn abort_others_spares_the_failure_and_earlier_failures() {
        let mut r = vec![
            UpdateResult::ok(),
            UpdateResult::err(Code::NotFound, "x"),
            UpdateResult::ok(),
        ];
        abort_others(&mut r, Some(2));
        let codes: Vec<Code> = r.iter().map(|r| r.code).collect();
        assert_eq!(codes, [Code::Aborted, Code::NotFound, Code::Ok]);
    }
}
