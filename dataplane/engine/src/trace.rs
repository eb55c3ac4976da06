//! One 5-tuple through a copy of the published tables, table by table, as
//! a worker matches it: what `cfdp ctl trace` reports. Each step asks the
//! table's filter and resolves its answer with the workers' own code
//! (`MatchCtx::resolve`), in the workers' order; the first step that gives
//! a rule decides, and the steps after it are not taken.

use cfdp_filter::Lookup;
use cfdp_rules::{Dir, FlowKey};
use serde::Serialize;

use crate::acl::Probes;
use crate::matcher::{MatchCtx, Mode};
use crate::tables::{RuleRef, Tables};
use crate::Totals;

/// What one table answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// `flow`, a prefix class (`dst /24 udp/53`), or `acl`.
    pub table: String,
    /// The filter's answer: `miss`, `entry` (a fingerprint with its value),
    /// `bloom` (the Bloom part), or `none` (no filter: exact mode, or the
    /// multi-field classifier).
    pub filter: &'static str,
    /// Who decided: `filter` (filter-only mode: the slot the filter's value
    /// names), `verify table` (the exact table confirmed the key), or null
    /// when this table gave no rule.
    pub decided_by: Option<&'static str>,
    /// The rule's counter slot, when this table gave one.
    pub slot: Option<u32>,
    /// Multi-field tables probed (the `acl` step).
    pub tables_probed: Option<u64>,
}

/// A 5-tuple's way through the tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TableTrace {
    /// The tables asked, in order, up to the one that decided.
    pub steps: Vec<TraceStep>,
    /// The rule applied (its action and slot), as a worker would.
    #[serde(skip)]
    pub winner: Option<RuleRef>,
}

fn answer_name(a: Lookup) -> &'static str {
    match a {
        Lookup::Miss => "miss",
        Lookup::Entry(_) => "entry",
        Lookup::Bloom => "bloom",
    }
}

fn decided_by(mode: Mode, a: Lookup) -> &'static str {
    match (mode, a) {
        (Mode::FilterOnly, Lookup::Entry(_)) => "filter",
        _ => "verify table",
    }
}

impl Tables {
    /// Traces `k` through this copy in `mode` (see the module docs).
    pub fn trace(&self, mode: Mode, k: &FlowKey) -> TableTrace {
        let mut totals = Totals::default();
        let mut sample = 1u32; // never a sampling point: nothing is counted
        let mut cx = MatchCtx {
            mode,
            counters: &mut totals,
            sample: &mut sample,
        };
        let mut out = TableTrace::default();
        let exact = self.exact.view();
        let step = |table: String, filter, decided: Option<(&'static str, RuleRef)>| TraceStep {
            table,
            filter,
            decided_by: decided.map(|d| d.0),
            slot: decided.map(|d| d.1.slot),
            tables_probed: None,
        };
        // 1. Exact flows (the workers skip the filter when no flow rule is
        //    in the copy: so does the trace).
        let flow_rules = match mode {
            Mode::FilterOnly => self.live_slots > 0,
            _ => !self.exact.is_empty(),
        };
        if mode == Mode::Exact {
            let r = exact.get(k).copied();
            out.steps
                .push(step("flow".into(), "none", r.map(|r| ("verify table", r))));
            out.winner = r;
        } else if flow_rules {
            let h = k.hash_with(&self.secret);
            let a = self.flow_filter.get_hash(h);
            let r = cx.resolve(a, self, h, || exact.get(k).copied());
            out.steps.push(step(
                "flow".into(),
                answer_name(a),
                r.map(|r| (decided_by(mode, a), r)),
            ));
            out.winner = r;
        }
        // 2. Prefix classes, longest first.
        for c in self.classes.iter().filter(|c| c.class.admits(k)) {
            if out.winner.is_some() {
                return out;
            }
            let masked = c.class.masked(k);
            let name = class_name(&c.class);
            let (a, r) = if mode == Mode::Exact {
                (None, c.entries.get(&masked).copied())
            } else {
                let h = c.class.hash_masked(&self.secret, &masked);
                let a = c.filter.get_hash(h);
                (
                    Some(a),
                    cx.resolve(a, self, h, || c.entries.get(&masked).copied()),
                )
            };
            let filter = a.map_or("none", answer_name);
            let by = a.map_or("verify table", |a| decided_by(mode, a));
            out.steps.push(step(name, filter, r.map(|r| (by, r))));
            out.winner = r;
        }
        // 3. Multi-field rules.
        if out.winner.is_none() && self.has_acl() {
            let mut probes = Probes::default();
            self.acl.classify_counted(k, &mut probes);
            // The workers' call, for the winner and its slot.
            let winner = self.classify_acl(k);
            let mut s = step("acl".into(), "none", winner.map(|r| ("classifier", r)));
            s.tables_probed = Some(probes.tables);
            out.steps.push(s);
            out.winner = winner;
        }
        out
    }
}

/// A prefix class as `cfdp ctl trace` names it: `dst /24 udp/53`.
fn class_name(c: &cfdp_rules::PrefixClass) -> String {
    let dir = match c.dir {
        Dir::Src => "src",
        Dir::Dst => "dst",
    };
    let mut s = format!("{dir} /{}", c.len);
    let proto = |p: u8| match p {
        cfdp_rules::proto::TCP => "tcp".to_string(),
        cfdp_rules::proto::UDP => "udp".to_string(),
        cfdp_rules::proto::ICMP => "icmp".to_string(),
        cfdp_rules::proto::ICMPV6 => "icmpv6".to_string(),
        n => n.to_string(),
    };
    match (c.proto, c.port) {
        (Some(p), Some(port)) => s += &format!(" {}/{port}", proto(p)),
        (Some(p), None) => s += &format!(" {}", proto(p)),
        _ => {}
    }
    s
}
