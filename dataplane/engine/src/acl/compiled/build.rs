//! Building the tree: rules sorted best first, then HyperSplit's cuts
//! from the root down, within the entry budget (see the parent module).

use super::node::{Hit, Input, Item, Node, Step, Word, FIELDS, RIGHT, ZERO_FIELD};
use super::{
    CompileError, Compiled, Layer, Part, Tree, BUDGET_PER_LEAF_RULE, BUDGET_SLACK, LEAF_SIZES,
};
use cfdp_rules::AclRule;

impl Compiled {
    /// Compiles `rules` (unique ids; any order, both families): a tree per
    /// family that has rules. A family whose tree exceeds the budget is
    /// left out (named in [`Compiled::refused`]); the build fails only when
    /// no family compiled (or on a duplicate id).
    pub fn build(rules: &[Input]) -> Result<Self, CompileError> {
        Self::build_with(rules, |_| None, |_| None)
    }

    /// [`Self::build`], with a family over the budget offered to its
    /// `Part` (`p4` for IPv4, `p6` for IPv6): the tree of the part it
    /// picks is kept, the rest counted in [`Compiled::left`].
    pub fn build_with(
        rules: &[Input],
        p4: Part<u32>,
        p6: Part<u128>,
    ) -> Result<Self, CompileError> {
        let (v6, v4): (Vec<&Input>, Vec<&Input>) = rules.iter().partition(|i| i.rule.matcher.v6());
        let mut refused = None;
        let mut left = 0;
        let v4 = family(&v4, p4, &mut refused, &mut left)?;
        let v6 = family(&v6, p6, &mut refused, &mut left)?;
        match refused {
            Some(e) if v4.is_none() && v6.is_none() => Err(e),
            _ => Ok(Compiled {
                v4,
                v6,
                refused,
                left,
            }),
        }
    }
}

/// One family's tree: none for no rules; over the budget, its part's or
/// none (the first such refusal kept in `refused`, the rules out of a
/// tree added to `left`).
fn family<W: Word>(
    rules: &[&Input],
    part: Part<W>,
    refused: &mut Option<CompileError>,
    left: &mut usize,
) -> Result<Option<Layer<W>>, CompileError> {
    if rules.is_empty() {
        return Ok(None);
    }
    match Layer::build(rules) {
        Ok(l) => Ok(Some(l)),
        Err(e @ CompileError::OverBudget { .. }) => {
            refused.get_or_insert(e);
            let (layer, out) = part(rules).map_or((None, rules.len()), |(l, n)| (Some(l), n));
            *left += out;
            Ok(layer)
        }
        Err(e) => Err(e),
    }
}

impl<W: Word> Layer<W> {
    /// Compiles `rules` (this family's, unique ids; any order).
    pub fn build(rules: &[&Input]) -> Result<Self, CompileError> {
        let mut order: Vec<&Input> = rules.to_vec();
        order.sort_by(|a, b| {
            b.rule
                .priority
                .cmp(&a.rule.priority)
                .then(a.rule.id.cmp(&b.rule.id))
        });
        let mut c = Layer::default();
        let mut ranges = Vec::with_capacity(order.len());
        for (i, inp) in order.iter().enumerate() {
            let r = &inp.rule;
            if r.matcher.v6() != W::V6 {
                return Err(CompileError::WrongFamily(r.id));
            }
            let idx = u32::try_from(i).expect("fewer than 2^32 rules");
            if c.index.insert(r.id, idx).is_some() {
                return Err(CompileError::Duplicate(r.id));
            }
            c.hits.push(Hit::of(inp));
            ranges.push(Ranges::of(r));
            c.rules.push(*r);
        }
        let items: Vec<Item<W>> = order.iter().zip(0u32..).map(|(i, n)| item(i, n)).collect();
        let w = W::from_u32;
        let root = Ranges {
            lo: [W::default(); FIELDS],
            hi: [W::MAX, W::MAX, w(65535), w(65535), w(255)],
        };
        let all: Vec<u32> = (0..c.hits.len() as u32).collect();
        for leaf in LEAF_SIZES {
            let mut b = Builder {
                t: Tree::default(),
                ranges: &ranges,
                items: &items,
                leaves: Vec::new(),
                leaf,
                budget: budget(all.len(), leaf),
            };
            if b.node(all.clone(), root, 0).is_some() {
                // Padded to a power of two with leaves (never reached), so
                // that the lanes index the nodes under a mask.
                let n = b.t.nodes.len();
                let pad = Node {
                    field: ZERO_FIELD,
                    at: W::from_u32(1),
                    kids: [0, 0],
                };
                b.t.nodes.resize(n.next_power_of_two(), pad);
                blocks(&mut b.t, &b.leaves);
                // After the blocks: a leaf's step names its first block.
                b.t.steps = steps(&b.t.nodes[..n], &b.t.spans);
                b.t.root = super::root::Root::build(&b.t.nodes);
                b.t.quads = super::quad::Quads::build(&b.t.nodes, &b.t.spans, b.t.root.nodes());
                // Grown by pushes, the tables held up to twice their
                // length (ipc1_10k's blocks: 12.6 MB for 8.2 used).
                b.t.nodes.shrink_to_fit();
                b.t.steps.shrink_to_fit();
                b.t.spans.shrink_to_fit();
                b.t.blocks.shrink_to_fit();
                c.hits.shrink_to_fit();
                c.rules.shrink_to_fit();
                c.index.shrink_to_fit();
                c.tree = b.t;
                c.leaf = leaf;
                return Ok(c);
            }
        }
        let largest = LEAF_SIZES[LEAF_SIZES.len() - 1];
        Err(CompileError::OverBudget {
            rules: c.hits.len(),
            budget: budget(all.len(), largest),
        })
    }
}

