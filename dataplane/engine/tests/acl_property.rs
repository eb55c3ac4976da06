//! The tuple-space classifier answers every packet as a plain first-match
//! scan of the same rules does (highest priority, then lowest id): random
//! rule sets with overlapping prefixes, port ranges, protocols and both
//! address families, random packets aimed at the rules' corners, and
//! random deletes and re-inserts in between.

use cfdp_engine::acl::AclClassifier;
use cfdp_rules::acl::first_match;
use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, IpPrefix, PortRange};
use proptest::prelude::*;

/// A few base addresses, so that prefixes overlap often.
const BASES: [[u8; 16]; 3] = [
    [10, 1, 2, 3, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 7],
    [
        10, 1, 200, 9, 0x20, 0x01, 0x0d, 0xb8, 0xff, 0, 0, 0, 0, 0, 0, 1,
    ],
    [192, 168, 7, 1, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
];

fn v6_addr(b: &[u8; 16]) -> [u8; 16] {
    // IPv6 uses the whole 16 bytes; rotate so the v4 bytes are not a prefix.
    let mut a = *b;
    a.rotate_left(4);
    a
}

fn prefix(v6: bool, base: usize, len_frac: u8) -> IpPrefix {
    let max = IpPrefix::max_len(v6);
    let len = (u16::from(len_frac) * u16::from(max) / 255) as u8;
    let a = if v6 {
        v6_addr(&BASES[base])
    } else {
        BASES[base]
    };
    IpPrefix {
        v6,
        addr: IpPrefix::mask(v6, &a, len),
        len,
    }
}

fn ports() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        Just(PortRange::ANY),
        (0u16..100).prop_map(PortRange::exact),
        (0u16..100, 0u16..100).prop_map(|(a, b)| PortRange::new(a.min(b), a.max(b)).unwrap()),
        (1000u16..2000).prop_map(|lo| PortRange::new(lo, 65535).unwrap()),
    ]
}

/// A prefix length as a fraction of the family's: mostly a few common
/// lengths (so that rules share shapes and buckets), sometimes any.
fn length() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(vec![0u8, 64, 128, 192, 255]),
        1 => any::<u8>(),
    ]
}

fn rule(id: u32) -> impl Strategy<Value = AclRule> {
    (
        any::<bool>(),
        (0..3usize, length()),
        (0..3usize, length()),
        prop_oneof![Just(None), Just(Some(6u8)), Just(Some(17u8))],
        ports(),
        ports(),
        0u32..8,
    )
        .prop_map(move |(v6, s, d, proto, sport, dport, priority)| AclRule {
            id,
            priority,
            matcher: AclMatch {
                src: prefix(v6, s.0, s.1),
                dst: prefix(v6, d.0, d.1),
                proto,
                sport,
                dport,
            },
            action: Action::Drop,
        })
}

fn rules() -> impl Strategy<Value = Vec<AclRule>> {
    (1usize..80).prop_flat_map(|n| (1..=n as u32).map(rule).collect::<Vec<_>>())
}

fn packet() -> impl Strategy<Value = FlowKey> {
    (
        any::<bool>(),
        0..3usize,
        0..3usize,
        any::<[u8; 2]>(),
        prop_oneof![Just(6u8), Just(17u8), Just(1u8)],
        prop_oneof![0u16..110, 990u16..2010, Just(65535u16)],
        prop_oneof![0u16..110, 990u16..2010, Just(65535u16)],
    )
        .prop_map(|(v6, s, d, noise, proto, sport, dport)| {
            let pick = |i: usize| {
                let mut a = if v6 { v6_addr(&BASES[i]) } else { BASES[i] };
                // Flip low bits now and then: packets near, not only at,
                // the prefixes' corners.
                let last = if v6 { 15 } else { 3 };
                a[last] ^= noise[0] & 0x0f;
                a[last - 1] ^= noise[1] & 0x03;
                a
            };
            FlowKey {
                v6,
                src: pick(s),
                dst: pick(d),
                proto,
                sport,
                dport,
            }
        })
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
            for k in &packets {
                let want = first_match(live, k).map(|r| r.id);
                let got = c.classify(k).map(|r| r.id);
                prop_assert_eq!(got, want, "packet {:?}", k);
            }
            Ok(())
        };
        check(&c, &rules)?;
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
