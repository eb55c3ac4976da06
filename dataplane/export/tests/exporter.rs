//! The exporter's messages, received on a real UDP socket and read back
//! by a decoder written from RFC 7011 (not from the encoder): templates
//! first, every record's fields where its template says, sequence numbers
//! counting records, and a collector that is down costing only counted
//! send errors.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use cfdp_export::{Counts, EndReason, Exporter, FlowRecord, Forwarding, Setup};
use cfdp_rules::FlowKey;

/// A decoded data record: (PEN, information element) → bytes (PEN 0: an
/// IANA element; an enterprise element's id with its top bit).
type Fields = HashMap<(u32, u16), Vec<u8>>;

/// A template's fields: (PEN, element, length).
type Template = Vec<(u32, u16, u16)>;

/// Reads one message: its sequence number and data records, learning
/// templates into `templates` (id → [(element, length)]).
fn decode(msg: &[u8], templates: &mut HashMap<u16, Template>) -> (u32, Vec<Fields>) {
    let be16 = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
    assert_eq!(be16(&msg[0..]), 10, "IPFIX version");
    assert_eq!(usize::from(be16(&msg[2..])), msg.len(), "message length");
    let seq = u32::from_be_bytes(msg[8..12].try_into().unwrap());
    let mut records = Vec::new();
    let mut at = 16;
    while at < msg.len() {
        let (id, len) = (be16(&msg[at..]), usize::from(be16(&msg[at + 2..])));
        assert!(len >= 4 && at + len <= msg.len(), "set length");
        let body = &msg[at + 4..at + len];
        if id == 2 {
            let mut t = 0;
            while t + 4 <= body.len() {
                let (tid, n) = (be16(&body[t..]), usize::from(be16(&body[t + 2..])));
                let mut f = Vec::new();
                let mut e = t + 4;
                for _ in 0..n {
                    // An enterprise element (its id's top bit) is followed
                    // by its PEN.
                    let (ie, l) = (be16(&body[e..]), be16(&body[e + 2..]));
                    e += 4;
                    let mut pen = 0;
                    if ie & 0x8000 != 0 {
                        pen = u32::from_be_bytes(body[e..e + 4].try_into().unwrap());
                        e += 4;
                    }
                    f.push((pen, ie, l));
                }
                templates.insert(tid, f);
                t = e;
            }
        } else {
            let t = templates.get(&id).expect("a data set after its template");
            let size: usize = t.iter().map(|&(_, _, l)| usize::from(l)).sum();
            for r in body.chunks_exact(size) {
                let mut f = Fields::new();
                let mut o = 0;
                for &(pen, ie, l) in t {
                    f.insert((pen, ie), r[o..o + usize::from(l)].to_vec());
                    o += usize::from(l);
                }
                records.push(f);
            }
            assert_eq!(body.len() % size, 0, "no padding expected");
        }
        at += len;
    }
    (seq, records)
}

fn record(i: u32, v6: bool) -> FlowRecord {
    let key = if v6 {
        FlowKey::new(
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i as u16).into(),
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 1, 1).into(),
            6,
            40_000 + i as u16,
            443,
        )
    } else {
        FlowKey::new(
            Ipv4Addr::from(0x0a00_0000 + i).into(),
            Ipv4Addr::new(192, 0, 2, 1).into(),
            17,
            5000,
            53,
        )
    };
    FlowRecord {
        key,
        packets: u64::from(i) + 1,
        bytes: 100 * (u64::from(i) + 1),
        // Every fourth a biflow record, its answers counted apart.
        reverse: i.is_multiple_of(4).then_some(Counts {
            packets: u64::from(i) + 7,
            bytes: 60 * u64::from(i) + 5,
        }),
        // Every third names its rule.
        rule: i.is_multiple_of(3).then_some(1000 + i),
        first_ns: 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000,
        last_ns: 1_700_000_001_000_000_000,
        port: 3,
        forwarding: if i.is_multiple_of(2) {
            Forwarding::Forwarded
        } else {
            Forwarding::Dropped
        },
        end: EndReason::Idle,
    }
}