/// A rule during the build: its range on each field.
#[derive(Clone, Copy)]
pub(super) struct Ranges<W> {
    pub(super) lo: [W; FIELDS],
    pub(super) hi: [W; FIELDS],
}

impl<W: Word> Ranges<W> {
    pub(super) fn of(r: &AclRule) -> Self {
        let m = &r.matcher;
        let (s, d) = (m.src(), m.dst());
        // A prefix's first and last address: the base with the bits below
        // the prefix all set (`!mask`, as `mask ^ MAX`).
        let span = |a: &[u8; 16], len: u8| {
            let base = W::of(a);
            let mask = W::mask(len);
            (base, base | (mask ^ W::MAX))
        };
        let w = |x: u16| W::from_u32(u32::from(x));
        let (sl, sh) = span(s.addr(), s.len());
        let (dl, dh) = span(d.addr(), d.len());
        let (pl, ph) = m.proto().map_or((0, 255), |p| (u16::from(p), u16::from(p)));
        Self {
            lo: [sl, dl, w(m.sport().lo()), w(m.dport().lo()), w(pl)],
            hi: [sh, dh, w(m.sport().hi()), w(m.dport().hi()), w(ph)],
        }
    }
}

/// The one-packet copy of a tree built in depth-first order (see [`Step`]).
fn steps<W: Word>(nodes: &[Node<W>], spans: &[(u32, u32)]) -> Vec<Step<W>> {
    // A leaf's field is the zero field: the walk stops there.
    let field = |n: u32| nodes[n as usize].field;
    nodes
        .iter()
        .enumerate()
        .map(|(me, n)| {
            if n.is_leaf() {
                // Its first block plus one, as its node has it, and its
                // length as built.
                Step {
                    at: n.at,
                    link: spans[n.kids[1] as usize].1,
                }
            } else {
                debug_assert_eq!(n.kids[0] as usize, me + 1, "depth-first order");
                Step::inner(n.at, n.kids[1], field(n.kids[0]), field(n.kids[1]))
            }
        })
        .collect()
}

/// The leaf entries a tree of `rules` rules with leaves of `leaf` may hold.
fn budget(rules: usize, leaf: usize) -> usize {
    rules * leaf * BUDGET_PER_LEAF_RULE / 2 + BUDGET_SLACK
}

pub(super) fn item<W: Word>(inp: &Input, idx: u32) -> Item<W> {
    let m = &inp.rule.matcher;
    let (s, d) = (m.src(), m.dst());
    Item {
        src: W::of(s.addr()),
        src_mask: W::mask(s.len()),
        dst: W::of(d.addr()),
        dst_mask: W::mask(d.len()),
        sport: [m.sport().lo(), m.sport().hi()],
        dport: [m.dport().lo(), m.dport().hi()],
        proto: m.proto().map_or(256, u16::from),
        _pad: 0,
        idx,
    }
}

/// The recursive build of one group's tree (see the module docs).
struct Builder<'a, W: Word> {
    t: Tree<W>,
    ranges: &'a [Ranges<W>],
    items: &'a [Item<W>],
    /// Every leaf's rules, leaf after leaf (turned into blocks at the
    /// end).
    leaves: Vec<Item<W>>,
    /// Rules a leaf may hold before a cut is tried.
    leaf: usize,
    /// Leaf entries left before the tree is given up.
    budget: usize,
}

/// A split of the tree (the tuple space's per-field index is a `Cut`,
/// `acl/cuts.rs`): the field, the first value of the upper side, and the rules on
/// the larger side.
#[derive(Clone, Copy)]
struct Split<W> {
    field: usize,
    at: W,
    cost: (usize, usize),
}

