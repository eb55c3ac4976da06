//! Linux's `tcp_in_window`: whether a segment is within the windows seen
//! both ways, and the windows after it.

use cfdp_packet::TcpSeg;

use super::conn::{
    after, before, options, seg_end, Index, Side, TcpConn, TcpSettings, F_BE_LIBERAL, F_MAXACK_SET,
    F_SACK_PERM, F_UNACK, F_WSCALE, T,
};
use crate::key::Dir;
use crate::state::tcp::{ACK, RST, SYN};

/// What the window checks say of a segment.
pub(super) enum Window {
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
pub(super) fn in_window(
    c: &mut TcpConn,
    old: T,
    dir: Dir,
    index: Index,
    s: &TcpSeg,
    cfg: &TcpSettings,
) -> Window {
    // The sides in place (no copies: the connection was just unpacked
    // from its slot's words, and copying its byte fields back out stalls
    // on store forwarding).
    let [orig, reply] = &mut c.seen;
    let (sender, receiver) = match dir {
        Dir::Orig => (orig, reply),
        Dir::Reply => (reply, orig),
    };
    let end = seg_end(s);
    if let Some(w) = init_sides(sender, receiver, old, dir, s, end) {
        return w;
    }
    // Out of window: Linux logs it and, liberal, accepts it anyway — a
    // RST too (`nf_tcp_log_invalid`; the sysctl's documentation still
    // says "only out of window RST segments are invalid", but Linux 6.x
    // lets them through: the Linux lab's liberal run and its picked-up
    // connection's RST). A RST before the other side's highest ACK is
    // still invalid: that check comes before the window (`rst`).
    let liberal = sender.flags & F_BE_LIBERAL != 0 || cfg.be_liberal;
    let n = Numbers::of(s, sender, receiver, old, end);
    // An overshoot is noted in the sender even when it is not accepted.
    let checked = bounds(sender, receiver, &n);
    if !matches!(checked, Window::Accept) {
        return if liberal { Window::Accept } else { checked };
    }
    update(sender, receiver, s, &n);
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
        // A zero window still lets one byte through (a window probe) —
        // only where the bound moved: a zero-window ACK behind it must
        // not push it one further each time (the Linux lab's zero-window
        // case).
        if win == 0 {
            receiver.maxend = receiver.maxend.wrapping_add(1);
        }
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
