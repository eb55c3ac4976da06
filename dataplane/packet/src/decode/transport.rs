//! What connection tracking reads beyond the 5-tuple: a TCP segment's
//! flags, sequence and acknowledgement numbers, window, payload length and
//! the options Linux's conntrack reads (window scale, SACK permitted, SACK
//! blocks); an ICMP query's identifier and class; and the packet an ICMP error is
//! about. Read on demand (the worker asks only for TCP and ICMP packets,
//! and only when connections are tracked), never on the decoder's fast
//! path.

use cfdp_rules::{proto, FlowKey};
use etherparse::LaxIpSlice;

use super::link::{locate_ip, LinkResult};
use super::outcome::Frag;
use super::wire::{ethernet, icmp as icmp_wire, ipv4, ipv6, ports, tcp};
use super::LinkType;

/// A packet's transport facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A TCP segment whose header is whole (its data offset within the
    /// IP packet and the capture).
    Tcp(TcpSeg),
    /// An ICMP or ICMPv6 query or its answer — echo, and as Linux's
    /// conntrack also tracks them timestamp, information and address mask
    /// (ICMPv6: node information) — with its identifier and `class`: which
    /// query it is and its code, the rest of Linux's ICMP tuple (a request
    /// and its reply share it; an answer with another code is not one).
    Echo { id: u16, class: u16, request: bool },
    /// An ICMP or ICMPv6 error (destination unreachable, time exceeded,
    /// parameter problem; for ICMPv4 also source quench and redirect; for
    /// ICMPv6 packet too big), with the 5-tuple of the packet it quotes,
    /// as that packet was sent (ports 0 when the quote is too short or
    /// its protocol has none; a query's identifier and class as its
    /// ports, as its connection is keyed).
    Error { inner: FlowKey },
    /// A later fragment of a datagram (no transport header in it: its
    /// first fragment had it).
    LaterFragment,
    /// Anything else: UDP, other ICMP messages, other protocols, a header
    /// cut short (for TCP: a data offset under 5 words or past the packet,
    /// what Linux's conntrack calls invalid).
    Other,
}

/// What TCP connection tracking reads of a segment: what Linux's
/// `nf_conntrack_proto_tcp` reads (`tcp_in_window`, `tcp_options`,
/// `tcp_sack`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSeg {
    /// The flags byte (FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10,
    /// URG 0x20, ECE 0x40, CWR 0x80).
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// The window field as sent (unscaled).
    pub win: u16,
    /// Payload bytes: the IP packet's length less the headers (not the
    /// capture's length).
    pub payload: u32,
    /// The window scale option's shift as sent, if the option is there.
    pub wscale: Option<u8>,
    /// The SACK-permitted option is there.
    pub sack_perm: bool,
    /// The highest right edge of the SACK blocks past `ack` (sequence
    /// order), or `ack` when there are none: Linux's `tcp_sack`.
    pub sack: u32,
}

impl TcpSeg {
    /// A segment with these flags and nothing else (sequence numbers 0, a
    /// 65,535-byte window): for tests and tools that only care for flags.
    pub fn flags(flags: u8) -> Self {
        Self {
            flags,
            win: u16::MAX,
            ..Self::default()
        }
    }
}

/// `a` after `b` in sequence space (Linux's `after()`).
fn seq_after(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) < 0
}

/// The segment in `tcp` (the TCP header onwards, as captured), whose IP
/// payload is `ip_payload` bytes long; `None` when its header is not whole.
fn tcp_seg(tcp: &[u8], ip_payload: usize) -> Option<TcpSeg> {
    let h = tcp.get(..tcp::HEADER_LEN)?;
    let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let hlen = usize::from(h[tcp::DATA_OFFSET] >> 4) * 4;
    if hlen < tcp::HEADER_LEN || hlen > ip_payload {
        return None;
    }
    let ack = be32(tcp::ACK);
    let mut seg = TcpSeg {
        flags: h[tcp::FLAGS],
        seq: be32(tcp::SEQ),
        ack,
        win: be16(h, tcp::WINDOW.start)?,
        payload: (ip_payload - hlen) as u32,
        wscale: None,
        sack_perm: false,
        sack: ack,
    };
    options(tcp.get(tcp::HEADER_LEN..hlen)?, &mut seg);
    Some(seg)
}

