//! Receive-side scaling, emulated: the reader spreads frames over workers
//! by a symmetric hash of the 5-tuple, as a NIC with a symmetric RSS key
//! does, so both directions of a flow land on one worker and per-flow
//! order is kept end to end. Fragments are spread by the symmetric hash of
//! addresses and protocol only (as NICs do), so every fragment of a
//! datagram reaches the worker that saw its first fragment.

use cfdp_packet::{decode, Decoded, Frag, LinkType};

/// The worker (of `workers`) a frame goes to.
pub fn rss_worker(link: LinkType, frame: &[u8], workers: usize) -> usize {
    if workers <= 1 {
        return 0;
    }
    let h = match decode(link, frame) {
        Decoded::Ip(ip) => {
            let mut k = ip.key;
            if ip.frag != Frag::None {
                k.sport = 0;
                k.dport = 0;
            }
            k.symmetric_hash()
        }
        _ => 0,
    };
    ((h >> 32) as usize * workers) >> 32
}
