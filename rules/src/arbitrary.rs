//! Random multi-field rules and packets for property tests (feature
//! `proptest`), written once beside the types they build: the
//! classifier's tests (`cfdp-engine`) and the rule store's (`cfdp-control`)
//! draw from these, each checking its answers against
//! [`crate::acl::first_match`].
//!
//! Random rules over the whole address space would almost never overlap
//! and random packets would almost never hit them, so everything is drawn
//! near a few base addresses: prefixes of a few common lengths (sometimes
//! any) over [`BASES`], so that rules share shapes and nest; port ranges
//! that overlap at small numbers and reach the top; protocols TCP, UDP,
//! none, and IGMP with port ranges too (ClassBench's firewall seeds have
//! such rules, and `rte_acl` compares the four bytes after the IP header
//! whatever the protocol); packets at the bases with their low bits
//! flipped now and then, so that they land on, near and just outside the
//! prefixes' corners; both families.

use proptest::prelude::*;

use crate::{AclMatch, AclRule, Action, FlowKey, IpPrefix, Match, PortRange, Rule};

/// The base addresses. IPv4 uses the first four bytes; IPv6 all sixteen,
/// rotated ([`address`]) so that the IPv4 bytes are not its prefix.
pub const BASES: [[u8; 16]; 3] = [
    [10, 1, 2, 3, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 7],
    [
        10, 1, 200, 9, 0x20, 0x01, 0x0d, 0xb8, 0xff, 0, 0, 0, 0, 0, 0, 1,
    ],
    [192, 168, 7, 1, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
];

/// Base `base` ([`BASES`]) as an address of the family.
pub fn address(v6: bool, base: usize) -> [u8; 16] {
    let mut a = BASES[base % BASES.len()];
    if v6 {
        a.rotate_left(4);
    }
    a
}

/// The prefix of base `base` whose length is `len_frac`/255 of the
/// family's longest.
pub fn prefix(v6: bool, base: usize, len_frac: u8) -> IpPrefix {
    let max = IpPrefix::max_len(v6);
    let len = (u16::from(len_frac) * u16::from(max) / 255) as u8;
    let a = address(v6, base);
    IpPrefix::new(v6, IpPrefix::mask(v6, &a, len), len).expect("a masked prefix is valid")
}

/// A prefix length as a fraction of the family's: mostly a few common
/// ones (so that rules share shapes and buckets), sometimes any.
fn length() -> impl Strategy<Value = u8> {
    prop_oneof![
        3 => prop::sample::select(vec![0u8, 64, 128, 192, 255]),
        1 => any::<u8>(),
    ]
}

/// Any port, one port, a range among the small ports, or a range up to
/// 65535.
pub fn ports() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        Just(PortRange::ANY),
        (0u16..100).prop_map(PortRange::exact),
        (0u16..100, 0u16..100).prop_map(|(a, b)| PortRange::new(a.min(b), a.max(b)).unwrap()),
        (1000u16..2000).prop_map(|lo| PortRange::new(lo, 65535).unwrap()),
    ]
}

/// A multi-field match: one family, source and destination prefixes
/// over the bases, a protocol or none, port ranges.
pub fn acl_match() -> impl Strategy<Value = AclMatch> {
    (
        any::<bool>(),
        (0..BASES.len(), length()),
        (0..BASES.len(), length()),
        prop_oneof![
            Just(None),
            Just(Some(6u8)),
            Just(Some(17u8)),
            Just(Some(2u8))
        ],
        ports(),
        ports(),
    )
        .prop_map(|(v6, s, d, proto, sport, dport)| {
            AclMatch::new(
                prefix(v6, s.0, s.1),
                prefix(v6, d.0, d.1),
                proto,
                sport,
                dport,
            )
            .expect("one family's prefixes make a valid match")
        })
}

/// A classifier rule with id `id`, a priority below 8 (so that
/// priorities tie often and the id decides) and the action drop (the
/// classifier's answer is the rule; its action is the store's business).
pub fn acl_rule(id: u32) -> impl Strategy<Value = AclRule> {
    (acl_match(), 0u32..8).prop_map(move |(matcher, priority)| AclRule {
        id,
        priority,
        matcher,
        action: Action::Drop,
    })
}

/// Between 1 and `max` classifier rules with ids 1, 2, ….
pub fn acl_rules(max: usize) -> impl Strategy<Value = Vec<AclRule>> {
    (1usize..max.max(2)).prop_flat_map(|n| (1..=n as u32).map(acl_rule).collect::<Vec<_>>())
}

/// A rule-store rule with id `id`: a multi-field match and priority
/// drawn as [`acl_rule`]'s, its action drop, allow or count.
pub fn rule(id: u32) -> impl Strategy<Value = Rule> {
    (
        acl_rule(id),
        prop::sample::select(vec![Action::Drop, Action::Allow, Action::Count]),
    )
        .prop_map(|(r, action)| Rule {
            id: r.id,
            matcher: Match::Acl {
                m: r.matcher,
                priority: r.priority,
            },
            action,
        })
}

/// A packet's 5-tuple: either family, source and destination at the
/// bases with their last bits flipped now and then, TCP, UDP, ICMP or
/// IGMP, ports at the ranges' ends and between them.
pub fn packet() -> impl Strategy<Value = FlowKey> {
    (
        any::<bool>(),
        0..BASES.len(),
        0..BASES.len(),
        any::<[u8; 2]>(),
        prop_oneof![Just(6u8), Just(17u8), Just(1u8), Just(2u8)],
        prop_oneof![0u16..110, 990u16..2010, Just(65535u16)],
        prop_oneof![0u16..110, 990u16..2010, Just(65535u16)],
    )
        .prop_map(|(v6, s, d, noise, proto, sport, dport)| {
            let pick = |i: usize| {
                let mut a = address(v6, i);
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    /// The generators do what the tests that use them count on: rules
    /// overlap (many packets match some rule, and some match none), both
    /// families and every protocol choice come up, and a rule's action
    /// varies.
    #[test]
    fn rules_and_packets_meet() {
        let mut runner = TestRunner::deterministic();
        let rules: Vec<AclRule> = (1..=40)
            .map(|id| acl_rule(id).new_tree(&mut runner).unwrap().current())
            .collect();
        let packets: Vec<FlowKey> = (0..2000)
            .map(|_| packet().new_tree(&mut runner).unwrap().current())
            .collect();
        let hit = packets
            .iter()
            .filter(|k| crate::acl::first_match(&rules, k).is_some())
            .count();
        assert!(hit > 200 && hit < 1900, "{hit} of 2000 packets matched");
        assert!(rules.iter().any(|r| r.matcher.v6()) && rules.iter().any(|r| !r.matcher.v6()));
        let actions: std::collections::HashSet<_> = (0..60)
            .map(|id| rule(id).new_tree(&mut runner).unwrap().current().action)
            .collect();
        assert_eq!(actions.len(), 3);
    }
}
