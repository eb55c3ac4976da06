//! The connection table: both directions, exact keys, timeouts by packet
//! time, a full table, and workers on several threads.

use std::net::{IpAddr, Ipv4Addr};

use cfdp_conntrack::state::tcp::{ACK, FIN, RST, SYN};
use cfdp_conntrack::table::Options;
use cfdp_conntrack::{ConnInfo, ConnTable, Dir, OpenError, State, Timeouts};
use cfdp_rules::{Action, FlowKey, HashSecret};

const S: u64 = 1_000_000_000;

fn v4(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(i))
}

/// Client `i` (10.0.0.0 + i, port 40000 + i % 20000) to 192.0.2.1:80.
fn tcp(i: u32) -> FlowKey {
    FlowKey::new(
        v4(0x0a00_0000 + i),
        v4(0xc000_0201),
        6,
        40000 + (i % 20000) as u16,
        80,
    )
}

fn udp(i: u32) -> FlowKey {
    FlowKey::new(v4(0x0a00_0000 + i), v4(0xc000_0235), 17, 5000, 53)
}

fn table(capacity: usize) -> ConnTable {
    ConnTable::new(capacity, Timeouts::default(), HashSecret::from_seed(7)).unwrap()
}

/// A table that counts packets and bytes.
fn counting(capacity: usize) -> ConnTable {
    let opts = Options {
        accounting: true,
        ..Options::default()
    };
    ConnTable::with_options(
        capacity,
        Timeouts::default(),
        HashSecret::from_seed(7),
        opts,
    )
    .unwrap()
}

fn packets(c: &ConnInfo) -> [u64; 2] {
    c.acct.expect("accounting on").packets
}

#[test]
fn both_directions_share_one_connection_and_its_action() {
    let t = counting(1024);
    let k = tcp(1);
    assert_eq!(t.lookup(&k, SYN, 60, 0), None);
    let h = t.open(&k, SYN, 7, Action::Count, 60, 0).unwrap();
    assert_eq!(
        (h.slot, h.action, h.dir, h.state),
        (7, Action::Count, Dir::Orig, State::TcpSynSent)
    );
    let r = t.lookup(&k.reply(), SYN | ACK, 60, S).unwrap();
    assert_eq!(
        (r.dir, r.state, r.action),
        (Dir::Reply, State::TcpSynRecv, Action::Count)
    );
    assert_eq!(
        t.lookup(&k, ACK, 52, 2 * S).unwrap().state,
        State::TcpEstablished
    );
    // Another client port, another server, another protocol: not it.
    assert_eq!(t.lookup(&tcp(2), ACK, 52, 2 * S), None);
    assert_eq!(t.lookup(&FlowKey { dport: 81, ..k }, ACK, 52, 2 * S), None);
    assert_eq!(t.lookup(&FlowKey { proto: 17, ..k }, 0, 52, 2 * S), None);
    let l = t.list(10, |_| true);
    assert_eq!(l.len(), 1);
    let a = l[0].acct.unwrap();
    assert_eq!((l[0].orig, a.packets, a.bytes), (k, [2, 1], [112, 60]));
    // Without accounting, no counters.
    let t = table(1024);
    t.open(&k, SYN, 7, Action::Count, 60, 0).unwrap();
    assert_eq!(t.list(1, |_| true)[0].acct, None);
    let t = counting(1024);
    t.open(&k, SYN, 7, Action::Count, 60, 0).unwrap();
    assert_eq!(l[0].state, State::TcpEstablished);
    // A SYN opens a TCP connection, and so does an ACK (Linux's
    // `tcp_loose`: picked up mid-stream, after a restart); invalid flags
    // or a RST open nothing.
    assert_eq!(
        t.open(&tcp(3), ACK, 7, Action::Allow, 52, 0)
            .map(|h| h.state),
        Ok(State::TcpEstablished)
    );
    for flags in [SYN | FIN, FIN, 0, RST, SYN | ACK] {
        assert_eq!(
            t.open(&tcp(4), flags, 7, Action::Allow, 52, 0),
            Err(OpenError::NotAnOpener),
            "{flags:#x}"
        );
    }
}

/// A fingerprint collision never admits a packet: a million packets of
/// other 5-tuples against a thousand connections, none answered, though
/// the filter let some through (counted as false positives).
#[test]
fn only_the_exact_key_is_admitted() {
    let t = table(1024);
    for i in 0..1000 {
        t.open(&udp(i), 0, 1, Action::Allow, 60, 0).unwrap();
    }
    let mut hits = 0;
    for i in 1000..1_001_000 {
        hits += usize::from(t.lookup(&udp(i), 0, 60, S).is_some());
        hits += usize::from(t.lookup(&tcp(i), ACK, 60, S).is_some());
    }
    assert_eq!(hits, 0);
    let fp = t.counts().false_positives;
    assert!(
        fp > 0,
        "the filter never let a stranger through: the test shows nothing"
    );
    for i in 0..1000 {
        assert!(t.lookup(&udp(i).reply(), 0, 60, S).is_some(), "{i}");
    }
}

