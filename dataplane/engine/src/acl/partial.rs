//! A family whose whole tree is over the compiled layer's budget, compiled
//! in part: the rules fall into *units* by their prefix lengths, rounded
//! as a new tuple-space table rounds them ([`ROUND`]), and the tree takes
//! the largest set of whole units that fits the budget; the rest stays in
//! the tuple space, in front of the tree, as a churned set's new rules do.
//!
//! A unit is the natural piece: the rules that cost a tree most are wide on
//! one field and cut finely on another (a firewall's "any source, this
//! port" beside "this source, any port"), and such rules differ in shape.
//! Units are taken cheapest first (leaf entries a rule, each unit built
//! alone), and a unit that does not fit beside those taken is skipped.
//!
//! A partial tree is not always worth its walk: a packet then pays the walk
//! *and* the tuple space's probes for the rest. Measured on the ClassBench
//! seeds (a walk cost 64–116 ns here, a table probe 20–25 ns, so a walk is
//! worth about three probes), the tree won only where it took more than
//! [`GAIN`] probes a packet off the tuple space (acl2: 5 probes a packet
//! before, 1.35× with its partial tree; fw1, fw3, fw5, ipc2: 1.7–2.7
//! probes before, 0.55–0.62× with one). So the tree is kept only when, on
//! one packet a rule (the rule's lowest corner, up to [`SAMPLES`] rules),
//! the tuple space probes more than [`GAIN`] tables a packet fewer with it
//! than without it. Kept so, acl2's tree (180 of 9,443 rules left out)
//! ran 1.34× the tuple space batched and 1.04× one packet at a time;
//! ipc1_100k's (7,291 of 99,273 left out, a 20-level tree) 1.37× batched
//! but 0.73× one packet at a time — a walk a packet at a time cannot
//! overlap its loads with other packets', and the guard weighs the
//! batched walk (alternated runs of `classbench --classifier-only`, 3
//! pairs each). IPv4 only (see [`compile`]).

use std::collections::BTreeMap;

use cfdp_rules::RuleId;
use hashbrown::HashSet;

use super::bucket::Entry;
use super::compiled::{packet_fields, CompileError, Compiled, Input, Layer, Overlay};
use super::tuple::{Family, Probes, Tuple, MAX_TABLES, ROUND};
use super::word::{Packet, Word};

/// Table probes a packet a partial tree must save to be kept (see the
/// module docs).
pub const GAIN: u64 = 3;
/// Rules whose sample packets weigh a partial tree, at most (evenly
/// spread over the family).
pub const SAMPLES: usize = 4096;

/// The compiled layer of `rules`: every family's whole tree, or where the
/// IPv4 one is over the budget, the tree of its part (see the module
/// docs). IPv6 gets no partial tree: its walk has no root table and
/// compares 128-bit words, and on acl2 moved under one /32 (`classbench
/// --v6 32`) a partial tree that took 4.3 probes a packet off the tuple
/// space ran at 0.89× the tuple space alone batched and 0.6× one packet
/// at a time.
pub(super) fn compile(rules: &[Input]) -> Result<Compiled, CompileError> {
    Compiled::build_with(rules, part::<u32, { <u32 as Word>::CUT_AT.len() }>, |_| {
        None
    })
}

/// The tree of the part of `rules` worth compiling, and how many rules it
/// leaves out; `None` when no part is.
fn part<W: Word, const N: usize>(rules: &[&Input]) -> Option<(Layer<W>, usize)> {
    let samples = samples::<W>(rules);
    let enough = GAIN * samples.len() as u64;
    let before = probes::<W, N>(rules, None, &samples);
    // A tuple space that probes no more than a tree must save: no part can
    // pay, and none is built (the firewall sets: the units' builds took a
    // second for 10k rules).
    if before <= enough {
        return None;
    }
    let (layer, taken) = cheapest_units::<W>(rules)?;
    let rest: Vec<&Input> = rules
        .iter()
        .copied()
        .filter(|i| !taken.contains(&i.rule.id))
        .collect();
    let after = probes::<W, N>(&rest, Some(&layer), &samples);
    (before.saturating_sub(after) > enough).then_some((layer, rest.len()))
}

