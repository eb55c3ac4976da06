//! The rule store: batch semantics, capacity, Bloom-assisted bursts,
//! migration, and the invariant that makes verify mode exact under
//! concurrent updates (checked with real reader threads).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use cfdp_control::{ApplyError, BatchReport, RuleStore, StoreConfig};
use cfdp_engine::matcher::{match_burst, MatchCtx};
use cfdp_engine::{LiveStats, Mode, RuleRef, Totals, MAX_BURST};
use cfdp_rules::{
    parse_batch, parse_rule, Action, Atomicity, Batch, Code, FlowKey, Match, Rule, Update,
};
use serde_json::json;

fn store(cfg: StoreConfig) -> RuleStore {
    let stats = Arc::new(LiveStats::new(2, cfg.max_rules));
    RuleStore::new(cfg, stats).unwrap()
}

fn flow(i: u32) -> FlowKey {
    FlowKey::v4(
        (0x0a00_0000 | i).to_be_bytes(),
        [192, 0, 2, 1],
        17,
        (i % 60_000) as u16 + 1,
        53,
    )
}

fn flow_rule(id: u32, i: u32, action: Action) -> Rule {
    Rule {
        id,
        matcher: Match::Flow(cfdp_rules::ExactFlow::of_key(flow(i)).expect("a valid flow")),
        action,
    }
}

fn prefix_rule(id: u32, prefix: &str, action: &str) -> Rule {
    parse_rule(
        &json!({"id": id, "match": {"dst_prefix": prefix}, "action": action}),
        None,
    )
    .unwrap()
}

/// What a journal says when its disk is full.
fn disk_full() -> cfdp_control::journal::JournalError {
    cfdp_control::journal::JournalError::Io {
        path: "journal.ndjson".into(),
        source: std::io::Error::from(std::io::ErrorKind::StorageFull),
    }
}

fn batch(atomicity: Atomicity, updates: Vec<Update>) -> Batch {
    Batch {
        atomicity,
        expected_generation: None,
        updates: updates.into_iter().map(Ok).collect(),
    }
}

fn apply(s: &mut RuleStore, b: &Batch) -> BatchReport {
    s.apply(b, |_, _| Ok(())).unwrap()
}

fn codes(r: &BatchReport) -> Vec<Code> {
    r.results.iter().map(|r| r.code).collect()
}

/// What the workers see: the published copy's answer for a key, as the
/// committed rule its slot holds (from the exact tables: verify mode).
fn published(s: &RuleStore, k: &FlowKey) -> Option<Rule> {
    let e = s.readers().handle().enter().unwrap().classify(k)?;
    Some(id_rule(s, e))
}

/// A worker's answer for one key, through the filters in the store's
/// mode (filter-only mode keeps no exact table of every rule).
fn matched(s: &RuleStore, k: &FlowKey) -> Option<Rule> {
    let t = s.readers().handle();
    let t = t.enter().unwrap();
    let (mut counters, mut sample) = (Totals::default(), 0);
    let mut mcx = MatchCtx {
        mode: s.mode(),
        counters: &mut counters,
        sample: &mut sample,
    };
    let mut out = [None; 1];
    match_burst(&mut mcx, &t, std::slice::from_ref(k), &[true], &mut out);
    out[0].map(|e| id_rule(s, e))
}

/// The committed rule a worker's `RuleRef` points to.
fn id_rule(s: &RuleStore, e: RuleRef) -> Rule {
    s.rule_at_slot(e.slot)
        .expect("a published rule's slot holds a committed rule")
}

#[test]
fn continue_on_error_applies_what_it_can_and_reports_each_update() {
    let mut s = store(StoreConfig::default());
    let r = apply(
        &mut s,
        &batch(
            Atomicity::ContinueOnError,
            vec![
                Update::Insert(flow_rule(1, 1, Action::Drop)),
                Update::Insert(flow_rule(1, 2, Action::Drop)), // id taken
                Update::Insert(flow_rule(2, 1, Action::Drop)), // match taken
                Update::Delete(77),
                Update::Insert(prefix_rule(3, "10.0.0.0/8", "count")),
                Update::Modify(prefix_rule(3, "10.0.0.0/16", "allow")),
            ],
        ),
    );
    assert_eq!(
        codes(&r),
        [
            Code::Ok,
            Code::AlreadyExists,
            Code::AlreadyExists,
            Code::NotFound,
            Code::Ok,
            Code::Ok
        ]
    );
    assert!(r.applied);
    assert_eq!((r.generation, s.generation(), s.len()), (1, 1, 2));
    assert_eq!(published(&s, &flow(1)).map(|e| e.id), Some(1));
    assert_eq!(s.rule(3).unwrap(), prefix_rule(3, "10.0.0.0/16", "allow"));
    // 10.1.x.x was matched by the /8 before the modify, not after.
    let k = FlowKey::v4([1, 1, 1, 1], [10, 1, 0, 1], 6, 1, 2);
    assert_eq!(published(&s, &k), None);
}

#[test]
fn rollback_on_error_changes_nothing_and_names_the_failure() {
    let mut s = store(StoreConfig::default());
    apply(
        &mut s,
        &batch(
            Atomicity::RollbackOnError,
            vec![Update::Insert(flow_rule(1, 1, Action::Drop))],
        ),
    );
    let filter_items = s.filter_stats().items;
    let r = apply(
        &mut s,
        &batch(
            Atomicity::RollbackOnError,
            vec![
                Update::Insert(flow_rule(2, 2, Action::Drop)),
                Update::Delete(42), // no rule 42
                Update::Delete(1),
                Update::Insert(flow_rule(3, 3, Action::Drop)),
                Update::Modify(flow_rule(9, 9, Action::Drop)), // no rule 9
            ],
        ),
    );
    // Every bad update is named, not only the first one met.
    assert_eq!(
        codes(&r),
        [
            Code::Aborted,
            Code::NotFound,
            Code::Aborted,
            Code::Aborted,
            Code::NotFound
        ]
    );
    assert!(r.results[1].message.contains("42"));
    assert!(r.results[4].message.contains("9"));
    assert!(!r.applied);
    assert_eq!((s.generation(), s.len()), (1, 1));
    assert_eq!(published(&s, &flow(1)).map(|e| e.id), Some(1));
    assert_eq!(published(&s, &flow(2)), None);
    assert_eq!(
        s.filter_stats().items,
        filter_items,
        "the refused batch's inserts were undone"
    );
}

#[test]
fn malformed_updates_are_invalid_argument_in_place() {
    let mut s = store(StoreConfig::default());
    let b = parse_batch(
        &json!({"atomicity": "continue_on_error", "updates": [
            {"op": "insert", "rule": {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}},
            {"op": "insert", "rule": {"id": 2, "match": {"dst_prefix": "10.0.0.1/8"}, "action": "drop"}},
            {"op": "upsert"}
        ]}),
        100,
    )
    .unwrap();
    let r = apply(&mut s, &b);
    assert_eq!(
        codes(&r),
        [Code::Ok, Code::InvalidArgument, Code::InvalidArgument]
    );
    assert!(
        r.results[1].message.contains("host bits"),
        "{}",
        r.results[1].message
    );
}

#[test]
fn a_batch_sees_its_own_earlier_updates() {
    let mut s = store(StoreConfig::default());
    let r = apply(
        &mut s,
        &batch(
            Atomicity::DataplaneAtomic,
            vec![
                Update::Insert(flow_rule(1, 1, Action::Drop)),
                Update::Modify(flow_rule(1, 2, Action::Allow)),
                Update::Insert(flow_rule(2, 1, Action::Count)), // flow 1 is free again
                Update::Delete(2),
                Update::Insert(flow_rule(2, 1, Action::Redirect(4))),
            ],
        ),
    );
    assert!(r.all_ok(), "{:?}", r.results);
    assert_eq!(
        published(&s, &flow(1)).map(|e| e.action),
        Some(Action::Redirect(4))
    );
    assert_eq!(
        published(&s, &flow(2)).map(|e| (e.id, e.action)),
        Some((1, Action::Allow))
    );
}

