//! Multi-field rules (with priorities) through the rule store: batches of
//! inserts, deletes and modifies publish to the workers' tables without a
//! rebuild, rank below the other rule forms, and answer every packet as a
//! first-match scan of the committed rules does — in verify and
//! filter-only mode, through the store's bulk load and its batches, and
//! across a snapshot.

use std::sync::Arc;

use cfdp_control::journal::{restore, write_snapshot};
use cfdp_control::{BatchReport, RuleStore, StoreConfig};
use cfdp_engine::matcher::{match_burst, MatchCtx};
use cfdp_engine::{LiveStats, Mode, Totals};
use cfdp_rules::acl::first_match;
use cfdp_rules::arbitrary;
use cfdp_rules::{parse_rule, AclRule, Action, Atomicity, Batch, Code, FlowKey, Rule, Update};
use proptest::prelude::*;
use serde_json::json;

fn store(mode: Mode) -> RuleStore {
    let cfg = StoreConfig {
        mode,
        ..StoreConfig::default()
    };
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    RuleStore::new(cfg, stats).unwrap()
}

fn apply(s: &mut RuleStore, updates: Vec<Update>) -> BatchReport {
    let b = Batch {
        atomicity: Atomicity::ContinueOnError,
        expected_generation: None,
        updates: updates.into_iter().map(Ok).collect(),
    };
    s.apply(&b, |_, _| Ok(())).unwrap()
}

fn rule(v: serde_json::Value) -> Rule {
    parse_rule(&v, None).unwrap()
}

/// A worker's answer: the rule id its burst matching gives (its action
/// checked against the rule's).
fn matched(s: &RuleStore, k: &FlowKey) -> Option<u32> {
    let t = s.readers().handle();
    let t = t.enter().unwrap();
    let (mut counters, mut sample) = (Totals::default(), 0);
    let mut cx = MatchCtx {
        mode: s.mode(),
        counters: &mut counters,
        sample: &mut sample,
    };
    let mut out = [None; 1];
    match_burst(&mut cx, &t, std::slice::from_ref(k), &[true], &mut out);
    out[0].map(|e| {
        let r = s.rule_at_slot(e.slot).expect("a committed rule");
        assert_eq!(e.action, r.action, "rule {}'s action", r.id);
        r.id
    })
}

