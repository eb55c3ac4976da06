//! The worker's connection-tracking step (stateful rules, `cfdp-conntrack`):
//! before a burst is matched, each packet of a tracked connection takes
//! the connection's action (an ICMP error that quotes one is related to
//! it); after, a packet a stateful rule allowed opens its connection.
//! Transport facts (a TCP segment's numbers and options, an echo's
//! identifier, what an ICMP error quotes) are read here, on demand, for
//! TCP and ICMP packets only.

use cfdp_conntrack::table::{Probe, L4};
use cfdp_conntrack::{ConnTable, Dir, Hit, OpenError};
use cfdp_packet::{transport, Transport};
use cfdp_rules::{proto, Action, Allowing, FlowKey};

use crate::frame::PacketRef;

/// What a connection decided for a packet. (Kept to a few bytes: it is
/// returned through the burst loop for every tracked packet; with the
/// opening rule's slot in it as well, `worker-path`'s stateful UDP ran
/// 0.95× — flow export finds that slot with `ConnTable::peek` instead.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decided {
    /// A packet of the connection, either way; `answer`: it goes the
    /// connection's reply way and its 5-tuple is the reverse of the one
    /// that opened it (a TCP or UDP answer; an ICMP query's reply too,
    /// cfdp's ICMP 5-tuples carrying no ports), which flow export's biflow
    /// records count as the answers' direction.
    Established { allowing: Allowing, answer: bool },
    /// An ICMP error about the connection.
    Related { allowing: Allowing },
}

const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// Whether a packet of 5-tuple `key` has transport facts to read (TCP
/// and ICMP); any other is keyed by its 5-tuple alone.
fn has_facts(key: &FlowKey) -> bool {
    matches!(key.proto, proto::TCP | ICMP | ICMPV6)
}

/// The packet's transport facts (nothing to read for UDP and the rest).
fn facts(p: &PacketRef<'_>, key: &FlowKey) -> Transport {
    if has_facts(key) {
        transport(p.link, p.data)
    } else {
        Transport::Other
    }
}

/// Whether packet `p` (5-tuple `key`)'s transport checksum may be
/// trusted: right, vouched for by the NIC (TCP and UDP; a NIC's receive
/// checks do not cover ICMP), or not asked for (`[conntrack] checksum`
/// off).
fn checksum_ok(t: &ConnTable, p: &PacketRef<'_>, key: &FlowKey) -> bool {
    !t.checks_checksums()
        || (p.l4_vouched && matches!(key.proto, proto::TCP | proto::UDP))
        || cfdp_packet::transport_checksum_ok(p.link, p.data)
}

/// Whether a packet's connection may be keyed otherwise than by its
/// 5-tuple (ICMP: an echo by its identifier, an error by what it quotes).
pub(crate) fn keyed_apart(key: &FlowKey) -> bool {
    matches!(key.proto, ICMP | ICMPV6)
}

/// Whether the burst's track stage looks packet `key` up (its `probe` may
/// hold a connection, or it is keyed otherwise than by its 5-tuple).
pub(crate) fn looked_up(key: &FlowKey, probe: &Probe) -> bool {
    probe.may_hold() || keyed_apart(key)
}

/// An ICMP query's connection is keyed by its identifier and class (which
/// query, and its code) as its ports: the requester's port is the
/// identifier, the other end's the class, so that a request and its
/// answer are one connection's two directions.
fn echo_key(key: &FlowKey, id: u16, class: u16, request: bool) -> FlowKey {
    let (sport, dport) = if request { (id, class) } else { (class, id) };
    FlowKey {
        sport,
        dport,
        ..*key
    }
}

