//! Filter sizing: the filter configuration for a mode and capacity, and
//! growth (a full filter rebuilt at twice the size from the rule set, off
//! the packet path: workers keep using the old one until the batch is
//! published).

use super::transaction::Pending;
use super::views::domain_name;
use super::{
    domain_and_hash, Arc, Code, Domain, Filter, Match, Mode, Op, RuleStore, StoreError,
    UpdateResult,
};
use cfdp_engine::filter_params;
use cfdp_filter::{BloomConfig, BloomMode, BuildError, Config};

/// Filter and rule-store parameters (`[filter]` and `[control]` in the
/// configuration).
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    pub mode: Mode,
    /// Items the flow-rule filter is sized for at first.
    pub flow_capacity: usize,
    /// Items each prefix-class filter is sized for at first.
    pub prefix_capacity: usize,
    /// `None`: plain cuckoo inserts. `Some`: the Bloom-Cuckoo insert path.
    pub bloom: Option<BloomMode>,
    /// Threshold `t` of the Bloom-Cuckoo path.
    pub threshold: u32,
    pub max_kicks: u32,
    /// Rebuild a full filter at twice the size instead of refusing inserts.
    pub auto_grow: bool,
    /// Most rules at once (slots; also the filter value width in
    /// filter-only mode).
    pub max_rules: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Verify,
            flow_capacity: 1 << 16,
            prefix_capacity: 1 << 12,
            bloom: Some(BloomMode::Bit),
            threshold: 0,
            max_kicks: 500,
            auto_grow: true,
            max_rules: 1 << 20,
        }
    }
}

impl StoreConfig {
    fn bloom_field_bits(&self) -> u32 {
        match self.bloom {
            None => 0,
            Some(BloomMode::Bit) => 1,
            Some(BloomMode::Tag { bits }) => bits,
        }
    }

    fn value_bits(&self) -> u32 {
        if self.mode == Mode::FilterOnly {
            usize::BITS - self.max_rules.saturating_sub(1).max(1).leading_zeros()
        } else {
            0
        }
    }

    /// The filter configuration for `capacity` items.
    pub fn filter_config(&self, capacity: usize) -> Result<Config, StoreError> {
        let (fp, v) = filter_params(self.mode, self.value_bits(), self.bloom_field_bits())?;
        Ok(Config {
            capacity: capacity.max(16),
            fingerprint_bits: fp,
            value_bits: v,
            bloom: self.bloom.map(|mode| BloomConfig {
                mode,
                threshold: self.threshold,
            }),
            max_kicks: self.max_kicks,
            ..Config::default()
        })
    }

    pub(super) fn new_filter(&self, capacity: usize) -> Result<Arc<Filter>, StoreError> {
        let cfg = self.filter_config(capacity)?;
        Ok(Arc::new(Filter::new(cfg)?))
    }
}

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
        let in_domain = |m: &Match| match (d, domain_and_hash(m)) {
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
