//! Whether a packet's transport checksum is right — TCP, UDP, ICMP and
//! ICMPv6 — as Linux's conntrack checks it before it tracks a packet
//! (`nf_conntrack_checksum`, on by default): a packet with a wrong one is
//! invalid, so a forged segment whose checksum the receiver would refuse
//! cannot move or end a connection. Read on demand, for the packets
//! connection tracking judges.
//!
//! Hand-written: etherparse computes checksums from its owned header
//! structs (a copy of the headers per packet); this sums the frame's bytes
//! where they are.

use cfdp_rules::proto;
use etherparse::LaxIpSlice;

use super::link::{locate_ip, LinkResult};
use super::LinkType;

const ICMP: u8 = 1;
const ICMPV6: u8 = 58;

/// `false` only when the packet is whole and its TCP, UDP, ICMP or
/// ICMPv6 checksum is wrong. A fragment (checked, by Linux, after
/// reassembly), a packet the capture cut short, another protocol or a
/// frame that is not IP is not judged here (`true`); so is an IPv4 UDP
/// datagram without a checksum (0).
pub fn transport_checksum_ok(link: LinkType, frame: &[u8]) -> bool {
    // The frame `decode_fast` reads (untagged Ethernet, IP at byte 14)
    // without the link walk: `locate_ip`'s call and its VLAN and link-type
    // cases were ~25 of the ~165 instructions this check cost an
    // established UDP packet (callgrind, `worker-path` udp-stateful).
    if link == LinkType::Ethernet {
        if let (Some([0x08, 0x00] | [0x86, 0xdd]), Some(ip)) = (frame.get(12..14), frame.get(14..))
        {
            if let Some(ok) = plain(ip) {
                return ok;
            }
        }
    }
    let LinkResult::Ip(l3) = locate_ip(link, frame) else {
        return true;
    };
    let Some(ip) = frame.get(l3.offset..) else {
        return true;
    };
    plain(ip).unwrap_or_else(|| general(ip))
}

/// The common packet read by hand: IPv4 without options and not a
/// fragment, or IPv6 with no extension header, whole in the capture,
/// carrying TCP, UDP or ICMP(v6). `None`: anything else (then
/// [`general`]).
fn plain(ip: &[u8]) -> Option<bool> {
    let (pseudo, proto, seg) = match ip.first()? >> 4 {
        4 => {
            let h = ip.get(..20)?;
            let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
            // IHL 5, and neither "more fragments" nor an offset.
            if h[0] != 0x45 || u16::from_be_bytes([h[6], h[7]]) & 0x3fff != 0 {
                return None;
            }
            (sum(0, &h[12..20]), h[9], ip.get(20..total.max(20))?)
        }
        6 => {
            let h = ip.get(..40)?;
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            if len == 0 {
                return None; // a jumbogram
            }
            (sum(0, &h[8..40]), h[6], ip.get(40..40 + len)?)
        }
        _ => return None,
    };
    let v6 = ip[0] >> 4 == 6;
    check(pseudo, proto, seg, v6)
}

/// Every other IP packet, through etherparse's lax slicing.
fn general(ip: &[u8]) -> bool {
    let Ok((ip, _)) = LaxIpSlice::from_slice(ip) else {
        return true;
    };
    let (pseudo, p) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            let p = v4.payload();
            let mut acc = sum(0, &h.source());
            acc = sum(acc, &h.destination());
            (acc, p)
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            let p = v6.payload();
            let mut acc = sum(0, &h.source());
            acc = sum(acc, &h.destination());
            (acc, p)
        }
    };
    if p.incomplete || p.fragmented {
        return true;
    }
    let v6 = matches!(ip, LaxIpSlice::Ipv6(_));
    check(pseudo, p.ip_number.0, p.payload, v6).unwrap_or(true)
}

