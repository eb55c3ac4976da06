//! A UDP packet generator and counter for the inline benchmark
//! (`bench/inline.sh`): small datagrams as fast as one core sends them,
//! through `sendmmsg` (64 datagrams per system call: iperf3 sends one per
//! call and paces itself, and tops out far below what a forwarder carries),
//! and a receiver that counts what arrives.
//!
//! ```text
//! udp-flood send ADDR SECONDS [PAYLOAD_BYTES]   # default 18: 64-byte frames
//! udp-flood recv ADDR SECONDS                   # prints {"packets", "seconds", "kpps"}
//! ```
//!
//! Run each in its network namespace (`ip netns exec NS udp-flood …`).
#![forbid(unsafe_code)]

use std::io::IoSlice;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rustix::net::{sendmmsg, MMsgHdr, SendAncillaryBuffer, SendFlags};

const BATCH: usize = 64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: udp-flood send ADDR SECONDS [PAYLOAD] | recv ADDR SECONDS");
        std::process::exit(2)
    };
    if args.len() < 4 {
        usage();
    }
    let addr: SocketAddr = args[2].parse().unwrap_or_else(|_| usage());
    let seconds: f64 = args[3].parse().unwrap_or_else(|_| usage());
    let result = match args[1].as_str() {
        "send" => {
            let payload: usize = args
                .get(4)
                .map_or(Ok(18), |p| p.parse())
                .unwrap_or_else(|_| usage());
            send(addr, seconds, payload)
        }
        "recv" => recv(addr, seconds),
        _ => usage(),
    };
    match result {
        Ok((packets, secs)) => println!(
            "{{\"packets\": {packets}, \"seconds\": {secs:.3}, \"kpps\": {:.1}}}",
            packets as f64 / secs.max(1e-9) / 1e3
        ),
        Err(e) => {
            eprintln!("udp-flood: {e}");
            std::process::exit(1);
        }
    }
}

/// Sends for `seconds`; returns datagrams sent and the time taken.
fn send(to: SocketAddr, seconds: f64, payload: usize) -> std::io::Result<(u64, f64)> {
    let any: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().expect("address")
    } else {
        "[::]:0".parse().expect("address")
    };
    let sock = UdpSocket::bind(any)?;
    sock.connect(to)?;
    let body = vec![0x5au8; payload];
    let iov = [IoSlice::new(&body)];
    let start = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let mut sent = 0u64;
    while start.elapsed() < limit {
        let mut controls: Vec<SendAncillaryBuffer<'_, '_, '_>> =
            (0..BATCH).map(|_| SendAncillaryBuffer::default()).collect();
        let mut msgs: Vec<MMsgHdr<'_>> =
            controls.iter_mut().map(|c| MMsgHdr::new(&iov, c)).collect();
        match sendmmsg(&sock, &mut msgs, SendFlags::empty()) {
            Ok(n) => sent += n as u64,
            // A full socket buffer or an unreachable peer (ICMP) for a
            // moment: keep sending.
            Err(rustix::io::Errno::NOBUFS | rustix::io::Errno::CONNREFUSED) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((sent, start.elapsed().as_secs_f64()))
}

/// Counts datagrams from the first one for `seconds` (or until 1 s of
/// silence); returns the count and the time between first and last.
fn recv(bind: SocketAddr, seconds: f64) -> std::io::Result<(u64, f64)> {
    let sock = UdpSocket::bind(bind)?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut buf = [0u8; 2048];
    sock.recv(&mut buf)?;
    let first = Instant::now();
    let mut last = first;
    let mut n = 1u64;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let limit = Duration::from_secs_f64(seconds);
    while first.elapsed() < limit {
        match sock.recv(&mut buf) {
            Ok(_) => {
                n += 1;
                last = Instant::now();
            }
            Err(_) => break,
        }
    }
    Ok((n, (last - first).as_secs_f64()))
}