#[test]
fn timeouts_run_on_packet_time() {
    let t = table(1024);
    let k = udp(1);
    t.open(&k, 0, 1, Action::Allow, 60, 0).unwrap();
    // Unreplied: 30 s after the last packet.
    assert!(t.lookup(&k, 0, 60, 29 * S).is_some());
    assert!(
        t.lookup(&k.reply(), 0, 60, 58 * S).is_some(),
        "29 s after the last"
    );
    // Replied now, but a stream only from its next packet (more than 2 s
    // after the opening, as Linux's `stream_ts`): 30 s still.
    assert_eq!(
        t.lookup(&k, 0, 60, 87 * S).map(|h| h.state),
        Some(State::UdpStream)
    );
    // A stream: 120 s.
    assert!(t.lookup(&k, 0, 60, 207 * S).is_some());
    assert_eq!(t.lookup(&k, 0, 60, 328 * S), None, "121 s after the last");
    assert_eq!(t.len(), 0);
    // A sweep removes what no packet came back for.
    for i in 10..20 {
        t.open(&udp(i), 0, 1, Action::Allow, 60, 0).unwrap();
    }
    let x = tcp(5);
    t.open(&x, SYN, 1, Action::Allow, 60, 0).unwrap();
    t.lookup(&x.reply(), SYN | ACK, 60, 0).unwrap();
    t.lookup(&x, ACK, 60, 0).unwrap();
    assert_eq!(t.sweep(31 * S), 10);
    assert_eq!(t.len(), 1, "the established TCP connection stays");
    let c = t.counts();
    assert_eq!(
        (c.expired, c.by_state[State::TcpEstablished.index()]),
        (11, 1)
    );
    // A FIN each way and the last ACK: TIME_WAIT, 120 s.
    t.lookup(&x, FIN | ACK, 60, 40 * S).unwrap();
    t.lookup(&x.reply(), FIN | ACK, 60, 40 * S).unwrap();
    assert_eq!(
        t.lookup(&x, ACK, 60, 40 * S).unwrap().state,
        State::TcpTimeWait
    );
    assert_eq!(t.sweep(159 * S), 0);
    assert_eq!(t.sweep(161 * S), 1);
    assert!(t.is_empty());
}

/// Full of established connections, a SYN flood is refused and pushes
/// none of them out; with embryonic entries among them, new connections
/// take the embryonic ones' places and the established stay.
#[test]
fn a_full_table_never_drops_an_established_connection() {
    let t = table(64);
    let establish = |i: u32| {
        t.open(&tcp(i), SYN, 1, Action::Allow, 60, 0).unwrap();
        t.lookup(&tcp(i).reply(), SYN | ACK, 60, 0).unwrap();
        assert_eq!(
            t.lookup(&tcp(i), ACK, 60, 0).unwrap().state,
            State::TcpEstablished
        );
    };
    (0..64).for_each(establish);
    for i in 1000..2000 {
        assert_eq!(
            t.open(&tcp(i), SYN, 1, Action::Allow, 60, S),
            Err(OpenError::Full)
        );
    }
    let c = t.counts();
    assert_eq!(
        (c.refused, c.by_state[State::TcpEstablished.index()]),
        (1000, 64)
    );
    for i in 0..64 {
        assert!(t.lookup(&tcp(i).reply(), ACK, 60, S).is_some(), "{i}");
    }

    let t = table(64);
    (0..32).for_each(|i| {
        t.open(&tcp(i), SYN, 1, Action::Allow, 60, 0).unwrap();
        t.lookup(&tcp(i).reply(), SYN | ACK, 60, 0).unwrap();
        t.lookup(&tcp(i), ACK, 60, 0).unwrap();
    });
    for i in 1000..2000 {
        t.open(&tcp(i), SYN, 1, Action::Allow, 60, S + u64::from(i))
            .unwrap();
    }
    let c = t.counts();
    assert_eq!(c.refused, 0);
    assert_eq!(c.by_state[State::TcpEstablished.index()], 32);
    assert_eq!(c.by_state[State::TcpSynSent.index()], 32);
    assert_eq!(c.early_dropped, 1000 - 32);
    assert_eq!(t.len(), 64);
}

