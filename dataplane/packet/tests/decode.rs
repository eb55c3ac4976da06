//! The decoder on every link type and encapsulation it claims, and on
//! hostile input (never a panic).

use cfdp_packet::decode::{decode, Decoded, Frag, LinkType, Malformed, NonIp};
use cfdp_rules::FlowKey;
use etherparse::PacketBuilder;

/// An IPv4/UDP packet (no link header) 10.1.1.1:1111 → 10.2.2.2:2222.
fn ip_udp() -> Vec<u8> {
    let b = PacketBuilder::ipv4([10, 1, 1, 1], [10, 2, 2, 2], 64).udp(1111, 2222);
    let mut v = Vec::new();
    b.write(&mut v, b"hello").unwrap();
    v
}

fn want() -> FlowKey {
    FlowKey::v4([10, 1, 1, 1], [10, 2, 2, 2], 17, 1111, 2222)
}

fn key_of(link: LinkType, frame: &[u8]) -> FlowKey {
    match decode(link, frame) {
        Decoded::Ip(ip) => {
            assert_eq!(ip.anomaly, None);
            ip.key
        }
        other => panic!("{link:?}: {other:?}"),
    }
}

fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn every_link_type_reaches_the_same_5_tuple() {
    let ip = ip_udp();
    assert_eq!(key_of(LinkType::Ethernet, &eth(0x0800, &ip)), want());
    assert_eq!(key_of(LinkType::Raw, &ip), want());
    assert_eq!(key_of(LinkType::Ipv4, &ip), want());
    // Linux SLL: 16-byte header, protocol at offset 14.
    let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(&ip);
    assert_eq!(key_of(LinkType::LinuxSll, &sll), want());
    // Linux SLL2: 20-byte header, protocol at offset 0.
    let mut sll2 = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
    ];
    sll2.extend_from_slice(&ip);
    assert_eq!(key_of(LinkType::LinuxSll2, &sll2), want());
    // BSD NULL (host order, here little-endian AF_INET = 2) and LOOP (network order).
    let mut null = 2u32.to_le_bytes().to_vec();
    null.extend_from_slice(&ip);
    assert_eq!(key_of(LinkType::Null, &null), want());
    let mut lo = 2u32.to_be_bytes().to_vec();
    lo.extend_from_slice(&ip);
    assert_eq!(key_of(LinkType::Loop, &lo), want());
    // NFLOG: header, a prefix TLV (type 10, padded), then the payload TLV (9).
    let mut nf = vec![2, 0, 0, 0];
    nf.extend_from_slice(&7u16.to_le_bytes());
    nf.extend_from_slice(&10u16.to_le_bytes());
    nf.extend_from_slice(&[b'a', b'b', b'c', 0]);
    nf.extend_from_slice(&((4 + ip.len()) as u16).to_le_bytes());
    nf.extend_from_slice(&9u16.to_le_bytes());
    nf.extend_from_slice(&ip);
    assert_eq!(key_of(LinkType::Nflog, &nf), want());
    assert!(matches!(LinkType::from_linktype(147), LinkType::Other(147)));
    assert_eq!(
        decode(LinkType::Other(147), &ip),
        Decoded::NonIp(NonIp::UnsupportedLinkType)
    );
}

