//! Snapshots: round trip, and clear errors for corrupt or foreign images.

mod common;

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, SnapshotError};
use common::{fill_to, Keys};

fn filled(mode: Option<BloomMode>) -> (Filter, Vec<u64>) {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        fingerprint_bits: 16,
        value_bits: 8,
        bloom: mode.map(|mode| BloomConfig { mode, threshold: 0 }),
        max_kicks: 1000,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(11);
    let mut hs = fill_to(&f, 0.96, &mut keys);
    for _ in 0..64 {
        let h = keys.next_key();
        if f.insert_hash(h, 3).is_ok() {
            hs.push(h);
        }
    }
    (f, hs)
}

#[test]
fn round_trip_keeps_every_item_and_the_bloom_part() {
    for mode in [None, Some(BloomMode::Bit), Some(BloomMode::Tag { bits: 8 })] {
        let (f, hs) = filled(mode);
        if mode.is_some() {
            assert!(f.bloom_len() > 0, "test wants Bloom elements in the image");
        }
        let img = f.to_bytes();
        let g = Filter::from_bytes(&img).expect("own image loads");
        assert_eq!(g.len(), f.len());
        assert_eq!(g.bloom_len(), f.bloom_len());
        assert_eq!(g.config().fingerprint_bits, 16);
        for &h in &hs {
            assert_eq!(g.get_hash(h), f.get_hash(h));
            assert!(g.contains_hash(h));
        }
        // The restored filter is fully functional: migrate, remove.
        g.migrate(usize::MAX);
        assert_eq!(
            g.to_bytes().len(),
            img.len() - 24 * f.bloom_len() + 24 * g.bloom_len()
        );
    }
}

#[test]
fn corrupt_and_foreign_images_are_refused_clearly() {
    let (f, _) = filled(Some(BloomMode::Bit));
    let img = f.to_bytes();

    let err = Filter::from_bytes(&img[..40]).unwrap_err();
    assert!(matches!(err, SnapshotError::TooShort { .. }), "{err}");

    let mut bad = img.clone();
    bad[0] = b'X';
    assert_eq!(
        Filter::from_bytes(&bad).unwrap_err(),
        SnapshotError::BadMagic
    );

    let mut bad = img.clone();
    bad[8] = 9;
    assert_eq!(
        Filter::from_bytes(&bad).unwrap_err(),
        SnapshotError::UnsupportedVersion(9)
    );

    let mut bad = img.clone();
    let mid = img.len() / 2;
    bad[mid] ^= 0x40;
    let err = Filter::from_bytes(&bad).unwrap_err();
    assert!(
        matches!(err, SnapshotError::ChecksumMismatch { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("corrupt"));

    let err = Filter::from_bytes(&img[..img.len() - 1]).unwrap_err();
    assert!(
        matches!(err, SnapshotError::ChecksumMismatch { .. }),
        "{err}"
    );

    // A well-formed image with a crafted, inconsistent body (checksum fixed up).
    let mut bad = img.clone();
    bad[12] ^= 1; // hash id
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::ForeignHash(_)), "{err}");

    let mut bad = img.clone();
    bad[68] ^= 1; // entry count
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::Inconsistent(_)), "{err}");

    // A header claiming 2^32 buckets in a small image is refused before any
    // table is allocated (this would otherwise ask for 32 GiB).
    let mut bad = img.clone();
    bad[40..44].copy_from_slice(&32u32.to_le_bytes()); // buckets log2
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::BadParameters(_)), "{err}");

    // max_kicks bounds every insert's time: an image cannot set billions.
    let mut bad = img.clone();
    bad[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::Config(_)), "{err}");

    let mut bad = img.clone();
    bad[48] = 7; // layout
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::BadParameters(_)), "{err}");

    // Packed, but the image's buckets (f = 16 + 8-bit values) need two words.
    let mut bad = img.clone();
    bad[48] = 1;
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::Config(_)), "{err}");

    let mut bad = img.clone();
    bad[16] = 40; // fingerprint bits
    let err = Filter::from_bytes(&reseal(bad)).unwrap_err();
    assert!(matches!(err, SnapshotError::Config(_)), "{err}");
}

