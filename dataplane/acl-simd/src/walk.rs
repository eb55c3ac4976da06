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

/// A packet's fields as the walk reads them: source, destination, source
/// port, destination port, protocol at 0..5 (the fields' numbers in a
/// link); the rest unread.
pub type Row = [u32; 8];

/// Where each lane's walk starts: the cell of a table indexed by the top
/// `bits` bits of the source, then of the destination (`cells` holds
/// `1 << 2 * bits` of them), each naming its node in the low
/// [`CELL_NODE_BITS`] bits and that node's field in the next three; with
/// no table (`bits` 0), the root (node 0), which cuts `root_field`.
#[derive(Clone, Copy, Debug)]
pub struct Start<'a> {
    pub cells: &'a [u32],
    pub bits: u32,
    pub root_field: u32,
}

/// Bits of a [`Start`] cell that name its node.
pub const CELL_NODE_BITS: u32 = 24;

impl Start<'_> {
    /// Lane `row`'s start, (node, field): what the vector walk computes
    /// sixteen lanes at a time.
    pub fn of(&self, row: &Row) -> (u32, u32) {
        if self.bits == 0 || self.cells.is_empty() {
            return (0, self.root_field);
        }
        let shift = 32 - self.bits;
        let i = ((row[0] >> shift) << self.bits) | (row[1] >> shift);
        let c = self.cells[(i as usize).min(self.cells.len() - 1)];
        (c & ((1 << CELL_NODE_BITS) - 1), (c >> CELL_NODE_BITS) & 7)
    }
}

impl Kernel {
    /// The leaf each of `rows` reaches, into `leaves`: from its start, at
    /// most `levels` levels down `steps` (a lane not at a leaf by then
    /// keeps the node it reached); `false` (`leaves` untouched) when this
    /// version has no vector walk (the caller walks them itself).
    #[inline]
    pub fn walk(
        self,
        steps: &[Step<u32>],
        start: &Start,
        rows: &[Row],
        levels: u32,
        leaves: &mut [u32],
    ) -> bool {
        if steps.is_empty() || !self.walks() {
            return false;
        }
        assert!(leaves.len() >= rows.len(), "a leaf for every row");
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        // SAFETY: `walks` is true only for a kernel made where
        // `Kernel::available` saw the CPU report AVX-512 F; `steps` is not
        // empty.
        unsafe {
            x86::walk(steps, start, rows, levels, leaves);
        }
        true
    }
}