#[test]
fn expected_generation_guards_against_a_concurrent_controller() {
    let mut s = store(StoreConfig::default());
    let mut b = batch(
        Atomicity::RollbackOnError,
        vec![Update::Insert(flow_rule(1, 1, Action::Drop))],
    );
    b.expected_generation = Some(0);
    assert!(apply(&mut s, &b).applied);
    // A second controller still believes generation 0.
    b.updates = vec![Ok(Update::Delete(1))];
    let e = s.apply(&b, |_, _| Ok(())).unwrap_err();
    assert!(
        matches!(
            e,
            ApplyError::GenerationMismatch {
                expected: 0,
                current: 1
            }
        ),
        "{e:?}"
    );
    assert_eq!(s.len(), 1);
}

#[test]
fn a_failed_journal_write_applies_nothing() {
    let mut s = store(StoreConfig::default());
    let b = batch(
        Atomicity::ContinueOnError,
        vec![Update::Insert(flow_rule(1, 1, Action::Drop))],
    );
    let e = s.apply(&b, |_, _| Err(disk_full())).unwrap_err();
    assert!(matches!(e, ApplyError::NotDurable(_)));
    assert_eq!((s.len(), s.generation()), (0, 0));
    assert_eq!(published(&s, &flow(1)), None);
    assert_eq!(s.filter_stats().items, 0, "filter insert undone");
}

#[test]
fn dataplane_atomic_is_refused_in_filter_only_mode() {
    let mut s = store(StoreConfig {
        mode: Mode::FilterOnly,
        max_rules: 1 << 12,
        ..StoreConfig::default()
    });
    let b = batch(
        Atomicity::DataplaneAtomic,
        vec![Update::Insert(flow_rule(1, 1, Action::Drop))],
    );
    assert!(matches!(
        s.apply(&b, |_, _| Ok(())),
        Err(ApplyError::Refused(_))
    ));
}

fn small(auto_grow: bool, bloom: bool) -> StoreConfig {
    StoreConfig {
        flow_capacity: 64,
        auto_grow,
        bloom: bloom.then_some(cfdp_filter::BloomMode::Bit),
        max_kicks: 50,
        ..StoreConfig::default()
    }
}

#[test]
fn a_full_filter_says_capacity_exhausted_and_rollback_undoes_every_insert() {
    let mut s = store(small(false, false));
    let inserts = |from: u32, n: u32| {
        (from..from + n)
            .map(|i| Update::Insert(flow_rule(i, i, Action::Drop)))
            .collect::<Vec<_>>()
    };
    // Fill the 16-bucket (64-entry) filter as far as it goes, one by one.
    let r = apply(&mut s, &batch(Atomicity::ContinueOnError, inserts(0, 200)));
    let ok = r.results.iter().filter(|r| r.code == Code::Ok).count();
    let full = r
        .results
        .iter()
        .filter(|r| r.code == Code::CapacityExhausted)
        .count();
    assert_eq!(ok + full, 200, "every update answered");
    assert!(ok >= 48 && full > 0, "ok {ok} full {full}");
    assert_eq!(s.len(), ok, "no rule reported ok is missing, none extra");
    for (i, res) in r.results.iter().enumerate() {
        let want = res.code == Code::Ok;
        assert_eq!(published(&s, &flow(i as u32)).is_some(), want, "rule {i}");
    }
    let items = s.filter_stats().items;
    let r = apply(
        &mut s,
        &batch(Atomicity::RollbackOnError, inserts(1000, 100)),
    );
    assert!(!r.applied);
    assert!(codes(&r).contains(&Code::CapacityExhausted));
    assert_eq!(s.filter_stats().items, items, "rolled-back inserts undone");
    assert_eq!(s.len(), ok);
}

#[test]
fn auto_grow_rebuilds_the_filter_and_loses_nothing() {
    let mut s = store(small(true, true));
    let updates: Vec<Update> = (0..5000)
        .map(|i| Update::Insert(flow_rule(i, i, Action::Drop)))
        .collect();
    let r = apply(&mut s, &batch(Atomicity::DataplaneAtomic, updates));
    assert!(
        r.all_ok(),
        "{:?}",
        r.results.iter().find(|r| r.code != Code::Ok)
    );
    assert!(!r.filter.grown.is_empty(), "{:?}", r.filter);
    assert_eq!(s.len(), 5000);
    let t = s.readers().handle();
    let t = t.enter().unwrap();
    for i in 0..5000 {
        assert!(t.flow_filter().contains_hash(flow(i).hash()), "flow {i}");
        assert_eq!(t.classify(&flow(i)).map(|e| id_rule(&s, e).id), Some(i));
    }
}

#[test]
fn bloom_assisted_burst_into_a_97_percent_full_filter_then_migration() {
    let cfg = StoreConfig {
        flow_capacity: 15_000, // 2^12 buckets at 95 %
        auto_grow: false,
        ..StoreConfig::default()
    };
    let mut s = store(cfg);
    let slots = 4 * (1usize << 12);
    let stats = s.filter_stats();
    assert_eq!(stats.filters["flow"].buckets, 1 << 12);
    let target = slots * 97 / 100;
    // Fill to 97 % in batches of 1024 (these batches themselves use the
    // Bloom path too; migrate between them to get back to cuckoo entries).
    let mut next = 0u32;
    while (next as usize) < target {
        let n = (target - next as usize).min(1024) as u32;
        let ups = (next..next + n)
            .map(|i| Update::Insert(flow_rule(i, i, Action::Drop)))
            .collect();
        let r = apply(&mut s, &batch(Atomicity::RollbackOnError, ups));
        assert!(r.all_ok());
        next += n;
        while s.migrate(1 << 16) > 0 {}
    }
    let r = apply(
        &mut s,
        &batch(
            Atomicity::RollbackOnError,
            (next..next + 1024)
                .map(|i| Update::Insert(flow_rule(i, i, Action::Drop)))
                .collect(),
        ),
    );
    assert!(r.all_ok(), "the burst at 97 % must not fail");
    assert_eq!(r.filter.inserts, 1024);
    assert!(r.filter.bloom > 0, "{:?}", r.filter);
    // Bounded time: no insert came near max_kicks (500), and the mean stays
    // a few bucket accesses even though this burst is a quarter of the
    // table's buckets.
    assert!(r.filter.max_iterations < 250, "{:?}", r.filter);
    assert!(r.filter.mean_iterations < 4.0, "{:?}", r.filter);
    assert!(s.bloom_items() > 0);
    let mut moved = 0;
    loop {
        let m = s.migrate(64);
        if m == 0 {
            break;
        }
        moved += m;
    }
    assert!(moved > 0);
    // Whatever cannot move stays findable; everything installed is found.
    let t = s.readers().handle();
    let t = t.enter().unwrap();
    for i in 0..next + 1024 {
        assert!(t.flow_filter().contains_hash(flow(i).hash()), "flow {i}");
    }
}

