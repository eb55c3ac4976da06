//! The compiled layer: a decision tree over the five header fields per
//! address family, rebuilt from a snapshot of the rules, beside the live
//! tuple space.
//!
//! The tree is HyperSplit's (Qi, Xu, Yang, Li, "Packet Classification
//! Algorithms: From Theory to Practice", INFOCOM 2009): every inner node
//! cuts one field's range in two at a rule boundary, chosen so that the
//! larger side holds as few rules as possible (rules spanning the cut go to
//! both sides); a node with at most a leaf size of rules ([`LEAF_SIZES`]), or whose rules no
//! cut separates, is a leaf that lists them best first. Ports are fields
//! like the addresses: rules that differ only in ports are told apart by
//! the tree, not scanned (a bucket of K such rules cost the tuple space K
//! checks a packet).
//!
//! A lookup is a fixed walk: one compare and one load a level, no data-
//! dependent branch (a leaf points to itself, so a packet that reached one
//! stays), then a leaf scan that stops at the first live match. A burst is
//! walked sixteen packets at a time, level by level, so the loads of
//! different packets overlap instead of waiting on each other; where the
//! leaf kernel's crate has a vector walk for the CPU (AVX-512 with fast
//! gathers), an IPv4 burst goes down [`LANES`] at a time by it. One IPv4
//! packet alone goes down two levels a step (`quad.rs`). An IPv4
//! walk starts where its addresses' top bits lead (`root.rs`), and a leaf
//! is scanned eight rules at a time by the vector kernel (`cfdp-acl-simd`:
//! a bit per matching rule, the first live one taken); every lane's leaf
//! is prefetched before any is scanned.
//!
//! Rules deleted or modified since the compile stay in the tree and are
//! skipped through a dead bitmap the caller keeps (one bit per compiled
//! rule): every leaf lists *every* rule that can match a packet reaching
//! it, in rank order, so the first live match is the exact winner among the
//! compiled rules whatever was deleted.
//!
//! Rules inserted since the compile go into the tree too where they touch
//! few leaves ([`overlay`]): the caller's [`Overlay`] rewrites those
//! leaves' lists in its own memory, so a churned set keeps the tree's
//! speed without a recompile; a rule that would touch many leaves, or
//! lengthen one past a bound, is left to the caller's tuple space.
//!
//! IPv6 rules get their own tree ([`Layer`]`<u128>`), built and walked by
//! the same code over 128-bit fields: a prefix is a range of 128-bit
//! values as an IPv4 prefix is of 32-bit ones. Its nodes and leaf blocks
//! are wider (32 bytes against 16 a node, 448 against 192 a block of eight
//! rules), so the same set costs about twice the memory in IPv6, and it
//! has no root table (the IPv6 sets here share their leading bits).

use cfdp_acl_simd::{Kernel, WALK_LANES};
use cfdp_rules::{AclRule, RuleId};
use hashbrown::HashMap;

use super::word::Packet;

mod build;
mod node;
pub mod overlay;
mod patch;
mod quad;
mod root;

pub use node::{field, fields, Answer, Fields, Hit, Input, Word};
use node::{Item, Node, Step, KID_BITS, RIGHT, ZERO_FIELD};
pub use overlay::{Dead, Overlay, PatchRefused, PATCH_EXTRA, PATCH_LEAVES};
use root::Root;

/// Rules a leaf may hold before the builder tries to cut it: the sizes a
/// compile tries in turn, smallest (fastest where it fits) first.
pub const LEAF_SIZES: [usize; 2] = [8, 32];
/// Packets walked together at most (see the module docs): two groups of
/// the vector walk's sixteen, whose levels overlap; the walk one lane at a
/// time takes sixteen ([`Layer::lanes`]).
pub const LANES: usize = 32;
const _: () = assert!(LANES.is_multiple_of(cfdp_acl_simd::WALK_LANES));

/// Leaf entries the tree may hold per rule, as a multiple of its leaf
/// size in halves (3: one and a half times; plus [`BUDGET_SLACK`]): a rule wide on a field that others cut
/// finely is copied into every part of the cut, and a tree that multiplies
/// the rules past the budget is given up for the next leaf size, then
/// refused (the caller keeps the set in the tuple space, exact either way).
/// Measured on the ClassBench sets (`bench/results/classbench_compiled_tried.csv`):
/// leaves of 8 cost acl1_10k 6 entries a rule and ran 22 % faster than
/// leaves of 32; ipc1_10k fits only with leaves of 32 (32 a rule; 1,200
/// with leaves of 8) and ran 1.5× its tuple space; acl1_100k took 23 a
/// rule with leaves of 8 (114 MB) and ran slower than its tuple space,
/// 18 with leaves of 16 (88 MB, as slow), 4.6 with leaves of 32 (36 MB,
/// 1.4× its tuple space); fw1_10k needs 178 a rule even with leaves of 32
/// and ran slower compiled than in the tuple space, also as trees per
/// group of prefix widths (CutSplit's partition).
pub const BUDGET_PER_LEAF_RULE: usize = 3;
pub const BUDGET_SLACK: usize = 4096;

