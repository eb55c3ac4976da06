//! Loading a whole rule set at once (start-up from a rule file or a
//! snapshot, `cfdp replay`): the same validation as a batch, but no
//! overlay, no operation log and no filter insert walk.
//!
//! The batch path would hold every rule three times while it runs (the
//! overlay, the operation log, the tables growing op by op, twice for the
//! two left-right copies) and place keys one cuckoo walk at a time. Here
//! the exact tables are built once at their final size while validating,
//! every filter is made by `Filter::build` (sorted bulk placement) at a
//! size that fits its keys, and the exact tables become the bases both
//! left-right copies share.

use cfdp_engine::acl::AclClassifier;
use cfdp_engine::{key_check, ClassPart, SlotRule};
use cfdp_filter::BuildError;
use cfdp_rules::{FlowKey, RuleId};

use std::collections::BTreeMap;

use std::sync::Arc;

use cfdp_engine::{LiveStats, Mode, Op, RuleRef, Tables};
use cfdp_filter::Filter;
use cfdp_rules::{AclRule, Match, PrefixClass, Rule};
use hashbrown::HashMap;

use super::config::StoreConfig;
use super::ruleset::{IdIndex, MatchIndex, RuleSet};
use super::slots::{CountRules, Slots};
use super::state::RuleStore;
use super::types::{id_taken, match_taken, StoreError};
use super::views;

/// One domain's keys while loading: (hash, filter value) pairs.
type Keys = Vec<(u64, u32)>;

/// The first problem a pass found: the rule's index and what is wrong.
type Found = Option<(usize, String)>;

/// What the id pass gathers: the id index, the filters' keys, the count
/// rules, and the first problem.
struct IdPass {
    by_id: IdIndex,
    flow_keys: Keys,
    class_keys: HashMap<PrefixClass, Keys>,
    count_rules: BTreeMap<RuleId, u32>,
    found: Found,
}

/// What the match pass gathers: verify mode's exact tables (or filter-only
/// mode's match index) and the first problem.
struct MatchPass {
    exact: HashMap<FlowKey, RuleRef>,
    class_entries: HashMap<PrefixClass, HashMap<[u8; 16], RuleRef>>,
    index: Option<MatchIndex>,
    found: Found,
}

/// How many rules of each prefix class, and how many flow rules: every
/// table is then allocated once.
fn sizes(rules: &[Rule]) -> (HashMap<PrefixClass, usize>, usize) {
    let mut class_sizes: HashMap<PrefixClass, usize> = HashMap::new();
    let mut flows = 0usize;
    for r in rules {
        match PrefixClass::of(&r.matcher) {
            Some((c, _)) => *class_sizes.entry(c).or_default() += 1,
            None => flows += 1,
        }
    }
    (class_sizes, flows)
}

impl RuleStore {
    /// A store holding exactly `rules` (see [`RuleStore::with_rules`]);
    /// with `compile_now`, the multi-field rules' compiled layer is built
    /// before it returns, else the first background compile builds it.
    pub(super) fn build(
        cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: Vec<Rule>,
        compile_now: bool,
    ) -> Result<Self, StoreError> {
        cfg.check_max_rules()?;
        let n = rules.len();
        let (class_sizes, flows) = sizes(&rules);
        let keep_slots = cfg.mode == Mode::FilterOnly;
        // Two halves on two threads, each one pass over the rules: the
        // exact tables (matches) here, the id index, counters and filter
        // keys beside it. Each stops at its first problem; the one earlier
        // in the file is reported, and at the same rule the id problem
        // (the batch path checks the id first), so the message is the one
        // a single pass would give. Both halves are random writes into
        // large tables, bound by memory latency, so they overlap well.
        let (matches, ids) = std::thread::scope(|s| {
            let ids = s.spawn(|| id_pass(&cfg, &stats, &rules, &class_sizes, flows));
            let matches = match_pass(&rules, keep_slots, &class_sizes, flows);
            (matches, ids.join().expect("the id pass does not panic"))
        });
        let first = match (ids.found, matches.found) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        if let Some((index, why)) = first {
            return Err(StoreError::Rule {
                index,
                id: rules[index].id,
                why,
            });
        }
        let slots = keep_slots.then(|| slot_rules(&rules, &ids.flow_keys, &ids.class_keys));
        // The parsed list itself becomes the rule store (rule i at slot i).
        let set = RuleSet::from_parts(ids.by_id, rules, matches.index);
        let flow_filter = build_filter(&cfg, cfg.flow_capacity, &ids.flow_keys, || "flow".into())?;
        drop(ids.flow_keys);
        let (store_classes, parts) = class_filters(&cfg, ids.class_keys, matches.class_entries)?;
        let (acl, compile_refused_at) = multi_field(&set, compile_now)?;
        let tables = Tables::from_parts(Arc::clone(&flow_filter), matches.exact, parts, slots, acl)
            .with_hash_secret(cfg.hash_secret);
        let (w, r) = left_right::new_from_empty::<Tables, Op>(tables);
        let factory = r.factory();
        Ok(Self {
            slots: Slots::new(cfg.max_rules, n as u32),
            cfg,
            w,
            factory,
            stats,
            rules: set,
            flow_filter,
            classes: store_classes,
            count_rules: CountRules::new(ids.count_rules),
            generation: 0,
            unsettled: None,
            fold: None,
            folds: (0, 0),
            compiler: None,
            compiles: Default::default(),
            compile_refused_at,
            conntrack: None,
        })
    }
}

