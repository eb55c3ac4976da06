//! Rule matching through the concurrent filters.
//!
//! One filter holds the exact flow rules; one filter per prefix class in use
//! (family, direction, length, protocol, port) holds that class's masked
//! addresses, probed in the rule set's priority order (longest prefix
//! first). Each entry's associated value is the rule's index.
//!
//! Modes:
//! * `verify` (default): a filter positive is confirmed against the rule
//!   set's exact tables before its action applies: no false-positive actions.
//!   A negative is final (a filter has no false negatives), which is where
//!   the filter saves work: most packets match no rule and never touch the
//!   exact tables.
//! * `filter-only`: the action comes from the filter's value. False
//!   positives are possible; every 64th positive is also verified and the
//!   sampled false-positive rate is reported.
//!
//! Matching is per burst (at most [`MAX_BURST`] packets), with batched,
//! prefetching filter lookups, and allocates nothing.

use cfdp_filter::{Config, Filter, Lookup};
use cfdp_rules::{FlowKey, PrefixClass, RuleIndex, RuleSet};

use crate::stats::WorkerCounters;

/// Largest burst a worker hands to the matcher.
pub const MAX_BURST: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    #[default]
    Verify,
    FilterOnly,
    /// No filters: every packet probes the exact tables. The baseline the
    /// filter path is measured against (`bench --bin pipeline`).
    Exact,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "verify" => Ok(Mode::Verify),
            "filter-only" => Ok(Mode::FilterOnly),
            "exact" => Ok(Mode::Exact),
            _ => Err(format!("unknown mode '{s}' (verify, filter-only or exact)")),
        }
    }
}

struct ClassFilter {
    class: PrefixClass,
    /// Index into `RuleSet::classes()`.
    table: usize,
    filter: Filter,
}

pub struct Matcher {
    mode: Mode,
    rules: RuleSet,
    exact: Filter,
    classes: Vec<ClassFilter>,
}

/// Filter parameters. In verify mode the filter only has to say "maybe",
/// so entries carry no value: 16-bit fingerprints, one 64-bit word per
/// bucket (half the memory, so more of it stays in cache). In filter-only
/// mode each entry carries its rule index (f + v ≤ 32: two words per bucket).
fn filter_config(items: usize, rules: usize, mode: Mode) -> Result<Config, String> {
    let value_bits = if mode == Mode::FilterOnly {
        (usize::BITS - rules.max(1).leading_zeros()).max(1)
    } else {
        0
    };
    if value_bits > 20 {
        return Err(format!(
            "{rules} rules: filter-only mode supports at most 2^20 rules per rule set"
        ));
    }
    let fingerprint_bits = (32 - value_bits).min(16);
    Ok(Config {
        capacity: items.max(16),
        fingerprint_bits,
        value_bits,
        max_kicks: 500,
        ..Config::default()
    })
}

fn insert(f: &Filter, h: u64, idx: RuleIndex) -> Result<(), String> {
    let value = if f.max_value() == 0 { 0 } else { idx };
    f.insert_hash(h, value)
        .map(|_| ())
        .map_err(|e| format!("rule index {idx}: {e}"))
}

