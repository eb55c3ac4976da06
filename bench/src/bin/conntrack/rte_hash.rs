//! cfdp's table beside DPDK's `rte_hash` (`--rte-hash HARNESS`, run by
//! `bench/conntrack-rte-hash.sh`): the same keys and occupancy, rounds
//! alternating.

use std::time::Instant;

use cfdp_bench::{machine_description, median, results_path, write_csv};
use cfdp_conntrack::state::tcp::{ACK, SYN};
use cfdp_rules::FlowKey;

use crate::common::{conn, establish, percentile, table, TRACKED};

/// A prime: `i * STRIDE % n` visits `0..n` once for any `n` it does not
/// divide (the harness looks keys up in the same order).
const STRIDE: u64 = 1_000_003;

/// One side's figures on the shared keys: the burst's insert latencies,
/// failures, and lookups (established singly and in bursts of 32,
/// strangers singly).
#[derive(Clone, Copy, Default)]
struct Side {
    p50: f64,
    p99: f64,
    p999: f64,
    max: f64,
    failed: f64,
    single: f64,
    bulk: f64,
    miss: f64,
    /// The memory's page size, `2M` or `4K`: for cfdp's table whether the
    /// kernel backed the process's memory with transparent huge pages
    /// (its arrays ask for them), for `rte_hash` what the harness says.
    pages: &'static str,
}

/// cfdp's table on `keys` (the first `fill` established, the next `burst`
/// opened one at a time, the rest strangers), as the harness does with
/// `rte_hash` on the same keys.
fn cfdp_side(log2: u32, keys: &[FlowKey], fill: usize, burst: usize) -> Side {
    let (t, _) = table(log2, true, 95);
    for k in &keys[..fill] {
        establish(&t, k);
    }
    let mut ns = Vec::with_capacity(burst);
    let mut failed = 0;
    for k in &keys[fill..fill + burst] {
        let s = Instant::now();
        let r = t.open(k, SYN, 1, TRACKED, 60, 1);
        ns.push(s.elapsed().as_nanos() as u64);
        failed += usize::from(r.is_err());
    }
    ns.sort_unstable();
    // The answers of the established connections, in a scattered order
    // (the harness's stride): traffic does not come in opening order.
    assert_ne!(fill as u64 % STRIDE, 0);
    let answers: Vec<FlowKey> = (0..fill as u64)
        .map(|i| keys[(i * STRIDE % fill as u64) as usize].reply())
        .collect();
    let s = Instant::now();
    let found = answers
        .iter()
        .filter(|k| t.lookup(k, ACK, 60, 2).is_some())
        .count();
    let single = fill as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(found, fill, "an established connection was not found");
    let mut probes = [cfdp_conntrack::table::Probe::default(); 32];
    let s = Instant::now();
    let mut bulk_found = 0;
    for ks in answers.chunks_exact(32) {
        t.probe(ks, &mut probes);
        for p in &probes {
            bulk_found += usize::from(t.lookup_probed(p, ACK, 60, 2).is_some());
        }
    }
    let bulk = (fill / 32 * 32) as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(bulk_found, fill / 32 * 32);
    let strangers = &keys[fill + burst..];
    let s = Instant::now();
    let strays = strangers
        .iter()
        .filter(|k| t.lookup(k, ACK, 60, 2).is_some())
        .count();
    let miss = strangers.len() as f64 / s.elapsed().as_secs_f64() / 1e6;
    assert_eq!(strays, 0);
    Side {
        p50: percentile(&ns, 0.5) as f64,
        p99: percentile(&ns, 0.99) as f64,
        p999: percentile(&ns, 0.999) as f64,
        max: *ns.last().unwrap() as f64,
        failed: failed as f64,
        single,
        bulk,
        miss,
        pages: if anon_huge_kb() >= 2048 { "2M" } else { "4K" },
    }
}

