//! The tree again for one packet's walk, two levels a step.
//!
//! A packet alone cannot overlap its levels with other packets' as a
//! burst's lanes do: its walk is a chain of loads, each level's node known
//! only once the level above chose it. A [`Quad`] holds a node, both its
//! children's cuts and its four grandchildren (32 bytes): one load brings
//! three cuts and four exits, the three compares run side by side, and
//! selects (two in a row) pick the grandchild among values already read,
//! so a walk waits on half as many loads. Each exit also names the fields its quad
//! cuts (as a [`Step`](super::Step) names its node's), so the packet's
//! fields are read beside the quad, not after it. Quads start where a
//! walk can start (the root, each root-table cell's node) and at every
//! quad's grandchildren; a child that is a leaf cuts the zero field
//! against the largest value, and goes to the leaf either way.
//!
//! A walk ends at a leaf's blocks, named in the exit that reached it, so
//! the lookup reads them with no other table between (a leaf of more
//! blocks than an exit counts names its node, and the lookup reads its
//! step). Only the one-packet walk of a copy whose overlay rewrote no
//! leaf reads them (a burst's lanes walk the steps, as does one packet
//! where a leaf may have moved to the overlay), and only in IPv4 trees: a
//! quad packs a 32-bit cut beside each exit. A
//! tree with more quads than an exit can number (2^20) has none, and its
//! packets walk the steps one level at a time, as IPv6's do.
//!
//! One packet at a time, against the steps' walk (alternated runs,
//! `bench/results/classbench_quads_ab.csv`): 1.15× acl1_1k, 1.18×
//! acl1_10k, 1.10× ipc1_10k, 1.05× acl1_100k (0.90× while its walk still
//! read the leaf's step after the quads: two tables a packet instead of
//! one, on a set whose walk misses the caches). Tried and not kept: a
//! walk of as many quads as the root cell's height (no branch on the
//! leaf), 0.87× acl1_1k and 0.83× acl1_10k: the exit's branch is cheaper
//! than the levels a walk would take past its leaf.

use hashbrown::HashMap;

use super::node::{Fields, Node, Word, ZERO_FIELD};

/// An exit that is a leaf: its first block in the low [`BLOCK_BITS`] and
/// how many blocks it has in the [`COUNT_BITS`] above (the lookup reads
/// them straight from the tree's blocks, with no other table between);
/// or with [`BIG`] too, a leaf of more blocks than that counts, by its node
/// in the bits below.
const LEAF: u32 = 1 << 31;
const BIG: u32 = 1 << 30;
const BLOCK_BITS: u32 = 27;
const COUNT_BITS: u32 = 3;
const _: () = assert!(BLOCK_BITS + COUNT_BITS < 31);
/// Bits of an exit that number its quad; each of its three fields takes
/// the next three bits in turn (the node's, its left child's, its right
/// child's).
const QUAD_BITS: u32 = 20;
const FIELD_BITS: u32 = 3;
const _: () = assert!(QUAD_BITS + 3 * FIELD_BITS < 31);

/// A node with its two children (see the module docs): four words, each
/// a grandchild's exit in its high half (the left child's two first) and
/// a cut in its low one: the left child's in the first, the node's in the
/// second, the right child's in the third.
#[derive(Clone, Copy, Debug)]
pub(super) struct Quad {
    words: [u64; 4],
}

/// A tree's quads, where its walks start, and the exit of each root-table
/// cell (in the cells' order).
#[derive(Debug, Default)]
pub(super) struct Quads {
    quads: Vec<Quad>,
    root: u32,
    cells: Vec<u32>,
}

impl Quads {
    /// The quads of the tree `nodes`, starting at its root and at each of
    /// `starts` (the root table's cells' nodes, in order); `None` when they
    /// are too many to number.
    pub(super) fn build<W: Word>(
        nodes: &[Node<W>],
        spans: &[(u32, u32)],
        starts: impl Iterator<Item = u32>,
    ) -> Option<Self> {
        if W::V6 || nodes.len() >= BIG as usize {
            return None;
        }
        let mut b = Builder {
            nodes,
            spans,
            quads: Vec::new(),
            made: HashMap::new(),
        };
        let root = b.exit(0)?;
        let cells = starts.map(|n| b.exit(n)).collect::<Option<Vec<u32>>>()?;
        let mut quads = b.quads;
        quads.shrink_to_fit();
        Some(Self { quads, root, cells })
    }

