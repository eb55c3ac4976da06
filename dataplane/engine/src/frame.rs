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
}

impl PacketRef<'_> {
    /// A placeholder for the unused tail of a burst array.
    pub const EMPTY: PacketRef<'static> = PacketRef {
        link: LinkType::Ethernet,
        ts_ns: 0,
        orig_len: 0,
        data: &[],
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
