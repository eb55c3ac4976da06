//! A tuple-space table's bucket: the rules that share one masked key,
//! best first, each as an `Entry` (every field an integer compare), and
//! past [`LONG_BUCKET`] rules a small compiled tree of them (see the
//! parent module's docs).

use std::collections::VecDeque;
use std::sync::Arc;

use cfdp_rules::{AclMatch, AclRule, Action, IpPrefix, PortRange, RuleId};

use super::compiled::{packet_fields, Answer, Input, Layer, Overlay};
use super::word::{Packet, Word};

/// Rules past which a bucket keeps a small compiled tree of them, walked
/// instead of a scan (see the parent module's docs).
pub const LONG_BUCKET: usize = 32;
/// The fewest and most rules a long bucket keeps pending beside its tree
/// before building it again (see [`Small`]).
const PENDING: (usize, usize) = (LONG_BUCKET / 2, 2 * LONG_BUCKET);

/// A rule as a bucket holds it: every field an integer compare, with what
/// a match answers (id, action, the caller's tag), so a lookup never reads
/// the rule itself (in the classifier's slab at `slot`: a random read a
/// packet, which cost a 100k-rule set's worker path a quarter of its
/// rate). 48 bytes for IPv4.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry<W> {
    pub(super) src: W,
    pub(super) src_mask: W,
    pub(super) dst: W,
    pub(super) dst_mask: W,
    pub(super) sport: (u16, u16),
    pub(super) dport: (u16, u16),
    /// 0..=255, or 256 for any.
    pub(super) proto: u16,
    pub(super) priority: u32,
    pub(super) id: RuleId,
    pub(super) action: Action,
    pub(super) tag: u32,
    pub(super) slot: u32,
}

impl<W: Word> Entry<W> {
    pub(super) fn new(r: &AclRule, slot: u32, tag: u32) -> Self {
        let m = &r.matcher;
        Self {
            src: W::of(m.src().addr()),
            src_mask: W::mask(m.src().len()),
            dst: W::of(m.dst().addr()),
            dst_mask: W::mask(m.dst().len()),
            sport: (m.sport().lo(), m.sport().hi()),
            dport: (m.dport().lo(), m.dport().hi()),
            proto: m.proto().map_or(256, u16::from),
            priority: r.priority,
            id: r.id,
            action: r.action,
            tag,
            slot,
        }
    }

    #[inline(always)]
    pub(super) fn matches(&self, p: &Packet<W>) -> bool {
        (p.src & self.src_mask) == self.src
            && (p.dst & self.dst_mask) == self.dst
            && (self.proto == 256 || self.proto == p.proto)
            && self.sport.0 <= p.sport
            && p.sport <= self.sport.1
            && self.dport.0 <= p.dport
            && p.dport <= self.dport.1
    }

    /// Whether every packet of the family matches: no address bit, no
    /// protocol and every port.
    pub(super) fn matches_all(&self) -> bool {
        self.src_mask == W::default()
            && self.dst_mask == W::default()
            && self.proto == 256
            && self.sport == (0, u16::MAX)
            && self.dport == (0, u16::MAX)
    }

    /// What a match answers, apart from the address width.
    #[inline(always)]
    pub(super) fn answer(&self) -> Answer {
        Answer {
            id: self.id,
            action: self.action,
            tag: self.tag,
            slot: self.slot,
        }
    }

    /// Higher priority, then lower id: as [`AclRule::beats`].
    #[inline(always)]
    pub(super) fn rank(&self) -> Rank {
        (self.priority, std::cmp::Reverse(self.id))
    }

    /// The rule this entry was made from, as a compile takes it; `None`
    /// if its fields are no rule's (never: see [`Small::build`]).
    fn input(&self) -> Option<Input> {
        let prefix = |a: W, mask: W| IpPrefix::new(W::V6, a.bytes(), mask.ones() as u8).ok();
        let range = |r: (u16, u16)| PortRange::new(r.0, r.1);
        let matcher = AclMatch::new(
            prefix(self.src, self.src_mask)?,
            prefix(self.dst, self.dst_mask)?,
            u8::try_from(self.proto).ok(),
            range(self.sport)?,
            range(self.dport)?,
        )
        .ok()?;
        Some(Input {
            rule: AclRule {
                id: self.id,
                priority: self.priority,
                matcher,
                action: self.action,
            },
            tag: self.tag,
            slot: self.slot,
        })
    }
}

