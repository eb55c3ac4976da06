//! A burst's verdicts: a frame's rule (or its connection's decision)
//! turned into what happens to it, with every counter that follows — the
//! worker's totals, the rule's hits (a run of one rule's hits added once),
//! connections opened by stateful rules.

use cfdp_conntrack::table::Probe;
use cfdp_conntrack::{ConnTable, OpenError};
use cfdp_rules::{Action, Allowing, FlowKey};

use crate::frame::{PacketRef, Verdict};
use crate::tables::RuleRef;
use crate::track::{self, Decided};

/// Turns a frame's rule into its verdict, counting both.
pub(crate) struct Judge<'a> {
    pub(crate) c: &'a mut crate::Totals,
    rules: &'a crate::stats::SlotCounters,
    now_s: u32,
    /// A connection was opened in this burst (later packets look again).
    opened: bool,
    /// Hits of one rule by consecutive packets, not yet added to its
    /// counters (slot, packets, bytes): one add a run, not a packet (a
    /// burst of an allow-all or a catch-all is one run). Added before the
    /// burst ends ([`Self::flush`]), so a reader of the published packet
    /// count still sees every hit of the packets it counted.
    run: (u32, u64, u64),
}

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
            run: (0, 0, 0),
        }
    }

    #[inline]
    pub(crate) fn verdict(&mut self, rule: Option<RuleRef>, orig_len: u32) -> Verdict {
        let Some(r) = rule else {
            return self.act(None);
        };
        self.c.matched += 1;
        self.count(r.slot, orig_len);
        self.act(Some(r.action))
    }

    /// One hit of rule `slot` by a packet of `len` bytes.
    #[inline]
    fn count(&mut self, slot: u32, len: u32) {
        if self.run.0 != slot || self.run.1 == 0 {
            self.flush();
            self.run.0 = slot;
        }
        self.run.1 += 1;
        self.run.2 += u64::from(len);
    }

    /// The current run's hits into its rule's counters.
    #[inline]
    pub(crate) fn flush(&mut self) {
        let (slot, packets, bytes) = std::mem::take(&mut self.run);
        if packets > 0 {
            self.rules.add_n(slot, packets, bytes, self.now_s);
        }
    }

    /// The verdict when connections are tracked (`t`): a connection's
    /// decision (`conn`, from the burst's `probe` of `key`), else the
    /// rule's, and a stateful rule opens the packet's connection; when
    /// the table is full the packet is dropped, as Linux's conntrack drops
    /// it, and counted.
    pub(crate) fn tracked(
        &mut self,
        t: Option<&ConnTable>,
        conn: Option<Decided>,
        rule: Option<RuleRef>,
        p: &PacketRef<'_>,
        key: &FlowKey,
        probe: &Probe,
    ) -> Verdict {
        // A connection opened by an earlier packet of this burst: a
        // replayed capture can hold a request and its answer in one burst.
        let conn = match (conn, t) {
            (None, Some(t)) if self.opened && !track::still_absent(t, key, probe) => {
                track::lookup(t, p, key, None)
            }
            _ => conn,
        };
        match conn {
            Some(Decided::Established(a)) => {
                self.c.ct_established += 1;
                return self.act(Some(a.action()));
            }
            Some(Decided::Related(a)) => {
                self.c.ct_related += 1;
                return self.act(Some(a.action()));
            }
            None => {}
        }
        if let (Some(t), Some(r)) = (t, rule) {
            if r.action.tracked().is_some() {
                match track::open(t, p, key, probe, r.slot, r.action) {
                    Ok(()) => {
                        self.c.ct_opened += 1;
                        self.opened = true;
                    }
                    Err(OpenError::NotAnOpener | OpenError::Invalid) => {}
                    Err(OpenError::Full) => {
                        self.c.ct_refused += 1;
                        self.c.matched += 1;
                        self.count(r.slot, p.orig_len);
                        return self.act(Some(Action::Drop));
                    }
                }
            }
        }
        self.verdict(rule, p.orig_len)
    }

    /// What `action` (none: no rule) does to the packet, counted.
    #[inline]
    fn act(&mut self, action: Option<Action>) -> Verdict {
        let c = &mut *self.c;
        let v = match action {
            None => Verdict::Forward,
            Some(action) => match action {
                Action::Drop => Verdict::Drop,
                Action::Allow | Action::Track(Allowing::Allow) => {
                    c.allowed += 1;
                    Verdict::Forward
                }
                Action::Count | Action::Track(Allowing::Count) => {
                    c.counted += 1;
                    Verdict::Forward
                }
                Action::Redirect(port) | Action::Track(Allowing::Redirect(port)) => {
                    Verdict::Redirect(port)
                }
            },
        };
        match v {
            Verdict::Drop => c.dropped += 1,
            Verdict::Forward => c.forwarded += 1,
            Verdict::Redirect(_) => {
                c.forwarded += 1;
                c.redirected += 1;
            }
        }
        v
    }
}
