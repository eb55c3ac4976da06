//! One record of the flow cache and its key in one 64-byte line.

use cfdp_rules::FlowKey;

use super::Observed;
use crate::record::{Counts, EndReason, FlowRecord, Forwarding};

/// `flags`: the way holds a record.
pub(super) const USED: u8 = 1;
/// `flags`: the key is IPv6.
const V6: u8 = 2;
/// `flags`: the forwarding status, two bits from here.
pub(super) const FWD_SHIFT: u8 = 2;
/// `flags`: a biflow record — an answer was counted in its [`Side`].
pub(super) const BIFLOW: u8 = 16;
/// `flags`: the initiator sent a FIN (a biflow record ends once both
/// sides have, or at a RST).
pub(super) const FIN_FWD: u8 = 32;
/// `flags`: the responder sent a FIN.
pub(super) const FIN_REV: u8 = 64;
/// `flags`: a rule decided the record's first packet, its id kept beside
/// the line (a cache that keeps rules).
pub(super) const RULE: u8 = 128;

/// One record and its key in one cache line. The last packet's time is
/// kept as milliseconds after the first (a record ends as active before it
/// could pass `u32::MAX`), the packet count in 32 bits (a record ends as
/// active before it would wrap): what fits 64 bytes with IPv6 addresses.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Way {
    pub(super) first_ms: u64,
    pub(super) bytes: u64,
    pub(super) src: [u8; 16],
    pub(super) dst: [u8; 16],
    pub(super) sport: u16,
    pub(super) dport: u16,
    pub(super) proto: u8,
    /// [`USED`], [`V6`], the forwarding status, [`BIFLOW`], [`FIN_FWD`],
    /// [`FIN_REV`], [`RULE`].
    pub(super) flags: u8,
    pub(super) port: u16,
    pub(super) packets: u32,
    /// The last packet's time, in ms after `first_ms`.
    pub(super) last_ms: u32,
}

const _: () = assert!(std::mem::size_of::<Way>() == 64);

/// What a record may keep beside its [`Way`] (kept apart, and only by a
/// cache that asks for it: the way stays one line, and a cache that keeps
/// neither pays nothing for them): a biflow record's answers' counts, and
/// the rule that decided its first packet.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Side {
    pub(super) bytes: u64,
    pub(super) packets: u32,
    /// The rule's id, under [`RULE`].
    pub(super) rule: u32,
}

const _: () = assert!(std::mem::size_of::<Side>() == 16);

pub(super) fn forwarding_bits(f: Forwarding) -> u8 {
    (match f {
        Forwarding::Forwarded => 0,
        Forwarding::Redirected => 1,
        Forwarding::Dropped => 2,
    }) << FWD_SHIFT
}

fn forwarding_of(flags: u8) -> Forwarding {
    match (flags >> FWD_SHIFT) & 3 {
        0 => Forwarding::Forwarded,
        1 => Forwarding::Redirected,
        _ => Forwarding::Dropped,
    }
}

impl Way {
    /// The record packet `p` starts, under key `k` (its own 5-tuple, or
    /// the initiator's for an answer: `reply`, whose count goes to the
    /// [`Side`] beside, started by the caller, as is its rule: `rule`).
    pub(super) fn new(p: &Observed, k: &FlowKey, reply: bool, rule: bool, now_ms: u64) -> Self {
        let (packets, bytes, biflow) = if reply {
            (0, 0, BIFLOW)
        } else {
            (1, u64::from(p.len), 0)
        };
        let rule = if rule { RULE } else { 0 };
        Way {
            first_ms: now_ms,
            bytes,
            src: k.src,
            dst: k.dst,
            sport: k.sport,
            dport: k.dport,
            proto: k.proto,
            flags: USED | if k.v6 { V6 } else { 0 } | forwarding_bits(p.forwarding) | biflow | rule,
            port: p.port,
            packets,
            last_ms: 0,
        }
    }

    #[inline(always)]
    pub(super) fn holds(&self, k: &FlowKey) -> bool {
        self.flags & (USED | V6) == USED | if k.v6 { V6 } else { 0 }
            && self.sport == k.sport
            && self.dport == k.dport
            && self.proto == k.proto
            && self.src == k.src
            && self.dst == k.dst
    }

    pub(super) fn used(&self) -> bool {
        self.flags & USED != 0
    }

    /// The last packet's time, in ms.
    pub(super) fn last(&self) -> u64 {
        self.first_ms + u64::from(self.last_ms)
    }

    pub(super) fn key(&self) -> FlowKey {
        FlowKey {
            v6: self.flags & V6 != 0,
            src: self.src,
            dst: self.dst,
            proto: self.proto,
            sport: self.sport,
            dport: self.dport,
        }
    }

    /// The record as it ends, for `end`; `side`: what is kept beside it,
    /// read where [`BIFLOW`] says answers were counted and [`RULE`] that a
    /// rule is kept.
    pub(super) fn record(&self, side: Option<&Side>, end: EndReason) -> FlowRecord {
        FlowRecord {
            key: self.key(),
            packets: u64::from(self.packets),
            bytes: self.bytes,
            reverse: side.filter(|_| self.flags & BIFLOW != 0).map(|r| Counts {
                packets: u64::from(r.packets),
                bytes: r.bytes,
            }),
            rule: side.filter(|_| self.flags & RULE != 0).map(|r| r.rule),
            first_ns: self.first_ms * 1_000_000,
            last_ns: self.last() * 1_000_000,
            port: self.port,
            forwarding: forwarding_of(self.flags),
            end,
        }
    }
}
