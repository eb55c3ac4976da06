//! Model checking of the read-versus-relocate protocol with `loom`.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p cfdp-filter --lib --release loom`
//!
//! A reader looks an item up while a writer moves that item between its two
//! buckets, into the Bloom part and back into an entry (migration). loom
//! explores the interleavings of every atomic access of both threads; in
//! every one of them the reader must find the item.

use std::sync::Arc;

use loom::thread;

use crate::config::{BloomConfig, BloomMode, Config};
use crate::state::Filter;

fn tiny(fp_bits: u32, value_bits: u32, mode: BloomMode, packed: bool) -> Filter {
    Filter::new(Config {
        buckets_log2: Some(2),
        fingerprint_bits: fp_bits,
        value_bits,
        bloom: Some(BloomConfig { mode, threshold: 0 }),
        max_kicks: 8,
        stripes: 4,
        packed,
        ..Config::default()
    })
    .expect("valid config")
}

fn model(fp_bits: u32, value_bits: u32, mode: BloomMode, packed: bool) {
    model_steps(fp_bits, value_bits, mode, packed, true)
}

/// `bloom_steps`: after the relocation, also evict into the Bloom part and
/// migrate back.
fn model_steps(fp_bits: u32, value_bits: u32, mode: BloomMode, packed: bool, bloom_steps: bool) {
    let value = u32::from(value_bits > 0);
    loom::model(move || {
        let f = Arc::new(tiny(fp_bits, value_bits, mode, packed));
        let h = 0x0123_4567_89ab_cdefu64;
        f.insert_hash(h, value).expect("room in an empty filter");
        let reader = {
            let f = Arc::clone(&f);
            thread::spawn(move || {
                for _ in 0..1 {
                    assert!(f.get_hash(h).is_hit(), "reader missed an installed item");
                }
            })
        };
        // Writer: relocate to the other bucket, evict into the Bloom part,
        // migrate back into an entry.
        f.test_relocate(h, value);
        if !bloom_steps {
            // Back again: the move towards the bucket the reader reads
            // first is the one a reader without validation can miss.
            f.test_relocate(h, value);
        }
        if bloom_steps {
            f.test_evict_to_bloom(h, value);
            assert_eq!(f.migrate(1), 1);
        }
        reader.join().expect("reader thread");
        assert!(f.get_hash(h).is_hit());
        assert_eq!(f.bloom_len(), 0);
    });
}

#[test]
fn loom_reader_never_misses_during_relocation_one_word_buckets() {
    model(8, 0, BloomMode::Bit, false);
}

/// Packed: 33-bit buckets, each in its own stripe, sharing words with
/// their neighbours (bucket 1 straddles words 0 and 1). Relocation only:
/// with the Bloom steps too the state space takes ~7 minutes, and those
/// steps are the word layout's code on extracted buckets.
#[test]
fn loom_reader_never_misses_during_relocation_packed_buckets() {
    model_steps(8, 0, BloomMode::Bit, true, false);
}

#[test]
fn loom_reader_never_misses_during_relocation_two_word_buckets() {
    model(16, 8, BloomMode::Tag { bits: 4 }, false);
}

/// Two writers, each moving an item of its own partition between that
/// item's two buckets, while a reader looks both items up: the partitions'
/// writers share no lock, and in every interleaving the reader finds both
/// items and the counts stay exact. Packed: the items' buckets share words
/// (bucket `i` of partition 0 and `i + 1` of partition 1), so this also
/// checks that one writer's store of a shared word never undoes the
/// other's.
fn two_writers(packed: bool) {
    loom::model(move || {
        let f = Arc::new(
            Filter::new(Config {
                buckets_log2: Some(2),
                fingerprint_bits: 8,
                value_bits: 0,
                bloom: None,
                max_kicks: 8,
                stripes: 4,
                packed,
                partitions: 2,
                ..Config::default()
            })
            .expect("valid config"),
        );
        // Primary buckets 2 and 3 (`h >> 32`'s low bits): partitions 0 and 1.
        let items = [0x0000_0002_89ab_cdefu64, 0x0000_0003_1357_9bdf];
        assert_eq!(items.map(|h| f.partition_of(h)), [0, 1]);
        for h in items {
            f.insert_hash(h, 0).expect("room in an empty filter");
        }
        let writers: Vec<_> = items
            .iter()
            .map(|&h| {
                let f = Arc::clone(&f);
                thread::spawn(move || f.test_relocate(h, 0))
            })
            .collect();
        for h in items {
            assert!(f.get_hash(h).is_hit(), "reader missed an installed item");
        }
        for w in writers {
            w.join().expect("writer thread");
        }
        for h in items {
            assert!(f.get_hash(h).is_hit());
        }
        assert_eq!(f.len(), 2);
    });
}

#[test]
fn loom_two_writers_of_two_partitions_and_a_reader() {
    two_writers(false);
}

#[test]
fn loom_two_writers_of_two_partitions_packed_buckets_sharing_words() {
    two_writers(true);
}
