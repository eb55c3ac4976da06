//! A slot: one connection's words, and the memory-ordering contract of
//! the table in one place; and a lock stripe's state (`Shard`), which
//! `stripe.rs` works on. Nothing here names the table: the table and its
//! other parts build on this.
//!
//! * **The control word** holds whether the slot is used, the opener's
//!   side, FIN bits, state, timeout cap, the TCP lock bit, assured and
//!   answered bits, the slot's generation and the opening rule. Every
//!   write of it is a read-modify-write, so that a reader's
//!   compare-and-swap and a free of the slot are totally ordered.
//! * **The seqlock**: a reader loads the control word (acquire), the key
//!   words, an acquire fence, and the control word again; a change of
//!   generation or use between the two loads means the slot was freed
//!   (and maybe reused) meanwhile: it looks again. A writer bumps the
//!   generation when it frees the slot, and fills a slot (release fence,
//!   then its words, then the control word) before its index is in the
//!   filter.
//! * **The TCP lock bit**: a TCP segment takes it (compare-and-swap) to
//!   move the windows and the state together; nothing else writes the
//!   control word while it is set, and a removal waits for it.
//! * **Removal order**: a slot is marked free (compare-and-swap from the
//!   control word its removal judged) before its index leaves the filter,
//!   and reused only after.

use crate::sync::AtomicU64;
use crate::sync::Ordering::*;

use cfdp_rules::{Action, Allowing};

use crate::key::Dir;
use crate::state::State;
use crate::tcp;

// A slot's control word: whether it holds a connection, the opener's side,
// the FIN bits, the state, whether its timeout is capped, the slot's lock
// (TCP: held while its windows move), assured, an answer seen, the slot's
// generation (bumped when it is freed) and the opening rule's slot.
pub(super) const USED: u64 = 1;
pub(super) const ORIG_LO: u64 = 1 << 1;
pub(super) const FIN_SHIFT: u32 = 2;
pub(super) const STATE_SHIFT: u32 = 4;
/// The state's bits (five: room for 32 states; GRE's two made it 17).
pub(super) const STATE_MASK: u64 = 0x1f;
/// Entries of the state-indexed tables: each state, and each state again
/// with [`CAP`] (the bit right above the state's).
pub(super) const STATE_SLOTS: usize = 1 << 5;
/// The timeout is capped at `tcp_unacknowledged_s`: right above the state
/// bits, so that state and cap index one table of timeouts.
pub(super) const CAP: u64 = 1 << 9;
/// The state and cap bits as they index the table of timeouts, once
/// shifted down by [`STATE_SHIFT`].
pub(super) const TIMEOUT_INDEX: u64 = CAP >> STATE_SHIFT | STATE_MASK;
/// Held by the one packet whose TCP windows are being checked and moved:
/// a TCP connection's windows and state change together, as under
/// Linux's `ct->lock`. Nothing else writes the control word while it is
/// set (compare-and-swaps expect it clear; a removal waits for it).
pub(super) const LOCK: u64 = 1 << 10;
pub(super) const ASSURED: u64 = 1 << 11;
pub(super) const SEEN_REPLY: u64 = 1 << 12;
/// The generation: 19 bits, bumped on every free of the slot (a reader
/// would have to sleep through 2^19 reuses of one slot between its two
/// loads to be fooled).
pub(super) const GEN_SHIFT: u32 = 13;
pub(super) const GEN_MASK: u64 = 0x7_ffff << GEN_SHIFT;
pub(super) const RULE_SHIFT: u32 = 32;
/// Bits that say which connection a slot holds: a change in them between
/// a reader's two loads means the slot was freed (and maybe reused).
pub(super) const IDENTITY: u64 = GEN_MASK | USED;
/// The key's bits in a slot's `meta` word ([`ConnKey::words`]); the
/// action sits above them.
pub(super) const KEY_BITS: u64 = (1 << 42) - 1;
pub(super) const ACTION_SHIFT: u32 = 42;
/// The end of a free list.
pub(super) const NONE: u32 = u32::MAX;
/// In a slot's last-time word, above any time: the last packet was a RST
/// that left the TCP state as it was (in window, not exact), so the
/// connection lives CLOSE's timeout after it at most — Linux's
/// `timeout = timeouts[TCP_CONNTRACK_CLOSE]` for any accepted RST. The
/// next refreshing packet clears it (a plain time).
pub(super) const RESET_TIMEOUT: u64 = 1 << 63;

/// The time in a slot's last-time word (without [`RESET_TIMEOUT`]).
#[inline(always)]
pub(super) fn time_of(last: u64) -> u64 {
    last & !RESET_TIMEOUT
}

/// One connection (or a free slot): thirteen atomic words, 104 bytes,
/// named by [`Fields`]. Every word is an atomic: readers read without a lock
/// while the stripe's owner may rewrite it, and the control word's
/// generation tells them whether what they read is whole. Plain words
/// rather than a struct so that the slots can live in a
/// [`cfdp_filter::ZeroedSlice`] (huge pages: the table's slots are its
/// largest part).
pub(super) type Slot = [AtomicU64; 7 + tcp::WORDS];

