//! The project's own test captures, generated deterministically.
//!
//! `cargo run -p cfdp-testkit --bin gen-pcaps` writes them to `pcap/`:
//!
//! * `mixed.pcap` (Ethernet): IPv4 and IPv6 TCP/UDP/ICMP flows, 802.1Q and
//!   802.1ad+802.1Q tagged frames, an IPv6 hop-by-hop extension header, a
//!   UDP datagram in three IPv4 fragments and one in two IPv6 fragments, an
//!   ARP frame, and truncated frames (cut Ethernet header, cut IPv4 header,
//!   UDP without room for its ports).
//! * `mixed.rules.json`: rules that drop, count, allow and redirect parts of
//!   that traffic, including a port rule that must also drop the later
//!   fragments of a datagram.
//! * `mixed.expected.json`: the counts a replay must report, and for every
//!   frame its expected verdict under the rules, written by hand below
//!   (not derived from the rule engine under test).
//!
//! Tests regenerate the captures in memory and check the committed files
//! are identical, so `pcap/` cannot drift from this generator.

use etherparse::{IpNumber, Ipv4Header, PacketBuilder};
use serde::Serialize;

use crate::frames::{
    fragments4, fragments6, icmp4, icmp6, tagged, tcp4, tcp6, udp4, udp6, v6, with_hop_by_hop,
    MAC_A, MAC_B,
};

/// Expected verdict of a frame under `mixed.rules.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    Forward,
    Drop,
    Redirect(u16),
}

/// A generated frame with what it should produce.
#[derive(Clone, Debug)]
pub struct GenFrame {
    pub data: Vec<u8>,
    pub ts_ns: u64,
    pub verdict: Expect,
    pub note: &'static str,
}

/// Counts a replay of the capture must report.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ExpectedCounts {
    pub packets: u64,
    pub ipv4: u64,
    pub ipv6: u64,
    pub non_ip: u64,
    pub malformed: u64,
    pub fragments: u64,
    pub fragments_resolved: u64,
    pub fragments_unresolved: u64,
    pub flows: u64,
    pub dropped: u64,
    pub forwarded: u64,
    pub redirected: u64,
    pub counted: u64,
}

/// The rule file that goes with `mixed.pcap`.
pub const MIXED_RULES: &str = r#"{"rules": [
  {"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "tcp", "sport": 40000, "dport": 80}}, "action": "drop"},
  {"id": 2, "match": {"dst_prefix": "192.0.2.0/24", "proto": "udp", "port": 53}, "action": "drop"},
  {"id": 3, "match": {"src_prefix": "2001:db8:1::/48"}, "action": "count"},
  {"id": 4, "match": {"dst_prefix": "198.51.100.0/24"}, "action": {"redirect": 2}},
  {"id": 5, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"},
  {"id": 6, "match": {"dst_prefix": "2001:db8:ffff::/48", "proto": "udp", "port": 5353}, "action": "drop"}
]}
"#;

