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
use cfdp_rules::FlowKey;

use std::sync::Arc;

use cfdp_engine::{LiveStats, Mode, Op, RuleRef, Tables};
use cfdp_filter::Filter;
use cfdp_rules::{AclRule, Match, PrefixClass, Rule};
use hashbrown::HashMap;

use super::config::StoreConfig;
use super::ruleset::{IdIndex, MatchIndex, RuleSet};
use super::state::RuleStore;
use super::types::{fresh_version, id_taken, match_taken, StoreError};
use super::views;

/// One domain's keys while loading: (hash, filter value) pairs.
type Keys = Vec<(u64, u32)>;

impl RuleStore {
    /// A store holding exactly `rules` (see [`RuleStore::with_rules`]).
    #[allow(clippy::too_many_lines)] // longer than 80 lines: split pending (issue 29)
    pub(super) fn build(
        cfg: StoreConfig,
        stats: Arc<LiveStats>,
        rules: Vec<Rule>,
    ) -> Result<Self, StoreError> {
        cfg.check_max_rules()?;
        let n = rules.len();
        let at = |index: usize, r: &Rule, why: String| StoreError::Rule {
            index,
            id: r.id,
            why,
        };
        // Per-class sizes first, so every table is allocated once.
        let mut class_sizes: HashMap<PrefixClass, usize> = HashMap::new();
        let mut flows = 0usize;
        for r in &rules {
            match PrefixClass::of(&r.matcher) {
                Some((c, _)) => *class_sizes.entry(c).or_default() += 1,
                None => flows += 1,
            }
        }
        let keep_slots = cfg.mode == Mode::FilterOnly;
        let value_for = |slot: u32| if keep_slots { slot } else { 0 };
        // Two halves on two threads, each one pass over the rules: the
        // exact tables (matches) here, the id index, counters and filter
        // keys beside it. Each stops at its first problem; the one earlier
        // in the file is reported, and at the same rule the id problem
        // (the batch path checks the id first), so the message is the one
        // a single pass would give. Both halves are random writes into
        // large tables, bound by memory latency, so they overlap well.
        type Found = Option<(usize, String)>;
        let secret = cfg.hash_secret;
        let (matches, ids) = std::thread::scope(|s| {
            let ids = s.spawn(|| {
                let mut by_id = IdIndex::with_capacity(n);
                let mut flow_keys: Keys = Vec::with_capacity(flows);
                let mut class_keys: HashMap<PrefixClass, Keys> = class_sizes
                    .iter()
                    .map(|(c, &k)| (*c, Vec::with_capacity(k)))
                    .collect();
                let mut count_rules = std::collections::BTreeMap::new();
                let mut found: Found = None;
                for (i, r) in rules.iter().enumerate() {
                    let slot = i as u32;
                    if by_id.find(&rules, r.id).is_some() {
                        found = Some((i, id_taken(r.id)));
                        break;
                    }
                    by_id.add(&rules, slot);
                    if !stats.ensure_slot(slot) {
                        found = Some((i, format!("{n} rules do not fit: raise control.max_rules")));
                        break;
                    }
                    match r.matcher {
                        Match::Flow(k) => flow_keys.push((k.hash_with(&secret), value_for(slot))),
                        // Multi-field rules: in the classifier, no filter.
                        Match::Acl { .. } => {}
                        m => {
                            let (c, addr) =
                                PrefixClass::of(&m).expect("a prefix match has a class");
                            let keys = class_keys.get_mut(&c).expect("counted above");
                            keys.push((c.hash_masked(&secret, &addr), value_for(slot)));
                        }
                    }
                    if r.action == cfdp_rules::Action::Count {
                        count_rules.insert(r.id, slot);
                    }
                }
                (by_id, flow_keys, class_keys, count_rules, found)
            });
            // Filter-only mode keeps no exact table of every rule (see
            // `cfdp_engine::tables`): matches are indexed by slot instead.
            let mut index = keep_slots.then(|| MatchIndex::with_capacity(n));
            let sized = |k: usize| if keep_slots { 0 } else { k };
            let mut exact: HashMap<FlowKey, RuleRef> = HashMap::with_capacity(sized(flows));
            let mut class_entries: HashMap<PrefixClass, HashMap<[u8; 16], RuleRef>> = class_sizes
                .iter()
                .map(|(c, &k)| (*c, HashMap::with_capacity(sized(k))))
                .collect();
            // Multi-field rules by (match, priority): verify mode's duplicate
            // check for them (filter-only mode's index covers every form).
            let mut acl_matches: HashMap<Match, u32> = HashMap::new();
            let mut found: Found = None;
            // Two loops, not one with the mode inside: the verify-mode
            // loop is the old one exactly (one loop with a match on the
            // mode per rule measured ~2 s slower at 10 M rules).
            if let Some(idx) = &mut index {
                for (i, r) in rules.iter().enumerate() {
                    if let Some(o) = idx.find(&rules, &r.matcher) {
                        found = Some((i, match_taken(rules[o as usize].id)));
                        break;
                    }
                    idx.add(&rules, i as u32);
                }
            } else {
                for (i, r) in rules.iter().enumerate() {
                    let e = RuleRef {
                        action: r.action,
                        slot: i as u32,
                    };
                    let dup = match r.matcher {
                        Match::Flow(k) => exact.insert(k, e),
                        m @ Match::Acl { .. } => {
                            acl_matches.insert(m, e.slot).map(|slot| RuleRef {
                                action: r.action,
                                slot,
                            })
                        }
                        m => {
                            let (c, addr) =
                                PrefixClass::of(&m).expect("a prefix match has a class");
                            let entries = class_entries.get_mut(&c).expect("counted above");
                            entries.insert(addr, e)
                        }
                    };
                    if let Some(o) = dup {
                        found = Some((i, match_taken(rules[o.slot as usize].id)));
                        break;
                    }
                }
            }
            let ids = ids.join().expect("the id pass does not panic");
            ((exact, class_entries, index, found), ids)
        });
        let (exact, mut class_entries, index, match_err) = matches;
        let (by_id, flow_keys, class_keys, count_rules, id_err) = ids;
        let first = match (id_err, match_err) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
            (a, b) => a.or(b),
        };
        if let Some((i, msg)) = first {
            return Err(at(i, &rules[i], msg));
        }
        // Filter-only mode: each rule's action and key check by slot, from
        // the keys' hashes (computed once, for the filters).
        let slots: Vec<Option<SlotRule>> = if keep_slots {
            let mut slots = vec![None; n];
            let keys = flow_keys.iter().chain(class_keys.values().flatten());
            for &(h, slot) in keys {
                slots[slot as usize] = Some(SlotRule {
                    action: rules[slot as usize].action,
                    check: key_check(h),
                });
            }
            slots
        } else {
            Vec::new()
        };
        // The parsed list itself becomes the rule store (rule i at slot i).
        let set = RuleSet::from_parts(by_id, rules, index);
        let classes: HashMap<PrefixClass, (HashMap<[u8; 16], RuleRef>, Keys)> = class_keys
            .into_iter()
            .map(|(c, keys)| (c, (class_entries.remove(&c).unwrap_or_default(), keys)))
            .collect();