#[test]
fn tags_mpls_and_pppoe() {
    let ip = ip_udp();
    // Five stacked tags of every TPID: more than etherparse's three.
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for tpid in [0x88a8u16, 0x8100, 0x9100, 0x8100, 0x8100] {
        f.extend_from_slice(&tpid.to_be_bytes());
        f.extend_from_slice(&[0, 5]); // TCI
    }
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    f.extend_from_slice(&ip);
    match decode(LinkType::Ethernet, &f) {
        Decoded::Ip(p) => {
            assert_eq!(p.key, want());
            assert_eq!(p.l3.vlan_tags, 5);
        }
        other => panic!("{other:?}"),
    }
    // MPLS: two labels, bottom of stack on the second.
    let mut mpls = vec![0, 0x10, 0x00, 0x40, 0, 0x20, 0x01, 0x40];
    mpls.extend_from_slice(&ip);
    match decode(LinkType::Ethernet, &eth(0x8847, &mpls)) {
        Decoded::Ip(p) => assert!(p.l3.mpls && p.key == want()),
        other => panic!("{other:?}"),
    }
    // PPPoE session, PPP protocol 0x0021 (IPv4).
    let mut ppp = vec![0x11, 0, 0, 1];
    ppp.extend_from_slice(&((ip.len() + 2) as u16).to_be_bytes());
    ppp.extend_from_slice(&[0x00, 0x21]);
    ppp.extend_from_slice(&ip);
    match decode(LinkType::Ethernet, &eth(0x8864, &ppp)) {
        Decoded::Ip(p) => assert!(p.l3.pppoe && p.key == want()),
        other => panic!("{other:?}"),
    }
    // 802.3 length field (LLC) and ARP are not IP.
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0026, &[0x42; 38])),
        Decoded::NonIp(NonIp::Llc)
    );
    assert_eq!(
        decode(LinkType::Ethernet, &eth(0x0806, &[0; 28])),
        Decoded::NonIp(NonIp::Arp)
    );
}