/// Frames of `mixed.pcap`, in capture order, each with its expected verdict.
pub fn mixed() -> Vec<GenFrame> {
    use Expect::*;
    let mut v: Vec<Planned> = Vec::new();
    let a = [10, 0, 0, 1];
    let b = [10, 0, 0, 2];
    // A TCP conversation; the forward direction is dropped by exact rule 1.
    for i in 0..3 {
        v.push((tcp4(a, b, 40000, 80, &[i; 10]), Drop, "exact drop (rule 1)"));
        v.push((
            tcp4(b, a, 80, 40000, &[i; 20]),
            Forward,
            "reply: no exact rule, dst 10/8 allow (rule 5)",
        ));
    }
    // Same hosts, other port: allowed by prefix rule 5.
    v.push((
        tcp4(a, b, 40001, 80, b"x"),
        Forward,
        "dst 10/8 allow (rule 5)",
    ));
    // DNS to 192.0.2.53: dropped by rule 2 (udp/53); to port 54 forwarded.
    v.push((
        udp4([172, 16, 0, 9], [192, 0, 2, 53], 5000, 53, b"query"),
        Drop,
        "udp/53 prefix drop (rule 2)",
    ));
    v.push((
        udp4([172, 16, 0, 9], [192, 0, 2, 53], 5000, 54, b"other"),
        Forward,
        "no rule (port 54)",
    ));
    // Redirect to port 2: 198.51.100.0/24, also behind an 802.1Q tag.
    v.push((
        icmp4([172, 16, 0, 9], [198, 51, 100, 7], 1),
        Redirect(2),
        "redirect (rule 4)",
    ));
    v.push((
        tagged(
            &udp4([172, 16, 0, 9], [198, 51, 100, 8], 7, 9, b"tagged"),
            &[(0x8100, 100)],
        ),
        Redirect(2),
        "802.1Q tagged, redirect (rule 4)",
    ));
    v.push((
        tagged(
            &tcp4([172, 16, 0, 10], [10, 9, 9, 9], 1, 2, b"qinq"),
            &[(0x88a8, 10), (0x8100, 20)],
        ),
        Forward,
        "802.1ad + 802.1Q tagged, dst 10/8 allow (rule 5)",
    ));
    mixed_fragments4(&mut v);
    mixed_ipv6(&mut v);
    mixed_odd(&mut v, a, b);

    v.into_iter()
        .enumerate()
        .map(|(i, (data, verdict, note))| GenFrame {
            data,
            ts_ns: 1_700_000_000_000_000_000 + i as u64 * 1_000_000,
            verdict,
            note,
        })
        .collect()
}

/// A frame of a generated capture with its verdict and why.
type Planned = (Vec<u8>, Expect, &'static str);

/// `mixed()`'s IPv4 fragments.
fn mixed_fragments4(v: &mut Vec<Planned>) {
    use Expect::*;
    // A fragmented DNS response datagram to 192.0.2.53:53 (3 fragments):
    // every fragment must be dropped by the port rule.
    for f in fragments4(
        [172, 16, 0, 9],
        [192, 0, 2, 53],
        5000,
        53,
        0x1234,
        &[0xab; 40],
        16,
    ) {
        v.push((f, Drop, "IPv4 fragment of udp/53 datagram (rule 2)"));
    }
    // A fragmented datagram to an unruled port: forwarded.
    for f in fragments4(
        [172, 16, 0, 9],
        [192, 0, 2, 99],
        5000,
        99,
        0x1235,
        &[0xcd; 20],
        16,
    ) {
        v.push((f, Forward, "IPv4 fragment, no rule"));
    }
}

/// `mixed()`'s IPv6 frames.
fn mixed_ipv6(v: &mut Vec<Planned>) {
    use Expect::*;
    // IPv6: counted source prefix (rule 3), with and without hop-by-hop.
    let s6 = v6("2001:db8:1::10");
    let d6 = v6("2001:db8:2::20");
    v.push((tcp6(s6, d6, 33000, 443), Forward, "IPv6 count (rule 3)"));
    v.push((
        with_hop_by_hop(&tcp6(s6, d6, 33000, 443)),
        Forward,
        "IPv6 hop-by-hop, count (rule 3)",
    ));
    v.push((udp6(d6, s6, 53, 33001), Forward, "IPv6 no rule"));
    v.push((icmp6(d6, v6("2001:db8:9::1")), Forward, "ICMPv6 no rule"));
    // IPv6 fragments of udp/5353 to 2001:db8:ffff::/48: dropped by rule 6.
    for f in fragments6(d6, v6("2001:db8:ffff::1"), 5353, 5353, 77, &[0xee; 30], 16) {
        v.push((f, Drop, "IPv6 fragment of udp/5353 (rule 6)"));
    }
}

/// `mixed()`'s non-IP and malformed frames.
fn mixed_odd(v: &mut Vec<Planned>, a: [u8; 4], b: [u8; 4]) {
    use Expect::*;
    // Non-IP: ARP.
    let mut arp = MAC_B.to_vec();
    arp.extend_from_slice(&MAC_A);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[0; 20]);
    v.push((arp, Forward, "ARP (non-IP, forwarded)"));
    // Malformed: cut Ethernet header, cut IPv4 header, UDP without ports.
    v.push((
        tcp4(a, b, 1, 2, b"")[..10].to_vec(),
        Forward,
        "Ethernet header cut",
    ));
    v.push((
        tcp4(a, b, 1, 2, b"")[..14 + 12].to_vec(),
        Forward,
        "IPv4 header cut",
    ));
    let mut short = udp4([172, 16, 0, 9], [192, 0, 2, 53], 5000, 53, b"")[..14 + 20 + 2].to_vec();
    // Keep the IPv4 total length honest for the cut frame (lax parsing uses
    // the captured length either way).
    short[16..18].copy_from_slice(&22u16.to_be_bytes());
    v.push((
        short,
        Forward,
        "UDP cut before its ports (ports 0: no port rule applies)",
    ));
}

