//! Two workers on two queues (`cargo test -p cfdp-dpdk`; needs the system
//! DPDK): the same frames through a one-queue port with one worker and
//! through a two-queue port with two workers must give every frame exactly
//! once, each output port the same frames, and each flow its frames in
//! order. The two-queue port is a `net_ring` port whose "RSS" is done by
//! the injector the way NICs do it: a symmetric hash of the 5-tuple, and of
//! the addresses and protocol alone for IP fragments (which carry no ports,
//! or only in the first fragment) — so a datagram's fragments reach one
//! worker, whose fragment table gives the later fragments the first one's
//! ports.
#![cfg(dpdk)]

mod common;

use std::sync::atomic::AtomicBool;

use cfdp_control::RuleStore;
use cfdp_dpdk::backend;
use cfdp_dpdk::DpdkOptions;
use cfdp_dpdk::Eal;
use cfdp_engine::Mode;
use cfdp_engine::Totals;
use cfdp_packet::{decode, Decoded, Frag, LinkType};
use cfdp_rules::parse_rule_file;
use cfdp_testkit::captures::{self as gen, Expect, GenFrame};

const QUEUES: u16 = 2;
const PORTS: usize = 3;

/// The receive queue a NIC's symmetric RSS would pick.
fn rss_queue(frame: &[u8], queues: u16) -> usize {
    let Decoded::Ip(ip) = decode(LinkType::Ethernet, frame) else {
        return 0;
    };
    let k = ip.key;
    // Symmetric: the same for both directions (addresses and ports
    // combined order-independently).
    let addr = |a: &[u8; 16]| {
        a.iter()
            .fold(0u64, |h, &b| h.wrapping_mul(31) ^ u64::from(b))
    };
    let mut h = addr(&k.src) ^ addr(&k.dst) ^ u64::from(k.proto);
    if matches!(ip.frag, Frag::None) {
        h ^= u64::from(k.sport ^ k.dport) << 20;
    }
    h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 33) as usize % usize::from(queues)
}

/// Output port index of an expected verdict.
fn port_of(e: Expect) -> Option<usize> {
    match e {
        Expect::Forward => Some(0),
        Expect::Redirect(p) => Some(usize::from(p)),
        Expect::Drop => None,
    }
}

/// What one run produced: frames per output port per transmit queue, and
/// the totals.
struct Outcome {
    out: Vec<Vec<Vec<Vec<u8>>>>,
    totals: Totals,
    per_worker: Vec<u64>,
    tx_dropped: u64,
}

fn run(eal: &Eal, tag: &str, frames: &[GenFrame], queues: u16) -> Outcome {
    let mut ports = Vec::new();
    let mut inject = Vec::new();
    let mut collect = Vec::new();
    for p in 0..PORTS {
        let (name, rx, tx) = eal
            .ring_port_queues(&format!("{tag}{p}"), 4096, queues)
            .expect("ring port");
        ports.push(name);
        if p == 0 {
            inject = rx;
        }
        collect.push(tx);
    }
    let pool = eal
        .mempool(&format!("{tag}_inject"), 8191, 0)
        .expect("pool");
    for (q, ring) in inject.iter_mut().enumerate() {
        let mine: Vec<&[u8]> = frames
            .iter()
            .filter(|f| rss_queue(&f.data, queues) == q)
            .map(|f| &f.data[..])
            .collect();
        assert_eq!(ring.inject(&pool, &mine), mine.len(), "injected");
    }
    let opts = DpdkOptions {
        rx_ports: vec![ports[0].clone()],
        tx_ports: ports.clone(),
        xconnect: Vec::new(),
        workers: queues,
        worker_cpus: Vec::new(),
        mempool_size: 4095,
        descriptors: 512,
        burst: 32,
        stop_when_idle_ms: 300,
        ..Default::default()
    };
    let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
    let (_store, cx) = RuleStore::fixed(&rules[..], Mode::Verify, usize::from(queues)).unwrap();
    let report = backend::run(
        eal,
        &opts,
        &cx,
        &AtomicBool::new(false),
        &Default::default(),
    )
    .expect("run");
    Outcome {
        out: collect
            .iter_mut()
            .map(|qs| qs.iter_mut().map(cfdp_dpdk::Ring::collect).collect())
            .collect(),
        totals: cx.stats.totals(),
        per_worker: cx
            .stats
            .workers
            .iter()
            .map(|w| w.counters.load().totals.packets)
            .collect(),
        tx_dropped: report.tx_dropped,
    }
}