/// The same walk in plain Rust, lane by lane: what the vector walk must
/// give (its tests compare the two).
pub fn walk_portable(
    steps: &[Step<u32>],
    start: &Start,
    rows: &[Row],
    levels: u32,
    leaves: &mut [u32],
) {
    for (row, leaf) in rows.iter().zip(leaves) {
        let (mut n, mut f) = start.of(row);
        for _ in 0..levels {
            if f == LEAF_FIELD {
                break;
            }
            let s = steps[(n as usize).min(steps.len() - 1)];
            let key = if f < LEAF_FIELD { row[f as usize] } else { 0 };
            if key >= s.at {
                (n, f) = (s.link & RIGHT, s.link >> (KID_BITS + 3));
            } else {
                (n, f) = (n + 1, (s.link >> KID_BITS) & 7);
            }
        }
        *leaf = n;
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use crate::walk::{Row, Start, Step, CELL_NODE_BITS, KID_BITS, LEAF_FIELD, RIGHT, WALK_LANES};
    use std::arch::x86_64::{
        __m512i, __mmask16, _mm512_add_epi32, _mm512_and_epi32, _mm512_castsi512_si256,
        _mm512_cmpeq_epi32_mask, _mm512_cmpneq_epi32_mask, _mm512_extracti64x4_epi64,
        _mm512_mask_and_epi32, _mm512_mask_cmpge_epu32_mask, _mm512_mask_i32gather_epi32,
        _mm512_mask_i32gather_epi64, _mm512_mask_mov_epi32, _mm512_mask_srli_epi32,
        _mm512_mask_storeu_epi32, _mm512_min_epu32, _mm512_mullo_epi32, _mm512_or_epi32,
        _mm512_permutex2var_epi32, _mm512_set1_epi32, _mm512_setr_epi32, _mm512_setzero_si512,
        _mm512_sllv_epi32, _mm512_srli_epi32, _mm512_srlv_epi32,
    };

    /// One group's registers: its nodes, fields and key columns.
    struct Group {
        n: __m512i,
        f: __m512i,
        k: [__m512i; 5],
    }

    /// # Safety
    /// The CPU must run AVX-512 F, `steps` must not be empty, and
    /// `leaves` must be at least as long as `rows`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn walk(
        steps: &[Step<u32>],
        start: &Start,
        rows: &[Row],
        levels: u32,
        leaves: &mut [u32],
    ) {
        // Two groups at a time: each level of a group waits on its
        // gathers (tens of cycles), and the other group's level fills
        // that wait.
        let groups = rows.len().div_ceil(WALK_LANES);
        let mut g = 0;
        while g < groups {
            let (a, b) = (g * WALK_LANES, ((g + 1) * WALK_LANES).min(rows.len()));
            let first = group(start, &rows[a..b]);
            let second = match rows.get(b..) {
                Some(rest) if !rest.is_empty() => group(start, &rest[..rest.len().min(WALK_LANES)]),
                // An empty group: every lane already at a "leaf".
                _ => Group {
                    n: _mm512_setzero_si512(),
                    f: _mm512_set1_epi32(LEAF_FIELD as i32),
                    k: [_mm512_setzero_si512(); 5],
                },
            };
            let mut pair = [first, second];
            for _ in 0..levels {
                let a = [level(steps, &mut pair[0]), level(steps, &mut pair[1])];
                if a == [0, 0] {
                    break;
                }
            }
            for (i, grp) in pair.iter().enumerate() {
                let from = (g + i) * WALK_LANES;
                let Some(out) = leaves.get_mut(from..rows.len().min(from + WALK_LANES)) else {
                    continue;
                };
                if out.is_empty() {
                    continue;
                }
                let mask: __mmask16 = ((1u32 << out.len()) - 1) as u16;
                // SAFETY: the mask writes the first `out.len()` lanes only,
                // within `out`.
                unsafe { _mm512_mask_storeu_epi32(out.as_mut_ptr().cast(), mask, grp.n) };
            }
            g += 2;
        }
    }

    /// A group of up to sixteen rows (lanes past them at a leaf already):
    /// its key columns gathered from the rows, and each lane's start.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn group(start: &Start, rows: &[Row]) -> Group {
        debug_assert!(!rows.is_empty() && rows.len() <= WALK_LANES);
        let set = |x: u32| _mm512_set1_epi32(x as i32);
        let live: __mmask16 = ((1u32 << rows.len()) - 1) as u16;
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let at = _mm512_mullo_epi32(lane, set(8));
        let base = rows.as_ptr().cast::<i32>();
        // SAFETY: lane `l` < rows.len() (the mask) reads word `c` < 8 of
        // row `l`, within `rows`; masked-off lanes read nothing.
        let k: [__m512i; 5] = std::array::from_fn(|c| unsafe {
            _mm512_mask_i32gather_epi32::<4>(
                _mm512_setzero_si512(),
                live,
                _mm512_add_epi32(at, set(c as u32)),
                base,
            )
        });
        let (n, f) = if start.bits == 0 || start.cells.is_empty() {
            (_mm512_setzero_si512(), set(start.root_field))
        } else {
            let shift = set(32 - start.bits);
            let i = _mm512_or_epi32(
                _mm512_sllv_epi32(_mm512_srlv_epi32(k[0], shift), set(start.bits)),
                _mm512_srlv_epi32(k[1], shift),
            );
            let i = _mm512_min_epu32(i, set(start.cells.len() as u32 - 1));
            // SAFETY: every index is at most the last cell's (clamped
            // above; `cells` is not empty); masked-off lanes read nothing.
            let c = unsafe {
                _mm512_mask_i32gather_epi32::<4>(
                    _mm512_setzero_si512(),
                    live,
                    i,
                    start.cells.as_ptr().cast(),
                )
            };
            (
                _mm512_and_epi32(c, set((1 << CELL_NODE_BITS) - 1)),
                _mm512_and_epi32(_mm512_srli_epi32::<CELL_NODE_BITS>(c), set(7)),
            )
        };
        // Lanes past the rows: at a leaf, walking nowhere.
        let f = _mm512_mask_mov_epi32(set(LEAF_FIELD), live, f);
        Group { n, f, k }
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
    /// at most, its steps as the engine builds them, and each node's field.
    fn tree(cuts: &[(u32, u32)], depth: u32) -> (Vec<Step<u32>>, Vec<u32>) {
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
        (steps, nodes.iter().map(|n| n.0).collect())
    }

    proptest! {
        /// Every lane reaches the leaf the one-lane walk reaches, by every
        /// version this CPU runs (the vector walk where it has one), from
        /// the root or from a start table's cells, for any number of rows.
        #[test]
        fn the_vector_walk_reaches_each_lanes_leaf(
            cuts in proptest::collection::vec((0u32..5, any::<u32>()), 0..200),
            depth in 0u32..12,
            rows in proptest::collection::vec(proptest::array::uniform8(any::<u32>()), 1..=40),
            near in any::<bool>(),
            bits in prop_oneof![Just(0u32), 1u32..=8],
            picks in proptest::collection::vec(any::<u32>(), 1 << 16),
        ) {
            let (steps, fields) = tree(&cuts, depth);
            let mut rows = rows;
            if near {
                // Keys at the cuts themselves, where >= and > differ.
                for (row, c) in rows.iter_mut().zip(cuts.iter().cycle()) {
                    row[c.0 as usize] = c.1;
                }
            }
            // Cells naming random nodes with their own fields.
            let cells: Vec<u32> = picks[..1 << (2 * bits)]
                .iter()
                .map(|p| {
                    let n = p % fields.len() as u32;
                    (fields[n as usize] << CELL_NODE_BITS) | n
                })
                .collect();
            let start = Start { cells: &cells, bits, root_field: fields[0] };
            let mut want = vec![0; rows.len()];
            walk_portable(&steps, &start, &rows, depth + 1, &mut want);
            for k in Kernel::available() {
                let mut got = vec![u32::MAX; rows.len() + 3];
                if k.walk(&steps, &start, &rows, depth + 1, &mut got) {
                    prop_assert_eq!(&got[..rows.len()], &want[..], "{}", k.name());
                    prop_assert!(got[rows.len()..].iter().all(|&l| l == u32::MAX), "past the rows");
                }
            }
            // Every lane ends at a leaf.
            prop_assert!(want.iter().all(|&n| fields[n as usize] == LEAF_FIELD));
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