/// Counts a replay of `mixed()` must report under `MIXED_RULES`.
pub fn mixed_expected() -> ExpectedCounts {
    // Counted by hand from `mixed()`:
    // frames: 7 TCP (conversation + :40001), 2 UDP to 192.0.2.53, ICMP and
    // tagged UDP to 198.51.100/24, the QinQ TCP, 3 + 2 IPv4 fragments
    // (48- and 28-byte UDP datagrams in 16-byte pieces), 2 IPv6 TCP, IPv6
    // UDP, ICMPv6, 3 IPv6 fragments (38 bytes), ARP, 3 cut frames = 28.
    // IPv4: 7 + 2 + 2 + 1 + 5 + the cut-UDP frame (its IPv4 header is
    // whole) = 18; IPv6: 2 + 1 + 1 + 3 = 7; non-IP: ARP; malformed: cut
    // Ethernet, cut IPv4 header, UDP without ports.
    // Flows (keys as each frame shows them): 4 TCP v4, UDP 5000→53 (the
    // plain packet and the first fragment share it), 5000→54, ICMP, tagged
    // UDP, 192.0.2.53 with ports 0 (2 later fragments and the cut UDP),
    // 192.0.2.99 5000→99 and its ports-0 key, then v6 TCP, UDP, ICMPv6,
    // the fragment's 5353→5353 and ports-0 keys: 11 + 5 = 16.
    // Verdicts: dropped 3 exact + 1 udp/53 + 3 v4 fragments + 3 v6
    // fragments = 10; forwarded 28 − 10 = 18, of which 2 redirected;
    // counted: the 2 v6 TCP frames.
    ExpectedCounts {
        packets: 28,
        ipv4: 18,
        ipv6: 7,
        non_ip: 1,
        malformed: 3,
        fragments: 8,
        fragments_resolved: 5,
        fragments_unresolved: 0,
        flows: 16,
        dropped: 10,
        forwarded: 18,
        redirected: 2,
        counted: 2,
    }
}

