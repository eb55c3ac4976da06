//! The compiled layer's small types: a packet's fields, a tree node in its
//! two forms, a rule as a leaf checks it, and what a rule answers.

pub use crate::acl::word::Word;
use cfdp_rules::{AclRule, Action, RuleId};

/// Fields in tree order: source, destination, source port, destination
/// port, protocol; index 5 is always 0 (a leaf's self-loop reads it).
pub(super) const FIELDS: usize = 5;
pub(super) const ZERO_FIELD: u32 = 5;

/// A packet's fields as the tree reads them, each a word of its family
/// ([`Word`]: `u32` for IPv4, `u128` for IPv6), at the places [`field`]
/// names.
pub type Fields<W> = [W; 8];

/// Where each field sits in [`Fields`] (and in a node's `field`).
pub mod field {
    pub const SRC: usize = 0;
    pub const DST: usize = 1;
    pub const SPORT: usize = 2;
    pub const DPORT: usize = 3;
    pub const PROTO: usize = 4;
}

/// The fields of a 5-tuple.
#[inline(always)]
pub fn fields<W: Word>(src: W, dst: W, sport: u16, dport: u16, proto: u16) -> Fields<W> {
    let zero = W::default();
    // In [`field`]'s order.
    [
        src,
        dst,
        W::from_u32(u32::from(sport)),
        W::from_u32(u32::from(dport)),
        W::from_u32(u32::from(proto)),
        zero,
        W::MAX,
        zero,
    ]
}

/// A tree node, a split of its region: an inner node goes to
/// `kids[(f[field] >= at) as usize]` (`at`: the upper side's first value);
/// a leaf reads the zero field against `at` (never 0) and so goes to
/// `kids[0]`, itself, names its span of the tree's items in `kids[1]`, and
/// its first block plus one in `at` (a burst prefetches its leaves' blocks
/// from the node it reached, with no table between).
#[derive(Clone, Copy, Debug)]
pub(super) struct Node<W> {
    pub(super) field: u32,
    pub(super) at: W,
    pub(super) kids: [u32; 2],
}

impl<W> Node<W> {
    pub(super) fn is_leaf(&self) -> bool {
        self.field == ZERO_FIELD
    }
}

impl<W: Word> Node<W> {
    /// A leaf's first block in the tree's blocks.
    #[inline(always)]
    pub(super) fn first_block(&self) -> usize {
        (self.at.low() as usize).wrapping_sub(1)
    }
}

/// The tree again for one packet's walk, 8 bytes a node (IPv4), in
/// depth-first order: a node's left child is the next one, and its parent
/// names its field, so a walk knows the next node's field as soon as it
/// chose that node, and the load of the packet's field runs beside the
/// load of the node instead of after it: a level is a load, a compare and
/// a select (~7 cycles), not two loads in a row (~12). The leaf kernel's
/// crate defines it ([`cfdp_acl_simd::Step`]): its vector walk of a
/// burst's lanes reads the same steps. A leaf's step holds what its node
/// does in `at` (its first block plus one) and its length as built in
/// `link`: a packet that reached it reads its blocks from there while the
/// copy's overlay rewrote no leaf. (An IPv4 packet alone walks the quads,
/// two levels a step, where the tree has them: `quad.rs`.)
pub(super) use cfdp_acl_simd::Step;
pub(super) use cfdp_acl_simd::{KID_BITS, RIGHT};
const _: () = assert!(ZERO_FIELD == cfdp_acl_simd::LEAF_FIELD);

