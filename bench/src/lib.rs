//! Shared helpers for the cfdp benchmark binaries: a deterministic key
//! generator, medians, the machine description printed beside every table,
//! the CSV writer for `bench/results/`, and the synthetic flows and 64-byte
//! frames the data-plane benchmarks replay.
#![forbid(unsafe_code)]

pub mod plot;

use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

/// SplitMix64, shared with the soak harnesses.
pub use cfdp_testkit::SplitMix;

/// Median of a sample set (sorts in place). Empty input gives NaN.
pub fn median(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// `bench/results/<name>` for full runs, `bench/results/quick/<name>` for
/// `--quick` runs (so CI's smoke runs never overwrite published figures);
/// created if needed, independent of the working directory.
pub fn results_path(name: &str) -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results");
    if is_quick() {
        dir.push("quick");
    }
    let _ = fs::create_dir_all(&dir);
    dir.join(name)
}

/// `bench/results/quick/NAME`, whatever the mode: where a run that is
/// not the committed figure (a `--passes N` run for callgrind) writes.
pub fn side_results_path(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/quick");
    let _ = fs::create_dir_all(&dir);
    dir.join(name)
}

/// One comment line naming the run: UTC date, the commit of the tree the
/// binary was started in (with `-dirty` when it has uncommitted changes)
/// and the machine. Every CSV starts with it, so a figure can be traced.
pub fn run_header() -> String {
    let out = |cmd: &str, args: &[&str]| {
        let mut c = std::process::Command::new(cmd);
        c.args(args);
        let tree = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        if tree.is_dir() {
            c.current_dir(tree);
        }
        c.output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let date = out("date", &["-u", "+%Y-%m-%dT%H:%MZ"]).unwrap_or_else(|| "unknown date".into());
    let commit = if let Ok(c) = std::env::var("CFDP_RUN_COMMIT") {
        // A binary copied to another machine (the multi-core scaling runs)
        // has no tree there: the run names the commit it was built from.
        format!("{c} (binary built elsewhere)")
    } else {
        out("git", &["rev-parse", "--short", "HEAD"]).map_or_else(
            || "unknown commit".into(),
            |c| {
                // Results files do not count: a run rewrites them.
                let dirty = out(
                    "git",
                    &[
                        "status",
                        "--porcelain",
                        "--untracked-files=no",
                        "--",
                        ":(top)",
                        ":(exclude,top)bench/results",
                    ],
                )
                .is_some_and(|s| !s.is_empty());
                if dirty {
                    format!("{c}-dirty")
                } else {
                    c
                }
            },
        )
    };
    format!("# run {date}, commit {commit}, {}", machine_description())
}

/// The data rows of a labelled results CSV at `path` whose label is not
/// `label` (an A/B run writes one label per build and keeps the others').
pub fn rows_of_other_labels(path: &std::path::Path, label: &str) -> Vec<String> {
    let old = fs::read_to_string(path).unwrap_or_default();
    let own = format!("{label},");
    old.lines()
        .skip_while(|l| l.starts_with('#') || l.starts_with("label,"))
        .filter(|l| !l.starts_with(&own))
        .map(String::from)
        .collect()
}

/// Writes a CSV file: the [`run_header`] comment, the given header line and
/// rows (already comma-joined).
pub fn write_csv(path: &std::path::Path, header: &str, rows: &[String]) -> io::Result<()> {
    let mut f = io::BufWriter::new(fs::File::create(path)?);
    writeln!(f, "{}", run_header())?;
    writeln!(f, "{header}")?;
    for r in rows {
        writeln!(f, "{r}")?;
    }
    f.flush()
}

/// CPU model and core count, printed with every table so numbers carry their machine.
pub fn machine_description() -> String {
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(std::num::NonZero::get)
        .unwrap_or(1);
    format!("{model}, {cores} cores, SIMD {}", simd_flags())
}

/// The SIMD and bit-manipulation extensions the CPU has that a result may
/// hang on (the classifier's and filter's kernels), as `/proc/cpuinfo`
/// names them; `avx512f` said absent when it is.
pub fn simd_flags() -> String {
    const NAMED: [&str; 9] = [
        "sse4_2", "popcnt", "avx", "avx2", "bmi1", "bmi2", "avx512f", "avx512bw", "avx512vl",
    ];
    let flags = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let have: Vec<&str> = flags
        .lines()
        .find(|l| l.starts_with("flags"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let mut out: Vec<&str> = NAMED.into_iter().filter(|f| have.contains(f)).collect();
    if !out.contains(&"avx512f") {
        out.push("(no avx512f)");
    }
    out.join(" ")
}

/// True when the binary was started with `--quick`.
pub fn is_quick() -> bool {
    std::env::args().any(|a| a == "--quick")
}

/// Refuses a command line with a flag this benchmark does not take (exit
/// 2, naming it and the ones it takes) and answers `--help` with them: a
/// mistyped flag would otherwise run the whole benchmark at its defaults
/// and overwrite its committed CSV. `--quick` is always taken; arguments
/// that do not start with `--` (values, paths) are not judged here.
pub fn expect_flags(known: &[&str]) {
    let mut args = std::env::args();
    let bin = args
        .next()
        .map(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map_or(a.clone(), |f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let takes = std::iter::once("--quick")
        .chain(known.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    for a in args {
        if a == "--help" || a == "-h" {
            println!("{bin}: flags: {takes} (see bench/README.md)");
            std::process::exit(0);
        }
        if a.starts_with("--") && a != "--quick" && !known.contains(&a.as_str()) {
            eprintln!("{bin}: unknown flag {a:?}; it takes: {takes}");
            std::process::exit(2);
        }
    }
}

/// The value after `name` on the command line (`--label old`).
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

/// A ClassBench filter set (line order = priority, action drop) and its
/// trace's keys, or exit 2 naming the file and its error (`bin`: the
/// binary's name for the message).
pub fn load_classbench(
    bin: &str,
    rules_path: &str,
    trace_path: &str,
) -> (cfdp_rules::classbench::Import, Vec<cfdp_rules::FlowKey>) {
    use cfdp_rules::classbench::{parse_rules, parse_trace};
    let fail = |path: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("{bin}: {path}: {e}");
        std::process::exit(2)
    };
    let read = |path: &str| fs::read_to_string(path).unwrap_or_else(|e| fail(path, &e));
    let imported = parse_rules(&read(rules_path), cfdp_rules::Action::Drop)
        .unwrap_or_else(|e| fail(rules_path, &e));
    let trace = parse_trace(&read(trace_path)).unwrap_or_else(|e| fail(trace_path, &e));
    (imported, trace.iter().map(|p| p.key).collect())
}

/// A comma-separated list of numbers after `name` (`--sizes 0,1000000`).
pub fn arg_u64_list(name: &str) -> Option<Vec<u64>> {
    arg(name).map(|s| {
        s.split(',')
            .map(|x| {
                x.parse()
                    .unwrap_or_else(|_| panic!("{name}: {x:?} is not a number"))
            })
            .collect()
    })
}

/// The `cfdp` binary to drive: `--cfdp PATH`, else the one built beside
/// this benchmark.
pub fn cfdp_binary() -> PathBuf {
    arg("--cfdp").map(PathBuf::from).unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("cfdp")
    })
}

/// Writes `cfg`: a `cfdp run` node for the control benchmarks, built from
/// its configuration's structs — one worker looping `pcap/mixed.pcap` at
/// `pps` frames/s, no rules, its control socket and state directory
/// (empty: none) — then set by `edit`.
pub fn write_node_config(
    cfg: &std::path::Path,
    pps: u64,
    socket: &std::path::Path,
    state_dir: &std::path::Path,
    edit: impl FnOnce(&mut cfdp_config::RunConfig),
) {
    let input = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../pcap/mixed.pcap");
    let mut c = cfdp_testkit::node::looping(&input, pps, socket, state_dir);
    c.dataplane.workers = 1;
    edit(&mut c);
    cfdp_testkit::node::write(cfg, &c);
}

/// Starts `cfdp run --config cfg`, its standard output discarded and its
/// standard error in [`run_stderr`]`(cfg)` (where it reports the
/// addresses it bound: a bench gives it port 0 and reads them there, with
/// [`reported_port`]).
pub fn spawn_cfdp_run(cfdp: &std::path::Path, cfg: &std::path::Path) -> std::process::Child {
    let stderr = std::fs::File::create(run_stderr(cfg))
        .unwrap_or_else(|e| panic!("{}: {e}", run_stderr(cfg).display()));
    std::process::Command::new(cfdp)
        .args(["run", "--config"])
        .arg(cfg)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (build it first)", cfdp.display()))
}

/// Where [`spawn_cfdp_run`] puts the standard error of a run of `cfg`.
pub fn run_stderr(cfg: &std::path::Path) -> std::path::PathBuf {
    cfg.with_extension("stderr")
}

/// The port a run of `cfg` (started by [`spawn_cfdp_run`]) reports on the
/// line of its standard error that starts with `prefix` (e.g. `"cfdp:
/// P4Runtime on "`), once it is written; panics if the run exits first.
pub fn reported_port(cfg: &std::path::Path, prefix: &str, child: &mut std::process::Child) -> u16 {
    cfdp_testkit::child::reported_addr(&run_stderr(cfg), prefix, child).port()
}

/// `n` query keys: `positive_pct` % drawn from `keys` (inserted), the rest
/// fresh random keys (a collision with an inserted 64-bit key is harmless
/// and vanishingly rare).
pub fn queries(keys: &[u64], n: usize, positive_pct: u64, seed: u64) -> Vec<u64> {
    let mut r = SplitMix::new(seed);
    (0..n)
        .map(|_| {
            if r.next() % 100 < positive_pct {
                keys[(r.next() % keys.len() as u64) as usize]
            } else {
                r.next() ^ 0x8000_0000_0000_0001
            }
        })
        .collect()
}

/// Flow number `i` → a distinct IPv4/UDP 5-tuple (`pipeline`, `control`).
pub fn bench_flow(i: u64) -> cfdp_rules::FlowKey {
    let s = (0x0a00_0000u32 | (i as u32 & 0x00ff_ffff)).to_be_bytes();
    let d = (0xc000_0000u32 | ((i >> 24) as u32 & 0xff)).to_be_bytes();
    cfdp_rules::FlowKey::v4(s, d, 17, 1024 + (i % 50_000) as u16, 53)
}

/// A 64-byte Ethernet frame (60 bytes + FCS on the wire) for an IPv4/UDP flow.
pub fn udp_frame(k: &cfdp_rules::FlowKey) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(
            [k.src[0], k.src[1], k.src[2], k.src[3]],
            [k.dst[0], k.dst[1], k.dst[2], k.dst[3]],
            64,
        )
        .udp(k.sport, k.dport);
    let mut v = Vec::with_capacity(64);
    b.write(&mut v, &[0u8; 18]).expect("write to Vec");
    v
}

/// Fills `f` with random keys (from `seed`) until `load` of its slots are
/// taken; returns the keys.
pub fn fill_filter(f: &cfdp_filter::Filter, load: f64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix::new(seed);
    let target = (f.slots() as f64 * load) as usize;
    let mut keys = Vec::with_capacity(target);
    while keys.len() < target {
        let k = rng.next();
        if f.insert_hash(cfdp_filter::hash::hash_u64(k), 0).is_ok() {
            keys.push(k);
        }
    }
    keys
}

/// A worker's matching as the benches time it: `match_burst` in verify
/// mode over one copy of the tables, a burst of up to 32 keys at a time.
#[derive(Default)]
pub struct BurstMatcher {
    counters: cfdp_engine::Totals,
    sample: u32,
    out: [Option<cfdp_engine::RuleRef>; 32],
}

impl BurstMatcher {
    /// Matches `burst` (at most 32 keys) against `t`: each key's rule.
    pub fn run(
        &mut self,
        t: &cfdp_engine::Tables,
        burst: &[cfdp_rules::FlowKey],
    ) -> &[Option<cfdp_engine::RuleRef>] {
        let n = burst.len();
        let mut cx = cfdp_engine::matcher::MatchCtx {
            mode: cfdp_engine::Mode::Verify,
            counters: &mut self.counters,
            sample: &mut self.sample,
        };
        cfdp_engine::matcher::match_burst(&mut cx, t, burst, &[true; 32][..n], &mut self.out[..n]);
        &self.out[..n]
    }
}
