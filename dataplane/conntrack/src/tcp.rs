//! TCP tracking as Linux's conntrack does it (`nf_conntrack_proto_tcp.c`,
//! 6.x): per direction the highest sequence number sent (`td_end`), the
//! highest the receiver's window allows (`td_maxend`), the largest window
//! (`td_maxwin`), the window scale, and the state table `tcp_conntracks`
//! with its special cases (simultaneous open, reopening after TIME_WAIT,
//! RST checked against the window and the last acknowledgement,
//! challenge ACKs, mid-stream pickup).
//!
//! Written from Linux's rules, not copied: the names (`td_end`,
//! `sIG`…) are Linux's so that the two can be read side by side. What is
//! left out, and why:
//! * the retransmission counter compares the direction, acknowledgement,
//!   end and window of consecutive ACK segments, not the sequence number
//!   (one 32-bit word less a connection; a segment with the same end and
//!   length has the same sequence number);
//! * SYN proxy and NAT sequence offsets (cfdp has neither);
//! * the re-initialisation patch for a SYN whose sequence number is
//!   before the previous one in SYN_SENT (Linux 6.15); such a SYN is
//!   checked against the window like any other.
//!
//! Everything here is plain data and pure functions: the table
//! ([`crate::table`]) keeps a connection's [`TcpConn`] in six words of its
//! slot and runs [`packet`] under the slot's lock.

use cfdp_packet::TcpSeg;

use crate::key::Dir;
use crate::state::State;

/// TCP flag bits as the header carries them ([`crate::state::tcp`]).
pub mod flags {
    pub use crate::state::tcp::*;
}
use flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN};