/// The tree of the most units that fit together, taken cheapest first,
/// and the ids it holds.
fn cheapest_units<W: Word>(rules: &[&Input]) -> Option<(Layer<W>, HashSet<RuleId>)> {
    let mut units: BTreeMap<(u8, u8), Vec<&Input>> = BTreeMap::new();
    for &i in rules {
        let t = Tuple::of(&i.rule);
        units
            .entry((t.src_len / ROUND, t.dst_len / ROUND))
            .or_default()
            .push(i);
    }
    // Each unit alone: its leaf entries a rule (a unit over the budget by
    // itself is never taken).
    let mut costed: Vec<(usize, Vec<&Input>)> = units
        .into_values()
        .filter_map(|u| Some((Layer::<W>::build(&u).ok()?.shape().2, u)))
        .collect();
    costed.sort_by(|(ea, a), (eb, b)| (ea * b.len()).cmp(&(eb * a.len())));
    let mut taken: Vec<&Input> = Vec::new();
    let mut tree = None;
    for (_, unit) in costed.into_iter().take(MAX_TABLES) {
        let mut with = taken.clone();
        with.extend(unit);
        if let Ok(l) = Layer::build(&with) {
            taken = with;
            tree = Some(l);
        }
    }
    let ids = taken.iter().map(|i| i.rule.id).collect();
    Some((tree?, ids))
}

/// One packet a rule, for up to [`SAMPLES`] rules: the lowest point of
/// each of its fields.
fn samples<W: Word>(rules: &[&Input]) -> Vec<Packet<W>> {
    let step = rules.len().div_ceil(SAMPLES).max(1);
    rules
        .iter()
        .step_by(step)
        .map(|i| {
            let m = &i.rule.matcher;
            Packet {
                src: W::of(m.src().addr()),
                dst: W::of(m.dst().addr()),
                proto: u16::from(m.proto().unwrap_or(0)),
                sport: m.sport().lo(),
                dport: m.dport().lo(),
            }
        })
        .collect()
}

