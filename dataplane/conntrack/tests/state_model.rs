//! The TCP state machine against a small model written from the spec in
//! `state.rs`'s docs (and Linux's names): random segments each way after
//! an opening SYN, the state after every one compared.

use cfdp_conntrack::state::tcp::{ACK, FIN, RST, SYN};
use cfdp_conntrack::{Dir, State};
use proptest::prelude::*;

/// What the model remembers of a connection since it (re)opened.
#[derive(Default)]
struct History {
    syn_ack_from_reply: bool,
    established: bool,
    fin: [bool; 2],
    /// An ACK without FIN from the side that had not sent the first FIN.
    acked_first_fin: bool,
    /// An ACK without FIN after both FINs.
    acked_both: bool,
    rst: bool,
}

impl History {
    fn see(&mut self, dir: Dir, flags: u8) {
        let has = |f: u8| flags & f == f;
        if self.rst || (self.fin == [true, true] && self.acked_both) {
            // CLOSE or TIME_WAIT: only a new SYN from the opener changes it.
            if !self.rst && has(RST) {
                self.rst = true;
            } else if dir == Dir::Orig && has(SYN) && !has(ACK) {
                *self = History::default();
            }
            return;
        }
        if has(RST) {
            self.rst = true;
            return;
        }
        let me = dir.index();
        if has(FIN) {
            self.fin[me] = true;
            return;
        }
        let fins = self.fin.iter().filter(|&&f| f).count();
        if fins == 2 && has(ACK) {
            self.acked_both = true;
        } else if fins == 1 && has(ACK) && !self.fin[me] {
            self.acked_first_fin = true;
        } else if fins == 0 {
            if dir == Dir::Reply && has(SYN | ACK) {
                self.syn_ack_from_reply = true;
            } else if dir == Dir::Orig && has(ACK) && !has(SYN) && self.syn_ack_from_reply {
                self.established = true;
            }
        }
    }

    fn state(&self) -> &'static str {
        let fins = self.fin.iter().filter(|&&f| f).count();
        if self.rst {
            "CLOSE"
        } else if fins == 2 && self.acked_both {
            "TIME_WAIT"
        } else if fins == 2 {
            "LAST_ACK"
        } else if fins == 1 && self.acked_first_fin {
            "CLOSE_WAIT"
        } else if fins == 1 {
            "FIN_WAIT"
        } else if self.established {
            "ESTABLISHED"
        } else if self.syn_ack_from_reply {
            "SYN_RECV"
        } else {
            "SYN_SENT"
        }
    }
}

fn segment() -> impl Strategy<Value = (Dir, u8)> {
    let dir = prop_oneof![Just(Dir::Orig), Just(Dir::Reply)];
    let flags = prop_oneof![
        Just(SYN),
        Just(SYN | ACK),
        Just(ACK),
        Just(ACK | 0x08),
        Just(FIN | ACK),
        Just(FIN),
        Just(RST),
        Just(RST | ACK),
    ];
    (dir, flags)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn tcp_states_follow_the_model(segments in prop::collection::vec(segment(), 1..24)) {
        let mut s = State::open(6, SYN, false).unwrap();
        let mut fin = 0;
        let mut model = History::default();
        for (i, &(dir, flags)) in segments.iter().enumerate() {
            s = s.next(dir, flags, &mut fin);
            model.see(dir, flags);
            prop_assert_eq!(s.name(), model.state(), "segment {} of {:?}", i, segments);
        }
    }
}
