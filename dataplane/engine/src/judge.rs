//! A burst's verdicts: a frame's rule (or its connection's decision)
//! turned into what happens to it, with every counter that follows — the
//! worker's totals, the rule's hits (a run of one rule's hits added once),
//! connections opened by stateful rules.

use cfdp_conntrack::table::Probe;
use cfdp_conntrack::{ConnTable, OpenError};
use cfdp_rules::{Action, Allowing, FlowKey};

use crate::frame::{PacketRef, Released, Verdict};
use crate::matcher::MAX_BURST;
use crate::tables::RuleRef;
use crate::track::{self, Decided};

/// Turns a frame's rule into its verdict, counting both.
pub(crate) struct Judge<'a> {
    pub(crate) c: &'a mut crate::Totals,
    rules: &'a crate::stats::SlotCounters,
    now_s: u32,
    /// A connection was opened in this burst (later packets look again).
    opened: bool,
    /// The packets of the burst that opened a connection, a bit each
    /// (flow export ends the record a reopened 5-tuple still has; a burst
    /// fits: see the assertion below).
    opens: u32,
    /// Consecutive packets that hit one rule, not yet counted: the rule's
    /// hits (its slot, packets, bytes), its action and the verdict it
    /// gave. A packet of the same rule as the one before costs a compare
    /// and two adds; the run is counted once — the rule's counters and the
    /// verdict counters — when another rule comes or the burst ends
    /// ([`Self::flush`], before the burst's publish, so a reader of the
    /// published packet count still sees every hit of the packets it
    /// counted). A burst of an allow-all or a catch-all is one run.
    run: Run,
    /// Per packet of the burst [`Self::burst`] judged: what the
    /// connection that decided it said, if one did.
    decided: [Option<Decided>; MAX_BURST],
}

const _: () = assert!(MAX_BURST <= u32::BITS as usize);

/// What a burst's judgement reads, a packet each: the frames, their
/// matched 5-tuples, whether a later fragment was held (`Some(room was
/// found)`), the rule that matched, the connection that decided, the
/// burst's probe of the connection table.
pub(crate) struct Burst<'b, 'p> {
    pub(crate) pkts: &'b [PacketRef<'p>],
    pub(crate) keys: &'b [FlowKey],
    pub(crate) held: &'b [Option<bool>],
    pub(crate) rules: &'b [Option<RuleRef>],
    pub(crate) conns: &'b [Option<Decided>],
    pub(crate) probes: &'b [Probe],
}

#[derive(Clone, Copy)]
struct Run {
    slot: u32,
    packets: u64,
    bytes: u64,
    /// The rule's action, as the totals count it and as the verdict it
    /// gives ([`judged`], once a run).
    tally: Tally,
    verdict: Verdict,
}

/// Which of the totals' action counters a rule's packets add to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tally {
    Allowed,
    Counted,
    /// Drop and redirect: their verdict's counters only.
    Neither,
}

const NO_RUN: Run = Run {
    slot: 0,
    packets: 0,
    bytes: 0,
    tally: Tally::Neither,
    verdict: Verdict::Drop,
};