/// A slot's words by name.
pub(super) trait Fields {
    /// The control word: in use, the opener's side, FIN bits, state,
    /// generation, rule slot.
    fn ctl(&self) -> &AtomicU64;
    /// The newest packet time seen (ns).
    fn last(&self) -> &AtomicU64;
    /// Lower and higher endpoint's address ([`ConnKey::words`]): four words.
    fn addr(&self) -> &[AtomicU64];
    /// Ports, protocol, family and the action; in a free slot, the next
    /// free slot's index.
    fn meta(&self) -> &AtomicU64;
    /// TCP: the windows ([`TcpConn::pack`]), written under the slot's
    /// [`LOCK`]. UDP: the first word is the opening time.
    fn ext(&self) -> &[AtomicU64];
}

impl Fields for Slot {
    #[inline(always)]
    fn ctl(&self) -> &AtomicU64 {
        &self[0]
    }
    #[inline(always)]
    fn last(&self) -> &AtomicU64 {
        &self[1]
    }
    #[inline(always)]
    fn addr(&self) -> &[AtomicU64] {
        &self[2..6]
    }
    #[inline(always)]
    fn meta(&self) -> &AtomicU64 {
        &self[6]
    }
    #[inline(always)]
    fn ext(&self) -> &[AtomicU64] {
        &self[7..]
    }
}

/// A slot's accounting, when it is on.
pub(super) struct AcctSlot {
    pub(super) opened: AtomicU64,
    pub(super) packets: [AtomicU64; 2],
    pub(super) bytes: [AtomicU64; 2],
}

pub(super) fn zeros<const N: usize>() -> [AtomicU64; N] {
    std::array::from_fn(|_| AtomicU64::new(0))
}

impl AcctSlot {
    pub(super) fn new() -> Self {
        Self {
            opened: AtomicU64::new(0),
            packets: zeros(),
            bytes: zeros(),
        }
    }
}

/// The folded 128-bit product of `a` and `b`.
#[inline(always)]
pub(super) fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ (r >> 64) as u64
}

/// Moves the state of a connection other than TCP in control word `ctl`
/// (read as `c`) with a packet going `dir`, `age_ns` after it opened, by
/// compare-and-swap: the word after it, or `None` if the slot was freed
/// meanwhile (the connection is gone). Most packets move nothing: that
/// check is inlined into the caller, the compare-and-swap loop is not
/// (with GRE's arm in `State::next` the whole function no longer inlined,
/// and its call cost ~15 instructions a packet of a young UDP
/// conversation, callgrind `worker-path` udp-stateful).
#[inline(always)]
pub(super) fn move_state(ctl: &AtomicU64, c: u64, dir: Dir, age_ns: u64) -> Option<u64> {
    let n = moved(c, dir, age_ns);
    if n == c {
        Some(c)
    } else {
        swap_state(ctl, c, n, dir, age_ns)
    }
}

/// Control word `c` after a packet going `dir`, `age_ns` after the
/// connection opened.
#[inline(always)]
fn moved(c: u64, dir: Dir, age_ns: u64) -> u64 {
    let s = state_of(c).next(dir, age_ns);
    let mut n = with_state(c, s, fin_of(c));
    if s.assures() {
        n |= ASSURED;
    }
    if dir == Dir::Reply {
        n |= SEEN_REPLY;
    }
    n
}

/// [`move_state`]'s compare-and-swap of `c` for `n`, again from the word
/// found while it fails.
#[inline(never)]
fn swap_state(ctl: &AtomicU64, mut c: u64, mut n: u64, dir: Dir, age_ns: u64) -> Option<u64> {
    loop {
        match ctl.compare_exchange_weak(c & !LOCK, n & !LOCK, AcqRel, Acquire) {
            Ok(_) => return Some(n),
            Err(now) if (now ^ c) & IDENTITY != 0 => return None,
            Err(now) => {
                crate::sync::spin();
                c = now;
                n = moved(c, dir, age_ns);
                if n == c {
                    return Some(c);
                }
            }
        }
    }
}

/// Takes slot `ctl`'s [`LOCK`] (read as `c`): the control word with the
/// lock held, or `None` if the slot was freed meanwhile.
pub(super) fn lock_slot(ctl: &AtomicU64, mut c: u64) -> Option<u64> {
    loop {
        if (c & LOCK) == 0 {
            match ctl.compare_exchange_weak(c, c | LOCK, Acquire, Acquire) {
                Ok(_) => return Some(c | LOCK),
                Err(now) => c = now,
            }
        } else {
            crate::sync::spin();
            c = ctl.load(Acquire);
        }
        if c & USED == 0 {
            return None;
        }
    }
}

