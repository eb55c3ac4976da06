//! The tuple-space classifier answers every packet as a plain first-match
//! scan of the same rules does (highest priority, then lowest id): random
//! rule sets with overlapping prefixes, port ranges, protocols and both
//! address families, random packets aimed at the rules' corners
//! (`cfdp_rules::arbitrary`, shared with the rule store's tests), and
//! random deletes and re-inserts in between.

use cfdp_engine::acl::compiled::Compiled;
use cfdp_engine::acl::{AclClassifier, Kernel};
use cfdp_rules::acl::first_match;
use cfdp_rules::arbitrary::{self, packet};
use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, IpPrefix, PortRange};
use proptest::prelude::*;

fn rules() -> impl Strategy<Value = Vec<AclRule>> {
    arbitrary::acl_rules(80)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn answers_like_a_first_match_scan(
        rules in rules(),
        packets in proptest::collection::vec(packet(), 1..60),
        deletes in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let mut c = AclClassifier::with_rules(&rules).unwrap();
        let check = |c: &AclClassifier, live: &[AclRule]| {
            // One packet at a time, and the whole list as bursts (more
            // than one chunk when there are over 32).
            let mut burst = vec![None; packets.len()];
            c.classify_burst(&packets, &mut burst);
            for (k, b) in packets.iter().zip(&burst) {
                let want = first_match(live, k).map(|r| r.id);
                let got = c.classify(k).map(|r| r.id);
                prop_assert_eq!(got, want, "packet {:?}", k);
                prop_assert_eq!(*b, want, "packet {:?} in a burst", k);
            }
            Ok(())
        };
        check(&c, &rules)?;
        // The layers alone, on a set the short path would take.
        check(&AclClassifier::with_rules(&rules).unwrap().without_short_path(), &rules)?;
        // Inserted one by one in the generated order (not best first).
        let mut one_by_one = AclClassifier::new();
        for r in &rules {
            one_by_one.insert(*r).unwrap();
        }
        check(&one_by_one, &rules)?;
        // Deletes, then the same rules back: answers follow every step.
        let mut live = rules.clone();
        let mut gone = Vec::new();
        for d in &deletes {
            if live.is_empty() {
                break;
            }
            let r = live.remove(d.index(live.len()));
            c.remove(r.id).unwrap();
            gone.push(r);
            check(&c, &live)?;
        }
        for r in gone {
            c.insert(r).unwrap();
            live.push(r);
        }
        check(&c, &live)?;
    }
}

