//! `trace`: which rule a 5-tuple gets from the published tables, every rule
//! it matches, and the tables asked on the way.

use cfdp_rules::{FlowKey, Rule};
use serde::Serialize;

use super::state::RuleStore;

/// `trace`'s answer: what the published tables give a 5-tuple.
#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    /// The rule set's generation the answer comes from.
    pub generation: u64,
    /// The matcher mode (`verify`, `filter-only`, `exact`).
    pub mode: cfdp_engine::Mode,
    /// The 5-tuple asked about.
    pub key: TraceKey,
    /// The rule applied (null: none, the packet is forwarded).
    pub rule: Option<Rule>,
    /// Every rule the 5-tuple matches, the applied one first, in the order
    /// rules rank (`cfdp_rules::precedence`).
    pub matches: Vec<Rule>,
    /// The tables asked, in order, up to the one that decided.
    pub steps: Vec<cfdp_engine::TraceStep>,
    /// Whether the tables' answer is the first of `matches` (false in
    /// filter-only mode when a filter false positive decided; otherwise a
    /// bug worth reporting).
    pub consistent: bool,
    /// The tracked connection the 5-tuple belongs to, if any: its packets
    /// take the connection's action before any rule (`rule` and `matches`
    /// then say what a packet of no connection would get).
    pub connection: Option<TraceConn>,
}

/// A tracked connection as `trace` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct TraceConn {
    /// Linux's name for its state.
    pub state: &'static str,
    /// `original` (as the packet that opened it) or `reply`.
    pub direction: &'static str,
    pub action: &'static str,
    /// The stateful rule that opened it, if still in the rule set.
    pub rule: Option<cfdp_rules::RuleId>,
}

/// A 5-tuple as `trace` reports it.
#[derive(Clone, Debug, Serialize)]
pub struct TraceKey {
    pub src: String,
    pub dst: String,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

impl From<&FlowKey> for TraceKey {
    fn from(k: &FlowKey) -> Self {
        Self {
            src: k.src_ip().to_string(),
            dst: k.dst_ip().to_string(),
            proto: k.proto,
            sport: k.sport,
            dport: k.dport,
        }
    }
}

impl RuleStore {
    /// Traces `k` through the published tables (what the workers read now)
    /// and lists every rule it matches from the rule set itself.
    pub fn trace(&self, k: &FlowKey) -> TraceReport {
        let mode = self.mode();
        let (generation, tables) = match self.w.enter() {
            Some(t) => (t.generation(), t.trace(mode, k)),
            None => (self.generation(), cfdp_engine::TableTrace::default()),
        };
        let rule = tables.winner.and_then(|r| self.rule_at_slot(r.slot));
        let matches = cfdp_rules::matching(self.iter(), k);
        let connection = self.conntrack().and_then(|t| t.peek(k)).map(|h| TraceConn {
            state: h.state.name(),
            direction: h.dir.name(),
            action: h.action.name(),
            rule: self
                .rule_at_slot(h.slot)
                .filter(|r| r.action == h.action)
                .map(|r| r.id),
        });
        TraceReport {
            connection,
            generation,
            mode,
            key: TraceKey::from(k),
            consistent: rule == matches.first().copied(),
            rule,
            matches,
            steps: tables.steps,
        }
    }
}