/// The id half of [`RuleStore::build`]: ids unique, a counter slot per
/// rule, every flow and prefix rule's filter key (with its slot as the
/// filter value in filter-only mode), the count rules.
fn id_pass(
    cfg: &StoreConfig,
    stats: &LiveStats,
    rules: &[Rule],
    class_sizes: &HashMap<PrefixClass, usize>,
    flows: usize,
) -> IdPass {
    let n = rules.len();
    let secret = cfg.hash_secret;
    let keep_slots = cfg.mode == Mode::FilterOnly;
    let value_for = |slot: u32| if keep_slots { slot } else { 0 };
    let mut p = IdPass {
        by_id: IdIndex::with_capacity(n),
        flow_keys: Vec::with_capacity(flows),
        class_keys: class_sizes
            .iter()
            .map(|(c, &k)| (*c, Vec::with_capacity(k)))
            .collect(),
        count_rules: BTreeMap::new(),
        found: None,
    };
    for (i, r) in rules.iter().enumerate() {
        let slot = i as u32;
        if p.by_id.find(rules, r.id).is_some() {
            p.found = Some((i, id_taken(r.id)));
            break;
        }
        p.by_id.add(rules, slot);
        if !stats.ensure_slot(slot, r.id) {
            p.found = Some((i, format!("{n} rules do not fit: raise control.max_rules")));
            break;
        }
        match r.matcher {
            Match::Flow(k) => p.flow_keys.push((k.hash_with(&secret), value_for(slot))),
            // Multi-field rules: in the classifier, no filter.
            Match::Acl { .. } => {}
            m => {
                let (c, addr) = PrefixClass::of(&m).expect("a prefix match has a class");
                let keys = p.class_keys.get_mut(&c).expect("counted above");
                keys.push((c.hash_masked(&secret, &addr), value_for(slot)));
            }
        }
        if r.action == cfdp_rules::Action::Count {
            p.count_rules.insert(r.id, slot);
        }
    }
    p
}

/// The match half of [`RuleStore::build`]: no two rules with one match.
/// Filter-only mode keeps no exact table of every rule (see
/// `cfdp_engine::tables`): matches are indexed by slot instead.
fn match_pass(
    rules: &[Rule],
    keep_slots: bool,
    class_sizes: &HashMap<PrefixClass, usize>,
    flows: usize,
) -> MatchPass {
    let sized = |k: usize| if keep_slots { 0 } else { k };
    let mut p = MatchPass {
        exact: HashMap::with_capacity(sized(flows)),
        class_entries: class_sizes
            .iter()
            .map(|(c, &k)| (*c, HashMap::with_capacity(sized(k))))
            .collect(),
        index: keep_slots.then(|| MatchIndex::with_capacity(rules.len())),
        found: None,
    };
    // Two loops, not one with the mode inside: the verify-mode loop is
    // the old one exactly (one loop with a match on the mode per rule
    // measured ~2 s slower at 10 M rules).
    if let Some(idx) = &mut p.index {
        for (i, r) in rules.iter().enumerate() {
            if let Some(o) = idx.find(rules, &r.matcher) {
                p.found = Some((i, match_taken(rules[o as usize].id)));
                break;
            }
            idx.add(rules, i as u32);
        }
        return p;
    }
    // Multi-field rules by (match, priority): verify mode's duplicate
    // check for them (filter-only mode's index covers every form).
    let mut acl_matches: HashMap<Match, u32> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        let e = RuleRef {
            action: r.action,
            slot: i as u32,
        };
        let dup = match r.matcher {
            Match::Flow(k) => p.exact.insert(*k.key(), e),
            m @ Match::Acl { .. } => acl_matches.insert(m, e.slot).map(|slot| RuleRef {
                action: r.action,
                slot,
            }),
            m => {
                let (c, addr) = PrefixClass::of(&m).expect("a prefix match has a class");
                let entries = p.class_entries.get_mut(&c).expect("counted above");
                entries.insert(addr, e)
            }
        };
        if let Some(o) = dup {
            p.found = Some((i, match_taken(rules[o.slot as usize].id)));
            break;
        }
    }
    p
}