fn sorted(mut v: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    v.sort();
    v
}

#[test]
#[allow(clippy::too_many_lines)] // a scenario read top to bottom
fn two_workers_on_two_queues_give_every_frame_once_and_the_one_worker_verdicts() {
    let eal = common::vdev_eal("mq", 512, &[]);
    // The hand-worked capture (fragments in and out of order, IPv6,
    // non-IP, malformed) and enough flows to fill both queues.
    let mut frames = gen::mixed();
    // Fragments ahead of their first fragment: held, then released through
    // the backend's copy path with the first fragment's verdict.
    frames.extend(gen::reordered_fragments());
    frames.extend(gen::soak(64, 16));
    frames.extend(gen::pairs(256));
    let on_queue = |q: usize| {
        frames
            .iter()
            .filter(|f| rss_queue(&f.data, QUEUES) == q)
            .count()
    };
    assert!(on_queue(0) > 200 && on_queue(1) > 200, "RSS spread");

    let one = run(&eal, "one", &frames, 1);
    let two = run(&eal, "two", &frames, QUEUES);

    for (name, o) in [("1 worker", &one), ("2 workers", &two)] {
        assert_eq!(o.tx_dropped, 0, "{name}");
        assert_eq!(o.totals.packets, frames.len() as u64, "{name}: packets");
    }
    assert!(
        two.per_worker.iter().all(|&p| p > 200),
        "{:?}",
        two.per_worker
    );
    assert_eq!(two.per_worker.iter().sum::<u64>(), frames.len() as u64);
    // The same verdicts, fragments resolved alike.
    for (what, a, b) in [
        ("dropped", one.totals.dropped, two.totals.dropped),
        ("forwarded", one.totals.forwarded, two.totals.forwarded),
        ("redirected", one.totals.redirected, two.totals.redirected),
        ("matched", one.totals.matched, two.totals.matched),
        (
            "fragments_resolved",
            one.totals.fragments_resolved,
            two.totals.fragments_resolved,
        ),
        (
            "fragments_unresolved",
            one.totals.fragments_unresolved,
            two.totals.fragments_unresolved,
        ),
        (
            "fragments_released",
            one.totals.fragments_released,
            two.totals.fragments_released,
        ),
        (
            "fragments_timed_out",
            one.totals.fragments_timed_out,
            two.totals.fragments_timed_out,
        ),
    ] {
        assert_eq!(a, b, "{what}: 1 worker {a}, 2 workers {b}");
    }
    assert_eq!(one.totals.fragments_released, gen::REORDERED_RELEASED);
    for port in 0..PORTS {
        let expected: Vec<&GenFrame> = frames
            .iter()
            .filter(|f| port_of(f.verdict) == Some(port))
            .collect();
        let merged = |o: &Outcome| sorted(o.out[port].concat());
        let want = sorted(expected.iter().map(|f| f.data.clone()).collect());
        assert_eq!(merged(&one), want, "port {port}, 1 worker");
        assert_eq!(merged(&two), want, "port {port}, 2 workers");
        // Worker q transmits on queue q: its frames for this port leave
        // in the order they arrived on receive queue q (flow order kept;
        // fragments aside: held ones leave after their first fragment).
        let whole = |f: &Vec<u8>| match decode(LinkType::Ethernet, f) {
            Decoded::Ip(ip) => matches!(ip.frag, Frag::None),
            _ => true,
        };
        for q in 0..usize::from(QUEUES) {
            let in_order: Vec<Vec<u8>> = expected
                .iter()
                .filter(|f| rss_queue(&f.data, QUEUES) == q && whole(&f.data))
                .map(|f| f.data.clone())
                .collect();
            let got: Vec<Vec<u8>> = two.out[port][q]
                .iter()
                .filter(|f| whole(f))
                .cloned()
                .collect();
            assert_eq!(got, in_order, "port {port}, queue {q}");
        }
    }
    eal.cleanup();
}
