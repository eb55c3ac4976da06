//! What a packet does to the table: the seqlock read of a slot, the
//! lookup of its connection (through a burst's probe or alone), the state
//! step (TCP under the slot's lock, the rest by a compare-and-swap), ICMP
//! errors' related connection, and the opening of a new connection.

use crate::sync::fence;
use crate::sync::Ordering::*;

use cfdp_filter::Lookup;
use cfdp_packet::TcpSeg;
use cfdp_rules::{Action, FlowKey};

use super::slot::{
    action_of, dir_of, fin_of, lock_slot, move_state, rule_of, state_of, time_of, with_state,
    Fields, Read, Slot, ACTION_SHIFT, ASSURED, CAP, IDENTITY, KEY_BITS, LOCK, ORIG_LO,
    RESET_TIMEOUT, RULE_SHIFT, SEEN_REPLY, STATE_MASK, STATE_SHIFT, STATE_SLOTS, USED,
};
use super::{key_of, Acct, ConnTable, Hit, OpenError, Probe, Step, L4};
use crate::key::{ConnKey, Dir};
use crate::state::State;
use crate::tcp::{self, TcpConn, Verdict};

impl ConnTable {
    /// Reads slot `i` for the key whose words are `w`.
    #[inline]
    pub(super) fn read(&self, i: u32, w: &([u64; 4], u64)) -> Read {
        let Some(s) = self.slots.get(i as usize) else {
            return Read::Other;
        };
        let c1 = s.ctl().load(Acquire);
        if c1 & USED == 0 {
            return Read::Other;
        }
        let addr = [
            s.addr()[0].load(Relaxed),
            s.addr()[1].load(Relaxed),
            s.addr()[2].load(Relaxed),
            s.addr()[3].load(Relaxed),
        ];
        let meta = s.meta().load(Relaxed);
        // The seqlock's read side: the words above were loaded before the
        // control word is loaded again; a writer that freed the slot
        // changed its generation first (`free`).
        fence(Acquire);
        let c2 = s.ctl().load(Relaxed);
        if (c1 ^ c2) & IDENTITY != 0 {
            return Read::Moved;
        }
        // Word by word into one value: the array compare went through the
        // stack (four 8-byte stores read back as two 16-byte loads), and
        // ~half of `locate`'s samples on a table in cache sat on that
        // load, likely a store-forwarding stall.
        let differ = (addr[0] ^ w.0[0])
            | (addr[1] ^ w.0[1])
            | (addr[2] ^ w.0[2])
            | (addr[3] ^ w.0[3])
            | ((meta ^ w.1) & KEY_BITS);
        if differ == 0 {
            Read::Mine(c2, meta)
        } else {
            Read::Other
        }
    }

