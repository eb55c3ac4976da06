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
use flags::RST;

mod conn;
mod window;

use conn::{before, options, seg_end, L_CHALLENGE_ACK, L_SIMULTANEOUS_OPEN, T};
pub use conn::{
    valid_flags, Index, Side, TcpConn, TcpSettings, F_BE_LIBERAL, F_CLOSE_INIT, F_MAXACK_SET,
    F_SACK_PERM, F_UNACK, F_WSCALE, WORDS,
};
use window::{in_window, Window};

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
    // Maybe a challenge ACK answering the SYN: the RST that answers it
    // carries this number as its sequence number (`rst`).
    if old == T::Ss && index == Index::Ack && dir == Dir::Reply {
        c.last_ack = s.ack;
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

#[cfg(test)]
mod tests {
    use super::flags::{ACK, FIN, RST, SYN};
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

    /// Linux moves the receiver's upper bound (`td_maxend`) to ACK +
    /// window only when that passes it, and a zero window adds one byte
    /// there: a zero-window ACK behind the bound leaves it, however many
    /// come (the Linux lab's zero-window case; each used to add one).
    #[test]
    fn a_zero_window_moves_the_upper_bound_only_when_it_passes_it() {
        let cfg = TcpSettings::default();
        let (mut c, s, st) = handshake();
        let bound = c.seen[1].maxend;
        assert_eq!(bound, 5001 + 64_000);
        let zero = TcpSeg {
            win: 0,
            ..seg(ACK, 1001, 5001, 0)
        };
        for _ in 0..3 {
            let v = packet(&mut c, Some(s), st, Orig, &zero, &cfg);
            assert!(matches!(v, Verdict::Accept { .. }), "{v:?}");
            assert_eq!(c.seen[1].maxend, bound);
        }
        // The handshake's last ACK with a zero window: ACK + 0 passes the
        // server's bound (its SYN-ACK's end), which becomes ACK + 1.
        let (mut c, _) = open(&seg(SYN, 1000, 0, 0), &cfg).unwrap();
        let st = Status::default();
        packet(
            &mut c,
            Some(State::TcpSynSent),
            st,
            Reply,
            &seg(SYN | ACK, 5000, 1001, 0),
            &cfg,
        );
        let st = Status {
            seen_reply: true,
            ..st
        };
        let last = TcpSeg {
            win: 0,
            ..seg(ACK, 1001, 5001, 0)
        };
        packet(&mut c, Some(State::TcpSynRecv), st, Orig, &last, &cfg);
        assert_eq!(c.seen[1].maxend, 5002);
    }

    /// RFC 5961: a server that still holds an old connection answers a
    /// reused port's SYN with a challenge ACK (ignored in SYN_SENT, its
    /// acknowledgement noted, as Linux notes it), and the client's RST
    /// with that number as its sequence number is taken without a window
    /// check: before any answer, it ends the entry.
    #[test]
    fn a_reset_answering_a_challenge_ack_ends_a_syn_sent_connection() {
        let cfg = TcpSettings::default();
        let st = Status::default();
        // The challenge ACK's verdict, then the client's RST's (`seq`).
        let after_challenge = |seq: u32| {
            let (mut c, _) = open(&seg(SYN, 1000, 0, 0), &cfg).unwrap();
            let challenge = seg(ACK, 7000, 424_242, 0);
            let v = packet(&mut c, Some(State::TcpSynSent), st, Reply, &challenge, &cfg);
            let rst = seg(RST, seq, 0, 0);
            (
                v,
                packet(&mut c, Some(State::TcpSynSent), st, Orig, &rst, &cfg),
            )
        };
        assert_eq!(after_challenge(424_242), (Verdict::Pass, Verdict::Kill));
        // Any other sequence number is checked against the window.
        assert_eq!(after_challenge(424_243).1, Verdict::Invalid);
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