/// Readers run the real matcher over the published tables while the writer
/// churns rules (inserts, deletes, modifies, filter growth): the verify-mode
/// answer through the filters must always equal the exact classification of
/// the same copy — which fails if any key of a readable copy were missing
/// from its filter.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn verify_mode_answers_equal_the_exact_tables_under_churn() {
    let cfg = StoreConfig {
        flow_capacity: 256,
        prefix_capacity: 16,
        max_kicks: 100,
        ..StoreConfig::default()
    };
    let stats = Arc::new(LiveStats::new(2, cfg.max_rules));
    let mut s = RuleStore::new(cfg, stats).unwrap();
    let readers = s.readers();
    let mode = s.mode();
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let universe = 3000u32;
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let (readers, stop, checked) = (readers.clone(), stop.clone(), checked.clone());
            std::thread::spawn(move || {
                let h = readers.handle();
                let mut counters = Totals::default();
                let mut sample = 0;
                let mut x = r as u32;
                while !stop.load(Ordering::Relaxed) {
                    let keys: [FlowKey; MAX_BURST] = std::array::from_fn(|_| {
                        x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                        let i = (x >> 8) % universe;
                        if i.is_multiple_of(3) {
                            // Hits the prefix rules below (10.i.0.0/16).
                            FlowKey::v4([1, 2, 3, 4], [10, (i % 200) as u8, 7, 7], 6, 9, 9)
                        } else {
                            flow(i)
                        }
                    });
                    let valid = [true; MAX_BURST];
                    let mut out = [None; MAX_BURST];
                    let t = h.enter().unwrap();
                    let mut cx = MatchCtx {
                        mode,
                        counters: &mut counters,
                        sample: &mut sample,
                    };
                    match_burst(&mut cx, &t, &keys, &valid, &mut out);
                    for (k, got) in keys.iter().zip(out) {
                        assert_eq!(
                            got,
                            t.classify(k),
                            "key {k:?} generation {}",
                            t.generation()
                        );
                    }
                    checked.fetch_add(MAX_BURST as u64, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut x = 7u64;
    let mut installed: Vec<Option<Rule>> = vec![None; universe as usize + 200];
    for round in 0..300 {
        let mut ups = Vec::new();
        for _ in 0..64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let id = ((x >> 33) % (universe as u64 + 200)) as u32;
            let rule = if id >= universe {
                prefix_rule(id, &format!("10.{}.0.0/16", id - universe), "drop")
            } else {
                let act = [Action::Drop, Action::Allow, Action::Count][(x >> 20) as usize % 3];
                flow_rule(id, (id + round) % universe, act)
            };
            let u = match installed[id as usize] {
                None => Update::Insert(rule),
                Some(_) if x.is_multiple_of(2) => Update::Delete(id),
                Some(_) => Update::Modify(rule),
            };
            ups.push(u);
        }
        let r = apply(&mut s, &batch(Atomicity::ContinueOnError, ups.clone()));
        for (u, res) in ups.iter().zip(&r.results) {
            if res.code == Code::Ok {
                installed[u.id() as usize] = match u {
                    Update::Delete(_) => None,
                    Update::Insert(r) | Update::Modify(r) => Some(*r),
                };
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join()
            .expect("reader saw a verify answer differ from its copy");
    }
    assert!(checked.load(Ordering::Relaxed) > 10_000);
    let n = installed.iter().flatten().count();
    assert_eq!(s.len(), n);
}

/// Two rules that must switch together, toggled by dataplane_atomic
/// batches: no reader ever sees one switched and the other not.
#[test]
fn dataplane_atomic_pairs_switch_together_for_readers() {
    let mut s = store(StoreConfig::default());
    let pair = |port: u16| {
        vec![
            Update::Modify(flow_rule(1, 1, Action::Redirect(port))),
            Update::Modify(flow_rule(2, 2, Action::Redirect(port))),
        ]
    };
    apply(
        &mut s,
        &batch(
            Atomicity::DataplaneAtomic,
            vec![
                Update::Insert(flow_rule(1, 1, Action::Redirect(1))),
                Update::Insert(flow_rule(2, 2, Action::Redirect(1))),
            ],
        ),
    );
    let readers = s.readers();
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, seen) = (stop.clone(), seen.clone());
        std::thread::spawn(move || {
            let h = readers.handle();
            while !stop.load(Ordering::Relaxed) {
                let t = h.enter().unwrap();
                let a = t.classify(&flow(1)).map(|e| e.action);
                let b = t.classify(&flow(2)).map(|e| e.action);
                assert_eq!(a, b, "a mix at generation {}", t.generation());
                seen.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // At least 2000 switches, and until the reader has looked 10^4 times.
    let mut i = 0u16;
    while (i < 2000 || seen.load(Ordering::Relaxed) < 10_000) && !reader.is_finished() {
        let r = apply(&mut s, &batch(Atomicity::DataplaneAtomic, pair(2 + i % 2)));
        assert!(r.all_ok());
        i = i.wrapping_add(1);
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("no mix");
    assert!(seen.load(Ordering::Relaxed) > 0);
}

#[test]
fn prefix_classes_come_and_go_with_their_rules() {
    let mut s = store(StoreConfig::default());
    let classes = |s: &RuleStore| s.readers().handle().enter().unwrap().class_count();
    let r = apply(
        &mut s,
        &batch(
            Atomicity::RollbackOnError,
            vec![
                Update::Insert(prefix_rule(1, "10.0.0.0/8", "drop")),
                Update::Insert(prefix_rule(2, "10.1.0.0/16", "allow")),
                Update::Insert(prefix_rule(3, "11.0.0.0/8", "count")),
            ],
        ),
    );
    assert!(r.all_ok());
    assert_eq!(classes(&s), 2);
    // Longest prefix first: 10.1.2.3 is rule 2's, 10.2.0.1 rule 1's.
    let k = |d: [u8; 4]| FlowKey::v4([1, 1, 1, 1], d, 6, 1, 2);
    assert_eq!(published(&s, &k([10, 1, 2, 3])).map(|e| e.id), Some(2));
    assert_eq!(published(&s, &k([10, 2, 0, 1])).map(|e| e.id), Some(1));
    apply(
        &mut s,
        &batch(Atomicity::RollbackOnError, vec![Update::Delete(2)]),
    );
    // Published at once; the emptied class leaves in the second half of
    // the commit (`settle`, which the control thread runs after answering).
    assert_eq!(published(&s, &k([10, 1, 2, 3])).map(|e| e.id), Some(1));
    assert_eq!(classes(&s), 2);
    s.settle();
    assert_eq!(classes(&s), 1, "the /16 class left with its last rule");
    assert_eq!(published(&s, &k([10, 1, 2, 3])).map(|e| e.id), Some(1));
    // A full class filter (no auto_grow) refuses what it cannot take, keeps
    // what it took, and the class leaves once emptied.
    let mut tiny = store(StoreConfig {
        prefix_capacity: 16,
        auto_grow: false,
        bloom: None,
        max_kicks: 1,
        ..StoreConfig::default()
    });
    let ups: Vec<Update> = (0..200u32)
        .map(|i| {
            Update::Insert(prefix_rule(
                i,
                &format!("10.{}.{}.0/24", i / 200, i % 200),
                "drop",
            ))
        })
        .collect();
    let r = apply(&mut tiny, &batch(Atomicity::ContinueOnError, ups));
    let ok = r.results.iter().filter(|r| r.code == Code::Ok).count();
    assert!(ok > 0 && ok < 200, "{ok}");
    assert_eq!(classes(&tiny), 1);
    let dels: Vec<Update> = (0..200u32).map(Update::Delete).collect();
    apply(&mut tiny, &batch(Atomicity::ContinueOnError, dels));
    tiny.settle();
    assert_eq!((classes(&tiny), tiny.len()), (0, 0));
}

const PRIORITY_FILE: &str = r#"{"rules": [
  {"id": 10, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "tcp", "sport": 40000, "dport": 80}}, "action": "drop"},
  {"id": 20, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"},
  {"id": 21, "match": {"dst_prefix": "10.0.0.0/16"}, "action": "count"},
  {"id": 22, "match": {"dst_prefix": "10.0.0.0/16", "proto": "udp", "port": 53}, "action": {"redirect": 2}},
  {"id": 23, "match": {"src_prefix": "10.0.0.0/16"}, "action": "drop"},
  {"id": 30, "match": {"src_prefix": "2001:db8::/32", "proto": 58}, "action": "drop"},
  {"id": 40, "match": {"flow": {"src": "192.0.2.1", "dst": "192.0.2.2", "proto": "icmp"}}, "action": "count"}
]}"#;

/// The documented priority (`cfdp_rules::class`), walked by the one
/// classifier (the published tables), and the filter path agreeing with it.
#[test]
fn priority_is_exact_then_longest_then_specific_then_dst() {
    let rules = cfdp_rules::parse_rule_file(PRIORITY_FILE).unwrap();
    let (s, cx) = RuleStore::fixed(&rules[..], Mode::Verify, 1).unwrap();
    assert_eq!(s.len(), 7);
    let v4 = |s: [u8; 4], d: [u8; 4], p: u8, sp: u16, dp: u16| FlowKey::v4(s, d, p, sp, dp);
    let v6 = |src: &str, dst: &str, p: u8, sp: u16, dp: u16| {
        FlowKey::new(src.parse().unwrap(), dst.parse().unwrap(), p, sp, dp)
    };
    let cases: [(FlowKey, Option<u32>); 9] = [
        // Exact flow wins over every prefix.
        (v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40000, 80), Some(10)),
        // Other port: /16 dst (count) and /16 src (drop) tie; dst wins.
        (v4([10, 0, 0, 1], [10, 0, 0, 2], 6, 40001, 80), Some(21)),
        // The more specific /16 (udp/53) first.
        (v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 5000, 53), Some(22)),
        // The /16 source rule is longer than the /8 destination rule.
        (v4([10, 0, 9, 9], [10, 1, 0, 2], 6, 1, 2), Some(23)),
        (v4([9, 9, 9, 9], [10, 1, 0, 2], 6, 1, 2), Some(20)),
        (v4([9, 9, 9, 9], [11, 1, 0, 2], 6, 1, 2), None),
        // ICMP exact flow has ports 0.
        (v4([192, 0, 2, 1], [192, 0, 2, 2], 1, 0, 0), Some(40)),
        (v6("2001:db8::5", "2001:db9::1", 58, 0, 0), Some(30)),
        (v6("2001:db8::5", "2001:db9::1", 6, 1, 2), None),
    ];
    let t = cx.readers.handle();
    let t = t.enter().unwrap();
    let keys: Vec<FlowKey> = cases.iter().map(|c| c.0).collect();
    let mut out = [None; 9];
    let (mut counters, mut sample) = (Totals::default(), 0);
    let mut mcx = MatchCtx {
        mode: Mode::Verify,
        counters: &mut counters,
        sample: &mut sample,
    };
    match_burst(&mut mcx, &t, &keys, &[true; 9], &mut out);
    for (i, (k, want)) in cases.iter().enumerate() {
        assert_eq!(
            t.classify(k).map(|e| id_rule(&s, e).id),
            *want,
            "classify {k:?}"
        );
        assert_eq!(out[i].map(|e| id_rule(&s, e).id), *want, "filters {k:?}");
    }
}

/// A rule file's duplicate ids and matches are refused by the store (the
/// one validator), naming the rule by position and id and the field.
#[test]
fn rule_files_with_duplicates_are_refused_naming_the_rule() {
    let cases = [
        (
            r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 1, "match": {"dst_prefix": "10.0.0.0/9"}, "action": "drop"}]}"#,
            "rule #2 (id 1): id: rule id 1 exists",
        ),
        (
            r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 2, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"}]}"#,
            "rule #2 (id 2): match: same match as rule id 1",
        ),
        // The first problem in the file is the one reported (the bulk
        // load looks for id and match problems on two threads), and at
        // one rule the id problem, as a batch would.
        (
            r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
            "rule #2 (id 1): id: rule id 1 exists",
        ),
        (
            r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": "drop"}, {"id": 2, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": "drop"}, {"id": 2, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
            "rule #2 (id 2): match: same match as rule id 1",
        ),
        (
            r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": "drop"}, {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 3, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": "drop"}]}"#,
            "rule #2 (id 1): id: rule id 1 exists",
        ),
    ];
    for (text, want) in cases {
        let rules = cfdp_rules::parse_rule_file(text).unwrap();
        let err = RuleStore::fixed(&rules[..], Mode::Verify, 1)
            .err()
            .expect("refused");
        assert!(
            matches!(err, cfdp_control::StoreError::Rule { index: 1, .. }),
            "{err:?}"
        );
        assert_eq!(err.to_string(), want);
    }
}