/// The process's anonymous memory on transparent huge pages, in kB (0
/// where the kernel does not say).
fn anon_huge_kb() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("AnonHugePages:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `bytes` in a new temporary file named `prefix…` (removed when dropped,
/// also when the run panics), for the harness to read.
fn keys_file(prefix: &str, bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new()
        .prefix(prefix)
        .tempfile()
        .expect("a temporary file");
    std::io::Write::write_all(&mut f, bytes).expect("write the keys");
    f
}

/// The C harness run as a child (`mode` first where it has one, then the
/// keys' file and the numbers); its standard output, once it succeeded.
fn run_harness(
    harness: &str,
    mode: Option<&str>,
    file: &std::path::Path,
    numbers: &[usize],
) -> String {
    let out = std::process::Command::new(harness)
        .args(mode)
        .arg(file)
        .args(numbers.iter().map(ToString::to_string))
        .output()
        .expect("run the rte_hash harness");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "harness failed: {}{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `rte_hash` on the same keys: the C harness (`bench/conntrack-rte-hash/`)
/// run as a child, its one line of figures read back.
fn rte_hash_side(harness: &str, file: &std::path::Path, sizes: [usize; 4]) -> Side {
    let [cap, fill, burst, strangers] = sizes;
    let text = run_harness(harness, None, file, &[38, cap, fill, burst, strangers]);
    let pages = match text.lines().find_map(|l| l.strip_prefix("pages ")) {
        Some("2M") => "2M",
        Some("4K") => "4K",
        other => panic!("the harness did not say its pages: {other:?}"),
    };
    let line = text.lines().last().expect("a line of figures");
    let v: Vec<f64> = line
        .split(',')
        .map(|x| x.trim().parse().expect("a number"))
        .collect();
    assert_eq!(v.len(), 11, "{line}");
    assert_eq!(v[8] as usize, fill, "rte_hash did not find every key");
    assert_eq!(v[10], 0.0, "rte_hash found a stranger");
    Side {
        p50: v[0],
        p99: v[1],
        p999: v[2],
        max: v[3],
        failed: v[4],
        single: v[5],
        bulk: v[6],
        miss: v[7],
        pages,
    }
}

/// cfdp's connection table beside DPDK's `rte_hash` on the same keys and
/// occupancy, rounds alternating (`bench/conntrack-rte-hash.sh`).
pub(crate) fn side_by_side(harness: &str, log2: u32, rounds: usize) {
    let slots = 4usize << log2;
    let (fill, cap) = (slots * 85 / 100, slots * 95 / 100);
    let burst = cap - fill;
    let strangers = 200_000;
    let keys: Vec<FlowKey> = (0..fill as u32)
        .map(|i| conn(i, false))
        .chain((0..(burst + strangers) as u32).map(|i| conn(i, true)))
        .collect();
    // The keys as rte_hash gets them: the canonical connection key's 38
    // bytes (both directions' packets make the same), built for it.
    let mut bytes = Vec::with_capacity(keys.len() * 38);
    for k in &keys {
        bytes.extend_from_slice(&cfdp_conntrack::ConnKey::of(k).0.bytes());
    }
    let file = keys_file("cfdp-conntrack-keys-", &bytes);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..rounds {
        ours.push(cfdp_side(log2, &keys, fill, burst));
        theirs.push(rte_hash_side(
            harness,
            file.path(),
            [cap, fill, burst, strangers],
        ));
    }
    let med = |v: &[Side], f: fn(&Side) -> f64| {
        let mut x: Vec<f64> = v.iter().map(f).collect();
        median(&mut x)
    };
    println!(
        "{fill} established connections, {burst} opened as a burst (to 95 % of {slots} slots), {strangers} strangers; median of {rounds} rounds ({})",
        machine_description()
    );
    println!(
        "{:<10} {:>5} {:>8} {:>8} {:>8} {:>9} {:>7} {:>10} {:>10} {:>10}",
        "impl",
        "pages",
        "p50_ns",
        "p99_ns",
        "p999_ns",
        "max_ns",
        "failed",
        "single_M/s",
        "bulk_M/s",
        "miss_M/s"
    );
    let mut rows = Vec::new();
    for (name, v) in [("cfdp", &ours), ("rte_hash", &theirs)] {
        let f = [
            med(v, |s| s.p50),
            med(v, |s| s.p99),
            med(v, |s| s.p999),
            med(v, |s| s.max),
            med(v, |s| s.failed),
            med(v, |s| s.single),
            med(v, |s| s.bulk),
            med(v, |s| s.miss),
        ];
        println!(
            "{name:<10} {:>5} {:>8.0} {:>8.0} {:>8.0} {:>9.0} {:>7.0} {:>10.2} {:>10.2} {:>10.2}",
            v[0].pages, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
        );
        rows.push(format!(
            "{name},{},{slots},{fill},{burst},{strangers},{:.0},{:.0},{:.0},{:.0},{:.0},{:.3},{:.3},{:.3}",
            v[0].pages, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]
        ));
    }
    writers_side_by_side(harness, if log2 >= 18 { 1 << 19 } else { 1 << 17 }, rounds);
    let path = results_path("conntrack_rte_hash.csv");
    write_csv(
        &path,
        "impl,pages,slots,established,burst,strangers,insert_p50_ns,insert_p99_ns,insert_p999_ns,insert_max_ns,failed,lookup_mops,lookup_bulk_mops,stranger_mops",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}

/// `rte_hash`'s multi-writer mode from 1 and 2 lcores beside cfdp's opens
/// from 1 and 2 threads: `total` new keys into an empty table that they
/// fill to 80 % (strong scaling, as `--part scaling`), rounds alternating.
/// Rows in `conntrack_rte_hash_writers.csv`.
fn writers_side_by_side(harness: &str, total: u32, rounds: usize) {
    use crate::scaling::{fresh, run, Work};
    let cap = total as usize * 5 / 4;
    let mut bytes = Vec::with_capacity(total as usize * 38);
    for i in 0..total {
        bytes.extend_from_slice(&cfdp_conntrack::ConnKey::of(&conn(i, false)).0.bytes());
    }
    let file = keys_file("cfdp-writers-keys-", &bytes);
    let unused = fresh(1);
    let mut ours = [Vec::new(), Vec::new()];
    let mut theirs = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for threads in [1u32, 2] {
            ours[threads as usize - 1].push(run(Work::Opens, threads, total, &unused));
            let text = run_harness(
                harness,
                Some("writers"),
                file.path(),
                &[38, cap, total as usize, threads as usize],
            );
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("writers "))
                .expect("the harness's writers line");
            let v: Vec<f64> = line
                .split(',')
                .map(|x| x.trim().parse().expect("a number"))
                .collect();
            assert_eq!((v[0], v[2]), (f64::from(threads), 0.0), "{line}");
            theirs[threads as usize - 1].push(v[1]);
        }
    }
    let mut rows = Vec::new();
    for (name, v) in [("cfdp", &mut ours), ("rte_hash", &mut theirs)] {
        let one = median(&mut v[0]);
        for (t, s) in v.iter_mut().enumerate() {
            let m = median(s);
            println!(
                "{name:<9} {} writer(s): {m:6.2} M inserts/s, {:.2}× one",
                t + 1,
                m / one
            );
            rows.push(format!(
                "{name},{},{total},{cap},{m:.3},{:.3}",
                t + 1,
                m / one
            ));
        }
    }
    let path = results_path("conntrack_rte_hash_writers.csv");
    write_csv(
        &path,
        "impl,threads,inserts,capacity,mops,vs_one_thread",
        &rows,
    )
    .expect("write CSV");
    println!("wrote {}", path.display());
}
