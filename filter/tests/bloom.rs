//! The Bloom-Cuckoo filter (the Bloom-Cuckoo paper): Bloom-part placement, delete,
//! migration, and the tag mode.

mod common;

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, InsertError, Lookup, Placement};
use common::{fill_to, Keys};

fn bcf(mode: BloomMode, t: u32) -> Filter {
    Filter::new(Config {
        buckets_log2: Some(12),
        fingerprint_bits: 12,
        value_bits: 4,
        bloom: Some(BloomConfig { mode, threshold: t }),
        max_kicks: 1000,
        ..Config::default()
    })
    .unwrap()
}

/// Fills a BCF to 96 %, then inserts a burst; returns (burst keys, bloom placements).
fn burst(f: &Filter, keys: &mut Keys, n: usize) -> (Vec<(u64, u32)>, usize) {
    let mut burst = Vec::new();
    let mut placements = 0;
    for i in 0..n {
        let h = cfdp_filter::hash::hash_u64(keys.next_key());
        let v = (i % 16) as u32;
        let out = f.insert_hash(h, v).expect("BCF burst insert failed");
        placements += usize::from(out.bloom_added);
        burst.push((h, v));
    }
    (burst, placements)
}

#[test]
fn burst_into_full_filter_uses_bloom_part_and_finds_everything() {
    for mode in [BloomMode::Bit, BloomMode::Tag { bits: 8 }] {
        let f = bcf(mode, 0);
        let mut keys = Keys::new(1);
        let base = fill_to(&f, 0.96, &mut keys);
        let (burst, placements) = burst(&f, &mut keys, 256);
        assert!(placements > 0, "{mode:?}: no Bloom placements at 96 % load");
        assert_eq!(f.bloom_len(), placements);
        for &h in &base {
            assert!(f.contains_hash(h));
        }
        for &(h, v) in &burst {
            match f.get_hash(h) {
                Lookup::Entry(_) | Lookup::Bloom => {}
                Lookup::Miss => panic!("{mode:?}: burst item {h:#x} (value {v}) missing"),
            }
        }
    }
}

#[test]
fn threshold_delays_bloom_part_and_bounds_iterations() {
    let f = bcf(BloomMode::Bit, 10);
    let mut keys = Keys::new(2);
    fill_to(&f, 0.96, &mut keys);
    let mut placements = 0;
    for _ in 0..256 {
        let h = cfdp_filter::hash::hash_u64(keys.next_key());
        let out = f.insert_hash(h, 0).unwrap();
        placements += usize::from(out.bloom_added);
        if out.bloom_added {
            // Algorithm 2: the Bloom part is only tried from iteration t+1.
            assert!(
                out.iterations > 10,
                "Bloom used at iteration {}",
                out.iterations
            );
        }
        assert!(out.iterations <= 1000);
        if out.placement == Placement::Bloom {
            assert!(out.bloom_added);
        }
    }
    // Without this the test would pass on a filter that never used its
    // Bloom part at all.
    assert!(placements > 0, "no Bloom placement in 256 inserts at 96 %");
    assert_eq!(f.bloom_len(), placements);
}

