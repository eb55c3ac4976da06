//! The tree walk of a burst's lanes with vector instructions: sixteen
//! IPv4 packets down a binary tree at once, one level a step.
//!
//! The engine walks its lanes one by one in plain Rust: a level is, per
//! lane, a load of the node, a load of the packet's field that the node
//! cuts, a compare and a select — some twenty instructions for sixteen
//! lanes' worth of independent chains, which the CPU overlaps but still
//! issues one by one. With AVX-512 a level is two gathers of the sixteen
//! lanes' steps (eight bytes each: the cut and the link), the field each
//! lane's node cuts picked from the lanes' keys held in registers, one
//! unsigned compare into a mask, and the next node and field selected
//! under it: a dozen instructions for all sixteen. Lanes already at a leaf
//! are masked out of the gathers (they read nothing) and the walk ends
//! when every lane is at one.
//!
//! The walk reads a tree in its one-packet form, [`Step`]s in depth-first
//! order, and gives each lane the leaf it reaches; it never reads outside
//! the steps (every index is clamped to the last one before a gather), so
//! a malformed tree gives wrong leaves, never a wild read.

use crate::kernel::Kernel;

/// Lanes of one vector walk.
pub const WALK_LANES: usize = 16;
/// Bits of [`Step::link`] that hold an inner node's right child.
pub const KID_BITS: u32 = 26;
/// The right child of an inner node's link.
pub const RIGHT: u32 = (1 << KID_BITS) - 1;
/// The field a leaf "cuts": the walk stops there.
pub const LEAF_FIELD: u32 = 5;

/// A node of a tree in depth-first order, as one packet's walk (and the
/// vector walk) reads it: an inner node goes to its right child
/// (`link`'s low [`KID_BITS`] bits) when the packet's field that it cuts
/// is at least `at`, else to the next node. The node does not name its own
/// field: its parent does, for both children (`link`'s next three bits the
/// left child's, the top three the right child's; [`LEAF_FIELD`] for a
/// leaf). A leaf's step holds whatever its owner keeps there (the engine:
/// its first block plus one in `at`, its length in `link`); no walk reads
/// it. `#[repr(C)]`: the vector walk gathers `at` and `link` of an IPv4
/// step as one 8-byte word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Step<W> {
    pub at: W,
    pub link: u32,
}

impl<W> Step<W> {
    /// An inner node's step: cut at `at`, right child `right` (at most
    /// [`RIGHT`]), the children's fields (each at most 7).
    pub fn inner(at: W, right: u32, left_field: u32, right_field: u32) -> Self {
        debug_assert!(right <= RIGHT && left_field < 8 && right_field < 8);
        Step {
            at,
            link: (right_field << (KID_BITS + 3)) | (left_field << KID_BITS) | right,
        }
    }
}

/// The lanes of one vector walk: for each lane, the node it is at and the
/// field that node cuts ([`LEAF_FIELD`] once at a leaf), and the packets'
/// fields column by column (source, destination, source port, destination
/// port, protocol: the fields' numbers in a link).
#[derive(Clone, Copy, Debug, Default)]
pub struct Lanes {
    pub node: [u32; WALK_LANES],
    pub field: [u32; WALK_LANES],
    pub keys: [[u32; WALK_LANES]; 5],
}

impl Kernel {
    /// Walks `lanes` down `steps` for at most `levels` levels, or until
    /// every lane is at a leaf; `false` (lanes untouched) when this
    /// version has no vector walk (the caller walks them itself).
    #[inline]
    pub fn walk(self, steps: &[Step<u32>], lanes: &mut [Lanes], levels: u32) -> bool {
        if steps.is_empty() || !self.walks() {
            return false;
        }
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        // SAFETY: `walks` is true only for a kernel made where
        // `Kernel::available` saw the CPU report AVX-512 F.
        unsafe {
            x86::walk(steps, lanes, levels);
        }
        true
    }
}

/// The same walk in plain Rust, lane by lane: what the vector walk must
/// give (its tests compare the two).
pub fn walk_portable(steps: &[Step<u32>], lanes: &mut [Lanes], levels: u32) {
    for lanes in lanes {
        walk_one(steps, lanes, levels);
    }
}

