//! The bulk build: same answers as one-by-one inserts, exact counts, clear
//! errors, on one thread and several.

mod common;

use cfdp_filter::hash::hash_u64;
use cfdp_filter::{BuildError, Config, Filter, Lookup};
use common::Keys;

fn config(log2: u32) -> Config {
    Config {
        buckets_log2: Some(log2),
        fingerprint_bits: 12,
        value_bits: 4,
        ..Config::default()
    }
}

fn items(n: usize, seed: u64) -> Vec<(u64, u32)> {
    let mut keys = Keys::new(seed);
    (0..n)
        .map(|i| (hash_u64(keys.next_key()), (i % 16) as u32))
        .collect()
}

#[test]
fn built_filter_holds_every_item_with_its_value() {
    // 2^18 buckets at 95 %: above the parallel threshold, several chunks.
    for threads in [1, 2, 3] {
        let cfg = config(18);
        let n = (4 * (1 << 18)) * 95 / 100;
        let its = items(n, 7);
        let f = Filter::build(cfg, &its, threads).expect("build at 95 %");
        assert_eq!(f.len(), n, "{threads} threads");
        assert_eq!(f.stats().entries, n);
        assert_eq!(f.bloom_len(), 0);
        // Two items can share fingerprint and buckets and so answer each
        // other's value: here every item must hit, and (below) a sample
        // must be stored with exactly its value.
        for &(h, _) in &its {
            assert!(
                matches!(f.get_hash(h), Lookup::Entry(_)),
                "{threads} threads: miss"
            );
        }
        for &(h, v) in its.iter().step_by(97) {
            assert!(
                f.remove_hash(h, v),
                "{threads} threads: item not stored with its value"
            );
        }
    }
}

/// Packed buckets share words; threads fill whole chunks, whose bit ranges
/// start on word boundaries, so no word is written by two threads.
#[test]
fn packed_build_on_two_threads() {
    let cfg = Config {
        packed: true,
        ..config(18)
    };
    let n = (4 * (1 << 18)) * 95 / 100;
    let its = items(n, 17);
    let f = Filter::build(cfg, &its, 2).expect("build at 95 %");
    assert_eq!(f.len(), n);
    for &(h, _) in &its {
        assert!(f.contains_hash(h));
    }
    for &(h, v) in its.iter().step_by(101) {
        assert!(f.remove_hash(h, v));
    }
}

#[test]
fn build_answers_like_one_by_one_inserts() {
    let its = items(3000, 9);
    let built = Filter::build(config(10), &its, 1).unwrap();
    let one = Filter::new(config(10)).unwrap();
    for &(h, v) in &its {
        one.insert_hash(h, v).unwrap();
    }
    let mut probe = Keys::new(99);
    for _ in 0..100_000 {
        let h = hash_u64(probe.next_key());
        assert_eq!(built.get_hash(h).is_hit(), one.get_hash(h).is_hit());
    }
    assert_eq!(built.len(), one.len());
}

#[test]
fn build_refuses_what_does_not_fit() {
    let its = items(4 * (1 << 8) + 1, 3);
    match Filter::build(config(8), &its, 2) {
        Err(BuildError::Full { placed, total }) => {
            assert_eq!(total, its.len());
            assert!(placed < total);
        }
        other => panic!("expected Full, got {other:?}"),
    }
    let wide = [(1u64, 0u32), (2, 16)];
    assert_eq!(
        Filter::build(config(8), &wide, 1).unwrap_err(),
        BuildError::ValueTooWide { value: 16, bits: 4 }
    );
    let empty = Filter::build(config(8), &[], 2).unwrap();
    assert!(empty.is_empty());
}
