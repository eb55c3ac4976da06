//! One frame of a burst, as a backend hands it to a worker, and what
//! happens to it.

use cfdp_packet::LinkType;

/// One frame of a burst, as the backend hands it over.
#[derive(Clone, Copy, Debug)]
pub struct PacketRef<'a> {
    pub link: LinkType,
    /// When the frame arrived, in the backend's clock (capture time for a
    /// replay, monotonic time for a NIC): fragment entries age by it.
    pub ts_ns: u64,
    /// Length on the wire (counted in bytes).
    pub orig_len: u32,
    pub data: &'a [u8],
    /// The NIC checked the frame's TCP or UDP checksum and vouched for
    /// its data (DPDK's receive checksum offload): connection tracking
    /// does not sum it again, as Linux's conntrack trusts a driver's
    /// `CHECKSUM_UNNECESSARY`. `false` where nothing checked it (a
    /// capture, `net_pcap`, AF_XDP) or the NIC found it bad: then it is
    /// summed in software, as Linux sums a `CHECKSUM_NONE` packet.
    pub l4_vouched: bool,
}

impl PacketRef<'_> {
    /// A placeholder for the unused tail of a burst array.
    pub const EMPTY: PacketRef<'static> = PacketRef {
        link: LinkType::Ethernet,
        ts_ns: 0,
        orig_len: 0,
        data: &[],
        l4_vouched: false,
    };
}

/// What happens to a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Verdict {
    /// Forward out of port 0 (default route) or of the given port.
    #[default]
    Forward,
    Redirect(u16),
    Drop,
}

/// A held fragment on its way out, with its datagram's verdict.
#[derive(Clone, Debug)]
pub struct Released {
    pub frame: cfdp_packet::frag::Held,
    pub verdict: Verdict,
}