impl Judge<'_> {
    pub(crate) fn new<'a>(
        c: &'a mut crate::Totals,
        rules: &'a crate::stats::SlotCounters,
        now_s: u32,
    ) -> Judge<'a> {
        Judge {
            c,
            rules,
            now_s,
            opened: false,
            opens: 0,
            run: NO_RUN,
            decided: [None; MAX_BURST],
        }
    }

    /// Each frame's verdict: its connection's (stateful rules, with
    /// `tracking`), or its rule's; a held later fragment waits (dropped
    /// here, its copy goes out with its datagram). Once a judge.
    pub(crate) fn burst(
        &mut self,
        tracking: Option<&ConnTable>,
        b: &Burst<'_, '_>,
        verdicts: &mut [Verdict],
    ) {
        // `decided` starts all None (`new`; one judge a burst): only a
        // packet a connection decided sets its entry, the rest are not
        // written again (a store a packet on the stateless path).
        for (i, p) in b.pkts.iter().enumerate() {
            verdicts[i] = match b.held[i] {
                None if tracking.is_none() => self.verdict(b.rules[i], p.orig_len),
                None => {
                    let (key, probe) = (&b.keys[i], &b.probes[i]);
                    let (v, d, opened) =
                        self.tracked(tracking, b.conns[i], b.rules[i], p, key, probe);
                    self.decided[i] = d;
                    self.opens |= u32::from(opened) << i;
                    v
                }
                // Held: the copy waits; the backend frees the original.
                Some(true) => Verdict::Drop,
                Some(false) => {
                    self.c.dropped += 1;
                    Verdict::Drop
                }
            };
        }
    }

    /// The packets of the burst just judged that opened a connection, a
    /// bit each.
    pub(crate) fn opens(&self) -> u32 {
        self.opens
    }

    /// What the connections decided for the first `n` packets of the
    /// burst just judged (none: a rule did, or nothing).
    pub(crate) fn decided(&self, n: usize) -> &[Option<Decided>] {
        &self.decided[..n]
    }

    /// The held fragments whose first fragment came in the burst just
    /// judged (with its index), out with its decision — its connection's,
    /// or its rule's: one verdict for a whole datagram (the Linux lab's
    /// answer in reversed fragments).
    pub(crate) fn release(
        &mut self,
        releasing: &mut Vec<(usize, Vec<cfdp_packet::frag::Held>)>,
        released: &mut Vec<Released>,
        rules: &[Option<RuleRef>],
    ) {
        for (i, frames) in releasing.drain(..) {
            for frame in frames {
                self.c.fragments_released += 1;
                let verdict = match self.decided[i] {
                    Some(d) => self.connection(d),
                    None => self.verdict(rules[i], frame.orig_len),
                };
                released.push(Released { frame, verdict });
            }
        }
    }

    /// A packet its connection decided (`d`): established or related,
    /// counted so, and the connection's action.
    pub(crate) fn connection(&mut self, d: Decided) -> Verdict {
        let a = match d {
            Decided::Established { allowing: a, .. } => {
                self.c.ct_established += 1;
                a
            }
            Decided::Related { allowing: a, .. } => {
                self.c.ct_related += 1;
                a
            }
        };
        self.act(Some(a.action()), 1)
    }

    /// A packet's verdict from its rule: inline for the next packet of
    /// the current run (a compare and two adds), out of line for the rest.
    #[inline(always)]
    pub(crate) fn verdict(&mut self, rule: Option<RuleRef>, orig_len: u32) -> Verdict {
        let run = &mut self.run;
        match rule {
            Some(r) if run.packets > 0 && run.slot == r.slot => {
                run.packets += 1;
                run.bytes += u64::from(orig_len);
                run.verdict
            }
            _ => self.verdict_new_run(rule, orig_len),
        }
    }

    /// A packet of no rule, or the first of a new run.
    #[inline(never)]
    fn verdict_new_run(&mut self, rule: Option<RuleRef>, orig_len: u32) -> Verdict {
        let Some(r) = rule else {
            return self.act(None, 1);
        };
        self.flush();
        let (tally, verdict) = judged(r.action);
        self.run = Run {
            slot: r.slot,
            packets: 1,
            bytes: u64::from(orig_len),
            tally,
            verdict,
        };
        verdict
    }

    /// The current run into its rule's counters and the verdict counters.
    #[inline]
    pub(crate) fn flush(&mut self) {
        let run = self.run;
        if run.packets > 0 {
            // Ended by its packet count alone: the next run overwrites the
            // rest (no copy of a whole empty run a packet).
            self.run.packets = 0;
            self.rules
                .add_n(run.slot, run.packets, run.bytes, self.now_s);
            self.c.matched += run.packets;
            self.count(run.tally, run.verdict, run.packets);
        }
    }

    /// The verdict when connections are tracked (`t`): a connection's
    /// decision (`conn`, from the burst's `probe` of `key`), else the
    /// rule's, and a stateful rule opens the packet's connection; when
    /// the table is full the packet is dropped, as Linux's conntrack drops
    /// it, and counted. With the verdict, what the connection that decided
    /// said (`None`: none did): the held later fragments of the datagram
    /// take it too. (Returned, not kept in the judge for the caller to
    /// read back: that store and reload of a six-byte value stalled the
    /// burst loop, ~6 % of the stateful worker's samples in `perf`.) And
    /// whether the packet opened its connection.
    pub(crate) fn tracked(
        &mut self,
        t: Option<&ConnTable>,
        conn: Option<Decided>,
        rule: Option<RuleRef>,
        p: &PacketRef<'_>,
        key: &FlowKey,
        probe: &Probe,
    ) -> (Verdict, Option<Decided>, bool) {
        // A connection opened by an earlier packet of this burst: a
        // replayed capture can hold a request and its answer in one burst.
        let conn = match (conn, t) {
            (None, Some(t)) if self.opened && !track::still_absent(t, key, probe) => {
                track::lookup(t, p, key, None)
            }
            _ => conn,
        };
        if let Some(d) = conn {
            return (self.connection(d), conn, false);
        }
        if let (Some(t), Some(r)) = (t, rule) {
            if r.action.tracked().is_some() {
                match track::open(t, p, key, probe, r.slot, r.action) {
                    Ok(()) => {
                        self.c.ct_opened += 1;
                        self.opened = true;
                        return (self.verdict(rule, p.orig_len), None, true);
                    }
                    Err(OpenError::NotAnOpener | OpenError::Invalid) => {}
                    Err(OpenError::Full) => {
                        self.c.ct_refused += 1;
                        self.c.matched += 1;
                        self.rules.add(r.slot, u64::from(p.orig_len), self.now_s);
                        return (self.act(Some(Action::Drop), 1), None, false);
                    }
                }
            }
        }
        (self.verdict(rule, p.orig_len), None, false)
    }

    /// What `action` (none: no rule) does to `n` packets, counted.
    #[inline]
    fn act(&mut self, action: Option<Action>, n: u64) -> Verdict {
        let (tally, verdict) = action.map_or((Tally::Neither, Verdict::Forward), judged);
        self.count(tally, verdict, n);
        verdict
    }

    /// `n` packets of an action judged `tally` and `verdict`, counted.
    #[inline]
    fn count(&mut self, tally: Tally, verdict: Verdict, n: u64) {
        let c = &mut *self.c;
        match tally {
            Tally::Allowed => c.allowed += n,
            Tally::Counted => c.counted += n,
            Tally::Neither => {}
        }
        match verdict {
            Verdict::Drop => c.dropped += n,
            Verdict::Forward => c.forwarded += n,
            Verdict::Redirect(_) => {
                c.forwarded += n;
                c.redirected += n;
            }
        }
    }
}

/// What a rule's action does to a packet, and which action counter it
/// adds to: one match of the action for both.
#[inline]
fn judged(action: Action) -> (Tally, Verdict) {
    match action {
        Action::Drop => (Tally::Neither, Verdict::Drop),
        Action::Allow | Action::Track(Allowing::Allow) => (Tally::Allowed, Verdict::Forward),
        Action::Count | Action::Track(Allowing::Count) => (Tally::Counted, Verdict::Forward),
        Action::Redirect(port) | Action::Track(Allowing::Redirect(port)) => {
            (Tally::Neither, Verdict::Redirect(port))
        }
    }
}
