//! Receive-side scaling, emulated: the reader spreads frames over workers
//! by a symmetric hash of the 5-tuple, as a NIC with a symmetric RSS key
//! does, so both directions of a flow land on one worker and per-flow
//! order is kept end to end. Fragments are spread by the symmetric hash of
//! addresses and protocol only (as NICs do), so every fragment of a
//! datagram reaches the worker that saw its first fragment. That worker
//! need not be its flow's: with stateful rules, a fragmented answer may be
//! judged before another worker has opened its connection (a replay
//! pushes frames faster than their capture times; not fixed — the reader
//! would have to send in-order fragments by their first fragment's
//! 5-tuple, and hold out-of-order ones until it comes). An ICMP error
//! goes where the packet it quotes went: a stateful rule relates it to
//! that packet's connection, which must not race it on another worker.

use cfdp_packet::{decode, transport, Decoded, Frag, LinkType, Transport};

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
            } else if matches!(k.proto, 1 | 58) {
                if let Transport::Error { inner } = transport(link, frame) {
                    k = inner;
                }
            }
            k.symmetric_hash()
        }
        _ => 0,
    };
    ((h >> 32) as usize * workers) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::FlowKey;
    use etherparse::PacketBuilder;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    /// An ICMP port unreachable goes to the worker of the datagram it
    /// quotes, whatever the number of workers; both directions of a UDP
    /// conversation share one.
    #[test]
    fn icmp_errors_follow_the_packet_they_quote() {
        let (a, b) = ([10, 1, 0, 5], [192, 0, 2, 53]);
        let mut quoted = Vec::new();
        PacketBuilder::ipv4(a, b, 64)
            .udp(5000, 53)
            .write(&mut quoted, b"query")
            .unwrap();
        let mut query = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4(a, b, 64)
            .udp(5000, 53)
            .write(&mut query, b"query")
            .unwrap();
        let mut answer = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4(b, a, 64)
            .udp(53, 5000)
            .write(&mut answer, b"answer")
            .unwrap();
        let mut error = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4(b, a, 64)
            .icmpv4(etherparse::Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::Port,
            ))
            .write(&mut error, &quoted[..28])
            .unwrap();
        let mut apart = 0;
        for workers in 2..=16 {
            let w = rss_worker(LinkType::Ethernet, &query, workers);
            assert_eq!(rss_worker(LinkType::Ethernet, &answer, workers), w);
            assert_eq!(
                rss_worker(LinkType::Ethernet, &error, workers),
                w,
                "{workers} workers"
            );
            // Spread by its own addresses, it would often go elsewhere.
            let own = FlowKey::v4(b, a, 1, 0, 0).symmetric_hash();
            apart += usize::from((((own >> 32) as usize * workers) >> 32) != w);
        }
        assert!(apart > 0, "the test would not tell the two spreads apart");
    }
}