/// The connection's decision for packet `p` (its matched 5-tuple `key`,
/// with `probe` when the burst's probe of the table is still current),
/// if it belongs to one.
pub(crate) fn lookup(
    t: &ConnTable,
    p: &PacketRef<'_>,
    key: &FlowKey,
    probe: Option<&Probe>,
) -> Option<Decided> {
    let find = |k: &FlowKey, l4: L4, len: u32, ts: u64| match probe {
        Some(pr) => t.lookup_probed(pr, l4, len, ts),
        None => t.lookup(k, l4, len, ts),
    };
    // A wrong checksum: invalid, no connection (counted once, at the
    // burst's lookup: `probe` is the burst's; a second look within the
    // burst passes none).
    if !checksum_ok(t, p, key) {
        if probe.is_some() {
            t.count_invalid();
        }
        return None;
    }
    let (ts, len) = (p.ts_ns, p.orig_len);
    let allowing = |a: Action| a.tracked();
    let established = |h: Hit, by_tuple: bool| {
        allowing(h.action).map(|allowing| Decided::Established {
            allowing,
            answer: by_tuple && h.dir == Dir::Reply,
        })
    };
    // UDP and every protocol but TCP and ICMP: keyed by the 5-tuple with
    // nothing read beyond it (what `facts` and `keyed` would say), straight
    // to the table — the established UDP packet's path.
    if !has_facts(key) {
        return find(key, L4::None, len, ts).and_then(|h| established(h, true));
    }
    match facts(p, key) {
        // Related only when the error goes to the host that sent what it
        // quotes (Linux checks the outer destination): a forged error to
        // another host about a tracked flow meets the rules.
        Transport::Error { inner } if inner.src == key.dst => t
            .related(&inner, ts)
            .and_then(|h| allowing(h.action).map(|allowing| Decided::Related { allowing })),
        f => {
            let (k, l4) = keyed(key, f)?;
            // An echo's key is not the probe's: looked up without it.
            let hit = if matches!(l4, L4::Echo { .. }) {
                t.lookup(&k, l4, len, ts)
            } else {
                find(&k, l4, len, ts)
            };
            hit.and_then(|h| established(h, matches!(l4, L4::Tcp(_) | L4::Echo { .. })))
        }
    }
}

/// The key packet `key` is tracked by and what the table reads of it
/// beyond (an echo by its identifier); `None` for an ICMP error, which
/// belongs to the connection it quotes.
fn keyed(key: &FlowKey, f: Transport) -> Option<(FlowKey, L4)> {
    Some(match f {
        Transport::Tcp(seg) => (*key, L4::Tcp(seg)),
        Transport::Echo { id, class, request } => {
            (echo_key(key, id, class, request), L4::Echo { request })
        }
        Transport::Error { .. } => return None,
        Transport::LaterFragment => (*key, L4::Fragment),
        Transport::Other => (*key, L4::None),
    })
}

/// Whether packet `key`'s connection is still absent as its burst's
/// `probe` found it, though the burst has opened connections since: the
/// probe missed, nothing was opened in its stripe since, and the packet
/// is keyed by its 5-tuple (not ICMP). Under a flood of new connections,
/// most packets: they are not looked up again.
pub(crate) fn still_absent(t: &ConnTable, key: &FlowKey, probe: &Probe) -> bool {
    !probe.may_hold() && t.unchanged(probe) && !keyed_apart(key)
}

/// Opens the connection of packet `p` (`probe`: the burst's probe of
/// `key`), which the stateful rule in `slot` allowed with `action`. A
/// packet that cannot open one (invalid TCP flags, a TCP segment other
/// than a SYN or an ACK, an ICMP message other than an echo request) is
/// `NotAnOpener`, and one invalid for the connection it belongs to is
/// `Invalid`: the rule's action applies to it alone.
pub(crate) fn open(
    t: &ConnTable,
    p: &PacketRef<'_>,
    key: &FlowKey,
    probe: &Probe,
    slot: u32,
    action: Action,
) -> Result<(), OpenError> {
    if !checksum_ok(t, p, key) {
        // Counted here unless the burst's lookup did (it looks up what
        // its probe may hold, and ICMP).
        if !looked_up(key, probe) {
            t.count_invalid();
        }
        return Err(OpenError::Invalid);
    }
    let (k, l4) = keyed(key, facts(p, key)).ok_or(OpenError::NotAnOpener)?;
    // An echo's key is not the probe's: the table ignores the probe then.
    t.open_probed(&k, probe, l4, slot, action, p.orig_len, p.ts_ns)
        .map(|_| ())
}
