//! The table against a small model: random opens, lookups, ICMP-error
//! lookups and sweeps over a few connections (some alike but for a port,
//! the protocol or the family), in a table whose filter is tiny and whose
//! fingerprints are 4 bits, so that collisions, the Bloom part and
//! refused inserts are common. The model is a map of connections with the
//! state machine of `state.rs` (checked on its own in `state_model.rs`):
//! after every step the table must answer as the model does, and hold as
//! many connections.

use std::collections::HashMap;
use std::net::IpAddr;

use cfdp_conntrack::state::tcp::{ACK, FIN, RST, SYN};
use cfdp_conntrack::table::Options;
use cfdp_conntrack::{ConnKey, ConnTable, Dir, OpenError, State, Timeouts};
use cfdp_rules::{Action, Allowing, FlowKey, HashSecret};
use proptest::prelude::*;

const S: u64 = 1_000_000_000;

/// Connection `i` of the universe, from its opener's side.
fn flow(i: usize) -> FlowKey {
    let v6 = i % 7 == 6;
    let (a, b): (IpAddr, IpAddr) = if v6 {
        (
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
        )
    } else {
        ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
    };
    let proto = if i.is_multiple_of(2) { 6 } else { 17 };
    // Same addresses throughout: the ports, protocol and family alone
    // tell the connections apart.
    FlowKey::new(a, b, proto, 1000 + (i / 2) as u16, 53)
}