impl<W: Word> Builder<'_, W> {
    /// Builds the subtree of `rules` (indices, best first) over `region`;
    /// returns its node index, or `None` once the budget is spent.
    fn node(&mut self, rules: Vec<u32>, region: Ranges<W>, depth: u32) -> Option<u32> {
        let me = u32::try_from(self.t.nodes.len()).expect("fewer than 2^32 nodes");
        self.t.depth = self.t.depth.max(depth + 1);
        let split = if rules.len() > self.leaf {
            self.best_split(&rules, &region)
        } else {
            None
        };
        let Some(split) = split else {
            self.budget = self.budget.checked_sub(rules.len())?;
            let start = u32::try_from(self.leaves.len()).expect("fewer than 2^32 items");
            self.leaves
                .extend(rules.iter().map(|&i| self.items[i as usize]));
            let span = u32::try_from(self.t.spans.len()).expect("fewer than 2^32 leaves");
            self.t.spans.push((start, rules.len() as u32));
            self.t.nodes.push(Node {
                field: ZERO_FIELD,
                at: W::from_u32(1),
                kids: [me, span],
            });
            return Some(me);
        };
        self.t.nodes.push(Node {
            field: split.field as u32,
            at: split.at,
            kids: [0, 0],
        });
        let f = split.field;
        let (left, right): (Vec<u32>, Vec<u32>) = (
            rules
                .iter()
                .copied()
                .filter(|&i| self.ranges[i as usize].lo[f] < split.at)
                .collect(),
            rules
                .iter()
                .copied()
                .filter(|&i| self.ranges[i as usize].hi[f] >= split.at)
                .collect(),
        );
        drop(rules);
        let mut lo_region = region;
        lo_region.hi[f] = split.at.dec();
        let mut hi_region = region;
        hi_region.lo[f] = split.at;
        let l = self.node(left, lo_region, depth + 1)?;
        let r = self.node(right, hi_region, depth + 1)?;
        if r > RIGHT {
            // Past 2^26 nodes (far over any budget) a node's right child
            // would not fit its one-packet copy: given up.
            return None;
        }
        self.t.nodes[me as usize].kids = [l, r];
        Some(me)
    }

    /// The split whose larger side holds the fewest rules (then the fewest
    /// copies), if one leaves both sides smaller than the node.
    fn best_split(&self, rules: &[u32], region: &Ranges<W>) -> Option<Split<W>> {
        let n = rules.len();
        let mut best: Option<Split<W>> = None;
        let mut los = Vec::with_capacity(n);
        let mut his = Vec::with_capacity(n);
        for f in 0..FIELDS {
            los.clear();
            his.clear();
            for &i in rules {
                let r = &self.ranges[i as usize];
                los.push(r.lo[f].max(region.lo[f]));
                his.push(r.hi[f].min(region.hi[f]));
            }
            los.sort_unstable();
            his.sort_unstable();
            // Candidate cuts: a rule's first value, or the one after its
            // last, strictly inside the region.
            let inside = |v: W| v > region.lo[f] && v <= region.hi[f];
            let candidates = los
                .iter()
                .copied()
                .chain(his.iter().filter_map(|&h| h.inc()))
                .filter(|&v| inside(v));
            for at in candidates {
                let left = los.partition_point(|&v| v < at);
                let right = n - his.partition_point(|&v| v < at);
                let cost = (left.max(right), left + right);
                if cost.0 < n && best.is_none_or(|b| cost < b.cost) {
                    best = Some(Split { field: f, at, cost });
                }
            }
        }
        best
    }
}

/// The leaves' rules as the vector kernel reads them: each leaf's items
/// in blocks of eight, in rank order.
fn blocks<W: Word>(t: &mut Tree<W>, leaves: &[Item<W>]) {
    t.entries = leaves.len();
    let mut block_at = Vec::with_capacity(t.spans.len());
    for &(start, len) in &t.spans {
        block_at.push(u32::try_from(t.blocks.len()).expect("fewer than 2^32 blocks"));
        Item::push_blocks(
            &leaves[start as usize..(start + len) as usize],
            &mut t.blocks,
        );
    }
    // Each leaf names its first block (see [`Node`]); the padding leaves
    // (never reached) name span 0's.
    for n in t.nodes.iter_mut().filter(|n| n.is_leaf()) {
        if let Some(&b) = block_at.get(n.kids[1] as usize) {
            n.at = W::from_u32(b.checked_add(1).expect("fewer than 2^32 - 1 blocks"));
        }
    }
}
