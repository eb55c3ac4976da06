//! Receive-side scaling, emulated: the reader spreads frames over workers
//! by a symmetric hash of the 5-tuple, as a NIC with a symmetric RSS key
//! does, so both directions of a flow land on one worker and per-flow
//! order is kept end to end. Every fragment of a datagram reaches one
//! worker: the first fragment's flow's when it comes first, else the
//! worker of its addresses ([`Rss`]). An ICMP error
//! goes where the packet it quotes went: a stateful rule relates it to
//! that packet's connection, which must not race it on another worker.

use cfdp_packet::{decode, transport, Decoded, Frag, LinkType, Transport};

/// How many datagrams being fragmented the spread remembers (a
/// direct-mapped table: a datagram whose entry another took is spread by
/// its addresses again).
const DATAGRAMS: usize = 4096;

/// The reader's spread over `workers` workers. Every fragment of a
/// datagram goes where the first of its fragments the reader saw went: a
/// first fragment (ports known) by its 5-tuple, with its flow — so an
/// answer in fragments meets the connection its question opened on the
/// same worker —, a later fragment that comes before its first by its
/// addresses (it shows no ports), and then the rest of its datagram after
/// it, first fragment included (the worker's hold table waits for it).
/// Such an out-of-order datagram may still be judged on another worker
/// than its flow's, before that worker has opened the connection.
pub struct Rss {
    workers: usize,
    /// (datagram tag, worker): where each remembered datagram went.
    datagrams: Vec<(u64, usize)>,
}

impl Rss {
    pub fn new(workers: usize) -> Self {
        Self {
            workers: workers.max(1),
            datagrams: vec![(0, 0); if workers > 1 { DATAGRAMS } else { 0 }],
        }
    }

    /// The worker a frame goes to.
    pub fn worker(&mut self, link: LinkType, frame: &[u8]) -> usize {
        if self.workers <= 1 {
            return 0;
        }
        let Decoded::Ip(ip) = decode(link, frame) else {
            return 0;
        };
        let mut k = ip.key;
        let id = match ip.frag {
            Frag::None => None,
            Frag::First { id, .. } | Frag::IncompleteFirst { id } | Frag::Later { id, .. } => {
                Some(id)
            }
        };
        if let Some(id) = id {
            let mut addresses = k;
            (addresses.sport, addresses.dport) = (0, 0);
            // Never 0 (an empty entry).
            let tag = (addresses.symmetric_hash()
                ^ u64::from(id).wrapping_mul(0x9e37_79b9_7f4a_7c15))
                | 1;
            let entry = &mut self.datagrams[(tag >> 20) as usize % DATAGRAMS];
            if entry.0 == tag {
                return entry.1;
            }
            let by = if matches!(ip.frag, Frag::First { .. }) {
                k
            } else {
                addresses
            };
            let w = spread(by.symmetric_hash(), self.workers);
            *entry = (tag, w);
            return w;
        }
        if matches!(k.proto, 1 | 58) {
            if let Transport::Error { inner } = transport(link, frame) {
                k = inner;
            }
        }
        spread(k.symmetric_hash(), self.workers)
    }
}

/// Hash `h` over `workers`.
fn spread(h: u64, workers: usize) -> usize {
    ((h >> 32) as usize * workers) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::FlowKey;
    use etherparse::PacketBuilder;

    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

    /// An Ethernet frame of a UDP datagram `a:sp → b:dp`.
    fn udp(a: [u8; 4], b: [u8; 4], sp: u16, dp: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(MAC, MAC)
            .ipv4(a, b, 64)
            .udp(sp, dp)
            .write(&mut f, payload)
            .unwrap();
        f
    }

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
        let query = udp(a, b, 5000, 53, b"query");
        let answer = udp(b, a, 53, 5000, b"answer");
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
            let mut rss = Rss::new(workers);
            let w = rss.worker(LinkType::Ethernet, &query);
            assert_eq!(rss.worker(LinkType::Ethernet, &answer), w);
            assert_eq!(
                rss.worker(LinkType::Ethernet, &error),
                w,
                "{workers} workers"
            );
            // Spread by its own addresses, it would often go elsewhere.
            let own = FlowKey::v4(b, a, 1, 0, 0).symmetric_hash();
            apart += usize::from((((own >> 32) as usize * workers) >> 32) != w);
        }
        assert!(apart > 0, "the test would not tell the two spreads apart");
    }

    /// IPv4 fragments of a UDP datagram `a:sp → b:dp` with 48 bytes of
    /// payload, 16 bytes of it (the header first) a fragment.
    fn fragments(a: [u8; 4], b: [u8; 4], sp: u16, dp: u16, id: u16) -> Vec<Vec<u8>> {
        let whole = udp(a, b, sp, dp, &[7; 40]);
        let l4 = whole[34..].to_vec();
        let n = l4.len().div_ceil(16);
        l4.chunks(16)
            .enumerate()
            .map(|(i, piece)| {
                let mut f = whole[..34].to_vec();
                f[16..18].copy_from_slice(&((20 + piece.len()) as u16).to_be_bytes());
                f[18..20].copy_from_slice(&id.to_be_bytes());
                let more = if i + 1 < n { 0x2000 } else { 0 };
                f[20..22].copy_from_slice(&((i * 2) as u16 | more).to_be_bytes());
                f.extend_from_slice(piece);
                f
            })
            .collect()
    }

    /// An answer in fragments, in order, goes where its question went
    /// (its first fragment's flow); out of order, all its fragments go to
    /// one worker, the first fragment too.
    #[test]
    fn a_datagrams_fragments_go_to_one_worker_and_in_order_to_its_flows() {
        let (a, b) = ([10, 1, 0, 5], [192, 0, 2, 53]);
        let query = udp(a, b, 5000, 53, b"query");
        let mut apart = 0;
        for workers in 2..=16 {
            let mut rss = Rss::new(workers);
            let w = rss.worker(LinkType::Ethernet, &query);
            for f in fragments(b, a, 53, 5000, 7) {
                assert_eq!(rss.worker(LinkType::Ethernet, &f), w, "{workers} workers");
            }
            let mut reversed = fragments(b, a, 53, 5000, 8);
            reversed.reverse();
            let first = rss.worker(LinkType::Ethernet, &reversed[0]);
            for f in &reversed[1..] {
                assert_eq!(rss.worker(LinkType::Ethernet, f), first);
            }
            apart += usize::from(first != w);
        }
        assert!(apart > 0, "the test would not tell the two spreads apart");
    }
}
