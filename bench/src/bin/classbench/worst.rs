//! Worst cases: a crafted set of many shapes (the tuple-space explosion),
//! port-heavy buckets, and the compile's p99 while rules change.

use std::time::Instant;

use cfdp_bench::{median, BurstMatcher};
use cfdp_engine::acl::AclClassifier;
use cfdp_rules::{AclMatch, AclRule, Action, FlowKey, IpPrefix, PortRange};

use crate::measure::{rates, store_of};

/// Tuple Space Explosion: a rule for every pair of source and destination
/// prefix lengths (33 × 33 shapes, each around its own addresses), and a
/// trace of three packets per rule: the rule's own addresses; the same
/// with another protocol (a miss); and the rule's protocol with the low 20
/// bits of both addresses scrambled — in the same /12s as every rule, so
/// the classifier's cuts on the leading bits pass it to every table, and
/// only short, low-priority prefixes match it (the most tables probed).
/// The table bound keeps the tables a packet probes, whatever the shapes.
pub(crate) fn explosion(rounds: usize) -> (usize, f64) {
    let mut rules = Vec::new();
    let mut keys = Vec::new();
    let mut id = 0u32;
    for s in 0..=32u8 {
        for d in 0..=32u8 {
            id += 1;
            let a = |x: u32| {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&x.to_be_bytes());
                b
            };
            let (sa, da) = (
                a(0x0a00_0000 ^ id.rotate_left(7)),
                a(0xc000_0000 ^ id.rotate_left(11)),
            );
            let prefix = |addr: [u8; 16], len| {
                IpPrefix::new(false, IpPrefix::mask(false, &addr, len), len).unwrap()
            };
            rules.push(AclRule {
                id,
                priority: id,
                matcher: AclMatch::new(
                    prefix(sa, s),
                    prefix(da, d),
                    Some(6),
                    PortRange::ANY,
                    PortRange::ANY,
                )
                .expect("a valid match"),
                action: Action::Drop,
            });
            keys.push(FlowKey {
                v6: false,
                src: sa,
                dst: da,
                proto: 6,
                sport: 1,
                dport: 2,
            });
            keys.push(FlowKey {
                v6: false,
                src: sa,
                dst: da,
                proto: 17,
                sport: 1,
                dport: 2,
            });
            let h = id.wrapping_mul(2_654_435_761);
            keys.push(FlowKey {
                v6: false,
                src: a(0x0a00_0000 ^ (h & 0x000f_ffff)),
                dst: a(0xc000_0000 ^ (h.rotate_left(16) & 0x000f_ffff)),
                proto: 6,
                sport: 1,
                dport: 2,
            });
        }
    }
    let c = AclClassifier::with_rules(&rules).expect("unique ids");
    let (single, _) = rates(&c, &keys, rounds);
    (c.tables(), single)
}

/// `--ports`: the port-range worst case (see the module docs).
pub(crate) fn ports(rounds: usize) -> Vec<(&'static str, serde_json::Value)> {
    let v4 = |a: [u8; 4], len: u8| {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&a);
        IpPrefix::new(false, b, len).expect("a valid prefix")
    };
    let rules: Vec<AclRule> = (0..2000u32)
        .map(|i| {
            let lo = (i * 16) as u16;
            AclRule {
                id: i + 1,
                priority: i,
                matcher: AclMatch::new(
                    v4([10, 0, 0, 0], 8),
                    v4([192, 168, 0, 0], 16),
                    Some(6),
                    PortRange::ANY,
                    PortRange::new(lo, lo + 31).expect("lo <= hi"),
                )
                .expect("a valid match"),
                action: Action::Drop,
            }
        })
        .collect();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let keys: Vec<FlowKey> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let h = x.to_le_bytes();
            FlowKey::v4(
                [10, h[0], h[1], h[2]],
                [192, 168, h[3], h[4]],
                6,
                40000,
                u16::from_le_bytes([h[5], h[6]]) % 34_000,
            )
        })
        .collect();
    // One at a time into the live layer, each order on a fresh classifier.
    let load = |order: &mut dyn Iterator<Item = &AclRule>| {
        let mut c = AclClassifier::new();
        let t = Instant::now();
        for r in order {
            c.insert(*r).expect("unique ids");
        }
        (t.elapsed().as_secs_f64(), c)
    };
    // Alternated, five each (the first load also pays the allocator's
    // first growth): medians.
    let (mut asc, mut desc) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        asc.push(load(&mut rules.iter()).0);
        desc.push(load(&mut rules.iter().rev()).0);
    }
    let (asc_s, desc_s) = (median(&mut asc), median(&mut desc));
    let (_, mut c) = load(&mut rules.iter());
    let (_, live) = rates(&c, &keys, rounds);
    let compiled = c.compile().is_ok();
    let (_, mpps) = rates(&c, &keys, rounds);
    vec![
        ("ports_rules", rules.len().into()),
        ("ports_load_asc_s", asc_s.into()),
        ("ports_load_desc_s", desc_s.into()),
        ("ports_mpps_live", live.into()),
        ("ports_compiled", compiled.into()),
        ("ports_mpps", mpps.into()),
    ]
}

/// `--compile-p99`: see the module docs. Phases alternate, four each,
/// each as long as three compiles (at least half a second).
pub(crate) fn compile_p99(
    rules: &[AclRule],
    keys: &[FlowKey],
) -> Vec<(&'static str, serde_json::Value)> {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let store = store_of(rules);
    let input = AclClassifier::with_rules(rules)
        .expect("unique ids")
        .compile_input();
    let t = Instant::now();
    let _ = AclClassifier::build_layers(&input);
    let phase = (t.elapsed() * 3).max(std::time::Duration::from_millis(500));
    let compiling = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    let compiles = AtomicU64::new(0);
    let new_hist = || {
        hdrhistogram::Histogram::<u64>::new_with_bounds(1, 10_000_000_000, 3).expect("valid bounds")
    };
    let (mut idle, mut busy) = (new_hist(), new_hist());
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if compiling.load(Ordering::Acquire) {
                    std::hint::black_box(AclClassifier::build_layers(&input)).ok();
                    compiles.fetch_add(1, Ordering::Relaxed);
                } else {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        let readers = store.readers();
        let handle = readers.handle();
        let t = handle.enter().expect("published");
        let mut m = BurstMatcher::default();
        for round in 0..8 {
            let on = round % 2 == 1;
            compiling.store(on, Ordering::Release);
            let h = if on { &mut busy } else { &mut idle };
            let start = Instant::now();
            'phase: loop {
                for burst in keys.chunks(32) {
                    let b = Instant::now();
                    std::hint::black_box(m.run(&t, burst));
                    h.saturating_record(b.elapsed().as_nanos() as u64);
                    if start.elapsed() > phase {
                        break 'phase;
                    }
                }
            }
        }
        done.store(true, Ordering::Release);
    });
    let q = |h: &hdrhistogram::Histogram<u64>, p: f64| h.value_at_quantile(p);
    vec![
        ("worker_burst_ns_p50_idle", q(&idle, 0.5).into()),
        ("worker_burst_ns_p99_idle", q(&idle, 0.99).into()),
        ("worker_burst_ns_p999_idle", q(&idle, 0.999).into()),
        ("worker_burst_ns_p50_compiling", q(&busy, 0.5).into()),
        ("worker_burst_ns_p99_compiling", q(&busy, 0.99).into()),
        ("worker_burst_ns_p999_compiling", q(&busy, 0.999).into()),
        ("compiles_during", compiles.load(Ordering::Relaxed).into()),
    ]
}
