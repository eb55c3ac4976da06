//! A short rule set — an allow-all, a default drop under a few prefixes,
//! a handful of port rules — classified by one scan of its rules, best
//! first: each rule is the tuple space's [`Entry`] (fields pre-shifted
//! into masks and bounds, the answer beside them), so a rule is a few
//! compares, with no tree, no table and no lanes to set up. A set of at
//! most [`MAX`] rules takes this path whatever its layers hold (the
//! classifier rebuilds the list on every change while the set is short);
//! past [`MAX`], the compiled tree and the tuple space are faster.
//!
//! A set whose answer needs no key — each family's best rule matches
//! every packet (an allow-all, a default drop) or the family has no rule
//! — says so once ([`Short::uniform`]): a burst is then one store a
//! packet, not a scan (`worker-path`'s allow-all: see the bench README).
//!
//! Why sixteen: a rule that fails costs a few compares, and the compiled
//! walk of the smallest tree costs ~100 instructions of lane set-up before
//! its first level (the classifier's callgrind counts); the `worker-path`
//! bench's `allow-all` (1 rule) and `prefixes` (9) sets take this path
//! (with the run counting of `judge.rs`, 477 -> 273 and 516 -> 405
//! instructions a packet; a rule type of its own with branch-free compares
//! counted ~20 fewer, not worth a second copy of `Entry`).

use cfdp_rules::{AclRule, FlowKey};

use super::bucket::Entry;
use super::compiled::Answer;
use super::word::{Packet, Word};

/// Rules at most in a short set.
pub const MAX: usize = 16;

/// A short set's rules per family, each list best first (higher priority,
/// then lower id: the classifier's order; a key only meets its family's
/// rules, so the two lists need no common order).
#[derive(Clone, Debug, Default)]
pub(super) struct Short {
    v4: Vec<Entry<u32>>,
    v6: Vec<Entry<u128>>,
    /// Each family's answer when no key is needed to give it
    /// ([`Self::uniform`]).
    uniform: Option<(Option<Answer>, Option<Answer>)>,
}

impl Short {
    /// The lists of `rules` (at most [`MAX`]), each with its slot and tag.
    pub(super) fn new<'a>(rules: impl IntoIterator<Item = (&'a AclRule, u32, u32)>) -> Self {
        let mut s = Self::default();
        for (r, slot, tag) in rules {
            if r.matcher.v6() {
                s.v6.push(Entry::new(r, slot, tag));
            } else {
                s.v4.push(Entry::new(r, slot, tag));
            }
        }
        s.v4.sort_by_key(|e| std::cmp::Reverse(e.rank()));
        s.v6.sort_by_key(|e| std::cmp::Reverse(e.rank()));
        s.uniform = uniform(&s.v4).zip(uniform(&s.v6));
        s
    }

    /// The IPv4 and the IPv6 answer, when every key of each family gets
    /// the same one: its best rule matches every packet, or it has none.
    #[inline(always)]
    pub(super) fn uniform(&self) -> Option<(Option<Answer>, Option<Answer>)> {
        self.uniform
    }

    /// The best rule matching `k`.
    #[inline(always)]
    pub(super) fn first(&self, k: &FlowKey) -> Option<Answer> {
        if k.v6 {
            first(&self.v6, k)
        } else {
            first(&self.v4, k)
        }
    }
}

/// The answer every key gets from `entries` (best first) when it needs no
/// key: `Some(None)` for no rule, `Some(best)` when the best matches all.
fn uniform<W: Word>(entries: &[Entry<W>]) -> Option<Option<Answer>> {
    match entries.first() {
        None => Some(None),
        Some(e) if e.matches_all() => Some(Some(e.answer())),
        Some(_) => None,
    }
}