/// Whether segment `seg` of protocol `proto` sums right with the
/// addresses' sum `pseudo`; `None` for a protocol not checked here (or a
/// segment too short to be one).
fn check(pseudo: u64, proto: u8, seg: &[u8], v6: bool) -> Option<bool> {
    // Protocol and upper-layer length (IPv4: 16 bits; IPv6: 32 bits, the
    // same sum below 64 KB, and a longer segment is a jumbogram, not read
    // here), as the big-endian words they are, in the byte-swapped sum
    // ([`sum`]).
    let len = u16::try_from(seg.len()).ok()?;
    let with_pseudo =
        pseudo + u64::from(u16::from(proto).swap_bytes()) + u64::from(len.swap_bytes());
    let total = match proto {
        proto::TCP if seg.len() >= 20 => sum(with_pseudo, seg),
        proto::UDP if seg.len() >= 8 => {
            if !v6 && seg[6..8] == [0, 0] {
                return Some(true); // no checksum (IPv4 only)
            }
            sum(with_pseudo, seg)
        }
        ICMP if !v6 && seg.len() >= 8 => sum(0, seg),
        ICMPV6 if v6 && seg.len() >= 8 => sum(with_pseudo, seg),
        _ => return None,
    };
    // 0xffff is its own byte swap: the swapped sum says it as well.
    Some(fold(total) == 0xffff)
}

/// `acc` plus `b`'s 16-bit words (an odd last byte padded with zero),
/// summed byte-swapped: every word read little-endian, eight bytes at a
/// time. The ones' complement sum of byte-swapped words is the byte swap
/// of the sum (RFC 1071, "byte order independence"), so no load needs a
/// swap; and since 2^16 ≡ 1 modulo 2^16 − 1, a little-endian load of any
/// even width is added as it is (a 64-bit word as its two 32-bit halves,
/// whose carries the 64-bit accumulator keeps; [`fold`] folds them). The
/// tail is one load of four, two and one bytes each (no loop of pairs).
fn sum(mut acc: u64, b: &[u8]) -> u64 {
    let mut octets = b.chunks_exact(8);
    for o in &mut octets {
        let w = u64::from_le_bytes([o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]);
        acc += (w & 0xffff_ffff) + (w >> 32);
    }
    let mut rest = octets.remainder();
    if let [a, b, c, d, more @ ..] = rest {
        acc += u64::from(u32::from_le_bytes([*a, *b, *c, *d]));
        rest = more;
    }
    if let [a, b, more @ ..] = rest {
        acc += u64::from(u16::from_le_bytes([*a, *b]));
        rest = more;
    }
    if let [last] = rest {
        acc += u64::from(*last);
    }
    acc
}