impl Matcher {
    pub fn new(rules: RuleSet, mode: Mode) -> Result<Self, String> {
        let n = rules.len();
        // The exact baseline keeps no filter contents.
        let filtered = mode != Mode::Exact;
        let size = |items: usize| if filtered { items } else { 0 };
        let exact = Filter::new(filter_config(size(rules.exact().len()), n, mode)?)
            .map_err(|e| e.to_string())?;
        for (k, &idx) in rules.exact().iter().filter(|_| filtered) {
            insert(&exact, k.hash(), idx)?;
        }
        let mut classes = Vec::with_capacity(rules.classes().len());
        for (table, ct) in rules.classes().iter().enumerate() {
            let filter = Filter::new(filter_config(size(ct.entries.len()), n, mode)?)
                .map_err(|e| e.to_string())?;
            for (addr, &idx) in ct.entries.iter().filter(|_| filtered) {
                insert(&filter, ct.class.hash_masked(addr), idx)?;
            }
            classes.push(ClassFilter {
                class: ct.class,
                table,
                filter,
            });
        }
        Ok(Self {
            mode,
            rules,
            exact,
            classes,
        })
    }

    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Resolves one filter answer for `key` into a rule index.
    #[inline]
    fn resolve(
        &self,
        answer: Lookup,
        confirm: impl Fn() -> Option<RuleIndex>,
        c: &WorkerCounters,
        sample: &mut u32,
    ) -> Option<RuleIndex> {
        let inc = WorkerCounters::inc;
        match (answer, self.mode) {
            (Lookup::Miss, _) => None,
            (Lookup::Entry(v), Mode::FilterOnly) => {
                *sample = sample.wrapping_add(1);
                if *sample % 64 == 0 {
                    inc(&c.filter_only_sampled, 1);
                    if confirm() != Some(v) {
                        inc(&c.filter_only_sampled_false, 1);
                    }
                }
                Some(v)
            }
            // Verify mode, and Bloom-part answers (they carry no value).
            _ => {
                let got = confirm();
                match got {
                    Some(_) => inc(&c.filter_verified, 1),
                    None => inc(&c.filter_false_positives, 1),
                }
                got
            }
        }
    }

    /// Matches a burst: `keys[i]` is packet i's (fragment-resolved) 5-tuple
    /// when `valid[i]`; writes the applicable rule (or `None`) to `out[i]`.
    /// `counters` and `sample` (the filter-only sampling counter) are the
    /// calling worker's own.
    pub fn match_burst(
        &self,
        keys: &[FlowKey],
        valid: &[bool],
        out: &mut [Option<RuleIndex>],
        counters: &WorkerCounters,
        sample: &mut u32,
    ) {
        let n = keys.len();
        assert!(n <= MAX_BURST && valid.len() >= n && out.len() >= n);
        if self.mode == Mode::Exact {
            for i in 0..n {
                out[i] = if valid[i] {
                    self.rules.classify(&keys[i])
                } else {
                    None
                };
            }
            return;
        }
        let mut idx = [0usize; MAX_BURST];
        let mut hashes = [0u64; MAX_BURST];
        let mut answers = [Lookup::Miss; MAX_BURST];

        // 1. Exact flow rules, one hash per packet.
        let mut m = 0;
        for i in 0..n {
            out[i] = None;
            if valid[i] {
                idx[m] = i;
                hashes[m] = keys[i].hash();
                m += 1;
            }
        }
        if !self.exact.is_empty() {
            self.exact.get_batch_hashes(&hashes[..m], &mut answers[..m]);
            for j in 0..m {
                let i = idx[j];
                out[i] = self.resolve(
                    answers[j],
                    || self.rules.exact().get(&keys[i]).copied(),
                    counters,
                    sample,
                );
            }
        }

        // 2. Prefix classes, longest first; each packet stops at its first match.
        for cf in &self.classes {
            let mut m = 0;
            let mut masked = [[0u8; 16]; MAX_BURST];
            for i in 0..n {
                if valid[i] && out[i].is_none() && cf.class.admits(&keys[i]) {
                    idx[m] = i;
                    masked[m] = cf.class.masked(&keys[i]);
                    hashes[m] = cf.class.hash_masked(&masked[m]);
                    m += 1;
                }
            }
            if m == 0 {
                continue;
            }
            cf.filter.get_batch_hashes(&hashes[..m], &mut answers[..m]);
            let table = &self.rules.classes()[cf.table].entries;
            for j in 0..m {
                let addr = masked[j];
                out[idx[j]] =
                    self.resolve(answers[j], || table.get(&addr).copied(), counters, sample);
            }
        }
    }
}