/// A SYN flood against a listening server: every spoofed SYN is
/// answered, so the table fills with SYN_RECV entries. They are not
/// assured, so a new connection takes one's place (Linux's early drop);
/// the established connections stay and still pass.
#[test]
fn an_answered_syn_flood_is_dropped_to_make_room() {
    let t = table(64);
    (0..32).for_each(|i| {
        t.open(&tcp(i), SYN, 1, Action::Allow, 60, 0).unwrap();
        t.lookup(&tcp(i).reply(), SYN | ACK, 60, 0).unwrap();
        t.lookup(&tcp(i), ACK, 60, 0).unwrap();
    });
    for i in 1000..3000 {
        let at = S + u64::from(i);
        t.open(&tcp(i), SYN, 1, Action::Allow, 60, at).unwrap();
        assert_eq!(
            t.lookup(&tcp(i).reply(), SYN | ACK, 60, at)
                .map(|h| h.state),
            Some(State::TcpSynRecv),
            "{i}"
        );
    }
    let c = t.counts();
    assert_eq!(c.refused, 0);
    assert_eq!(c.by_state[State::TcpEstablished.index()], 32);
    assert_eq!(c.by_state[State::TcpSynRecv.index()], 32);
    assert_eq!(c.early_dropped, 2000 - 32);
    for i in 0..32 {
        assert!(t.lookup(&tcp(i).reply(), ACK, 60, 10 * S).is_some(), "{i}");
    }
    // A UDP flood that is answered (replied, not yet a stream) is dropped
    // for new connections too; a stream is not.
    let t = table(64);
    for i in 0..64 {
        t.open(&udp(i), 0, 1, Action::Allow, 60, 0).unwrap();
        t.lookup(&udp(i).reply(), 0, 60, 0).unwrap();
    }
    t.open(&udp(500), 0, 1, Action::Allow, 60, 1).unwrap();
    assert_eq!(t.counts().early_dropped, 1);
    let t = table(64);
    for i in 0..64 {
        t.open(&udp(i), 0, 1, Action::Allow, 60, 0).unwrap();
        t.lookup(&udp(i).reply(), 0, 60, 0).unwrap();
        assert_eq!(
            t.lookup(&udp(i), 0, 60, 3 * S).map(|h| h.state),
            Some(State::UdpStream)
        );
    }
    assert_eq!(
        t.open(&udp(500), 0, 1, Action::Allow, 60, 4 * S),
        Err(OpenError::Full)
    );
}

/// Workers on different threads: one sees every connection's opening
/// SYN, another its reply (after the opener, as a reply comes after what
/// it answers), while a third opens and expires other connections in the
/// same stripes. Every reply finds its connection.
#[test]
fn directions_on_different_threads_meet_in_one_entry() {
    let t = table(1 << 16);
    let n = 20_000u32;
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                t.open(&tcp(i), SYN, 1, Action::Allow, 60, 0).unwrap();
                tx.send(i).unwrap();
            }
            drop(tx);
        });
        s.spawn(|| {
            for i in rx {
                let h = t.lookup(&tcp(i).reply(), SYN | ACK, 60, 0);
                assert_eq!(
                    h.map(|h| (h.dir, h.state)),
                    Some((Dir::Reply, State::TcpSynRecv)),
                    "{i}"
                );
            }
        });
        s.spawn(|| {
            // Opened at 0 and swept at 31 s: UDP's 30 s are over, the
            // TCP connections' 60 and 120 s are not.
            for _ in 0..20 {
                for i in 0..1000 {
                    let k = udp(100_000 + i);
                    let _ = t.open(&k, 0, 2, Action::Allow, 60, 0);
                }
                t.sweep(31 * S);
            }
        });
    });
    let c = t.counts();
    assert_eq!(c.by_state[State::TcpSynRecv.index()], u64::from(n));
    assert_eq!(t.len() as u64, c.by_state.iter().sum::<u64>());
}