/// One step of the layered churn test.
#[derive(Clone, Debug)]
enum Step {
    Delete(prop::sample::Index),
    /// Replace a rule with another (same id): priority, match or both.
    Modify(prop::sample::Index, AclRule),
    Insert(AclRule),
    /// The same rule (id, match, priority) with another action: a modify
    /// a compiled rule may take in place.
    Reaction(prop::sample::Index, u16),
    /// A rule deleted earlier put back as it was (same id).
    Restore(prop::sample::Index, u16),
    /// A rule deleted and put back under a new id (same match and
    /// priority): a compiled rule's place it may take over.
    Renew(prop::sample::Index, u16),
    /// A compile on the spot.
    Compile,
    /// A compile whose input is taken now and installed after the next
    /// steps (the background compile: the rules change meanwhile).
    CompileLater,
    Install,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(
        prop_oneof![
            3 => any::<prop::sample::Index>().prop_map(Step::Delete),
            3 => (any::<prop::sample::Index>(), arbitrary::acl_rule(0)).prop_map(|(i, r)| Step::Modify(i, r)),
            3 => arbitrary::acl_rule(0).prop_map(Step::Insert),
            2 => (any::<prop::sample::Index>(), 0u16..3).prop_map(|(i, a)| Step::Reaction(i, a)),
            2 => (any::<prop::sample::Index>(), 0u16..3).prop_map(|(i, a)| Step::Restore(i, a)),
            2 => (any::<prop::sample::Index>(), 0u16..3).prop_map(|(i, a)| Step::Renew(i, a)),
            1 => Just(Step::Compile),
            1 => Just(Step::CompileLater),
            1 => Just(Step::Install),
        ],
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The compiled layer with the live tuple space in front of it answers
    /// every packet as a first-match scan of the rules at that step,
    /// through deletes, modifies (new ids among them; priority ties included: priorities are
    /// 0..8), inserts, compiles, and compiles installed after the rules
    /// changed under them.
    #[test]
    fn compiled_and_live_layers_answer_like_a_first_match_scan(
        rules in rules(),
        packets in proptest::collection::vec(packet(), 1..60),
        steps in steps(),
        kernel in prop::sample::select(Kernel::available()),
    ) {
        let check = |c: &AclClassifier, live: &[AclRule], at: usize| {
            let mut burst = vec![None; packets.len()];
            c.classify_burst(&packets, &mut burst);
            let mut actions = vec![None; packets.len()];
            c.classify_burst_action(&packets, &mut actions);
            for ((k, b), a) in packets.iter().zip(&burst).zip(&actions) {
                let want = first_match(live, k);
                let id = want.map(|r| r.id);
                prop_assert_eq!(c.classify(k).map(|r| r.id), id, "step {}: {:?}", at, k);
                prop_assert_eq!(*b, id, "step {}: {:?} in a burst", at, k);
                // The answer's action, from the layer that holds the rule.
                let action = want.map(|r| r.action);
                prop_assert_eq!(c.classify_action(k).map(|a| a.0), action, "step {}: {:?}", at, k);
                prop_assert_eq!(a.map(|a| a.0), action, "step {}: {:?} in a burst", at, k);
            }
            Ok(())
        };
        let action = |a: u16| match a {
            0 => Action::Drop,
            1 => Action::Allow,
            p => Action::Redirect(p),
        };
        let mut gone: Vec<AclRule> = Vec::new();
        // Each case runs one of the leaf kernel's versions this CPU has.
        let mut c = AclClassifier::with_rules(&rules).unwrap().with_kernel(kernel);
        c.compile().unwrap();
        let mut live = rules.clone();
        let mut next_id = rules.len() as u32 + 1;
        let mut pending = None;
        check(&c, &live, 0)?;
        for (at, step) in steps.iter().enumerate() {
            match step {
                Step::Delete(i) if !live.is_empty() => {
                    let r = live.remove(i.index(live.len()));
                    c.remove(r.id).unwrap();
                    gone.push(r);
                }
                Step::Reaction(i, a) if !live.is_empty() => {
                    let i = i.index(live.len());
                    let r = AclRule { action: action(*a), ..live[i] };
                    c.remove(r.id).unwrap();
                    c.insert(r).unwrap();
                    live[i] = r;
                }
                Step::Restore(i, a) if !gone.is_empty() => {
                    let r = gone.swap_remove(i.index(gone.len()));
                    let r = AclRule { action: action(*a), ..r };
                    c.insert(r).unwrap();
                    live.push(r);
                }
                Step::Renew(i, a) if !live.is_empty() => {
                    let i = i.index(live.len());
                    c.remove(live[i].id).unwrap();
                    let r = AclRule { id: next_id, action: action(*a), ..live[i] };
                    next_id += 1;
                    c.insert(r).unwrap();
                    live[i] = r;
                }
                Step::Modify(i, new) if !live.is_empty() => {
                    let i = i.index(live.len());
                    let r = AclRule { id: live[i].id, ..*new };
                    c.remove(r.id).unwrap();
                    c.insert(r).unwrap();
                    live[i] = r;
                }
                Step::Insert(new) => {
                    let r = AclRule { id: next_id, ..*new };
                    next_id += 1;
                    c.insert(r).unwrap();
                    live.push(r);
                }
                Step::Compile => c.compile().unwrap(),
                Step::CompileLater => pending = Some(c.compile_input()),
                Step::Install => {
                    if let Some(input) = pending.take() {
                        let mut compiled = Compiled::build(&input).unwrap();
                        compiled.set_kernel(kernel);
                        c.install(std::sync::Arc::new(compiled));
                    }
                }
                _ => {}
            }
            check(&c, &live, at + 1)?;
            prop_assert_eq!(c.len(), live.len());
            // The layers' counts, kept incrementally, agree with the rules.
            let l = c.layers();
            let v6 = live.iter().filter(|r| r.matcher.v6()).count();
            prop_assert_eq!(l.v6, v6);
            prop_assert_eq!(l.compiled - l.dead + l.live_v4 + l.live_v6, live.len());
            prop_assert!(l.live_v6 <= v6);
        }
    }
}

/// A deterministic stream of numbers (xorshift), for the churn test.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Heavy churn on one table: many buckets (distinct /32 sources) and one
/// long bucket (overlapping rules differing only in ports), deleted in a random order
/// and put back, so that index slots are vacated and refilled, runs move
/// to the arena's end and the arena is compacted; every rule stays found
/// at every step.
#[test]
#[allow(clippy::too_many_lines)] // a scenario test
fn churn_keeps_every_rule_found() {
    let mk = |id: u32, src: [u8; 4], dport: (u16, u16)| AclRule {
        id,
        priority: 1000 - id,
        matcher: AclMatch::new(
            IpPrefix::new(
                false,
                [
                    src[0], src[1], src[2], src[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                ],
                32,
            )
            .unwrap(),
            IpPrefix::new(
                false,
                [192, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                24,
            )
            .unwrap(),
            Some(17),
            PortRange::ANY,
            PortRange::new(dport.0, dport.1).unwrap(),
        )
        .unwrap(),
        action: Action::Drop,
    };
    let mut rules: Vec<AclRule> = (0..300u32)
        .map(|i| mk(i + 1, [10, 0, (i >> 8) as u8, i as u8], (53, 53)))
        .collect();
    // The long bucket's rules overlap: a packet to port 1000 + i matches
    // every rule j ≤ i, and the best live one must win.
    rules.extend((0..300u32).map(|i| mk(301 + i, [10, 9, 9, 9], (1000 + i as u16, 2000))));
    let key = |r: &AclRule| FlowKey {
        v6: false,
        src: *r.matcher.src().addr(),
        dst: [192, 0, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        proto: 17,
        sport: 4000,
        dport: r.matcher.dport().lo(),
    };
    let keys: Vec<FlowKey> = rules.iter().map(key).collect();
    let mut c = AclClassifier::new();
    let mut live: Vec<AclRule> = Vec::new();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let check = |c: &AclClassifier, live: &[AclRule]| {
        let mut burst = vec![None; keys.len()];
        c.classify_burst(&keys, &mut burst);
        for (k, b) in keys.iter().zip(&burst) {
            let want = first_match(live, k).map(|r| r.id);
            assert_eq!(c.classify(k).map(|r| r.id), want, "{k:?}");
            assert_eq!(*b, want, "{k:?} in a burst");
        }
    };
    for round in 0..3 {
        let mut order = rules.clone();
        for i in (1..order.len()).rev() {
            order.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
        }
        for (n, r) in order.iter().enumerate() {
            c.insert(*r).unwrap();
            live.push(*r);
            if n % 97 == 0 {
                check(&c, &live);
            }
        }
        check(&c, &live);
        for i in (1..order.len()).rev() {
            order.swap(i, (xorshift(&mut x) % (i as u64 + 1)) as usize);
        }
        // Delete all but a few (the last round: all), checking on the way.
        let keep = if round == 2 { 0 } else { 5 };
        for (n, r) in order.iter().enumerate().skip(keep) {
            c.remove(r.id).unwrap();
            live.retain(|l| l.id != r.id);
            if n % 89 == 0 {
                check(&c, &live);
            }
        }
        check(&c, &live);
        for r in &order[..keep] {
            c.remove(r.id).unwrap();
        }
        live.clear();
    }
    assert_eq!((c.len(), c.tables()), (0, 0));
}

/// A long bucket: rules that share their prefixes (one bucket of one
/// table) and differ in protocol and ports, more of them than a bucket
/// scans ([`cfdp_engine::acl::LONG_BUCKET`]: it keeps a small tree, with
/// rules the tree's overlay refuses pending beside it). Inserted one at a
/// time in random order, then some deleted and put back: every packet
/// gets what a first-match scan gives, at every step.
fn long_bucket() -> impl Strategy<Value = Vec<AclRule>> {
    let bound = prop_oneof![
        Just(0u16),
        Just(53),
        Just(80),
        Just(1024),
        Just(65535),
        any::<u16>()
    ];
    let range =
        (bound.clone(), bound).prop_map(|(a, b)| PortRange::new(a.min(b), a.max(b)).unwrap());
    let proto = prop_oneof![Just(None), Just(Some(6u8)), Just(Some(17u8))];
    proptest::collection::vec((0u32..40, proto, range.clone(), range), 33..140).prop_map(|v| {
        let prefix = |a: [u8; 4], len| {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a);
            IpPrefix::new(false, b, len).unwrap()
        };
        v.into_iter()
            .zip(1u32..)
            .map(|((priority, proto, sport, dport), id)| AclRule {
                id,
                priority,
                matcher: AclMatch::new(
                    prefix([10, 9, 0, 0], 16),
                    prefix([192, 0, 2, 0], 24),
                    proto,
                    sport,
                    dport,
                )
                .unwrap(),
                action: Action::Drop,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn a_long_bucket_answers_like_a_first_match_scan(
        rules in long_bucket(),
        ports in proptest::collection::vec((any::<u16>(), any::<u16>(), 0u8..3), 1..80),
        deletes in proptest::collection::vec(any::<prop::sample::Index>(), 0..60),
    ) {
        let packets: Vec<FlowKey> = ports
            .iter()
            .flat_map(|&(s, d, p)| {
                let proto = [6, 17, 1][usize::from(p)];
                // Each port as drawn and at the rules' edges.
                [(s, d), (53, 80), (1024, 65535), (0, d)].map(|(sp, dp)| {
                    FlowKey::new([10, 9, 7, 7].into(), [192, 0, 2, 9].into(), proto, sp, dp)
                })
            })
            .collect();
        let check = |c: &AclClassifier, live: &[AclRule]| {
            for k in &packets {
                let want = first_match(live, k).map(|r| r.id);
                prop_assert_eq!(c.classify(k).map(|r| r.id), want, "packet {:?}", k);
            }
            Ok(())
        };
        let mut c = AclClassifier::new().without_short_path();
        for r in &rules {
            c.insert(*r).unwrap();
        }
        prop_assert_eq!(c.tables(), 1);
        check(&c, &rules)?;
        let mut live = rules.clone();
        let mut gone = Vec::new();
        for d in &deletes {
            let r = live.remove(d.index(live.len()));
            c.remove(r.id).unwrap();
            gone.push(r);
            if live.is_empty() {
                break;
            }
        }
        check(&c, &live)?;
        for r in gone {
            c.insert(r).unwrap();
            live.push(r);
        }
        check(&c, &live)?;
    }
}
