//! What decoding yields: an IP packet with its flow key, a non-IP frame,
//! or a malformed frame with its reason.

use cfdp_rules::FlowKey;

/// Fragmentation of an IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frag {
    /// Not a fragment (or an atomic IPv6 fragment: offset 0, no more).
    None,
    /// Offset 0 with more to come: carries the transport header. `len`:
    /// the bytes of the datagram it carries (at most: its IP payload as
    /// captured, after any extension headers).
    First { id: u32, len: u32 },
    /// A later fragment: no transport header, ports unknown in this frame.
    /// It carries `len` bytes of the datagram from byte `off` (as
    /// captured: a cut capture shows less, never more).
    Later { id: u32, off: u32, len: u32 },
    /// A first fragment that does not carry what matching and tracking
    /// need: its IPv6 extension chain is cut short, its UDP ports are
    /// missing, or its TCP header is not whole (RFC 1858's tiny fragment:
    /// the flags would come in a later fragment).
    /// RFC 8200 §4.5 and RFC 7112 have such first fragments dropped (the
    /// rest of the chain, and the ports, would come in a later fragment,
    /// past every port rule); the data plane drops it, and its later
    /// fragments, which then have no first fragment, time out held.
    IncompleteFirst { id: u32 },
}

/// A decoded IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpPacket {
    /// The outer 5-tuple as this frame shows it (ports 0 for a later fragment).
    pub key: FlowKey,
    pub frag: Frag,
    pub l3: L3,
    /// Something was wrong but the 5-tuple could still be read.
    pub anomaly: Option<Malformed>,
}

/// Frames that carry no IP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NonIp {
    Arp,
    /// IEEE 802.3 length field (LLC/SNAP, STP, ...).
    Llc,
    MplsNonIp,
    PppNonIp,
    OtherProtocol,
    UnsupportedLinkType,
}

impl NonIp {
    pub const ALL: [NonIp; 6] = [
        NonIp::Arp,
        NonIp::Llc,
        NonIp::MplsNonIp,
        NonIp::PppNonIp,
        NonIp::OtherProtocol,
        NonIp::UnsupportedLinkType,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NonIp::Arp => "arp",
            NonIp::Llc => "llc",
            NonIp::MplsNonIp => "mpls_non_ip",
            NonIp::PppNonIp => "ppp_non_ip",
            NonIp::OtherProtocol => "other_protocol",
            NonIp::UnsupportedLinkType => "unsupported_link_type",
        }
    }
}

/// Why a frame is malformed. Counted by reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Malformed {
    /// The link-layer header (or a tag, label, PPPoE header) is cut.
    LinkTruncated,
    /// The IP header is cut (snaplen, truncated file, garbage).
    IpTruncated,
    /// The IP header is invalid (version, header length).
    IpBadHeader,
    /// An IPv6 extension header is cut or invalid; the protocol is the
    /// last next-header that could be read.
    IpExtTruncated,
    /// A TCP/UDP packet too short to hold its ports; ports are 0.
    TransportTruncated,
}

impl Malformed {
    pub const ALL: [Malformed; 5] = [
        Malformed::LinkTruncated,
        Malformed::IpTruncated,
        Malformed::IpBadHeader,
        Malformed::IpExtTruncated,
        Malformed::TransportTruncated,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Malformed::LinkTruncated => "link_truncated",
            Malformed::IpTruncated => "ip_truncated",
            Malformed::IpBadHeader => "ip_bad_header",
            Malformed::IpExtTruncated => "ip_ext_truncated",
            Malformed::TransportTruncated => "transport_truncated",
        }
    }
}

/// Result of decoding one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    Ip(IpPacket),
    NonIp(NonIp),
    Malformed(Malformed),
}

/// Where the IP header starts, and what the link layer carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct L3 {
    pub offset: usize,
    /// 802.1Q / 802.1ad / 0x9100 tags crossed.
    pub vlan_tags: u16,
    pub mpls: bool,
    pub pppoe: bool,
}
