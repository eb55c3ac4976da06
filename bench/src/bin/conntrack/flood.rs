//! The worker under SYN and UDP floods (unanswered and answered) beside
//! established traffic, and the conntrack issue's answered flood at the
//! table itself.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use cfdp_bench::{median, results_path, write_csv};
use cfdp_conntrack::state::tcp::{ACK, FIN, SYN};
use cfdp_conntrack::{ConnTable, State, Timeouts};
use cfdp_rules::{FlowKey, HashSecret};

use crate::common::{establish, percentile, TRACKED};

/// A 64-byte TCP frame of `k` with `flags`.
fn tcp_frame(k: &FlowKey, flags: u8) -> Vec<u8> {
    let ip = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
    let mut h = etherparse::TcpHeader::new(k.sport, k.dport, 1, 65535);
    h.syn = flags & SYN != 0;
    h.ack = flags & ACK != 0;
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(ip(&k.src), ip(&k.dst), 64)
        .tcp_header(h);
    let mut out = Vec::new();
    b.write(&mut out, &[]).expect("frame");
    out
}

/// Client `i` of 100.64.0.0/10 to the server 10.0.0.1:443.
fn client(i: u32) -> FlowKey {
    FlowKey::new(
        IpAddr::V4(Ipv4Addr::from(0x6440_0000 + (i >> 4))),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        6,
        1024 + (i & 15) as u16 * 4000,
        443,
    )
}

/// A spoofed client of the flood (from elsewhere, never the same twice).
fn spoofed(r: u64) -> FlowKey {
    FlowKey::new(
        IpAddr::V4(Ipv4Addr::from(0xc600_0000 | (r as u32 & 0x00ff_ffff))),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        6,
        1024 + (r >> 32) as u16 % 60_000,
        443,
    )
}

/// A 64-byte UDP frame of `k`.
fn udp_frame(k: &FlowKey) -> Vec<u8> {
    let ip = |a: &[u8; 16]| [a[0], a[1], a[2], a[3]];
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(ip(&k.src), ip(&k.dst), 64)
        .udp(k.sport, k.dport);
    let mut out = Vec::new();
    b.write(&mut out, &[0; 18]).expect("frame");
    out
}

/// A spoofed client's datagram to the server's UDP service (10.0.0.1:53).
fn spoofed_udp(r: u64) -> FlowKey {
    FlowKey {
        proto: 17,
        dport: 53,
        ..spoofed(r)
    }
}

/// A flood's traffic, unanswered and answered: half ACKs of the `n`
/// established connections, half spoofed openers (`key` of a random
/// number, `frame(k, false)`); and a third each of ACKs, spoofed openers
/// and the server's answer to each (`frame(k, true)`). `seed` seeds the
/// spoofing.
fn flood_pair(
    quick: bool,
    n: u32,
    seed: u64,
    key: fn(u64) -> FlowKey,
    frame: fn(&FlowKey, bool) -> Vec<u8>,
) -> [Vec<Vec<u8>>; 2] {
    let pool = if quick { 1u32 << 16 } else { 1 << 18 };
    let mut rng = cfdp_bench::SplitMix::new(seed);
    let unanswered = (0..pool)
        .map(|i| {
            if i % 2 == 0 {
                tcp_frame(&client(i % n), ACK)
            } else {
                frame(&key(rng.next()), false)
            }
        })
        .collect();
    let mut r = 0;
    let answered = (0..pool)
        .map(|i| match i % 3 {
            0 => tcp_frame(&client(i % n), ACK),
            1 => {
                r = rng.next();
                frame(&key(r), false)
            }
            // The server's answer to the opener before it.
            _ => frame(&key(r), true),
        })
        .collect();
    [unanswered, answered]
}

/// The floods' traffic: ACKs of the `n` established connections alone;
/// then SYN floods (the answer a SYN-ACK) and UDP floods (the answer a
/// datagram back), each unanswered and answered ([`flood_pair`]).
fn flood_pools(quick: bool, n: u32) -> [Vec<Vec<u8>>; 5] {
    let pool = if quick { 1u32 << 16 } else { 1 << 18 };
    let established = (0..pool).map(|i| tcp_frame(&client(i % n), ACK)).collect();
    let [syn, syn_answered] = flood_pair(quick, n, 9, spoofed, |k, answer| {
        if answer {
            tcp_frame(&k.reply(), SYN | ACK)
        } else {
            tcp_frame(k, SYN)
        }
    });
    let [udp, udp_answered] = flood_pair(quick, n, 11, spoofed_udp, |k, answer| {
        udp_frame(&if answer { k.reply() } else { *k })
    });
    [established, syn, syn_answered, udp, udp_answered]
}

