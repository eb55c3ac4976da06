//! A capture for stateful rules: an inside network (10.1.0.0/16) whose
//! TCP, UDP and ICMP echo conversations are allowed out by rules with
//! `"track": true`, and an outside that may only answer them. Every frame
//! carries the verdict a stateful firewall gives it (`ct state
//! established,related accept`, then the rules, then drop) — Linux's
//! conntrack's, as the Linux lab (`dataplane/cli/tests/linux_lab.rs`)
//! checks it on crafted frames — so a replay checks connection tracking
//! frame by frame. TCP segments carry coherent sequence and
//! acknowledgement numbers: the window is checked.

use etherparse::{icmpv4, Icmpv4Type, PacketBuilder, TcpHeader};

use crate::captures::{Expect, GenFrame};
use crate::frames::{fragments4, udp4, MAC_A, MAC_B};

/// The rules: the inside may open TCP, UDP and ICMP echo to anywhere
/// (stateful); everything else is dropped.
pub const STATEFUL_RULES: &str = r#"{"rules": [
  {"id": 1, "priority": 10, "match": {"src_prefix": "10.1.0.0/16", "proto": "tcp"}, "action": "allow", "track": true},
  {"id": 2, "priority": 10, "match": {"src_prefix": "10.1.0.0/16", "proto": "udp"}, "action": "count", "track": true},
  {"id": 3, "priority": 10, "match": {"src_prefix": "10.1.0.0/16", "proto": "icmp"}, "action": "allow", "track": true},
  {"id": 9, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}
]}"#;

const IN: [u8; 4] = [10, 1, 0, 5];
const WEB: [u8; 4] = [192, 0, 2, 80];
const DNS: [u8; 4] = [192, 0, 2, 53];
const OTHER: [u8; 4] = [198, 51, 100, 7];

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// Frames are told apart by a serial number (TCP window, UDP payload,
/// ICMP sequence number): two frames of the same conversation with
/// different verdicts are never the same bytes.
fn serial() -> u16 {
    SERIAL.with(|n| {
        let v = n.get();
        n.set(v.wrapping_add(1));
        v
    })
}

thread_local! {
    /// Reset by [`stateful_conversations`]: the same frames every call.
    static SERIAL: std::cell::Cell<u16> = const { std::cell::Cell::new(1) };
}

fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    udp4(src, dst, sp, dp, &serial().to_be_bytes())
}

#[allow(clippy::too_many_arguments)] // a segment's fields
fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, flags: u8, seq: u32, ack: u32) -> Vec<u8> {
    let mut h = TcpHeader::new(sp, dp, seq, 30_000 + serial());
    h.acknowledgment_number = if flags & ACK != 0 { ack } else { 0 };
    h.fin = flags & FIN != 0;
    h.syn = flags & SYN != 0;
    h.rst = flags & RST != 0;
    h.ack = flags & ACK != 0;
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(src, dst, 64)
        .tcp_header(h);
    let mut out = Vec::new();
    b.write(&mut out, &[]).expect("write to Vec");
    out
}

fn echo(src: [u8; 4], dst: [u8; 4], id: u16, request: bool) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B).ipv4(src, dst, 64);
    let b = if request {
        b.icmpv4_echo_request(id, serial())
    } else {
        b.icmpv4_echo_reply(id, serial())
    };
    let mut out = Vec::new();
    b.write(&mut out, b"ping").expect("write to Vec");
    out
}

/// A port unreachable from `from` quoting the UDP datagram `quoted`
/// (a frame: its IP header and 8 bytes of UDP).
fn unreachable(from: [u8; 4], to: [u8; 4], quoted: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(from, to, 64)
        .icmpv4(Icmpv4Type::DestinationUnreachable(
            icmpv4::DestUnreachableHeader::Port,
        ));
    let mut out = Vec::new();
    b.write(&mut out, &quoted[14..14 + 28])
        .expect("write to Vec");
    out
}