/// A rule set loaded in bulk (`with_rules`: tables built at their final
/// size, filters by `Filter::build`) answers exactly like the same rules
/// inserted through a batch, in verify and filter-only mode; and later
/// batches see the loaded rules (their ids, their matches, their slots).
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn bulk_load_matches_the_batch_path_and_later_batches_see_it() {
    let mut rules: Vec<Rule> = (0..20_000)
        .map(|i| {
            let action = [Action::Drop, Action::Allow, Action::Count][i as usize % 3];
            flow_rule(100_000 + i, i, action)
        })
        .collect();
    for (i, p) in ["10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "192.0.2.0/24"]
        .iter()
        .enumerate()
    {
        rules.push(prefix_rule(i as u32 + 1, p, "drop"));
    }
    for mode in [Mode::Verify, Mode::FilterOnly] {
        let cfg = StoreConfig {
            mode,
            flow_capacity: 1024, // grown to fit by the load
            ..StoreConfig::default()
        };
        let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
        let mut bulk = RuleStore::with_rules(cfg.clone(), stats, &rules[..]).unwrap();
        let mut batched = store(cfg);
        let r = apply(
            &mut batched,
            &batch(
                Atomicity::RollbackOnError,
                rules.iter().map(|r| Update::Insert(*r)).collect(),
            ),
        );
        assert!(r.all_ok());
        assert_eq!(bulk.rules(), batched.rules(), "{mode:?}");
        assert_eq!(bulk.len(), rules.len());
        // Every rule's key and some misses, through the filters as the
        // workers match them.
        let keys: Vec<FlowKey> = (0..20_100).map(flow).collect();
        for st in [&bulk, &batched] {
            let t = st.readers().handle();
            let t = t.enter().unwrap();
            let (mut counters, mut sample) = (Totals::default(), 0);
            let mut mcx = MatchCtx {
                mode,
                counters: &mut counters,
                sample: &mut sample,
            };
            let mut wrong = 0usize;
            for (c, chunk) in keys.chunks(MAX_BURST).enumerate() {
                let mut out = [None; MAX_BURST];
                match_burst(&mut mcx, &t, chunk, &[true; MAX_BURST], &mut out);
                for (j, k) in chunk.iter().enumerate() {
                    let i = c * MAX_BURST + j;
                    if i < 20_000 {
                        assert!(out[j].is_some(), "{mode:?}: false negative, key {i}");
                    }
                    // Keys past the flow rules may match a prefix rule.
                    let got = out[j].map(|e| id_rule(st, e).id);
                    let want = Some(100_000 + i as u32);
                    if mode == Mode::Verify {
                        assert_eq!(out[j], t.classify(k), "{mode:?} key {i}");
                        if i < 20_000 {
                            assert_eq!(got, want, "{mode:?} key {i}");
                        }
                    } else if i < 20_000 && got != want {
                        // Filter-only: another key's entry with the same
                        // fingerprint may answer first (a false positive).
                        wrong += 1;
                    }
                }
            }
            assert!(wrong * 200 < 20_000, "{mode:?}: {wrong} wrong answers");
        }
        // Later batches see the loaded rules.
        let r = apply(
            &mut bulk,
            &batch(
                Atomicity::ContinueOnError,
                vec![
                    Update::Insert(flow_rule(100_005, 999_999, Action::Drop)), // id taken
                    Update::Insert(flow_rule(7, 5, Action::Drop)),             // match taken
                    Update::Insert(prefix_rule(8, "10.1.0.0/16", "allow")),    // match taken
                    Update::Delete(100_006),
                    // The deleted rule's match is free again in the same batch.
                    Update::Insert(flow_rule(9, 6, Action::Allow)),
                ],
            ),
        );
        assert_eq!(
            codes(&r),
            [
                Code::AlreadyExists,
                Code::AlreadyExists,
                Code::AlreadyExists,
                Code::Ok,
                Code::Ok
            ],
            "{mode:?}: {:?}",
            r.results
        );
        // The deleted rule's filter entry leaves when the commit settles
        // (the control thread does it after answering); until then, in
        // filter-only mode, a lookup may meet it first and fall through.
        bulk.settle();
        assert_eq!(matched(&bulk, &flow(6)).map(|e| e.id), Some(9), "{mode:?}");
        let m = bulk.memory();
        assert!(m.tables > 0 && m.rule_store > 0 && m.filters > 0 && m.rule_counters > 0);
        assert_eq!(
            m.total,
            m.rule_store + m.tables + m.filters + m.rule_counters + m.other
        );
    }
}

/// A bulk load's exact table is a base both copies share; batches change
/// each copy's delta, and once the changes outgrow the base they are folded
/// into a new shared base. Both copies answer exactly the rule set before
/// and after the fold (checked key by key on each copy).
#[test]
fn churn_over_a_bulk_load_folds_into_a_new_shared_base() {
    let loaded: Vec<Rule> = (0..20_000)
        .map(|i| flow_rule(i + 1, i, Action::Drop))
        .collect();
    let cfg = StoreConfig {
        flow_capacity: 1 << 17,
        ..StoreConfig::default()
    };
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let mut s = RuleStore::with_rules(cfg, stats, &loaded[..]).unwrap();
    let n = 100_000u32;
    // Key index → rule id, the rule set the store must show.
    let mut want: Vec<Option<u32>> = (0..n).map(|i| (i < 20_000).then_some(i + 1)).collect();
    let check = |s: &mut RuleStore, want: &[Option<u32>], when: &str| {
        // Once on each copy: a one-rule batch swaps them.
        for copy in 0..2 {
            for (i, w) in want.iter().enumerate() {
                let got = published(s, &flow(i as u32)).map(|r| r.id);
                assert_eq!(got, *w, "{when}, copy {copy}, key {i}");
            }
            let probe = flow_rule(900_000 + copy, 900_000 + copy, Action::Allow);
            let b = batch(Atomicity::RollbackOnError, vec![Update::Insert(probe)]);
            assert!(apply(s, &b).all_ok());
            let b = batch(
                Atomicity::RollbackOnError,
                vec![Update::Delete(900_000 + copy)],
            );
            assert!(apply(s, &b).all_ok());
        }
    };
    check(&mut s, &want, "loaded");
    // Every other loaded rule deleted, 80 000 new ones inserted, modified
    // rules among them: the changes outgrow the 20 000-rule base.
    let mut ups: Vec<Update> = (0..20_000)
        .step_by(2)
        .map(|i| Update::Delete(i + 1))
        .collect();
    ups.extend((20_000..n).map(|i| Update::Insert(flow_rule(i + 1, i, Action::Drop))));
    ups.extend(
        (1..20_000)
            .step_by(2)
            .map(|i| Update::Modify(flow_rule(i + 1, i, Action::Count))),
    );
    // The batch whose changes outgrow the base starts a fold and returns:
    // the merge runs on its own thread and lands with a later batch (or
    // when the control thread is idle), never with the batch that froze.
    let mut folds = 0;
    for chunk in ups.chunks(4096) {
        let before = s.folds();
        assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, chunk.to_vec())).all_ok());
        for u in chunk {
            match u {
                Update::Delete(id) => want[*id as usize - 1] = None,
                Update::Insert(r) | Update::Modify(r) => want[r.id as usize - 1] = Some(r.id),
            }
        }
        let after = s.folds();
        if after.0 == before.0 {
            continue;
        }
        folds += 1;
        assert_eq!(
            after.1, before.1,
            "the freezing batch did not wait for the merge"
        );
        // Lookups through delta, frozen layer and base (the published copy
        // froze first).
        for (i, w) in want.iter().enumerate() {
            let got = published(&s, &flow(i as u32)).map(|r| r.id);
            assert_eq!(got, *w, "fold merging, key {i}");
        }
        // Hash tables never shrink on removal: landing the fold (one new
        // base for the old base and the frozen changes) brings memory down.
        let merging = s.memory().tables;
        assert!(s.finish_fold(true));
        assert_eq!(s.folds(), (1, 1));
        let landed = s.memory().tables;
        assert!(
            10 * landed < 9 * merging,
            "tables {merging} B while merging, {landed} B once landed"
        );
        check(&mut s, &want, "the fold landed");
    }
    assert_eq!(folds, 1, "one fold: the changes outgrew the base once");
    check(&mut s, &want, "after the churn");
    assert_eq!(s.len(), 90_000);
}