/// The ones' complement sum of `acc`, folded to 16 bits: four fixed
/// steps, each adding the high part to the low (2^32 and 2^16 are both 1
/// modulo 2^16 − 1), with no loop on the value. 64 bits to below 2^33,
/// then below 2^32 (a high part of 1 comes with a low part below
/// 2^32 − 1), then below 2^17 and at most 0xffff the same way. A step
/// gives 0 only from 0, so a nonzero sum never folds to 0.
#[inline(always)]
fn fold(acc: u64) -> u16 {
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff) + (acc >> 16);
    ((acc & 0xffff) + (acc >> 16)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    /// Right checksums pass and one flipped bit anywhere in the segment
    /// (or a wrong address, through the pseudo header) fails, for TCP,
    /// UDP, ICMP and ICMPv6, IPv4 and IPv6; IPv4 UDP without a checksum
    /// and a capture cut short are not judged.
    #[test]
    fn wrong_transport_checksums_are_found() {
        let b4 = || PacketBuilder::ethernet2(MAC, MAC).ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64);
        let b6 = || PacketBuilder::ethernet2(MAC, MAC).ipv6([1; 16], [2; 16], 64);
        let mut frames: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut push = |w: &dyn Fn(&mut Vec<u8>), l4: usize| {
            let mut f = Vec::new();
            w(&mut f);
            frames.push((f, l4));
        };
        push(&|f| b4().tcp(1, 2, 3, 4).write(f, b"odd").unwrap(), 34);
        push(&|f| b4().udp(1, 2).write(f, b"even").unwrap(), 34);
        push(
            &|f| b4().icmpv4_echo_request(1, 2).write(f, b"ping").unwrap(),
            34,
        );
        push(&|f| b6().tcp(1, 2, 3, 4).write(f, b"seg").unwrap(), 54);
        push(&|f| b6().udp(1, 2).write(f, b"x").unwrap(), 54);
        push(
            &|f| b6().icmpv6_echo_request(1, 2).write(f, b"ping").unwrap(),
            54,
        );
        for (f, l4) in &frames {
            assert!(transport_checksum_ok(LinkType::Ethernet, f), "{f:?}");
            for i in *l4..f.len() {
                let mut bad = f.clone();
                bad[i] ^= 0x10;
                assert!(
                    !transport_checksum_ok(LinkType::Ethernet, &bad),
                    "byte {i} of {f:?}"
                );
            }
            // The source address is in the pseudo header (not for ICMP).
            let mut moved = f.clone();
            moved[if *l4 == 54 { 37 } else { 29 }] ^= 1;
            let icmp4 = f[23] == ICMP && f[12..14] == [8, 0];
            assert_eq!(transport_checksum_ok(LinkType::Ethernet, &moved), icmp4);
        }
        // IPv4 options: the general path.
        let mut opts = frames[0].0.clone();
        opts.splice(34..34, [1, 1, 1, 1]);
        opts[14] = 0x46;
        let total = u16::from_be_bytes([opts[16], opts[17]]) + 4;
        opts[16..18].copy_from_slice(&total.to_be_bytes());
        assert!(transport_checksum_ok(LinkType::Ethernet, &opts));
        let last = opts.len() - 1;
        opts[last] ^= 1;
        assert!(!transport_checksum_ok(LinkType::Ethernet, &opts));
        let mut nocheck = frames[1].0.clone();
        nocheck[40..42].copy_from_slice(&[0, 0]);
        assert!(transport_checksum_ok(LinkType::Ethernet, &nocheck));
        let mut cut = frames[0].0.clone();
        cut[40] ^= 0xff;
        cut.truncate(cut.len() - 2);
        assert!(
            transport_checksum_ok(LinkType::Ethernet, &cut),
            "cut short: not judged"
        );
    }

    /// The fold is the value modulo 2^16 − 1 (ones' complement: a
    /// nonzero sum never folds to 0), for sums whose every step carries
    /// and the widest ones.
    #[test]
    fn fold_is_the_sum_modulo_ffff() {
        let mut v = 0x9e37_79b9_7f4a_7c15u64;
        let edges = [
            1,
            0xffff,
            0x1_0000,
            0x1_ffff,
            0xffff_ffff,
            0x1_0000_ffff,
            // Folded to 0x1_0000_ffff by the first step: a fold without
            // the second would end at 0x1_0000 (0 as 16 bits).
            0x1_0000_ffff_ffff,
            u64::MAX,
        ];
        for x in edges.into_iter().chain((0..1000).map(|_| {
            v = v.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            v >> (v % 48)
        })) {
            let f = u64::from(fold(x));
            assert_eq!(f % 0xffff, x % 0xffff, "{x:#x}");
            assert_ne!(f, 0, "{x:#x}");
        }
    }

    /// Every payload length from 0 to 80 bytes (every remainder of the
    /// eight-byte sum, odd and even), TCP and UDP, IPv4 and IPv6, with
    /// etherparse's checksums: right ones pass, and a checksum one off, or
    /// a payload byte moved by one, fails.
    #[test]
    fn every_length_sums_as_etherparse_does() {
        for len in 0..=80usize {
            let payload: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let v4 = || PacketBuilder::ethernet2(MAC, MAC).ipv4([192, 0, 2, 1], [10, 9, 8, 7], 64);
            let v6 = || PacketBuilder::ethernet2(MAC, MAC).ipv6([0xfe; 16], [7; 16], 64);
            let mut frames = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
            v4().tcp(4000, 80, 0xdead_beef, 512)
                .write(&mut frames[0], &payload)
                .unwrap();
            v4().udp(53, 4000).write(&mut frames[1], &payload).unwrap();
            v6().tcp(4000, 443, 7, 512)
                .write(&mut frames[2], &payload)
                .unwrap();
            v6().udp(4000, 53).write(&mut frames[3], &payload).unwrap();
            for (k, f) in frames.iter().enumerate() {
                assert!(
                    transport_checksum_ok(LinkType::Ethernet, f),
                    "len {len} frame {k}"
                );
                let l4 = if k < 2 { 34 } else { 54 };
                let at = l4 + if k % 2 == 0 { 16 } else { 6 };
                let mut off = f.clone();
                let c = u16::from_be_bytes([off[at], off[at + 1]]).wrapping_add(1);
                off[at..at + 2].copy_from_slice(&c.to_be_bytes());
                assert!(
                    !transport_checksum_ok(LinkType::Ethernet, &off),
                    "len {len} frame {k}"
                );
                if let Some(last) = f.len().checked_sub(1).filter(|_| len > 0) {
                    let mut moved = f.clone();
                    moved[last] = moved[last].wrapping_add(1);
                    assert!(
                        !transport_checksum_ok(LinkType::Ethernet, &moved),
                        "len {len} frame {k}"
                    );
                }
            }
        }
    }
}