#[test]
fn memory_per_connection_is_what_the_docs_say() {
    // A 104-byte slot a connection (56 for the key, state, rule and time,
    // 48 for the TCP windows), the filter's entry beside it (4 bytes, and
    // 1 for its bucket's Bloom-part slot); each stripe's
    // slots are allocated at start for its share and a margin.
    const { assert!(cfdp_conntrack::table::SLOT_BYTES == 104) };
    let n = 1u32 << 17;
    let t = table(n as usize);
    let empty = t.memory_bytes();
    for i in 0..n {
        t.open(&udp(i), 0, 1, Action::Allow, 60, 0).unwrap();
    }
    let full = t.memory_bytes();
    // Nothing grew: the Bloom part's slots are in the filter's array of
    // them (4 bytes a bucket), allocated with it.
    let bloom = t.filter_stats().bloom_items;
    assert_eq!(full, empty, "{bloom} in the Bloom part");
    // The empty slots: spare slots of the stripes, free filter entries.
    let st = t.filter_stats();
    let entry = st.memory_bytes as f64 / (st.buckets * 4) as f64;
    let spare = (t.slots() - n as usize) * cfdp_conntrack::table::SLOT_BYTES;
    let free_entries = (st.buckets * 4 - st.entries) as f64 * entry;
    let per = (full as f64 - spare as f64 - free_entries) / f64::from(n);
    eprintln!(
        "{per:.1} bytes per connection beside {} spare slots and {} free filter entries of {entry} bytes, {n} connections",
        t.slots() - n as usize,
        st.buckets * 4 - st.entries
    );
    assert!(per <= 109.0, "{per} bytes per connection");
    assert!(t.slots() < 2 * n as usize, "{} slots", t.slots());
    // A configured connection at the default capacity (65,536): its slot,
    // the stripes' margins (16 stripes of 4,096 and 392 spare), the
    // filter (10 bytes: 2^17 entries, as 65,536 at 95 % load need more than
    // 2^16, and their buckets' Bloom-part slots). At 64 connections a
    // stripe it was 1.4 slots, ~150 bytes.
    let d = table(65_536);
    let configured = d.memory_bytes() as f64 / 65_536.0;
    eprintln!(
        "{configured:.1} bytes a configured connection at 65,536: {} slots, {} stripes",
        d.slots(),
        d.stripes()
    );
    assert!(
        configured <= 124.5,
        "{configured} bytes a configured connection"
    );
}

/// Near full, the filter's insert walk puts some connections in its Bloom
/// part (no slot index there) and, with few fingerprint bits, many keys'
/// first match is another connection's: every connection is still found,
/// both ways, and no stranger is.
#[test]
fn connections_in_the_bloom_part_or_behind_a_colliding_fingerprint_are_found() {
    let opts = Options {
        buckets_log2: Some(10),
        fingerprint_bits: Some(5),
        ..Options::default()
    };
    let n = 4000u32;
    let t = ConnTable::with_options(
        n as usize,
        Timeouts::default(),
        HashSecret::from_seed(3),
        opts,
    )
    .unwrap();
    let empty = t.memory_bytes();
    let mut opened = Vec::new();
    for i in 0..n {
        if t.open(&udp(i), 0, 1, Action::Allow, 60, 0).is_ok() {
            opened.push(i);
        }
    }
    let st = t.filter_stats();
    assert!(
        st.bloom_items > 0,
        "nothing in the Bloom part: the test shows nothing"
    );
    assert!(opened.len() > 3900, "{} opened", opened.len());
    for &i in &opened {
        assert!(t.lookup(&udp(i).reply(), 0, 60, S).is_some(), "{i}");
    }
    for i in n..n + 20_000 {
        assert_eq!(t.lookup(&udp(i), 0, 60, S), None);
    }
    // Same addresses, another port or protocol: strangers too.
    for &i in &opened {
        let k = udp(i);
        assert_eq!(t.lookup(&FlowKey { sport: 5001, ..k }, 0, 60, S), None);
        assert_eq!(t.lookup(&FlowKey { proto: 6, ..k }, 0, 60, S), None);
    }
    // Removing them all (timeouts) empties the filter and its Bloom part,
    // and the Bloom part's (hash, slot) pairs: memory back to the start.
    assert_eq!(t.sweep(500 * S), opened.len());
    assert_eq!(t.filter_stats().items, 0);
    assert!(t.is_empty());
    assert_eq!(t.memory_bytes(), empty);
}

/// With few fingerprint bits, a stranger's fingerprint often matches a
/// connection's: only the exact key admits it.
#[test]
fn colliding_fingerprints_never_admit_a_stranger() {
    let opts = Options {
        fingerprint_bits: Some(5),
        ..Options::default()
    };
    // Many connections between one pair of addresses: a stranger's
    // fingerprint often matches one of them (5 bits), whose addresses are
    // its own; only the ports or the protocol tell them apart.
    let t =
        ConnTable::with_options(4096, Timeouts::default(), HashSecret::from_seed(4), opts).unwrap();
    let pair =
        |sport: u16, proto: u8| FlowKey::new(v4(0x0a00_0001), v4(0xc000_0235), proto, sport, 53);
    for p in 1000..3000 {
        t.open(&pair(p, 17), 0, 1, Action::Allow, 60, 0).unwrap();
    }
    for p in 3000..23_000 {
        assert_eq!(t.lookup(&pair(p, 17), 0, 60, S), None, "port {p}");
    }
    for p in 1000..3000 {
        assert_eq!(t.lookup(&pair(p, 6), 0, 60, S), None, "TCP port {p}");
        assert!(t.lookup(&pair(p, 17), 0, 60, S).is_some(), "UDP port {p}");
    }
    assert!(t.counts().false_positives > 1000);
    // Same addresses and ports: the protocol, or the family (an IPv6
    // address with the same sixteen bytes as an IPv4 one's slot), tells
    // them apart. A filter of 32 buckets: strangers meet members' fingerprints.
    let small = Options {
        buckets_log2: Some(5),
        ..opts
    };
    let t =
        ConnTable::with_options(128, Timeouts::default(), HashSecret::from_seed(5), small).unwrap();
    for p in 1000..1100 {
        t.open(&pair(p, 17), 0, 1, Action::Allow, 60, 0).unwrap();
    }
    for p in 1000..1100 {
        for proto in (0..=255).filter(|&q| q != 17) {
            assert_eq!(
                t.lookup(&pair(p, proto), 0, 60, S),
                None,
                "port {p} protocol {proto}"
            );
        }
        let mut k = pair(p, 17);
        k.v6 = true;
        assert_eq!(t.lookup(&k, 0, 60, S), None, "IPv6 twin of port {p}");
    }
    assert!(t.counts().false_positives > 20, "{:?}", t.counts());
}