fn key(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> FlowKey {
    FlowKey::new(
        src.parse().unwrap(),
        dst.parse().unwrap(),
        proto,
        sport,
        dport,
    )
}

#[test]
fn multi_field_rules_rank_by_priority_below_the_other_forms() {
    for mode in [Mode::Verify, Mode::FilterOnly] {
        let mut s = store(mode);
        let r = apply(
            &mut s,
            vec![
                Update::Insert(rule(
                    json!({"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "192.168.0.0/16", "proto": "tcp", "dport": "80-90"}, "action": "drop"}),
                )),
                Update::Insert(rule(
                    json!({"id": 2, "priority": 20, "match": {"src_prefix": "10.1.0.0/16"}, "action": "count"}),
                )),
                // Same match as 2 at another priority: allowed.
                Update::Insert(rule(
                    json!({"id": 3, "priority": 5, "match": {"src_prefix": "10.1.0.0/16"}, "action": "allow"}),
                )),
                // Same match and priority as 3: refused.
                Update::Insert(rule(
                    json!({"id": 4, "priority": 5, "match": {"src_prefix": "10.1.0.0/16"}, "action": "drop"}),
                )),
                Update::Insert(rule(
                    json!({"id": 5, "match": {"dst_prefix": "192.168.7.0/24"}, "action": "drop"}),
                )),
            ],
        );
        let codes: Vec<Code> = r.results.iter().map(|r| r.code).collect();
        assert_eq!(
            codes,
            [Code::Ok, Code::Ok, Code::Ok, Code::AlreadyExists, Code::Ok],
            "{mode:?}"
        );
        // 2 beats 1 (priority 20 over 10).
        assert_eq!(
            matched(&s, &key("10.1.2.3", "192.168.1.1", 6, 1, 85)),
            Some(2)
        );
        // Only 1 matches.
        assert_eq!(
            matched(&s, &key("10.9.2.3", "192.168.1.1", 6, 1, 85)),
            Some(1)
        );
        assert_eq!(matched(&s, &key("10.9.2.3", "192.168.1.1", 6, 1, 91)), None);
        // A prefix rule (no priority) ranks above every multi-field rule.
        assert_eq!(
            matched(&s, &key("10.1.2.3", "192.168.7.1", 6, 1, 85)),
            Some(5)
        );
        // Delete 2: 1 wins at priority 10 over 3 at 5; modify 1 down to 1.
        apply(&mut s, vec![Update::Delete(2)]);
        assert_eq!(
            matched(&s, &key("10.1.2.3", "192.168.1.1", 6, 1, 85)),
            Some(1)
        );
        apply(
            &mut s,
            vec![Update::Modify(rule(
                json!({"id": 1, "priority": 1, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "192.168.0.0/16", "proto": "tcp", "dport": "80-90"}, "action": "drop"}),
            ))],
        );
        assert_eq!(
            matched(&s, &key("10.1.2.3", "192.168.1.1", 6, 1, 85)),
            Some(3)
        );
        assert_eq!(s.len(), 3);
    }
}

#[test]
fn a_set_with_multi_field_rules_survives_a_snapshot() {
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-acl-snap-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
    let rules = vec![
        rule(
            json!({"id": 1, "priority": 10, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "192.168.0.0/16", "proto": "tcp", "sport": "1024-65535", "dport": 80}, "action": "drop"}),
        ),
        rule(
            json!({"id": 2, "priority": 3, "match": {"dst_prefix": "2001:db8::/32"}, "action": {"redirect": 2}}),
        ),
        rule(
            json!({"id": 3, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "udp", "sport": 1, "dport": 2}}, "action": "count"}),
        ),
    ];
    write_snapshot(dir, 7, &rules).unwrap();
    let r = restore(dir).unwrap();
    assert_eq!((r.snapshot_generation, r.rules), (7, rules.clone()));
    // And a store loaded from them in bulk answers as one built by batches.
    let stats = Arc::new(LiveStats::new(1, 1 << 20));
    let bulk = RuleStore::with_rules(StoreConfig::default(), stats, rules.clone()).unwrap();
    let k = key("10.1.1.1", "192.168.1.1", 6, 2000, 80);
    assert_eq!(matched(&bulk, &k), Some(1));
}