/// The second half of a commit (wait for the workers to leave the old
/// copy, then take deleted keys out of the filters and recycle their
/// slots) runs after the answer: a deleted rule is gone from the published
/// tables at once, its filter entry leaves at `settle`, and the next batch
/// settles first if nobody did.
#[test]
fn deleted_keys_leave_the_filters_when_the_commit_settles() {
    let mut s = store(StoreConfig::default());
    let ins: Vec<Update> = (0..100)
        .map(|i| Update::Insert(flow_rule(i, i, Action::Drop)))
        .collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, ins)).all_ok());
    assert_eq!(s.filter_stats().items, 100);
    let dels: Vec<Update> = (0..10).map(Update::Delete).collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, dels)).all_ok());
    assert_eq!(
        published(&s, &flow(3)),
        None,
        "gone from the tables at once"
    );
    assert_eq!(
        s.filter_stats().items,
        100,
        "filter entries wait for settle"
    );
    s.settle();
    assert_eq!(s.filter_stats().items, 90);
    s.settle(); // nothing due: no change
    assert_eq!(s.filter_stats().items, 90);
    // Unsettled when the next batch comes: it settles first.
    let dels: Vec<Update> = (10..20).map(Update::Delete).collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, dels)).all_ok());
    let one = vec![Update::Insert(flow_rule(500, 500, Action::Drop))];
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, one)).all_ok());
    assert_eq!(s.filter_stats().items, 81);
}

/// Durability comes first: when the durability hook (the journal's write
/// and fsync) runs, nothing of the batch is visible to the workers yet, and
/// `apply` (hence the response) returns only after it; a failing hook
/// publishes nothing. Fails if the publish moves before the hook.
#[test]
fn the_journal_runs_before_the_publish_and_before_the_answer() {
    let mut s = store(StoreConfig::default());
    let b = batch(
        Atomicity::RollbackOnError,
        vec![Update::Insert(flow_rule(1, 1, Action::Drop))],
    );
    let readers = s.readers();
    let mut order = Vec::new();
    let r = s
        .apply(&b, |updates, generation| {
            let t = readers.handle();
            let t = t.enter().unwrap();
            order.push(("journal", t.classify(&flow(1)).is_some(), t.generation()));
            assert_eq!((updates.len(), generation), (1, 1));
            Ok(())
        })
        .unwrap();
    order.push(("answer", published(&s, &flow(1)).is_some(), r.generation));
    assert_eq!(order, [("journal", false, 0), ("answer", true, 1)]);
    // A failing hook: refused, nothing published, generation unchanged.
    let b = batch(
        Atomicity::RollbackOnError,
        vec![Update::Insert(flow_rule(2, 2, Action::Drop))],
    );
    let e = s.apply(&b, |_, _| Err(disk_full())).unwrap_err();
    assert!(matches!(e, ApplyError::NotDurable(_)), "{e:?}");
    assert_eq!(published(&s, &flow(2)), None);
    assert_eq!(s.generation(), 1);
    assert_eq!(s.filter_stats().items, 1, "the refused insert was undone");
}