/// An ICMP error quoting a packet of a tracked connection (either way) is
/// related to it; one quoting another 5-tuple is not; neither moves it.
#[test]
fn icmp_errors_find_the_connection_they_quote() {
    let t = counting(1024);
    let k = udp(1);
    t.open(&k, 0, 3, Action::Count, 60, 0).unwrap();
    let r = t.related(&k, S).unwrap();
    assert_eq!((r.slot, r.state), (3, State::UdpUnreplied));
    assert!(t.related(&k.reply(), S).is_some());
    assert_eq!(t.related(&udp(2), S), None);
    assert_eq!(t.related(&k, 31 * S), None, "expired");
    assert_eq!(packets(&t.list(1, |_| true)[0]), [1, 0]);
}

/// A table saved at a graceful stop comes back whole at the next start:
/// states, FIN bits, directions, counters; a damaged file is refused whole.
#[test]
fn a_saved_table_comes_back_and_a_damaged_one_is_refused() {
    use cfdp_conntrack::persist;
    let t = counting(1024);
    let k = tcp(1);
    t.open(
        &k,
        SYN,
        4,
        Action::Track(cfdp_rules::Allowing::Allow),
        60,
        0,
    )
    .unwrap();
    t.lookup(&k.reply(), SYN | ACK, 60, S);
    t.lookup(&k, ACK, 60, S);
    t.lookup(&k, FIN | ACK, 60, 2 * S);
    t.open(
        &udp(2),
        0,
        5,
        Action::Track(cfdp_rules::Allowing::Redirect(3)),
        70,
        0,
    )
    .unwrap();
    let bytes = persist::encode(&t.export());
    assert_eq!(bytes.len(), 16 + 2 * persist::RECORD);
    let again = counting(1024);
    let saved = persist::decode(&bytes).unwrap();
    assert_eq!(again.import(&saved, |s| Some(s.slot + 10)), 2);
    // The reply's FIN now closes it as it would have before the restart.
    let h = again.lookup(&k.reply(), FIN | ACK, 60, 3 * S).unwrap();
    assert_eq!(
        (h.dir, h.state, h.slot),
        (Dir::Reply, State::TcpLastAck, 14)
    );
    let mut l = again.list(10, |_| true);
    l.sort_by_key(|c| c.slot);
    assert_eq!(
        (l[1].orig, packets(&l[1]), l[1].state),
        (udp(2), [1, 0], State::UdpUnreplied)
    );
    assert_eq!(again.import(&saved, |_| None), 0, "already there");
    let mut bad = bytes.clone();
    bad[40] ^= 1;
    assert_eq!(persist::decode(&bad), Err(persist::PersistError::Checksum));
    assert_eq!(
        persist::decode(&bytes[..bytes.len() - 1]),
        Err(persist::PersistError::Length {
            records: 2,
            bytes: 2 * persist::RECORD - 1
        })
    );
    assert_eq!(
        persist::decode(b"not a table"),
        Err(persist::PersistError::NotATable)
    );
}

/// A sweep never runs ahead of the slowest worker's packet time: a worker
/// ahead in a replay does not expire what a worker behind still sees live.
#[test]
fn sweeps_wait_for_the_slowest_worker() {
    let t = table(1024);
    t.open(&udp(1), 0, 1, Action::Allow, 60, 0).unwrap();
    t.advance(0, 10 * S);
    t.advance(1, 100 * S);
    assert_eq!(
        t.sweep(100 * S),
        0,
        "worker 0 is at 10 s: still live for it"
    );
    t.advance(0, 40 * S);
    assert_eq!(t.sweep(100 * S), 1);
}