/// Filter-only mode: each rule's action and key check by slot, from the
/// keys' hashes (computed once, for the filters).
fn slot_rules(
    rules: &[Rule],
    flow_keys: &Keys,
    class_keys: &HashMap<PrefixClass, Keys>,
) -> Vec<Option<SlotRule>> {
    let mut slots = vec![None; rules.len()];
    for &(h, slot) in flow_keys.iter().chain(class_keys.values().flatten()) {
        slots[slot as usize] = Some(SlotRule {
            action: rules[slot as usize].action,
            check: key_check(h),
        });
    }
    slots
}

/// Each prefix class's filter (built from its keys) with its verify table:
/// the store's view and the engine's parts.
#[allow(clippy::type_complexity)] // the store's field type, as it is
fn class_filters(
    cfg: &StoreConfig,
    class_keys: HashMap<PrefixClass, Keys>,
    mut class_entries: HashMap<PrefixClass, HashMap<[u8; 16], RuleRef>>,
) -> Result<(HashMap<PrefixClass, (Arc<Filter>, usize)>, Vec<ClassPart>), StoreError> {
    let mut store_classes = HashMap::with_capacity(class_keys.len());
    let mut parts = Vec::with_capacity(class_keys.len());
    for (c, keys) in class_keys {
        let entries = class_entries.remove(&c).unwrap_or_default();
        let cap = cfg.prefix_capacity.max(keys.len() * 9 / 8);
        let f = build_filter(cfg, cap, &keys, || views::class_name(&c))?;
        store_classes.insert(c, (Arc::clone(&f), entries.len()));
        parts.push(ClassPart {
            class: c,
            filter: f,
            entries,
        });
    }
    Ok((store_classes, parts))
}

/// A filter holding `keys`, sized for `capacity` items and grown (doubled)
/// until the bulk build places them all, when `auto_grow` allows.
fn build_filter(
    cfg: &StoreConfig,
    capacity: usize,
    keys: &[(u64, u32)],
    name: impl Fn() -> String,
) -> Result<Arc<Filter>, StoreError> {
    let mut fcfg = cfg.filter_config(capacity)?;
    loop {
        match Filter::build(fcfg.clone(), keys, 0) {
            Ok(f) => return Ok(Arc::new(f)),
            Err(BuildError::Full { placed, total }) if cfg.auto_grow => {
                let log2 = fcfg.bucket_count()?.trailing_zeros();
                if log2 >= 30 {
                    return Err(StoreError::TooLarge {
                        name: name(),
                        placed,
                        total,
                    });
                }
                fcfg.buckets_log2 = Some(log2 + 1);
            }
            Err(source) => {
                return Err(StoreError::Build {
                    name: name(),
                    source,
                })
            }
        }
    }
}

/// The classifier of a rule set's multi-field rules, each tagged with its
/// slot, its rules compiled where the compiled layer takes them (see
/// `cfdp_engine::acl`: later updates are patched into it or go to the live
/// layer in front of it); with the number of rules left in the live layer
/// when the compile was refused whole (every family over the layer's
/// budget, none worth a partial tree: the tuple space keeps them, as
/// exact).
fn multi_field(
    set: &RuleSet,
    compile_now: bool,
) -> Result<(AclClassifier, Option<usize>), StoreError> {
    let mut acl = AclClassifier::new();
    for (index, s) in set.iter().enumerate() {
        if let Some(r) = AclRule::of(&s.rule) {
            acl.insert_tagged(r, s.slot).map_err(|e| StoreError::Rule {
                index,
                id: s.rule.id,
                why: e.to_string(),
            })?;
        }
    }
    if !compile_now {
        return Ok((acl, None));
    }
    // Refused whole (nothing installed): not retried until the set moves
    // (its live rules would call for a compile at once). In part: the
    // layers count the rules left live (see `maybe_start_compile`).
    let refused = acl
        .compile()
        .err()
        .filter(|_| acl.compiled().is_none())
        .map(|_| acl.layers().live_v4 + acl.layers().live_v6);
    Ok((acl, refused))
}