/// A rule's rank: higher priority, then lower id, is greater.
pub(super) type Rank = (u32, std::cmp::Reverse<RuleId>);

/// One bucket's rules, best first: the first inline in the table's slot
/// (most buckets hold one rule, and a hit then reads no memory elsewhere),
/// the rest in a vector (empty: no allocation).
#[derive(Clone, Debug)]
pub(super) struct Bucket<W: Word> {
    pub(super) first: Entry<W>,
    /// A deque, so that rules arriving best first (appended) and worst
    /// first (prepended: a set loaded in ascending priority, O(K²) moves in
    /// a vector) both cost O(1) a rule.
    pub(super) rest: VecDeque<Entry<W>>,
    /// Past [`LONG_BUCKET`] rules, a small compiled tree of them all
    /// ([`compiled`](super::compiled)'s), which a lookup walks instead of
    /// scanning the rest: rules that share their masked prefixes and
    /// differ in ports and protocol (a firewall's wildcards: 233 in one
    /// bucket of ClassBench's fw4) are told apart by the tree's cuts, not
    /// checked one by one. Changed as the compiled layer is: a rule
    /// removed is marked dead in the overlay, one added is patched into
    /// the leaves it touches, and the tree is built again only when a
    /// patch is refused or the dead outnumber the living.
    pub(super) tree: Option<Box<Long<W>>>,
}

/// What a long bucket keeps beside its rules. Always behind the bucket's
/// `Box` (the bucket itself stays a pointer wide for it), so a refusal's
/// allocation being a tree's size costs only the rare refused bucket.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(super) enum Long<W: Word> {
    Tree(Small<W>),
    /// The tree's build was refused (over the builder's budget: rules
    /// crossing on the ports) when the bucket held this many rules: the
    /// bucket is scanned, and a build is tried again only once it has
    /// grown by a quarter (at every insert, a crafted bucket would make
    /// each insert a refused build of all its rules).
    Refused(usize),
}

/// A long bucket's tree (shared by the classifier's clones), this copy's
/// overlay over it, and the rules added since that the overlay refused
/// (a rule wide on the field the tree cuts touches every leaf), scanned
/// after the tree until there are enough of them to build it again.
#[derive(Clone, Debug)]
pub(super) struct Small<W: Word> {
    layer: Arc<Layer<W>>,
    overlay: Overlay<W>,
    /// Best first. At most a quarter of the bucket, within [`PENDING`]:
    /// a bucket growing one rule at a time rebuilds its tree every
    /// quarter while it is small (a geometric series of builds), every
    /// `PENDING.1` rules once it is large — a packet the tree answers
    /// scans the pending rules that outrank its hit, and a quarter of
    /// 2,000 rules made the live layer's worst case 5× a trace packet.
    pending: Vec<Entry<W>>,
}

/// A bucket's match for a packet: its rank and what it answers.
pub(super) type Found = (Rank, Answer);

impl<W: Word> Bucket<W> {
    pub(super) fn new(e: Entry<W>) -> Self {
        Bucket {
            first: e,
            rest: VecDeque::new(),
            tree: None,
        }
    }

    pub(super) fn len(&self) -> usize {
        1 + self.rest.len()
    }

    /// Heap bytes beside the table's slot: the rest and the tree.
    pub(super) fn bytes(&self) -> usize {
        self.rest.capacity() * std::mem::size_of::<Entry<W>>()
            + match self.tree.as_deref() {
                Some(Long::Tree(t)) => t.bytes(),
                Some(Long::Refused(_)) => std::mem::size_of::<Long<W>>(),
                None => 0,
            }
    }