/// Fragments out of order, under [`MIXED_RULES`]: later fragments that
/// arrive before their first fragment must wait for it and take its
/// verdict (an attacker who sends them first must not slip past a port
/// rule), and one whose first fragment never comes is dropped once it has
/// waited longer than the hold time (`cfdp_engine::HOLD_LIMITS`): the last
/// frame comes 2 s of capture time later and ages it out.
pub fn reordered_fragments() -> Vec<GenFrame> {
    use Expect::*;
    let mut v: Vec<(Vec<u8>, Expect, &'static str)> = Vec::new();
    // udp/53 to 192.0.2.53 (rule 2: drop), fragments 3, 2, 1.
    let mut dns = fragments4(
        [172, 16, 0, 7],
        [192, 0, 2, 53],
        5001,
        53,
        0x2001,
        &[0xab; 40],
        16,
    );
    dns.reverse();
    for f in dns {
        v.push((
            f,
            Drop,
            "udp/53 fragment, reversed (rule 2 via the held path)",
        ));
    }
    // An unruled port in 192.0.2.0/24, fragments 2, 1, 3: forwarded.
    let other = fragments4(
        [172, 16, 0, 7],
        [192, 0, 2, 99],
        5001,
        99,
        0x2002,
        &[0xcd; 40],
        16,
    );
    for i in [1, 0, 2] {
        v.push((other[i].clone(), Forward, "udp/99 fragment, shuffled"));
    }
    // IPv6 udp/5353 to 2001:db8:ffff::/48 (rule 6: drop), fragments 3, 2, 1.
    let mut mdns = fragments6(
        v6("2001:db8:1::5"),
        v6("2001:db8:ffff::1"),
        5353,
        5353,
        0x2003,
        &[0xee; 30],
        16,
    );
    mdns.reverse();
    for f in mdns {
        v.push((f, Drop, "IPv6 udp/5353 fragment, reversed (rule 6)"));
    }
    // A later fragment whose first fragment never comes: held, timed out.
    let orphan = fragments4(
        [172, 16, 0, 7],
        [192, 0, 2, 53],
        5001,
        53,
        0x2004,
        &[0x11; 40],
        16,
    );
    v.push((orphan[1].clone(), Drop, "orphan later fragment (timed out)"));
    let n = v.len() as u64;
    let mut out: Vec<GenFrame> = v
        .into_iter()
        .enumerate()
        .map(|(i, (data, verdict, note))| GenFrame {
            data,
            ts_ns: i as u64 * 1000,
            verdict,
            note,
        })
        .collect();
    out.push(GenFrame {
        data: udp4([172, 16, 0, 7], [10, 0, 0, 9], 5001, 7, b"later"),
        ts_ns: n * 1000 + 2_000_000_000,
        verdict: Forward,
        note: "2 s later: ages the orphan out (rule 5 allow)",
    });
    out
}

/// A flood of first fragments (each datagram's first fragment only, to an
/// unruled port of [`MIXED_RULES`], so every frame is forwarded): one
/// source sends `per_source + 10` datagrams, of which the last 10 find
/// its share of the first-fragment table full; then `capacity` sources
/// send one datagram each, which fills the table and evicts the first
/// source's `per_source` entries (the oldest). With the worker's
/// `cfdp_engine::{FRAG_PER_SOURCE, FRAG_CAPACITY}`: refused 10, evicted
/// `FRAG_PER_SOURCE`.
pub fn first_fragment_flood(per_source: usize, capacity: usize) -> Vec<GenFrame> {
    let first = |src: [u8; 4], id: u16| {
        fragments4(src, [203, 0, 113, 9], 5001, 4000, id, &[0x5a; 24], 16).swap_remove(0)
    };
    let one = (0..per_source + 10).map(|i| first([172, 16, 9, 1], i as u16));
    let many = (0..capacity).map(|i| {
        let [_, a, b, c] = (i as u32 + 1).to_be_bytes();
        first([10, a, b, c], 7)
    });
    one.chain(many)
        .enumerate()
        .map(|(i, data)| GenFrame {
            data,
            ts_ns: i as u64 * 1000,
            verdict: Expect::Forward,
            note: "first fragment of a flood",
        })
        .collect()
}

/// Counts a replay of [`reordered_fragments`] must report beside its
/// verdicts: later fragments before their first, released with it, timed
/// out.
pub const REORDERED_HELD: u64 = 6;
pub const REORDERED_RELEASED: u64 = 5;
pub const REORDERED_TIMED_OUT: u64 = 1;

/// First fragments that do not carry what matching needs, each followed by
/// the later fragment with the rest (to a dropping rule of
/// [`MIXED_RULES`]): an IPv6 first fragment whose extension chain (a
/// destination-options header) is cut short, so the UDP header is in the
/// later fragment; and an IPv4 "tiny fragment" (RFC 1858) with 2 bytes of
/// UDP header. Both first fragments are dropped (RFC 8200 §4.5, RFC 7112)
/// and their later fragments, with no first fragment to take ports from,
/// time out held: every frame but the last is dropped. A frame 2 s later
/// ages the held fragments out.
pub fn incomplete_first_fragments() -> Vec<GenFrame> {
    use Expect::*;
    let (src, dst) = (v6("2001:db8:1::5"), v6("2001:db8:ffff::1"));
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(src, dst, 64)
        .udp(5353, 5353);
    let mut template = Vec::new();
    b.write(&mut template, &[0xee; 16]).expect("write to Vec");
    let udp = template[14 + 40..].to_vec();
    // The fragmentable part: destination options (next header UDP, 24
    // bytes: length field 2), then the UDP datagram.
    let mut rest = vec![17, 2];
    rest.extend_from_slice(&[1, 20]);
    rest.extend_from_slice(&[0; 20]);
    rest.extend_from_slice(&udp);
    let frag6 = |offset: usize, more: bool, piece: &[u8]| {
        let mut f = template[..14 + 40].to_vec();
        f[14 + 6] = 44;
        f[14 + 4..14 + 6].copy_from_slice(&((8 + piece.len()) as u16).to_be_bytes());
        let off = ((offset / 8) as u16) << 3 | u16::from(more);
        f.extend_from_slice(&[60, 0]);
        f.extend_from_slice(&off.to_be_bytes());
        f.extend_from_slice(&0x3001u32.to_be_bytes());
        f.extend_from_slice(piece);
        f
    };
    let whole4 = udp4([172, 16, 0, 7], [192, 0, 2, 53], 5001, 53, &[0x11; 30]);
    let l4 = &whole4[14 + 20..];
    let frag4 = |offset: usize, more: bool, piece: &[u8]| {
        let mut h = Ipv4Header::new(
            piece.len() as u16,
            64,
            IpNumber::UDP,
            [172, 16, 0, 7],
            [192, 0, 2, 53],
        )
        .expect("small payload");
        h.identification = 0x3002;
        h.more_fragments = more;
        h.fragment_offset = etherparse::IpFragOffset::try_new((offset / 8) as u16).expect("offset");
        h.header_checksum = h.calc_header_checksum();
        let mut f = whole4[..14].to_vec();
        f.extend_from_slice(&h.to_bytes());
        f.extend_from_slice(piece);
        f
    };
    let v = [
        (
            frag6(0, true, &rest[..8]),
            "IPv6 first fragment, chain cut in its destination options",
        ),
        (
            frag6(8, false, &rest[8..]),
            "its later fragment: the rest of the chain and udp/5353 (rule 6)",
        ),
        (
            frag4(0, true, &l4[..2]),
            "IPv4 tiny first fragment: 2 bytes of UDP",
        ),
        (
            frag4(8, false, &l4[8..]),
            "its later fragment (udp/53, rule 2)",
        ),
    ];
    let n = v.len() as u64;
    let mut out: Vec<GenFrame> = v
        .into_iter()
        .enumerate()
        .map(|(i, (data, note))| GenFrame {
            data,
            ts_ns: i as u64 * 1000,
            verdict: Drop,
            note,
        })
        .collect();
    out.push(GenFrame {
        data: udp4([172, 16, 0, 7], [10, 0, 0, 9], 5001, 7, b"later"),
        ts_ns: n * 1000 + 2_000_000_000,
        verdict: Forward,
        note: "2 s later: ages the held fragments out (rule 5 allow)",
    });
    out
}

/// `n` UDP probes to 198.18.0.1:53 from distinct 5-tuples (172.16.x.y,
/// source port by index): what an attacker sends when looking for keys
/// whose filter hash collides with a rule's (no rule matches them
/// exactly).
pub fn probes(n: u32) -> Vec<GenFrame> {
    (0..n)
        .map(|i| {
            let b = i.to_be_bytes();
            GenFrame {
                data: udp4(
                    [172, 16, b[2], b[3]],
                    [198, 18, 0, 1],
                    1024 + (i >> 16) as u16,
                    53,
                    b"?",
                ),
                ts_ns: u64::from(i) * 1000,
                verdict: Expect::Forward,
                note: "probe",
            }
        })
        .collect()
}

/// The two flows of [`pairs`]: UDP 10.9.0.1:1000 → 10.9.0.2:2000 and
/// 10.9.0.3:1000 → 10.9.0.4:2000.
pub const PAIR_A: ([u8; 4], [u8; 4]) = ([10, 9, 0, 1], [10, 9, 0, 2]);
pub const PAIR_B: ([u8; 4], [u8; 4]) = ([10, 9, 0, 3], [10, 9, 0, 4]);

/// `n` pairs of frames, A then B, each carrying its pair number (u32, big
/// endian) as payload: a capture in which a rule change that is not atomic
/// shows up as a pair split across outputs (frames 2k and 2k+1 are always
/// in one burst when `n` is a multiple of 16).
pub fn pairs(n: u32) -> Vec<GenFrame> {
    (0..n)
        .flat_map(|i| {
            [PAIR_A, PAIR_B].map(|(s, d)| GenFrame {
                data: udp4(s, d, 1000, 2000, &i.to_be_bytes()),
                ts_ns: u64::from(i) * 1000,
                verdict: Expect::Forward,
                note: "pair",
            })
        })
        .collect()
}

/// The pair number of a frame of [`pairs`] and whether it is flow A.
pub fn pair_of(frame: &[u8]) -> Option<(u32, bool)> {
    let (a_src, b_src) = (PAIR_A.0, PAIR_B.0);
    let src: [u8; 4] = frame.get(26..30)?.try_into().ok()?;
    let seq = u32::from_be_bytes(frame.get(42..46)?.try_into().ok()?);
    match src {
        s if s == a_src => Some((seq, true)),
        s if s == b_src => Some((seq, false)),
        _ => None,
    }
}

/// Flow `f` of [`soak`]: UDP 10.8.0.f:1000 → 10.8.1.1:2000.
pub fn soak_flow(f: u8) -> ([u8; 4], [u8; 4]) {
    ([10, 8, 0, f], [10, 8, 1, 1])
}

/// The soak capture: `passes_per_flow × flows` frames, frame k of flow
/// `(k × 7) mod flows` (flows must be coprime with 7, e.g. 64), so every
/// flow recurs evenly through the capture. The payload is the flow number.
pub fn soak(flows: u8, per_flow: u32) -> Vec<GenFrame> {
    let n = u32::from(flows) * per_flow;
    (0..n)
        .map(|k| {
            let f = soak_frame_flow(k, flows);
            let (s, d) = soak_flow(f);
            GenFrame {
                data: udp4(s, d, 1000, 2000, &[f]),
                ts_ns: u64::from(k) * 1000,
                verdict: Expect::Forward,
                note: "soak",
            }
        })
        .collect()
}

/// The flow of frame `k` of [`soak`].
pub fn soak_frame_flow(k: u32, flows: u8) -> u8 {
    ((u64::from(k) * 7) % u64::from(flows)) as u8
}

/// Writes frames as a classic pcap (Ethernet, nanosecond timestamps).
pub fn write_pcap(path: &std::path::Path, frames: &[GenFrame]) -> std::io::Result<()> {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let f = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = PcapWriter::with_header(f, header).map_err(std::io::Error::other)?;
    for fr in frames {
        let ts = std::time::Duration::from_nanos(fr.ts_ns);
        w.write_packet(&PcapPacket::new(ts, fr.data.len() as u32, &fr.data))
            .map_err(std::io::Error::other)?;
    }
    use std::io::Write;
    w.into_writer().flush()
}

/// The expected-results file: counts and per-frame verdicts.
pub fn expected_json(frames: &[GenFrame], counts: &ExpectedCounts) -> String {
    let per_frame: Vec<_> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| serde_json::json!({"frame": i + 1, "verdict": f.verdict, "note": f.note}))
        .collect();
    let v = serde_json::json!({ "counts": counts, "frames": per_frame });
    serde_json::to_string_pretty(&v).expect("json") + "\n"
}
