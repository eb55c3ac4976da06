//! A multi-field classifier with priorities: tuple space search over a few
//! merged tuples, each table a cuckoo map of masked keys with 16-bit tags
//! ([`cfdp_filter::TagMap`]: a probe hashes once and reads two tag words,
//! a cell only on a tag match).
//!
//! Every rule lives in one table whose *tuple* (source and destination
//! prefix lengths) is no more specific than the rule itself, as TupleMerge
//! does (Daly, Liu, Torng, "A Difference Resolution Approach to Compressing
//! Access Control Lists", and "TupleMerge: Fast Software Packet Processing
//! for Online Packet Classification", IEEE/ACM ToN 2019): a table's key
//! keeps only the tuple's bits, so rules of many shapes share one table,
//! and a hit is verified against the rule's own fields (ports and the bits
//! the tuple left out). Ports never enter the key: ranges cost no
//! expansion.
//!
//! * A new rule goes into the most specific existing table it fits within
//!   [`RELAX`] bits per prefix, else into a new table whose tuple is the
//!   rule's lengths rounded down to a multiple of [`ROUND`] bits; a bucket
//!   that would exceed [`MAX_BUCKET`] rules sends the rule to a table of its
//!   exact shape instead (rules that differ only in ports share a bucket
//!   whatever its tuple, so a bucket can still grow: such rules are sorted
//!   and the scan stops at the first match; past [`LONG_BUCKET`] rules the
//!   bucket keeps a small compiled tree of them, walked instead of the
//!   scan — a firewall's wildcard rules, told apart by ports and protocol
//!   only, cost a few levels, not a scan of hundreds).
//! * At most [`MAX_TABLES`] tables per address family: past it a rule goes
//!   into the most specific table it fits, so a crafted rule set cannot make
//!   a packet probe more tables (the Tuple Space Explosion attack).
//! * Tables are ordered by the highest priority they hold (OVS
//!   `classifier.c`); a lookup stops as soon as no later table can beat the
//!   best match found. A bucket keeps its rules best first, so its scan
//!   stops at its first match.
//! * Before any table, a few loads (`Cuts`, `acl/cuts.rs`: 12-bit windows of each
//!   address, and the protocol) name the tables that hold a rule covering
//!   the packet on each field; the lookup probes only those, and a packet
//!   no table covers costs no probe at all (the miss trace, and traffic
//!   aimed at a set of many shapes). IPv4 reads its leading 12 bits; IPv6,
//!   whose addresses mostly share their leading bits (2000::/3), reads two
//!   windows instead ([`Word::CUT_AT`]).
//!
//! Updates touch one table: insert and delete are a hash-table operation
//! plus a sorted insert into one bucket (no rebuild).

mod bucket;
mod burst;
pub mod compiled;
mod cuts;
mod partial;
mod short;
mod tuple;
mod word;

use std::sync::Arc;

use compiled::{Answer, Compiled, Input, Layer, Overlay};

use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, RuleId};
use hashbrown::HashMap;

pub use bucket::LONG_BUCKET;
use bucket::{Bucket, Entry};
pub use cfdp_acl_simd::Kernel;
pub use cuts::WIDE_BELOW;
use short::Short;
pub use short::MAX as SHORT_MAX;
use tuple::Family;
pub use tuple::{Probes, Tuple, MAX_BUCKET, MAX_TABLES, RELAX, ROUND};
pub use word::CUT_BITS;
use word::{Packet, Word};

/// Why a rule could not be added or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("rule id {0} exists")]
    IdTaken(RuleId),
    #[error("no rule with id {0}")]
    NotFound(RuleId),
}