/// The best entry of `entries` (best first) matching `k`.
#[inline(always)]
fn first<W: Word>(entries: &[Entry<W>], k: &FlowKey) -> Option<Answer> {
    let p = Packet::of(k);
    entries.iter().find(|e| e.matches(&p)).map(Entry::answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::{AclMatch, Action, IpPrefix, PortRange};

    /// A set's uniform answer is what the scan gives every key of each
    /// family, and a set that needs the key has none.
    #[test]
    fn a_uniform_answer_is_the_scans_answer_for_every_key() {
        let rule = |id: u32, priority: u32, m: AclMatch| AclRule {
            id,
            priority,
            matcher: m,
            action: if id.is_multiple_of(2) {
                Action::Drop
            } else {
                Action::Allow
            },
        };
        let any4 = AclMatch::any(false);
        let any6 = AclMatch::any(true);
        let net =
            IpPrefix::new(false, [10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8).unwrap();
        let some4 = AclMatch::new(
            net,
            IpPrefix::any(false),
            None,
            PortRange::ANY,
            PortRange::ANY,
        )
        .unwrap();
        let tcp6 = AclMatch::new(
            IpPrefix::any(true),
            IpPrefix::any(true),
            Some(6),
            PortRange::ANY,
            PortRange::ANY,
        )
        .unwrap();
        // (rules, uniform expected)
        let sets: Vec<(Vec<AclRule>, bool)> = vec![
            (vec![], true),
            (vec![rule(1, 1, any4)], true),
            (vec![rule(1, 1, any4), rule(2, 1, any6)], true),
            // A prefix rule below the catch-all: the catch-all wins all.
            (vec![rule(1, 5, any4), rule(2, 1, some4)], true),
            // Above it: the key decides.
            (vec![rule(1, 1, any4), rule(2, 5, some4)], false),
            // IPv6's best needs the protocol.
            (
                vec![rule(1, 1, any4), rule(2, 5, tcp6), rule(3, 1, any6)],
                false,
            ),
            (vec![rule(2, 5, some4)], false),
        ];
        for (rules, expect) in sets {
            let short = Short::new(rules.iter().enumerate().map(|(i, r)| (r, i as u32, 0)));
            assert_eq!(short.uniform().is_some(), expect, "{rules:?}");
            let Some((a4, a6)) = short.uniform() else {
                continue;
            };
            for i in 0..64u8 {
                let v6 = i % 2 == 1;
                let mut src = [0u8; 16];
                src[0] = if i % 4 < 2 { 10 } else { 192 };
                let k = FlowKey {
                    v6,
                    src,
                    dst: [i; 16],
                    proto: [6, 17, 1][usize::from(i % 3)],
                    sport: u16::from(i) * 1000,
                    dport: 80,
                };
                let uniform = if v6 { a6 } else { a4 };
                assert_eq!(uniform, short.first(&k), "{rules:?} {k:?}");
            }
        }
    }

    /// The scan's compare is `AclMatch::matches`, on rules of both
    /// families, every prefix length class and port and protocol forms,
    /// against keys near and inside each rule.
    #[test]
    fn a_short_rule_matches_what_its_acl_match_matches() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for _ in 0..2000 {
            let v6 = next() % 3 == 0;
            let bits = if v6 { 128 } else { 32 };
            let mut a = [0u8; 16];
            let mut b = [0u8; 16];
            for x in a.iter_mut().chain(b.iter_mut()) {
                *x = next() as u8;
            }
            if !v6 {
                a[4..].fill(0);
                b[4..].fill(0);
            }
            let ls = (next() % (bits + 1)) as u8;
            let ld = (next() % (bits + 1)) as u8;
            let proto = [None, Some(6), Some(17)][(next() % 3) as usize];
            let ports = |x: u64| {
                let lo = (x % 1024) as u16;
                PortRange::new(lo, lo + (x >> 16) as u16 % 100).unwrap()
            };
            let (sp, dp) = if proto.is_some() && next() % 2 == 0 {
                (ports(next()), ports(next()))
            } else {
                (PortRange::ANY, PortRange::ANY)
            };
            // The prefixes' host bits cleared (`IpPrefix` refuses them).
            let net = |x: &[u8; 16], len: u8| {
                let mut out = [0u8; 16];
                if v6 {
                    out = (u128::of(x) & u128::mask(len)).to_be_bytes();
                } else {
                    out[..4].copy_from_slice(&(u32::of(x) & u32::mask(len)).to_be_bytes());
                }
                IpPrefix::new(v6, out, len).unwrap()
            };
            let m = AclMatch::new(net(&a, ls), net(&b, ld), proto, sp, dp).unwrap();
            let r = AclRule {
                id: 1,
                priority: 1,
                matcher: m,
                action: Action::Allow,
            };
            let short = Short::new([(&r, 0, 0)]);
            for t in 0..8 {
                // Keys on the rule's own addresses, with low bits flipped
                // (inside or just outside the prefix), or another family.
                let kv6 = if t == 7 { !v6 } else { v6 };
                let mut flip = |x: &[u8; 16]| {
                    let mut y = *x;
                    let i = (next() % if kv6 { 16 } else { 4 }) as usize;
                    y[i] ^= 1 << (next() % 8);
                    y
                };
                let (mut s, mut d) = (flip(&a), flip(&b));
                if !kv6 {
                    s[4..].fill(0);
                    d[4..].fill(0);
                }
                let k = FlowKey {
                    v6: kv6,
                    src: s,
                    dst: d,
                    proto: [6, 17, 1][(next() % 3) as usize],
                    sport: (next() % 1200) as u16,
                    dport: (next() % 1200) as u16,
                };
                assert_eq!(short.first(&k).is_some(), m.matches(&k), "{m:?} {k:?}");
            }
        }
    }
}
