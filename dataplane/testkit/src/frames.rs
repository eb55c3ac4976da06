//! Frame builders for the generated captures: Ethernet frames of IPv4 and
//! IPv6 TCP, UDP and ICMP packets, VLAN tags, an IPv6 extension header,
//! and UDP datagrams split into IPv4 and IPv6 fragments. Bytes only: what
//! a frame should produce is the captures' business (`captures.rs`).

use std::net::Ipv6Addr;

use etherparse::{IpNumber, Ipv4Header, PacketBuilder};

pub(crate) const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub(crate) const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

pub(crate) fn v6(s: &str) -> [u8; 16] {
    s.parse::<Ipv6Addr>().expect("literal").octets()
}

pub(crate) fn tcp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(src, dst, 64)
        .tcp(sp, dp, 1000, 65535);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).expect("write to Vec");
    out
}

pub(crate) fn udp4(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(src, dst, 64)
        .udp(sp, dp);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).expect("write to Vec");
    out
}

pub(crate) fn icmp4(src: [u8; 4], dst: [u8; 4], seq: u16) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv4(src, dst, 64)
        .icmpv4_echo_request(7, seq);
    let mut out = Vec::new();
    b.write(&mut out, b"ping").expect("write to Vec");
    out
}

pub(crate) fn tcp6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(src, dst, 64)
        .tcp(sp, dp, 1, 1024);
    let mut out = Vec::new();
    b.write(&mut out, b"v6 data").expect("write to Vec");
    out
}

pub(crate) fn udp6(src: [u8; 16], dst: [u8; 16], sp: u16, dp: u16) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(src, dst, 64)
        .udp(sp, dp);
    let mut out = Vec::new();
    b.write(&mut out, b"v6 udp").expect("write to Vec");
    out
}

pub(crate) fn icmp6(src: [u8; 16], dst: [u8; 16]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(src, dst, 64)
        .icmpv6_echo_request(1, 1);
    let mut out = Vec::new();
    b.write(&mut out, b"ping6").expect("write to Vec");
    out
}

/// Inserts VLAN tags (outermost first) after the MAC addresses.
pub(crate) fn tagged(frame: &[u8], tags: &[(u16, u16)]) -> Vec<u8> {
    let mut out = frame[..12].to_vec();
    for &(tpid, vid) in tags {
        out.extend_from_slice(&tpid.to_be_bytes());
        out.extend_from_slice(&vid.to_be_bytes());
    }
    out.extend_from_slice(&frame[12..]);
    out
}

/// Inserts an 8-byte IPv6 hop-by-hop header (PadN) before the transport.
pub(crate) fn with_hop_by_hop(frame: &[u8]) -> Vec<u8> {
    let ip = 14;
    let next = frame[ip + 6];
    let mut out = frame[..ip + 40].to_vec();
    out[ip + 6] = 0; // next header: hop-by-hop
    let plen = u16::from_be_bytes([out[ip + 4], out[ip + 5]]) + 8;
    out[ip + 4..ip + 6].copy_from_slice(&plen.to_be_bytes());
    out.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    out.extend_from_slice(&frame[ip + 40..]);
    out
}

/// Splits a UDP datagram into IPv4 fragments of `chunk` payload bytes (a
/// multiple of 8), first fragment carrying the UDP header.
pub(crate) fn fragments4(
    src: [u8; 4],
    dst: [u8; 4],
    sp: u16,
    dp: u16,
    id: u16,
    payload: &[u8],
    chunk: usize,
) -> Vec<Vec<u8>> {
    let whole = udp4(src, dst, sp, dp, payload);
    let l4 = &whole[14 + 20..];
    let pieces: Vec<&[u8]> = l4.chunks(chunk).collect();
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            let mut h = Ipv4Header::new(piece.len() as u16, 64, IpNumber::UDP, src, dst)
                .expect("small payload");
            h.identification = id;
            h.more_fragments = i + 1 < n;
            h.fragment_offset =
                etherparse::IpFragOffset::try_new((i * chunk / 8) as u16).expect("offset");
            h.header_checksum = h.calc_header_checksum();
            let mut f = whole[..14].to_vec();
            f.extend_from_slice(&h.to_bytes());
            f.extend_from_slice(piece);
            f
        })
        .collect()
}

/// Splits a UDP datagram into IPv6 fragments (fragment extension header).
pub(crate) fn fragments6(
    src: [u8; 16],
    dst: [u8; 16],
    sp: u16,
    dp: u16,
    id: u32,
    payload: &[u8],
    chunk: usize,
) -> Vec<Vec<u8>> {
    let b = PacketBuilder::ethernet2(MAC_A, MAC_B)
        .ipv6(src, dst, 64)
        .udp(sp, dp);
    let mut whole = Vec::new();
    b.write(&mut whole, payload).expect("write to Vec");
    let l4 = whole[14 + 40..].to_vec();
    let pieces: Vec<&[u8]> = l4.chunks(chunk).collect();
    let n = pieces.len();
    pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            let mut f = whole[..14 + 40].to_vec();
            f[14 + 6] = 44; // next header: fragment
            let plen = (8 + piece.len()) as u16;
            f[14 + 4..14 + 6].copy_from_slice(&plen.to_be_bytes());
            let off = ((i * chunk / 8) as u16) << 3 | u16::from(i + 1 < n);
            f.extend_from_slice(&[17, 0]);
            f.extend_from_slice(&off.to_be_bytes());
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(piece);
            f
        })
        .collect()
}