    /// Adds `e` at its place in the order (and to the tree).
    pub(super) fn insert(&mut self, e: Entry<W>) {
        if e.rank() > self.first.rank() {
            let old = std::mem::replace(&mut self.first, e);
            self.rest.push_front(old);
        } else {
            let at = self.rest.partition_point(|x| x.rank() > e.rank());
            self.rest.insert(at, e);
        }
        let len = self.len();
        let room = (len / 4).clamp(PENDING.0, PENDING.1);
        let (added, retry) = match self.tree.as_deref_mut() {
            Some(Long::Tree(t)) => (t.add(&e, room), true),
            Some(Long::Refused(at)) => (false, len >= *at + *at / 4),
            None => (false, true),
        };
        if !added && retry && len > LONG_BUCKET {
            self.retree();
        }
    }

    /// Takes rule `id` out; false if the bucket has no such rule, or it
    /// is the bucket's only one (its table removes the whole bucket).
    pub(super) fn remove(&mut self, id: RuleId) -> bool {
        if self.first.id == id {
            match self.rest.pop_front() {
                Some(next) => self.first = next,
                None => return false,
            }
        } else {
            let Some(i) = self.rest.iter().position(|x| x.id == id) else {
                return false;
            };
            self.rest.remove(i);
        }
        let len = self.len();
        if len <= LONG_BUCKET / 2 {
            self.tree = None;
        } else if let Some(Long::Tree(t)) = self.tree.as_deref_mut() {
            if !t.kill(id) || t.overlay.dead() > len {
                self.retree();
            }
        }
        true
    }

    /// The tree of the bucket's rules, built again (or the refusal, with
    /// the bucket's length: the scan is exact either way).
    fn retree(&mut self) {
        let built = Small::build(std::iter::once(&self.first).chain(&self.rest));
        let long = built.map_or(Long::Refused(self.len()), Long::Tree);
        self.tree = Some(Box::new(long));
    }

    /// The best entry matching `p`.
    #[inline(always)]
    pub(super) fn find(&self, p: &Packet<W>) -> Option<Found> {
        if self.first.matches(p) {
            return Some((self.first.rank(), self.first.answer()));
        }
        if self.rest.is_empty() {
            return None;
        }
        if let Some(Long::Tree(t)) = self.tree.as_deref() {
            return t.find(p);
        }
        let (a, b) = self.rest.as_slices();
        scan(a, p)
            .or_else(|| scan(b, p))
            .map(|e| (e.rank(), e.answer()))
    }
}

impl<W: Word> Small<W> {
    /// The tree of `entries` (each back to the rule it was made from);
    /// `None` if one is not a valid rule again (it always is: each was
    /// made from one) or the build is refused.
    fn build<'a>(entries: impl Iterator<Item = &'a Entry<W>>) -> Option<Self> {
        let inputs: Vec<Input> = entries.map(Entry::input).collect::<Option<_>>()?;
        let refs: Vec<&Input> = inputs.iter().collect();
        let layer = Layer::build(&refs).ok()?;
        let overlay = layer.overlay();
        Some(Small {
            layer: Arc::new(layer),
            overlay,
            pending: Vec::new(),
        })
    }

    /// `e` into the tree through the overlay (revived in place, or
    /// patched into its leaves), else among the pending while they are
    /// fewer than `room`; false when neither takes it.
    fn add(&mut self, e: &Entry<W>, room: usize) -> bool {
        let Some(inp) = e.input() else {
            return false;
        };
        let l = &self.layer;
        if l.revive(&mut self.overlay, &inp).is_some() || l.patch(&mut self.overlay, &inp).is_ok() {
            return true;
        }
        if self.pending.len() >= room {
            return false;
        }
        let at = self.pending.partition_point(|x| x.rank() > e.rank());
        self.pending.insert(at, *e);
        true
    }

    /// Heap bytes: the tree (counted in each copy that shares it), the
    /// overlay and the pending rules.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.layer.bytes()
            + self.overlay.bytes()
            + self.pending.capacity() * std::mem::size_of::<Entry<W>>()
    }

    /// Rule `id` out (pending) or marked dead (in the tree); false if
    /// neither holds it alive.
    fn kill(&mut self, id: RuleId) -> bool {
        if let Some(i) = self.pending.iter().position(|x| x.id == id) {
            self.pending.remove(i);
            return true;
        }
        self.layer
            .live_index(&self.overlay, id)
            .is_some_and(|i| self.overlay.kill(i))
    }

    /// The best rule of the tree matching `p`: out of line, as [`scan`].
    #[inline(never)]
    fn find(&self, p: &Packet<W>) -> Option<Found> {
        let f = packet_fields(p);
        let hit = self
            .layer
            .lookup(&f, &self.overlay)
            .map(|h| ((h.priority, std::cmp::Reverse(h.answer.id)), h.answer));
        // Best first: past the hit's rank no pending rule can win.
        let beats = |e: &&Entry<W>| hit.is_none_or(|h: (Rank, Answer)| e.rank() > h.0);
        let pending = self.pending.iter().take_while(beats).find(|e| e.matches(p));
        pending.map_or(hit, |e| Some((e.rank(), e.answer())))
    }
}

