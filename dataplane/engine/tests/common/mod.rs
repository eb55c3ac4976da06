//! What the engine's test files share.

use cfdp_rules::FlowKey;
use etherparse::PacketBuilder;

/// An Ethernet/IPv4/UDP frame of IPv4 5-tuple `k` with 18 zero bytes of
/// payload (a 60-byte frame), its checksums right.
pub fn frame(k: &FlowKey) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(
            k.src[..4].try_into().unwrap(),
            k.dst[..4].try_into().unwrap(),
            64,
        )
        .udp(k.sport, k.dport)
        .write(&mut out, &[0u8; 18])
        .unwrap();
    out
}