/// A rule as a leaf list holds it one by one: 32 bytes for IPv4 (80 for
/// IPv6), every field an integer compare. The build lists leaves this way
/// before it packs them into the kernel's blocks; a leaf the overlay
/// rewrote keeps its new list this way too, beside its blocks (a patch
/// reads and rewrites lists).
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(super) struct Item<W> {
    pub(super) src: W,
    pub(super) src_mask: W,
    pub(super) dst: W,
    pub(super) dst_mask: W,
    pub(super) sport: [u16; 2],
    pub(super) dport: [u16; 2],
    /// 0..=255, or 256 for any.
    pub(super) proto: u16,
    pub(super) _pad: u16,
    /// The rule's index in the layer's answers and in the dead bitmap.
    pub(super) idx: u32,
}

impl<W: Word> Item<W> {
    /// The rule as the leaf kernel's block takes it.
    pub(super) fn rule(&self) -> cfdp_acl_simd::Rule<W> {
        cfdp_acl_simd::Rule {
            src: self.src,
            src_mask: self.src_mask,
            dst: self.dst,
            dst_mask: self.dst_mask,
            sport: (self.sport[0], self.sport[1]),
            dport: (self.dport[0], self.dport[1]),
            // 256 for any, PROTO_ANY there.
            proto: u32::from(self.proto),
            idx: self.idx,
        }
    }

    /// A leaf list as the leaf kernel reads it, appended to `out`: its
    /// rules in blocks of eight, in order (the lanes past the list's end
    /// never match).
    pub(super) fn push_blocks(list: &[Self], out: &mut Vec<W::Block>) {
        for chunk in list.chunks(cfdp_acl_simd::LANES) {
            let rules: Vec<cfdp_acl_simd::Rule<W>> = chunk.iter().map(Self::rule).collect();
            out.push(W::block(&rules).expect("a chunk of LANES rules"));
        }
    }

    /// A rule as the leaf kernel's block gave it back ([`Self::rule`]'s
    /// inverse).
    pub(super) fn of(r: cfdp_acl_simd::Rule<W>) -> Self {
        Item {
            src: r.src,
            src_mask: r.src_mask,
            dst: r.dst,
            dst_mask: r.dst_mask,
            sport: [r.sport.0, r.sport.1],
            dport: [r.dport.0, r.dport.1],
            // PROTO_ANY is 256, as here.
            proto: r.proto as u16,
            _pad: 0,
            idx: r.idx,
        }
    }

    #[inline(always)]
    pub(super) fn matches(&self, f: &Fields<W>) -> bool {
        let w = |x: u16| W::from_u32(u32::from(x));
        use field::{DPORT, DST, PROTO, SPORT, SRC};
        (f[SRC] & self.src_mask) == self.src
            && (f[DST] & self.dst_mask) == self.dst
            && (self.proto == 256 || w(self.proto) == f[PROTO])
            && w(self.sport[0]) <= f[SPORT]
            && f[SPORT] <= w(self.sport[1])
            && w(self.dport[0]) <= f[DPORT]
            && f[DPORT] <= w(self.dport[1])
    }
}

/// What a rule answers a packet it matches: the one type for it, the same
/// for both families and for both layers (the live layer's entries give
/// it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub id: RuleId,
    pub action: Action,
    pub tag: u32,
    pub slot: u32,
}

/// A compiled rule's answer with its priority, by which it is ranked
/// against the live layer's winner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub priority: u32,
    pub answer: Answer,
}

impl Hit {
    /// What `inp` answers, with its priority.
    pub fn of(inp: &Input) -> Self {
        Hit {
            priority: inp.rule.priority,
            answer: Answer {
                id: inp.rule.id,
                action: inp.rule.action,
                tag: inp.tag,
                slot: inp.slot,
            },
        }
    }

    /// Higher priority, then lower id: as [`AclRule::beats`].
    #[inline(always)]
    pub fn rank(&self) -> (u32, std::cmp::Reverse<RuleId>) {
        (self.priority, std::cmp::Reverse(self.answer.id))
    }
}

/// A rule to compile, with the caller's tag and slab slot.
#[derive(Clone, Copy, Debug)]
pub struct Input {
    pub rule: AclRule,
    pub tag: u32,
    pub slot: u32,
}
