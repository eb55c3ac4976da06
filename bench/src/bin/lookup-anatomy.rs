//! Where a single-key lookup's time goes: cfdp's `Filter::contains_hash`
//! beside bare probes of a plain table of one-word buckets (f = 12, the
//! filter's own bucket and fingerprint derivation) that add, one at a time,
//! what cfdp's lookup does: the seqlock validation, and the hash.
//!
//! * `bare`: two loads and the SWAR match, nothing else;
//! * `seqlock2`: cfdp's protocol, both buckets' stripe counters loaded
//!   before and after (four loads, two compares);
//! * `seqlock1`: only the first bucket's counter (two loads, one compare);
//!   correct for one-word buckets by the double-collect argument, tried in
//!   the filter and not kept (2026-11-24: 1–3 % in wall time);
//! * hashes: `rapidhash` (cfdp's, `hash::hash_u64`) or a 2-independent
//!   multiply-shift (`(a·k + b) >> 64` with 128-bit `a`, `b`), the class of
//!   hash the paper authors' benchmark uses: two multiplies, and weak — a
//!   one-multiply folded hash of that cost placed 36 k of 249 k sequential
//!   keys nowhere at 95 % load in a 2^16-bucket filter where rapidhash placed
//!   all, so cfdp does not use one.
//!
//! One key per call, keys hashed in the loop, 50 % positive, every variant
//! once per round, rounds alternating; median M lookups/s per variant. The
//! bare table is a `Vec` (4 KiB pages, as the paper's code allocates);
//! cfdp's is 2 MiB-aligned and advised for huge pages; the bare table is
//! filled first-fit (no relocation) to the same number of keys tried, so it
//! holds fewer, which does not change what a lookup touches (both buckets,
//! always). The paper authors' `Cuckoo12` is run by hand beside it.
//!
//! `--sizes 22,25` (default), `--rounds N` (default 11), `--quick`.
#![forbid(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use cfdp_bench::{
    arg, arg_u64_list, machine_description, median, results_path, write_csv, SplitMix,
};
use cfdp_filter::hash::hash_u64;
use cfdp_filter::{Config, Filter};

/// 12-bit lanes: bit 0 and the top bit of each of the four lanes.
const ONES: u64 = 0x0000_0010_0100_1001;
const HIGH: u64 = ONES << 11;
const LANES: u64 = 0x0000_ffff_ffff_ffff;
const STRIPES: usize = 1024;

/// The 2-independent multiply-shift hash class: `(a·k + b) mod 2^128`,
/// high 64 bits, with fixed odd `a` and any `b`.
#[inline(always)]
fn multiply_shift(k: u64) -> u64 {
    const A: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835;
    const B: u128 = 0x1b87_3593_cc9e_2d51_85eb_ca6b_c2b2_ae35;
    (A.wrapping_mul(u128::from(k)).wrapping_add(B) >> 64) as u64
}

/// cfdp's derivation (`filter.rs`): fingerprint from the low bits (never 0),
/// primary bucket from the high half, alternate by a hashed displacement.
#[inline(always)]
fn derive(h: u64, mask: usize) -> (u64, usize, usize) {
    let fp = h & 0xfff;
    let fp = if fp == 0 { 1 } else { fp };
    let i1 = (h >> 32) as usize & mask;
    let d = (((fp | (fp << 32)).wrapping_mul(0xc6a4_a793_5bd1_e995) >> 17) as usize) & mask;
    (fp, i1, i1 ^ if d == 0 { 1 } else { d })
}

/// Whether a one-word bucket holds `fp` in one of its four 12-bit lanes.
#[inline(always)]
fn has(b: u64, fp: u64) -> bool {
    let x = (b ^ fp.wrapping_mul(ONES)) & LANES;
    (x.wrapping_sub(ONES) & !x & HIGH) != 0
}

struct Bare {
    words: Vec<AtomicU64>,
    stripes: Vec<AtomicU64>,
    mask: usize,
}

impl Bare {
    /// A table of `2^log2` one-word buckets, `keys` hashed by `hash` and
    /// placed first-fit.
    fn new(log2: u32, keys: &[u64], hash: fn(u64) -> u64) -> Self {
        let t = Bare {
            words: (0..1usize << log2).map(|_| AtomicU64::new(0)).collect(),
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
            mask: (1 << log2) - 1,
        };
        for &k in keys {
            let (fp, a, b) = derive(hash(k), t.mask);
            for i in [a, b] {
                let w = t.words[i].load(Ordering::Relaxed);
                if let Some(lane) = (0..4).find(|l| (w >> (12 * l)) & 0xfff == 0) {
                    t.words[i].store(w | fp << (12 * lane), Ordering::Relaxed);
                    break;
                }
            }
        }
        t
    }

    #[inline(always)]
    fn bare(&self, h: u64) -> bool {
        let (fp, a, b) = derive(h, self.mask);
        let x = self.words[a].load(Ordering::Acquire);
        let y = self.words[b].load(Ordering::Acquire);
        has(x, fp) | has(y, fp)
    }

    #[inline(always)]
    fn seqlock2(&self, h: u64) -> bool {
        let (fp, a, b) = derive(h, self.mask);
        let (s1, s2) = (&self.stripes[a % STRIPES], &self.stripes[b % STRIPES]);
        let (x, y) = loop {
            let (v1, v2) = (s1.load(Ordering::Acquire), s2.load(Ordering::Acquire));
            if (v1 | v2) & 1 == 0 {
                let x = self.words[a].load(Ordering::Acquire);
                let y = self.words[b].load(Ordering::Acquire);
                if s1.load(Ordering::Acquire) == v1 && s2.load(Ordering::Acquire) == v2 {
                    break (x, y);
                }
            }
            std::hint::spin_loop();
        };
        has(x, fp) | has(y, fp)
    }