/// The worker under a SYN flood: established traffic alone, then mixed
/// half and half with spoofed SYNs a stateful rule lets open connections.
/// `only`: the one variant to run (for a profiler), else all.
pub(crate) fn flood_rows(quick: bool, rounds: usize, only: Option<&str>) -> Vec<String> {
    use cfdp_engine::{run_worker, Limit, MemoryBackend, Mode, Worker, WorkerOptions};
    let n = 100_000u32;
    let rules = cfdp_rules::parse_rule_file(
        r#"{"rules": [
          {"id": 1, "priority": 10, "match": {"dst_prefix": "10.0.0.1/32", "proto": "tcp", "dport": 443}, "action": "allow", "track": true},
          {"id": 2, "priority": 10, "match": {"dst_prefix": "10.0.0.1/32", "proto": "udp", "dport": 53}, "action": "allow", "track": true},
          {"id": 9, "priority": 1, "match": {"src_prefix": "0.0.0.0/0"}, "action": "drop"}]}"#,
    )
    .expect("rules");
    let [established, mixed, answered, udp, udp_answered] = flood_pools(quick, n);
    let secs = if quick { 0.2 } else { 0.6 };
    let mut rows = Vec::new();
    println!(
        "SYN and UDP floods, 100k established connections, table of 150k, one worker (median of {rounds})"
    );
    let variants: Vec<_> = [
        ("established", &established),
        ("established+synflood", &mixed),
        ("established+answered-synflood", &answered),
        ("established+udpflood", &udp),
        ("established+answered-udpflood", &udp_answered),
    ]
    .into_iter()
    .filter(|(name, _)| only.is_none_or(|o| o == *name))
    .collect();
    let mut mpps = vec![Vec::new(); variants.len()];
    let mut passed = vec![Vec::new(); variants.len()];
    let mut invalid = vec![Vec::new(); variants.len()];
    // Rounds alternating between the two: the ratio is of runs side by
    // side, not of two blocks a drift of the machine apart.
    for _ in 0..rounds {
        for (v, (_, frames)) in variants.iter().enumerate() {
            // A fresh table and node each round: the flood fills it.
            let table = std::sync::Arc::new(
                ConnTable::new(150_000, Timeouts::default(), HashSecret::from_seed(2))
                    .expect("table"),
            );
            let (store, cx) = cfdp_control::RuleStore::fixed_tracked(
                &rules[..],
                Mode::Verify,
                1,
                Some(std::sync::Arc::clone(&table)),
            )
            .expect("rules load");
            let slot = 0;
            for i in 0..n {
                let k = client(i);
                table.open(&k, SYN, slot, TRACKED, 60, 0).expect("room");
                table.lookup(&k.reply(), SYN | ACK, 60, 0);
                table.lookup(&k, ACK, 60, 0);
            }
            let mut w = Worker::new(&cx, 0, WorkerOptions::default());
            let tables = cx.readers.handle();
            let mut backend = MemoryBackend::new(frames, Limit::Seconds(secs));
            let start = Instant::now();
            let done = run_worker(&mut backend, &mut w, &tables).packets;
            mpps[v].push(done as f64 / start.elapsed().as_secs_f64() / 1e6);
            // Every established connection still in the table, established
            // (its packets then pass).
            let alive = table.counts().by_state[State::TcpEstablished.index()];
            passed[v].push(alive as f64 / f64::from(n));
            invalid[v].push(table.counts().invalid as f64 / done as f64);
            drop(store);
        }
    }
    for (v, (name, _)) in variants.iter().enumerate() {
        let (m, p) = (median(&mut mpps[v]), median(&mut passed[v]));
        let bad = median(&mut invalid[v]);
        println!(
            "  {name:<22} {m:.2} Mpps, established connections kept {p:.4}, invalid packets {bad:.4}"
        );
        rows.push(format!("flood,{name},1,{n},{m:.3},,,,,{p:.5},"));
    }
    rows
}