/// Connection `k` opened (SYN, sequence 100) and answered (SYN-ACK,
/// sequence 900) at time 0: the client's ACK of 901 makes it established.
fn syn_answered(t: &ConnTable, k: &FlowKey) {
    t.open(k, seg(SYN, 100, 0), 1, Action::Allow, 60, 0)
        .unwrap();
    t.lookup(&k.reply(), seg(SYN | ACK, 900, 101), 60, 0)
        .unwrap();
}

/// A RST far out of an established connection's window is invalid: no
/// entry answers it (it meets the rules), the connection stays, and the
/// table counts it; the exact RST closes the connection.
#[test]
fn a_blind_reset_is_invalid_counted_and_changes_nothing() {
    let t = table(1024);
    let k = tcp(1);
    syn_answered(&t, &k);
    t.lookup(&k, seg(ACK, 101, 901), 60, 0).unwrap();
    assert_eq!(
        t.lookup(&k.reply(), seg(RST, 900 + (1 << 30), 0), 60, S),
        None
    );
    assert_eq!(t.counts().invalid, 1);
    assert_eq!(
        t.peek(&k).map(|h| h.state),
        Some(State::TcpEstablished),
        "the blind RST moved the connection"
    );
    let h = t.lookup(&k.reply(), seg(RST, 901, 0), 60, S).unwrap();
    assert_eq!(h.state, State::TcpClose);
    assert_eq!(t.counts().invalid, 1);
}

/// A RST in the window but not exact keeps ESTABLISHED (a challenge ACK
/// may follow) and, as Linux does for any accepted RST, leaves the entry
/// CLOSE's timeout (10 s): swept one nanosecond after it, not at it. A
/// later segment of the connection gives it its state's timeout again.
#[test]
fn an_inexact_reset_leaves_the_connection_ten_seconds() {
    let t = table(1024);
    let close = 10 * S;
    for (i, later) in [(1, false), (2, true)] {
        let k = tcp(i);
        syn_answered(&t, &k);
        t.lookup(&k, seg(ACK, 101, 901), 60, 0).unwrap();
        t.lookup(&k, seg(ACK, 101, 901), 60, 0).unwrap();
        let h = t.lookup(&k.reply(), seg(RST, 1000, 0), 60, S).unwrap();
        assert_eq!(h.state, State::TcpEstablished, "inexact: the state stays");
        if later {
            t.lookup(&k.reply(), seg(ACK, 901, 101), 60, 2 * S).unwrap();
        }
    }
    assert_eq!(t.sweep(S + close), 0, "at CLOSE's timeout: still there");
    assert_eq!(t.sweep(S + close + 1), 1, "one tick after: gone");
    assert!(
        t.peek(&tcp(2)).is_some(),
        "a later segment: ESTABLISHED's timeout"
    );
}

/// After `tcp_max_retrans` (3) retransmissions the retransmission cap
/// (300 s) comes first, as in Linux: a RST then leaves the connection
/// 300 s, not CLOSE's 10.
#[test]
fn after_retransmissions_a_reset_leaves_the_retransmission_timeout() {
    let t = table(1024);
    let k = tcp(3);
    syn_answered(&t, &k);
    for _ in 0..5 {
        t.lookup(&k, seg(ACK, 101, 901), 60, 0).unwrap();
    }
    let h = t.lookup(&k.reply(), seg(RST, 1000, 0), 60, S).unwrap();
    assert_eq!(h.state, State::TcpEstablished);
    assert_eq!(t.sweep(S + 10 * S + 1), 0, "not CLOSE's 10 s");
    assert_eq!(t.sweep(S + 300 * S), 0);
    assert_eq!(
        t.sweep(S + 300 * S + 1),
        1,
        "the retransmission cap's 300 s"
    );
}

/// A RST answering a SYN (no answer seen before it) passes and ends the
/// connection at once, as Linux kills it; it is not counted as expired.
#[test]
fn a_reset_before_any_answer_removes_the_connection() {
    let t = table(1024);
    let k = tcp(7);
    t.open(&k, SYN, 1, Action::Allow, 60, 0).unwrap();
    assert!(
        t.lookup(&k.reply(), RST | ACK, 60, 0).is_some(),
        "the RST passes"
    );
    assert!(t.is_empty() && t.peek(&k).is_none());
    assert_eq!(t.counts().expired, 0);
}

