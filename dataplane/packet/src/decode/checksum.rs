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
    // same sum).
    let with_pseudo = pseudo + u64::from(proto) + seg.len() as u64;
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
    Some(fold(total) == 0xffff)
}

/// `acc` plus `b` as big-endian 16-bit words (an odd last byte padded
/// with zero), four bytes at a time: a sum of 32-bit words folds to the
/// same ones' complement sum.
fn sum(mut acc: u64, b: &[u8]) -> u64 {
    let mut quads = b.chunks_exact(4);
    for q in &mut quads {
        acc += u64::from(u32::from_be_bytes([q[0], q[1], q[2], q[3]]));
    }
    let rest = quads.remainder();
    let mut words = rest.chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// The ones' complement sum of `acc`, folded to 16 bits.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
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
}
