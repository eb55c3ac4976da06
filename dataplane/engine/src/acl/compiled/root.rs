//! The root table of an IPv4 tree: the node where a packet's walk can
//! start, by the top bits of its source and destination addresses.
//!
//! The first levels of a tree mostly cut the addresses, and every packet
//! of one (source, destination) cell of [`ROOT_BITS`] + [`ROOT_BITS`] top
//! bits takes the same turns at every cut that does not split its cell.
//! So each cell's walk is taken once at build time, down to the first node
//! that cuts another field or splits the cell, and a packet starts there:
//! one load instead of that many levels. The table also keeps how many
//! levels are left below each start, so a burst's lanes walk only as far
//! as its deepest start needs (the walk has no data-dependent branch: a
//! fixed count of levels), and the field the start cuts, which one
//! packet's walk needs first (from the node, a load after the cell's).
//! Exact by construction: the walk from the start is the walk from the
//! root after the turns the cell decides.

use super::node::{field, Fields, Node, Word};

/// Top bits of each address that index the table, at most: 2^16 cells of
/// 4 bytes. A smaller tree gets fewer (see [`Root::build`]).
pub(super) const ROOT_BITS: u32 = 8;
/// Fewest bits a table is built with: below, no table.
const MIN_BITS: u32 = 2;
/// Bits of an entry that hold the node; the start's field is in the next
/// three, the levels left in the top [`HEIGHT_BITS`].
const NODE_BITS: u32 = 24;
const FIELD_BITS: u32 = 3;
const HEIGHT_BITS: u32 = 32 - NODE_BITS - FIELD_BITS;
// The vector walk reads a cell's node and field where these put them.
const _: () = assert!(NODE_BITS == cfdp_acl_simd::CELL_NODE_BITS && FIELD_BITS == 3);

/// A cell's start: the node, its field, and the levels left below it.
#[derive(Debug, Default)]
pub(super) struct Root {
    cells: Vec<u32>,
    /// Top bits of each address that index `cells`.
    bits: u32,
}

impl Root {
    /// The table of an IPv4 tree, or none (an empty table: walks start at
    /// the root) for IPv6 or a tree too large to number in an entry. The
    /// table is at most the size of the tree's nodes (so a small tree,
    /// whose walk is short anyway, gets a small table, or none).
    pub(super) fn build<W: Word>(nodes: &[Node<W>]) -> Self {
        if W::V6 || nodes.len() >= 1 << NODE_BITS {
            return Self::default();
        }
        let height = heights(nodes);
        if height.iter().any(|&h| h >> HEIGHT_BITS != 0) {
            return Self::default();
        }
        let tree = std::mem::size_of_val(nodes);
        let Some(bits) = (MIN_BITS..=ROOT_BITS)
            .rev()
            .find(|b| (4usize << (2 * b)) <= tree)
        else {
            return Self::default();
        };
        let side = 1u32 << bits;
        let shift = 32 - bits;
        let span = |a: u32| {
            let lo = a << shift;
            (W::from_u32(lo), W::from_u32(lo | ((1 << shift) - 1)))
        };
        let mut cells = Vec::with_capacity((side * side) as usize);
        for s in 0..side {
            for d in 0..side {
                let mut n = 0usize;
                loop {
                    let node = &nodes[n];
                    let (lo, hi) = match node.field as usize {
                        field::SRC => span(s),
                        field::DST => span(d),
                        _ => break,
                    };
                    n = if node.at <= lo {
                        node.kids[1] as usize
                    } else if node.at > hi {
                        node.kids[0] as usize
                    } else {
                        break;
                    };
                }
                let cut = nodes[n].field;
                cells.push((height[n] << (NODE_BITS + FIELD_BITS)) | (cut << NODE_BITS) | n as u32);
            }
        }
        Self { cells, bits }
    }

    /// The table as the vector walk reads it (the root's node cuts
    /// `root_field`; no table: every walk starts there).
    pub(super) fn table(&self, root_field: u32) -> cfdp_acl_simd::Start<'_> {
        cfdp_acl_simd::Start {
            cells: &self.cells,
            bits: if self.cells.is_empty() { 0 } else { self.bits },
            root_field,
        }
    }

    /// No table: every walk starts at the root.
    pub(super) fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The table's size (empty: none).
    pub(super) fn bytes(&self) -> usize {
        self.cells.capacity() * std::mem::size_of::<u32>()
    }

    /// Where `f`'s walk starts, the field that node cuts (the zero field
    /// for a leaf) and the levels left below it; `None` when there is no
    /// table.
    #[inline(always)]
    pub(super) fn start<W: Word>(&self, f: &Fields<W>) -> Option<(u32, u32, u32)> {
        let c = self.cells[self.cell(f)?];
        Some((
            c & ((1 << NODE_BITS) - 1),
            (c >> NODE_BITS) & ((1 << FIELD_BITS) - 1),
            c >> (NODE_BITS + FIELD_BITS),
        ))
    }

    /// The cell `f` falls in, by index; `None` when there is no table.
    #[inline(always)]
    pub(super) fn cell<W: Word>(&self, f: &Fields<W>) -> Option<usize> {
        if W::V6 || self.cells.is_empty() {
            return None;
        }
        let shift = 32 - self.bits;
        let (src, dst) = (f[field::SRC].fold(), f[field::DST].fold());
        Some((((src >> shift) << self.bits) | (dst >> shift)) as usize)
    }

    /// Each cell's start node, in the cells' order.
    pub(super) fn nodes(&self) -> impl Iterator<Item = u32> + '_ {
        self.cells.iter().map(|c| c & ((1 << NODE_BITS) - 1))
    }
}

/// Levels left below each node (a leaf: 0). Children come after their
/// parent (depth-first order), so one pass from the end sees them first.
fn heights<W>(nodes: &[Node<W>]) -> Vec<u32> {
    let mut h = vec![0u32; nodes.len()];
    for n in (0..nodes.len()).rev() {
        let node = &nodes[n];
        if !node.is_leaf() {
            let [l, r] = node.kids.map(|k| h[k as usize]);
            h[n] = 1 + l.max(r);
        }
    }
    h
}
