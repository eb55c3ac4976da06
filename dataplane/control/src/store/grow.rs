//! Growth: a filter that cannot take a batch's key is rebuilt at twice the
//! size from the rule set as the batch leaves it (off the packet path:
//! workers keep using the old one until the batch is published).

use std::sync::Arc;

use cfdp_engine::Op;
use cfdp_filter::{BuildError, Filter};
use cfdp_rules::{Code, Match, UpdateResult};

use super::state::RuleStore;
use super::transaction::Pending;
use super::types::{domain_and_hash, Domain};
use super::views::domain_name;

impl RuleStore {
    pub(super) fn grow(
        &mut self,
        p: &mut Pending,
        d: &Domain,
        old: &Arc<Filter>,
    ) -> Result<Arc<Filter>, UpdateResult> {
        let keys: Vec<(u64, u32)> = self.domain_keys(p, d);
        let mut log2 = old.buckets().trailing_zeros() + 1;
        loop {
            if log2 > 30 {
                return Err(UpdateResult::err(
                    Code::CapacityExhausted,
                    format!("{} filter cannot grow beyond 2^30 buckets", domain_name(d)),
                ));
            }
            let mut cfg = old.config().clone();
            cfg.buckets_log2 = Some(log2);
            // The bulk build (plain cuckoo placement): the Bloom part stays
            // free for bursts; `Full` means this size is too small.
            let built = match Filter::build(cfg, &keys, 0) {
                Ok(f) => Some(Arc::new(f)),
                Err(BuildError::Full { .. }) => None,
                Err(e) => return Err(UpdateResult::err(Code::CapacityExhausted, e.to_string())),
            };
            if let Some(f) = built {
                p.report.grown.push(format!(
                    "{}: {} -> {} buckets",
                    domain_name(d),
                    old.buckets(),
                    f.buckets()
                ));
                match d {
                    Domain::Flow => {
                        p.flow_filter = Some(Arc::clone(&f));
                        p.ops.push(Op::SetFlowFilter(Arc::clone(&f)));
                    }
                    Domain::Acl => unreachable!("multi-field rules are in no filter"),
                    Domain::Class(c) => {
                        let is_new =
                            p.class_filters.contains_key(c) && !self.classes.contains_key(c);
                        p.class_filters.insert(*c, Arc::clone(&f));
                        if is_new {
                            // Not published yet: fix the pending AddClass.
                            for op in &mut p.ops {
                                if let Op::AddClass(oc, of) = op {
                                    if oc == c {
                                        *of = Arc::clone(&f);
                                    }
                                }
                            }
                        } else {
                            p.ops.push(Op::SetClassFilter(*c, Arc::clone(&f)));
                        }
                    }
                }
                return Ok(f);
            }
            log2 += 1;
        }
    }

    /// (hash, value) of every key of a domain as the batch leaves it so far.
    pub(super) fn domain_keys(&self, p: &Pending, d: &Domain) -> Vec<(u64, u32)> {
        let in_domain = |m: &Match| match (d, domain_and_hash(&self.cfg.hash_secret, m)) {
            (Domain::Flow, (Domain::Flow, h)) => Some(h),
            (Domain::Class(c), (Domain::Class(c2), h)) if *c == c2 => Some(h),
            _ => None,
        };
        let committed = self
            .rules
            .iter()
            .filter(|s| !p.ids.contains_key(&s.rule.id));
        let pending = p.ids.values().flatten().copied();
        committed
            .chain(pending)
            .filter_map(|s| in_domain(&s.rule.matcher).map(|h| (h, self.value_for(s.slot))))
            .collect()
    }
}