/// `migrate` takes turns over the Bloom part: elements that cannot move
/// must not keep later ones from being tried. A filter is filled (one
/// iteration per insert, so every full pair sends its item to the Bloom
/// part) until the Bloom part holds elements; then room is made only around
/// the element with the highest bucket pair, which sorts last in the side
/// table. `migrate(1)`, called as often as there are elements, must move it.
#[test]
fn migrate_takes_turns_over_elements_that_cannot_move() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        fingerprint_bits: 12,
        bloom: Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: 0,
        }),
        max_kicks: 1,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(5);
    let mut entries = Vec::new();
    let mut bloom = Vec::new();
    for _ in 0..(f.slots() * 2) {
        let h = cfdp_filter::hash::hash_u64(keys.next_key());
        match f.insert_hash(h, 0) {
            Ok(out) if out.placement == Placement::Bloom => bloom.push(h),
            Ok(_) => entries.push(h),
            Err(InsertError::Full { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(bloom.len() >= 8, "only {} Bloom elements", bloom.len());
    // With max_kicks = 1 nothing can move while both buckets are full.
    assert_eq!(f.migrate(bloom.len()), 0);
    let pair = |h: u64| {
        let (a, b, _) = f.locate_hash(h);
        (a.min(b), a.max(b))
    };
    let &last = bloom.iter().max_by_key(|&&h| pair(h)).unwrap();
    let (lo, hi) = pair(last);
    // Empty both buckets of the last element's pair.
    let mut removed = 0;
    for &h in &entries {
        let (a, b, _) = f.locate_hash(h);
        if [a, b].iter().any(|x| *x == lo || *x == hi) {
            assert!(f.remove_hash(h, 0));
            removed += 1;
        }
    }
    assert!(removed > 0);
    let first = pair(*bloom.iter().min_by_key(|&&h| pair(h)).unwrap());
    assert!(first.0 < lo, "the element must not be the first one tried");
    let mut calls = 0;
    while f.get_hash(last) == Lookup::Bloom {
        calls += 1;
        assert!(
            calls <= bloom.len(),
            "migrate(1) never reached the last element in {calls} calls"
        );
        f.migrate(1);
    }
    assert!(matches!(f.get_hash(last), Lookup::Entry(0)));
}

#[test]
fn plain_cuckoo_never_uses_bloom_part() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        max_kicks: 500,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(3);
    let mut failed = false;
    for _ in 0..f.slots() {
        match f.insert_hash(keys.next_key(), 0) {
            Ok(out) => assert!(!out.bloom_added && out.placement == Placement::Entry),
            Err(InsertError::Full { iterations }) => {
                // Breadth-first search (≤ 500 reads), then a 500-step walk.
                assert!((502..=1000).contains(&iterations), "{iterations}");
                failed = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed, "filling every slot never failed");
    assert_eq!(f.bloom_len(), 0);
    assert!(f.stats().load_factor > 0.9);
}

#[test]
fn remove_from_bloom_part_and_migration_keep_every_element() {
    for mode in [BloomMode::Bit, BloomMode::Tag { bits: 8 }] {
        let f = bcf(mode, 0);
        let mut keys = Keys::new(4);
        let base = fill_to(&f, 0.96, &mut keys);
        let (burst, placements) = burst(&f, &mut keys, 512);
        assert!(placements > 10);
        // Free room (remove a quarter of the base items), then migrate.
        for &h in base.iter().step_by(4) {
            assert!(f.remove_hash(h, 0));
        }
        let before = f.bloom_len();
        let moved = f.migrate(usize::MAX);
        assert_eq!(
            moved, before,
            "{mode:?}: migration left elements behind with room free"
        );
        assert_eq!(f.bloom_len(), 0);
        for (i, &h) in base.iter().enumerate() {
            if i % 4 != 0 {
                assert!(f.contains_hash(h), "{mode:?}: base item lost by migration");
            }
        }
        for &(h, v) in &burst {
            // After migration every burst item is back in an entry with its value
            // (unless a colliding fingerprint answers first with another value).
            assert!(matches!(f.get_hash(h), Lookup::Entry(_)));
            assert!(
                f.remove_hash(h, v),
                "{mode:?}: burst item could not be removed"
            );
        }
    }
}

#[test]
fn removing_bloom_elements_clears_their_fields() {
    let f = bcf(BloomMode::Bit, 0);
    let mut keys = Keys::new(5);
    let base = fill_to(&f, 0.96, &mut keys);
    let (burst, placements) = burst(&f, &mut keys, 256);
    assert!(placements > 0);
    for &(h, v) in &burst {
        assert!(f.remove_hash(h, v));
    }
    // Evicted base items may still sit in the Bloom part; remove all base too.
    for &h in &base {
        assert!(f.remove_hash(h, 0));
    }
    assert_eq!(f.len(), 0);
    assert_eq!(f.bloom_len(), 0);
    // With no element and no field set, nothing is found.
    let mut probe = Keys::new(99);
    for _ in 0..10_000 {
        assert_eq!(f.get_hash(probe.next_key()), Lookup::Miss);
    }
}

#[test]
fn tag_mode_cuts_bloom_false_positives() {
    // Same burst into the same base, bit mode versus 8-bit tags; count
    // negatives that are answered by the Bloom part.
    let mut rates = Vec::new();
    for mode in [BloomMode::Bit, BloomMode::Tag { bits: 8 }] {
        let f = bcf(mode, 0);
        let mut keys = Keys::new(6);
        fill_to(&f, 0.96, &mut keys);
        burst(&f, &mut keys, 1024);
        let mut probe = Keys::new(0xdead_beef);
        let bloom_fp = (0..400_000)
            .filter(|_| f.get_hash(probe.next_key()) == Lookup::Bloom)
            .count();
        rates.push(bloom_fp);
    }
    assert!(
        rates[0] > 100,
        "bit mode produced too few Bloom false positives to compare: {rates:?}"
    );
    assert!(
        rates[1] * 20 < rates[0],
        "tag mode did not cut Bloom false positives: {rates:?}"
    );
}

/// An insert whose walk evicts an entry into the Bloom part reports that
/// entry's value: the item now answers `Bloom`, without it (a caller that
/// resolves items by value must learn which one moved). Items carry their
/// index as value; every reported one must be an earlier item that now
/// answers from the Bloom part, and every item in the Bloom part must be
/// accounted for: placed there itself, or reported as evicted.
#[test]
fn an_insert_reports_the_value_it_evicted_into_the_bloom_part() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        fingerprint_bits: 16,
        value_bits: 12,
        bloom: Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: 2,
        }),
        max_kicks: 500,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(9);
    let mut hashes = Vec::new();
    let mut in_bloom = std::collections::BTreeSet::new();
    let mut evictions = 0;
    for v in 0..(f.slots() as u32) {
        let h = cfdp_filter::hash::hash_u64(keys.next_key());
        let out = match f.insert_hash(h, v) {
            Ok(out) => out,
            Err(InsertError::Full { .. }) => break,
            Err(e) => panic!("{e}"),
        };
        hashes.push(h);
        if out.placement == Placement::Bloom {
            in_bloom.insert(v);
        }
        if let Some(e) = out.evicted {
            assert!(e < v, "evicted value {e} is not an earlier item's");
            assert!(out.bloom_added);
            in_bloom.insert(e);
            evictions += 1;
        }
    }
    assert!(evictions > 0, "no entry evicted into the Bloom part");
    assert_eq!(
        f.bloom_len(),
        in_bloom.len(),
        "Bloom items not accounted for"
    );
    for &v in &in_bloom {
        assert_eq!(f.get_hash(hashes[v as usize]), Lookup::Bloom, "item {v}");
    }
}

/// `candidates_hash` gives every value stored under a hash's fingerprint
/// (two items whose fingerprints and buckets collide both show), and says
/// when the Bloom part may hold the item instead: what a caller that keeps
/// items by value needs when `get_hash`'s first value is another item's.
#[test]
fn candidates_list_every_colliding_value_and_the_bloom_part() {
    let f = bcf(BloomMode::Bit, 0);
    let h = cfdp_filter::hash::hash_u64(42);
    f.insert_hash(h, 3).unwrap();
    f.insert_hash(h, 9).unwrap();
    let mut v = f.candidates_hash(h).values().to_vec();
    v.sort_unstable();
    assert_eq!(v, [3, 9]);
    assert!(!f.candidates_hash(h).bloom);
    assert!(f
        .candidates_hash(cfdp_filter::hash::hash_u64(43))
        .values()
        .is_empty());
    // Near full, every burst item is among its candidates or in the Bloom
    // part, and the Bloom-placed ones say so.
    let mut keys = Keys::new(9);
    fill_to(&f, 0.96, &mut keys);
    let (burst, placements) = burst(&f, &mut keys, 256);
    assert!(placements > 0);
    let mut in_bloom = 0;
    for &(h, v) in &burst {
        let c = f.candidates_hash(h);
        if !c.values().contains(&v) {
            assert!(c.bloom, "{h:#x} (value {v}) is nowhere");
            in_bloom += 1;
        }
    }
    assert!(
        in_bloom > 0,
        "no burst item was found only in the Bloom part"
    );
}

/// With `keep_bloom_values`, a key answered from the Bloom part is named
/// with its own value by `candidates_hash` (the connection table finds a
/// Bloom-part connection's slot so, without a lock), in every partition;
/// without it, no value is named.
#[test]
fn kept_bloom_values_name_each_bloom_items_own_value() {
    for keep in [true, false] {
        let f = Filter::new(Config {
            buckets_log2: Some(10),
            fingerprint_bits: 12,
            value_bits: 12,
            bloom: Some(BloomConfig {
                mode: BloomMode::Bit,
                threshold: 0,
            }),
            partitions: 4,
            keep_bloom_values: keep,
            ..Config::default()
        })
        .unwrap();
        let mut keys = Keys::new(5);
        let mut held = Vec::new();
        for v in 0..4000u32 {
            let h = keys.next_key();
            if f.insert_hash(h, v & 0xfff).is_ok() {
                held.push((h, v & 0xfff));
            }
        }
        let in_bloom: Vec<_> = held
            .iter()
            .filter(|&&(h, _)| f.get_hash(h) == Lookup::Bloom)
            .collect();
        assert!(
            in_bloom.len() > 10,
            "few Bloom-part items: {}",
            in_bloom.len()
        );
        for &&(h, v) in &in_bloom {
            let c = f.candidates_hash(h);
            assert!(c.bloom);
            assert_eq!(c.bloom_value, keep.then_some(v), "key {h:#x}");
        }
    }
}