/// `b` with its checksum made right (a crafted image that reaches the
/// checks behind the checksum).
fn reseal(mut b: Vec<u8>) -> Vec<u8> {
    let (len, n) = (b.len(), b.len().saturating_sub(4));
    let crc = crc32fast::hash(&b[..n]);
    b[n..].copy_from_slice(&crc.to_le_bytes()[..len - n]);
    b
}

/// Inputs the `snapshot` fuzz target found (filter/fuzz). The first made
/// every insert walk up to the 2^32 iterations its header asked for: an
/// image that loads has an insert walk within [`MAX_KICKS_LIMIT`] (the
/// bound on an insert's work, checked instead of a clock), and inserts
/// and a migration into it end. Each input as found and re-sealed (its
/// checksum made right), as the fuzz target tries it: an input reaches
/// the header's checks only re-sealed.
#[test]
fn fuzz_regressions_load_or_fail_fast() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let found = std::fs::read(&path).unwrap();
        for data in [found.clone(), reseal(found)] {
            let Ok(f) = Filter::from_bytes(&data) else {
                continue;
            };
            let kicks = f.config().max_kicks;
            assert!(
                (1..=cfdp_filter::MAX_KICKS_LIMIT).contains(&kicks),
                "{}: loaded with max_kicks {kicks}",
                path.display()
            );
            for h in [1u64, 0xdead_beef, u64::MAX] {
                let _ = f.insert_hash(h, 0);
            }
            f.migrate(4);
        }
        n += 1;
    }
    assert!(n >= 1, "regression inputs missing");
}

/// A packed filter's image carries its layout and restores to the same
/// answers; the image holds the buckets in the word layout's form.
#[test]
fn packed_round_trip() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        fingerprint_bits: 12,
        bloom: Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: 0,
        }),
        packed: true,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(12);
    let mut hs = fill_to(&f, 0.96, &mut keys);
    for _ in 0..64 {
        let h = keys.next_key();
        if f.insert_hash(h, 0).is_ok() {
            hs.push(h);
        }
    }
    assert!(f.bloom_len() > 0);
    let g = Filter::from_bytes(&f.to_bytes()).expect("own packed image loads");
    assert!(g.config().packed);
    assert_eq!((g.len(), g.bloom_len()), (f.len(), f.bloom_len()));
    assert_eq!(g.stats().memory_bytes, f.stats().memory_bytes);
    for &h in &hs {
        assert_eq!(g.get_hash(h), f.get_hash(h));
        assert!(g.contains_hash(h));
    }
}