/// The options Linux's conntrack reads, read as it reads them: a
/// malformed option ends the walk, keeping what came before.
fn options(mut o: &[u8], seg: &mut TcpSeg) {
    const EOL: u8 = 0;
    const NOP: u8 = 1;
    const WINDOW: u8 = 3;
    const SACK_PERM: u8 = 4;
    const SACK: u8 = 5;
    while let Some(&kind) = o.first() {
        match kind {
            EOL => return,
            NOP => o = &o[1..],
            _ => {
                let Some(&size) = o.get(1) else { return };
                let size = usize::from(size);
                if size < 2 || size > o.len() {
                    return;
                }
                let body = &o[2..size];
                match (kind, size) {
                    (SACK_PERM, 2) => seg.sack_perm = true,
                    (WINDOW, 3) => seg.wscale = Some(body[0]),
                    (SACK, _) if size >= 10 && (size - 2) % 8 == 0 => {
                        for b in body.chunks_exact(8) {
                            let edge = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                            if seq_after(edge, seg.sack) {
                                seg.sack = edge;
                            }
                        }
                    }
                    _ => {}
                }
                o = &o[size..];
            }
        }
    }
}

const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// The transport facts of a frame (see [`Transport`]).
#[inline]
pub fn transport(link: LinkType, frame: &[u8]) -> Transport {
    match tcp_fast(link, frame) {
        Some(seg) => Transport::Tcp(seg),
        None => transport_general(link, frame),
    }
}

/// The common TCP frame read directly: Ethernet, IPv4 without options,
/// not a later fragment, the IP total length within the capture and
/// covering the whole TCP header: its segment, what etherparse's slicing
/// below says of it (a unit test checks both agree on generated headers).
/// Measured: the general path was ~150 instructions of an established
/// connection's packet, a sixth of the worker's work on it.
#[inline]
fn tcp_fast(link: LinkType, frame: &[u8]) -> Option<TcpSeg> {
    if link != LinkType::Ethernet || frame.get(ethernet::ETHERTYPE)? != ethernet::ETHERTYPE_IPV4 {
        return None;
    }
    let ip = frame.get(ethernet::HEADER_LEN..)?;
    let h = ip.get(..ipv4::HEADER_LEN)?;
    let total = usize::from(be16(h, ipv4::TOTAL_LEN.start)?);
    let frag = be16(h, ipv4::FLAGS_FRAG.start)?;
    let headers = ipv4::HEADER_LEN + tcp::HEADER_LEN;
    if h[ipv4::VER_IHL] != ipv4::VER_IHL_PLAIN
        || h[ipv4::PROTOCOL] != proto::TCP
        || frag & ipv4::OFFSET != 0
        || !(headers..=ip.len()).contains(&total)
    {
        return None;
    }
    let more = frag & ipv4::MF != 0;
    let ihl = ipv4::HEADER_LEN;
    tcp_seg(
        &ip[ihl..total],
        if more { FRAGMENTED - ihl } else { total - ihl },
    )
}

/// The IP packet length a first fragment's segment is taken to have: the
/// largest an IPv4 datagram (or an IPv6 payload) can be. Its true length
/// is known only once its last fragment came, and the fragments pass one
/// by one; Linux's conntrack sees the reassembled datagram. Taking the
/// largest end keeps the peer's acknowledgement of the whole datagram in
/// the window (up to 64 KB of the sender's window is then taken as sent:
/// said in the conntrack README).
const FRAGMENTED: usize = 65_535;

/// [`transport`] for every frame, through etherparse.
fn transport_general(link: LinkType, frame: &[u8]) -> Transport {
    let LinkResult::Ip(l3) = locate_ip(link, frame) else {
        return Transport::Other;
    };
    let Some(Ok((ip, _))) = frame.get(l3.offset..).map(LaxIpSlice::from_slice) else {
        return Transport::Other;
    };
    let (v6, later_fragment, p, declared) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let ihl = usize::from(h.ihl()) * 4;
            let declared = if h.more_fragments() && h.fragments_offset().value() == 0 {
                FRAGMENTED - ihl
            } else {
                usize::from(h.total_len()).saturating_sub(ihl)
            };
            (
                false,
                h.fragments_offset().value() != 0,
                v4.payload(),
                declared,
            )
        }
        LaxIpSlice::Ipv6(v6) => {
            let first = v6.header().next_header().0;
            let ext = v6.extensions().slice();
            let frag = super::ip::ipv6_fragment(first, ext);
            let payload = if matches!(frag, Frag::First { .. }) {
                FRAGMENTED
            } else {
                usize::from(v6.header().payload_length())
            };
            (
                true,
                matches!(frag, Frag::Later { .. }),
                v6.payload(),
                payload.saturating_sub(ext.len()),
            )
        }
    };
    if later_fragment {
        return Transport::LaterFragment;
    }
    let b = p.payload;
    match (p.ip_number.0, v6) {
        // The IP header's length for the payload's (a capture may cut it
        // short); etherparse's slice when the header says nothing (a
        // jumbogram's 0).
        (proto::TCP, _) => {
            let len = if declared == 0 { b.len() } else { declared };
            tcp_seg(b, len).map_or(Transport::Other, Transport::Tcp)
        }
        (ICMP, false) => icmp(b, false),
        (ICMPV6, true) => icmp(b, true),
        _ => Transport::Other,
    }
}

