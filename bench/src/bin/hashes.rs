//! Micro-benchmark that picked the filter's key hash.
//!
//! Hashes arrays of keys shaped like the data plane's (8-byte integers, the
//! 13-byte IPv4 5-tuple, the 37-byte IPv6 5-tuple) with each candidate and
//! reports the median ns/hash over several rounds. The candidates are the
//! well-kept 64-bit hashes for short keys (rapidhash v3, xxh3, foldhash),
//! hardware CRC32C (SSE4.2, two lanes to make 64 bits) and std's SipHash as a
//! reference point. Output: a table on stdout and `bench/results/hashes.csv`.
//!
//! Run: `cargo run --release -p cfdp-bench --bin hashes [-- --quick]`

// The hardware CRC32C candidate needs an SSE4.2 intrinsic.
#![allow(unsafe_code)]

use std::hash::{BuildHasher, Hasher};
use std::hint::black_box;
use std::time::Instant;

use cfdp_bench::{machine_description, median, results_path, write_csv, SplitMix};

const KEYS: usize = 1 << 16;

fn make_keys(len: usize, rng: &mut SplitMix) -> Vec<u8> {
    (0..KEYS * len).map(|_| rng.next() as u8).collect()
}

fn time_ns_per_hash(keys: &[u8], len: usize, rounds: usize, f: &dyn Fn(&[u8]) -> u64) -> f64 {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let mut acc = 0u64;
        for k in keys.chunks_exact(len) {
            acc = acc.wrapping_add(f(black_box(k)));
        }
        black_box(acc);
        samples.push(start.elapsed().as_nanos() as f64 / (keys.len() / len) as f64);
    }
    median(&mut samples)
}

#[cfg(target_arch = "x86_64")]
fn crc32c_pair(data: &[u8]) -> u64 {
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU supports SSE4.2, checked just above.
        unsafe { crc32c_pair_sse42(data) }
    } else {
        0
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_pair_sse42(data: &[u8]) -> u64 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let (mut a, mut b) = (0x1234_5678u64, 0x9abc_def0u64);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        a = _mm_crc32_u64(a, w);
        b = _mm_crc32_u64(b, w.rotate_left(29));
    }
    for &byte in chunks.remainder() {
        a = _mm_crc32_u8(a as u32, byte) as u64;
        b = _mm_crc32_u8(b as u32, byte ^ 0x5a) as u64;
    }
    (a << 32) | (b & 0xffff_ffff)
}

#[cfg(not(target_arch = "x86_64"))]
fn crc32c_pair(_data: &[u8]) -> u64 {
    0
}

fn main() {
    cfdp_bench::expect_flags(&[]);
    let quick = cfdp_bench::is_quick();
    let rounds = if quick { 5 } else { 21 };
    let mut rng = SplitMix::new(42);
    let fold = foldhash::fast::FixedState::with_seed(7);
    let sip = std::collections::hash_map::RandomState::new();
    let secrets = rapidhash::v3::RapidSecrets::seed(0);
    type Candidate<'a> = (&'a str, Box<dyn Fn(&[u8]) -> u64 + 'a>);
    let candidates: Vec<Candidate> = vec![
        (
            "rapidhash-v3",
            Box::new(|k: &[u8]| rapidhash::v3::rapidhash_v3(k)),
        ),
        (
            "rapidhash-v3-micro",
            Box::new(move |k: &[u8]| {
                rapidhash::v3::rapidhash_v3_micro_inline::<true, false>(k, &secrets)
            }),
        ),
        (
            "xxh3-64",
            Box::new(|k: &[u8]| xxhash_rust::xxh3::xxh3_64(k)),
        ),
        (
            "foldhash-fast",
            Box::new(move |k: &[u8]| {
                let mut h = fold.build_hasher();
                h.write(k);
                h.finish()
            }),
        ),
        ("crc32c-x2-sse42", Box::new(crc32c_pair)),
        (
            "siphash13-std",
            Box::new(move |k: &[u8]| {
                let mut h = sip.build_hasher();
                h.write(k);
                h.finish()
            }),
        ),
    ];
    let lens = [8usize, 13, 37];
    let keysets: Vec<Vec<u8>> = lens.iter().map(|&l| make_keys(l, &mut rng)).collect();
    let mut rows = Vec::new();
    println!("machine: {}", machine_description());
    println!(
        "{:<20} {:>10} {:>10} {:>10}   (median ns/hash)",
        "hash", "8 B", "13 B", "37 B"
    );
    for (name, f) in &candidates {
        let mut line = format!("{name:<20}");
        for (len, keys) in lens.iter().zip(&keysets) {
            let ns = time_ns_per_hash(keys, *len, rounds, f.as_ref());
            line.push_str(&format!(" {ns:>10.2}"));
            rows.push(format!("{name},{len},{ns:.3}"));
        }
        println!("{line}");
    }
    let path = results_path("hashes.csv");
    write_csv(&path, "hash,key_bytes,ns_per_hash", &rows).expect("write hashes.csv");
    println!("wrote {}", path.display());
}
