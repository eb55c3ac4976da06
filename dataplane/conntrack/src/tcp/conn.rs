//! A TCP connection's tracking state as plain data — both directions'
//! windows and what the last segments said (Linux's `ip_ct_tcp`), its six
//! words in a slot, Linux's states in its table's order, and the small
//! helpers the state table (`tcp.rs`) and the window checks
//! (`tcp/window.rs`) share. Nothing here names either of them.

use cfdp_packet::TcpSeg;

use crate::key::Dir;
use crate::state::tcp::{ACK, CWR, ECE, FIN, PSH, RST, SYN};
use crate::state::State;

/// The settings Linux has as sysctls (`net.netfilter.nf_conntrack_tcp_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSettings {
    /// `tcp_be_liberal`: nothing is out of window; only a RST before the
    /// other side's highest acknowledgement is invalid (default off).
    pub be_liberal: bool,
    /// `tcp_loose`: a connection may be picked up from a segment other
    /// than a SYN (default on); such a connection is tracked liberally.
    pub loose: bool,
    /// `tcp_max_retrans`: retransmissions after which the timeout is
    /// capped at the retransmission timeout (default 3).
    pub max_retrans: u8,
}

impl Default for TcpSettings {
    fn default() -> Self {
        Self {
            be_liberal: false,
            loose: true,
            max_retrans: 3,
        }
    }
}

// One direction's flags (Linux's `IP_CT_TCP_FLAG_*`).
/// The window scale option was sent.
pub const F_WSCALE: u8 = 0x01;
/// SACK was permitted.
pub const F_SACK_PERM: u8 = 0x02;
/// This side closed first.
pub const F_CLOSE_INIT: u8 = 0x04;
/// Liberal tracking: nothing of this side is out of window.
pub const F_BE_LIBERAL: u8 = 0x08;
/// Data sent and not acknowledged yet.
pub const F_UNACK: u8 = 0x10;
/// `td_maxack` holds an acknowledgement.
pub const F_MAXACK_SET: u8 = 0x20;

// `last_flags`: what a SYN that was let through said, and two markers.
pub(super) const L_SIMULTANEOUS_OPEN: u8 = 0x04;
pub(super) const L_CHALLENGE_ACK: u8 = 0x08;

/// One direction's window (Linux's `ip_ct_tcp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Side {
    /// The highest sequence number sent plus the segment's length.
    pub end: u32,
    /// The highest acknowledgement plus window the other side announced.
    pub maxend: u32,
    /// The largest window (scaled) this side announced.
    pub maxwin: u32,
    /// The highest acknowledgement this side sent.
    pub maxack: u32,
    pub scale: u8,
    pub flags: u8,
}

impl Side {
    /// Linux's `nf_ct_tcp_state_reset`.
    pub(super) fn reset(&mut self) {
        *self = Side {
            flags: self.flags & F_BE_LIBERAL,
            ..Side::default()
        };
    }
}

/// Which of Linux's six flag classes a segment is (`get_conntrack_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Index {
    Syn = 0,
    SynAck = 1,
    Fin = 2,
    Ack = 3,
    Rst = 4,
    None = 5,
}

impl Index {
    pub fn of(flags: u8) -> Index {
        if flags & RST != 0 {
            Index::Rst
        } else if flags & SYN != 0 {
            if flags & ACK != 0 {
                Index::SynAck
            } else {
                Index::Syn
            }
        } else if flags & FIN != 0 {
            Index::Fin
        } else if flags & ACK != 0 {
            Index::Ack
        } else {
            Index::None
        }
    }

    pub(super) fn from_bits(b: u8) -> Index {
        [
            Index::Syn,
            Index::SynAck,
            Index::Fin,
            Index::Ack,
            Index::Rst,
            Index::None,
        ]
        .get(usize::from(b))
        .copied()
        .unwrap_or(Index::None)
    }
}

/// A TCP connection's tracking state beside its [`State`]: both
/// directions' windows and what the last segments said (Linux's
/// `ip_ct_tcp` less the state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpConn {
    /// Original, reply.
    pub seen: [Side; 2],
    pub last_index: Index,
    pub last_dir: Dir,
    pub last_ack: u32,
    pub last_end: u32,
    pub last_win: u16,
    /// Saturates at 3 (only "at least `max_retrans`" is asked, and the
    /// setting is at most 3 here).
    pub retrans: u8,
    pub last_wscale: u8,
    pub last_flags: u8,
}

impl Default for TcpConn {
    fn default() -> Self {
        Self {
            seen: [Side::default(); 2],
            last_index: Index::None,
            last_dir: Dir::Orig,
            last_ack: 0,
            last_end: 0,
            last_win: 0,
            retrans: 0,
            last_wscale: 0,
            last_flags: 0,
        }
    }
}

/// Words a [`TcpConn`] takes in a slot.
pub const WORDS: usize = 6;