/// The first entry of `rest` matching `p`: out of line, so the scan of a
/// long bucket compiles to the same tight loop wherever a lookup inlines.
#[inline(never)]
pub(super) fn scan<'a, W: Word>(rest: &'a [Entry<W>], p: &Packet<W>) -> Option<&'a Entry<W>> {
    rest.iter().find(|e| e.matches(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::FlowKey;

    /// Rules of one bucket (same prefixes and protocol) crossing on the
    /// ports: even ones on one source port each, odd ones on one
    /// destination port each; a tree copies each kind into every leaf of
    /// the other.
    fn crossing(i: u32) -> Entry<u32> {
        let port = PortRange::exact((i / 2) as u16);
        let (sport, dport) = if i.is_multiple_of(2) {
            (port, PortRange::ANY)
        } else {
            (PortRange::ANY, port)
        };
        let matcher = AclMatch::new(
            "10.0.0.0/8".parse().unwrap(),
            "20.0.0.0/8".parse().unwrap(),
            Some(6),
            sport,
            dport,
        )
        .unwrap();
        let r = AclRule {
            id: i + 1,
            priority: 100_000 - i,
            matcher,
            action: Action::Drop,
        };
        Entry::new(&r, i, 0)
    }

    fn refused_at(b: &Bucket<u32>) -> Option<usize> {
        match b.tree.as_deref() {
            Some(Long::Refused(at)) => Some(*at),
            _ => None,
        }
    }

    #[test]
    fn a_refused_tree_is_tried_again_only_once_the_bucket_grew_by_a_quarter() {
        let mut b = Bucket::new(crossing(0));
        let mut next = 1;
        let at = loop {
            b.insert(crossing(next));
            next += 1;
            if let Some(at) = refused_at(&b) {
                break at;
            }
            assert!(next < 20_000, "crossing rules never refused a tree");
        };
        assert_eq!(at, b.len());
        // No build until a quarter more: the refusal keeps its length.
        while b.len() + 1 < at + at / 4 {
            b.insert(crossing(next));
            next += 1;
            assert_eq!(refused_at(&b), Some(at));
        }
        b.insert(crossing(next));
        assert_eq!(
            refused_at(&b),
            Some(at + at / 4),
            "tried again, refused again"
        );
        // The scan answers meanwhile: the first rule on either port.
        for (sport, dport) in [(3u16, 9u16), (9, 3), (60_000, 7)] {
            let k = FlowKey::v4([10, 1, 1, 1], [20, 2, 2, 2], 6, sport, dport);
            let want = (0..=next)
                .map(crossing)
                .find(|e| e.matches(&Packet::of(&k)));
            let got = b.find(&Packet::of(&k)).map(|(_, a)| a.id);
            assert_eq!(got, want.map(|e| e.id), "{sport} {dport}");
        }
    }
}