    /// Heap bytes.
    pub(super) fn bytes(&self) -> usize {
        self.quads.capacity() * std::mem::size_of::<Quad>()
            + self.cells.capacity() * std::mem::size_of::<u32>()
    }

    /// The leaf `f` reaches from root-table cell `cell` (`None`: from the
    /// root): its blocks, first and how many, or for a leaf of many
    /// blocks its node.
    #[inline(always)]
    pub(super) fn walk<W: Word>(
        &self,
        f: &Fields<W>,
        cell: Option<usize>,
    ) -> Result<(usize, usize), u32> {
        let mut e = cell.map_or(self.root, |c| self.cells[c]);
        while e & LEAF == 0 {
            let q = &self.quads[(e & ((1 << QUAD_BITS) - 1)) as usize];
            let field = |k: u32| f[((e >> (QUAD_BITS + k * FIELD_BITS)) & 7) as usize];
            // Each word is read once for its cut and its exit, so the
            // exits are in registers when the turns are known. (Kept
            // apart, LLVM selected the exit's address and read it after
            // the compares: a second load in a row a quad.)
            let [w0, w1, w2, w3] = q.words;
            let exit = |w: u64| (w >> 32) as u32;
            let cut = |w: u64| W::from_u32(w as u32);
            use std::hint::select_unpredictable as pick;
            let left = pick(field(1) >= cut(w0), exit(w1), exit(w0));
            let right = pick(field(2) >= cut(w2), exit(w3), exit(w2));
            e = pick(field(0) >= cut(w1), right, left);
        }
        if e & BIG != 0 {
            return Err(e & !(LEAF | BIG));
        }
        let first = e & ((1 << BLOCK_BITS) - 1);
        let count = (e >> BLOCK_BITS) & ((1 << COUNT_BITS) - 1);
        Ok((first as usize, count as usize))
    }
}

struct Builder<'a, W> {
    nodes: &'a [Node<W>],
    /// The leaves' spans (their rules: how many in each).
    spans: &'a [(u32, u32)],
    quads: Vec<Quad>,
    /// The exit of each node that has a quad.
    made: HashMap<u32, u32>,
}

impl<W: Word> Builder<'_, W> {
    /// The exit to node `n`: its leaf, or its quad (made once).
    fn exit(&mut self, n: u32) -> Option<u32> {
        let node = self.nodes[n as usize];
        if node.is_leaf() {
            let rules = self.spans.get(node.kids[1] as usize).map_or(0, |s| s.1);
            let count = (rules as usize).div_ceil(cfdp_acl_simd::LANES);
            let first = node.first_block();
            return Some(if count >> COUNT_BITS == 0 && first >> BLOCK_BITS == 0 {
                LEAF | ((count as u32) << BLOCK_BITS) | first as u32
            } else {
                LEAF | BIG | n
            });
        }
        if let Some(&e) = self.made.get(&n) {
            return Some(e);
        }
        let q = u32::try_from(self.quads.len())
            .ok()
            .filter(|&q| q < 1 << QUAD_BITS)?;
        // A leaf child: the zero field against the largest value goes
        // left, to the leaf either way.
        let nodes = self.nodes;
        let child = |k: u32| {
            let c = nodes[k as usize];
            if c.is_leaf() {
                (ZERO_FIELD, W::MAX, [k, k])
            } else {
                (c.field, c.at, c.kids)
            }
        };
        let (lf, lat, [a, b]) = child(node.kids[0]);
        let (rf, rat, [c, d]) = child(node.kids[1]);
        self.quads.push(Quad { words: [0; 4] });
        let e = q
            | (node.field << QUAD_BITS)
            | (lf << (QUAD_BITS + FIELD_BITS))
            | (rf << (QUAD_BITS + 2 * FIELD_BITS));
        self.made.insert(n, e);
        let exits = [self.exit(a)?, self.exit(b)?, self.exit(c)?, self.exit(d)?];
        let cuts = [lat.low(), node.at.low(), rat.low(), 0];
        self.quads[q as usize].words =
            [0, 1, 2, 3].map(|i| (u64::from(exits[i]) << 32) | u64::from(cuts[i]));
        Some(e)
    }
}