/// A datagram split into fragments through an established connection:
/// the first fragment's segment (read with the largest end its datagram
/// can have) is checked, a later fragment passes with its connection and
/// moves nothing, and the peer's acknowledgement of the whole datagram is
/// in the window. A packet with no TCP header that is not a later
/// fragment is invalid.
#[test]
fn fragments_of_a_segment_pass_with_their_connection() {
    use cfdp_conntrack::table::L4;
    use cfdp_packet::TcpSeg;
    let t = table(1024);
    let k = tcp(1);
    let seg = |flags: u8, seq: u32, ack: u32, payload: u32| TcpSeg {
        flags,
        seq,
        ack,
        win: 64_000,
        sack: ack,
        payload,
        ..TcpSeg::default()
    };
    t.open(&k, seg(SYN, 100, 0, 0), 1, Action::Allow, 60, 0)
        .unwrap();
    t.lookup(&k.reply(), seg(SYN | ACK, 900, 101, 0), 60, 0)
        .unwrap();
    t.lookup(&k, seg(ACK, 101, 901, 0), 60, 0).unwrap();
    // The server's 3,000-byte segment in three fragments.
    let first = seg(ACK, 901, 101, 65_535 - 40);
    let h = t
        .lookup(&k.reply(), first, 1500, S)
        .expect("first fragment");
    assert_eq!((h.dir, h.state), (Dir::Reply, State::TcpEstablished));
    for _ in 0..2 {
        let h = t
            .lookup(&k.reply(), L4::Fragment, 1500, S)
            .expect("a later fragment passes with its connection");
        assert_eq!(h.state, State::TcpEstablished);
    }
    assert_eq!(t.counts().invalid, 0);
    // The client acknowledges the whole datagram.
    t.lookup(&k, seg(ACK, 101, 3901, 0), 60, S)
        .expect("the acknowledgement of the whole datagram");
    // No header and not a fragment: invalid, as before.
    assert_eq!(t.lookup(&k.reply(), L4::None, 60, S), None);
    assert_eq!(t.counts().invalid, 1);
}

/// Two threads fill a table of 16 stripes (and 16 filter partitions,
/// whose writers share no lock) with established connections (never
/// dropped for a new one) past its capacity, each its own keys: the table
/// never holds more than its capacity, its length is the connections
/// established, and it is full to within the embryonic entries a refused
/// open's stripe could not see (16 stripes × 31, a loose bound). (Near
/// full, one thread's open may early-drop the other's connection between
/// its SYN and its handshake's end, as Linux's early drop would: that one
/// is not counted.)
#[test]
fn two_threads_opening_in_parallel_never_overfill_the_table() {
    let cap = 65_536usize;
    let t = table(cap);
    assert_eq!(t.stripes(), 16);
    let (opened, established) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|w| {
                let t = &t;
                s.spawn(move || {
                    let (mut opened, mut established) = (0, 0);
                    for i in (w..).step_by(2).take(cap / 2 + 2_000) {
                        let k = tcp(i);
                        if t.open(&k, SYN, 1, Action::Allow, 60, 0).is_ok() {
                            opened += 1;
                            if t.lookup(&k.reply(), SYN | ACK, 60, 0).is_some()
                                && t.lookup(&k, ACK, 60, 0).is_some()
                            {
                                established += 1;
                            }
                        }
                    }
                    (opened, established)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |(o, e), (a, b)| (o + a, e + b))
    });
    assert_eq!(t.len(), established);
    assert!(
        established <= cap,
        "{established} connections in a table of {cap}"
    );
    assert!(
        established >= cap - 16 * 31,
        "full at {established} of {cap}"
    );
    assert_eq!(t.counts().refused as usize, cap + 4_000 - opened);
}

/// Timeouts of a different number of seconds each, so that one state's
/// taken for another's shows; none capped (the unacknowledged cap above
/// them all).
fn distinct_timeouts() -> Timeouts {
    Timeouts {
        tcp_syn_sent_s: 101,
        tcp_syn_recv_s: 102,
        tcp_established_s: 103,
        tcp_fin_wait_s: 104,
        tcp_close_wait_s: 105,
        tcp_last_ack_s: 106,
        tcp_time_wait_s: 107,
        tcp_close_s: 108,
        udp_unreplied_s: 109,
        udp_replied_s: 110,
        icmp_s: 111,
        gre_unreplied_s: 113,
        gre_replied_s: 114,
        generic_s: 112,
        tcp_unacknowledged_s: 1000,
    }
}

fn distinct_table() -> ConnTable {
    ConnTable::new(64, distinct_timeouts(), HashSecret::from_seed(9)).unwrap()
}

/// The one connection of `t`, in `state` since `at`, is still there when
/// swept at `at` + `secs` seconds and gone one nanosecond later.
fn lives_exactly(t: &ConnTable, state: State, at: u64, secs: u64) {
    assert_eq!(t.counts().by_state[state.index()], 1, "{state:?}");
    assert_eq!(t.sweep(at + secs * S), 0, "{state:?} at its timeout");
    assert_eq!(t.sweep(at + secs * S + 1), 1, "{state:?} one tick after");
}