impl TcpConn {
    /// The connection in six words (what a slot keeps).
    pub fn pack(&self) -> [u64; WORDS] {
        let w = |lo: u32, hi: u32| u64::from(lo) | u64::from(hi) << 32;
        let [o, r] = &self.seen;
        [
            w(o.end, o.maxend),
            w(o.maxwin, o.maxack),
            w(r.end, r.maxend),
            w(r.maxwin, r.maxack),
            w(self.last_ack, self.last_end),
            u64::from(self.last_win)
                | u64::from(o.scale & 0xf) << 16
                | u64::from(o.flags & 0x3f) << 20
                | u64::from(r.scale & 0xf) << 26
                | u64::from(r.flags & 0x3f) << 30
                | (self.last_index as u64) << 36
                | (self.last_dir.index() as u64) << 39
                | u64::from(self.retrans.min(3)) << 40
                | u64::from(self.last_wscale & 0xf) << 42
                | u64::from(self.last_flags & 0x1f) << 46,
        ]
    }

    /// The connection [`Self::pack`] gave.
    pub fn unpack(w: &[u64; WORDS]) -> Self {
        let lo = |x: u64| x as u32;
        let hi = |x: u64| (x >> 32) as u32;
        let bits = |s: u32, n: u32| ((w[5] >> s) & ((1 << n) - 1)) as u8;
        Self {
            seen: [
                Side {
                    end: lo(w[0]),
                    maxend: hi(w[0]),
                    maxwin: lo(w[1]),
                    maxack: hi(w[1]),
                    scale: bits(16, 4),
                    flags: bits(20, 6),
                },
                Side {
                    end: lo(w[2]),
                    maxend: hi(w[2]),
                    maxwin: lo(w[3]),
                    maxack: hi(w[3]),
                    scale: bits(26, 4),
                    flags: bits(30, 6),
                },
            ],
            last_ack: lo(w[4]),
            last_end: hi(w[4]),
            last_win: w[5] as u16,
            last_index: Index::from_bits(bits(36, 3)),
            last_dir: if bits(39, 1) == 1 {
                Dir::Reply
            } else {
                Dir::Orig
            },
            retrans: bits(40, 2),
            last_wscale: bits(42, 4),
            last_flags: bits(46, 5),
        }
    }

    /// A connection taken over without its history (restored from a
    /// save that has no windows): both sides liberal, as Linux makes a
    /// connection it picks up mid-stream.
    pub fn liberal() -> Self {
        let side = Side {
            flags: F_SACK_PERM | F_BE_LIBERAL,
            ..Side::default()
        };
        Self {
            seen: [side; 2],
            ..Self::default()
        }
    }
}

/// `a` before `b` in sequence space.
pub(super) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

pub(super) fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// The flag combinations Linux's `tcp_error` lets through (ECE, CWR and
/// PSH ignored): a SYN (with URG or ACK), a RST (with ACK), FIN+ACK (with
/// URG), ACK (with URG). Anything else — SYN+FIN, a bare FIN, no flags —
/// is invalid: it opens nothing and moves no connection.
pub fn valid_flags(f: u8) -> bool {
    let f = f & !(ECE | CWR | PSH);
    matches!(
        f,
        0x02 | 0x22 | 0x12 | 0x04 | 0x14 | 0x11 | 0x31 | 0x10 | 0x30
    )
}

/// `seq + len`, counting SYN and FIN as one each (Linux's
/// `segment_seq_plus_len`).
pub(super) fn seg_end(s: &TcpSeg) -> u32 {
    s.seq
        .wrapping_add(s.payload)
        .wrapping_add(u32::from(s.flags & SYN != 0))
        .wrapping_add(u32::from(s.flags & FIN != 0))
}

/// The options of a SYN as a side's scale and flags (`tcp_options`: both
/// reset first, the liberal flag kept).
pub(super) fn options(side: &mut Side, s: &TcpSeg) {
    side.scale = 0;
    side.flags &= F_BE_LIBERAL;
    if s.sack_perm {
        side.flags |= F_SACK_PERM;
    }
    if let Some(w) = s.wscale {
        side.scale = w.min(14);
        side.flags |= F_WSCALE;
    }
}

/// Linux's states in its table's order: `sNO … sS2`, then `sIV`, `sIG`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum T {
    No,
    Ss,
    Sr,
    Es,
    Fw,
    Cw,
    La,
    Tw,
    Cl,
    S2,
    Iv,
    Ig,
}

impl T {
    pub(super) fn of(s: State) -> T {
        match s {
            State::TcpSynSent => T::Ss,
            State::TcpSynRecv => T::Sr,
            State::TcpEstablished => T::Es,
            State::TcpFinWait => T::Fw,
            State::TcpCloseWait => T::Cw,
            State::TcpLastAck => T::La,
            State::TcpTimeWait => T::Tw,
            State::TcpClose => T::Cl,
            State::TcpSynSent2 => T::S2,
            _ => T::No,
        }
    }

    pub(super) fn state(self) -> Option<State> {
        Some(match self {
            T::Ss => State::TcpSynSent,
            T::Sr => State::TcpSynRecv,
            T::Es => State::TcpEstablished,
            T::Fw => State::TcpFinWait,
            T::Cw => State::TcpCloseWait,
            T::La => State::TcpLastAck,
            T::Tw => State::TcpTimeWait,
            T::Cl => State::TcpClose,
            T::S2 => State::TcpSynSent2,
            T::No | T::Iv | T::Ig => return None,
        })
    }
}