        let flow_filter = build_filter(&cfg, cfg.flow_capacity, &flow_keys, || "flow".into())?;
        drop(flow_keys);
        let mut store_classes = HashMap::with_capacity(classes.len());
        let mut parts = Vec::with_capacity(classes.len());
        for (c, (entries, keys)) in classes {
            let cap = cfg.prefix_capacity.max(keys.len() * 9 / 8);
            let f = build_filter(&cfg, cap, &keys, || views::class_name(&c))?;
            store_classes.insert(c, (Arc::clone(&f), entries.len()));
            parts.push(ClassPart {
                class: c,
                filter: f,
                entries,
            });
        }
        let slots = keep_slots.then_some(slots);
        let acl = multi_field(&set)?;
        let tables = Tables::from_parts(Arc::clone(&flow_filter), exact, parts, slots, acl)
            .with_hash_secret(cfg.hash_secret);
        let (w, r) = left_right::new_from_empty::<Tables, Op>(tables);
        let factory = r.factory();
        Ok(Self {
            cfg,
            w,
            factory,
            stats,
            rules: set,
            flow_filter,
            classes: store_classes,
            free_slots: Vec::new(),
            next_slot: n as u32,
            baselines: HashMap::new(),
            count_rules,
            count_version: fresh_version(),
            generation: 0,
            unsettled: None,
            fold: None,
            folds: (0, 0),
        })
    }
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
/// slot.
fn multi_field(set: &RuleSet) -> Result<AclClassifier, StoreError> {
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
    Ok(acl)
}
