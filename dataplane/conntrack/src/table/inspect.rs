//! What the table shows of itself: counters, the connection list of
//! `cfdp ctl conns`, the export and import of a graceful restart, and a
//! dump for a failing loom model.

use crate::sync::fence;
use crate::sync::lock;
use crate::sync::Ordering::*;

use super::slot::{
    action_of, fin_of, rule_of, state_of, time_of, Fields, ACTION_SHIFT, ASSURED, FIN_SHIFT,
    IDENTITY, ORIG_LO, RULE_SHIFT, SEEN_REPLY, STATE_SHIFT, USED,
};
use super::{key_of, Acct, ConnInfo, ConnTable, Counts, L4};
use crate::key::ConnKey;
use crate::state::State;
use crate::tcp::TcpConn;

impl ConnTable {
    /// Every slot's control, first address and meta words, for a failing
    /// loom model's message.
    #[cfg(loom)]
    pub(crate) fn dump(&self) -> String {
        self.slots
            .iter()
            .map(|s| {
                format!(
                    "ctl {:x} addr0 {:x} meta {:x}",
                    s.ctl().load(Relaxed),
                    s.addr()[0].load(Relaxed),
                    s.meta().load(Relaxed)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Counters, and the live entries by state (a pass over every slot).
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            refused: self.refused.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
            invalid: self.invalid.load(Relaxed),
            ..Counts::default()
        };
        for shard in &*self.shards {
            let s = lock(&**shard);
            c.opened += s.opened;
            c.early_dropped += s.early_dropped;
            c.expired += s.expired;
        }
        for s in &*self.slots {
            let x = s.ctl().load(Relaxed);
            if x & USED != 0 {
                c.by_state[state_of(x).index()] += 1;
            }
        }
        c
    }

    /// The newest packet time any entry has seen: what `cfdp ctl conns`
    /// measures ages against (time is the packets'). 0 when empty.
    pub fn newest_ns(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.ctl().load(Relaxed) & USED != 0)
            .map(|s| time_of(s.last().load(Relaxed)))
            .max()
            .unwrap_or(0)
    }

    /// Every entry, for a graceful restart (the workers stopped).
    pub fn export(&self) -> Vec<ConnInfo> {
        self.list(usize::MAX, |_| true)
    }

    /// Puts saved entries back (before the workers start); `slot_of` gives
    /// each its rule's slot now (a rule's slot may differ after a restart;
    /// `None`: keep the saved one). Returns how many were taken: an entry
    /// already present or past the capacity is left out. Saved counters
    /// are kept if this table keeps accounting (zero if they were not
    /// saved).
    pub fn import(&self, saved: &[ConnInfo], slot_of: impl Fn(&ConnInfo) -> Option<u32>) -> usize {
        let mut taken = 0;
        for e in saved {
            let echo = L4::Echo { request: true };
            let (key, from_lo) = key_of(&e.orig, &echo);
            let h = self.hash(&key);
            let w = key.words();
            let mut shard = self.shard(h);
            if self.locate(&w, h, None).is_some() {
                continue;
            }
            if !self.take(&mut shard) {
                self.give(&mut shard);
                continue;
            }
            let Some(i) = self.alloc(&mut shard) else {
                self.give(&mut shard);
                continue;
            };
            // The save keeps no windows: a TCP connection comes back
            // liberal, as one Linux picks up; answered and assured as its
            // state says.
            let answered = !e.state.embryonic();
            let assured =
                matches!(e.state, State::TcpEstablished | State::UdpStream) || e.state.closing();
            let ctl = USED
                | if from_lo { ORIG_LO } else { 0 }
                | if answered { SEEN_REPLY } else { 0 }
                | if assured { ASSURED } else { 0 }
                | u64::from(e.fin & 3) << FIN_SHIFT
                | (e.state.index() as u64) << STATE_SHIFT
                | u64::from(slot_of(e).unwrap_or(e.slot)) << RULE_SHIFT;
            let acct = e.acct.unwrap_or(Acct {
                opened_ns: e.last_ns,
                ..Acct::default()
            });
            let ext = if e.state.is_tcp() {
                TcpConn::liberal().pack()
            } else {
                [acct.opened_ns, 0, 0, 0, 0, 0]
            };
            if self.fill(&mut shard, i, &w, h, ctl, e.action, e.last_ns, acct, &ext) {
                taken += 1;
            }
        }
        taken
    }

    /// The connection in slot `i`, read whole; `None` if free or freed
    /// while read.
    fn info(&self, i: usize) -> Option<ConnInfo> {
        let s = &self.slots[i];
        let c1 = s.ctl().load(Acquire);
        if c1 & USED == 0 {
            return None;
        }
        let addr = [0, 1, 2, 3].map(|j| s.addr()[j].load(Relaxed));
        let meta = s.meta().load(Relaxed);
        let last_ns = time_of(s.last().load(Relaxed));
        let acct = self.acct.as_ref().map(|a| {
            let a = &a[i];
            Acct {
                opened_ns: a.opened.load(Relaxed),
                packets: [0, 1].map(|d| a.packets[d].load(Relaxed)),
                bytes: [0, 1].map(|d| a.bytes[d].load(Relaxed)),
            }
        });
        fence(Acquire);
        let c2 = s.ctl().load(Relaxed);
        if (c1 ^ c2) & IDENTITY != 0 {
            return None;
        }
        let key = ConnKey::from_words(addr, meta);
        Some(ConnInfo {
            orig: key.flow(c2 & ORIG_LO != 0),
            state: state_of(c2),
            fin: fin_of(c2),
            slot: rule_of(c2),
            action: action_of(meta >> ACTION_SHIFT),
            last_ns,
            acct,
        })
    }

    /// Up to `limit` connections that `keep` accepts.
    pub fn list(&self, limit: usize, keep: impl Fn(&ConnInfo) -> bool) -> Vec<ConnInfo> {
        let mut out = Vec::new();
        for i in 0..self.slots.len() {
            if let Some(info) = self.info(i).filter(|c| keep(c)) {
                out.push(info);
                if out.len() >= limit {
                    break;
                }
            }
        }
        out
    }
}

impl std::fmt::Debug for ConnTable {
    /// Its size, not its entries (a pass over them is `counts`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnTable")
            .field("capacity", &self.capacity)
            .field("entries", &self.len())
            .field("stripes", &self.shards.len())
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}
