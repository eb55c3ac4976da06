//! Receive checksum offload on a real device (`cargo test -p cfdp-dpdk
//! --test checksum_offload`; needs the system DPDK and root for the tap
//! device): a `net_tap` port, whose PMD checks the IPv4, TCP and UDP
//! checksums of what it receives when asked to (its receive offloads),
//! gets UDP datagrams the kernel sends out of the tap interface. Each must
//! come with the device's word that its checksum was checked
//! (`RxBurst::l4_vouched`, what the worker hands connection tracking so it
//! does not sum the segment again); an ICMP echo, which no receive check
//! covers, and a frame copied into an mbuf by cfdp must not. One test: the
//! EAL is initialised once per test binary. Without root or `ip` it says
//! so and returns — unless `REQUIRE_INLINE_LAB` is set (CI sets it), which
//! makes that a failure, as for the inline lab.
#![cfg(dpdk)]

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use cfdp_dpdk::{RxBurst, StartedPort};
use cfdp_packet::{decode, Decoded, LinkType};

const IFACE: &str = "cfdpcsum0";
const HOST: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);

fn ip(args: &str) {
    let st = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .expect("ip");
    assert!(st.success(), "ip {args}");
}

/// Why the tap device cannot be made here, if it cannot.
fn unavailable() -> Option<&'static str> {
    let why = if !rustix::process::geteuid().is_root() {
        Some("not root")
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("no /dev/net/tun")
    } else if !Command::new("ip")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        Some("no `ip` (apt-get install iproute2)")
    } else {
        None
    };
    if let Some(w) = why {
        assert!(
            std::env::var_os("REQUIRE_INLINE_LAB").is_none(),
            "REQUIRE_INLINE_LAB is set, but the tap test cannot run: {w}"
        );
        println!("checksum_offload: skipped ({w})");
    }
    why
}

#[test]
fn the_tap_devices_checked_udp_checksums_reach_the_worker() {
    if unavailable().is_some() {
        return;
    }
    let eal = common::vdev_eal(
        "csum",
        256,
        &["--vdev".into(), format!("net_tap0,iface={IFACE}")],
    );
    let pool = eal.mempool("csum", 1023, 0).expect("pool");
    let id = eal.port_by_name("net_tap0").expect("the tap port");
    let mut port = StartedPort::start(&eal, id, 1, 1, 512, &pool).expect("port");
    assert!(port.l4_checksums(), "net_tap offers TCP and UDP checks");
    let (mut rx, _tx) = port.queues().expect("queues");

    // The kernel's side: an address, and the peer's MAC set by hand (no
    // ARP), so a datagram to the peer leaves through the tap at once.
    ip(&format!("addr add {HOST}/30 dev {IFACE}"));
    ip(&format!("link set {IFACE} up"));
    ip(&format!(
        "neigh replace {PEER} lladdr 02:00:00:00:00:02 dev {IFACE} nud permanent"
    ));
    let sock = UdpSocket::bind((HOST, 0)).expect("a socket on the tap's address");
    let ping = Command::new("ping")
        .args(["-c", "1", "-W", "1", "-I", IFACE, &PEER.to_string()])
        .output();

    sock.send_to(b"checked", (PEER, 9)).expect("send");
    sock.send_to(b"again", (PEER, 9)).expect("send");
    // Polled until both datagrams came (the kernel also sends its own
    // IPv6 frames on a link that comes up: skipped); the deadline only
    // ends a run whose datagrams never come.
    let mut burst = RxBurst::new();
    let (mut udp, mut icmp) = (Vec::new(), Vec::new());
    let mut seen = Vec::new();
    let start = Instant::now();
    while udp.len() < 2 && start.elapsed() < Duration::from_secs(10) {
        let n = burst.receive_from(&mut rx[0], 32);
        for i in 0..n {
            let (data, _) = burst.frame(i);
            if let Decoded::Ip(p) = decode(LinkType::Ethernet, data) {
                match p.key.proto {
                    17 if p.key.dport == 9 => {
                        udp.push(burst.l4_vouched(i));
                        seen = data.to_vec();
                    }
                    1 => icmp.push(burst.l4_vouched(i)),
                    _ => {}
                }
            }
        }
    }
    assert!(udp.len() >= 2, "the datagrams did not reach the tap port");
    assert!(
        udp.iter().all(|&v| v),
        "UDP the device checked, not vouched for: {udp:?}"
    );
    if ping.is_ok() {
        assert!(
            icmp.iter().all(|&v| !v),
            "ICMP vouched for by a check that does not cover it: {icmp:?}"
        );
    }
    // The same datagram copied into an mbuf by cfdp: nothing checked it.
    assert_eq!(burst.copy_in(&pool, &[&seen]), 1);
    assert!(!burst.l4_vouched(0));
}
