//! # cfdp-filter
//!
//! A concurrent cuckoo filter (Fan, Andersen, Kaminsky, Mitzenmacher,
//! CoNEXT 2014) with the integrated Bloom part of the Bloom-Cuckoo filter
//! (J. Li, "Bloom-Cuckoo filter: accelerating the insertion of cuckoo filters with an integrated Bloom filter"), built for a packet data plane: worker
//! threads look keys up without locks while a control thread inserts,
//! removes and migrates.
//!
//! * **Cuckoo filter**: partial-key cuckoo hashing, 4 entries per bucket, a
//!   power-of-two bucket count, `f`-bit fingerprints (4..=32), an optional
//!   `v`-bit value per entry returned by lookups (approximate table lookup).
//! * **Bloom-Cuckoo insert path**: Algorithm 2 of the Bloom-Cuckoo paper with threshold
//!   `t` and `max_iter` (= [`Config::max_kicks`]); Algorithm 1 for delete;
//!   a side table of the Bloom-part elements and [`Filter::migrate`].
//! * **Tag mode** ([`BloomMode::Tag`]): the Bloom field holds a `T`-bit tag
//!   instead of one bit (the paper's future work).
//! * **Concurrency**: one writer at a time (a writers' mutex; [`Filter::writer`]
//!   holds it across a batch), per-stripe sequence counters that readers
//!   validate (seqlock-style optimistic reads, no lock, no shared write), and
//!   insert paths planned first and executed backwards, so a lookup never
//!   misses an item inserted before it began.
//! * **Bulk build**: [`Filter::build`] for a known set of items.
//!
//! ```
//! use cfdp_filter::{hash::hash_bytes, BloomConfig, BloomMode, Config, Filter, Lookup};
//!
//! let f = Filter::new(Config {
//!     capacity: 10_000,
//!     fingerprint_bits: 16,
//!     value_bits: 8,
//!     bloom: Some(BloomConfig { mode: BloomMode::Bit, threshold: 5 }),
//!     ..Config::default()
//! })
//! .unwrap();
//! let h = hash_bytes(b"10.0.0.1 10.0.0.2 6 1234 80");
//! let out = f.insert_hash(h, 7).unwrap();
//! assert_eq!(out.iterations, 1); // an empty filter has room at once
//! assert_eq!(f.get_hash(h), Lookup::Entry(7));
//! let mut answers = [Lookup::Miss; 2];
//! f.get_batch_hashes(&[h, hash_bytes(b"other")], &mut answers);
//! assert_eq!(answers[0], Lookup::Entry(7));
//! assert!(f.remove_hash(h, 7));
//! assert!(!f.contains_hash(h));
//! let copy = Filter::from_bytes(&f.to_bytes()).unwrap();
//! assert!(copy.is_empty());
//! ```
//!
//! `filter/README.md` documents the bucket layout, the concurrency protocol
//! with the argument for zero false negatives, and the measured figures.
//!
//! ## FPR model
//!
//! Cuckoo part, at load α with `f`-bit non-zero fingerprints: a negative
//! probe compares against 2b = 8 entries, each occupied with probability α
//! and equal with probability 1/(2^f − 1):
//! `fpr_cf = 1 − (1 − α/(2^f − 1))^8 ≈ 8α/2^f`, bounded by
//! `1 − (1 − 2^−f)^8`.
//!
//! Bloom part with `n` elements in `m` buckets: 2n Bloom fields are set. In
//! bit mode a negative probe is positive when both its buckets are set:
//! `fpr_bf ≈ (2n/m)²` (the Bloom-Cuckoo paper). In tag mode each set field holds a tag
//! drawn uniformly from 2^T − 1 non-zero values, from the owner's
//! fingerprint and bucket pair, and the probe must find *its own* tag in
//! both buckets: `fpr_tag ≈ ((2n/m) / (2^T − 1))²`, i.e. the bit mode's
//! figure divided by (2^T − 1)² (T = 1 gives the bit mode back). Total:
//! `fpr ≈ fpr_cf + fpr_bf`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

// Huge-page-aware allocation of the bucket array (measured: see alloc.rs).
#[allow(unsafe_code)]
mod alloc;
mod bulk;
mod config;
mod execute;
mod filter;
pub mod hash;
mod layout;
mod outcome;
mod path;
// A cache-line prefetch intrinsic.
#[allow(unsafe_code)]
mod prefetch;
mod raw;
mod snapshot;
mod state;
mod sync;
pub mod tagmap;
mod writes;

pub use alloc::{Zeroable, ZeroedSlice};
pub use bulk::BuildError;
pub use config::{BloomConfig, BloomMode, Config, ConfigError, MAX_KICKS_LIMIT};
pub use layout::ENTRIES_PER_BUCKET;
pub use outcome::{Candidates, InsertError, InsertOutcome, Lookup, Placement, Stats};
pub use prefetch::read as prefetch_read;
pub use snapshot::SnapshotError;
pub use state::Filter;
pub use tagmap::{pair_hash, TagMap};
pub use writes::FilterWriter;

#[cfg(all(test, loom))]
mod loom_tests;