fn walk_one(steps: &[Step<u32>], lanes: &mut Lanes, levels: u32) {
    for l in 0..WALK_LANES {
        let (mut n, mut f) = (lanes.node[l], lanes.field[l]);
        for _ in 0..levels {
            if f == LEAF_FIELD {
                break;
            }
            let s = steps[(n as usize).min(steps.len() - 1)];
            let key = lanes.keys.get(f as usize).map_or(0, |k| k[l]);
            if key >= s.at {
                (n, f) = (s.link & RIGHT, s.link >> (KID_BITS + 3));
            } else {
                (n, f) = (n + 1, (s.link >> KID_BITS) & 7);
            }
        }
        (lanes.node[l], lanes.field[l]) = (n, f);
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::{Lanes, Step, KID_BITS, LEAF_FIELD, RIGHT, WALK_LANES};
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_castsi512_si256, _mm512_cmpeq_epi32_mask,
        _mm512_cmpneq_epi32_mask, _mm512_extracti64x4_epi64, _mm512_loadu_si512,
        _mm512_mask_and_epi32, _mm512_mask_cmpge_epu32_mask, _mm512_mask_i32gather_epi64,
        _mm512_mask_mov_epi32, _mm512_mask_srli_epi32, _mm512_min_epu32, _mm512_permutex2var_epi32,
        _mm512_set1_epi32, _mm512_setr_epi32, _mm512_setzero_si512, _mm512_srli_epi32,
        _mm512_storeu_si512,
    };

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load(a: &[u32; WALK_LANES]) -> __m512i {
        // SAFETY: `a` is 64 readable bytes (unaligned load).
        unsafe { _mm512_loadu_si512(a.as_ptr().cast()) }
    }

    /// One group's registers: its nodes, fields and key columns.
    struct Group {
        n: __m512i,
        f: __m512i,
        k: [__m512i; 5],
    }

    /// # Safety
    /// The CPU must run AVX-512 F, and `steps` must not be empty.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn walk(steps: &[Step<u32>], lanes: &mut [Lanes], levels: u32) {
        // Two groups at a time: each level of a group waits on its
        // gathers (tens of cycles), and the other group's level fills
        // that wait.
        for pair in lanes.chunks_mut(2) {
            let group = |l: &Lanes| Group {
                n: load(&l.node),
                f: load(&l.field),
                k: [
                    load(&l.keys[0]),
                    load(&l.keys[1]),
                    load(&l.keys[2]),
                    load(&l.keys[3]),
                    load(&l.keys[4]),
                ],
            };
            let mut g = [group(&pair[0]), group(&pair[pair.len() - 1])];
            for _ in 0..levels {
                let a = [level(steps, &mut g[0]), level(steps, &mut g[1])];
                if a == [0, 0] {
                    break;
                }
            }
            for (l, g) in pair.iter_mut().zip(&g) {
                // SAFETY: each array is 64 writable bytes (unaligned
                // stores).
                unsafe {
                    _mm512_storeu_si512(l.node.as_mut_ptr().cast(), g.n);
                    _mm512_storeu_si512(l.field.as_mut_ptr().cast(), g.f);
                }
            }
        }
    }

    /// One level of a group's walk; the lanes that were not yet at a leaf
    /// (none: the group is done).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn level(steps: &[Step<u32>], g: &mut Group) -> u16 {
        let set = |x: u32| _mm512_set1_epi32(x as i32);
        let active = _mm512_cmpneq_epi32_mask(g.f, set(LEAF_FIELD));
        if active == 0 {
            return 0;
        }
        let base = steps.as_ptr().cast::<i64>();
        let idx = _mm512_min_epu32(g.n, set((steps.len() - 1) as u32));
        // SAFETY: every index is at most the last step's (clamped above,
        // and `steps` is not empty) and the scale is a step's size, so
        // each gather reads within `steps`; masked-off lanes read nothing.
        let (lo, hi) = unsafe {
            (
                _mm512_mask_i32gather_epi64::<8>(
                    _mm512_setzero_si512(),
                    active as u8,
                    _mm512_castsi512_si256(idx),
                    base,
                ),
                _mm512_mask_i32gather_epi64::<8>(
                    _mm512_setzero_si512(),
                    (active >> 8) as u8,
                    _mm512_extracti64x4_epi64::<1>(idx),
                    base,
                ),
            )
        };
        // A gather gives lanes 0..8 (and 8..16) their steps as 8-byte
        // words, `at` low and `link` high: these pick each half out of
        // the pair of gathers.
        let ats = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let links = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        let at = _mm512_permutex2var_epi32(lo, ats, hi);
        let link = _mm512_permutex2var_epi32(lo, links, hi);
        // Each lane's value of the field its node cuts (source by
        // default; a leaf's lanes are masked off below).
        let mut v = g.k[0];
        for (i, col) in g.k.iter().enumerate().skip(1) {
            v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(g.f, set(i as u32)), *col);
        }
        let right = _mm512_mask_cmpge_epu32_mask(active, v, at);
        let left = active & !right;
        g.n = _mm512_mask_and_epi32(g.n, right, link, set(RIGHT));
        g.n = _mm512_mask_mov_epi32(g.n, left, _mm512_add_epi32(g.n, set(1)));
        g.f = _mm512_mask_srli_epi32::<{ KID_BITS + 3 }>(g.f, right, link);
        g.f = _mm512_mask_and_epi32(g.f, left, _mm512_srli_epi32::<KID_BITS>(link), set(7));
        active
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A random tree in depth-first order over fields 0..5, `depth` levels
    /// at most, its steps as the engine builds them.
    /// Also the root's field.
    fn tree(cuts: &[(u32, u32)], depth: u32) -> (Vec<Step<u32>>, u32) {
        // Nodes as (field, at, right child), built depth first.
        fn grow(
            out: &mut Vec<(u32, u32, u32)>,
            cuts: &[(u32, u32)],
            next: &mut usize,
            depth: u32,
        ) -> u32 {
            let me = out.len() as u32;
            if depth == 0 || *next >= cuts.len() {
                out.push((LEAF_FIELD, 0, 0));
                return me;
            }
            let (field, at) = cuts[*next];
            *next += 1;
            out.push((field % 5, at, 0));
            grow(out, cuts, next, depth - 1);
            let right = grow(out, cuts, next, depth - 1);
            out[me as usize].2 = right;
            me
        }
        let mut nodes = Vec::new();
        grow(&mut nodes, cuts, &mut 0, depth);
        let field = |n: u32| nodes[n as usize].0;
        let steps = nodes
            .iter()
            .enumerate()
            .map(|(me, &(f, at, right))| {
                if f == LEAF_FIELD {
                    Step { at, link: 0 }
                } else {
                    Step::inner(at, right, field(me as u32 + 1), field(right))
                }
            })
            .collect();
        (steps, field(0))
    }

    proptest! {
        /// Every lane reaches the leaf the one-lane walk reaches, by every
        /// version this CPU runs (the vector walk where it has one).
        #[test]
        fn the_vector_walk_reaches_each_lanes_leaf(
            cuts in proptest::collection::vec((0u32..5, any::<u32>()), 0..200),
            depth in 0u32..12,
            keys in proptest::array::uniform5(proptest::array::uniform16(any::<u32>())),
            near in any::<bool>(),
        ) {
            let (steps, root) = tree(&cuts, depth);
            let mut lanes = Lanes { keys, ..Lanes::default() };
            if near {
                // Keys at the cuts themselves, where >= and > differ.
                for (l, c) in cuts.iter().cycle().take(WALK_LANES).enumerate() {
                    lanes.keys[c.0 as usize][l] = c.1;
                }
            }
            lanes.field = [root; WALK_LANES];
            let mut want = lanes;
            walk_portable(&steps, std::slice::from_mut(&mut want), depth + 1);
            prop_assert!(want.field.iter().all(|&f| f == LEAF_FIELD));
            for k in Kernel::available() {
                let mut got = lanes;
                if k.walk(&steps, std::slice::from_mut(&mut got), depth + 1) {
                    prop_assert_eq!(got.node, want.node, "{}", k.name());
                    prop_assert_eq!(got.field, want.field, "{}", k.name());
                }
            }
        }
    }

    #[test]
    fn only_an_avx512_kernel_walks() {
        for k in Kernel::available() {
            assert_eq!(k.walks(), k.name() == "avx512-walk", "{}", k.name());
        }
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            Kernel::available().iter().any(|k| k.walks()),
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
        );
    }
}
