//! The lab's wire: addresses, the frame type and its serial, the TCP flag
//! bits, and datagrams cut into fragments and put back together (a leaf:
//! it names nothing else of `crafted`).

use std::collections::{BTreeMap, BTreeSet};

/// MAC addresses: the hosts', and the router's port on each side.
pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 2];
pub const MAC_C: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 3];
pub const MAC_RA: [u8; 6] = [0x02, 0, 0, 0x4f, 1, 1];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0x4f, 2, 2];
pub const MAC_RB: [u8; 6] = [0x02, 0, 0, 0x4f, 2, 1];

pub const A4: [u8; 4] = [10, 79, 1, 2];
pub const C4: [u8; 4] = [10, 79, 1, 3];
pub const B4: [u8; 4] = [10, 79, 2, 2];
pub const A6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
pub const C6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3];
pub const B6: [u8; 16] = [0xfd, 0, 0, 0x79, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// The inside may open anything (stateful); the rest is dropped: what
/// `ct state established,related accept; iifname inside accept; policy
/// drop` says in nftables.
pub const LAB_RULES: &str = r#"{"rules": [
  {"id": 1, "priority": 10, "match": {"src_prefix": "10.79.1.0/24"}, "action": "allow", "track": true},
  {"id": 2, "priority": 10, "match": {"src_prefix": "fd00:79:1::/64"}, "action": "allow", "track": true},
  {"id": 9, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"},
  {"id": 10, "priority": 1, "match": {"src_prefix": "::/0"}, "action": "drop"}
]}"#;

/// Loads `ruleset` (nftables syntax) into network namespace `ns`, as
/// `ip netns exec NS nft -f -`: the Linux routers of the lab tests.
pub fn load_nftables(ns: &str, ruleset: &str) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut nft = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("ip netns exec nft");
    nft.stdin
        .take()
        .expect("nft's stdin")
        .write_all(ruleset.as_bytes())
        .expect("write the ruleset");
    assert!(nft.wait().expect("nft").success(), "nft -f");
}

/// One crafted frame: which side sends it, its bytes, its serial and what
/// case it belongs to.
#[derive(Clone, Debug)]
pub struct Crafted {
    pub inside: bool,
    pub frame: Vec<u8>,
    pub serial: u32,
    pub case: &'static str,
    /// Where cfdp is known to answer otherwise than Linux, and why: a
    /// choice the conntrack issue allows (the lab expects exactly these
    /// to differ).
    pub differs: Option<&'static str>,
    /// Milliseconds to wait before sending it (a timeout between two
    /// frames; the replay's capture time moves as much).
    pub delay_ms: u32,
}

/// The serial a frame carries (IPv4 identification, IPv6 flow label), if
/// it is an Ethernet IPv4 or IPv6 frame.
pub fn serial_of(frame: &[u8]) -> Option<u32> {
    match frame.get(12..14)? {
        [0x08, 0x00] => Some(u32::from(u16::from_be_bytes([
            *frame.get(18)?,
            *frame.get(19)?,
        ]))),
        [0x86, 0xdd] => {
            let b = frame.get(14..18)?;
            Some(u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]]))
        }
        _ => None,
    }
}

/// CRC32c (Castagnoli, reflected, as SCTP's checksum takes it: RFC 9260
/// appendix A), bit by bit. By hand: the lab sums a few dozen bytes a
/// packet, the workspace's `crc32fast` computes the IEEE polynomial only,
/// and one function is less than another dependency.
pub(super) fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82f6_3b78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// `frame` (Ethernet, IPv4 or IPv6 without extension headers) as
/// fragments of its IP payload: `sizes` bytes each, then the rest. An
/// IPv6 fragment header's identification is `serial`.
pub(super) fn split(frame: &[u8], sizes: &[usize], serial: u32) -> Vec<Vec<u8>> {
    let whole = frame.len() - 14 - ip_header_len(frame);
    let mut ranges = Vec::new();
    let mut at = 0;
    for &n in sizes {
        ranges.push((at, n));
        at += n;
    }
    ranges.push((at, whole - at));
    split_ranges(frame, &ranges, serial)
}