    #[inline(always)]
    fn seqlock1(&self, h: u64) -> bool {
        let (fp, a, b) = derive(h, self.mask);
        let s1 = &self.stripes[a % STRIPES];
        let (x, y) = loop {
            let v1 = s1.load(Ordering::Acquire);
            if v1 & 1 == 0 {
                let x = self.words[a].load(Ordering::Acquire);
                let y = self.words[b].load(Ordering::Acquire);
                if s1.load(Ordering::Acquire) == v1 {
                    break (x, y);
                }
            }
            std::hint::spin_loop();
        };
        has(x, fp) | has(y, fp)
    }
}

/// One pass over `qs`: lookups per second (M) and the hit count.
fn pass(qs: &[u64], look: impl Fn(u64) -> bool) -> (f64, usize) {
    let start = Instant::now();
    let mut hits = 0usize;
    for &k in qs {
        hits += usize::from(look(k));
    }
    let mops = qs.len() as f64 / start.elapsed().as_secs_f64() / 1e6;
    (mops, black_box(hits))
}

#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn main() {
    cfdp_bench::expect_flags(&["--rounds", "--sizes"]);
    let quick = cfdp_bench::is_quick();
    let sizes: Vec<u32> = arg_u64_list("--sizes").map_or_else(
        || if quick { vec![16] } else { vec![22, 25] },
        |l| l.into_iter().map(|x| x as u32).collect(),
    );
    let rounds: usize = arg("--rounds").map_or(if quick { 3 } else { 11 }, |r| {
        r.parse().expect("--rounds: a count")
    });
    println!("machine: {}", machine_description());
    println!("single-key lookups, f = 12, 95 % load tried, 50 % positive, hashing included; median of {rounds} rounds (M/s)");
    let mut rows = Vec::new();
    for log2 in sizes {
        let filter = Filter::new(Config {
            buckets_log2: Some(log2),
            fingerprint_bits: 12,
            ..Config::default()
        })
        .expect("config");
        let target = (filter.slots() as f64 * 0.95) as usize;
        let mut rng = SplitMix::new(7 + u64::from(log2));
        let keys: Vec<u64> = (0..target).map(|_| rng.next()).collect();
        {
            let mut w = filter.writer();
            for &k in &keys {
                w.insert_hash(hash_u64(k), 0).expect("95 % fits");
            }
        }
        // The multiply-shift variants need their own table (other buckets).
        let bare_rh = Bare::new(log2, &keys, hash_u64);
        let bare_ms = Bare::new(log2, &keys, multiply_shift);
        let n = if quick { 1 << 20 } else { 1 << 23 };
        let qs: Vec<u64> = (0..n)
            .map(|i| {
                if i % 2 == 0 {
                    keys[(rng.next() as usize) % keys.len()]
                } else {
                    rng.next()
                }
            })
            .collect();
        type Variant<'a> = (&'a str, Box<dyn Fn(&[u64]) -> (f64, usize) + 'a>);
        let variants: Vec<Variant> = vec![
            (
                "cfdp-single",
                Box::new(|qs| pass(qs, |k| filter.contains_hash(hash_u64(k)))),
            ),
            (
                "bare-rapidhash",
                Box::new(|qs| pass(qs, |k| bare_rh.bare(hash_u64(k)))),
            ),
            (
                "seqlock2-rapidhash",
                Box::new(|qs| pass(qs, |k| bare_rh.seqlock2(hash_u64(k)))),
            ),
            (
                "seqlock1-rapidhash",
                Box::new(|qs| pass(qs, |k| bare_rh.seqlock1(hash_u64(k)))),
            ),
            (
                "bare-multiply-shift",
                Box::new(|qs| pass(qs, |k| bare_ms.bare(multiply_shift(k)))),
            ),
            (
                "seqlock2-multiply-shift",
                Box::new(|qs| pass(qs, |k| bare_ms.seqlock2(multiply_shift(k)))),
            ),
            (
                "seqlock1-multiply-shift",
                Box::new(|qs| pass(qs, |k| bare_ms.seqlock1(multiply_shift(k)))),
            ),
        ];
        let mut samples = vec![Vec::new(); variants.len()];
        for round in 1..=rounds {
            for (i, (name, run)) in variants.iter().enumerate() {
                let (mops, hits) = run(&qs);
                // cfdp holds every key (the bare tables, filled first-fit,
                // only most of them): no false negative.
                assert!(
                    *name != "cfdp-single" || hits >= qs.len() / 2,
                    "{name}: {hits} hits, fewer than the {} positives",
                    qs.len() / 2
                );
                samples[i].push(mops);
                rows.push(format!("{name},{log2},{round},{mops:.2}"));
            }
        }
        println!("2^{log2} buckets:");
        for ((name, _), s) in variants.iter().zip(&mut samples) {
            println!("  {name:<24} {:>7.1}", median(s));
        }
    }
    let path = results_path("lookup_anatomy.csv");
    write_csv(
        &path,
        "# single-key lookups, f = 12, 95 % load tried, 50 % positive, keys hashed in the loop; rounds alternate the variants\nvariant,buckets_log2,round,mops",
        &rows,
    )
    .expect("write csv");
    println!("wrote {}", path.display());
}
