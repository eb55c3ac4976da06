//! Header traces as captures: each 5-tuple of a trace (ClassBench's, or
//! any list of keys) becomes one Ethernet frame, so `cfdp replay` runs the
//! same work the classifier benchmarks do, end to end.
//!
//! TCP and UDP keys become 64-byte TCP and UDP frames. Other protocols
//! carry no ports on the wire: their frames are IPv4 with that protocol
//! and no transport header, and the data plane reads them with ports 0 —
//! ClassBench's traces give such packets ports anyway, which `rte_acl`
//! compares as fields, so [`wire_key`] says what a replay classifies.

use cfdp_rules::{proto, FlowKey};

use crate::captures::{Expect, GenFrame};

/// The key a replay of [`frame`]'s output decodes: ports only for TCP and
/// UDP.
pub fn wire_key(k: &FlowKey) -> FlowKey {
    let mut w = *k;
    if !(k.proto == proto::TCP || k.proto == proto::UDP) {
        w.sport = 0;
        w.dport = 0;
    }
    w
}

/// One frame carrying IPv4 key `k` (IPv6 keys are not in ClassBench's
/// traces: `None`).
pub fn frame(k: &FlowKey) -> Option<Vec<u8>> {
    if k.v6 {
        return None;
    }
    let ip = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
    let eth = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let l3 = eth.ipv4(ip(&k.src), ip(&k.dst), 64);
    let mut v = Vec::with_capacity(64);
    // Building into a Vec fails only on an impossible header: no frame.
    let written = match k.proto {
        proto::TCP => l3
            .tcp(k.sport, k.dport, 1, 1024)
            .write(&mut v, &[0u8; 6])
            .is_ok(),
        proto::UDP => l3.udp(k.sport, k.dport).write(&mut v, &[0u8; 18]).is_ok(),
        p => l3
            .write(&mut v, etherparse::IpNumber(p), &[0u8; 26])
            .is_ok(),
    };
    written.then_some(())?;
    Some(v)
}

/// Frames for `keys`, 1 µs apart.
pub fn frames(keys: &[FlowKey]) -> Vec<GenFrame> {
    keys.iter()
        .enumerate()
        .filter_map(|(i, k)| {
            Some(GenFrame {
                data: frame(k)?,
                ts_ns: 1_000 * i as u64,
                verdict: Expect::Forward,
                note: "trace",
            })
        })
        .collect()
}
