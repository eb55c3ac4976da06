//! A short rule set — an allow-all, a default drop under a few prefixes,
//! a handful of port rules — classified by one scan of its rules, best
//! first, with each rule's fields pre-shifted into masks and bounds: a few
//! compares a rule, no tree, no table, no lanes to set up. A set of at
//! most [`MAX`] rules takes this path whatever its layers hold (the
//! classifier rebuilds the list on every change while the set is short);
//! past [`MAX`], the compiled tree and the tuple space are faster.
//!
//! Why eight: a rule is ~6 compares when it fails on its first field, and
//! the compiled walk of the smallest tree costs ~100 instructions of lane
//! set-up before its first level (the classifier's callgrind counts), so
//! a scan of eight rules is never slower; the `worker-path` bench's
//! `allow-all` and `prefixes` sets (1 and 9 rules) are the two sides.

use cfdp_rules::{AclRule, FlowKey};

/// Rules at most in a short set.
pub const MAX: usize = 16;

/// An address as an integer: `u32` for IPv4, `u128` for IPv6.
trait Addr: Copy + Eq + std::ops::BitAnd<Output = Self> {
    fn of(a: &[u8; 16]) -> Self;
    /// The mask of a prefix of `len` bits.
    fn mask(len: u8) -> Self;
}

impl Addr for u32 {
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u32::from_be_bytes([a[0], a[1], a[2], a[3]])
    }
    fn mask(len: u8) -> Self {
        u32::MAX
            .checked_shl(32 - u32::from(len).min(32))
            .unwrap_or(0)
    }
}

impl Addr for u128 {
    #[inline(always)]
    fn of(a: &[u8; 16]) -> Self {
        u128::from_be_bytes(*a)
    }
    fn mask(len: u8) -> Self {
        u128::MAX
            .checked_shl(128 - u32::from(len).min(128))
            .unwrap_or(0)
    }
}

/// One rule of a family, ready to compare: addresses with their masks,
/// the protocol (mask 0: any), port bounds, and what a match answers.
#[derive(Clone, Copy, Debug)]
struct Rule<W, A> {
    src: W,
    src_mask: W,
    dst: W,
    dst_mask: W,
    proto: u8,
    proto_mask: u8,
    sport: (u16, u16),
    dport: (u16, u16),
    answer: A,
}

impl<W: Addr, A: Copy> Rule<W, A> {
    fn new(r: &AclRule, answer: A) -> Self {
        let m = r.matcher;
        let (src_mask, dst_mask) = (W::mask(m.src().len()), W::mask(m.dst().len()));
        Self {
            src: W::of(m.src().addr()) & src_mask,
            src_mask,
            dst: W::of(m.dst().addr()) & dst_mask,
            dst_mask,
            proto: m.proto().unwrap_or(0),
            proto_mask: if m.proto().is_some() { 0xff } else { 0 },
            sport: (m.sport().lo(), m.sport().hi()),
            dport: (m.dport().lo(), m.dport().hi()),
            answer,
        }
    }

    /// Whether key `k` of this rule's family (its addresses `src`, `dst`)
    /// matches: what `AclMatch::matches` says. Every field is compared
    /// (`&`, not `&&`): one branch a rule, not one a field that a random
    /// mix of packets would mispredict.
    #[inline(always)]
    fn matches(&self, k: &FlowKey, src: W, dst: W) -> bool {
        ((src & self.src_mask) == self.src)
            & ((dst & self.dst_mask) == self.dst)
            & ((k.proto & self.proto_mask) == self.proto)
            & (k.sport.wrapping_sub(self.sport.0) <= self.sport.1 - self.sport.0)
            & (k.dport.wrapping_sub(self.dport.0) <= self.dport.1 - self.dport.0)
    }
}

/// The best rule of `rules` (best first) matching `k`.
#[inline(always)]
fn first<W: Addr, A: Copy>(rules: &[Rule<W, A>], k: &FlowKey) -> Option<A> {
    let (src, dst) = (W::of(&k.src), W::of(&k.dst));
    rules
        .iter()
        .find(|r| r.matches(k, src, dst))
        .map(|r| r.answer)
}

/// A short set's rules per family, each list best first (higher priority,
/// then lower id: the classifier's order; a key only meets its family's
/// rules, so the two lists need no common order).
#[derive(Clone, Debug, Default)]
pub(super) struct Short<A> {
    v4: Vec<Rule<u32, A>>,
    v6: Vec<Rule<u128, A>>,
}

impl<A: Copy> Short<A> {
    /// The lists of `rules` (at most [`MAX`]; each with its answer).
    pub(super) fn new<'a>(rules: impl IntoIterator<Item = (&'a AclRule, A)>) -> Self {
        let mut all: Vec<(&AclRule, A)> = rules.into_iter().collect();
        all.sort_by(|(a, _), (b, _)| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        let (v6, v4): (Vec<_>, Vec<_>) = all.into_iter().partition(|(r, _)| r.matcher.v6());
        Self {
            v4: v4.into_iter().map(|(r, a)| Rule::new(r, a)).collect(),
            v6: v6.into_iter().map(|(r, a)| Rule::new(r, a)).collect(),
        }
    }

    /// The best rule matching `k`.
    #[inline(always)]
    pub(super) fn first(&self, k: &FlowKey) -> Option<A> {
        if k.v6 {
            first(&self.v6, k)
        } else {
            first(&self.v4, k)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::{AclMatch, Action, IpPrefix, PortRange};

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
            let short = Short::new([(&r, ())]);
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