/// Picks the part of a family whose whole tree is over the budget that a
/// tree should hold: that tree, and how many of the family's rules it
/// leaves out; `None` keeps the whole family out of the compiled layer.
/// The tree builder does not choose (the choice weighs the tuple space
/// the rest would go to: `acl/partial.rs`).
pub type Part<W> = fn(&[&Input]) -> Option<(Layer<W>, usize)>;

/// A packet's fields as the tree reads them.
#[inline(always)]
pub(super) fn packet_fields<W: Word>(p: &Packet<W>) -> Fields<W> {
    fields(p.src, p.dst, p.sport, p.dport, p.proto)
}

/// The tree.
#[derive(Debug, Default)]
struct Tree<W: Word> {
    nodes: Vec<Node<W>>,
    /// The same tree for the vector walk, and for one packet's walk
    /// where there are no quads (see [`Step`]).
    steps: Vec<Step<W>>,
    /// Leaf spans, (start, len): where each leaf's rules start among all
    /// leaves' rules as the build listed them (a leaf's identity; the
    /// lists themselves live in `blocks`), and how many it holds.
    spans: Vec<(u32, u32)>,
    /// Leaf entries, all leaves (a rule counted once a leaf).
    entries: usize,
    /// The leaves' rules again as the vector kernel reads them (eight a
    /// block, a leaf's blocks in a row, lanes past a leaf's rules never
    /// matching); a leaf node names its first block (see [`Node`]).
    blocks: Vec<W::Block>,
    /// IPv4 only: where a walk starts, by the addresses' top bits.
    root: Root,
    /// The tree for one packet's walk two levels a step (IPv4; none for
    /// IPv6 or where too large: the steps then).
    quads: Option<quad::Quads>,
    depth: u32,
}

/// The compiled layer of a snapshot of rules: one tree per address family
/// (see the module docs); a family with no rules, or whose tree would
/// exceed the budget, has none and stays in the caller's tuple space —
/// unless [`Compiled::build_with`]'s chooser picks a part of it to compile
/// ([`Compiled::left`] counts the rest).
#[derive(Debug, Default)]
pub struct Compiled {
    pub v4: Option<Layer<u32>>,
    pub v6: Option<Layer<u128>>,
    /// Why a family with rules was not compiled whole, if one was not.
    pub refused: Option<CompileError>,
    /// Rules of the input no tree holds (a refused family's, or the rest
    /// of a family compiled in part): the caller's tuple space keeps
    /// them, and a recompile of the same rules would leave them there too.
    pub left: usize,
}

impl Compiled {
    /// Rules compiled, both families.
    pub fn len(&self) -> usize {
        self.v4.as_ref().map_or(0, Layer::len) + self.v6.as_ref().map_or(0, Layer::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs the leaf kernel's version `k` in both trees; a build starts
    /// with the CPU's best.
    pub fn set_kernel(&mut self, k: Kernel) {
        if let Some(l) = &mut self.v4 {
            l.set_kernel(k);
        }
        if let Some(l) = &mut self.v6 {
            l.set_kernel(k);
        }
    }

    /// Heap bytes, both families.
    pub fn bytes(&self) -> usize {
        self.v4.as_ref().map_or(0, Layer::bytes) + self.v6.as_ref().map_or(0, Layer::bytes)
    }
}

/// One family's compiled tree (see the module docs).
#[derive(Debug, Default)]
pub struct Layer<W: Word> {
    tree: Tree<W>,
    /// The leaf size that fit the budget.
    leaf: usize,
    hits: Vec<Hit>,
    /// The rules as compiled, by index: what an install compares with the
    /// rule set it meets.
    rules: Vec<AclRule>,
    index: HashMap<RuleId, u32>,
    /// The leaf kernel's version (the CPU's best unless a test chose).
    kernel: Kernel,
}

/// Why a snapshot could not be compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    #[error("rule id {0} is of the other address family than this tree")]
    WrongFamily(RuleId),
    #[error("rule id {0} is given twice")]
    Duplicate(RuleId),
    /// The tree would copy the rules past [`BUDGET_PER_LEAF_RULE`] with
    /// every leaf size.
    #[error("{rules} rules need more than {budget} leaf entries (see BUDGET_PER_LEAF_RULE)")]
    OverBudget { rules: usize, budget: usize },
}

impl<W: Word> Layer<W> {
    /// The leaf size the tree was built with (see [`LEAF_SIZES`]).
    pub fn leaf_size(&self) -> usize {
        self.leaf
    }

    /// Rules compiled (live or dead).
    pub fn len(&self) -> usize {
        self.hits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hits.is_empty()
    }

    /// The compiled index of rule `id`.
    pub fn index_of(&self, id: RuleId) -> Option<u32> {
        self.index.get(&id).copied()
    }

    /// The answer of compiled rule `idx`.
    pub fn hit(&self, idx: u32) -> &Hit {
        &self.hits[idx as usize]
    }

    /// Compiled rule `idx` as it was compiled.
    pub fn rule(&self, idx: u32) -> &AclRule {
        &self.rules[idx as usize]
    }