/// The conntrack issue's answered flood, at the table: a table of 150k
/// connections (quick: 15k) holding 100k established (quick: 10k), then
/// ten times its capacity of spoofed SYNs each answered by the server's
/// SYN-ACK (SYN_RECV entries, which early drop takes), and among them,
/// every tenth step, a legitimate client's short connection (handshake,
/// then closed both ways). Each flood SYN's
/// open is timed alone (one clock read each side); afterwards every
/// established connection must still be there. Then, for what a refused
/// open costs, as many spoofed SYNs against a table full of established
/// connections.
pub(crate) fn answered_flood(quick: bool) {
    let (cap, est) = if quick {
        (15_000u32, 10_000u32)
    } else {
        (150_000, 100_000)
    };
    let mut rng = cfdp_bench::SplitMix::new(11);
    let f = answered_table(cap, est, &mut rng);
    let (mut opened, mut refused) = (f.opened, refused_in_full_table(cap, &mut rng));
    let stat = |v: &mut Vec<u64>| {
        v.sort_unstable();
        if v.is_empty() {
            (0, 0, 0, 0)
        } else {
            let max = *v.last().expect("not empty");
            (
                percentile(v, 0.5),
                percentile(v, 0.99),
                percentile(v, 0.999),
                max,
            )
        }
    };
    let (o, r) = (stat(&mut opened), stat(&mut refused));
    let legit_share = f64::from(f.legit_ok) / f64::from(f.legit.max(1));
    let kept_share = f.kept as f64 / f64::from(est);
    println!(
        "answered SYN flood of 10x the capacity ({cap}), {est} established: opened {} (p50 {} ns, p99 {} ns, p99.9 {} ns); a full table's refused opens {} (p50 {} ns, p99 {} ns, max {} ns); legitimate short connections completed {legit_share:.4}, established kept {kept_share:.4}",
        opened.len(), o.0, o.1, o.2, refused.len(), r.0, r.1, r.3,
    );
    let path = results_path("conntrack_answered_flood.csv");
    write_csv(
        &path,
        "capacity,established,flood_syns,opened,open_p50_ns,open_p99_ns,open_p999_ns,open_max_ns,refused,refused_p50_ns,refused_p99_ns,refused_max_ns,legit,legit_completed_share,established_kept_share",
        &[format!(
            "{cap},{est},{},{},{},{},{},{},{},{},{},{},{},{legit_share:.4},{kept_share:.5}",
            10 * cap,
            opened.len(),
            o.0,
            o.1,
            o.2,
            o.3,
            refused.len(),
            r.0,
            r.1,
            r.3,
            f.legit
        )],
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// What the answered flood did to the table.
struct Answered {
    /// Each flood SYN's open, ns.
    opened: Vec<u64>,
    legit: u32,
    legit_ok: u32,
    /// Established connections still there, established, after it.
    kept: usize,
}

/// The answered flood into a table of `cap` holding `est` established.
fn answered_table(cap: u32, est: u32, rng: &mut cfdp_bench::SplitMix) -> Answered {
    let t =
        ConnTable::new(cap as usize, Timeouts::default(), HashSecret::from_seed(5)).expect("table");
    for i in 0..est {
        establish(&t, &client(i));
    }
    let mut opened = Vec::new();
    let (mut legit, mut legit_ok) = (0u32, 0u32);
    for step in 0..10 * cap {
        let k = spoofed(rng.next());
        let s = Instant::now();
        let r = t.open(&k, SYN, 1, TRACKED, 60, 1);
        opened.push(s.elapsed().as_nanos() as u64);
        if r.is_ok() {
            t.lookup(&k.reply(), SYN | ACK, 60, 1);
        }
        if step % 10 == 0 {
            let c = client(est + legit);
            legit += 1;
            if t.open(&c, SYN, 1, TRACKED, 60, 1).is_ok() {
                t.lookup(&c.reply(), SYN | ACK, 60, 1);
                legit_ok += u32::from(t.lookup(&c, ACK, 60, 1).is_some());
                // A short connection: closed both ways (TIME_WAIT, which
                // early drop may take).
                t.lookup(&c, FIN | ACK, 60, 1);
                t.lookup(&c.reply(), FIN | ACK, 60, 1);
                t.lookup(&c, ACK, 60, 1);
            }
        }
    }
    let kept = (0..est)
        .filter(|&i| t.peek(&client(i)).map(|h| h.state) == Some(State::TcpEstablished))
        .count();
    Answered {
        opened,
        legit,
        legit_ok,
        kept,
    }
}

/// What a refused open costs: `cap` spoofed SYNs against a table full of
/// established connections, where every early drop's scan (64 slots at
/// most) finds nothing to take. Each refused open's ns.
fn refused_in_full_table(cap: u32, rng: &mut cfdp_bench::SplitMix) -> Vec<u64> {
    let full =
        ConnTable::new(cap as usize, Timeouts::default(), HashSecret::from_seed(6)).expect("table");
    for i in 0..cap {
        establish(&full, &client(i));
    }
    let mut refused = Vec::new();
    for _ in 0..cap {
        let k = spoofed(rng.next());
        let s = Instant::now();
        let r = full.open(&k, SYN, 1, TRACKED, 60, 1);
        let ns = s.elapsed().as_nanos() as u64;
        assert!(
            r.is_err(),
            "a full table of established connections took a SYN"
        );
        refused.push(ns);
    }
    refused
}