/// Filter-only mode keeps no exact table of every rule: a filter entry's
/// value is the rule's slot, and only keys placed in the Bloom part (whose
/// answers carry no value) are kept, key → slot. A filter filled to 97 %
/// through the Bloom-assisted path puts keys there; every rule must still
/// be found (no false negatives) before and after migration moves them
/// into entries, with its current action (modifies land in the slot
/// array), and a deleted rule never answers. The sampled verification
/// (every 64th positive, against a check of the key's hash) counts false
/// positives.
#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn filter_only_finds_bloom_part_keys_through_changes_and_migration() {
    let cfg = StoreConfig {
        mode: Mode::FilterOnly,
        flow_capacity: 4096,
        auto_grow: false,
        ..StoreConfig::default()
    };
    let mut s = store(cfg);
    let slots = s.filter_stats().filters["flow"].buckets * 4;
    let (mut n, mut bloom) = (0u32, 0u64);
    while (n as f64) < 0.97 * slots as f64 {
        let ups = (n..n + 128)
            .map(|i| Update::Insert(flow_rule(i + 1, i, Action::Drop)))
            .collect();
        let r = apply(&mut s, &batch(Atomicity::ContinueOnError, ups));
        assert!(
            r.all_ok(),
            "{:?}",
            r.results.iter().find(|x| x.code != Code::Ok)
        );
        bloom += r.filter.bloom;
        n += 128;
    }
    assert!(
        bloom > 0 && s.bloom_items() > 0,
        "no key went to the Bloom part"
    );
    let deleted = |i: u32| i % 5 == 4;
    let modified = |i: u32| i.is_multiple_of(3);
    let check = |s: &RuleStore, what: &str| {
        let mut wrong = 0;
        for i in 0..n {
            let got = matched(s, &flow(i));
            let changed = what != "filled";
            if changed && deleted(i) {
                assert_ne!(
                    got.map(|r| r.id),
                    Some(i + 1),
                    "{what}: deleted rule {i} answers"
                );
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("{what}: false negative, key {i}"));
            if got.id != i + 1 {
                // Another key's entry with the same fingerprint answered.
                wrong += 1;
                continue;
            }
            let want = if changed && modified(i) {
                Action::Count
            } else {
                Action::Drop
            };
            assert_eq!(got.action, want, "{what}: key {i}");
        }
        assert!(
            wrong * 50 < n,
            "{what}: {wrong} of {n} answered by another rule"
        );
    };
    check(&s, "filled");
    // A batch that fails at its last update is undone; the entries its
    // inserts evicted into the Bloom part stay there, and their rules must
    // still be found.
    let ups = (n..n + 512)
        .map(|i| Update::Insert(flow_rule(i + 1, i, Action::Drop)))
        .chain([Update::Delete(999_999_999)])
        .collect();
    let r = apply(&mut s, &batch(Atomicity::RollbackOnError, ups));
    assert!(!r.applied);
    assert!(
        r.filter.bloom_added > r.filter.bloom,
        "no entry evicted: {:?}",
        r.filter
    );
    check(&s, "filled");
    let ups = (0..n)
        .filter(|&i| modified(i))
        .map(|i| Update::Modify(flow_rule(i + 1, i, Action::Count)))
        .chain(
            (0..n)
                .filter(|&i| deleted(i))
                .map(|i| Update::Delete(i + 1)),
        )
        .collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, ups)).all_ok());
    s.settle();
    check(&s, "changed");
    while s.bloom_items() > 0 {
        assert!(s.migrate(1 << 20) > 0, "migration stuck");
    }
    check(&s, "migrated");

    // Sampled verification: keys of no rule only ever answer falsely.
    let t = s.readers().handle();
    let t = t.enter().unwrap();
    let (mut counters, mut sample) = (Totals::default(), 0);
    let mut mcx = MatchCtx {
        mode: Mode::FilterOnly,
        counters: &mut counters,
        sample: &mut sample,
    };
    let strangers: Vec<FlowKey> = (1_000_000..1_600_000).map(flow).collect();
    for chunk in strangers.chunks(MAX_BURST) {
        let mut out = [None; MAX_BURST];
        match_burst(&mut mcx, &t, chunk, &[true; MAX_BURST], &mut out);
    }
    let (sampled, falses) = (
        counters.filter_only_sampled,
        counters.filter_only_sampled_false,
    );
    assert!(sampled > 0, "no positive sampled");
    assert_eq!(
        falses, sampled,
        "every sampled answer for a stranger is false"
    );
    // The rules' own keys: (almost) every sampled answer is right.
    let (mut counters, mut sample) = (Totals::default(), 0);
    let mut mcx = MatchCtx {
        mode: Mode::FilterOnly,
        counters: &mut counters,
        sample: &mut sample,
    };
    let own: Vec<FlowKey> = (0..n).filter(|&i| !deleted(i)).map(flow).collect();
    for _ in 0..8 {
        for chunk in own.chunks(MAX_BURST) {
            let mut out = [None; MAX_BURST];
            let valid = [true; MAX_BURST];
            match_burst(&mut mcx, &t, chunk, &valid[..chunk.len()], &mut out);
        }
    }
    let (sampled, falses) = (
        counters.filter_only_sampled,
        counters.filter_only_sampled_false,
    );
    assert!(
        sampled > 100 && falses * 20 < sampled,
        "{falses} of {sampled} sampled false"
    );
}

/// Filter-only mode: a batch that deletes a rule and gives its match to a
/// new rule leaves the deleted rule's filter entry in place until the
/// commit settles (a worker may still read the copy that has it), so a
/// lookup may meet that entry first; the new rule must be found all the
/// same, before and after the settle.
#[test]
fn filter_only_finds_a_match_reused_within_one_batch() {
    let cfg = StoreConfig {
        mode: Mode::FilterOnly,
        ..StoreConfig::default()
    };
    let mut s = store(cfg);
    let n = 2000u32;
    let ups = (0..n)
        .map(|i| Update::Insert(flow_rule(i + 1, i, Action::Drop)))
        .collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, ups)).all_ok());
    let ups = (0..n)
        .map(|i| Update::Delete(i + 1))
        .chain((0..n).map(|i| Update::Insert(flow_rule(10_000 + i, i, Action::Allow))))
        .collect();
    assert!(apply(&mut s, &batch(Atomicity::RollbackOnError, ups)).all_ok());
    for settled in [false, true] {
        if settled {
            s.settle();
        }
        for i in 0..n {
            let got = matched(&s, &flow(i)).map(|r| (r.id, r.action));
            assert_eq!(
                got,
                Some((10_000 + i, Action::Allow)),
                "key {i}, settled {settled}"
            );
        }
    }
}