#[derive(Clone, Debug)]
enum Op {
    Open {
        i: usize,
        after_s: u64,
    },
    Packet {
        i: usize,
        reply: bool,
        flags: u8,
        after_s: u64,
    },
    Error {
        i: usize,
        after_s: u64,
    },
    Sweep {
        after_s: u64,
    },
    /// A TCP handshake: the opener's SYN, the answer's SYN-ACK, the ACK
    /// (three steps, each checked), so that established connections and
    /// what closes them are common.
    Handshake {
        i: usize,
        after_s: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0..14usize;
    let after = prop_oneof![Just(0u64), 0..5u64, 0..200u64];
    let flags = prop_oneof![
        Just(ACK),
        Just(SYN),
        Just(SYN | ACK),
        Just(FIN | ACK),
        Just(RST),
        Just(0)
    ];
    prop_oneof![
        3 => (i.clone(), after.clone()).prop_map(|(i, after_s)| Op::Open { i, after_s }),
        5 => (i.clone(), any::<bool>(), flags, after.clone())
            .prop_map(|(i, reply, flags, after_s)| Op::Packet { i, reply, flags, after_s }),
        1 => (i, after.clone()).prop_map(|(i, after_s)| Op::Error { i, after_s }),
        1 => after.clone().prop_map(|after_s| Op::Sweep { after_s }),
        2 => (0..7usize, after).prop_map(|(i, after_s)| Op::Handshake { i: 2 * i, after_s }),
    ]
}

/// A connection as the model keeps it.
#[derive(Clone, Debug)]
struct Conn {
    opener: FlowKey,
    state: State,
    fin: u8,
    slot: u32,
    action: Action,
    last: u64,
}

struct Model {
    conns: HashMap<ConnKey, Conn>,
    timeouts: Timeouts,
}

impl Model {
    fn live(&mut self, k: &FlowKey, now: u64) -> Option<&mut Conn> {
        let key = ConnKey::of(k).0;
        let t = &self.timeouts;
        if self
            .conns
            .get(&key)
            .is_some_and(|c| now.saturating_sub(c.last) > t.of(c.state))
        {
            self.conns.remove(&key);
        }
        self.conns.get_mut(&key)
    }
}

fn dir(c: &Conn, k: &FlowKey) -> Dir {
    if *k == c.opener {
        Dir::Orig
    } else {
        Dir::Reply
    }
}

fn flags_of(k: &FlowKey, flags: u8) -> u8 {
    if k.proto == 6 {
        flags
    } else {
        0
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_table_answers_as_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        let ops: Vec<Op> = ops
            .into_iter()
            .flat_map(|o| match o {
                Op::Handshake { i, after_s } => vec![
                    Op::Open { i, after_s },
                    Op::Packet { i, reply: true, flags: SYN | ACK, after_s: 0 },
                    Op::Packet { i, reply: false, flags: ACK, after_s: 0 },
                ],
                o => vec![o],
            })
            .collect();
        let opts = Options {
            buckets_log2: Some(1),
            fingerprint_bits: Some(4),
            // The Bloom part as soon as both buckets are full: often.
            bloom_threshold: 0,
            accounting: true,
            ..Options::default()
        };
        let t = ConnTable::with_options(64, Timeouts::default(), HashSecret::from_seed(9), opts).unwrap();
        let mut m = Model { conns: HashMap::new(), timeouts: Timeouts::default() };
        let mut now = 0u64;
        for (n, op) in ops.iter().enumerate() {
            match *op {
                Op::Open { i, after_s } => {
                    now += after_s * S;
                    let k = flow(i);
                    let flags = flags_of(&k, SYN);
                    let action = Action::Track(Allowing::Redirect(i as u16));
                    let got = t.open(&k, flags, false, i as u32, action, 60, now);
                    match m.live(&k, now) {
                        Some(c) => {
                            let d = dir(c, &k);
                            c.state = c.state.next(d, flags, &mut c.fin);
                            c.last = now;
                            let want = (c.slot, c.action, d, c.state);
                            let h = got.expect("an open of a live connection steps it");
                            prop_assert_eq!((h.slot, h.action, h.dir, h.state), want, "step {}", n);
                        }
                        None => match got {
                            Ok(h) => {
                                let state = State::open(k.proto, flags, false).unwrap();
                                prop_assert_eq!((h.slot, h.action, h.dir, h.state), (i as u32, action, Dir::Orig, state), "step {}", n);
                                m.conns.insert(ConnKey::of(&k).0, Conn { opener: k, state, fin: 0, slot: i as u32, action, last: now });
                            }
                            // The tiny filter had no room around its hash.
                            Err(e) => prop_assert_eq!(e, OpenError::Full, "step {}", n),
                        },
                    }
                }
                Op::Packet { i, reply, flags, after_s } => {
                    now += after_s * S;
                    let k = if reply { flow(i).reply() } else { flow(i) };
                    let flags = flags_of(&k, flags);
                    let got = t.lookup(&k, flags, 60, now);
                    let want = m.live(&k, now).map(|c| {
                        let d = dir(c, &k);
                        c.state = c.state.next(d, flags, &mut c.fin);
                        c.last = now;
                        (c.slot, c.action, d, c.state)
                    });
                    prop_assert_eq!(got.map(|h| (h.slot, h.action, h.dir, h.state)), want, "step {}", n);
                }
                Op::Error { i, after_s } => {
                    now += after_s * S;
                    let k = flow(i);
                    let got = t.related(&k, now);
                    let key = ConnKey::of(&k).0;
                    let want = m.conns.get(&key).filter(|c| now.saturating_sub(c.last) <= m.timeouts.of(c.state)).map(|c| (c.slot, c.action, c.state));
                    prop_assert_eq!(got.map(|h| (h.slot, h.action, h.state)), want, "step {}", n);
                }
                Op::Handshake { .. } => unreachable!("expanded above"),
                Op::Sweep { after_s } => {
                    now += after_s * S;
                    let before = m.conns.len();
                    let to = &m.timeouts;
                    m.conns.retain(|_, c| now.saturating_sub(c.last) <= to.of(c.state));
                    prop_assert_eq!(t.sweep(now), before - m.conns.len(), "step {}", n);
                }
            }
            prop_assert_eq!(t.len(), m.conns.len(), "step {}", n);
            for c in m.conns.values() {
                let h = t.peek(&c.opener);
                prop_assert_eq!(h.map(|h| (h.slot, h.state, h.dir)), Some((c.slot, c.state, Dir::Orig)), "step {}", n);
            }
        }
        let mut listed: Vec<_> = t.list(usize::MAX, |_| true).into_iter().map(|c| (c.orig, c.state, c.fin)).collect();
        let mut want: Vec<_> = m.conns.values().map(|c| (c.opener, c.state, c.fin)).collect();
        listed.sort_by_key(|x| format!("{x:?}"));
        want.sort_by_key(|x| format!("{x:?}"));
        prop_assert_eq!(listed, want);
    }
}