/// The transport protocol after an IPv6 extension chain (hop-by-hop,
/// routing, fragment, authentication, destination options) and the bytes
/// after it; a later fragment, or a chain cut short, gives no bytes.
fn skip_extensions(mut next: u8, mut b: &[u8]) -> (u8, &[u8]) {
    const HOP_BY_HOP: u8 = 0;
    const ROUTING: u8 = 43;
    const FRAGMENT: u8 = 44;
    const AUTH: u8 = 51;
    const DEST_OPTS: u8 = 60;
    loop {
        let len = match (next, b.get(1)) {
            (HOP_BY_HOP | ROUTING | DEST_OPTS, Some(&l)) => (usize::from(l) + 1) * 8,
            (AUTH, Some(&l)) => (usize::from(l) + 2) * 4,
            (FRAGMENT, Some(_)) => {
                // Not the first fragment: its ports are not in it.
                if be16(b, 2).is_none_or(|f| f >> 3 != 0) {
                    return (b[0], &[]);
                }
                8
            }
            (HOP_BY_HOP | ROUTING | DEST_OPTS | AUTH | FRAGMENT, None) => return (next, &[]),
            _ => return (next, b),
        };
        let Some(after) = b.get(len..) else {
            return (b[0], &[]);
        };
        next = b[0];
        b = after;
    }
}

fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// An ICMP (`v6`: ICMPv6) message.
fn icmp(b: &[u8], v6: bool) -> Transport {
    let Some(&kind) = b.first() else {
        return Transport::Other;
    };
    let error = if v6 {
        matches!(kind, 1..=4)
    } else {
        matches!(kind, 3 | 4 | 5 | 11 | 12)
    };
    let code = b.get(icmp_wire::CODE).copied().unwrap_or(0);
    if let Some((class, request)) = query(kind, code, v6) {
        return be16(b, icmp_wire::QUERY_ID).map_or(Transport::Other, |id| Transport::Echo {
            id,
            class,
            request,
        });
    }
    if !error {
        return Transport::Other;
    }
    match b.get(8..).and_then(|q| quoted(q, v6)) {
        Some(inner) => Transport::Error { inner },
        None => Transport::Other,
    }
}

/// An ICMP (`v6`: ICMPv6) query or answer of type `kind` and code `code`:
/// its class (which query, and the code) and whether it is the request.
/// The pairs are Linux's (`nf_conntrack_proto_icmp.c`'s `invmap`): echo,
/// timestamp, information, address mask; ICMPv6 echo and node
/// information.
fn query(kind: u8, code: u8, v6: bool) -> Option<(u16, bool)> {
    const V4: [(u8, u8); 4] = [(8, 0), (13, 14), (15, 16), (17, 18)];
    const V6: [(u8, u8); 2] = [(128, 129), (139, 140)];
    let pairs: &[(u8, u8)] = if v6 { &V6 } else { &V4 };
    pairs.iter().enumerate().find_map(|(i, &(req, rep))| {
        (kind == req || kind == rep).then(|| ((i as u16) << 8 | u16::from(code), kind == req))
    })
}