#[test]
fn ipv6_extension_chain_and_fragments() {
    let b = PacketBuilder::ipv6([1; 16], [2; 16], 64).udp(53, 5353);
    let mut v6 = Vec::new();
    b.write(&mut v6, b"x").unwrap();
    // Insert hop-by-hop (8 bytes) and a destination-options header (8 bytes).
    let mut chained = v6[..40].to_vec();
    chained[6] = 0;
    chained[4..6].copy_from_slice(&((v6.len() - 40 + 16) as u16).to_be_bytes());
    chained.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    chained.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    chained.extend_from_slice(&v6[40..]);
    match decode(LinkType::Raw, &chained) {
        Decoded::Ip(p) => assert_eq!(p.key, FlowKey::v6([1; 16], [2; 16], 17, 53, 5353)),
        other => panic!("{other:?}"),
    }
    // A later IPv6 fragment: protocol from the fragment header, no ports.
    let mut frag = v6[..40].to_vec();
    frag[6] = 44;
    frag[4..6].copy_from_slice(&16u16.to_be_bytes());
    frag.extend_from_slice(&[17, 0, 0, 8 << 3, 0, 0, 0, 9]);
    frag.extend_from_slice(&[0xaa; 8]);
    match decode(LinkType::Raw, &frag) {
        Decoded::Ip(p) => {
            assert_eq!(
                p.frag,
                Frag::Later {
                    id: 9,
                    off: 64,
                    len: 8
                }
            );
            assert_eq!((p.key.proto, p.key.sport, p.key.dport), (17, 0, 0));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncations_are_counted_by_reason() {
    let ip = ip_udp();
    let f = eth(0x0800, &ip);
    assert_eq!(
        decode(LinkType::Ethernet, &f[..13]),
        Decoded::Malformed(Malformed::LinkTruncated)
    );
    assert_eq!(
        decode(LinkType::Ethernet, &f[..14 + 10]),
        Decoded::Malformed(Malformed::IpTruncated)
    );
    let mut bad = ip.clone();
    bad[0] = 0x42; // IHL 2: shorter than the fixed header
    assert_eq!(
        decode(LinkType::Raw, &bad),
        Decoded::Malformed(Malformed::IpBadHeader)
    );
    match decode(LinkType::Raw, &ip[..22]) {
        Decoded::Ip(p) => assert_eq!(p.anomaly, Some(Malformed::TransportTruncated)),
        other => panic!("{other:?}"),
    }
    let mut vlan_cut = f[..12].to_vec();
    vlan_cut.extend_from_slice(&[0x81, 0x00, 0x00]);
    assert_eq!(
        decode(LinkType::Ethernet, &vlan_cut),
        Decoded::Malformed(Malformed::LinkTruncated)
    );
}

#[test]
fn garbage_never_panics() {
    // Deterministic pseudo-random frames of every length up to 200 bytes,
    // on every link type, plus every prefix of a valid frame.
    let links = [
        LinkType::Ethernet,
        LinkType::LinuxSll,
        LinkType::LinuxSll2,
        LinkType::Raw,
        LinkType::Ipv4,
        LinkType::Ipv6,
        LinkType::Null,
        LinkType::Loop,
        LinkType::Nflog,
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut buf = Vec::new();
    let mut decoded = 0usize;
    for len in 0..200 {
        for _ in 0..50 {
            buf.clear();
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            for &l in &links {
                if matches!(decode(l, &buf), Decoded::Ip(_)) {
                    decoded += 1;
                }
            }
        }
    }
    assert!(
        decoded > 0,
        "random data never looked like IP: the fuzz loop is not reaching the IP decoder"
    );
    let f = eth(0x0800, &ip_udp());
    for n in 0..=f.len() {
        let _ = decode(LinkType::Ethernet, &f[..n]);
    }
}

/// Inputs the fuzzers found (dataplane/fuzz); each must decode without
/// crashing. Their first byte selects the link type as in the `decode`
/// fuzz target.
#[test]
fn fuzz_regressions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    const LINKS: [u32; 10] = [1, 113, 276, 101, 228, 229, 0, 108, 239, 147];
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let data = std::fs::read(e.unwrap().path()).unwrap();
        let Some((&sel, frame)) = data.split_first() else {
            continue;
        };
        let _ = decode(
            LinkType::from_linktype(LINKS[sel as usize % LINKS.len()]),
            frame,
        );
        n += 1;
    }
    assert!(n >= 1, "regression inputs missing");
}

/// The first fuzz finding: an IPv6 packet whose fragment header is cut
/// short. etherparse's extension iterator read past the buffer here; the
/// decoder now walks the chain itself and reports the fragment it can see.
#[test]
fn cut_ipv6_fragment_header_is_safe() {
    let data = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/regressions/decode-etherparse-ipv6-ext-overflow.bin"),
    )
    .unwrap();
    match decode(LinkType::Ethernet, &data[1..]) {
        Decoded::Ip(p) => assert!(p.key.v6),
        Decoded::Malformed(_) => {}
        other => panic!("{other:?}"),
    }
}

/// The worker's fast path gives exactly what `decode` gives, on valid
/// frames and on every single-byte corruption of their headers (options,
/// fragments, other protocols, bad lengths, tags all fall back).
#[test]
fn fast_path_agrees_with_decode() {
    use cfdp_packet::decode_fast;
    let mut frames = vec![eth(0x0800, &ip_udp())];
    let tcp = {
        let b = PacketBuilder::ipv4([10, 3, 3, 3], [10, 4, 4, 4], 64).tcp(40000, 80, 1, 1024);
        let mut v = Vec::new();
        b.write(&mut v, b"GET /").unwrap();
        v
    };
    frames.push(eth(0x0800, &tcp));
    // IPv6 without extension headers takes the fast path too.
    for proto in [17u8, 6] {
        let b = PacketBuilder::ipv6([0x20; 16], [0x21; 16], 64);
        let mut v = Vec::new();
        if proto == 17 {
            b.udp(5353, 53).write(&mut v, b"query").unwrap();
        } else {
            b.tcp(40000, 443, 1, 1024).write(&mut v, b"hi").unwrap();
        }
        frames.push(eth(0x86dd, &v));
    }
    let mut fast = 0;
    for f in &frames {
        for at in 0..58.min(f.len()) {
            for v in [0u8, 1, 0x20, 0x45, 0x46, 0x60, 0x81, 0xff] {
                let mut g = f.clone();
                g[at] = v;
                for cut in [g.len(), 58, 57, 54, 37, 34, 20] {
                    let g = &g[..cut.min(g.len())];
                    let Some(key) = decode_fast(LinkType::Ethernet, g) else {
                        continue;
                    };
                    fast += 1;
                    match decode(LinkType::Ethernet, g) {
                        Decoded::Ip(ip) => {
                            assert_eq!((ip.key, ip.frag, ip.anomaly), (key, Frag::None, None));
                        }
                        other => panic!("fast path {key:?}, decode {other:?}"),
                    }
                }
            }
        }
        // Not Ethernet: never the fast path.
        assert_eq!(decode_fast(LinkType::Raw, f), None);
    }
    assert!(fast > 100, "the fast path took only {fast} frames");
}