    /// Heap bytes of the trees, their leaves, the answers and the id index.
    pub fn bytes(&self) -> usize {
        let t = &self.tree;
        t.nodes.capacity() * std::mem::size_of::<Node<W>>()
            + t.steps.capacity() * std::mem::size_of::<Step<W>>()
            + t.spans.capacity() * std::mem::size_of::<(u32, u32)>()
            + t.blocks.capacity() * std::mem::size_of::<W::Block>()
            + t.root.bytes()
            + t.quads.as_ref().map_or(0, quad::Quads::bytes)
            + self.hits.capacity() * std::mem::size_of::<Hit>()
            + self.rules.capacity() * std::mem::size_of::<AclRule>()
            + self.index.capacity() * (std::mem::size_of::<(RuleId, u32)>() + 1)
    }

    /// Trees (one), tree nodes, leaf entries (rules counted once per
    /// leaf), and the deepest leaf's depth.
    pub fn shape(&self) -> (usize, usize, usize, u32) {
        let t = &self.tree;
        (1, t.steps.len(), t.entries, t.depth)
    }

    /// What one packet's lookup costs: tree levels walked (from its root
    /// table's start) and leaf entries compared (for the benchmarks, as
    /// the tuple space counts tables probed).
    pub fn cost(&self, f: &Fields<W>, o: &Overlay<W>) -> (u32, u32) {
        let t = &self.tree;
        let mut levels = 0;
        let mut n = t.root.start(f).map_or(0, |(node, _, _)| node);
        while !t.nodes[n as usize].is_leaf() {
            let node = &t.nodes[n as usize];
            n = node.kids[usize::from(f[node.field as usize] >= node.at)];
            levels += 1;
        }
        let items = self.leaf_items(n, o);
        let scanned = items
            .iter()
            .position(|it| it.matches(f) && o.answer_of(it.idx).is_some())
            .map_or(items.len(), |i| i + 1);
        (levels, scanned as u32)
    }

    /// The best live compiled rule for one packet.
    #[inline]
    pub fn lookup<'a>(&'a self, f: &Fields<W>, o: &'a Overlay<W>) -> Option<&'a Hit> {
        let t = &self.tree;
        let blocks = match &t.quads {
            // Where the tree has quads and no leaf moved to the overlay:
            // two levels a step, to the leaf's blocks.
            Some(q) if o.rewrote_none() => match q.walk(f, t.root.cell(f)) {
                Ok((first, count)) => &t.blocks[first..first + count],
                Err(leaf) => t.step_blocks(leaf),
            },
            _ => {
                let leaf = t.walk(f);
                if o.rewrote_none() {
                    t.step_blocks(leaf)
                } else {
                    self.leaf_blocks(leaf, o)
                }
            }
        };
        self.scan_blocks(blocks, f, o).map(|i| self.hit_in(o, i))
    }

    /// The answer of rule `idx`, compiled or patched in (see [`overlay`]).
    #[inline(always)]
    pub fn hit_in<'a>(&'a self, o: &'a Overlay<W>, idx: u32) -> &'a Hit {
        // A select, not a branch: after a churn the rules revived or
        // patched in (in the overlay's answers) are a tenth of the
        // matches, at random, and a branch on it mispredicted as often.
        if o.hits.is_empty() {
            // Nothing patched or revived: every answer is the tree's.
            return &self.hits[idx as usize];
        }
        let n = self.hits.len();
        let patched = idx as usize >= n;
        let (hits, at) = std::hint::select_unpredictable(
            patched,
            (&o.hits[..], (idx as usize).wrapping_sub(n)),
            (&self.hits[..], idx as usize),
        );
        &hits[at]
    }

    /// The rules leaf `node` lists, as the overlay has them (a rewritten
    /// leaf's list, or the compiled one), read back from its blocks.
    fn leaf_items(&self, node: u32, o: &Overlay<W>) -> Vec<Item<W>> {
        let span = self.tree.nodes[node as usize].kids[1] as usize;
        let len = o.spans[span].1 as usize;
        let lanes = cfdp_acl_simd::LANES;
        let blocks = self.leaf_blocks(node, o);
        (0..len)
            .map(|i| Item::of(W::rule(&blocks[i / lanes], i % lanes)))
            .collect()
    }

    /// Leaf `node`'s blocks: the tree's, or the overlay's for a leaf it
    /// rewrote.
    #[inline(always)]
    fn leaf_blocks<'a>(&'a self, node: u32, o: &'a Overlay<W>) -> &'a [W::Block] {
        let node = &self.tree.nodes[node as usize];
        let (start, len) = o.spans[node.kids[1] as usize];
        if start & overlay::PATCHED != 0 {
            return o.blocks_of(start, len);
        }
        self.tree.leaf_blocks(node.first_block(), len)
    }

    /// The first live rule of leaf `node` matching `f`: eight rules at a
    /// time through the vector kernel, over the tree's blocks or, for a
    /// leaf the overlay rewrote, the overlay's.
    #[inline(always)]
    fn scan(&self, node: u32, f: &Fields<W>, o: &Overlay<W>) -> Option<u32> {
        self.scan_blocks(self.leaf_blocks(node, o), f, o)
    }

