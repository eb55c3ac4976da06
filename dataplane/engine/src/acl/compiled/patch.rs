//! Changing a tree through an overlay: a rule patched into the leaves it
//! touches, or revived in place (see [`super::overlay`]).

use super::build;
use super::node::{Hit, Input, Item, Word};
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
            let at = list.partition_point(|it| self.hit_in(o, it.idx).rank() > hit.rank());
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

    /// Revives the compiled rule `inp` puts back (same id, match and
    /// priority, deleted since the compile; see the module docs) with
    /// `inp`'s action and tag; returns its new index, or `None` when `inp`
    /// is not such a rule.
    pub fn revive(&self, o: &mut Overlay<W>, inp: &Input) -> Option<u32> {
        let r = &inp.rule;
        let old = self.index_of(r.id)?;
        let was = &self.rules[old as usize];
        if !o.dead.get(old) || was.matcher != r.matcher || was.priority != r.priority {
            return None;
        }
        o.next_index()?;
        let idx = o.add(Hit::of(inp));
        o.alias.insert(old, idx);
        Some(idx)
    }
}
