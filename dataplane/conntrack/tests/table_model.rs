//! The table against a small model: random opens, lookups, ICMP-error
//! lookups and sweeps over a few connections (some alike but for a port,
//! the protocol or the family), in a table whose filter is tiny and whose
//! fingerprints are 4 bits, so that collisions, the Bloom part and
//! refused inserts are common. The model is a map of connections whose
//! states move by `State::next` and, for TCP, `tcp::open` and
//! `tcp::packet` (checked on their own: `state_model.rs` against Linux's
//! table, the Linux lab against Linux itself): after every step the table
//! must answer as the model does, and hold as many connections.

use std::collections::HashMap;
use std::net::IpAddr;

use cfdp_conntrack::state::tcp::{ACK, FIN, RST, SYN};
use cfdp_conntrack::table::Options;
use cfdp_conntrack::tcp::{self, Status, TcpConn, TcpSettings, Verdict};
use cfdp_conntrack::{ConnKey, ConnTable, Dir, OpenError, State, Timeouts};
use cfdp_packet::TcpSeg;
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
    opened: u64,
    cap: bool,
    status: Status,
    tcp: TcpConn,
}

/// What a packet does to a live connection of the model, as the table's
/// step says: `Some(hit)` (and whether the entry goes: a RST before any
/// answer), or `None` for an invalid packet or a reopening SYN (`gone`).
enum Moved {
    Hit((u32, Action, Dir, State), bool),
    Invalid,
    Reopen,
}

fn step(c: &mut Conn, d: Dir, flags: u8, now: u64) -> Moved {
    let hit = |c: &Conn| (c.slot, c.action, d, c.state);
    if c.state.is_tcp() {
        let seg = TcpSeg::flags(flags);
        let v = tcp::packet(
            &mut c.tcp,
            Some(c.state),
            c.status,
            d,
            &seg,
            &TcpSettings::default(),
        );
        match v {
            Verdict::Accept {
                state,
                cap,
                assured,
                refresh,
            } => {
                c.state = state;
                c.cap = cap;
                c.status.assured |= assured;
                c.status.seen_reply |= d == Dir::Reply;
                if flags & FIN != 0 {
                    c.fin |= 1 << d.index();
                }
                if refresh {
                    c.last = c.last.max(now);
                }
                Moved::Hit(hit(c), false)
            }
            Verdict::Pass => {
                c.status.seen_reply |= d == Dir::Reply;
                Moved::Hit(hit(c), false)
            }
            Verdict::Kill => Moved::Hit(hit(c), true),
            Verdict::Invalid => Moved::Invalid,
            Verdict::Reopen => Moved::Reopen,
        }
    } else {
        c.state = c.state.next(d, now.saturating_sub(c.opened));
        c.last = c.last.max(now);
        Moved::Hit(hit(c), false)
    }
}

fn timeout(t: &Timeouts, c: &Conn) -> u64 {
    if c.cap {
        t.capped(c.state)
    } else {
        t.of(c.state)
    }
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
            .is_some_and(|c| now.saturating_sub(c.last) > timeout(t, c))
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
                    let got = t.open(&k, flags, i as u32, action, 60, now);
                    let key = ConnKey::of(&k).0;
                    let mut fresh = true;
                    if let Some(c) = m.live(&k, now) {
                        let d = dir(c, &k);
                        match step(c, d, flags, now) {
                            Moved::Hit(want, gone) => {
                                let h = got.expect("an open of a live connection steps it");
                                prop_assert_eq!((h.slot, h.action, h.dir, h.state), want, "step {}", n);
                                if gone {
                                    m.conns.remove(&key);
                                }
                                fresh = false;
                            }
                            Moved::Invalid => {
                                prop_assert_eq!(got, Err(OpenError::Invalid), "step {}", n);
                                fresh = false;
                            }
                            Moved::Reopen => {
                                m.conns.remove(&key);
                            }
                        }
                    }
                    if fresh {
                        match got {
                            Ok(h) => {
                                let (state, conn, cap) = if k.proto == 6 {
                                    let (conn, v) = tcp::open(&TcpSeg::flags(flags), &TcpSettings::default()).unwrap();
                                    let Verdict::Accept { state, cap, .. } = v else { panic!("{v:?}") };
                                    (state, conn, cap)
                                } else {
                                    (State::open(k.proto, false).unwrap(), TcpConn::default(), false)
                                };
                                prop_assert_eq!((h.slot, h.action, h.dir, h.state), (i as u32, action, Dir::Orig, state), "step {}", n);
                                m.conns.insert(key, Conn {
                                    opener: k, state, fin: 0, slot: i as u32, action, last: now,
                                    opened: now, cap, status: Status::default(), tcp: conn,
                                });
                            }
                            // The tiny filter had no room around its hash.
                            Err(e) => prop_assert_eq!(e, OpenError::Full, "step {}", n),
                        }
                    }
                }
                Op::Packet { i, reply, flags, after_s } => {
                    now += after_s * S;
                    let k = if reply { flow(i).reply() } else { flow(i) };
                    let flags = flags_of(&k, flags);
                    let got = t.lookup(&k, flags, 60, now);
                    let key = ConnKey::of(&k).0;
                    let want = match m.live(&k, now) {
                        Some(c) => {
                            let d = dir(c, &k);
                            match step(c, d, flags, now) {
                                Moved::Hit(want, gone) => {
                                    if gone {
                                        m.conns.remove(&key);
                                    }
                                    Some(want)
                                }
                                Moved::Invalid => None,
                                Moved::Reopen => {
                                    m.conns.remove(&key);
                                    None
                                }
                            }
                        }
                        None => None,
                    };
                    prop_assert_eq!(got.map(|h| (h.slot, h.action, h.dir, h.state)), want, "step {}", n);
                }
                Op::Error { i, after_s } => {
                    now += after_s * S;
                    let k = flow(i);
                    let got = t.related(&k, now);
                    let key = ConnKey::of(&k).0;
                    let want = m.conns.get(&key).filter(|c| now.saturating_sub(c.last) <= timeout(&m.timeouts, c)).map(|c| (c.slot, c.action, c.state));
                    prop_assert_eq!(got.map(|h| (h.slot, h.action, h.state)), want, "step {}", n);
                }
                Op::Handshake { .. } => unreachable!("expanded above"),
                Op::Sweep { after_s } => {
                    now += after_s * S;
                    let before = m.conns.len();
                    let to = &m.timeouts;
                    m.conns.retain(|_, c| now.saturating_sub(c.last) <= timeout(to, c));
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