/// The frames, one second apart unless a step waits out a timeout.
#[allow(clippy::too_many_lines)] // a table of frames, read top to bottom
pub fn stateful_conversations() -> Vec<GenFrame> {
    use Expect::{Drop, Forward};
    SERIAL.with(|n| n.set(1));
    let s = 1_000_000_000u64;
    let dns_query = udp(IN, DNS, 5000, 53);
    let untracked = udp(IN, [192, 0, 2, 99], 6000, 53);
    let steps: Vec<(u64, Vec<u8>, Expect, &'static str)> = vec![
        (
            0,
            tcp(IN, WEB, 40000, 80, SYN, 1000, 0),
            Forward,
            "inside opens TCP (rule 1)",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, SYN | ACK, 5000, 1001),
            Forward,
            "its SYN-ACK",
        ),
        (
            0,
            tcp(IN, WEB, 40000, 80, ACK, 1001, 5001),
            Forward,
            "the handshake's ACK: established",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, ACK, 5001, 1001),
            Forward,
            "data back",
        ),
        (
            0,
            tcp(OTHER, IN, 5555, 22, SYN, 77, 0),
            Drop,
            "unsolicited SYN from outside",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40001, SYN | ACK, 88, 99),
            Drop,
            "a SYN-ACK nobody asked for",
        ),
        (
            0,
            tcp(IN, OTHER, 40002, 443, ACK, 3000, 4000),
            Forward,
            "an inside ACK with no SYN: picked up mid-stream (tcp_loose)",
        ),
        (
            0,
            tcp(OTHER, IN, 443, 40002, ACK, 4000, 3000),
            Forward,
            "so its answer passes",
        ),
        (
            0,
            dns_query.clone(),
            Forward,
            "inside asks DNS (rule 2, counted)",
        ),
        (0, udp(DNS, IN, 53, 5000), Forward, "the answer"),
        (0, udp(DNS, IN, 53, 5001), Drop, "an answer to another port"),
        (0, echo(IN, WEB, 77, true), Forward, "inside pings (rule 3)"),
        (0, echo(WEB, IN, 77, false), Forward, "the echo reply"),
        (
            0,
            echo(WEB, IN, 78, false),
            Drop,
            "a reply to an id never sent",
        ),
        (
            0,
            echo(WEB, IN, 77, true),
            Drop,
            "a request from outside on the same id: another connection",
        ),
        (
            0,
            unreachable(DNS, IN, &dns_query),
            Forward,
            "ICMP error about the DNS conversation: related",
        ),
        (
            0,
            untracked.clone(),
            Forward,
            "another query (opens its own)",
        ),
        (
            0,
            unreachable(OTHER, IN, &udp(IN, [192, 0, 2, 98], 6001, 53)),
            Drop,
            "ICMP error about nothing tracked",
        ),
        // Still talking 3 s after it opened: the DNS conversation is a
        // stream (Linux's 120 s; answered within 2 s it had 30 s).
        (
            3,
            udp(IN, DNS, 5000, 53),
            Forward,
            "DNS asked again 3 s later: a stream",
        ),
        // TCP closes: FIN each way, the last ACK; TIME_WAIT is 120 s.
        (
            0,
            tcp(IN, WEB, 40000, 80, FIN | ACK, 1001, 5001),
            Forward,
            "inside closes",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, FIN | ACK, 5001, 1002),
            Forward,
            "outside closes",
        ),
        (
            0,
            tcp(IN, WEB, 40000, 80, ACK, 1002, 5002),
            Forward,
            "the last ACK: TIME_WAIT",
        ),
        // The DNS stream (120 s) outlives a 100 s pause; the unanswered
        // query (30 s) does not.
        (
            100,
            udp(DNS, IN, 53, 5000),
            Forward,
            "DNS answer 100 s later: still a stream",
        ),
        (
            0,
            udp([192, 0, 2, 99], IN, 53, 6000),
            Drop,
            "the unanswered query's entry timed out",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, ACK, 5002, 1002),
            Forward,
            "TIME_WAIT, 101 s after the close",
        ),
        (
            121,
            tcp(WEB, IN, 80, 40000, ACK, 5002, 1002),
            Drop,
            "121 s later, past TIME_WAIT: gone",
        ),
        (
            0,
            tcp(IN, WEB, 40000, 80, SYN, 9000, 0),
            Forward,
            "the port reused: a new SYN opens it again",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, SYN | ACK, 7000, 9001),
            Forward,
            "and is answered",
        ),
        (
            0,
            tcp(WEB, IN, 80, 40000, RST, 7001, 0),
            Forward,
            "a RST (the connection's, so it passes) closes it",
        ),
        (
            11,
            tcp(WEB, IN, 80, 40000, ACK, 7001, 9001),
            Drop,
            "CLOSE lasts 10 s",
        ),
    ];
    // Thirty-one frames nobody answers after the first: the replay's
    // bursts are 32 frames, so the SYN-ACK starts the second burst and
    // finds its connection in the table, not through an open earlier in
    // its own burst.
    let mut steps = steps;
    // An answer in fragments, in order: the connection's verdict for each.
    steps.push((
        1,
        udp(IN, DNS, 5004, 53),
        Forward,
        "a query whose answer comes in fragments, in order",
    ));
    let answer = fragments4(DNS, IN, 53, 5004, 0x3004, &[0x78; 40], 16);
    steps.extend(
        answer
            .into_iter()
            .map(|f| (0, f, Forward, "its answer's fragments, in order")),
    );
    // An answer in fragments, last first: held until its first fragment
    // comes, then the connection's verdict for the whole datagram (not the
    // rules', which drop the outside).
    steps.push((
        1,
        udp(IN, DNS, 5003, 53),
        Forward,
        "a query whose answer comes in fragments, last first",
    ));
    let mut answer = fragments4(DNS, IN, 53, 5003, 0x3003, &[0x77; 40], 16);
    answer.reverse();
    steps.extend(answer.into_iter().map(|f| {
        (
            0,
            f,
            Forward,
            "its answer's fragments, last first: the connection's verdict for all",
        )
    }));
    let fill: Vec<_> = (0..31)
        .map(|_| {
            (
                0,
                udp(OTHER, IN, 7, 9),
                Drop,
                "unsolicited UDP (a burst's filler)",
            )
        })
        .collect();
    steps.splice(1..1, fill);
    let mut t = 0;
    steps
        .into_iter()
        .map(|(wait, data, verdict, note)| {
            t += wait * s + 1000;
            GenFrame {
                data,
                ts_ns: t,
                verdict,
                note,
            }
        })
        .collect()
}