/// The control thread publishes its statistics before every answer; the
/// list of `count` rules in them is rebuilt only when it changed (it was
/// rebuilt for every request: O(count rules) ahead of each answer, 6–27 ms
/// measured at a million `count` rules), and `stats` shows a change at
/// once.
#[test]
fn the_count_rules_list_is_rebuilt_only_when_it_changes() {
    use cfdp_control::api::{ApplyCommand, Command};
    use cfdp_control::plane::{ControlPlane, PlaneConfig};
    let rules: Vec<Rule> = (0..1000)
        .map(|i| flow_rule(i + 1, i, Action::Count))
        .collect();
    let cfg = StoreConfig::default();
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let store = RuleStore::with_rules(cfg, stats, rules).unwrap();
    let mut plane = ControlPlane::new(store, None, PlaneConfig::default());
    let board = plane.board();
    let list = || board.view().count_rules.clone();
    let first = list();
    assert_eq!(first.len(), 1000);
    let apply = |plane: &mut ControlPlane, u: Update| {
        let b = batch(Atomicity::RollbackOnError, vec![u]);
        plane.apply(ApplyCommand::new(b)).unwrap().applied
    };
    plane.handle(Command::Ping).unwrap();
    plane.publish_view();
    assert!(Arc::ptr_eq(&first, &list()), "rebuilt without a change");
    // A batch that changes no `count` rule keeps the list.
    let drop_rule = prefix_rule(5000, "10.9.0.0/16", "drop");
    assert!(apply(&mut plane, Update::Insert(drop_rule)));
    plane.publish_view();
    assert!(Arc::ptr_eq(&first, &list()), "rebuilt for a drop rule");
    // One that adds a `count` rule: `stats` shows it before the next
    // publish, and the published list after it.
    let count_rule = prefix_rule(5001, "10.8.0.0/16", "count");
    assert!(apply(&mut plane, Update::Insert(count_rule)));
    assert_eq!(plane.stats().rule_counters.len(), 1001);
    plane.publish_view();
    assert_eq!(list().len(), 1001);
    // A `count` rule turned into `drop`: gone from the list.
    assert!(apply(
        &mut plane,
        Update::Modify(flow_rule(1, 0, Action::Drop))
    ));
    plane.publish_view();
    assert_eq!(list().len(), 1000);
}

/// A control plane over an empty default store, without a journal, that
/// takes batches of at most `max_batch` updates.
fn plane_with_max_batch(max_batch: usize) -> cfdp_control::plane::ControlPlane {
    use cfdp_control::api::RequestLimits;
    use cfdp_control::plane::{ControlPlane, PlaneConfig};
    ControlPlane::new(
        store(StoreConfig::default()),
        None,
        PlaneConfig {
            requests: RequestLimits {
                max_batch,
                ..RequestLimits::default()
            },
            ..PlaneConfig::default()
        },
    )
}

/// The typed API holds in-process callers to the batch bound the socket
/// enforces while parsing: a larger batch is refused whole and counted.
#[test]
fn typed_batches_over_max_batch_are_refused_whole() {
    use cfdp_control::api::ApplyCommand;
    use cfdp_control::ControlError;
    let mut plane = plane_with_max_batch(2);
    let three = (1..=3).map(|i| Update::Insert(flow_rule(i, i, Action::Drop)));
    let e = plane
        .apply(ApplyCommand::new(batch(
            Atomicity::ContinueOnError,
            three.collect(),
        )))
        .unwrap_err();
    assert!(matches!(e, ControlError::BadBatch(_)), "{e:?}");
    assert_eq!((plane.stats().rules, plane.stats().batches.refused), (0, 1));
    let two = (1..=2).map(|i| Update::Insert(flow_rule(i, i, Action::Drop)));
    let r = plane
        .apply(ApplyCommand::new(batch(
            Atomicity::ContinueOnError,
            two.collect(),
        )))
        .unwrap();
    assert!(r.applied);
}

/// The journal is compacted by size as well as by record count: one batch
/// past `compact_bytes` compacts it, though `compact_every` is far away.
#[test]
fn the_journal_is_compacted_by_size_too() {
    use cfdp_control::api::ApplyCommand;
    use cfdp_control::journal::{restore, Journal};
    use cfdp_control::plane::{ControlPlane, PlaneConfig};
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-compact-bytes-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
    restore(dir).unwrap();
    let mut plane = ControlPlane::new(
        store(StoreConfig::default()),
        Some(Journal::open(dir, 0).unwrap()),
        PlaneConfig {
            compact_every: 1000,
            compact_bytes: 100,
            ..PlaneConfig::default()
        },
    );
    let records = |plane: &ControlPlane| plane.stats().journal.map(|j| j.records);
    let one = |i| vec![Update::Insert(flow_rule(i, i, Action::Drop))];
    plane
        .apply(ApplyCommand::new(batch(Atomicity::ContinueOnError, one(1))))
        .unwrap();
    let after_one = records(&plane);
    let mut n = 1;
    while records(&plane) != Some(0) {
        n += 1;
        assert!(n < 10, "not compacted after {n} batches");
        plane
            .apply(ApplyCommand::new(batch(Atomicity::ContinueOnError, one(n))))
            .unwrap();
    }
    assert!(after_one.is_some());
    assert!(dir.join("snapshot.bin").exists());
}

/// `replace` is held to `max_batch` like `apply`: a rule set whose
/// difference is larger is refused whole (issue 31, item 10).
#[test]
fn replace_is_bounded_by_max_batch() {
    use cfdp_control::ControlError;
    let mut plane = plane_with_max_batch(2);
    let three: Vec<Rule> = (1..=3).map(|i| flow_rule(i, i, Action::Drop)).collect();
    let e = plane.replace(three.clone(), None).unwrap_err();
    assert!(matches!(e, ControlError::BadBatch(_)), "{e:?}");
    assert_eq!(plane.stats().rules, 0);
    plane.replace(three[..2].to_vec(), None).unwrap();
    assert_eq!(plane.stats().rules, 2);
}

/// `trace` on every rule form and every mode: the rule the trace reports
/// is the one a worker applies (`matched`: `match_burst` on the published
/// copy), and it is the first of the matching rules in precedence order
/// (`cfdp_rules::matching` over the store's own rules: the reference);
/// the steps end at the table that decided.
#[test]
fn trace_reports_the_workers_rule_and_every_match_on_every_form() {
    let rules = cfdp_rules::parse_rule_list(
        r#"[
        {"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"},
        {"id": 2, "match": {"dst_prefix": "10.1.0.0/16", "proto": "udp", "port": 53}, "action": "drop"},
        {"id": 3, "match": {"flow": {"src": "192.0.2.1", "dst": "10.1.2.3", "proto": "udp", "sport": 999, "dport": 53}}, "action": "count"},
        {"id": 4, "priority": 5, "match": {"src_prefix": "192.0.2.0/24", "dst_prefix": "172.16.0.0/12", "dport": "50-60"}, "action": "drop"},
        {"id": 5, "priority": 9, "match": {"src_prefix": "0.0.0.0/0", "dst_prefix": "172.16.1.0/24"}, "action": "allow"},
        {"id": 6, "match": {"src_prefix": "198.51.100.0/24"}, "action": {"redirect": 3}},
        {"id": 7, "match": {"dst_prefix": "2001:db8::/32", "proto": "tcp"}, "action": "drop"},
        {"id": 8, "priority": 1, "match": {"src_prefix": "::/0", "dst_prefix": "2001:db8:1::/48", "proto": "tcp", "dport": "443"}, "action": "count"}
    ]"#,
    )
    .unwrap();
    let keys = [
        FlowKey::v4([192, 0, 2, 1], [10, 1, 2, 3], 17, 999, 53), // 3, then 2, 1
        FlowKey::v4([192, 0, 2, 2], [10, 1, 2, 3], 17, 999, 53), // 2, then 1
        FlowKey::v4([192, 0, 2, 2], [10, 9, 9, 9], 6, 1, 80),    // 1
        FlowKey::v4([192, 0, 2, 7], [172, 16, 1, 5], 6, 1, 55),  // 5, then 4
        FlowKey::v4([192, 0, 2, 7], [172, 17, 1, 5], 6, 1, 55),  // 4
        FlowKey::v4([198, 51, 100, 4], [172, 16, 1, 5], 6, 1, 80), // 6, then 5
        FlowKey::v4([203, 0, 113, 1], [203, 0, 113, 2], 17, 1, 2), // none
        FlowKey::new(
            "2001:db8:ffff::1".parse().unwrap(),
            "2001:db8:1::9".parse().unwrap(),
            6,
            4000,
            443,
        ), // 7, then 8
    ];
    let want_ids: [&[u32]; 8] = [
        &[3, 2, 1],
        &[2, 1],
        &[1],
        &[5, 4],
        &[4],
        &[6, 5],
        &[],
        &[7, 8],
    ];
    for mode in [Mode::Verify, Mode::FilterOnly, Mode::Exact] {
        let s = RuleStore::with_rules(
            StoreConfig {
                mode,
                ..StoreConfig::default()
            },
            Arc::new(LiveStats::new(2, 1 << 20)),
            rules.clone(),
        )
        .unwrap();
        for (k, want) in keys.iter().zip(want_ids) {
            let t = s.trace(k);
            let ids: Vec<u32> = t.matches.iter().map(|r| r.id).collect();
            assert_eq!(ids, want, "{mode:?} {k:?}: matches");
            assert_eq!(t.rule, matched(&s, k), "{mode:?} {k:?}: the workers' rule");
            assert_eq!(
                t.rule.map(|r| r.id),
                want.first().copied(),
                "{mode:?} {k:?}"
            );
            assert!(t.consistent, "{mode:?} {k:?}");
            let last = t.steps.last();
            assert_eq!(
                last.and_then(|s| s.decided_by).is_some(),
                t.rule.is_some(),
                "{mode:?} {k:?}: the last step decided: {:?}",
                t.steps
            );
            assert!(
                t.steps[..t.steps.len().saturating_sub(1)]
                    .iter()
                    .all(|s| s.decided_by.is_none()),
                "{mode:?} {k:?}: {:?}",
                t.steps
            );
        }
    }
}

