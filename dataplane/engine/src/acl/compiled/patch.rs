//! Changing a tree through an overlay: a rule patched into the leaves it
//! touches, or revived in place (see [`super::overlay`]).

use super::build;
use super::node::{field, fields, Hit, Input, Item, Word};
use super::overlay::{Dead, Overlay, PatchRefused, PATCHED, PATCH_EXTRA, PATCH_LEAVES};
use super::Layer;
use cfdp_rules::RuleId;

impl<W: Word> Layer<W> {
    /// A fresh overlay: nothing dead, nothing patched.
    pub fn overlay(&self) -> Overlay<W> {
        Overlay {
            dead: Dead::new(self.hits.len()),
            spans: self.tree.spans.clone(),
            base: u32::try_from(self.hits.len()).expect("fewer than 2^32 rules"),
            ..Overlay::default()
        }
    }

    /// The index of live rule `id`, patched in or compiled.
    pub fn live_index(&self, o: &Overlay<W>, id: RuleId) -> Option<u32> {
        if let Some(&i) = o.index.get(&id) {
            return Some(i);
        }
        let i = self.index_of(id)?;
        (!o.dead.get(i)).then_some(i)
    }

    /// Inserts `inp` into the leaves its box touches (see the module docs);
    /// returns its index. Refused: nothing changed.
    pub fn patch(&self, o: &mut Overlay<W>, inp: &Input) -> Result<u32, PatchRefused> {
        let r = &inp.rule;
        if r.matcher.v6() != W::V6 {
            return Err(PatchRefused::WrongFamily);
        }
        let ranges = build::Ranges::<W>::of(r);
        let mut leaves = Vec::new();
        let mut stack = vec![0u32];
        while let Some(n) = stack.pop() {
            let node = &self.tree.nodes[n as usize];
            if node.is_leaf() {
                if leaves.len() == PATCH_LEAVES {
                    return Err(PatchRefused::TooWide);
                }
                leaves.push(n);
                continue;
            }
            let f = node.field as usize;
            if ranges.hi[f] >= node.at {
                stack.push(node.kids[1]);
            }
            if ranges.lo[f] < node.at {
                stack.push(node.kids[0]);
            }
        }
        // The index `add` gives below.
        let idx = o.next_index().ok_or(PatchRefused::Numbered)?;
        let hit = Hit::of(inp);
        let item = build::item(inp, idx);
        let cap = self.leaf + PATCH_EXTRA;
        // Every new list first, so that a refusal leaves nothing half done.
        let mut lists = Vec::with_capacity(leaves.len());
        for leaf in leaves {
            // Dead patched entries go; dead compiled ones stay, for a
            // revival.
            let mut list: Vec<Item<W>> = self
                .leaf_items(leaf, o)
                .iter()
                .copied()
                .filter(|it| it.idx < o.base || !o.dead.get(it.idx))
                .collect();
            let at = list.partition_point(|it| self.rank_in(o, it.idx) > hit.rank());
            list.insert(at, item);
            if list.len() > cap {
                return Err(PatchRefused::LeafFull);
            }
            lists.push((self.tree.nodes[leaf as usize].kids[1], list));
        }
        o.add(hit);
        for (span, list) in lists {
            let (old, old_len) = o.spans[span as usize];
            if old & PATCHED != 0 {
                o.garbage += old_len as usize;
            }
            o.spans[span as usize] = (o.put(&list), list.len() as u32);
        }
        if o.garbage > (self.tree.entries / 4).max(1024) {
            o.compact();
        }
        Ok(idx)
    }

    /// The rank entry `idx` holds in the lists: its own, or for a
    /// compiled rule another took over ([`Self::revive`]), the rank of
    /// the rule that did, live or deleted since (the lists were kept in
    /// that order from then on).
    fn rank_in(&self, o: &Overlay<W>, idx: u32) -> (u32, std::cmp::Reverse<RuleId>) {
        let at = if idx < o.base {
            o.alias.get(&idx).copied().unwrap_or(idx)
        } else {
            idx
        };
        self.hit_in(o, at).rank()
    }

    /// Puts `inp` in the place of a compiled rule deleted since the
    /// compile, where its entries already stand at `inp`'s rank (see the
    /// module docs): the same rule put back (same id, match and priority:
    /// a modify that changes the action, or a delete undone), or, never
    /// taken over before, one with the same match and priority whose
    /// rank no rule's lies between (compiled or patched: then every list
    /// that holds it stays in rank order with `inp` in its place) — a
    /// modify that gives the rule a new id. Returns the new index, or
    /// `None` when there is no such rule.
    pub fn revive(&self, o: &mut Overlay<W>, inp: &Input) -> Option<u32> {
        let old = self.same_rule(o, inp).or_else(|| self.taken_over(o, inp))?;
        o.next_index()?;
        let idx = o.add(Hit::of(inp));
        o.alias(old, idx);
        Some(idx)
    }

    /// The compiled rule `inp` puts back (same id, match and priority,
    /// deleted since and not taken over by another).
    fn same_rule(&self, o: &Overlay<W>, inp: &Input) -> Option<u32> {
        let r = &inp.rule;
        let old = self.index_of(r.id)?;
        let was = &self.rules[old as usize];
        let taken = o
            .alias
            .get(&old)
            .is_some_and(|&a| self.hit_in(o, a).answer.id != r.id);
        (o.dead.get(old) && !taken && was.matcher == r.matcher && was.priority == r.priority)
            .then_some(old)
    }

    /// A compiled rule `inp` (another id) can take the place of.
    fn taken_over(&self, o: &Overlay<W>, inp: &Input) -> Option<u32> {
        let r = &inp.rule;
        if r.matcher.v6() != W::V6 {
            return None;
        }
        // Such a rule has `inp`'s box, so it is listed in the leaf of the
        // box's first corner (a leaf lists every rule that can match a
        // packet reaching it; patched lists keep the compiled rules' dead
        // entries).
        let b = build::Ranges::<W>::of(r);
        let low = |i: usize| b.lo[i].low() as u16;
        let corner = fields(
            b.lo[field::SRC],
            b.lo[field::DST],
            low(field::SPORT),
            low(field::DPORT),
            low(field::PROTO),
        );
        let old = self
            .leaf_items(self.tree.walk(&corner), o)
            .into_iter()
            .map(|it| it.idx)
            .find(|&i| {
                // Compiled entries only (a patched one has no rule here).
                self.rules.get(i as usize).is_some_and(|was| {
                    o.dead.get(i)
                        && !o.alias.contains_key(&i)
                        && was.matcher == r.matcher
                        && was.priority == r.priority
                })
            })?;
        // No rule ranks between the two: the compiled ones are in rank
        // order (so a neighbour would), the patched ones are looked over.
        let rank = Hit::of(inp).rank();
        let was = self.hits[old as usize].rank();
        let between = |x| (rank.min(was) < x) && (x < rank.max(was));
        let at = old as usize;
        let neighbours = [at.checked_sub(1), Some(at + 1)];
        if neighbours
            .into_iter()
            .flatten()
            .filter_map(|i| self.hits.get(i))
            .chain(&o.hits)
            .any(|h| between(h.rank()))
        {
            return None;
        }
        Some(old)
    }
}