    /// [`Self::scan`] over a leaf's blocks.
    #[inline(always)]
    fn scan_blocks(&self, blocks: &[W::Block], f: &Fields<W>, o: &Overlay<W>) -> Option<u32> {
        use node::field::{DPORT, DST, PROTO, SPORT, SRC};
        let (sport, dport) = (f[SPORT].low() as u16, f[DPORT].low() as u16);
        let key = W::key(f[SRC], f[DST], sport, dport, f[PROTO].low());
        if o.dead.count() == 0 {
            // No rule dead (a set compiled and not changed since): the
            // first match wins, with no bitmap read between the kernel's
            // bits and the answer.
            for b in blocks {
                let m = W::matches(self.kernel, b, &key);
                if m != 0 {
                    return Some(W::idx(b)[m.trailing_zeros() as usize]);
                }
            }
            return None;
        }
        for b in blocks {
            let mut m = W::matches(self.kernel, b, &key);
            // The matches in rank order: the first live one wins (the
            // rule itself, or the one revived in its place).
            while m != 0 {
                if let Some(a) = o.answer_of(W::idx(b)[m.trailing_zeros() as usize]) {
                    return Some(a);
                }
                m &= m - 1;
            }
        }
        None
    }

    /// What [`Self::scan`] reads first for leaf `node`, asked for ahead:
    /// the leaf's first block, every line of it (the kernel reads every
    /// column).
    #[inline(always)]
    fn prefetch_leaf(&self, node: u32, o: &Overlay<W>) {
        // From the leaf node alone, which the walk just read: the span the
        // scan reads first and the tree's first block (a leaf the overlay
        // rewrote has its blocks elsewhere: this fetch is wasted there).
        // Through the span and a table of first blocks, each prefetch
        // waited on two more loads.
        let node = &self.tree.nodes[node as usize];
        if let Some(span) = o.spans.get(node.kids[1] as usize) {
            cfdp_packet::prefetch::prefetch_read(std::ptr::from_ref(span).cast());
        }
        if let Some(b) = self.tree.blocks.get(node.first_block()) {
            let b = std::ptr::from_ref(b).cast::<u8>();
            for line in 0..std::mem::size_of::<W::Block>() / 64 {
                cfdp_packet::prefetch::prefetch_read(b.wrapping_add(64 * line));
            }
        }
    }

    /// Runs the leaf kernel's version `k` from now on (tests compare the
    /// versions; the layer starts with the CPU's best).
    pub fn set_kernel(&mut self, k: Kernel) {
        self.kernel = k;
    }

    /// How many packets a burst should hand [`Self::lookup_lanes`] at
    /// once: [`LANES`] for the vector walk (two groups of sixteen, whose
    /// levels overlap), sixteen for the walk one lane at a time (wider,
    /// it walked slower: more levels, the deepest lane's, more spills).
    pub fn lanes(&self) -> usize {
        if self.walks_vector() {
            LANES
        } else {
            WALK_LANES
        }
    }

    /// Whether bursts go down this tree by the kernel's vector walk
    /// (IPv4 only).
    #[inline(always)]
    fn walks_vector(&self) -> bool {
        self.kernel.walks() && !W::V6
    }

    /// [`Self::lookup`] for up to [`LANES`] packets at once: each tree's
    /// walks go level by level over all of them (see the module docs).
    #[inline]
    pub fn lookup_lanes<'a, const L: usize>(
        &'a self,
        fs: &[Fields<W>],
        o: &'a Overlay<W>,
        out: &mut [Option<&'a Hit>],
    ) {
        debug_assert!(fs.len() <= L && L <= LANES && out.len() >= fs.len());
        let n = fs.len();
        if n == 0 {
            return;
        }
        let t = &self.tree;
        let mut at = [0u32; L];
        const WL: usize = WALK_LANES;
        if self.walks_vector() && t.walk_vector(self.kernel, fs, &mut at) {
            return self.scan_lanes(&at, fs, o, out);
        }
        // Otherwise one by one, a group at a time: a group's chains of
        // loads overlap, and wider groups only walked more levels (the
        // deepest lane's) with more spills. Fixed-width groups: the
        // unused lanes of the last walk the first packet again, so the
        // walk has no bound but the group's width.
        for (at, group) in at.as_chunks_mut::<WL>().0.iter_mut().zip(fs.chunks(WL)) {
            // A whole group (a burst's common case) is walked where it
            // is, not copied.
            let padded;
            let lanes: &[Fields<W>; WL] = match group.try_into() {
                Ok(whole) => whole,
                Err(_) => {
                    let mut p = [group[0]; WL];
                    p[..group.len()].copy_from_slice(group);
                    padded = p;
                    &padded
                }
            };
            t.walk_group(at, lanes);
        }
        self.scan_lanes(&at, fs, o, out);
    }

    /// Each of `fs`'s leaves (`at`: the lanes' leaves) scanned for its
    /// winner.
    #[inline(always)]
    fn scan_lanes<'a>(
        &'a self,
        at: &[u32],
        fs: &[Fields<W>],
        o: &'a Overlay<W>,
        out: &mut [Option<&'a Hit>],
    ) {
        let n = fs.len();
        // Every lane's leaf asked for before any is scanned: the leaves'
        // misses overlap as the walks' did.
        for &a in &at[..n] {
            self.prefetch_leaf(a, o);
        }
        for i in 0..n {
            out[i] = self.scan(at[i], &fs[i], o).map(|x| self.hit_in(o, x));
        }
    }
}

impl<W: Word> Tree<W> {
    /// Each of `fs`'s leaves by the vector walk of `kernel` into `at`
    /// (`false`: this kernel and family have none). Apart from the walk
    /// one lane at a time, so that neither's registers crowd the other's.
    #[inline(never)]
    fn walk_vector(&self, kernel: Kernel, fs: &[Fields<W>], at: &mut [u32]) -> bool {
        // From each lane's start (its root cell's node, or the root),
        // until every lane is at a leaf.
        let start = self.root.table(self.nodes[0].field);
        if !W::walk_rows(kernel, &self.steps, &start, fs, self.depth, at) {
            return false;
        }
        debug_assert!(
            at[..fs.len()]
                .iter()
                .all(|&n| self.nodes[n as usize].is_leaf()),
            "every lane at a leaf"
        );
        true
    }