/// A DNS query from the inside, its answer, and the same query (same
/// 5-tuple) 200 s later: conntrack's entry for the first connection
/// (answered: 120 s, Linux's `nf_conntrack_udp_timeout_stream`) has
/// expired, so the third frame opens a second connection. Every frame
/// passes under [`STATEFUL_RULES`].
pub fn reopened_udp() -> Vec<GenFrame> {
    SERIAL.with(|n| n.set(1));
    let s = 1_000_000_000u64;
    [
        (s, udp(IN, DNS, 5300, 53), "a query opens UDP (rule 2)"),
        (s + 1_000_000, udp(DNS, IN, 53, 5300), "its answer"),
        (
            201 * s,
            udp(IN, DNS, 5300, 53),
            "the query again, its entry expired",
        ),
    ]
    .into_iter()
    .map(|(ts_ns, data, note)| GenFrame {
        data,
        ts_ns,
        verdict: Expect::Forward,
        note,
    })
    .collect()
}

/// Counts the replay of [`stateful_conversations`] reports: connections
/// opened (TCP twice on one port, the picked-up one, DNS, the second
/// query, the ping, the two queries answered in fragments), and frames
/// decided by a connection entry (established and related; the fragmented
/// answers' three each).
pub const STATEFUL_OPENED: u64 = 8;
pub const STATEFUL_ESTABLISHED: u64 = 20;
pub const STATEFUL_RELATED: u64 = 1;
