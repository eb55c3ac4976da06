//! The flow cache against a model that counts every packet: whatever the
//! order of packets, their times, TCP ends, full sets and timeouts, the
//! records the cache finishes (and its flush at the end) hold every
//! packet and byte exactly once, under its own flow (a biflow record's
//! answers under its key's reply); every record has at least one packet;
//! the early count is the number of records finished for lack of room.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use cfdp_export::{CacheSettings, Close, EndReason, FlowCache, Forwarding, Observed};
use cfdp_rules::FlowKey;
use proptest::prelude::*;

const S: u64 = 1_000_000_000;

fn key(i: u16) -> FlowKey {
    let v6 = i.is_multiple_of(5);
    let a = u32::from(i);
    if v6 {
        let mut src = [0u8; 16];
        src[0] = 0x20;
        src[12..].copy_from_slice(&a.to_be_bytes());
        FlowKey::v6(
            src,
            [0x20, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            17,
            4000,
            53,
        )
    } else {
        FlowKey::new(
            Ipv4Addr::from(0x0a00_0000 + a).into(),
            Ipv4Addr::new(192, 0, 2, 1).into(),
            6,
            40000,
            80,
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_packet_is_in_exactly_one_record(
        // A packet: which of the flows, the time since the one before
        // (ns), its length, its TCP end, whether it is the flow's answer,
        // whether it opens a connection (an initiator's packet only).
        steps in proptest::collection::vec(
            (
                0u16..300,
                prop_oneof![0u64..2_000_000, 0u64..20 * S],
                40u16..1500,
                prop_oneof![18 => Just(Close::No), 1 => Just(Close::Fin), 1 => Just(Close::Reset)],
                proptest::bool::ANY,
                prop_oneof![9 => Just(false), 1 => Just(true)],
            ),
            1..3000,
        ),
        biflow in proptest::bool::ANY,
    ) {
        let mut c = FlowCache::new(CacheSettings {
            capacity: 64,
            idle_ns: 15 * S,
            active_ns: 60 * S,
            biflow,
            rules: false,
        });
        let mut want: BTreeMap<FlowKey, (u64, u64)> = BTreeMap::new();
        let mut t = 1_700_000_000 * S;
        let mut records = Vec::new();
        for &(flow, gap, len, close, reply, opens) in &steps {
            t += gap;
            let k = if reply { key(flow).reply() } else { key(flow) };
            c.observe(&Observed {
                key: k,
                ts_ns: t,
                len: u32::from(len),
                port: 3,
                forwarding: Forwarding::Forwarded,
                close,
                reply,
                opens: opens && !reply,
            });
            let e = want.entry(k).or_default();
            e.0 += 1;
            e.1 += u64::from(len);
            records.extend(c.take());
            prop_assert!(c.len() <= c.capacity());
        }
        c.flush(EndReason::Forced);
        records.extend(c.take());
        prop_assert!(c.is_empty());
        let mut got: BTreeMap<FlowKey, (u64, u64)> = BTreeMap::new();
        for r in &records {
            let answers = r.reverse.unwrap_or_default();
            prop_assert!(r.packets + answers.packets >= 1, "{r:?}");
            prop_assert!(r.reverse.is_none() || biflow && answers.packets >= 1, "{r:?}");
            prop_assert!(r.first_ns <= r.last_ns, "{r:?}");
            prop_assert_eq!(r.port, 3);
            for (k, n) in [(r.key, (r.packets, r.bytes)), (r.key.reply(), (answers.packets, answers.bytes))] {
                if n.0 > 0 {
                    let e = got.entry(k).or_default();
                    e.0 += n.0;
                    e.1 += n.1;
                }
            }
        }
        prop_assert_eq!(got, want);
        let early = records.iter().filter(|r| r.end == EndReason::LackOfResources).count();
        prop_assert_eq!(early as u64, c.early());
    }
}