    /// Each of a group of lanes from its start to its leaf, level by
    /// level over all of them.
    #[inline(always)]
    fn walk_group(&self, at: &mut [u32; WALK_LANES], lanes: &[Fields<W>; WALK_LANES]) {
        // Each lane from its cell's start where there is a root table, and
        // only as many levels as the deepest start has left.
        let mut levels = self.depth;
        if !self.root.is_empty() {
            levels = 0;
            for (a, f) in at.iter_mut().zip(lanes) {
                let (node, _, left) = self.root.start(f).unwrap_or((0, 0, self.depth));
                *a = node;
                levels = levels.max(left);
            }
        }
        // The nodes as a slice whose length the compiler knows to be
        // `mask + 1`: indices masked by `mask` need no bounds check.
        let mask = self.nodes.len() - 1;
        let nodes = &self.nodes[..=mask];
        // Every walk ends by `depth` steps (a leaf loops to itself):
        // exactly that many, with no test of whether all have ended
        // (the test cost more than the steps it saved).
        for _ in 0..levels {
            for (a, f) in at.iter_mut().zip(lanes) {
                let node = &nodes[*a as usize & mask];
                *a = node.kids[usize::from(f[(node.field & 7) as usize] >= node.at)];
            }
        }
    }

    /// The blocks of a leaf of `len` rules as built, from block `first`.
    #[inline(always)]
    fn leaf_blocks(&self, first: usize, len: u32) -> &[W::Block] {
        &self.blocks[first..first + (len as usize).div_ceil(cfdp_acl_simd::LANES)]
    }

    /// Leaf `leaf`'s blocks as built, from its step (the walk's own
    /// array: no load of its node and then its span first).
    #[inline(always)]
    fn step_blocks(&self, leaf: u32) -> &[W::Block] {
        let s = &self.steps[leaf as usize];
        self.leaf_blocks((s.at.low() as usize).wrapping_sub(1), s.link)
    }