/// The classifier: each family's tables, and the rules in a slab with a
/// tag each (the caller's: the rule store's counter slot).
///
/// Rules live in one of two layers. [`AclClassifier::compile`] moves every
/// rule into the compiled layer ([`compiled`]: a decision tree per address
/// family, shared by the clones through an `Arc`). Each clone keeps its own
/// [`Overlay`] over the tree: a compiled rule deleted or replaced is marked
/// in its dead bitmap, and a rule inserted after the compile is patched
/// into the few leaves it touches ([`compiled::overlay`]); a rule too wide
/// for that goes into the tuple space, the live layer, updated in
/// microseconds. A lookup takes the better of the compiled layer's
/// first live match and the live layer's winner (the live layer's walk
/// starts with the compiled winner as the rank to beat). A family whose
/// tree would be over the budget is compiled in part where that pays
/// (`acl/partial.rs`), else stays in the tuple space.
#[derive(Clone, Default)]
pub struct AclClassifier {
    v4: Family<u32, { <u32 as Word>::CUT_AT.len() }>,
    v6: Family<u128, { <u128 as Word>::CUT_AT.len() }>,
    compiled: Option<Arc<Compiled>>,
    /// This copy's changes over each family's compiled tree.
    o4: Overlay<u32>,
    o6: Overlay<u128>,
    slab: Vec<(AclRule, u32)>,
    free: Vec<u32>,
    /// Each rule's table and slot (a compiled rule keeps the tuple of the
    /// table it was in before the compile, unused while it is compiled).
    by_id: HashMap<RuleId, (Tuple, u32)>,
    /// Each (match, priority): the rule store refuses a second rule with
    /// both the same.
    by_match: HashMap<(AclMatch, u32), RuleId>,
    /// IPv6 rules held: [`Self::layers`] in O(1) (the rule store asks after
    /// every commit; counting them walked every rule, 140 µs a one-rule
    /// batch on acl1_100k).
    v6_rules: usize,
    /// Every rule, while there are at most [`SHORT_MAX`]: a lookup scans
    /// them and skips both layers ([`short`]).
    short: Option<Short>,
    /// The short list turned off ([`Self::without_short_path`]).
    no_short: bool,
    /// The leaf kernel's version for the compiled layers this classifier
    /// builds (the CPU's best unless chosen).
    kernel: Kernel,
}

/// The layers' sizes (see [`AclClassifier`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    /// Rules in the compiled layer, dead ones included (patched ones too).
    pub compiled: usize,
    /// Compiled rules deleted or replaced since the compile.
    pub dead: usize,
    /// Rules patched into the compiled layer since the compile (see
    /// [`compiled::overlay`]), live or deleted since.
    pub patched: usize,
    /// IPv4 rules in the live layer (inserted since the compile).
    pub live_v4: usize,
    /// IPv6 rules in the live layer.
    pub live_v6: usize,
    /// IPv6 rules, both layers.
    pub v6: usize,
    /// Rules the last compile left in the live layer (a family over the
    /// compiled layer's budget, whole or in part: [`Compiled::left`]):
    /// live, but not changes since the compile — a recompile would leave
    /// them there too.
    pub left: usize,
}

impl AclClassifier {
    pub fn new() -> Self {
        Self::default()
    }

