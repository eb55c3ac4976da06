//! Byte offsets of the header fields the decoders read directly, named by
//! their RFCs, as smoltcp keeps a wire format's offsets beside its reader.
//! A leaf: the readers (`ip.rs`, `transport.rs`) import it, it imports
//! nothing.

use std::ops::Range;

/// Ethernet II (IEEE 802.3 §3.2.6), untagged.
pub(super) mod ethernet {
    use super::Range;
    pub const ETHERTYPE: Range<usize> = 12..14;
    pub const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
    pub const HEADER_LEN: usize = 14;
}

/// IPv4 (RFC 791 §3.1), then, for the fast path, the transport header's
/// two ports (TCP and UDP both start with them).
pub(super) mod ipv4 {
    use super::Range;
    /// Version (high nibble) and header length in words (low nibble).
    pub const VER_IHL: usize = 0;
    /// 0x45: version 4, five words (no options).
    pub const VER_IHL_PLAIN: u8 = 0x45;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    /// Flags (3 bits) and fragment offset (13 bits).
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    /// The MF flag and the fragment offset's high bits, in the first byte
    /// of [`FLAGS_FRAG`] (DF, 0x40, does not fragment).
    pub const MF_AND_OFFSET_HIGH: u8 = 0x3f;
    /// [`FLAGS_FRAG`] as one number: the MF flag, and the offset's bits.
    pub const MF: u16 = 0x2000;
    pub const OFFSET: u16 = 0x1fff;
    pub const PROTOCOL: usize = 9;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
    /// The header's length without options: the ports follow.
    pub const HEADER_LEN: usize = 20;
    pub const SRC_PORT: Range<usize> = HEADER_LEN..HEADER_LEN + 2;
    pub const DST_PORT: Range<usize> = HEADER_LEN + 2..HEADER_LEN + 4;
    /// Everything the fast path reads.
    pub const READ: usize = HEADER_LEN + 4;
}

/// IPv6 (RFC 8200 §3).
pub(super) mod ipv6 {
    use super::Range;
    /// Version in the high nibble.
    pub const VERSION: usize = 0;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const SRC_ADDR: Range<usize> = 8..24;
    pub const DST_ADDR: Range<usize> = 24..40;
    pub const HEADER_LEN: usize = 40;
}

/// The two ports at the start of a TCP or UDP header.
pub(super) mod ports {
    pub const SRC: usize = 0;
    pub const DST: usize = 2;
}

/// TCP (RFC 9293 §3.1).
pub(super) mod tcp {
    use super::Range;
    pub const SEQ: usize = 4;
    pub const ACK: usize = 8;
    /// The data offset in words, in the high nibble.
    pub const DATA_OFFSET: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Range<usize> = 14..16;
    /// The header without options.
    pub const HEADER_LEN: usize = 20;
}

/// ICMP and ICMPv6 (RFC 792, RFC 4443): type, code, and a query's
/// identifier.
pub(super) mod icmp {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const QUERY_ID: usize = 4;
}