/// Images of format versions 1 (before the layout field) and 2 (before
/// the partitions field) still load, as one partition.
#[test]
fn version_1_and_2_images_still_load() {
    let (f, hs) = filled(Some(BloomMode::Bit));
    let img = f.to_bytes();
    // Version 2: no partitions field at offset 52 nor partition shift at
    // 56; version 1: no layout field at 48 either. The version, a fresh
    // checksum.
    for (version, cut) in [(2u32, 52..60), (1, 48..60)] {
        let mut old = img[..img.len() - 4].to_vec();
        old.drain(cut);
        old[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        let g = Filter::from_bytes(&old).expect("old image loads");
        assert!(!g.config().packed);
        assert_eq!((g.len(), g.partitions()), (f.len(), 1));
        for &h in &hs {
            assert_eq!(g.get_hash(h), f.get_hash(h));
        }
    }
}

/// A partitioned filter's image keeps its partitions (the alternate
/// bucket depends on them), its Bloom part and its counts; an image whose
/// partitions field is changed is refused, not loaded with items in
/// buckets their lookups never read.
#[test]
fn partitioned_images_round_trip_and_a_changed_count_is_refused() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        fingerprint_bits: 12,
        value_bits: 8,
        bloom: Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: 0,
        }),
        partitions: 8,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(21);
    let mut hs = fill_to(&f, 0.90, &mut keys);
    for _ in 0..128 {
        let h = keys.next_key();
        if f.insert_hash(h, 1).is_ok() {
            hs.push(h);
        }
    }
    assert!(
        f.bloom_len() > 0,
        "the Bloom-path inserts reached the Bloom part"
    );
    let img = f.to_bytes();
    let g = Filter::from_bytes(&img).expect("own image loads");
    assert_eq!(g.partitions(), 8);
    assert_eq!((g.len(), g.bloom_len()), (f.len(), f.bloom_len()));
    for &h in &hs {
        assert_eq!(g.get_hash(h), f.get_hash(h));
    }
    // Every partition's own elements migrate (each writer has its own).
    assert_eq!(g.migrate(usize::MAX), f.migrate(usize::MAX));
    let mut bad = img[..img.len() - 4].to_vec();
    bad[52..56].copy_from_slice(&4u32.to_le_bytes());
    let crc = crc32fast::hash(&bad);
    bad.extend_from_slice(&crc.to_le_bytes());
    let err = Filter::from_bytes(&bad).unwrap_err();
    assert!(matches!(err, SnapshotError::Inconsistent(_)), "{err}");
}

/// A version 3 image of a partitioned filter (written by the code of
/// 04645a4, before the partition bits moved up from the lowest bits:
/// 2^10 buckets, 8 partitions, f = 12, v = 8, Bloom bit mode, the first
/// 3,687 keys of `Keys::new(31)` put in by `fill_to(.., 0.90, ..)`) loads
/// with its partitions where it had them: every key found. Loaded with
/// today's partition bits, most keys in their alternate bucket would be
/// looked for elsewhere.
#[test]
fn a_version_3_partitioned_image_loads_with_its_partition_bits() {
    let img = include_bytes!("images/v3-partitions-8.bin");
    assert_eq!(u32::from_le_bytes(img[8..12].try_into().unwrap()), 3);
    let g = Filter::from_bytes(img).expect("version 3 image loads");
    assert_eq!(
        (g.partitions(), g.partition_shift(), g.len()),
        (8, 0, 3_687)
    );
    let mut keys = Keys::new(31);
    let missing = (0..3_687)
        .map(|_| cfdp_filter::hash::hash_u64(keys.next_key()))
        .filter(|&h| !g.contains_hash(h))
        .count();
    assert_eq!(missing, 0, "keys of the image not found");
    // Today's filter of the same configuration puts the partition bits
    // above a cache line's buckets, and its own image says so.
    let own = Filter::new(g.config().clone()).unwrap();
    assert_eq!(own.partition_shift(), 3);
    let back = Filter::from_bytes(&own.to_bytes()).unwrap();
    assert_eq!(back.partition_shift(), 3);
}

/// An image whose partition shift is neither 0 nor this version's for its
/// sizes is refused (its items' alternate buckets would be computed with
/// a mask they were not placed with).
#[test]
fn an_image_with_a_foreign_partition_shift_is_refused() {
    let f = Filter::new(Config {
        buckets_log2: Some(10),
        partitions: 8,
        ..Config::default()
    })
    .unwrap();
    let img = f.to_bytes();
    assert_eq!(u32::from_le_bytes(img[56..60].try_into().unwrap()), 3);
    for shift in [1u32, 2, 5] {
        let mut bad = img[..img.len() - 4].to_vec();
        bad[56..60].copy_from_slice(&shift.to_le_bytes());
        let crc = crc32fast::hash(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        let err = Filter::from_bytes(&bad).unwrap_err();
        assert!(matches!(err, SnapshotError::BadParameters(_)), "{err}");
    }
}