    /// A classifier holding `rules` (ids must be unique).
    pub fn with_rules(rules: &[AclRule]) -> Result<Self, AclError> {
        let mut c = Self::new();
        // Best first: the tables a set's first rules open are the ones
        // most packets stop in.
        let mut order: Vec<&AclRule> = rules.iter().collect();
        order.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.id.cmp(&b.id)));
        for r in order {
            c.insert(*r)?;
        }
        Ok(c)
    }

    /// This classifier without its short-set path: a set of a few rules
    /// walks the layers as a large one does (for tests and benches of the
    /// layers themselves).
    #[must_use]
    pub fn without_short_path(mut self) -> Self {
        self.no_short = true;
        self.short = None;
        self
    }

    /// This classifier with its compiled layers' leaves checked by the
    /// leaf kernel's version `k` (tests run every version the CPU has).
    #[must_use]
    pub fn with_kernel(mut self, k: Kernel) -> Self {
        self.kernel = k;
        self
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Tables in use (both families).
    pub fn tables(&self) -> usize {
        self.v4.tables.len() + self.v6.tables.len()
    }

    /// Each table in probe order (IPv4's, then IPv6's): its tuple, rules,
    /// buckets and longest bucket.
    pub fn table_shapes(&self) -> Vec<(Tuple, usize, usize, usize)> {
        fn shapes<W: Word, const N: usize>(
            f: &Family<W, N>,
        ) -> impl Iterator<Item = (Tuple, usize, usize, usize)> + '_ {
            f.tables.iter().map(|t| {
                let longest = t.buckets.values().map(Bucket::len).max().unwrap_or(0);
                (t.tuple, t.rules, t.buckets.len(), longest)
            })
        }
        shapes(&self.v4).chain(shapes(&self.v6)).collect()
    }

    /// Heap bytes of the tables, the cuts, the compiled layer, the slab and
    /// the id index.
    pub fn bytes(&self) -> usize {
        self.v4.bytes()
            + self.v6.bytes()
            + self.compiled.as_ref().map_or(0, |c| c.bytes())
            + self.o4.bytes()
            + self.o6.bytes()
            + self.slab.capacity() * std::mem::size_of::<(AclRule, u32)>()
            + self.by_id.capacity() * (std::mem::size_of::<(RuleId, (Tuple, u32))>() + 1)
            + self.by_match.capacity() * (std::mem::size_of::<((AclMatch, u32), RuleId)>() + 1)
    }

    pub fn rule(&self, id: RuleId) -> Option<&AclRule> {
        self.by_id
            .get(&id)
            .map(|&(_, slot)| &self.slab[slot as usize].0)
    }

    /// The rule with this match and priority, with its tag.
    pub fn by_match(&self, m: &AclMatch, priority: u32) -> Option<(RuleId, u32)> {
        let id = *self.by_match.get(&(*m, priority))?;
        let &(_, slot) = self.by_id.get(&id)?;
        Some((id, self.slab[slot as usize].1))
    }

    /// Adds a rule to the table it fits best (see the module docs).
    pub fn insert(&mut self, r: AclRule) -> Result<(), AclError> {
        self.insert_tagged(r, 0)
    }

    /// [`Self::insert`], with a tag [`Self::classify_action`] returns.
    pub fn insert_tagged(&mut self, r: AclRule, tag: u32) -> Result<(), AclError> {
        // One family and lengths within it: `AclMatch` holds both by
        // construction.
        if self.by_id.contains_key(&r.id) {
            return Err(AclError::IdTaken(r.id));
        }
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = (r, tag);
                s
            }
            None => {
                self.slab.push((r, tag));
                (self.slab.len() - 1) as u32
            }
        };
        self.by_match.insert((r.matcher, r.priority), r.id);
        self.v6_rules += usize::from(r.matcher.v6());
        let shape = Tuple::of(&r);
        let inp = Input { rule: r, tag, slot };
        let c = self.compiled.as_deref();
        let in_tree = if shape.v6 {
            into_tree(c.and_then(|c| c.v6.as_ref()), &mut self.o6, &inp)
        } else {
            into_tree(c.and_then(|c| c.v4.as_ref()), &mut self.o4, &inp)
        };
        if in_tree {
            // The tuple is unused while the rule is in the tree.
            self.by_id.insert(r.id, (shape, slot));
        } else {
            self.insert_live(&r, slot, tag);
        }
        self.refresh_short();
        Ok(())
    }

    /// The short list again after a change: every rule while they are at
    /// most [`SHORT_MAX`], else none.
    fn refresh_short(&mut self) {
        self.short = (!self.no_short && self.by_id.len() <= SHORT_MAX).then(|| {
            Short::new(self.by_id.values().map(|&(_, slot)| {
                let (r, tag) = &self.slab[slot as usize];
                (r, slot, *tag)
            }))
        });
    }

    /// Puts `r` in its family's tuple space and records its table.
    fn insert_live(&mut self, r: &AclRule, slot: u32, tag: u32) {
        let shape = Tuple::of(r);
        let tuple = if shape.v6 {
            self.v6.insert(shape, Entry::new(r, slot, tag))
        } else {
            self.v4.insert(shape, Entry::new(r, slot, tag))
        };
        self.by_id.insert(r.id, (tuple, slot));
    }

    /// Removes rule `id`.
    pub fn remove(&mut self, id: RuleId) -> Result<AclRule, AclError> {
        let (tuple, slot) = self.by_id.remove(&id).ok_or(AclError::NotFound(id))?;
        let (r, tag) = self.slab[slot as usize];
        if self.by_match.get(&(r.matcher, r.priority)) == Some(&id) {
            self.by_match.remove(&(r.matcher, r.priority));
        }
        self.v6_rules -= usize::from(r.matcher.v6());
        if let Some(idx) = self.compiled_index(id, tuple.v6) {
            // A compiled or patched rule: dead from now on (an id deleted
            // before and inserted again is already dead there, and lives in
            // a table or is patched in under another index).
            if tuple.v6 {
                self.o6.kill(idx);
            } else {
                self.o4.kill(idx);
            }
        } else if tuple.v6 {
            self.v6.remove(tuple, &Entry::new(&r, slot, tag));
        } else {
            self.v4.remove(tuple, &Entry::new(&r, slot, tag));
        }
        self.free.push(slot);
        self.refresh_short();
        Ok(r)
    }

    /// The winning rule for one packet.
    #[inline]
    pub fn classify(&self, k: &FlowKey) -> Option<&AclRule> {
        self.classify_counted(k, &mut Probes::default())
    }

    /// [`Self::classify`], counting the tables probed.
    #[inline]
    pub fn classify_counted(&self, k: &FlowKey, probes: &mut Probes) -> Option<&AclRule> {
        probes.packets += 1;
        self.winner(k, probes)
            .map(|a| &self.slab[a.slot as usize].0)
    }

    /// The winning entry's answer for one packet, from its family and
    /// layer.
    #[inline(always)]
    fn winner(&self, k: &FlowKey, probes: &mut Probes) -> Option<Answer> {
        if let Some(s) = &self.short {
            return s.first(k);
        }
        if k.v6 {
            let p = Packet::of(k);
            let hit = self
                .l6()
                .and_then(|l| l.lookup(&compiled::packet_fields(&p), &self.o6));
            return self.v6.merge(&p, hit, probes);
        }
        let p = Packet::of(k);
        let hit = self
            .l4()
            .and_then(|l| l.lookup(&compiled::packet_fields(&p), &self.o4));
        self.v4.merge(&p, hit, probes)
    }

    /// The IPv4 compiled tree, if any.
    #[inline(always)]
    fn l4(&self) -> Option<&Layer<u32>> {
        self.compiled.as_deref()?.v4.as_ref()
    }

    /// The IPv6 compiled tree, if any.
    #[inline(always)]
    fn l6(&self) -> Option<&Layer<u128>> {
        self.compiled.as_deref()?.v6.as_ref()
    }

    /// The compiled (or patched) index of rule `id` of family `v6` while
    /// it is live there.
    fn compiled_index(&self, id: RuleId, v6: bool) -> Option<u32> {
        if v6 {
            self.l6()?.live_index(&self.o6, id)
        } else {
            self.l4()?.live_index(&self.o4, id)
        }
    }

    /// Moves every rule into a new compiled layer (a tree per family,
    /// built from them now, on this thread), leaving the live layer empty:
    /// see [`AclClassifier`]. [`Self::compile_input`] and [`Self::install`]
    /// do the same in two steps, the build between them on any thread.
    ///
    /// A family whose tree would exceed the compiled layer's budget
    /// ([`compiled::BUDGET_PER_LEAF_RULE`]) is compiled in part where that
    /// pays (`acl/partial.rs`: the rest stays where it is) or not at all, and
    /// the refusal of its whole tree is returned (after what did compile
    /// is installed; [`Layers::left`] counts the rules left out).
    pub fn compile(&mut self) -> Result<(), compiled::CompileError> {
        let mut c = Self::build_layers(&self.compile_input())?;
        c.set_kernel(self.kernel);
        let refused = c.refused;
        self.install(Arc::new(c));
        refused.map_or(Ok(()), Err)
    }

    /// The compiled layer of `input` ([`Self::compile_input`]), as
    /// [`Self::compile`] builds it: for a build on another thread, then
    /// [`Self::install`].
    pub fn build_layers(input: &[Input]) -> Result<Compiled, compiled::CompileError> {
        partial::compile(input)
    }

    /// The rules as a compile takes them.
    pub fn compile_input(&self) -> Vec<Input> {
        let mut v = Vec::new();
        self.compile_input_into(&mut v);
        v
    }

    /// [`Self::compile_input`] into `out`, replacing what it held (a caller
    /// that compiles again and again keeps one buffer: a fresh one is
    /// fresh pages, faulted in on the caller's thread).
    pub fn compile_input_into(&self, out: &mut Vec<Input>) {
        out.clear();
        out.extend(self.by_id.values().map(|&(_, slot)| {
            let (rule, tag) = self.slab[slot as usize];
            Input { rule, tag, slot }
        }));
    }

    /// Installs a compiled layer built from [`Self::compile_input`]. Rules
    /// changed since that input was taken stay exact: a compiled rule whose
    /// id is gone, or now names another rule or tag, is dead at once;
    /// every rule the layer holds alive leaves the live layer.
    pub fn install(&mut self, c: Arc<Compiled>) {
        let o4 = self.fresh(c.v4.as_ref());
        let o6 = self.fresh(c.v6.as_ref());
        // The live layer keeps only the rules the new layer does not hold
        // alive (inserted or replaced after the input was taken).
        let alive = |id: RuleId, v6: bool| {
            if v6 {
                c.v6.as_ref().and_then(|l| l.live_index(&o6, id)).is_some()
            } else {
                c.v4.as_ref().and_then(|l| l.live_index(&o4, id)).is_some()
            }
        };
        let mut live: Vec<(AclRule, u32, u32)> = self
            .by_id
            .iter()
            .filter(|&(&id, &(t, _))| !alive(id, t.v6))
            .map(|(_, &(_, slot))| {
                let (r, tag) = self.slab[slot as usize];
                (r, tag, slot)
            })
            .collect();
        live.sort_by(|a, b| b.0.priority.cmp(&a.0.priority).then(a.0.id.cmp(&b.0.id)));
        self.v4 = Family::default();
        self.v6 = Family::default();
        for (r, tag, slot) in live {
            self.insert_live(&r, slot, tag);
        }
        self.compiled = Some(c);
        self.o4 = o4;
        self.o6 = o6;
    }

    /// A fresh overlay over `layer` with every compiled rule that is not
    /// the rule set's (same id, rule, tag and slot) dead.
    fn fresh<W: compiled::Word>(&self, layer: Option<&Layer<W>>) -> Overlay<W> {
        let Some(l) = layer else {
            return Overlay::default();
        };
        let mut o = l.overlay();
        for idx in 0..l.len() as u32 {
            let h = l.hit(idx);
            let same = self.by_id.get(&h.answer.id).is_some_and(|&(_, slot)| {
                let (r, tag) = &self.slab[slot as usize];
                r == l.rule(idx) && *tag == h.answer.tag && slot == h.answer.slot
            });
            if !same {
                o.kill(idx);
            }
        }
        o
    }

    /// The layers' sizes, in O(1).
    pub fn layers(&self) -> Layers {
        let c4 = self.l4().map_or(0, Layer::len) + self.o4.patched();
        let c6 = self.l6().map_or(0, Layer::len) + self.o6.patched();
        let (d4, d6) = (self.o4.dead(), self.o6.dead());
        let v6 = self.v6_rules;
        let v4 = self.by_id.len() - v6;
        Layers {
            compiled: c4 + c6,
            dead: d4 + d6,
            patched: self.o4.patched() + self.o6.patched(),
            live_v4: v4 - (c4 - d4),
            live_v6: v6 - (c6 - d6),
            v6,
            left: self.compiled.as_deref().map_or(0, |c| c.left),
        }
    }

    /// The compiled layer, if any.
    pub fn compiled(&self) -> Option<&Compiled> {
        self.compiled.as_deref()
    }

    /// The compiled layer's cost for one packet (see [`Layer::cost`]);
    /// `None` without a compiled tree for its family.
    pub fn compiled_cost(&self, k: &FlowKey) -> Option<(u32, u32)> {
        if k.v6 {
            Some(
                self.l6()?
                    .cost(&compiled::packet_fields(&Packet::of(k)), &self.o6),
            )
        } else {
            Some(
                self.l4()?
                    .cost(&compiled::packet_fields(&Packet::of(k)), &self.o4),
            )
        }
    }

    /// The winning rule's action and tag for one packet, from the table's
    /// entry (the rule itself is not read).
    #[inline]
    pub fn classify_action(&self, k: &FlowKey) -> Option<(Action, u32)> {
        self.winner(k, &mut Probes::default())
            .map(|a| (a.action, a.tag))
    }

    /// The winning rule's id for one packet, from the table's entry.
    #[inline]
    pub fn classify_id(&self, k: &FlowKey) -> Option<RuleId> {
        self.winner(k, &mut Probes::default()).map(|a| a.id)
    }
}