fn ip_header_len(frame: &[u8]) -> usize {
    if frame[12..14] == [0x86, 0xdd] {
        40
    } else {
        usize::from(frame[14] & 0x0f) * 4
    }
}

/// `frame` as fragments carrying the byte ranges `(offset, length)` of
/// its IP payload (offsets multiples of 8; they may overlap): the one
/// that reaches the payload's end is the last.
pub(super) fn split_ranges(frame: &[u8], ranges: &[(usize, usize)], serial: u32) -> Vec<Vec<u8>> {
    let v6 = frame[12..14] == [0x86, 0xdd];
    let ip_len = ip_header_len(frame);
    let (head, payload) = frame.split_at(14 + ip_len);
    let mut out = Vec::new();
    for &(off, n) in ranges {
        let piece = &payload[off..off + n];
        let more = off + n < payload.len();
        let mut f = head.to_vec();
        if v6 {
            let next = f[14 + 6];
            f[14 + 6] = 44;
            f[14 + 4..14 + 6].copy_from_slice(&((8 + piece.len()) as u16).to_be_bytes());
            f.extend_from_slice(&[next, 0]);
            f.extend_from_slice(&((off as u16) | u16::from(more)).to_be_bytes());
            f.extend_from_slice(&serial.to_be_bytes());
        } else {
            f[16..18].copy_from_slice(&((ip_len + piece.len()) as u16).to_be_bytes());
            let flags = (off / 8) as u16 | if more { 0x2000 } else { 0 };
            f[20..22].copy_from_slice(&flags.to_be_bytes());
            let h = etherparse::Ipv4HeaderSlice::from_slice(&f[14..14 + ip_len])
                .expect("the frame's own IPv4 header")
                .to_header();
            f[24..26].copy_from_slice(&h.calc_header_checksum().to_be_bytes());
        }
        f.extend_from_slice(piece);
        out.push(f);
    }
    out
}

/// Where a frame's IP payload lies in its datagram: offset, length and
/// whether it is the datagram's last piece (an unfragmented packet is
/// its own first and last).
fn piece(frame: &[u8]) -> Option<(usize, usize, bool)> {
    let be = |i: usize| -> Option<usize> {
        Some(usize::from(u16::from_be_bytes([
            *frame.get(i)?,
            *frame.get(i + 1)?,
        ])))
    };
    match frame.get(12..14)? {
        [0x08, 0x00] => {
            let ihl = usize::from(frame.get(14)? & 0x0f) * 4;
            let flags = be(20)?;
            Some(((flags & 0x1fff) * 8, be(16)? - ihl, flags & 0x2000 == 0))
        }
        [0x86, 0xdd] => {
            let plen = be(18)?;
            if *frame.get(20)? == 44 {
                let f = be(56)?;
                Some((f & 0xfff8, plen - 8, f & 1 == 0))
            } else {
                Some((0, plen, true))
            }
        }
        _ => None,
    }
}

/// The serials of the datagrams that `frames` deliver whole: their pieces
/// cover the datagram from its first byte to the end of its last piece.
pub fn delivered<'a>(frames: impl IntoIterator<Item = &'a [u8]>) -> BTreeSet<u32> {
    let mut by_serial: BTreeMap<u32, Vec<(usize, usize, bool)>> = BTreeMap::new();
    for f in frames {
        if let (Some(s), Some(p)) = (serial_of(f), piece(f)) {
            by_serial.entry(s).or_default().push(p);
        }
    }
    by_serial
        .into_iter()
        .filter_map(|(serial, mut pieces)| {
            pieces.sort_unstable();
            let end = pieces.iter().find(|p| p.2).map(|p| p.0 + p.1)?;
            let mut covered = 0;
            for &(off, len, _) in &pieces {
                if off > covered {
                    return None;
                }
                covered = covered.max(off + len);
            }
            (covered >= end).then_some(serial)
        })
        .collect()
}