    /// The leaf `f` reaches, one packet alone, by the steps (see [`Step`];
    /// [`Layer::lookup`] takes the quads where it can).
    #[inline(always)]
    fn walk(&self, f: &Fields<W>) -> u32 {
        // The start's field from the root table's cell (or the root's
        // node); below it, each node's field comes with the choice of
        // that node.
        let (mut n, mut field) = match self.root.start(f) {
            Some((node, field, _)) => (node, field),
            None => (0, self.nodes[0].field),
        };
        while field != ZERO_FIELD {
            let s = self.steps[n as usize];
            let right = f[(field & 7) as usize] >= s.at;
            // Selects, not a branch: the turn is data (a branch on it
            // mispredicts about every other level). LLVM still branches
            // on a 128-bit compare (IPv6), as it did before.
            use std::hint::select_unpredictable as pick;
            n = pick(right, s.link & RIGHT, n + 1);
            field = pick(right, s.link >> (KID_BITS + 3), (s.link >> KID_BITS) & 7);
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::{AclMatch, Action, PortRange};

    /// 2,000 rules on one prefix pair, one destination port each (1000 on),
    /// priority rising with the port.
    fn port_rules() -> Vec<Input> {
        (0..2000u32)
            .map(|i| {
                let p = 1000 + i as u16;
                rule(i + 1, i, "10.0.0.0/8", "192.168.0.0/16", (p, p))
            })
            .collect()
    }

    fn rule(id: u32, prio: u32, src: &str, dst: &str, dport: (u16, u16)) -> Input {
        Input {
            rule: AclRule {
                id,
                priority: prio,
                matcher: AclMatch::new(
                    src.parse().unwrap(),
                    dst.parse().unwrap(),
                    Some(6),
                    PortRange::ANY,
                    PortRange::new(dport.0, dport.1).unwrap(),
                )
                .unwrap(),
                action: Action::Drop,
            },
            tag: id * 10,
            slot: id,
        }
    }

    fn f(src: [u8; 4], dst: [u8; 4], dport: u16) -> Fields<u32> {
        fields(
            u32::from_be_bytes(src),
            u32::from_be_bytes(dst),
            1234,
            dport,
            6,
        )
    }

    #[test]
    fn rules_differing_only_in_ports_are_cut_not_scanned() {
        // 2,000 rules on one prefix pair, one port each: the tree cuts the
        // port field until each leaf holds at most the first leaf size.
        let rules = port_rules();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let o = c.overlay();
        let (_, _, items, depth) = c.shape();
        assert!(items <= 2 * rules.len(), "{items} leaf entries");
        assert!(depth <= 16, "depth {depth}");
        let hit = c.lookup(&f([10, 1, 1, 1], [192, 168, 3, 4], 1500), &o);
        assert_eq!(hit.map(|h| h.answer.id), Some(501));
        assert_eq!(hit.map(|h| h.answer.tag), Some(5010));
        assert!(c
            .lookup(&f([10, 1, 1, 1], [192, 168, 3, 4], 999), &o)
            .is_none());
        assert!(c
            .lookup(&f([11, 1, 1, 1], [192, 168, 3, 4], 1500), &o)
            .is_none());
    }

    /// The leaf `f` reaches from the root, node by node: what every
    /// shortcut (root table, steps, quads) must agree with.
    fn node_walk<W: Word>(t: &Tree<W>, f: &Fields<W>) -> u32 {
        let mut n = 0;
        while !t.nodes[n as usize].is_leaf() {
            let node = &t.nodes[n as usize];
            n = node.kids[usize::from(f[node.field as usize] >= node.at)];
        }
        n
    }

    #[test]
    fn one_packets_walks_reach_the_leaf_the_nodes_lead_to() {
        // Rules on a few hundred prefixes of every length and port ranges,
        // and packets near them: a tree deep enough for a root table and
        // quads at every parity of depth.
        use proptest::prelude::Rng;
        use proptest::test_runner::{RngAlgorithm, TestRng};
        let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
        let mut next = move || rng.next_u64();
        let addr = |r: u64| {
            let a = (r as u32) & 0xff0f_f0ff;
            let len = (r >> 32) as u8 % 33;
            (a, len)
        };
        // Sixty rules no cut tells apart: a leaf of more blocks than a
        // quad's exit counts.
        let same =
            (0..60u32).map(|i| rule(5000 + i, i, "10.0.0.0/8", "192.168.0.0/16", (5000, 5000)));
        let rules: Vec<Input> = (0..3000u32)
            .map(|i| {
                let (s, sl) = addr(next());
                let (d, dl) = addr(next());
                let lo = (next() % 2000) as u16;
                let hi = lo + (next() % 300) as u16;
                let p = |a: u32, l: u8| {
                    let m = u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0);
                    format!("{}/{l}", std::net::Ipv4Addr::from(a & m))
                };
                rule(i + 1, i % 97, &p(s, sl), &p(d, dl), (lo, hi))
            })
            .chain(same)
            .collect();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let t = &c.tree;
        assert!(!t.root.is_empty(), "a root table");
        let q = t.quads.as_ref().expect("quads");
        let mut hits = 0;
        let big = fields(0x0a01_0203, 0xc0a8_0101, 1, 5000, 6);
        assert!(
            q.walk(&big, t.root.cell(&big)).is_err(),
            "a leaf by its node"
        );
        for i in 0..50_000 {
            let (s, _) = addr(next());
            let (d, _) = addr(next());
            let mut f = fields(s, d, (next() % 65536) as u16, (next() % 2400) as u16, 6);
            if i % 100 == 0 {
                f = big;
                f[0] ^= (next() & 0xffff) as u32;
            }
            let want = node_walk(t, &f);
            assert_eq!(t.walk(&f), want, "steps");
            // The quads end at the leaf's blocks.
            let blocks = t.step_blocks(want).as_ptr_range();
            let got = |r: Result<(usize, usize), u32>| match r {
                Ok((first, n)) => t.blocks[first..first + n].as_ptr_range(),
                Err(leaf) => t.step_blocks(leaf).as_ptr_range(),
            };
            assert_eq!(
                got(q.walk(&f, t.root.cell(&f))),
                blocks,
                "quads, from the cell"
            );
            assert_eq!(got(q.walk(&f, None)), blocks, "quads, from the root");
            hits += usize::from(c.lookup(&f, &c.overlay()).is_some());
        }
        assert!(hits > 1000, "{hits} packets matched");
    }

    #[test]
    fn a_built_layer_keeps_no_spare_capacity() {
        // `bytes` counts capacity (what the heap holds): the build's
        // pushes must not leave the tables up to twice their length.
        let rules = port_rules();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let t = &c.tree;
        let spare = [
            t.nodes.capacity() - t.nodes.len(),
            t.steps.capacity() - t.steps.len(),
            t.spans.capacity() - t.spans.len(),
            t.blocks.capacity() - t.blocks.len(),
            c.hits.capacity() - c.hits.len(),
            c.rules.capacity() - c.rules.len(),
        ];
        assert_eq!(spare, [0; 6]);
    }

    #[test]
    fn a_dead_winner_gives_way_to_the_next_match() {
        let rules = [
            rule(1, 30, "10.1.0.0/16", "0.0.0.0/0", (80, 80)),
            rule(2, 20, "10.0.0.0/8", "0.0.0.0/0", (0, 65535)),
            rule(3, 10, "0.0.0.0/0", "0.0.0.0/0", (0, 65535)),
        ];
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let mut o = c.overlay();
        let p = f([10, 1, 2, 3], [1, 1, 1, 1], 80);
        let fs = [p; 3];
        for want in [Some(1), Some(2), Some(3), None] {
            assert_eq!(c.lookup(&p, &o).map(|h| h.answer.id), want);
            let mut out = [None; 3];
            c.lookup_lanes::<LANES>(&fs, &o, &mut out);
            assert!(out.iter().all(|h| h.map(|h| h.answer.id) == want));
            if let Some(id) = want {
                assert!(o.kill(c.index_of(id).unwrap()));
            }
        }
        assert_eq!(o.dead(), 3);
    }

    #[test]
    fn churned_rules_are_patched_in_and_old_lists_compacted() {
        // The 2,000 port rules, each deleted and inserted back (same id,
        // a new index) many times over: every insert lands in the tree,
        // the overlay compacts along the way, and every answer stays the
        // rule's own.
        let rules = port_rules();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let mut o = c.overlay();
        let mut compactions = 0;
        // Sixteen rounds: the answer index outgrows `overlay::TO_FIRST` on
        // the way, and a scan then reads the dead bitmap first.
        for round in 0..16u32 {
            for (k, r) in rules.iter().enumerate() {
                let id = r.rule.id;
                assert!(o.kill(c.live_index(&o, id).unwrap()));
                let before = o.stored();
                let idx = c.patch(&mut o, r).unwrap();
                compactions += usize::from(o.stored() < before);
                assert_eq!(c.live_index(&o, id), Some(idx));
                let probe = rules[(k * 7 + round as usize) % rules.len()];
                let p = f(
                    [10, 1, 1, 1],
                    [192, 168, 3, 4],
                    probe.rule.matcher.dport().lo(),
                );
                assert_eq!(c.lookup(&p, &o).map(|h| h.answer.id), Some(probe.rule.id));
            }
        }
        assert!(compactions > 0, "the overlay never compacted");
        // The lists' chunks never grew (a list that did not fit started a
        // new one): no patch copied the lists before it.
        let per_chunk = overlay::CHUNK / cfdp_acl_simd::LANES;
        assert!(o.blocks.len() > 1);
        assert!(o
            .blocks
            .iter()
            .all(|c| c.capacity() == per_chunk && c.len() <= per_chunk));
        assert_eq!(o.patched(), 32_000);
        // The 2,000 compiled rules, then 30,000 patched ones.
        assert_eq!(o.dead(), 32_000);
        assert!(o.to.len() > overlay::TO_FIRST);
        // Every rule again, single and in lanes.
        let fs: Vec<Fields<u32>> = rules
            .iter()
            .map(|r| f([10, 9, 9, 9], [192, 168, 0, 1], r.rule.matcher.dport().lo()))
            .collect();
        for (chunk, want) in fs.chunks(LANES).zip(rules.chunks(LANES)) {
            let mut out = [None; LANES];
            c.lookup_lanes::<LANES>(chunk, &o, &mut out);
            for (h, w) in out.iter().zip(want) {
                assert_eq!(h.map(|h| h.answer.id), Some(w.rule.id));
            }
        }
        // Every other rule deleted for good: its packets match nothing
        // (each rule is alone on its port), the others' still their own.
        for r in rules.iter().step_by(2) {
            assert!(o.kill(c.live_index(&o, r.rule.id).unwrap()));
        }
        for (chunk, want) in fs.chunks(LANES).zip(rules.chunks(LANES)) {
            let mut out = [None; LANES];
            c.lookup_lanes::<LANES>(chunk, &o, &mut out);
            for ((h, w), p) in out.iter().zip(want).zip(chunk) {
                let alive = (w.rule.id - rules[0].rule.id) % 2 == 1;
                let want = alive.then_some(w.rule.id);
                assert_eq!(h.map(|h| h.answer.id), want);
                assert_eq!(c.lookup(p, &o).map(|h| h.answer.id), want);
            }
        }
    }

    #[test]
    fn a_rule_under_a_new_id_takes_a_deleted_rules_place() {
        let rules = port_rules();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let mut o = c.overlay();
        // Rule 501 (priority 500, port 1500) deleted and put back as rule
        // 5000: it takes the compiled entries' place, however many
        // leaves they are in, and answers for them.
        let p = f([10, 1, 1, 1], [192, 168, 3, 4], 1500);
        assert!(o.kill(c.index_of(501).unwrap()));
        let n = rule(5000, 500, "10.0.0.0/8", "192.168.0.0/16", (1500, 1500));
        let idx = c.revive(&mut o, &n).expect("taken over");
        assert!(o.rewrote_none(), "no leaf rewritten");
        assert_eq!(c.live_index(&o, 5000), Some(idx));
        assert_eq!(c.lookup(&p, &o).map(|h| h.answer.id), Some(5000));
        // The compiled rule itself cannot come back in that place.
        assert!(c.revive(&mut o, &rules[500]).is_none());
        // A rule of the same priority patched in later with a lower id
        // than 5000 ranks first: the lists are kept in the order of the
        // rule that took the place, not of the one it took it from.
        let x = rule(3000, 500, "10.0.0.0/8", "192.168.0.0/16", (1500, 1500));
        c.patch(&mut o, &x).unwrap();
        assert_eq!(c.lookup(&p, &o).map(|h| h.answer.id), Some(3000));
        let mut out = [None; 1];
        c.lookup_lanes::<LANES>(&[p], &o, &mut out);
        assert_eq!(out[0].map(|h| h.answer.id), Some(3000));
        assert!(o.kill(c.live_index(&o, 3000).unwrap()));
        assert_eq!(c.lookup(&p, &o).map(|h| h.answer.id), Some(5000));
        assert!(o.kill(c.live_index(&o, 5000).unwrap()));
        assert!(c.lookup(&p, &o).is_none());
    }

    #[test]
    fn no_place_is_taken_over_past_a_rule_ranked_between() {
        // Equal priorities: rule 2 ranks between rule 1 and rule 3, so
        // rule 3 cannot take rule 1's place (it would rank ahead of rule
        // 2 there); it is patched in after rule 2 instead.
        let rules = [
            rule(1, 5, "10.0.0.0/8", "0.0.0.0/0", (80, 80)),
            rule(2, 5, "10.1.0.0/16", "0.0.0.0/0", (0, 65535)),
        ];
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let mut o = c.overlay();
        assert!(o.kill(c.index_of(1).unwrap()));
        let again = rule(3, 5, "10.0.0.0/8", "0.0.0.0/0", (80, 80));
        assert!(c.revive(&mut o, &again).is_none());
        c.patch(&mut o, &again).unwrap();
        let p = |src| f(src, [1, 1, 1, 1], 80);
        assert_eq!(
            c.lookup(&p([10, 1, 2, 3]), &o).map(|h| h.answer.id),
            Some(2)
        );
        assert_eq!(
            c.lookup(&p([10, 2, 2, 3]), &o).map(|h| h.answer.id),
            Some(3)
        );
        // Rule 2 deleted: rule 3, patched, ranks between it and rule 4.
        assert!(o.kill(c.index_of(2).unwrap()));
        let r2 = |id, prio, dport| rule(id, prio, "10.1.0.0/16", "0.0.0.0/0", dport);
        assert!(c.revive(&mut o, &r2(4, 5, (0, 65535))).is_none());
        // Not between it and rule 1's id (free again): only the same
        // match and priority take the place.
        assert!(c.revive(&mut o, &r2(1, 6, (0, 65535))).is_none());
        assert!(c.revive(&mut o, &r2(1, 5, (0, 65534))).is_none());
        assert!(c.revive(&mut o, &r2(1, 5, (0, 65535))).is_some());
        assert_eq!(
            c.lookup(&p([10, 1, 2, 3]), &o).map(|h| h.answer.id),
            Some(1)
        );
    }

    #[test]
    fn a_rule_touching_many_leaves_is_refused_whole() {
        let rules = port_rules();
        let c = Compiled::build(&rules).unwrap().v4.unwrap();
        let mut o = c.overlay();
        let wide = rule(5000, 5000, "10.0.0.0/8", "192.168.0.0/16", (0, 65535));
        assert_eq!(c.patch(&mut o, &wide), Err(PatchRefused::TooWide));
        assert_eq!((o.patched(), o.stored()), (0, 0));
        // One port more than a leaf may grow by: refused as a whole, the
        // leaves already rewritten for it are not kept.
        let mut id = 6000;
        let (err, items) = loop {
            id += 1;
            let items = (o.stored(), o.spans.clone());
            match c.patch(
                &mut o,
                &rule(id, 0, "10.0.0.0/8", "192.168.0.0/16", (1500, 1501)),
            ) {
                Ok(_) => continue,
                Err(e) => break (e, items),
            }
        };
        assert_eq!(err, PatchRefused::LeafFull);
        assert_eq!((o.stored(), o.spans.clone()), items);
        let patched = o.patched();
        assert!(
            (PATCH_EXTRA..=PATCH_EXTRA + c.leaf_size()).contains(&patched),
            "{patched}"
        );
        assert!(c.live_index(&o, id).is_none());
        assert!(c.live_index(&o, id - 1).is_some());
    }

    #[test]
    fn families_get_their_own_trees_and_duplicates_are_refused() {
        let mut r = rule(1, 1, "10.0.0.0/8", "0.0.0.0/0", (0, 65535));
        assert_eq!(
            Compiled::build(&[r, r]).unwrap_err(),
            CompileError::Duplicate(1)
        );
        let v4 = r;
        r.rule.id = 2;
        r.rule.matcher = AclMatch::new(
            "2001:db8::/32".parse().unwrap(),
            "::/0".parse().unwrap(),
            Some(6),
            PortRange::ANY,
            PortRange::new(80, 80).unwrap(),
        )
        .unwrap();
        let c = Compiled::build(&[v4, r]).unwrap();
        assert_eq!(c.v4.as_ref().map(Layer::len), Some(1));
        assert_eq!(c.v6.as_ref().map(Layer::len), Some(1));
        assert_eq!(
            Layer::<u32>::build(&[&r]).unwrap_err(),
            CompileError::WrongFamily(2)
        );
        // An IPv6 packet finds its rule through the IPv6 tree.
        let l6 = c.v6.as_ref().unwrap();
        let o = l6.overlay();
        let a = u128::from_be_bytes(
            "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        let hit = l6.lookup(&fields(a, 1, 1234, 80, 6), &o);
        assert_eq!(hit.map(|h| h.answer.id), Some(2));
        assert!(l6.lookup(&fields(a, 1, 1234, 81, 6), &o).is_none());
    }
}
