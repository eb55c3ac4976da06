//! Property tests against a model multiset.
//!
//! The model counts items by their *filter identity* (lower bucket of the
//! pair, fingerprint, value): two keys with the same identity are the same
//! item to any cuckoo filter, so that is the level at which remove and
//! duplicate semantics are exact. Small tables force long cuckoo walks,
//! Bloom placements, loop erasure and failed inserts.

use std::collections::HashMap;

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, InsertError, Lookup, Placement};
use proptest::prelude::*;

type Identity = (usize, u32, u32);

fn identity(f: &Filter, h: u64, value: u32) -> Identity {
    let (i1, i2, fp) = f.locate_hash(h);
    (i1.min(i2), fp, value)
}

#[derive(Clone, Debug)]
enum Op {
    Insert {
        key: u64,
        value: u32,
    },
    /// Removes the n-th item the model holds (only inserted items may be removed).
    Remove {
        nth: usize,
    },
    Migrate {
        budget: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<u64>(), 0u32..4).prop_map(|(key, value)| Op::Insert { key, value }),
        3 => any::<usize>().prop_map(|nth| Op::Remove { nth }),
        1 => (0usize..8).prop_map(|budget| Op::Migrate { budget }),
    ]
}

fn bloom_mode() -> impl Strategy<Value = Option<BloomConfig>> {
    prop_oneof![
        Just(None),
        (0u32..4).prop_map(|t| Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: t
        })),
        (0u32..4).prop_map(|t| Some(BloomConfig {
            mode: BloomMode::Tag { bits: 6 },
            threshold: t
        })),
    ]
}