#[test]
fn records_reach_a_udp_collector_whole() {
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    collector
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let setup = Setup {
        rule_pen: 32473,
        ..Setup::domain(42)
    };
    let ex = Exporter::start_counting(
        vec![collector.local_addr().unwrap()],
        setup,
        Default::default(),
    )
    .unwrap();
    let sent: Vec<FlowRecord> = (0..100).map(|i| record(i, i % 3 == 0)).collect();
    ex.sender().send(sent[..60].to_vec());
    ex.sender().send(sent[60..].to_vec());
    let counters = ex.finish();
    assert_eq!(counters.records.load(Relaxed), 100);
    assert_eq!(counters.send_errors.load(Relaxed), 0);
    let mut templates = HashMap::new();
    let mut got = Vec::new();
    let mut expect_seq = 0u32;
    for _ in 0..counters.messages.load(Relaxed) {
        let mut buf = [0u8; 2048];
        let n = collector.recv(&mut buf).expect("a message");
        assert!(n <= 1400, "a message over 1400 bytes");
        assert_eq!(u32::from_be_bytes(buf[12..16].try_into().unwrap()), 42);
        let (seq, recs) = decode(&buf[..n], &mut templates);
        assert_eq!(seq, expect_seq, "sequence number counts the records before");
        expect_seq += recs.len() as u32;
        got.extend(recs);
    }
    assert_eq!(got.len(), 100);
    // Every record's fields, by element.
    let be = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
    let mut seen = 0;
    for r in &sent {
        let n = if r.key.v6 { 16 } else { 4 };
        let (src, dst) = if r.key.v6 { (27, 28) } else { (8, 12) };
        let f = got
            .iter()
            .find(|f| f.get(&(0, src)).map(Vec::as_slice) == Some(&r.key.src[..n]))
            .expect("the record arrived");
        let iana = |ie: u16| be(&f[&(0, ie)]);
        assert_eq!(f[&(0, dst)], r.key.dst[..n]);
        assert_eq!(iana(4), u64::from(r.key.proto));
        assert_eq!(iana(7), u64::from(r.key.sport));
        assert_eq!(iana(11), u64::from(r.key.dport));
        assert_eq!(iana(2), r.packets);
        assert_eq!(iana(1), r.bytes);
        assert_eq!(iana(152), r.first_ns / 1_000_000);
        assert_eq!(iana(153), r.last_ns / 1_000_000);
        assert_eq!(iana(10), 3);
        assert_eq!(iana(89), u64::from(r.forwarding.ipfix()));
        assert_eq!(iana(136), 1);
        // reversePacketDeltaCount, reverseOctetDeltaCount (RFC 5103's
        // PEN), biflowDirection.
        let answers = r.reverse.map(|c| (c.packets, c.bytes, 1));
        let read = f
            .get(&(29305, 0x8002))
            .map(|p| (be(p), be(&f[&(29305, 0x8001)]), iana(239)));
        assert_eq!(read, answers, "{r:?}");
        // The rule, element 1 of the setup's PEN.
        let rule = f.get(&(32473, 0x8001)).map(|b| be(b) as u32);
        assert_eq!(rule, r.rule, "{r:?}");
        seen += 1;
    }
    assert_eq!(seen, 100);
}

/// Nobody listens: every message fails (or vanishes), nothing blocks, and
/// the records are counted as handed over.
#[test]
fn a_collector_that_is_down_costs_only_counted_errors() {
    // A port just closed: nothing listens there.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let ex = Exporter::start(vec![port], 1).unwrap();
    for i in 0..50 {
        ex.sender().send(vec![record(i, false)]);
    }
    let c = ex.finish();
    assert_eq!(c.records.load(Relaxed), 50);
    assert_eq!(c.queue_full.load(Relaxed), 0);
    // Over loopback a send to a closed port succeeds or fails with the
    // ICMP error of the one before: every message is one or the other —
    // the templates and at least one data message (batches queued at once
    // share messages, so how many depends on the timing).
    assert!(c.messages.load(Relaxed) + c.send_errors.load(Relaxed) >= 2);
}