    /// Where the connection of key words `w` (hash `h`) is: its slot and
    /// that slot's control and meta words. `first` is the filter's answer
    /// for `h`, if the caller has it.
    // Inlined into the lookup: its call and `step`'s — arguments shuffled,
    // registers saved, a `Step` returned through memory — were ~90 of the
    // ~955 instructions of an established packet (callgrind, worker-path).
    #[inline(always)]
    pub(super) fn locate(
        &self,
        w: &([u64; 4], u64),
        h: u64,
        first: Option<Lookup>,
    ) -> Option<(u32, u64, u64)> {
        let mut first = first.unwrap_or_else(|| self.filter.get_hash(h));
        'again: loop {
            match first {
                Lookup::Miss => return None,
                Lookup::Entry(v) => match self.read(v, w) {
                    Read::Mine(c, m) => return Some((v, c, m)),
                    Read::Moved => {
                        first = self.filter.get_hash(h);
                        continue 'again;
                    }
                    Read::Other => {}
                },
                Lookup::Bloom => {}
            }
            // The first match was another connection's (their
            // fingerprints collided), or the Bloom part answered: every
            // entry under the fingerprint and the Bloom part's slot for
            // the key's buckets, all from one validated read of them. A
            // connection in the filter is in one or the other at every
            // instant (the filter writes a Bloom-part slot under the same
            // stripes as the entry it replaces), so no look again.
            let c = self.filter.candidates_hash(h);
            for &v in c.values().iter().chain(c.bloom_value.as_ref()) {
                match self.read(v, w) {
                    Read::Mine(c, m) => return Some((v, c, m)),
                    Read::Moved => {
                        first = self.filter.get_hash(h);
                        continue 'again;
                    }
                    Read::Other => {}
                }
            }
            self.false_positives.fetch_add(1, Relaxed);
            return None;
        }
    }

    /// Every packet key of a burst hashed and probed in the filter at
    /// once, so that their cache misses overlap (a burst of packets of no
    /// connection pays about one miss, not one each). `out` is as long as
    /// `keys`.
    pub fn probe(&self, keys: &[FlowKey], out: &mut [Probe]) {
        const CHUNK: usize = 32;
        let mut hashes = [0u64; CHUNK];
        let mut found = [Lookup::Miss; CHUNK];
        for (ks, os) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            let mut epochs = [0u64; CHUNK];
            for (((h, e), k), o) in hashes.iter_mut().zip(&mut epochs).zip(ks).zip(&mut *os) {
                let (key, from_lo) = ConnKey::of(k);
                let words = key.words();
                *h = self.hash_words(&words);
                // Before the filter is read (acquire): an open whose
                // insert the probe misses bumps it afterwards.
                *e = self.epoch(*h).load(Acquire);
                o.words = words;
                o.from_lo = from_lo;
            }
            // The slot a positive points at, on its way as soon as the
            // filter answers, while the rest of the batch is probed.
            self.filter
                .get_batch_hashes_each(&hashes[..ks.len()], &mut found[..ks.len()], |f| {
                    if let Lookup::Entry(v) = f {
                        self.prefetch_slot(v);
                    }
                });
            for (((o, &hash), &found), &epoch) in
                os.iter_mut().zip(&hashes).zip(&found).zip(&epochs)
            {
                (o.hash, o.found, o.epoch, o.probed) = (hash, found, epoch, true);
            }
        }
    }

    /// The connection of packet `k`, if one is tracked: its state moves
    /// with the packet (`l4`: its TCP segment or echo kind), and its
    /// counters. An entry found past its timeout is removed and the packet
    /// is new; a packet invalid for its connection (out of its TCP
    /// window…) is counted and answered `None`: it meets the rules, as
    /// Linux's `ct state invalid` does.
    pub fn lookup(&self, k: &FlowKey, l4: impl Into<L4>, len: u32, now_ns: u64) -> Option<Hit> {
        let l4 = l4.into();
        let (key, from_lo) = key_of(k, &l4);
        let w = key.words();
        let h = self.hash_words(&w);
        self.lookup_at(&w, from_lo, h, None, &l4, len, now_ns)
    }

    /// [`Self::lookup`] of the packet `probe` was made for, from its
    /// answer ([`Self::probe`]): its key is neither built nor hashed
    /// again. For a packet whose connection is keyed as its 5-tuple (not
    /// an ICMP echo, keyed by its identifier: [`Self::lookup`]).
    pub fn lookup_probed(
        &self,
        probe: &Probe,
        l4: impl Into<L4>,
        len: u32,
        now_ns: u64,
    ) -> Option<Hit> {
        if !probe.may_hold() {
            return None;
        }
        self.lookup_at(
            &probe.words,
            probe.from_lo,
            probe.hash,
            Some(probe.found),
            &l4.into(),
            len,
            now_ns,
        )
    }

    #[allow(clippy::too_many_arguments)] // the packet's facts and the key's
    pub(super) fn lookup_at(
        &self,
        w: &([u64; 4], u64),
        from_lo: bool,
        h: u64,
        first: Option<Lookup>,
        l4: &L4,
        len: u32,
        now_ns: u64,
    ) -> Option<Hit> {
        let (i, c, m) = self.locate(w, h, first)?;
        let last = self.slots[i as usize].last().load(Relaxed);
        if self.expired(c, last, now_ns) {
            let mut shard = self.shard(h);
            self.remove_if(&mut shard, i, c, h, |c, last| self.expired(c, last, now_ns));
            return None;
        }
        match self.step(i, c, m, h, from_lo, l4, len, (last, now_ns)) {
            Step::Hit(hit) => Some(hit),
            Step::Invalid => {
                self.invalid.fetch_add(1, Relaxed);
                None
            }
            Step::Gone => None,
        }
    }

    /// Moves slot `i`'s connection (control word `c`, meta `m`, as read;
    /// hash `h`) with a packet: its state (TCP: under the slot's lock,
    /// with its windows; else by a compare-and-swap), its last time
    /// (`last` as read, `now_ns` the packet's), its counters.
    #[allow(clippy::too_many_arguments)] // the slot as read and the packet
    #[inline(always)]
    pub(super) fn step(
        &self,
        i: u32,
        mut c: u64,
        m: u64,
        h: u64,
        from_lo: bool,
        l4: &L4,
        len: u32,
        (last, now_ns): (u64, u64),
    ) -> Step {
        let s = &self.slots[i as usize];
        let dir = dir_of(c, from_lo);
        let state = state_of(c);
        let mut refresh = true;
        if state.is_tcp() {
            // Its time refreshed under the slot's lock (by `step_tcp`).
            refresh = false;
            let seg = match l4 {
                L4::Tcp(seg) => seg,
                // The rest of a datagram whose first fragment was checked:
                // it passes with its connection, nothing moves.
                L4::Fragment => return self.hit(c, m, dir),
                _ => return Step::Invalid, // a TCP packet whose header is not whole
            };
            match self.step_tcp(s, c, dir, seg, now_ns) {
                Some((Verdict::Accept { .. }, n)) => c = n,
                Some((Verdict::Pass, n)) => c = n,
                Some((Verdict::Invalid, _)) => return Step::Invalid,
                Some((Verdict::Kill, n)) => {
                    // A RST before any answer: it passes, the entry goes
                    // (closed, not expired).
                    self.remove_closed(i, n, h);
                    c = n;
                }
                Some((Verdict::Reopen, n)) => {
                    self.remove_closed(i, n, h);
                    return Step::Gone;
                }
                None => return Step::Gone,
            }
        } else {
            // Most packets move nothing: anything of a UDP stream, a
            // replied echo or another protocol, the opener's side again
            // before an answer (what `State::next` says of them).
            let settled = match state {
                State::UdpStream | State::IcmpReplied | State::GreStream | State::Generic => true,
                State::UdpUnreplied | State::IcmpUnreplied | State::GreUnreplied => {
                    dir == Dir::Orig
                }
                _ => false,
            };
            if !settled {
                let opened = s.ext()[0].load(Relaxed);
                // Read under the slot's seqlock: the opening time is this
                // connection's, not a next one's (the loom model saw a
                // reused slot's time keep a dropped connection's state).
                fence(Acquire);
                if (s.ctl().load(Relaxed) ^ c) & IDENTITY != 0 {
                    return Step::Gone;
                }
                let age = now_ns.saturating_sub(opened);
                match move_state(s.ctl(), c, dir, age) {
                    Some(n) => c = n,
                    None => return Step::Gone,
                }
            }
        }
        // Not under the compare-and-swap: if the slot is freed and reused
        // between the two (nanoseconds), the next connection's last time
        // or counters take this packet's — it lives at most that much
        // longer. Never another connection's verdict. Only when the time
        // moved: a locked instruction and a written line saved for the
        // rest of a burst's packets of the connection, which share their
        // time (a NIC burst's one clock reading).
        if refresh && now_ns > last {
            s.last().fetch_max(now_ns, Relaxed);
        }
        if let Some(a) = &self.acct {
            let a = &a[i as usize];
            a.packets[dir.index()].fetch_add(1, Relaxed);
            a.bytes[dir.index()].fetch_add(u64::from(len), Relaxed);
        }
        self.hit(c, m, dir)
    }

    /// The answer of a slot whose control word is `c` and meta word `m`,
    /// for a packet going `dir`.
    fn hit(&self, c: u64, m: u64, dir: Dir) -> Step {
        Step::Hit(Hit {
            slot: rule_of(c),
            action: action_of(m >> ACTION_SHIFT),
            dir,
            state: state_of(c),
        })
    }

    /// Removes slot `i`'s connection (control word `c`, hash `h`), which
    /// a segment closed for good (a RST before any answer, a SYN that
    /// reopens it): not counted as expired.
    pub(super) fn remove_closed(&self, i: u32, c: u64, h: u64) {
        let mut shard = self.shard(h);
        if self.remove_if(&mut shard, i, c, h, |_, _| true) {
            shard.expired -= 1;
        }
    }

    /// A TCP segment at `now_ns` through slot `s`'s connection (control
    /// word `c` as read) under the slot's lock: Linux's verdict and the
    /// control word after it, or `None` if the slot was freed meanwhile.
    /// An accepted segment that refreshes the timeout moves the slot's last
    /// time, under the lock (a plain store: no other packet writes it
    /// meanwhile).
    pub(super) fn step_tcp(
        &self,
        s: &Slot,
        c: u64,
        dir: Dir,
        seg: &TcpSeg,
        now_ns: u64,
    ) -> Option<(Verdict, u64)> {
        let held = lock_slot(s.ctl(), c)?;
        if (held ^ c) & IDENTITY != 0 {
            s.ctl().fetch_and(!LOCK, Release);
            return None;
        }
        let words: [u64; tcp::WORDS] = std::array::from_fn(|j| s.ext()[j].load(Relaxed));
        let mut conn = TcpConn::unpack(&words);
        let st = tcp::Status {
            seen_reply: held & SEEN_REPLY != 0,
            assured: held & ASSURED != 0,
        };
        let v = tcp::packet(&mut conn, Some(state_of(held)), st, dir, seg, &self.tcp);
        let after = conn.pack();
        for (j, (&old, &new)) in words.iter().zip(&after).enumerate() {
            if old != new {
                s.ext()[j].store(new, Relaxed);
            }
        }
        let mut n = held & !LOCK;
        match v {
            Verdict::Accept {
                state,
                cap,
                assured,
                ..
            } => {
                let mut fin = fin_of(n);
                if seg.flags & tcp::flags::FIN != 0 {
                    fin |= 1 << dir.index();
                }
                n = with_state(n, state, fin) & !CAP;
                if cap {
                    n |= CAP;
                }
                if assured {
                    n |= ASSURED;
                }
                if dir == Dir::Reply {
                    n |= SEEN_REPLY;
                }
            }
            Verdict::Pass | Verdict::Kill if dir == Dir::Reply => n |= SEEN_REPLY,
            _ => {}
        }
        if let Verdict::Accept { refresh: true, .. } = v {
            let last = s.last().load(Relaxed);
            // The retransmission cap comes first in Linux, where it
            // shortens the state's timeout (the table's capped timeouts
            // follow its plain ones).
            let st = (n >> STATE_SHIFT & STATE_MASK) as usize;
            let retrans_cap = conn.retrans >= self.tcp.max_retrans
                && self.timeout_ns[st] > self.timeout_ns[STATE_SLOTS + st];
            if seg.flags & tcp::flags::RST != 0 && !retrans_cap {
                // Linux gives an accepted RST CLOSE's timeout, whatever
                // the state — also a RST in window but not exact, which
                // keeps it.
                s.last()
                    .store(now_ns.max(time_of(last)) | RESET_TIMEOUT, Relaxed);
            } else if now_ns > time_of(last) || last & RESET_TIMEOUT != 0 {
                s.last().store(now_ns.max(time_of(last)), Relaxed);
            }
        }
        // The release of the lock, ordered after the windows' stores: a
        // plain store, as nothing else writes the control word while the
        // lock is held (every other writer's compare-and-swap expects it
        // clear, a removal waits for it, a fill or free rewrites only a
        // slot no reader can lock).
        s.ctl().store(n, Release);
        Some((v, n))
    }

    /// The live connection an ICMP error is about (`inner`: the 5-tuple of
    /// the packet it quotes, either direction; a query's identifier and
    /// class as its ports): the error is related to it. Its state
    /// and timeout do not move. (`dir` is the quoted packet's; the error
    /// goes the other way.)
    pub fn related(&self, inner: &FlowKey, now_ns: u64) -> Option<Hit> {
        self.find(inner, &L4::Echo { request: true }, Some(now_ns))
    }

    /// The connection packet `k` belongs to, as it stands (nothing moves:
    /// for `trace`). An entry past its timeout but not yet swept is still
    /// shown.
    pub fn peek(&self, k: &FlowKey) -> Option<Hit> {
        self.find(k, &L4::None, None)
    }

    /// The entry of `k`'s connection, unchanged; with `now_ns`, only if it
    /// is live then.
    pub(super) fn find(&self, k: &FlowKey, l4: &L4, now_ns: Option<u64>) -> Option<Hit> {
        let (key, from_lo) = key_of(k, l4);
        let (i, c, m) = self.locate(&key.words(), self.hash(&key), None)?;
        let last = self.slots[i as usize].last().load(Relaxed);
        if now_ns.is_some_and(|now| self.expired(c, last, now)) {
            return None;
        }
        Some(Hit {
            slot: rule_of(c),
            action: action_of(m >> ACTION_SHIFT),
            dir: dir_of(c, from_lo),
            state: state_of(c),
        })
    }

    /// Opens the connection of packet `k`, which the rule in `slot` allowed
    /// with `action` (the caller found no live entry with [`Self::lookup`]).
    /// If another worker opened it meanwhile, that entry is used.
    pub fn open(
        &self,
        k: &FlowKey,
        l4: impl Into<L4>,
        slot: u32,
        action: Action,
        len: u32,
        now_ns: u64,
    ) -> Result<Hit, OpenError> {
        let p = Probe::default();
        self.open_probed(k, &p, l4, slot, action, len, now_ns)
    }

    /// [`Self::open`] after `probe`, [`Self::probe`]'s answer for this
    /// same `k`, missed: while no connection was opened in its stripe
    /// since ([`Self::unchanged`]), the key is still absent and the filter
    /// is not asked again (under a flood of new connections, ~200
    /// instructions of each). A probe of another key, or one that found
    /// something, is not trusted.
    #[allow(clippy::too_many_arguments)] // the packet's facts and the rule's
    pub fn open_probed(
        &self,
        k: &FlowKey,
        probe: &Probe,
        l4: impl Into<L4>,
        slot: u32,
        action: Action,
        len: u32,
        now_ns: u64,
    ) -> Result<Hit, OpenError> {
        let l4 = l4.into();
        let (key, from_lo) = key_of(k, &l4);
        let h = self.hash(&key);
        let w = key.words();
        let mut shard = self.shard(h);
        // Under the stripe's lock: nobody opens in it meanwhile.
        let absent = probe.hash == h && !probe.found.is_hit() && self.unchanged(probe);
        if let Some((i, c, m)) = (!absent).then(|| self.locate(&w, h, None)).flatten() {
            let last = self.slots[i as usize].last().load(Relaxed);
            if !self.expired(c, last, now_ns) {
                // The stripe's lock is not held across the step: a
                // removal it makes takes it.
                drop(shard);
                match self.step(i, c, m, h, from_lo, &l4, len, (last, now_ns)) {
                    Step::Hit(hit) => return Ok(hit),
                    Step::Invalid => return Err(OpenError::Invalid),
                    Step::Gone => {}
                }
                shard = self.shard(h);
            } else {
                self.remove_if(&mut shard, i, c, h, |c, last| self.expired(c, last, now_ns));
            }
        }
        // What the first packet opens: its state, the TCP windows (or
        // UDP's opening time) and the control word's flags.
        let mut ext = [0u64; tcp::WORDS];
        let mut flags = 0;
        let state = match (k.proto, &l4) {
            (cfdp_rules::flow::proto::TCP, L4::Tcp(seg)) => {
                let (conn, v) = tcp::open(seg, &self.tcp).ok_or(OpenError::NotAnOpener)?;
                let Verdict::Accept { state, cap, .. } = v else {
                    return Err(OpenError::NotAnOpener);
                };
                if cap {
                    flags |= CAP;
                }
                ext = conn.pack();
                state
            }
            (cfdp_rules::flow::proto::TCP, _) => return Err(OpenError::NotAnOpener),
            (p, l4) => {
                let echo = matches!(l4, L4::Echo { request: true });
                ext[0] = now_ns;
                State::open(p, echo).ok_or(OpenError::NotAnOpener)?
            }
        };
        let i = self.reserve(&mut shard, now_ns).ok_or_else(|| {
            self.refused.fetch_add(1, Relaxed);
            OpenError::Full
        })?;
        let ctl = USED
            | flags
            | if from_lo { ORIG_LO } else { 0 }
            | (state.index() as u64) << STATE_SHIFT
            | u64::from(slot) << RULE_SHIFT;
        let acct = Acct {
            opened_ns: now_ns,
            packets: [1, 0],
            bytes: [u64::from(len), 0],
        };
        if !self.fill(&mut shard, i, &w, h, ctl, action, now_ns, acct, &ext) {
            self.refused.fetch_add(1, Relaxed);
            return Err(OpenError::Full);
        }
        shard.opened += 1;
        Ok(Hit {
            slot,
            action,
            dir: Dir::Orig,
            state,
        })
    }
}
