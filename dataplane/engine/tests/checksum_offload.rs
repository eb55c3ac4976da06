//! A NIC's receive checksum verdict (`PacketRef::l4_vouched`, set from
//! DPDK's `RTE_MBUF_F_RX_L4_CKSUM_*` flags) stands in for connection
//! tracking's own sum of TCP and UDP, as Linux's conntrack trusts a
//! driver's `CHECKSUM_UNNECESSARY`; without it the segment is summed, and a
//! wrong checksum makes the packet invalid for its connection.

use std::sync::Arc;

use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_engine::{
    LiveStats, Mode, Op, PacketRef, RuleRef, Tables, Verdict, Worker, WorkerContext, WorkerOptions,
};
use cfdp_filter::{Config, Filter};
use cfdp_packet::LinkType;
use cfdp_rules::{Action, Allowing, FlowKey, HashSecret};
mod common;
use common::frame;

fn packet(data: &[u8], ts_ns: u64, l4_vouched: bool) -> PacketRef<'_> {
    PacketRef {
        link: LinkType::Ethernet,
        ts_ns,
        orig_len: data.len() as u32,
        data,
        l4_vouched,
    }
}

/// An answer whose UDP checksum is wrong: invalid for its connection
/// (not established) when nothing vouched for it, established when the
/// NIC did; the request that opened the connection is summed and right.
#[test]
fn a_checksum_the_nic_vouched_for_is_not_summed_again() {
    let request = FlowKey::v4([10, 0, 0, 1], [192, 0, 2, 1], 17, 40000, 53);
    let filter = Arc::new(Filter::new(Config::cuckoo(1024, 16)).unwrap());
    let (mut w, r) =
        left_right::new_from_empty::<Tables, Op>(Tables::new(Arc::clone(&filter), false));
    let stats = Arc::new(LiveStats::new(1, 16));
    assert!(stats.ensure_slot(0, 1));
    filter.insert_hash(request.hash(), 0).unwrap();
    let action = Action::Track(Allowing::Allow);
    w.append(Op::InsertFlow(request, RuleRef { action, slot: 0 }));
    w.publish();
    let table = ConnTable::new(1024, Timeouts::default(), HashSecret::from_seed(9)).unwrap();
    let table = Arc::new(table);
    let cx = WorkerContext {
        mode: Mode::Verify,
        readers: r.factory(),
        stats: Arc::clone(&stats),
        conntrack: Some(Arc::clone(&table)),
    };
    let mut worker = Worker::new(&cx, 0, WorkerOptions::default());
    let handle = cx.readers.handle();
    let tables = handle.enter().expect("published tables");

    let opener = frame(&request);
    let mut answer = frame(&request.reply());
    // The UDP checksum (bytes 40..42 of the frame) one off.
    let c = u16::from_be_bytes([answer[40], answer[41]]) ^ 0x0100;
    answer[40..42].copy_from_slice(&c.to_be_bytes());
    let mut verdicts = [Verdict::Drop; 1];
    worker.process(&tables, &[packet(&opener, 1, false)], &mut verdicts);
    assert_eq!(stats.totals().ct_opened, 1, "the request opened it");

    worker.process(&tables, &[packet(&answer, 2, false)], &mut verdicts);
    assert_eq!(stats.totals().ct_established, 0, "a wrong sum passed");
    assert_eq!(table.counts().invalid, 1);

    worker.process(&tables, &[packet(&answer, 3, true)], &mut verdicts);
    assert_eq!(
        stats.totals().ct_established,
        1,
        "the NIC's verdict was not taken"
    );
    assert_eq!(table.counts().invalid, 1, "summed again");
}
