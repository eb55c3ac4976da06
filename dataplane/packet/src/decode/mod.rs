//! Packet decoding: link layer → IP → the outer 5-tuple.
//!
//! `decode` never panics and never allocates: every frame comes out as an
//! IP packet (with an optional anomaly), a non-IP frame, or a malformed
//! frame with its reason, and the worker counts each by kind.
//!
//! What is decoded: Ethernet II with any number of 802.1Q / 802.1ad /
//! 0x9100 tags, MPLS label stacks (IPv4/IPv6 payload guessed from the
//! version nibble), PPPoE sessions (PPP IPv4/IPv6); capture link types
//! Ethernet, Linux SLL and SLL2, raw IP (101, 228, 229), BSD NULL and LOOP,
//! NFLOG. IPv4 with options, IPv6 with extension-header chains (the protocol
//! is the last next-header), TCP and UDP ports (also from a first
//! fragment), ICMP/ICMPv6 and every other protocol with ports 0.

mod checksum;
mod ip;
mod link;
mod outcome;
mod transport;
mod wire;

pub use checksum::transport_checksum_ok;
pub use link::LinkType;
pub use outcome::{Decoded, Frag, IpPacket, Malformed, NonIp, L3};
pub use transport::{transport, TcpSeg, Transport};

use cfdp_rules::FlowKey;

/// The 5-tuple of the most common frame, if `frame` is one: untagged
/// Ethernet, IPv4 without options or IPv6 without extension headers, not
/// fragmented, TCP or UDP, lengths consistent. For such a frame [`decode`] returns exactly
/// `Decoded::Ip(IpPacket { key, frag: Frag::None, anomaly: None, .. })`
/// with this key (tested, and checked by the `decode` fuzz target); the
/// worker reads it straight into its burst, skipping the link walk and the
/// ~70-byte `Decoded` value (measured: ~100 instructions a packet).
#[inline]
pub fn decode_fast(link: LinkType, frame: &[u8]) -> Option<FlowKey> {
    if link != LinkType::Ethernet {
        return None;
    }
    match frame.get(12..14)? {
        [0x08, 0x00] => ip::ipv4_fast(frame.get(14..)?),
        [0x86, 0xdd] => ip::ipv6_fast(frame.get(14..)?),
        _ => None,
    }
}

/// Decodes one captured frame.
#[inline]
pub fn decode(link: LinkType, frame: &[u8]) -> Decoded {
    match link::locate_ip(link, frame) {
        link::LinkResult::Ip(l3) => ip::decode_ip(frame, l3),
        link::LinkResult::NonIp(n) => Decoded::NonIp(n),
        link::LinkResult::Malformed(m) => Decoded::Malformed(m),
    }
}

/// A xorshift generator for the fast paths' agreement tests: millions of
/// deterministic frames without a crate.
#[cfg(test)]
fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
