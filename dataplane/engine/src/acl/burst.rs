//! A burst through the classifier: each key's answer from the short
//! list, or its family's compiled tree walked [`LANES`] keys at a time and
//! then the live layer.

use cfdp_rules::{Action, FlowKey, RuleId};

use super::compiled::{self, Answer, Layer, Overlay, LANES};
use super::tuple::Family;
use super::word::Packet;
use super::{AclClassifier, Probes};
use cfdp_acl_simd::WALK_LANES;

impl AclClassifier {
    /// The winning rule's id for each key of a burst (`None`: no rule). The
    /// id comes from the table's entry: the rule itself is not read.
    pub fn classify_burst(&self, keys: &[FlowKey], out: &mut [Option<RuleId>]) {
        self.burst(keys, |i, a| out[i] = a.map(|a| a.id));
    }

    /// The winning rule's action and tag for each key of a burst.
    pub fn classify_burst_action(&self, keys: &[FlowKey], out: &mut [Option<(Action, u32)>]) {
        self.burst(keys, |i, a| out[i] = a.map(|a| (a.action, a.tag)));
    }

    /// [`Self::classify_burst_action`], each answer made by `f` straight
    /// into `out` (no array of answers copied after).
    #[inline]
    pub fn classify_burst_into<T>(
        &self,
        keys: &[FlowKey],
        out: &mut [Option<T>],
        f: impl Fn(Action, u32) -> T,
    ) {
        self.burst(keys, |i, a| out[i] = a.map(|a| f(a.action, a.tag)));
    }

    /// Each key's answer, handed to `put` with its index: each family's
    /// keys walk its compiled tree [`LANES`] at a time, then the live
    /// layer.
    #[inline]
    fn burst(&self, keys: &[FlowKey], mut put: impl FnMut(usize, Option<Answer>)) {
        if let Some(s) = &self.short {
            if let Some((a4, a6)) = s.uniform() {
                for (i, k) in keys.iter().enumerate() {
                    put(i, if k.v6 { a6 } else { a4 });
                }
                return;
            }
            for (i, k) in keys.iter().enumerate() {
                put(i, s.first(k));
            }
            return;
        }
        let mut probes = Probes::default();
        if self.compiled.is_none() {
            for (i, k) in keys.iter().enumerate() {
                put(i, self.winner(k, &mut probes));
            }
            return;
        }
        // As many keys at a time as the IPv4 tree's walk takes: the
        // arrays of a chunk's keys sized to it (wider than needed, they
        // cost their zeroing every chunk).
        if self.l4().is_some_and(|l| l.lanes() == LANES) {
            self.chunks::<LANES>(keys, &mut put, &mut probes);
        } else {
            self.chunks::<WALK_LANES>(keys, &mut put, &mut probes);
        }
    }

    /// [`Self::burst`] over the compiled layer, `L` keys at a time.
    #[inline(always)]
    fn chunks<const L: usize>(
        &self,
        keys: &[FlowKey],
        put: &mut impl FnMut(usize, Option<Answer>),
        probes: &mut Probes,
    ) {
        for (base, chunk) in keys.chunks(L).enumerate() {
            let at = base * L;
            let (l4, l6) = (
                (self.l4(), &self.o4, &self.v4),
                (self.l6(), &self.o6, &self.v6),
            );
            // A chunk of one family (the common case) needs no indices.
            if chunk.iter().all(|k| !k.v6) {
                lanes::<_, _, L>(l4, chunk, None, at, probes, put);
                continue;
            }
            // Each family's keys, by their place in the chunk.
            let (mut i4, mut i6) = ([0u8; L], [0u8; L]);
            let (mut n4, mut n6) = (0, 0);
            for (j, k) in chunk.iter().enumerate() {
                if k.v6 {
                    i6[n6] = j as u8;
                    n6 += 1;
                } else {
                    i4[n4] = j as u8;
                    n4 += 1;
                }
            }
            if n4 > 0 {
                lanes::<_, _, L>(l4, chunk, Some(&i4[..n4]), at, probes, put);
            }
            lanes::<_, _, L>(l6, chunk, Some(&i6[..n6]), at, probes, put);
        }
    }
}

/// One family's keys of a burst chunk (`idx`: their places in `chunk`,
/// which starts at key `at`; `None`: the whole chunk) through its compiled
/// tree in lanes, then its live layer; each answer handed to `put`.
#[inline(always)]
fn lanes<W: compiled::Word, const N: usize, const L: usize>(
    (layer, o, live): (Option<&Layer<W>>, &Overlay<W>, &Family<W, N>),
    chunk: &[FlowKey],
    idx: Option<&[u8]>,
    at: usize,
    probes: &mut Probes,
    put: &mut impl FnMut(usize, Option<Answer>),
) {
    let n = idx.map_or(chunk.len(), <[u8]>::len);
    let place = |i: usize| idx.map_or(i, |x| usize::from(x[i]));
    let mut fs = [[W::default(); 8]; L];
    for (i, f) in fs[..n].iter_mut().enumerate() {
        *f = compiled::packet_fields(&Packet::of(&chunk[place(i)]));
    }
    let mut hits = [None; L];
    if let Some(l) = layer {
        l.lookup_lanes::<L>(&fs[..n], o, &mut hits);
    }
    for (i, hit) in hits[..n].iter().enumerate() {
        // The live layer's tables, where there are any (a set compiled
        // and not changed since has none: its answers are the tree's, and
        // no packet is built for them).
        let a = if live.is_empty() {
            hit.map(|h| h.answer)
        } else {
            live.merge(&Packet::of(&chunk[place(i)]), *hit, probes)
        };
        put(at + place(i), a);
    }
}
