//! The DPDK backend in-process, on `net_ring` ports (`cargo test -p
//! cfdp-dpdk`; needs the system DPDK): the frames of `pcap/mixed.pcap` are
//! injected into a ring, the real worker loop forwards them, and each
//! output ring must hold exactly the frames whose hand-worked verdict (in
//! `cfdp_testkit::captures`) sends them there, in order. One test: the EAL is initialised
//! once per test binary.
#![cfg(dpdk)]

mod common;

use std::sync::atomic::AtomicBool;

use cfdp_control::RuleStore;
use cfdp_dpdk::backend;
use cfdp_dpdk::DpdkOptions;
use cfdp_engine::Mode;
use cfdp_rules::parse_rule_file;
use cfdp_testkit::captures::{self as gen, Expect};

#[test]
fn frames_injected_through_net_ring_get_their_hand_worked_verdicts() {
    let eal = common::vdev_eal("ring", 256, &[]);
    let (n0, mut inject, mut out0) = eal.ring_port("ring0", 1024).expect("ring0");
    let (n1, _, mut out1) = eal.ring_port("ring1", 1024).expect("ring1");
    let (n2, _, mut out2) = eal.ring_port("ring2", 1024).expect("ring2");
    let opts = DpdkOptions {
        rx_ports: vec![n0.clone()],
        tx_ports: vec![n0, n1, n2],
        xconnect: Vec::new(),
        workers: 1,
        worker_cpus: vec![0],
        mempool_size: 4095,
        descriptors: 512,
        burst: 32,
        stop_when_idle_ms: 300,
        ..Default::default()
    };
    let pool = eal.mempool("inject", 1023, 0).expect("pool");
    let frames = gen::mixed();
    let data: Vec<&[u8]> = frames.iter().map(|f| &f.data[..]).collect();
    assert_eq!(inject.inject(&pool, &data), frames.len());

    let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
    let (_store, cx) = RuleStore::fixed(&rules[..], Mode::Verify, 1).unwrap();
    let report = backend::run(
        &eal,
        &opts,
        &cx,
        &AtomicBool::new(false),
        &Default::default(),
    )
    .expect("run");
    assert_eq!(report.tx_dropped, 0);

    let want = |port: Option<u16>| -> Vec<Vec<u8>> {
        frames
            .iter()
            .filter(|f| match f.verdict {
                Expect::Forward => port == Some(0),
                Expect::Redirect(p) => port == Some(p),
                Expect::Drop => false,
            })
            .map(|f| f.data.clone())
            .collect()
    };
    assert_eq!(out0.collect(), want(Some(0)), "forwarded frames");
    assert_eq!(out1.collect(), want(Some(1)), "port 1");
    assert_eq!(out2.collect(), want(Some(2)), "port 2");
    let t = cx.stats.totals();
    assert_eq!(t.packets, frames.len() as u64);
    assert_eq!(t.dropped, gen::mixed_expected().dropped);
    eal.cleanup();
}