fn check_all_present(f: &Filter, keys: &HashMap<Identity, Vec<u64>>) {
    for (id, hs) in keys {
        for &h in hs {
            let got = f.get_hash(h);
            assert!(got.is_hit(), "false negative for identity {id:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn filter_matches_multiset_model(
        log2 in 2u32..6,
        fp_bits in prop_oneof![Just(8u32), Just(12), Just(16)],
        bloom in bloom_mode(),
        packed in any::<bool>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let cfg = Config {
            buckets_log2: Some(log2),
            fingerprint_bits: fp_bits,
            value_bits: 2,
            bloom,
            max_kicks: 64,
            packed,
            ..Config::default()
        };
        // The packed layout exists for one-word buckets only (not f = 16).
        let f = Filter::new(cfg.clone())
            .or_else(|_| Filter::new(Config { packed: false, ..cfg }))
            .unwrap();
        // identity -> hashes of the keys inserted under it (multiplicity = len)
        let mut model: HashMap<Identity, Vec<u64>> = HashMap::new();
        let mut total = 0usize;
        for op in ops {
            match op {
                Op::Insert { key, value } => {
                    let before = f.len();
                    match f.insert_hash(key, value) {
                        Ok(out) => {
                            total += 1;
                            model.entry(identity(&f, key, value)).or_default().push(key);
                            if out.placement == Placement::Bloom {
                                prop_assert!(out.bloom_added);
                                prop_assert!(bloom.is_some());
                            }
                            if bloom.is_none() {
                                prop_assert!(!out.bloom_added);
                            }
                            prop_assert!(out.iterations >= 1 && out.iterations <= 128);
                        }
                        Err(InsertError::Full { iterations }) => {
                            // The random walk (Bloom path) runs to max_kicks;
                            // the plain path searches breadth-first (up to
                            // max_kicks reads, fewer when no bucket is left
                            // to reach), then walks max_kicks more.
                            if bloom.is_some() {
                                prop_assert_eq!(iterations, 64);
                            } else {
                                prop_assert!((66..=128).contains(&iterations));
                            }
                            prop_assert_eq!(f.len(), before, "a failed insert changed the filter");
                        }
                        Err(e) => prop_assert!(false, "unexpected error {e}"),
                    }
                }
                Op::Remove { nth } => {
                    if total == 0 {
                        continue;
                    }
                    let mut ids: Vec<Identity> = model.keys().copied().collect();
                    ids.sort_unstable();
                    let id = ids[nth % ids.len()];
                    let hs = model.get_mut(&id).unwrap();
                    let h = hs.pop().unwrap();
                    if hs.is_empty() {
                        model.remove(&id);
                    }
                    prop_assert!(f.remove_hash(h, id.2), "remove of an inserted item failed");
                    total -= 1;
                }
                Op::Migrate { budget } => {
                    let bloom_before = f.bloom_len();
                    let moved = f.migrate(budget);
                    prop_assert!(moved <= budget.min(bloom_before));
                    prop_assert_eq!(f.bloom_len(), bloom_before - moved);
                }
            }
            prop_assert_eq!(f.len(), total);
            let s = f.stats();
            prop_assert_eq!(s.items, total);
            prop_assert!(s.load_factor <= 1.0);
        }
        check_all_present(&f, &model);
        // Removing everything leaves nothing behind: no entry, no Bloom field.
        for (id, hs) in &model {
            for &h in hs {
                prop_assert!(f.remove_hash(h, id.2));
            }
        }
        prop_assert_eq!(f.len(), 0);
        prop_assert_eq!(f.bloom_len(), 0);
    }

    /// Batched lookups answer as `Filter::get_hash` does, in every bucket
    /// layout: one word with and without a Bloom field, two words, packed.
    #[test]
    fn batched_lookup_equals_single_lookups(
        keys in prop::collection::vec(any::<u64>(), 0..300),
        probes in prop::collection::vec(any::<u64>(), 0..300),
        layout in 0..4usize,
    ) {
        let bit = Some(BloomConfig { mode: BloomMode::Bit, threshold: 0 });
        let (fingerprint_bits, value_bits, bloom, packed) = match layout {
            0 => (8, 4, bit, false),
            1 => (12, 4, None, false),
            2 => (16, 8, Some(BloomConfig { mode: BloomMode::Tag { bits: 4 }, threshold: 0 }), false),
            _ => (8, 4, bit, true),
        };
        let f = Filter::new(Config {
            buckets_log2: Some(6),
            fingerprint_bits,
            value_bits,
            bloom,
            packed,
            ..Config::default()
        }).unwrap();
        for (i, k) in keys.iter().enumerate() {
            let _ = f.insert_hash(*k, (i % 16) as u32);
        }
        let all: Vec<u64> = keys.iter().chain(&probes).copied().collect();
        let mut out = vec![Lookup::Miss; all.len()];
        f.get_batch_hashes(&all, &mut out);
        for (h, got) in all.iter().zip(&out) {
            prop_assert_eq!(*got, f.get_hash(*h));
        }
        // The hooked batch hands every answer over, in order, as it stores it.
        let mut handed = Vec::new();
        let mut out3 = vec![Lookup::Miss; all.len()];
        f.get_batch_hashes_each(&all, &mut out3, |l| handed.push(l));
        prop_assert_eq!(&handed, &out);
        prop_assert_eq!(&out3, &out);
        // Byte keys through get_batch (chunked) agree with get.
        let byte_keys: Vec<[u8; 8]> = all.iter().map(|k| k.to_le_bytes()).collect();
        let mut out2 = vec![Lookup::Miss; byte_keys.len()];
        f.get_batch(&byte_keys, &mut out2);
        for (k, got) in byte_keys.iter().zip(&out2) {
            prop_assert_eq!(*got, f.get(k));
        }
    }
}

#[test]
fn same_item_is_stored_up_to_2b_times() {
    let f = Filter::new(Config::cuckoo(1 << 12, 12)).unwrap();
    let key = b"duplicate";
    for i in 0..8 {
        assert!(f.insert(key).is_ok(), "copy {i} refused");
    }
    // Both buckets now hold eight copies of one fingerprint: a ninth has
    // nowhere to go (every eviction lands in the same two full buckets).
    assert!(matches!(f.insert(key), Err(InsertError::Full { .. })));
    assert_eq!(f.len(), 8);
    for i in 0..8 {
        assert!(f.contains(key), "lost after {i} removals");
        assert!(f.remove(key));
    }
    assert!(!f.contains(key));
    assert!(!f.remove(key));
}

#[test]
fn values_are_returned_and_replaced_in_place() {
    let f = Filter::new(Config {
        value_bits: 8,
        ..Config::cuckoo(1000, 16)
    })
    .unwrap();
    let h = cfdp_filter::hash::hash_bytes(b"10.0.0.1->10.0.0.2:80");
    f.insert_hash(h, 42).unwrap();
    assert_eq!(f.get_hash(h), Lookup::Entry(42));
    assert_eq!(f.replace_value(h, 42, 7), Ok(true));
    assert_eq!(f.get_hash(h), Lookup::Entry(7));
    assert_eq!(f.replace_value(h, 42, 9), Ok(false));
    assert!(!f.remove_hash(h, 42), "removed with the wrong value");
    assert!(f.remove_hash(h, 7));
    assert_eq!(f.get_hash(h), Lookup::Miss);
}