/// A batch named by matches (P4Runtime's entries): inserts get ids no rule
/// has (above the highest, skipping taken ones), a modify or delete finds
/// its rule by match and priority — also one inserted earlier in the same
/// batch — and a match that names no rule is answered `not_found`,
/// aborting an all-or-nothing batch.
#[test]
fn keyed_batches_resolve_matches_to_rules() {
    use cfdp_control::api::{KeyedBatch, KeyedUpdate};
    use cfdp_control::plane::{ControlPlane, PlaneConfig};
    let acl = |src: &str, priority: u32| {
        let r = parse_rule(
            &json!({"id": 1, "priority": priority, "match": {"src_prefix": src}, "action": "drop"}),
            None,
        )
        .unwrap();
        r.matcher
    };
    let existing = vec![flow_rule(7, 1, Action::Drop), flow_rule(9, 2, Action::Drop)];
    let cfg = StoreConfig::default();
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let store = RuleStore::with_rules(cfg, stats, existing).unwrap();
    let mut plane = ControlPlane::new(store, None, PlaneConfig::default());
    let (a, b) = (acl("10.0.0.0/8", 5), acl("10.0.0.0/8", 6));
    let r = plane
        .apply_keyed(KeyedBatch {
            atomicity: Atomicity::RollbackOnError,
            updates: vec![
                KeyedUpdate::Insert(a, Action::Drop),
                KeyedUpdate::Insert(b, Action::Allow),
                KeyedUpdate::Modify(b, Action::Count),
            ],
        })
        .unwrap();
    assert!(r.report.all_ok(), "{:?}", r.report.results);
    assert_eq!(r.ids, [Some(10), Some(11), Some(11)]);
    assert_eq!(plane.store.rule(11).unwrap().action, Action::Count);
    assert_eq!(plane.store.rule_with_match(&a).unwrap().id, 10);
    // A match with no rule (another priority) aborts the batch.
    let r = plane
        .apply_keyed(KeyedBatch {
            atomicity: Atomicity::RollbackOnError,
            updates: vec![
                KeyedUpdate::Delete(a),
                KeyedUpdate::Delete(acl("10.0.0.0/8", 99)),
            ],
        })
        .unwrap();
    assert!(!r.report.applied);
    let codes: Vec<Code> = r.report.results.iter().map(|x| x.code).collect();
    assert_eq!(codes, [Code::Aborted, Code::NotFound]);
    assert_eq!(r.ids, [Some(10), None]);
    assert!(plane.store.rule(10).is_some());
    // The same as continue_on_error: the delete that found its rule stays.
    let r = plane
        .apply_keyed(KeyedBatch {
            atomicity: Atomicity::ContinueOnError,
            updates: vec![
                KeyedUpdate::Delete(acl("10.0.0.0/8", 99)),
                KeyedUpdate::Delete(a),
            ],
        })
        .unwrap();
    let codes: Vec<Code> = r.report.results.iter().map(|x| x.code).collect();
    assert_eq!(codes, [Code::NotFound, Code::Ok]);
    assert!(plane.store.rule(10).is_none());
    // An insert of a match that exists is the store's already_exists; the
    // next free id is not reused for it twice.
    let r = plane
        .apply_keyed(KeyedBatch {
            atomicity: Atomicity::RollbackOnError,
            updates: vec![KeyedUpdate::Insert(b, Action::Drop)],
        })
        .unwrap();
    assert_eq!(r.report.results[0].code, Code::AlreadyExists);
    let r = plane
        .apply_keyed(KeyedBatch {
            atomicity: Atomicity::RollbackOnError,
            updates: vec![KeyedUpdate::Insert(a, Action::Drop)],
        })
        .unwrap();
    assert!(r.report.all_ok());
    assert_eq!(r.ids, [Some(13)], "ids move on past any handed out");
}

/// Pages of the rule set, read one after another, are the rules in id
/// order whatever the batches did in between (a page continues after the
/// last id of the previous one only within a generation), and ids deleted
/// and inserted back land in their place.
#[test]
fn pages_follow_the_id_order_through_changes() {
    use cfdp_control::api::ApplyCommand;
    use cfdp_control::plane::{ControlPlane, PlaneConfig};
    let mut plane = ControlPlane::new(store(StoreConfig::default()), None, PlaneConfig::default());
    // Inserted out of id order, in two batches.
    let ids: Vec<u32> = (0..300).map(|i| (i * 7919) % 1000).collect();
    for half in ids.chunks(150) {
        let ups = half
            .iter()
            .map(|&id| Update::Insert(flow_rule(id, id, Action::Drop)))
            .collect();
        let r = plane
            .apply(ApplyCommand::new(batch(Atomicity::RollbackOnError, ups)))
            .unwrap();
        assert!(r.applied);
    }
    let read_all = |plane: &mut ControlPlane, limit: u64| {
        let mut got = Vec::new();
        for _ in 0..=ids.len() {
            let p = plane.rules(got.len() as u64, limit).unwrap();
            if p.rules.is_empty() {
                break;
            }
            got.extend(p.rules.iter().map(|r| r.rule.id));
        }
        got
    };
    let mut want = ids.clone();
    want.sort_unstable();
    assert_eq!(read_all(&mut plane, 64), want);
    // A page in the middle, then a batch, then the next page by offset:
    // the generation changed, so it counts from the start again.
    let first = plane.rules(0, 10).unwrap();
    let removed: Vec<u32> = want[..5].to_vec();
    let ups = removed.iter().map(|&id| Update::Delete(id)).collect();
    plane
        .apply(ApplyCommand::new(batch(Atomicity::RollbackOnError, ups)))
        .unwrap();
    let next = plane.rules(10, 10).unwrap();
    assert_eq!(first.rules[0].rule.id, want[0]);
    assert_eq!(
        next.rules.iter().map(|r| r.rule.id).collect::<Vec<_>>(),
        want[15..25].to_vec()
    );
    // Inserted back: in their place again.
    let ups = removed
        .iter()
        .map(|&id| Update::Insert(flow_rule(id, id, Action::Drop)))
        .collect();
    plane
        .apply(ApplyCommand::new(batch(Atomicity::RollbackOnError, ups)))
        .unwrap();
    assert_eq!(read_all(&mut plane, 7), want);
    assert_eq!(plane.rules(0, 1000).unwrap().total, want.len());
}