/// The committed multi-field rules as the classifier's rules.
fn model(rules: &[Rule]) -> Vec<AclRule> {
    rules.iter().filter_map(AclRule::of).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random batches of inserts, modifies and deletes: after each, every
    /// packet's answer is the first match of the committed rules.
    #[test]
    fn batches_answer_like_a_first_match_scan(
        batches in proptest::collection::vec(
            proptest::collection::vec((1u32..25, any::<u8>(), 0u32..25), 1..12), 1..6),
        rules in proptest::collection::vec((1u32..25).prop_flat_map(arbitrary::rule), 30),
        packets in proptest::collection::vec(arbitrary::packet(), 20),
        filter_only in any::<bool>(),
    ) {
        let mut s = store(if filter_only { Mode::FilterOnly } else { Mode::Verify });
        for b in batches {
            let updates: Vec<Update> = b
                .iter()
                .map(|&(id, op, pick)| {
                    let mut r = rules[pick as usize % rules.len()];
                    r.id = id;
                    match op % 3 {
                        0 => Update::Insert(r),
                        1 => Update::Modify(r),
                        _ => Update::Delete(id),
                    }
                })
                .collect();
            apply(&mut s, updates);
            let live = model(&s.rules());
            for k in &packets {
                let want = first_match(&live, k).map(|r| r.id);
                prop_assert_eq!(matched(&s, k), want, "packet {:?}", k);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Random batches with the background recompile in play: a first batch
    /// of 80 rules starts a compile on its thread; the batches after it
    /// (inserts under new ids, modifies to another match, modifies of the
    /// action alone, deletes, deleted rules put back under their ids) are
    /// applied while it builds, and between them compiles land
    /// (`finish_compile`, waiting for the build or not) and new ones start.
    /// After every batch and every landing, every packet's answer (its
    /// rule, and the action, which `matched` checks) is the first match of
    /// the committed rules.
    #[test]
    fn answers_stay_exact_while_compiles_run(
        first in proptest::collection::vec((1u32..2).prop_flat_map(arbitrary::rule), 80),
        pool in proptest::collection::vec((1u32..2).prop_flat_map(arbitrary::rule), 40),
        batches in proptest::collection::vec(
            (proptest::collection::vec((0u32..80, any::<u8>(), 0usize..40), 1..40), 0u8..3),
            1..8,
        ),
        packets in proptest::collection::vec(arbitrary::packet(), 30),
    ) {
        let mut s = store(Mode::Verify);
        let check = |s: &RuleStore, at: usize| -> Result<(), TestCaseError> {
            let live = model(&s.rules());
            for k in &packets {
                let want = first_match(&live, k).map(|r| r.id);
                prop_assert_eq!(matched(s, k), want, "after step {}: {:?}", at, k);
            }
            Ok(())
        };
        // Rule `i` of the first batch has id i + 1.
        let original = |i: u32| Rule { id: i + 1, ..first[i as usize] };
        apply(&mut s, (0..80).map(|i| Update::Insert(original(i))).collect());
        prop_assert!(s.compile_stats().started >= 1, "{:?}", s.compile_stats());
        check(&s, 0)?;
        for (at, (ops, land)) in batches.iter().enumerate() {
            let updates = ops
                .iter()
                .map(|&(i, op, pick)| match op % 5 {
                    0 => Update::Insert(Rule { id: 1000 + u32::from(op) * 80 + i, ..pool[pick] }),
                    1 => Update::Modify(Rule { id: i + 1, ..pool[pick] }),
                    2 => {
                        let r = original(i);
                        let action = if r.action == Action::Drop { Action::Allow } else { Action::Drop };
                        Update::Modify(Rule { action, ..r })
                    }
                    3 => Update::Delete(i + 1),
                    _ => Update::Insert(original(i)),
                })
                .collect();
            apply(&mut s, updates);
            check(&s, at + 1)?;
            if *land > 0 && s.finish_compile(*land == 2) {
                check(&s, at + 1)?;
            }
        }
    }
}

/// The multi-field rules' background recompile: enough changed rules start
/// one on its own thread (`RuleStore::compile_stats`), batches keep
/// changing rules meanwhile, and once it lands (`finish_compile(true)`
/// waits for it: no timing involved) the rules sit in the compiled
/// layer with only the later changes live — and every answer, before,
/// during and after, is the first match of the committed rules.
#[test]
fn a_background_compile_lands_and_answers_stay_exact() {
    let mut s = store(Mode::Verify);
    let mk = |id: u32, b: u32| -> Rule {
        let src = format!("10.{}.0.0/16", b % 50);
        let dst = format!("192.168.{}.0/24", (b / 50) % 4);
        rule(json!({"id": id, "priority": 1 + b % 7, "match": {
            "src_prefix": src, "dst_prefix": dst, "proto": "tcp",
            "dport": format!("{}-{}", 1000 + b % 40, 1040 + b % 40)}, "action": "drop"}))
    };
    let packets: Vec<FlowKey> = (0..400u32)
        .map(|i| {
            let src = format!("10.{}.1.{}", i % 53, i % 200);
            let dst = format!("192.168.{}.9", i % 5);
            key(&src, &dst, 6, 4000, 1000 + (i % 90) as u16)
        })
        .collect();
    let check = |s: &RuleStore| {
        let live = model(&s.rules());
        for k in &packets {
            assert_eq!(matched(s, k), first_match(&live, k).map(|r| r.id), "{k:?}");
        }
    };
    // 300 rules in three batches: the first past RECOMPILE_AFTER starts a
    // build from the published copy.
    for chunk in 0..3u32 {
        let ups = (0..100).map(|i| Update::Insert(mk(chunk * 100 + i + 1, chunk * 100 + i)));
        let r = apply(&mut s, ups.collect());
        assert!(r.results.iter().all(|r| r.code == Code::Ok));
        check(&s);
    }
    assert!(s.compile_stats().started >= 1, "{:?}", s.compile_stats());
    // Changes while a build may be running: deletes, modifies (another
    // match and priority), inserts.
    let mut ups: Vec<Update> = (1..=30).map(Update::Delete).collect();
    ups.extend((31..=50).map(|id| Update::Modify(mk(id, id + 1000))));
    ups.extend((301..=320).map(|id| Update::Insert(mk(id, id * 3))));
    apply(&mut s, ups);
    check(&s);
    // Land whatever is in flight, and the compile it makes due, in turn
    // (two at most: the one started before the changes, and one for them).
    for _ in 0..3 {
        if !s.finish_compile(true) {
            break;
        }
        check(&s);
    }
    let stats = s.compile_stats();
    assert!(stats.landed >= 1 && stats.refused == 0, "{stats:?}");
    let layers = s.readers().handle().enter().unwrap().acl_layers();
    // Everything committed is in the compiled layer or the live one, and
    // the live one holds fewer rules than a recompile waits for.
    assert_eq!(
        layers.compiled - layers.dead + layers.live_v4 + layers.live_v6,
        290
    );
    assert!(
        layers.live_v4 + layers.live_v6 + layers.dead + layers.patched
            < cfdp_control::store::RECOMPILE_AFTER,
        "{layers:?}"
    );
    check(&s);
}

/// A set loaded with its compile left for later (what `cfdp run` does)
/// answers exactly from the live layer at once, and the background compile
/// started by the idle loop's `finish_compile` moves it into the compiled
/// layer with the same answers.
#[test]
fn a_set_loaded_before_its_compile_answers_the_same_before_and_after() {
    let rules: Vec<Rule> = (0..200u32)
        .map(|i| {
            rule(json!({"id": i + 1, "priority": i % 7,
                "match": {"src_prefix": format!("10.{}.0.0/16", i % 50),
                          "dst_prefix": format!("192.168.{}.0/24", i % 40),
                          "proto": "tcp", "dport": format!("{}-{}", 1000 + i, 2000 + i)},
                "action": "drop"}))
        })
        .collect();
    let cfg = StoreConfig::default();
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let mut s = RuleStore::with_rules_compiled_later(cfg, stats, rules.clone()).unwrap();
    let layers = |s: &RuleStore| s.readers().handle().enter().unwrap().acl_layers();
    assert_eq!(layers(&s).compiled, 0, "not compiled at load");
    let keys: Vec<FlowKey> = (0..400u32)
        .map(|i| {
            FlowKey::v4(
                [10, (i % 50) as u8, 1, 2],
                [192, 168, (i % 40) as u8, 9],
                6,
                40000,
                (1000 + i * 3) as u16,
            )
        })
        .collect();
    let acl: Vec<AclRule> = rules.iter().filter_map(AclRule::of).collect();
    let want: Vec<Option<u32>> = keys
        .iter()
        .map(|k| first_match(&acl, k).map(|r| r.id))
        .collect();
    let got: Vec<Option<u32>> = keys.iter().map(|k| matched(&s, k)).collect();
    assert_eq!(got, want, "from the live layer");
    assert!(
        !s.finish_compile(false),
        "nothing to land yet: it starts one"
    );
    assert!(s.finish_compile(true), "the started compile lands");
    assert_eq!(layers(&s).compiled, rules.len());
    let got: Vec<Option<u32>> = keys.iter().map(|k| matched(&s, k)).collect();
    assert_eq!(got, want, "from the compiled layer");
}

/// A set whose tree is over the compiled layer's budget as a whole but
/// worth one in part (`cfdp_engine::acl` compiles it in part): nine rule
/// shapes a packet would probe one after another, which a tree takes, and
/// rules crossing each other (one exact source each, or one exact
/// destination each), which a tree cannot hold together; one kind of them
/// stays live. Those rules are counted as left by the compile, not as
/// changes: a few changes start no recompile, enough changes do (the set
/// was not refused), and every answer is the committed rules' first match.
#[test]
fn rules_a_partial_compile_left_live_are_not_changes() {
    let mut rules = Vec::new();
    let mut id = 0u32;
    let mut add = |src: String, dst: String, priority: u32, dport: u32| {
        id += 1;
        rules.push(rule(json!({"id": id, "priority": priority, "match": {
            "src_prefix": src, "dst_prefix": dst, "proto": "tcp",
            "dport": dport.to_string()}, "action": "drop"})));
    };
    let p = |a: u32, len: u32| {
        let masked = a & u32::MAX.checked_shl(32 - len).unwrap_or(0);
        format!("{}/{len}", std::net::Ipv4Addr::from(masked))
    };
    for k in 0..200u32 {
        for (u, (s, d)) in [9, 18, 27]
            .into_iter()
            .flat_map(|s| [9, 18, 27].map(|d| (s, d)))
            .enumerate()
        {
            let (src, dst) = (
                0x0a00_0000 + (k << 19) + (k << 8),
                0x1400_0000 + (k << 19) + (k << 8),
            );
            add(p(src, s), p(dst, d), 10 + k * 9 + u as u32, k);
        }
    }
    for i in 0..1200u32 {
        add(p(0x1e00_0000 + i * 7, 32), p(0, 0), 1, 80);
        add(p(0, 0), p(0x2800_0000 + i * 7, 32), 1, 80);
    }
    let n = rules.len();
    let cfg = StoreConfig::default();
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let mut s = RuleStore::with_rules_compiled_later(cfg, stats, rules).unwrap();
    let layers = |s: &RuleStore| s.readers().handle().enter().unwrap().acl_layers();
    assert!(
        !s.finish_compile(false),
        "nothing to land yet: it starts one"
    );
    assert!(s.finish_compile(true), "the started compile lands");
    let l = layers(&s);
    assert_eq!(
        (l.compiled, l.live_v4, l.left),
        (n - 1200, 1200, 1200),
        "{l:?}"
    );
    assert_eq!(s.compile_stats().started, 1);
    let keys: Vec<FlowKey> = (0..600u32)
        .map(|i| {
            let k = i % 200;
            let (src, dst) = (
                0x0a00_0000 + (k << 19) + (k << 8),
                0x1400_0000 + (k << 19) + (k << 8),
            );
            match i % 3 {
                0 => FlowKey::v4(src.to_be_bytes(), dst.to_be_bytes(), 6, 1, k as u16),
                1 => FlowKey::v4((0x1e00_0000 + i * 7).to_be_bytes(), [1, 2, 3, 4], 6, 1, 80),
                _ => FlowKey::v4([1, 2, 3, 4], (0x2800_0000 + i * 7).to_be_bytes(), 6, 1, 80),
            }
        })
        .collect();
    let check = |s: &RuleStore| {
        let live = model(&s.rules());
        for k in &keys {
            assert_eq!(matched(s, k), first_match(&live, k).map(|r| r.id), "{k:?}");
        }
    };
    check(&s);
    // A few changes: no recompile.
    let ups = (1..=10).map(Update::Delete).collect();
    apply(&mut s, ups);
    assert!(!s.finish_compile(false));
    assert_eq!(s.compile_stats().started, 1, "{:?}", layers(&s));
    check(&s);
    // Past the recompile's threshold (1/32 of the rules): one starts.
    let ups = (11..=11 + n as u32 / 32).map(Update::Delete).collect();
    apply(&mut s, ups);
    s.finish_compile(false);
    assert_eq!(s.compile_stats().started, 2, "{:?}", layers(&s));
    assert!(s.finish_compile(true));
    check(&s);
}