/// The settings Linux has as sysctls (`net.netfilter.nf_conntrack_tcp_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSettings {
    /// `tcp_be_liberal`: only out-of-window RSTs are invalid (default off).
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
const L_SIMULTANEOUS_OPEN: u8 = 0x04;
const L_CHALLENGE_ACK: u8 = 0x08;

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
    fn reset(&mut self) {
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

    fn from_bits(b: u8) -> Index {
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
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

fn after(a: u32, b: u32) -> bool {
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
fn seg_end(s: &TcpSeg) -> u32 {
    s.seq
        .wrapping_add(s.payload)
        .wrapping_add(u32::from(s.flags & SYN != 0))
        .wrapping_add(u32::from(s.flags & FIN != 0))
}

/// The options of a SYN as a side's scale and flags (`tcp_options`: both
/// reset first, the liberal flag kept).
fn options(side: &mut Side, s: &TcpSeg) {
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
enum T {
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
    fn of(s: State) -> T {
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

    fn state(self) -> Option<State> {
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

/// Linux's `tcp_conntracks[dir][index][state]`: the next state, or
/// invalid (`Iv`) or ignored (`Ig`).
fn table(dir: Dir, index: Index, s: T) -> T {
    use T::*;
    // Columns: No, Ss, Sr, Es, Fw, Cw, La, Tw, Cl, S2.
    const ORIG: [[T; 10]; 6] = [
        /* syn    */ [Ss, Ss, Ig, Ig, Ig, Ig, Ig, Ss, Ss, S2],
        /* synack */ [Iv, Iv, Sr, Iv, Iv, Iv, Iv, Iv, Iv, Sr],
        /* fin    */ [Iv, Iv, Fw, Fw, La, La, La, Tw, Cl, Iv],
        /* ack    */ [Es, Iv, Es, Es, Cw, Cw, Tw, Tw, Cl, Iv],
        /* rst    */ [Iv, Cl, Cl, Cl, Cl, Cl, Cl, Cl, Cl, Cl],
        /* none   */ [Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv],
    ];
    const REPLY: [[T; 10]; 6] = [
        /* syn    */ [Iv, S2, Iv, Iv, Iv, Iv, Iv, Ss, Iv, S2],
        /* synack */ [Iv, Sr, Ig, Ig, Ig, Ig, Ig, Ig, Ig, Sr],
        /* fin    */ [Iv, Iv, Fw, Fw, La, La, La, Tw, Cl, Iv],
        /* ack    */ [Iv, Ig, Sr, Es, Cw, Cw, Tw, Tw, Cl, Ig],
        /* rst    */ [Iv, Cl, Cl, Cl, Cl, Cl, Cl, Cl, Cl, Cl],
        /* none   */ [Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv, Iv],
    ];
    let col = match s {
        No => 0,
        Ss => 1,
        Sr => 2,
        Es => 3,
        Fw => 4,
        Cw => 5,
        La => 6,
        Tw => 7,
        Cl => 8,
        S2 => 9,
        Iv | Ig => return Iv,
    };
    let t = if dir == Dir::Orig { &ORIG } else { &REPLY };
    t[index as usize][col]
}

/// The state Linux's table gives, for the property test against the
/// table as Linux prints it: `None` for invalid, `Some(None)` for
/// ignored. `state` `None` is `sNO` (no connection yet).
pub fn transition(dir: Dir, flags: u8, state: Option<State>) -> Option<Option<State>> {
    let from = state.map_or(T::No, T::of);
    match table(dir, Index::of(flags), from) {
        T::Iv => None,
        T::Ig => Some(None),
        t => Some(t.state()),
    }
}

/// What the connection's flags say beside its TCP state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// A packet of the reply direction was accepted (`IPS_SEEN_REPLY`).
    pub seen_reply: bool,
    /// The connection is assured (`IPS_ASSURED`): never early-dropped.
    pub assured: bool,
}

/// What a segment does to its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// In window: the connection moves to `state`; its timeout is the
    /// state's, capped at the unacknowledged/retransmission timeout when
    /// `cap`; `assured` when it became assured with this segment;
    /// `refresh`: its timeout starts again (not for a SYN sent again
    /// before any answer, so that a reused port cannot keep it alive).
    Accept {
        state: State,
        cap: bool,
        assured: bool,
        refresh: bool,
    },
    /// Part of the connection, which does not move nor refresh its
    /// timeout: a segment Linux ignores (it may signal a connection the
    /// tracker is out of step with), or a SYN sent again before any answer.
    Pass,
    /// A RST before any answer: let through, and the connection is gone.
    Kill,
    /// Invalid: the segment meets the rules as if no connection were
    /// tracked; the connection stays.
    Invalid,
    /// A SYN that reopens a closed or aborted connection: the old entry
    /// is removed and the segment is new (it meets the rules).
    Reopen,
}

/// The first segment of a connection (Linux's `tcp_new` then
/// `nf_conntrack_tcp_packet`): its tracking state and verdict, or `None`
/// when it opens nothing (invalid flags; a segment other than a SYN or an
/// ACK; an ACK with `loose` off).
pub fn open(s: &TcpSeg, cfg: &TcpSettings) -> Option<(TcpConn, Verdict)> {
    if !valid_flags(s.flags) {
        return None;
    }
    let mut c = TcpConn::default();
    let first = &mut c.seen[0];
    match table(Dir::Orig, Index::of(s.flags), T::No) {
        T::Ss => {
            first.end = seg_end(s);
            first.maxwin = u32::from(s.win).max(1);
            first.maxend = first.end;
            options(first, s);
        }
        T::Es if cfg.loose => {
            first.end = seg_end(s);
            first.maxwin = u32::from(s.win).max(1);
            first.maxend = first.end.wrapping_add(first.maxwin);
            // Liberal and SACK both ways: the window scale is unknown.
            c.seen[0].flags = F_SACK_PERM | F_BE_LIBERAL;
            c.seen[1].flags = F_SACK_PERM | F_BE_LIBERAL;
        }
        _ => return None,
    }
    let v = packet(&mut c, None, Status::default(), Dir::Orig, s, cfg);
    Some((c, v))
}

/// A segment of a tracked connection in `state` (`None`: its first,
/// from [`open`]), going `dir`: Linux's `nf_conntrack_tcp_packet` after
/// the connection was found. `c` is updated as Linux updates it (also for
/// ignored and some invalid segments: their annotations).
pub fn packet(
    c: &mut TcpConn,
    state: Option<State>,
    st: Status,
    dir: Dir,
    s: &TcpSeg,
    cfg: &TcpSettings,
) -> Verdict {
    if !valid_flags(s.flags) {
        return Verdict::Invalid;
    }
    let old = state.map_or(T::No, T::of);
    let index = Index::of(s.flags);
    let plan = match special(c, old, st, dir, index, s) {
        Ok(plan) => plan,
        Err(v) => return v,
    };
    if !plan.skip_window {
        match in_window(c, old, dir, index, s, cfg) {
            Window::Accept => {}
            Window::Ignore => return Verdict::Pass,
            Window::Invalid => {
                handle_invalid(c, st, dir, index);
                return Verdict::Invalid;
            }
        }
    }
    conclude(c, old, plan, st, dir, index, s, cfg)
}

/// What the state table and its special cases decided before the window
/// is checked.
struct Plan {
    new: T,
    /// The old state as the assured rule sees it (a resynchronised
    /// SYN-ACK counts as from SYN_SENT).
    old_for_assure: T,
    /// No window check (a RST Linux takes on other grounds).
    skip_window: bool,
}

/// The state table's answer for the segment and Linux's special cases
/// (the `switch (new_state)` of `nf_conntrack_tcp_packet`): a plan, or the
/// verdict when the segment stops here.
fn special(
    c: &mut TcpConn,
    old: T,
    st: Status,
    dir: Dir,
    index: Index,
    s: &TcpSeg,
) -> Result<Plan, Verdict> {
    let mut plan = Plan {
        new: table(dir, index, old),
        old_for_assure: old,
        skip_window: false,
    };
    match plan.new {
        T::Ss if matches!(old, T::Tw | T::Cl) => {
            let closing = (c.seen[0].flags | c.seen[1].flags) & F_CLOSE_INIT != 0;
            if closing || (c.last_dir == dir && c.last_index == Index::Rst) {
                return Err(Verdict::Reopen);
            }
            return Err(ignore(c, old, dir, index, s));
        }
        T::Ig => {
            if index == Index::SynAck
                && c.last_index == Index::Syn
                && c.last_dir != dir
                && s.ack == c.last_end
            {
                // The answer to a SYN we ignored: the two ends are in
                // step and we are not; take the SYN's side from it.
                plan.old_for_assure = T::Ss;
                plan.new = T::Sr;
                resync(c, dir);
            } else {
                return Err(ignore(c, old, dir, index, s));
            }
        }
        T::Iv => return Err(Verdict::Invalid),
        // RFC 5961: a challenge ACK answering a SYN we let through in
        // LAST_ACK does not acknowledge the last FIN.
        T::Tw
            if old == T::La
                && index == Index::Ack
                && c.last_dir != dir
                && c.last_index == Index::Syn
                && c.last_flags & L_CHALLENGE_ACK != 0 =>
        {
            c.last_flags &= !L_CHALLENGE_ACK;
            return Err(Verdict::Pass);
        }
        T::S2 => c.last_flags |= L_SIMULTANEOUS_OPEN,
        T::Sr
            if dir == Dir::Reply
                && index == Index::Ack
                && c.last_flags & L_SIMULTANEOUS_OPEN != 0 =>
        {
            plan.new = T::Es;
        }
        T::Cl if index == Index::Rst => {
            if matches!(old, T::Fw | T::Cw | T::La | T::Tw | T::Cl) {
                // Closing: the tuple may be in use again; no checks.
                plan.skip_window = true;
            } else {
                rst(c, &mut plan, old, st, dir, s)?;
            }
        }
        _ => {}
    }
    Ok(plan)
}

/// A RST of a connection not closing yet: checked against the highest
/// acknowledgement the other side sent (invalid before it; exact, or
/// right after this side's last data, it closes; otherwise in window it
/// keeps the state for a challenge ACK), or taken without a window check
/// when it answers a SYN or ACK that was let through.
fn rst(
    c: &TcpConn,
    plan: &mut Plan,
    old: T,
    st: Status,
    dir: Dir,
    s: &TcpSeg,
) -> Result<(), Verdict> {
    let peer = &c.seen[1 - dir.index()];
    let established = old == T::Es && st.assured;
    if peer.flags & F_MAXACK_SET != 0 && c.last_index != Index::Syn {
        let seq = s.seq;
        if seq == 0 && !established {
            return Ok(()); // an answer to a SYN let through
        }
        if before(seq, peer.maxack) {
            return Err(Verdict::Invalid);
        }
        if !established
            || seq == peer.maxack
            || (c.last_index == Index::Ack && c.last_dir == dir && seq == c.last_end)
        {
            return Ok(());
        }
        // In window but not exact: keep the state, so that a challenge
        // ACK can follow.
        plan.new = old;
    }
    let answers_let_through = ((st.seen_reply && c.last_index == Index::Syn)
        || (!st.assured && c.last_index == Index::Ack))
        && s.ack == c.last_end;
    let answers_challenge = old == T::Ss
        && c.last_index == Index::Ack
        && c.last_dir == Dir::Reply
        && s.seq == c.last_ack;
    plan.skip_window = answers_let_through || answers_challenge;
    Ok(())
}

/// The segment is in: the connection moves, and Linux's timeout and
/// assured rules give the verdict.
#[allow(clippy::too_many_arguments)] // the segment and what was decided of it
fn conclude(
    c: &mut TcpConn,
    old: T,
    plan: Plan,
    st: Status,
    dir: Dir,
    index: Index,
    s: &TcpSeg,
    cfg: &TcpSettings,
) -> Verdict {
    let new = plan.new;
    c.last_index = index;
    c.last_dir = dir;
    let Some(state) = new.state() else {
        return Verdict::Invalid;
    };
    if old != new && new == T::Fw {
        c.seen[dir.index()].flags |= F_CLOSE_INIT;
    }
    let unack = (c.seen[0].flags | c.seen[1].flags) & F_UNACK != 0;
    let cap = c.retrans >= cfg.max_retrans || unack || c.last_win == 0;
    if !st.seen_reply {
        if s.flags & RST != 0 {
            return Verdict::Kill;
        }
        return Verdict::Accept {
            state,
            // Picked up mid-stream, no answer yet: not 5 days.
            cap: cap || new == T::Es,
            assured: false,
            // A SYN sent again before any answer does not keep the entry
            // alive (a port reused by the client or a NAT).
            refresh: !(index == Index::Syn && old == T::Ss),
        };
    }
    let assured = !st.assured && matches!(plan.old_for_assure, T::Sr | T::Es) && new == T::Es;
    Verdict::Accept {
        state,
        cap,
        assured,
        refresh: true,
    }
}

/// An ignored segment: noted (Linux's `nf_ct_tcp_state_annotate`, and
/// for a SYN of the opener its options), passed, nothing moves.
fn ignore(c: &mut TcpConn, old: T, dir: Dir, index: Index, s: &TcpSeg) -> Verdict {
    annotate(c, dir, index, s);
    if index == Index::Syn && dir == Dir::Orig {
        c.last_flags = 0;
        c.last_wscale = 0;
        if let Some(w) = s.wscale {
            c.last_flags |= F_WSCALE;
            c.last_wscale = w.min(14);
        }
        if s.sack_perm {
            c.last_flags |= F_SACK_PERM;
        }
        if old == T::La {
            c.last_flags |= L_CHALLENGE_ACK;
        }
    }
    Verdict::Pass
}

fn annotate(c: &mut TcpConn, dir: Dir, index: Index, s: &TcpSeg) {
    c.last_index = index;
    c.last_dir = dir;
    c.last_end = seg_end(s);
    c.last_win = s.win;
}

/// Linux's `nf_ct_tcp_state_resync`: the side of the ignored SYN from
/// what it said, this side reset.
fn resync(c: &mut TcpConn, dir: Dir) {
    let l = c.last_dir.index();
    let side = &mut c.seen[l];
    side.end = c.last_end;
    side.maxend = c.last_end;
    side.maxwin = u32::from(c.last_win).max(1);
    side.scale = c.last_wscale;
    c.last_flags &= !L_CHALLENGE_ACK;
    side.flags = c.last_flags & (F_WSCALE | F_SACK_PERM);
    c.seen[dir.index()].reset();
}

/// Linux's `nf_tcp_handle_invalid`: an out-of-window FIN or RST of an
/// assured connection answering the other side's FIN or RST caps its
/// timeout (a dead connection goes sooner); otherwise it is noted.
fn handle_invalid(c: &mut TcpConn, st: Status, dir: Dir, index: Index) {
    if !st.assured || !matches!(index, Index::Rst | Index::Fin) {
        return;
    }
    if c.last_dir != dir && matches!(c.last_index, Index::Fin | Index::Rst) {
        // Linux lowers the timeout to the unacknowledged one; the table
        // keeps no per-connection timeout, so the unacknowledged flag
        // that caps it is set instead.
        c.seen[dir.index()].flags |= F_UNACK;
    } else {
        c.last_index = index;
        c.last_dir = dir;
    }
}

enum Window {
    Accept,
    Ignore,
    Invalid,
}

/// The largest acknowledgement window (`MAXACKWINDOW`).
fn max_ack_window(sender: &Side) -> u32 {
    sender.maxwin.max(66_000)
}

/// Linux's `tcp_in_window`: whether the segment is within the windows
/// seen, updating them when it is.
fn in_window(
    c: &mut TcpConn,
    old: T,
    dir: Dir,
    index: Index,
    s: &TcpSeg,
    cfg: &TcpSettings,
) -> Window {
    let d = dir.index();
    let (mut sender, mut receiver) = (c.seen[d], c.seen[1 - d]);
    let end = seg_end(s);
    if let Some(w) = init_sides(&mut sender, &mut receiver, old, dir, s, end) {
        c.seen[d] = sender;
        c.seen[1 - d] = receiver;
        return w;
    }
    // Out of window: Linux logs it and, liberal, accepts it anyway — but
    // for a RST ("only out of window RST segments are invalid").
    let liberal = (sender.flags & F_BE_LIBERAL != 0 || cfg.be_liberal) && s.flags & RST == 0;
    let n = Numbers::of(s, &sender, &receiver, old, end);
    let checked = bounds(&mut sender, &receiver, &n);
    if !matches!(checked, Window::Accept) {
        if sender != c.seen[d] {
            c.seen[d] = sender; // an overshoot is noted even so
        }
        return if liberal { Window::Accept } else { checked };
    }
    update(&mut sender, &mut receiver, s, &n);
    c.seen[d] = sender;
    c.seen[1 - d] = receiver;
    if index == Index::Ack {
        if c.last_dir == dir && c.last_ack == n.ack && c.last_end == n.end && c.last_win == s.win {
            c.retrans = c.retrans.saturating_add(1).min(3);
        } else {
            c.last_dir = dir;
            c.last_ack = n.ack;
            c.last_end = n.end;
            c.last_win = s.win;
            c.retrans = 0;
        }
    }
    Window::Accept
}

/// The sides' first numbers: a SYN (or SYN-ACK) starts its side, a
/// segment of a side never seen takes what it says (mid-stream). `Some`
/// when that settles the segment (a SYN of a simultaneous open).
fn init_sides(
    sender: &mut Side,
    receiver: &mut Side,
    old: T,
    dir: Dir,
    s: &TcpSeg,
    end: u32,
) -> Option<Window> {
    let syn = s.flags & SYN != 0;
    let has_ack = s.flags & ACK != 0;
    if sender.maxwin == 0 {
        if syn {
            init_sender(sender, receiver, s, end, dir);
            // Simultaneous open.
            return (!has_ack).then_some(Window::Accept);
        }
        // Mid-stream: take what the segment says.
        let sack = if receiver.flags & F_SACK_PERM != 0 {
            s.sack
        } else {
            s.ack
        };
        sender.end = end;
        sender.maxwin = (u32::from(s.win) << sender.scale).max(1);
        sender.maxend = end.wrapping_add(sender.maxwin);
        if receiver.maxwin == 0 {
            receiver.end = sack;
            receiver.maxend = sack;
        } else if sack == receiver.end.wrapping_add(1) {
            // A keepalive's answer.
            receiver.end = receiver.end.wrapping_add(1);
        }
    } else if syn && after(end, sender.end) && matches!(old, T::Ss | T::Sr) {
        // A SYN (or SYN-ACK) sent again with other numbers (RFC 793's
        // reinitialised TCP): the side starts again.
        init_sender(sender, receiver, s, end, dir);
        if dir == Dir::Reply && !has_ack {
            return Some(Window::Accept);
        }
    }
    None
}

/// A segment's numbers as the window checks read them.
struct Numbers {
    seq: u32,
    end: u32,
    ack: u32,
    sack: u32,
    win: u32,
}

impl Numbers {
    fn of(s: &TcpSeg, sender: &Side, receiver: &Side, old: T, end: u32) -> Numbers {
        let mut n = Numbers {
            seq: s.seq,
            end,
            ack: s.ack,
            sack: if receiver.flags & F_SACK_PERM != 0 {
                s.sack
            } else {
                s.ack
            },
            win: u32::from(s.win),
        };
        let rst_ack = s.flags & (ACK | RST) == ACK | RST;
        if s.flags & ACK == 0 || (rst_ack && n.ack == 0) {
            // No ACK (or a RST with a zero one, as some stacks send):
            // taken as acknowledging everything.
            n.ack = receiver.end;
            n.sack = receiver.end;
        }
        if s.flags & RST != 0 && n.seq == 0 && old == T::Ss {
            // A RST answering a SYN.
            n.seq = sender.end;
            n.end = sender.end;
        }
        n
    }
}

/// Linux's four bounds: the data within the receiver's window (I, II),
/// the acknowledgement within what was sent (III, IV).
fn bounds(sender: &mut Side, receiver: &Side, n: &Numbers) -> Window {
    let lowest_ack = receiver
        .end
        .wrapping_sub(max_ack_window(sender))
        .wrapping_sub(1);
    let lowest_end = sender.end.wrapping_sub(receiver.maxwin).wrapping_sub(1);
    if !before(n.seq, sender.maxend.wrapping_add(1)) {
        let overshot = n.end.wrapping_sub(sender.maxend).wrapping_add(1);
        let in_recv_win = receiver.maxwin != 0 && after(n.end, lowest_end);
        if in_recv_win
            && after(n.sack, lowest_ack)
            && overshot <= receiver.maxwin
            && before(n.sack, receiver.end.wrapping_add(1))
        {
            // More than the receiver's window allowed, but only just:
            // noted so that its acknowledgement is not over the bound.
            sender.end = n.end;
            sender.flags |= F_UNACK;
            return Window::Ignore;
        }
        return Window::Invalid;
    }
    if !before(n.sack, receiver.end.wrapping_add(1)) {
        // Acknowledges data not seen yet.
        return Window::Invalid;
    }
    if receiver.maxwin != 0 && !after(n.end, lowest_end) {
        // Data already acknowledged, sent again.
        return Window::Ignore;
    }
    if !after(n.sack, lowest_ack) {
        // An acknowledgement far behind (overly delayed).
        return Window::Ignore;
    }
    Window::Accept
}

/// The windows after an in-window segment.
fn update(sender: &mut Side, receiver: &mut Side, s: &TcpSeg, n: &Numbers) {
    let win = if s.flags & SYN != 0 {
        n.win
    } else {
        n.win << sender.scale
    };
    let swin = win.wrapping_add(n.sack.wrapping_sub(n.ack));
    if sender.maxwin < swin {
        sender.maxwin = swin;
    }
    if after(n.end, sender.end) {
        sender.end = n.end;
        sender.flags |= F_UNACK;
    }
    if s.flags & ACK != 0 {
        if sender.flags & F_MAXACK_SET == 0 {
            sender.maxack = n.ack;
            sender.flags |= F_MAXACK_SET;
        } else if after(n.ack, sender.maxack) {
            sender.maxack = n.ack;
        }
    }
    if receiver.maxwin != 0 && after(n.end, sender.maxend) {
        receiver.maxwin = receiver
            .maxwin
            .wrapping_add(n.end.wrapping_sub(sender.maxend));
    }
    if after(n.sack.wrapping_add(win), receiver.maxend.wrapping_sub(1)) {
        receiver.maxend = n.sack.wrapping_add(win);
    }
    if win == 0 {
        receiver.maxend = receiver.maxend.wrapping_add(1);
    }
    if n.ack == receiver.end {
        receiver.flags &= !F_UNACK;
    }
}

/// Linux's `tcp_init_sender`: a SYN-ACK answering a SYN, or the other
/// side's SYN in a simultaneous open, starts its side's window; the scale
/// holds only if both sides sent the option.
fn init_sender(sender: &mut Side, receiver: &mut Side, s: &TcpSeg, end: u32, dir: Dir) {
    sender.end = end;
    sender.maxend = end;
    sender.maxwin = u32::from(s.win).max(1);
    options(sender, s);
    if dir == Dir::Reply && !(sender.flags & F_WSCALE != 0 && receiver.flags & F_WSCALE != 0) {
        sender.scale = 0;
        receiver.scale = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dir::{Orig, Reply};

    fn seg(flags: u8, seq: u32, ack: u32, payload: u32) -> TcpSeg {
        TcpSeg {
            flags,
            seq,
            ack,
            win: 64_000,
            payload,
            wscale: None,
            sack_perm: false,
            sack: ack,
        }
    }

    /// A handshake between a client (ISN 1000) and a server (ISN 5000):
    /// the connection and its state after it.
    fn handshake() -> (TcpConn, State, Status) {
        let cfg = TcpSettings::default();
        let (mut c, v) = open(&seg(SYN, 1000, 0, 0), &cfg).unwrap();
        assert!(matches!(
            v,
            Verdict::Accept {
                state: State::TcpSynSent,
                ..
            }
        ));
        let mut st = Status::default();
        let v = packet(
            &mut c,
            Some(State::TcpSynSent),
            st,
            Reply,
            &seg(SYN | ACK, 5000, 1001, 0),
            &cfg,
        );
        assert!(matches!(
            v,
            Verdict::Accept {
                state: State::TcpSynRecv,
                ..
            }
        ));
        st.seen_reply = true;
        let v = packet(
            &mut c,
            Some(State::TcpSynRecv),
            st,
            Orig,
            &seg(ACK, 1001, 5001, 0),
            &cfg,
        );
        let Verdict::Accept { state, assured, .. } = v else {
            panic!("{v:?}")
        };
        assert_eq!(state, State::TcpEstablished);
        assert!(assured);
        st.assured = true;
        (c, state, st)
    }

    #[test]
    fn the_window_refuses_blind_resets_and_injected_data() {
        let cfg = TcpSettings::default();
        let (c0, s, st) = handshake();
        // In-window data both ways.
        let mut c = c0;
        let ok = packet(&mut c, Some(s), st, Orig, &seg(ACK, 1001, 5001, 100), &cfg);
        assert!(matches!(ok, Verdict::Accept { .. }), "{ok:?}");
        // A RST 2^30 out of the window: invalid, the connection stays.
        let mut c = c0;
        let far = 5001u32.wrapping_add(1 << 30);
        let v = packet(&mut c, Some(s), st, Reply, &seg(RST, far, 0, 0), &cfg);
        assert_eq!(v, Verdict::Invalid);
        // Data 2^30 beyond the window: invalid.
        let v = packet(&mut c, Some(s), st, Reply, &seg(ACK, far, 1001, 10), &cfg);
        assert_eq!(v, Verdict::Invalid);
        // An ACK of data never sent: invalid.
        let v = packet(
            &mut c,
            Some(s),
            st,
            Reply,
            &seg(ACK, 5001, 900_000, 0),
            &cfg,
        );
        assert_eq!(v, Verdict::Invalid);
        // Liberal: only the RST checks remain; the far data passes.
        let lib = TcpSettings {
            be_liberal: true,
            ..cfg
        };
        let v = packet(&mut c, Some(s), st, Reply, &seg(ACK, far, 1001, 10), &lib);
        assert!(matches!(v, Verdict::Accept { .. }), "{v:?}");
        // The exact RST closes it.
        let mut c = c0;
        let v = packet(&mut c, Some(s), st, Reply, &seg(RST, 5001, 0, 0), &cfg);
        assert!(matches!(
            v,
            Verdict::Accept {
                state: State::TcpClose,
                ..
            }
        ));
    }

    #[test]
    fn invalid_flags_open_nothing_and_an_ack_is_picked_up() {
        let cfg = TcpSettings::default();
        assert!(open(&seg(SYN | FIN, 1, 0, 0), &cfg).is_none());
        assert!(open(&seg(FIN, 1, 0, 0), &cfg).is_none());
        assert!(open(&seg(0, 1, 0, 0), &cfg).is_none());
        assert!(open(&seg(SYN | ACK, 1, 0, 0), &cfg).is_none());
        assert!(open(&seg(RST, 1, 0, 0), &cfg).is_none());
        let (c, v) = open(&seg(ACK, 77, 99, 10), &cfg).unwrap();
        assert!(matches!(
            v,
            Verdict::Accept {
                state: State::TcpEstablished,
                cap: true,
                assured: false,
                refresh: true
            }
        ));
        assert_eq!(c.seen[1].flags & F_BE_LIBERAL, F_BE_LIBERAL);
        let strict = TcpSettings {
            loose: false,
            ..cfg
        };
        assert!(open(&seg(ACK, 77, 99, 10), &strict).is_none());
    }

    #[test]
    fn closed_connections_reopen_and_simultaneous_open_establishes() {
        let cfg = TcpSettings::default();
        let (mut c, s, mut st) = handshake();
        // The client closes, the server closes, the last ACK.
        let steps = [
            (Orig, seg(FIN | ACK, 1001, 5001, 0), State::TcpFinWait),
            (Reply, seg(ACK, 5001, 1002, 0), State::TcpCloseWait),
            (Reply, seg(FIN | ACK, 5001, 1002, 0), State::TcpLastAck),
            (Orig, seg(ACK, 1002, 5002, 0), State::TcpTimeWait),
        ];
        let mut state = s;
        for (d, sg, want) in steps {
            let v = packet(&mut c, Some(state), st, d, &sg, &cfg);
            let Verdict::Accept { state: got, .. } = v else {
                panic!("{v:?}")
            };
            assert_eq!(got, want);
            state = got;
        }
        // A new SYN from the client: reopened through the rules.
        let v = packet(&mut c, Some(state), st, Orig, &seg(SYN, 9000, 0, 0), &cfg);
        assert_eq!(v, Verdict::Reopen);

        // Simultaneous open: SYN each way, SYN-ACK each way, then ACKs.
        let (mut c, _) = open(&seg(SYN, 100, 0, 0), &cfg).unwrap();
        st = Status::default();
        let mut state = State::TcpSynSent;
        for (d, sg) in [
            (Reply, seg(SYN, 700, 0, 0)),
            (Orig, seg(SYN | ACK, 100, 701, 0)),
            (Reply, seg(SYN | ACK, 700, 101, 0)),
            (Reply, seg(ACK, 701, 101, 0)),
        ] {
            let v = packet(&mut c, Some(state), st, d, &sg, &cfg);
            if let Verdict::Accept { state: s, .. } = v {
                state = s;
            }
            st.seen_reply |= d == Reply;
        }
        assert_eq!(state, State::TcpEstablished);
    }
}