/// Rewrites a slot's control word with `f` of its current value, as one
/// read-modify-write (returns the value before): a reader's
/// compare-and-swap on the word and this change are then totally ordered,
/// and the reader's fails if the slot was freed.
pub(super) fn rmw(w: &AtomicU64, f: impl Fn(u64) -> u64) -> u64 {
    let mut c = w.load(Relaxed);
    loop {
        match w.compare_exchange_weak(c, f(c), Release, Relaxed) {
            Ok(old) => return old,
            Err(now) => c = now,
        }
    }
}

/// Bytes a connection's slot takes (the filter's entry, ~4 bytes at 95 %
/// load, comes on top).
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();
/// Bytes a slot's accounting adds when it is on.
pub const ACCT_BYTES: usize = std::mem::size_of::<AcctSlot>();
#[cfg(not(loom))]
const _: () = assert!(SLOT_BYTES == 104);

/// The states by their index in a control word's state bits (the unused
/// indices never written).
pub(super) const STATES: [State; STATE_SLOTS] = {
    let mut t = [State::TcpClose; STATE_SLOTS];
    let mut i = 0;
    while i < State::ALL.len() {
        t[i] = State::ALL[i];
        i += 1;
    }
    t
};
const _: () = assert!(State::ALL.len() <= STATE_SLOTS);
const _: () = assert!(TIMEOUT_INDEX as usize == 2 * STATE_SLOTS - 1);
const _: () = assert!(CAP == 1 << (STATE_SHIFT + STATE_MASK.count_ones()));
const _: () = assert!(GEN_MASK >> GEN_SHIFT & 1 == 1 && SEEN_REPLY < 1 << GEN_SHIFT);
const _: () = assert!(GEN_MASK < 1 << RULE_SHIFT);

pub(super) fn state_of(c: u64) -> State {
    STATES[(c >> STATE_SHIFT & STATE_MASK) as usize]
}

pub(super) fn fin_of(c: u64) -> u8 {
    (c >> FIN_SHIFT & 3) as u8
}

pub(super) fn rule_of(c: u64) -> u32 {
    (c >> RULE_SHIFT) as u32
}

pub(super) fn with_state(c: u64, state: State, fin: u8) -> u64 {
    c & !(STATE_MASK << STATE_SHIFT | 3 << FIN_SHIFT)
        | (state.index() as u64) << STATE_SHIFT
        | u64::from(fin & 3) << FIN_SHIFT
}

/// The direction of a packet from the key's lower endpoint (`from_lo`) or
/// from its higher one, for the connection in control word `c`.
pub(super) fn dir_of(c: u64, from_lo: bool) -> Dir {
    if from_lo == (c & ORIG_LO != 0) {
        Dir::Orig
    } else {
        Dir::Reply
    }
}

/// An action in 19 bits (a tag and a port).
pub(super) fn action_bits(a: Action) -> u64 {
    let (tag, port) = match a {
        Action::Drop => (0, 0),
        Action::Allow => (1, 0),
        Action::Count => (2, 0),
        Action::Redirect(p) => (3, p),
        Action::Track(Allowing::Allow) => (4, 0),
        Action::Track(Allowing::Count) => (5, 0),
        Action::Track(Allowing::Redirect(p)) => (6, p),
    };
    tag | u64::from(port) << 3
}

pub(super) fn action_of(bits: u64) -> Action {
    let port = (bits >> 3) as u16;
    match bits & 7 {
        1 => Action::Allow,
        2 => Action::Count,
        3 => Action::Redirect(port),
        4 => Action::Track(Allowing::Allow),
        5 => Action::Track(Allowing::Count),
        6 => Action::Track(Allowing::Redirect(port)),
        _ => Action::Drop,
    }
}

/// What a read of one slot found for a key.
pub(super) enum Read {
    /// The key's connection: its control and meta words, read whole.
    Mine(u64, u64),
    /// Free, or another connection's.
    Other,
    /// Freed while it was read: look again.
    Moved,
}

/// Slots an early drop looks at, at most, before the open is refused
/// (Linux looks at 8 hash chains): a refused open's cost is bounded
/// whatever the stripe holds.
pub const DROP_SCAN: u32 = 64;

/// One lock stripe's share of the slots: `[base, base + len)`, a free list
/// through the free slots' `meta` words, the slots never used yet, the
/// early-drop clock hand, the connections it holds, and the stripe's
/// counters (written under its lock: no locked instruction for them, no
/// line shared between workers that open in different stripes).
pub(super) struct Shard {
    pub(super) base: u32,
    pub(super) free: u32,
    pub(super) fresh: u32,
    pub(super) hand: u32,
    /// Connections in the stripe's slots (see `ConnTable::quota`).
    pub(super) held: u32,
    pub(super) opened: u64,
    pub(super) early_dropped: u64,
    pub(super) expired: u64,
}

impl Shard {
    /// An empty stripe whose slots start at `base`.
    pub(super) fn new(base: u32) -> Self {
        Shard {
            base,
            free: NONE,
            fresh: 0,
            hand: 0,
            held: 0,
            opened: 0,
            early_dropped: 0,
            expired: 0,
        }
    }
}
