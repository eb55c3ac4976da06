//! Multi-field rules end to end: a generated rule set with priorities and
//! a trace of packets around it, written as a capture, replayed through
//! the workers (the pcap backend, two workers): every rule's packet count
//! is the number of packets whose first match (highest priority, then
//! lowest id) it is, as the classifier's reference scan finds on the keys
//! the frames carry.

use std::collections::HashMap;

use cfdp_control::RuleStore;
use cfdp_engine::Mode;
use cfdp_pcap::{replay, ReplayOptions};
use cfdp_rules::acl::first_match;
use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, IpPrefix, PortRange};
use cfdp_testkit::captures::write_pcap;
use cfdp_testkit::trace::{frames, wire_key};
use cfdp_testkit::SplitMix;

fn prefix(rng: &mut SplitMix, bases: &[u32]) -> IpPrefix {
    let base = bases[(rng.next() % bases.len() as u64) as usize];
    let len = [0u8, 8, 16, 20, 24, 28, 32][(rng.next() % 7) as usize];
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&base.to_be_bytes());
    IpPrefix::new(false, IpPrefix::mask(false, &a, len), len).unwrap()
}

fn ports(rng: &mut SplitMix) -> PortRange {
    match rng.next() % 4 {
        0 => PortRange::ANY,
        1 => PortRange::exact((rng.next() % 100) as u16),
        2 => PortRange::new(1024, 65535).expect("ordered"),
        _ => {
            let lo = (rng.next() % 100) as u16;
            PortRange::new(lo, lo + (rng.next() % 50) as u16).expect("ordered")
        }
    }
}

#[test]
fn replayed_counters_follow_first_match_by_priority() {
    let mut rng = SplitMix::new(30);
    let bases = [0x0a01_0203u32, 0x0a01_c809, 0xc0a8_0701, 0xac10_0001];
    let rules: Vec<AclRule> = (1..=300u32)
        .map(|id| AclRule {
            id,
            priority: (rng.next() % 40) as u32,
            matcher: AclMatch::new(
                prefix(&mut rng, &bases),
                prefix(&mut rng, &bases),
                [None, Some(6), Some(17)][(rng.next() % 3) as usize],
                ports(&mut rng),
                ports(&mut rng),
            )
            .unwrap(),
            action: Action::Count,
        })
        .collect();
    let keys: Vec<FlowKey> = (0..20_000)
        .map(|_| {
            let mut addr = || {
                let b = bases[(rng.next() % bases.len() as u64) as usize]
                    ^ (rng.next() as u32 & 0x0f0f);
                std::net::IpAddr::from(b.to_be_bytes())
            };
            let (s, d) = (addr(), addr());
            let proto = [6u8, 17, 1][(rng.next() % 3) as usize];
            FlowKey::new(
                s,
                d,
                proto,
                (rng.next() % 2000) as u16,
                (rng.next() % 120) as u16,
            )
        })
        .collect();
    let dir = cfdp_testkit::dirs::test_dir("acl-replay");
    let pcap = dir.join("trace.pcap");
    write_pcap(&pcap, &frames(&keys)).unwrap();

    let set: Vec<_> = rules.iter().map(AclRule::to_rule).collect();
    let (store, dp) = RuleStore::fixed(set, Mode::Verify, 2).unwrap();
    let opts = ReplayOptions::new(pcap, 2);
    let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
    assert_eq!(r.frames_read, keys.len() as u64);

    let mut want: HashMap<u32, u64> = HashMap::new();
    for k in &keys {
        if let Some(rule) = first_match(&rules, &wire_key(k)) {
            *want.entry(rule.id).or_default() += 1;
        }
    }
    let matched: u64 = want.values().sum();
    assert!(
        matched > 1000,
        "the trace should hit rules often: {matched}"
    );
    for rule in &rules {
        let (packets, _) = store.rule_counters(rule.id).expect("installed");
        assert_eq!(
            packets,
            want.get(&rule.id).copied().unwrap_or(0),
            "rule {}",
            rule.id
        );
    }
    assert_eq!(r.stats.totals.matched, matched);
}