/// A segment of the client's (`Orig`) or the server's.
type Step = (Dir, cfdp_packet::TcpSeg);

fn seg(flags: u8, seq: u32, ack: u32) -> cfdp_packet::TcpSeg {
    cfdp_packet::TcpSeg {
        flags,
        seq,
        ack,
        win: 64_000,
        sack: ack,
        ..cfdp_packet::TcpSeg::default()
    }
}

/// The segments that bring a connection to each TCP state, and the state's
/// timeout (SYN_SENT2's is SYN_SENT's).
fn tcp_paths() -> Vec<(State, u64, Vec<Step>)> {
    let (c, r) = (Dir::Orig, Dir::Reply);
    let path = [
        (c, seg(SYN, 100, 0)),
        (r, seg(SYN | ACK, 900, 101)),
        (c, seg(ACK, 101, 901)),
        (c, seg(FIN | ACK, 101, 901)),
        (r, seg(ACK, 901, 102)),
        (r, seg(FIN | ACK, 901, 102)),
        (c, seg(ACK, 102, 902)),
    ];
    let to = |n: usize| path[..n].to_vec();
    let mut exact_rst = to(3);
    exact_rst.push((r, seg(RST, 901, 0)));
    vec![
        (State::TcpSynSent, 101, to(1)),
        (State::TcpSynRecv, 102, to(2)),
        (State::TcpEstablished, 103, to(3)),
        (State::TcpFinWait, 104, to(4)),
        (State::TcpCloseWait, 105, to(5)),
        (State::TcpLastAck, 106, to(6)),
        (State::TcpTimeWait, 107, to(7)),
        (State::TcpClose, 108, exact_rst),
        (
            State::TcpSynSent2,
            101,
            vec![(c, seg(SYN, 100, 0)), (r, seg(SYN, 900, 0))],
        ),
    ]
}

/// Every TCP state's timeout, one tick either side (seen failing with
/// LAST_ACK given CLOSE_WAIT's).
#[test]
fn every_tcp_state_lives_its_timeout_to_the_tick() {
    let k = tcp(1);
    for (state, secs, steps) in tcp_paths() {
        let t = distinct_table();
        let mut steps = steps.into_iter();
        let (_, first) = steps.next().unwrap();
        t.open(&k, first, 1, Action::Allow, 60, 0).unwrap();
        for (dir, s) in steps {
            let key = if dir == Dir::Orig { k } else { k.reply() };
            t.lookup(&key, s, 60, 0).expect("in window");
        }
        lives_exactly(&t, state, 0, secs);
    }
}

/// UDP (unreplied, replied within 2 s, a stream after), GRE (unreplied,
/// replied by its first answer, a stream from the packet after), ICMP
/// echo (its identifier and class as ports) and another protocol: each
/// timeout one tick either side.
#[test]
fn every_other_state_lives_its_timeout_to_the_tick() {
    use cfdp_conntrack::table::L4;
    let gre = FlowKey::new(v4(0x0a00_0001), v4(0xc000_0201), 47, 0, 0);
    // (key, state, its timeout, packets after the opener: the answer at
    // 1 s, then one more at 3 s).
    for (k, state, secs, steps) in [
        (udp(1), State::UdpUnreplied, 109, 0),
        (udp(1), State::UdpReplied, 109, 1),
        (udp(1), State::UdpStream, 110, 2),
        (gre, State::GreUnreplied, 113, 0),
        (gre, State::GreReplied, 113, 1),
        (gre, State::GreStream, 114, 2),
    ] {
        let t = distinct_table();
        t.open(&k, 0, 1, Action::Allow, 60, 0).unwrap();
        if steps >= 1 {
            t.lookup(&k.reply(), 0, 60, S).unwrap();
        }
        if steps == 2 {
            t.lookup(&k, 0, 60, 3 * S).unwrap();
        }
        lives_exactly(&t, state, [0, S, 3 * S][steps], secs);
    }
    let ping = FlowKey::new(v4(0x0a00_0001), v4(0xc000_0201), 1, 7, 0);
    for (state, replied) in [(State::IcmpUnreplied, false), (State::IcmpReplied, true)] {
        let t = distinct_table();
        t.open(&ping, L4::Echo { request: true }, 1, Action::Allow, 60, 0)
            .unwrap();
        if replied {
            t.lookup(&ping.reply(), L4::Echo { request: false }, 60, 0)
                .unwrap();
        }
        lives_exactly(&t, state, 0, 111);
    }
    let t = distinct_table();
    let other = FlowKey::new(v4(0x0a00_0001), v4(0xc000_0201), 253, 0, 0);
    t.open(&other, 0, 1, Action::Allow, 60, 0).unwrap();
    lives_exactly(&t, State::Generic, 0, 112);
}