/// The 5-tuple of the packet an ICMP error quotes (an IP header and at
/// least the first 8 bytes of its payload). An IPv6 quote's extension
/// headers are walked to its transport header, as Linux's
/// `ipv6_skip_exthdr` does; a later fragment's quote, or a chain cut
/// short, gives ports 0.
fn quoted(q: &[u8], v6: bool) -> Option<FlowKey> {
    let (mut key, rest) = if v6 {
        let h = q.get(..ipv6::HEADER_LEN)?;
        if h[ipv6::VERSION] >> 4 != 6 {
            return None;
        }
        let (src, dst): ([u8; 16], [u8; 16]) = (
            h[ipv6::SRC_ADDR].try_into().ok()?,
            h[ipv6::DST_ADDR].try_into().ok()?,
        );
        let (proto, rest) = skip_extensions(h[ipv6::NEXT_HEADER], &q[ipv6::HEADER_LEN..]);
        (FlowKey::v6(src, dst, proto, 0, 0), rest)
    } else {
        let ver_ihl = *q.get(ipv4::VER_IHL)?;
        let ihl = usize::from(ver_ihl & 0x0f) * 4;
        if ver_ihl >> 4 != 4 || ihl < ipv4::HEADER_LEN {
            return None;
        }
        let h = q.get(..ihl)?;
        let (src, dst): ([u8; 4], [u8; 4]) = (
            h[ipv4::SRC_ADDR].try_into().ok()?,
            h[ipv4::DST_ADDR].try_into().ok()?,
        );
        (FlowKey::v4(src, dst, h[ipv4::PROTOCOL], 0, 0), &q[ihl..])
    };
    let icmp = if v6 { ICMPV6 } else { ICMP };
    match key.proto {
        proto::TCP | proto::UDP => {
            if let (Some(s), Some(d)) = (be16(rest, ports::SRC), be16(rest, ports::DST)) {
                key.sport = s;
                key.dport = d;
            }
        }
        p if p == icmp => {
            // A query the error's addressee sent: keyed as its connection
            // is (identifier, class).
            let code = rest.get(icmp_wire::CODE).copied().unwrap_or(0);
            let asked = rest.get(icmp_wire::TYPE).and_then(|&k| query(k, code, v6));
            if let (Some((class, true)), Some(id)) = (asked, be16(rest, icmp_wire::QUERY_ID)) {
                key.sport = id;
                key.dport = class;
            }
        }
        _ => {}
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    #[test]
    fn tcp_flags_icmp_echo_ids_and_quoted_packets_are_read() {
        let mut tcp = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 1, 1000)
            .syn()
            .ack(5)
            .write(&mut tcp, &[])
            .unwrap();
        assert_eq!(
            transport(LinkType::Ethernet, &tcp),
            Transport::Tcp(TcpSeg {
                flags: 0x12,
                seq: 1,
                ack: 5,
                win: 1000,
                payload: 0,
                wscale: None,
                sack_perm: false,
                sack: 5
            })
        );

        let mut echo = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .icmpv4_echo_request(0x1234, 1)
            .write(&mut echo, &[0; 8])
            .unwrap();
        assert_eq!(
            transport(LinkType::Ethernet, &echo),
            Transport::Echo {
                id: 0x1234,
                class: 0,
                request: true
            }
        );

        // A port unreachable quoting a UDP datagram 10.0.0.1:5000 → 10.0.0.2:53.
        let mut udp = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(5000, 53)
            .write(&mut udp, &[0; 4])
            .unwrap();
        let mut err = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4([10, 0, 0, 2], [10, 0, 0, 1], 64)
            .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::Port,
            ))
            .write(&mut err, &udp[..28])
            .unwrap();
        assert_eq!(
            transport(LinkType::Ethernet, &err),
            Transport::Error {
                inner: FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 5000, 53)
            }
        );

        // UDP, and frames cut short: nothing to read.
        assert_eq!(transport(LinkType::Raw, &udp), Transport::Other);
        assert_eq!(transport(LinkType::Ethernet, &tcp[..40]), Transport::Other);
        assert_eq!(
            transport(LinkType::Ethernet, &err[..14 + 20 + 10]),
            Transport::Other
        );
    }

    /// The options conntrack reads, as Linux's `tcp_options` and
    /// `tcp_sack` read them: window scale, SACK permitted, the highest
    /// SACK edge past the ACK; the payload length from the IP header.
    /// A TCP segment split into IPv4 fragments: the first fragment (more
    /// to come) is read with the largest end its datagram can have, on
    /// both the fast and the general path; a later fragment is one; a
    /// first fragment that cuts the TCP header is incomplete for the
    /// decoder (dropped and counted, never matched or tracked).
    /// Linux's ICMP tuple: the query pair (echo, timestamp, information,
    /// address mask; ICMPv6 echo and node information) and the code; any
    /// other message that is no error is no query.
    #[test]
    fn icmp_queries_are_classed_by_their_pair_and_code() {
        let msg = |v6: bool, kind: u8, code: u8| {
            let mut out = Vec::new();
            let b = PacketBuilder::ethernet2(MAC, MAC);
            let bytes5to8 = [0x12, 0x34, 0, 1];
            if v6 {
                b.ipv6([1; 16], [2; 16], 64)
                    .icmpv6(etherparse::Icmpv6Type::Unknown {
                        type_u8: kind,
                        code_u8: code,
                        bytes5to8,
                    })
                    .write(&mut out, &[0; 12])
            } else {
                b.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                    .icmpv4(etherparse::Icmpv4Type::Unknown {
                        type_u8: kind,
                        code_u8: code,
                        bytes5to8,
                    })
                    .write(&mut out, &[0; 12])
            }
            .unwrap();
            transport(LinkType::Ethernet, &out)
        };
        let q = |class: u16, request: bool| Transport::Echo {
            id: 0x1234,
            class,
            request,
        };
        assert_eq!(msg(false, 13, 0), q(0x100, true));
        assert_eq!(msg(false, 14, 0), q(0x100, false));
        assert_eq!(msg(false, 17, 0), q(0x300, true));
        assert_eq!(msg(false, 0, 1), q(1, false));
        assert_eq!(msg(false, 9, 0), Transport::Other);
        assert_eq!(msg(true, 139, 2), q(0x102, true));
        assert_eq!(msg(true, 140, 2), q(0x102, false));
        assert_eq!(msg(true, 135, 0), Transport::Other);
    }

    #[test]
    fn tcp_fragments_are_read_as_their_datagram() {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 100, 512)
            .write(&mut f, &[7; 40])
            .unwrap();
        // More fragments (0x2000), offset 0; the IP checksum is not read.
        f[14 + 6] = 0x20;
        let Transport::Tcp(seg) = transport(LinkType::Ethernet, &f) else {
            panic!("a first fragment's segment is read");
        };
        assert_eq!((seg.seq, seg.payload), (100, 65_535 - 20 - 20));
        // The general path reads the same.
        assert_eq!(
            transport_general(LinkType::Ethernet, &f),
            Transport::Tcp(seg)
        );
        match super::super::decode(LinkType::Ethernet, &f) {
            crate::Decoded::Ip(ip) => assert!(matches!(ip.frag, Frag::First { .. }), "{ip:?}"),
            d => panic!("{d:?}"),
        }
        // A later fragment (offset 8 bytes): no header of its own.
        let mut later = f.clone();
        later[14 + 6] = 0x00;
        later[14 + 7] = 0x01;
        assert_eq!(
            transport(LinkType::Ethernet, &later),
            Transport::LaterFragment
        );
        // A first fragment of 12 TCP bytes (the flags are in the next).
        let mut tiny = f[..14 + 20 + 12].to_vec();
        tiny[14 + 2..14 + 4].copy_from_slice(&32u16.to_be_bytes());
        match super::super::decode(LinkType::Ethernet, &tiny) {
            crate::Decoded::Ip(ip) => {
                assert!(matches!(ip.frag, Frag::IncompleteFirst { .. }), "{ip:?}");
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn tcp_options_and_payload_length_are_read() {
        use etherparse::TcpOptionElement::*;
        let mut h = etherparse::TcpHeader::new(40000, 80, 100, 512);
        h.ack = true;
        h.acknowledgment_number = 1000;
        h.set_options(&[
            MaximumSegmentSize(1460),
            Noop,
            WindowScale(7),
            SelectiveAcknowledgementPermitted,
            SelectiveAcknowledgement((1500, 1600), [Some((2000, 2100)), Some((1700, 1800)), None]),
        ])
        .unwrap();
        let mut f = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp_header(h.clone())
            .write(&mut f, &[7; 33])
            .unwrap();
        let Transport::Tcp(seg) = transport(LinkType::Ethernet, &f) else {
            panic!("not read");
        };
        assert_eq!(
            (seg.seq, seg.ack, seg.win, seg.payload),
            (100, 1000, 512, 33)
        );
        assert_eq!((seg.wscale, seg.sack_perm, seg.sack), (Some(7), true, 2100));
        // The general path (IPv6) reads the same; a capture cut after the
        // header keeps the IP header's payload length.
        let mut v6 = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv6([1; 16], [2; 16], 64)
            .tcp_header(h)
            .write(&mut v6, &[7; 33])
            .unwrap();
        let cut = &v6[..v6.len() - 33];
        assert_eq!(transport(LinkType::Ethernet, cut), Transport::Tcp(seg));
        // A data offset under five words is no header.
        let mut bad = f.clone();
        bad[14 + 20 + 12] = 0x40;
        assert_eq!(transport(LinkType::Ethernet, &bad), Transport::Other);
    }

    #[test]
    fn the_tcp_fast_path_agrees_with_etherparse() {
        let mut next = super::super::xorshift(0x0123_4567_89ab_cdefu64);
        let mut fast = 0;
        for _ in 0..1_000_000 {
            let r = next();
            let len = 14 + 20 + (r % 40) as usize;
            let mut f: Vec<u8> = (0..len).map(|i| (next() >> (i % 8)) as u8).collect();
            if r & 0x3 != 0 {
                f[12..14].copy_from_slice(&[0x08, 0x00]);
            }
            f[14] = if r & 0x30 == 0 { 0x46 } else { 0x45 };
            let total = match (r >> 10) % 4 {
                0 => len - 14,
                1 => (len - 14).saturating_sub(((r >> 12) % 8) as usize),
                2 => len - 14 + ((r >> 12) % 8) as usize,
                _ => ((r >> 12) % 64) as usize,
            } as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            if !(r >> 20).is_multiple_of(4) {
                f[20] &= 0xe0; // flags kept, offset 0
                f[21] = 0;
            }
            f[23] = [6, 6, 17, 1][((r >> 24) % 4) as usize];
            // Mostly a 20-byte TCP header (else options, or a bad offset).
            if len > 46 && !(r >> 28).is_multiple_of(4) {
                f[46] = f[46] & 0x0f | 0x50;
            }
            if let Some(seg) = tcp_fast(LinkType::Ethernet, &f) {
                fast += 1;
                assert_eq!(
                    transport_general(LinkType::Ethernet, &f),
                    Transport::Tcp(seg),
                    "{f:02x?}"
                );
            }
            assert_eq!(tcp_fast(LinkType::Raw, &f), None);
        }
        // The fast path is taken for tens of thousands (not vacuous).
        assert!(fast > 30_000, "{fast}");
    }

    /// An ICMPv6 error quoting a datagram with extension headers (here
    /// destination options, then a routing header) names the datagram's
    /// UDP ports, as Linux finds them.
    #[test]
    fn a_quote_with_ipv6_extension_headers_is_walked() {
        let (a, b) = ([0x20; 16], [0x21; 16]);
        let mut quote = vec![0x60, 0, 0, 0, 0, 32, 60, 64];
        quote.extend_from_slice(&a);
        quote.extend_from_slice(&b);
        // Destination options (next: routing), 8 bytes; routing (next:
        // UDP), 16 bytes; then the UDP header.
        quote.extend_from_slice(&[43, 0, 1, 4, 0, 0, 0, 0]);
        quote.extend_from_slice(&[17, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        quote.extend_from_slice(&[0x13, 0x88, 0x00, 0x35, 0, 8, 0, 0]);
        assert_eq!(quoted(&quote, true), Some(FlowKey::v6(a, b, 17, 5000, 53)));
        // Cut inside the chain: the protocol where it stopped, no ports.
        assert_eq!(
            quoted(&quote[..44], true),
            Some(FlowKey::v6(a, b, 43, 0, 0))
        );
    }

    #[test]
    fn icmpv6_echo_ids_and_quoted_packets_are_read() {
        // ICMPv6 echo reply; a packet too big quoting a TCP segment.
        let (a, b) = (
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        );
        let mut reply = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv6(b, a, 64)
            .icmpv6_echo_reply(7, 1)
            .write(&mut reply, &[])
            .unwrap();
        assert_eq!(
            transport(LinkType::Ethernet, &reply),
            Transport::Echo {
                id: 7,
                class: 0,
                request: false
            }
        );
        let mut seg = Vec::new();
        PacketBuilder::ipv6(a, b, 64)
            .tcp(443, 50000, 1, 1000)
            .write(&mut seg, &[])
            .unwrap();
        let mut big = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv6(b, a, 64)
            .icmpv6(etherparse::Icmpv6Type::PacketTooBig { mtu: 1280 })
            .write(&mut big, &seg[..48])
            .unwrap();
        assert_eq!(
            transport(LinkType::Ethernet, &big),
            Transport::Error {
                inner: FlowKey::v6(a, b, 6, 443, 50000)
            }
        );
    }
}