/// Tables the tuple space probes for `samples` when it holds `live` and
/// `tree` is in front of it, as a classifier would hold them after
/// installing the tree (the live rules inserted best first).
fn probes<W: Word, const N: usize>(
    live: &[&Input],
    tree: Option<&Layer<W>>,
    samples: &[Packet<W>],
) -> u64 {
    let mut order = live.to_vec();
    order.sort_by(|a, b| {
        b.rule
            .priority
            .cmp(&a.rule.priority)
            .then(a.rule.id.cmp(&b.rule.id))
    });
    let mut family = Family::<W, N>::default();
    for i in order {
        family.insert(Tuple::of(&i.rule), Entry::new(&i.rule, i.slot, i.tag));
    }
    let o = tree.map_or_else(Overlay::default, Layer::overlay);
    let mut p = Probes::default();
    for s in samples {
        let hit = tree.and_then(|l| l.lookup(&packet_fields(s), &o));
        family.merge(s, hit, &mut p);
    }
    p.tables
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use cfdp_rules::acl::first_match;
    use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, PortRange};

    use super::super::compiled::CompileError;
    use super::super::AclClassifier;

    fn prefix(addr: u32, len: u8) -> String {
        let masked = addr & u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        format!("{}/{len}", Ipv4Addr::from(masked))
    }

    fn rule(id: u32, priority: u32, src: String, dst: String, dport: u16) -> AclRule {
        AclRule {
            id,
            priority,
            matcher: AclMatch::new(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                Some(6),
                PortRange::ANY,
                PortRange::exact(dport),
            )
            .unwrap(),
            action: Action::Drop,
        }
    }

    /// The tree-hard part: `n` rules on one exact source each (any
    /// destination) and `n` on one exact destination each (any source),
    /// below every other rule: a tree copies each of one kind into every
    /// leaf of the other (n² entries), the tuple space holds them in two
    /// tables.
    fn crossed(n: u32, first_id: u32) -> Vec<AclRule> {
        (0..n)
            .flat_map(|i| {
                let id = first_id + 2 * i;
                [
                    rule(id, 1, prefix(0x1e00_0000 + i * 7, 32), prefix(0, 0), 80),
                    rule(id + 1, 1, prefix(0, 0), prefix(0x2800_0000 + i * 7, 32), 80),
                ]
            })
            .collect()
    }

    /// Rules of nine shapes (prefix lengths 9, 18 and 27 on each address,
    /// too far apart for the tuple space to merge), every shape with a rule
    /// in each of `per` address windows and priorities interleaved across
    /// the shapes: a packet probes about every table before its winner is
    /// known, a tree walks to it.
    fn many_shapes(per: u32) -> Vec<AclRule> {
        let mut v = Vec::new();
        for k in 0..per {
            for (u, (s, d)) in [9u8, 18, 27]
                .into_iter()
                .flat_map(|s| [9u8, 18, 27].map(|d| (s, d)))
                .enumerate()
            {
                let id = 1 + k * 9 + u as u32;
                let src = 0x0a00_0000 + (k << 19) + (k << 8);
                let dst = 0x1400_0000 + (k << 19) + (k << 8);
                v.push(rule(id, 10 + id, prefix(src, s), prefix(dst, d), k as u16));
            }
        }
        v
    }

    /// Each rule's lowest corner and a point inside it, and packets between
    /// the rules.
    fn keys(rules: &[AclRule]) -> Vec<FlowKey> {
        let mut v = Vec::new();
        for r in rules {
            let m = &r.matcher;
            let (s, d) = (m.src(), m.dst());
            let base = |a: &[u8; 16]| Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            let (sb, db) = (base(s.addr()), base(d.addr()));
            v.push(FlowKey::new(sb.into(), db.into(), 6, 1, m.dport().lo()));
            let inside = |a: Ipv4Addr, len: u8| {
                Ipv4Addr::from(u32::from(a) | (!0u32 >> len.min(31)) & 0x0101_0101)
            };
            v.push(FlowKey::new(
                inside(sb, s.len()).into(),
                inside(db, d.len()).into(),
                6,
                9,
                m.dport().lo(),
            ));
            v.push(FlowKey::new(sb.into(), db.into(), 17, 1, m.dport().lo()));
        }
        v
    }

    fn answers_as_first_match(c: &AclClassifier, rules: &[AclRule]) {
        for k in keys(rules) {
            assert_eq!(
                c.classify(&k).map(|r| r.id),
                first_match(rules, &k).map(|r| r.id),
                "{k:?}"
            );
        }
    }

    #[test]
    fn a_family_over_the_budget_keeps_the_tree_of_the_part_that_pays() {
        let mut rules = many_shapes(200);
        let hard = crossed(1200, 10_000);
        rules.extend(&hard);
        let mut c = AclClassifier::with_rules(&rules)
            .unwrap()
            .without_short_path();
        let err = c.compile().unwrap_err();
        assert!(matches!(err, CompileError::OverBudget { .. }), "{err:?}");
        let l = c.layers();
        // The many shapes and one kind of the crossed rules are compiled;
        // the other kind stays live, and is counted as left, not changed.
        assert_eq!(l.live_v4, 1200, "{l:?}");
        assert_eq!(l.left, 1200, "{l:?}");
        assert_eq!(l.compiled, rules.len() - 1200, "{l:?}");
        answers_as_first_match(&c, &rules);
    }

    #[test]
    fn a_part_that_saves_the_tuple_space_too_little_is_not_compiled() {
        // The crossed rules alone: two tables, a packet probes one or two,
        // so a tree of either kind would only add its walk.
        let rules = crossed(1200, 1);
        let mut c = AclClassifier::with_rules(&rules)
            .unwrap()
            .without_short_path();
        assert!(c.compile().is_err());
        assert!(c.compiled().is_none());
        let l = c.layers();
        assert_eq!(
            (l.compiled, l.live_v4, l.left),
            (0, rules.len(), 0),
            "{l:?}"
        );
        answers_as_first_match(&c, &rules);
    }
}