/// Puts `inp` into `layer`'s tree through its overlay (revived in place
/// or in a deleted rule's place, or patched into its leaves); false when
/// it must go to the live layer.
fn into_tree<W: compiled::Word>(layer: Option<&Layer<W>>, o: &mut Overlay<W>, inp: &Input) -> bool {
    layer.is_some_and(|l| l.revive(o, inp).is_some() || l.patch(o, inp).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::acl::first_match;
    use cfdp_rules::{AclMatch, IpPrefix, PortRange};

    fn rule(
        id: u32,
        prio: u32,
        src: &str,
        dst: &str,
        proto: Option<u8>,
        dport: (u16, u16),
    ) -> AclRule {
        AclRule {
            id,
            priority: prio,
            matcher: AclMatch::new(
                src.parse().unwrap(),
                dst.parse().unwrap(),
                proto,
                PortRange::ANY,
                PortRange::new(dport.0, dport.1).unwrap(),
            )
            .unwrap(),
            action: Action::Drop,
        }
    }

    fn key(src: &str, dst: &str, proto: u8, dport: u16) -> FlowKey {
        FlowKey::new(
            src.parse().unwrap(),
            dst.parse().unwrap(),
            proto,
            1234,
            dport,
        )
    }

    #[test]
    fn the_highest_priority_wins_across_tables_and_ties_go_to_the_lower_id() {
        let rules = [
            rule(1, 10, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)),
            rule(2, 20, "10.1.0.0/16", "192.168.0.0/16", Some(6), (80, 80)),
            rule(3, 20, "10.1.2.0/24", "192.168.1.0/24", Some(6), (0, 65535)),
            rule(4, 5, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535)),
        ];
        let c = AclClassifier::with_rules(&rules).unwrap();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        // 2 and 3 both match at priority 20: the lower id.
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.classify(&key("10.1.2.3", "192.168.1.9", 6, 81))
                .unwrap()
                .id,
            3
        );
        assert_eq!(
            c.classify(&key("10.9.9.9", "1.1.1.1", 17, 53)).unwrap().id,
            1
        );
        assert_eq!(
            c.classify(&key("11.0.0.1", "1.1.1.1", 17, 53)).unwrap().id,
            4
        );
    }

    #[test]
    fn updates_change_answers_without_a_rebuild() {
        let mut c = AclClassifier::new();
        let k = key("10.1.2.3", "192.168.1.9", 6, 80);
        assert!(c.classify(&k).is_none());
        c.insert(rule(1, 1, "10.0.0.0/8", "0.0.0.0/0", None, (0, 65535)))
            .unwrap();
        c.insert(rule(
            2,
            9,
            "10.1.2.0/24",
            "192.168.1.0/24",
            Some(6),
            (80, 80),
        ))
        .unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 2);
        assert_eq!(
            c.insert(rule(2, 3, "1.0.0.0/8", "0.0.0.0/0", None, (0, 65535))),
            Err(AclError::IdTaken(2))
        );
        c.remove(2).unwrap();
        assert_eq!(c.classify(&k).unwrap().id, 1);
        c.remove(1).unwrap();
        assert!(c.classify(&k).is_none());
        assert_eq!((c.tables(), c.len()), (0, 0));
        assert_eq!(c.remove(1), Err(AclError::NotFound(1)));
    }

    #[test]
    fn the_cuts_probe_only_tables_that_can_match_and_follow_deletes() {
        let mut c = AclClassifier::new().without_short_path();
        c.insert(rule(1, 9, "10.0.0.0/8", "20.0.0.0/8", Some(6), (0, 65535)))
            .unwrap();
        // Two rules in one table (shape 0/16), under different leading
        // destination bits (30.16/12 and 30.32/12); rule 2 takes any
        // protocol, rule 3 TCP only.
        c.insert(rule(2, 5, "0.0.0.0/0", "30.16.0.0/16", None, (0, 65535)))
            .unwrap();
        c.insert(rule(3, 4, "0.0.0.0/0", "30.32.0.0/16", Some(6), (0, 65535)))
            .unwrap();
        assert_eq!(c.tables(), 2);
        let probed = |c: &AclClassifier, k: &FlowKey| {
            let mut p = Probes::default();
            let id = c.classify_counted(k, &mut p).map(|r| r.id);
            (id, p.tables)
        };
        // No rule's destination covers 50/12; rule 1 names TCP only.
        assert_eq!(probed(&c, &key("40.1.1.1", "50.1.1.1", 6, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "20.1.1.1", 17, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "20.1.1.1", 6, 1)), (Some(1), 1));
        assert_eq!(
            probed(&c, &key("10.1.1.1", "30.16.2.3", 17, 1)),
            (Some(2), 1)
        );
        assert_eq!(probed(&c, &key("10.1.1.1", "30.32.2.3", 17, 1)), (None, 1));
        // Rule 2's table stays (rule 3), but no longer for 30.16/12 nor
        // for any protocol but TCP.
        c.remove(2).unwrap();
        assert_eq!(c.tables(), 2);
        assert_eq!(probed(&c, &key("10.1.1.1", "30.16.2.3", 6, 1)), (None, 0));
        assert_eq!(probed(&c, &key("10.1.1.1", "30.32.2.3", 17, 1)), (None, 0));
        assert_eq!(
            probed(&c, &key("10.1.1.1", "30.32.2.3", 6, 1)),
            (Some(3), 1)
        );
    }

    #[test]
    fn a_family_takes_its_cuts_with_its_first_table() {
        let mut c = AclClassifier::new().without_short_path();
        assert!(c.v4.cuts.is_none() && c.v6.cuts.is_none());
        let empty = c.bytes();
        c.insert(rule(1, 9, "10.0.0.0/8", "20.0.0.0/8", Some(6), (0, 65535)))
            .unwrap();
        // No IPv6 rule, no IPv6 cuts: 66 KB an IPv4-only set never used.
        assert!(c.v4.cuts.is_some() && c.v6.cuts.is_none());
        assert!(c.bytes() - empty < 2 * cuts::Cuts::<1>::bytes());
        // Kept once the last table goes (the next insert would pay for it
        // again), and read no more: the family has no table.
        c.remove(1).unwrap();
        assert!(c.v4.cuts.is_some());
        assert_eq!(c.classify(&key("10.1.1.1", "20.1.1.1", 6, 1)), None);
    }

    #[test]
    fn ipv6_cuts_read_below_the_shared_leading_bits() {
        // Two sites of one organisation's /32 (they differ in bits 32–44)
        // and another organisation's /32 (bits 16–28 differ): every
        // address starts 2001:, so the leading bits alone would pass every
        // packet to both tables.
        let mut c = AclClassifier::new().without_short_path();
        for (id, prio, src) in [
            (1, 9, "2001:db8:1000::/48"),
            (2, 8, "2001:db8:2000::/48"),
            (3, 7, "2001:ab0::/32"),
        ] {
            c.insert(rule(id, prio, src, "::/0", None, (0, 65535)))
                .unwrap();
        }
        assert_eq!(c.tables(), 2);
        let probed = |c: &AclClassifier, src: &str| {
            let mut p = Probes::default();
            let k = key(src, "2001:db8:ffff::1", 17, 53);
            let id = c.classify_counted(&k, &mut p).map(|r| r.id);
            (id, p.tables)
        };
        assert_eq!(probed(&c, "2001:db8:1000::5"), (Some(1), 1));
        assert_eq!(probed(&c, "2001:ab0:7::1"), (Some(3), 1));
        // A third site of the first /32, and a third organisation.
        assert_eq!(probed(&c, "2001:db8:3000::5"), (None, 0));
        assert_eq!(probed(&c, "2001:cb0::1"), (None, 0));
        // Rule 1's site leaves the second window with it; rule 2 keeps the
        // table.
        c.remove(1).unwrap();
        assert_eq!(probed(&c, "2001:db8:1000::5"), (None, 0));
        assert_eq!(probed(&c, "2001:db8:2000::5"), (Some(2), 1));
    }

    #[test]
    fn a_crafted_set_of_many_shapes_stays_within_the_table_bound() {
        // Every (source, destination) length pair: 33 × 33 shapes.
        let mut rules = Vec::new();
        for s in 0..=32u8 {
            for d in 0..=32u8 {
                let id = u32::from(s) * 33 + u32::from(d) + 1;
                let prefix = |first: u8, len: u8| {
                    let mut a = [0u8; 16];
                    a[..4].copy_from_slice(&[first, 1, 2, 3]);
                    IpPrefix::covering(false, &a, len).unwrap()
                };
                let mut r = rule(id, id, "0.0.0.0/0", "0.0.0.0/0", None, (0, 65535));
                r.matcher = AclMatch::new(
                    prefix(10, s),
                    prefix(20, d),
                    None,
                    PortRange::ANY,
                    PortRange::ANY,
                )
                .unwrap();
                rules.push(r);
            }
        }
        let c = AclClassifier::with_rules(&rules).unwrap();
        assert!(c.tables() <= MAX_TABLES, "{} tables", c.tables());
        for k in [
            key("10.1.2.3", "20.1.2.3", 6, 1),
            key("10.1.2.4", "20.1.3.3", 6, 1),
            key("9.1.2.3", "20.1.2.3", 6, 1),
        ] {
            assert_eq!(
                c.classify(&k).map(|r| r.id),
                first_match(&rules, &k).map(|r| r.id)
            );
        }
    }
}
