//! A worker's fragments: a first fragment's ports remembered and the
//! later fragments held for it released with it, a later fragment given
//! its ports or held until its first comes, overlapping and duplicate
//! bytes dropped.

use cfdp_packet::frag::{Cover, Held};
use cfdp_packet::{decode, Decoded, Frag};
use cfdp_rules::FlowKey;

use super::{PacketRef, Worker};

impl Worker {
    /// A first fragment (`len` bytes of datagram `id`): its ports
    /// remembered, and the later fragments held for it released with it —
    /// unless its bytes, or theirs, overlap bytes seen before: then the
    /// whole datagram is dropped (RFC 5722, and Linux for IPv4 too), as
    /// is a duplicate.
    fn first_fragment(
        &mut self,
        i: usize,
        p: &PacketRef<'_>,
        key: &FlowKey,
        id: u32,
        len: u32,
    ) -> Option<bool> {
        let c = &mut self.local.totals;
        // Not remembered when its source holds its share: its later
        // fragments are then held and dropped, the flooder's own loss.
        // Counted, as is an entry evicted to make room (what a
        // many-source flood costs others).
        let evicted = self.frags.evicted;
        if !self.frags.first(key, id, p.ts_ns) {
            c.fragments_source_refused += 1;
        }
        c.fragments_evicted += self.frags.evicted - evicted;
        let mut cover = self.frags.cover(key, id, 0, len);
        if let Some(mut held) = self.hold.take(key, id) {
            // The held ones' bytes, in the order they came.
            held.retain(|h| {
                let Decoded::Ip(ip) = decode(h.link, &h.data) else {
                    return true;
                };
                let Frag::Later { off, len, .. } = ip.frag else {
                    return true;
                };
                match self.frags.cover(key, id, off, len) {
                    Cover::Fresh => true,
                    Cover::Duplicate => {
                        c.fragments_duplicate += 1;
                        false
                    }
                    Cover::Overlap => {
                        cover = Cover::Overlap;
                        false
                    }
                }
            });
            if cover == Cover::Overlap {
                c.fragments_overlap += held.len() as u64;
            } else {
                self.releasing.push((i, held));
            }
        }
        dropped_unless_fresh(c, cover)
    }

    /// A fragment's part: a first fragment records its ports (and releases
    /// later fragments held for it); a later one takes them, or is held
    /// until its first fragment comes (`Some(whether there was room)`); an
    /// incomplete first fragment is dropped unmatched (`Some(false)`).
    pub(super) fn fragment(
        &mut self,
        i: usize,
        p: &PacketRef<'_>,
        key: &mut FlowKey,
        frag: Frag,
    ) -> Option<bool> {
        let c = &mut self.local.totals;
        match frag {
            Frag::None => None,
            Frag::First { id, len } => {
                c.fragments += 1;
                self.first_fragment(i, p, key, id, len)
            }
            Frag::IncompleteFirst { .. } => {
                // Dropped, and not remembered: its later fragments must not
                // resolve to ports it does not carry (see `Frag`).
                c.fragments += 1;
                c.fragments_incomplete += 1;
                Some(false)
            }
            Frag::Later { id, off, len } => {
                c.fragments += 1;
                if let Some((sp, dp)) = self.frags.resolve(key, id, p.ts_ns) {
                    key.sport = sp;
                    key.dport = dp;
                    c.fragments_resolved += 1;
                    return dropped_unless_fresh(c, self.frags.cover(key, id, off, len));
                }
                // Before its first fragment: held, not matched with ports
                // it does not show.
                c.fragments_unresolved += 1;
                let copy = Held {
                    link: p.link,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                    data: p.data.to_vec(),
                };
                let ok = self.hold.hold(key, id, copy).is_ok();
                if !ok {
                    c.fragments_overflow += 1;
                }
                Some(ok)
            }
        }
    }
}

/// A fragment whose bytes are `cover`: on its way (`None`), or dropped
/// unmatched and counted as a duplicate or an overlap (`Some(false)`).
fn dropped_unless_fresh(c: &mut crate::Totals, cover: Cover) -> Option<bool> {
    match cover {
        Cover::Fresh => return None,
        Cover::Duplicate => c.fragments_duplicate += 1,
        Cover::Overlap => c.fragments_overlap += 1,
    }
    Some(false)
}
