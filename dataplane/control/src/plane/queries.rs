//! What the control thread answers without changing anything: one rule,
//! a page of the rule set (with the packet counts a reader of its
//! counters needs), the tracked connections.

use cfdp_rules::RuleId;

use super::{ControlPlane, PAGE_ENDS};
use crate::api::{ControlError, RuleEntry, RulesPage, MAX_PAGE};

impl ControlPlane {
    /// One rule with its counters.
    pub fn rule(&self, id: RuleId) -> Result<RuleEntry, ControlError> {
        let rule = self
            .store
            .rule(id)
            .ok_or(ControlError::NotFound(u64::from(id)))?;
        let (packets, bytes) = self.store.rule_counters(id).unwrap_or((0, 0));
        Ok(RuleEntry {
            rule,
            packets,
            bytes,
            last_hit_unix_s: self.store.rule_last_hit_unix_s(id),
        })
    }

    /// A page of the rule set (at most [`MAX_PAGE`] rules).
    pub fn rules(&mut self, offset: u64, limit: u64) -> Result<RulesPage, ControlError> {
        if limit > MAX_PAGE {
            return Err(ControlError::InvalidParams(format!(
                "limit: at most {MAX_PAGE}"
            )));
        }
        // Packets received so far, read before the counters: the counters
        // below cover at least every packet up to one burst before this
        // count (a worker counts a packet when its burst starts, the rule
        // hit when it ends). The soak harness relies on it.
        let totals = self.store.live_stats().totals();
        let generation = self.store.generation();
        let after = self
            .page_ends
            .iter()
            .find(|&&(g, end, _)| g == generation && end == offset)
            .map(|&(_, _, id)| id);
        let rules = self.store.rules_page(
            after,
            usize::try_from(offset).unwrap_or(usize::MAX),
            limit as usize,
        );
        if let Some(last) = rules.last() {
            self.page_ends
                .retain(|&(g, end, _)| g == generation && end != offset);
            if self.page_ends.len() == PAGE_ENDS {
                self.page_ends.pop_front();
            }
            self.page_ends
                .push_back((generation, offset + rules.len() as u64, last.id));
        }
        let page = rules.iter().filter_map(|r| self.rule(r.id).ok()).collect();
        let packets_after = self.store.live_stats().totals().packets;
        Ok(RulesPage {
            generation,
            total: self.store.len(),
            offset,
            packets: totals.packets,
            matched: totals.matched,
            dropped: totals.dropped,
            packets_after,
            rules: page,
        })
    }

    /// Up to `limit` tracked connections `query` selects (none without a
    /// connection table).
    pub(super) fn conns(
        &self,
        query: &cfdp_conntrack::ConnQuery,
        limit: usize,
    ) -> crate::api::ConnsPage {
        let Some(t) = self.store.conntrack() else {
            return crate::api::ConnsPage {
                entries: 0,
                conns: Vec::new(),
            };
        };
        let now = t.newest_ns();
        let secs = |ns: u64| now.saturating_sub(ns) as f64 / 1e9;
        let conns = t
            .list(limit, |c| query.matches(c))
            .into_iter()
            .map(|c| {
                let k = c.orig;
                // The rule in its slot, if it is still the stateful rule
                // that opened it (a slot is reused after a delete).
                let rule = self
                    .store
                    .rule_at_slot(c.slot)
                    .filter(|r| r.action == c.action);
                crate::api::ConnEntry {
                    src: k.src_ip(),
                    dst: k.dst_ip(),
                    proto: k.proto,
                    sport: k.sport,
                    dport: k.dport,
                    state: c.state.name(),
                    rule: rule.map(|r| r.id),
                    action: c.action.name(),
                    idle_s: secs(c.last_ns),
                    age_s: c.acct.map(|a| secs(a.opened_ns)),
                    packets: c.acct.map(|a| a.packets),
                    bytes: c.acct.map(|a| a.bytes),
                }
            })
            .collect();
        crate::api::ConnsPage {
            entries: t.len(),
            conns,
        }
    }
}
