//! Key hashing and the derivation of bucket indexes and fingerprints.
//!
//! Every key is hashed **once** to 64 bits; everything the filter needs comes
//! from that value: the primary bucket from the high 32 bits, the fingerprint
//! from the low bits. The data plane hashes each packet's 5-tuple once with
//! [`hash_bytes`] and hands the `u64` to the `*_hash` methods of the filter.
//!
//! # Choice of hash
//!
//! Picked by the `hashes` micro-benchmark in `bench/` (median ns per hash,
//! 2^16 keys, 21 rounds; AMD EPYC, 2 cores, 2026-11-22):
//!
//! | hash | 8 B | 13 B (IPv4 5-tuple) | 37 B (IPv6 5-tuple) |
//! |---|---|---|---|
//! | rapidhash v3 | 1.63 | 1.64 | 2.63 |
//! | rapidhash v3 micro | 1.91 | 1.89 | 2.57 |
//! | xxh3-64 | 1.90 | 1.91 | 3.29 |
//! | foldhash (fast) | 1.63 | 1.62 | 2.47 |
//! | CRC32C ×2 (SSE4.2) | 2.47 | 3.73 | 4.91 |
//! | SipHash-1-3 (std) | 6.36 | 7.13 | 10.49 |
//!
//! rapidhash v3 and foldhash tie; rapidhash v3 wins because its output is
//! specified (it matches the C++ reference) and stable across crate versions,
//! which snapshots rely on: a filter image stores fingerprints and bucket
//! positions that only mean something under the same hash. foldhash documents
//! no such stability. CRC32C is linear and mixes the high bits poorly.

/// Identifier of the hash function, stored in snapshots.
pub const HASH_ID: u32 = 0x5241_5033; // "RAP3": rapidhash v3, default secrets

/// Hashes a byte key (e.g. a packed 5-tuple) to the 64-bit value the filter
/// derives everything from.
#[inline]
pub fn hash_bytes(key: &[u8]) -> u64 {
    rapidhash::v3::rapidhash_v3(key)
}

/// Hashes a 64-bit integer key (little-endian bytes), as the benchmarks do.
#[inline]
pub fn hash_u64(key: u64) -> u64 {
    rapidhash::v3::rapidhash_v3(&key.to_le_bytes())
}

/// Mixes a fingerprint into the XOR distance between an item's two buckets.
///
/// Hashing the fingerprint (rather than XOR-ing it directly) matters: short
/// fingerprints would otherwise only reach nearby buckets.
#[inline]
pub(crate) fn fp_displacement(fp: u32) -> u64 {
    (u64::from(fp) | (u64::from(fp) << 32)).wrapping_mul(0xc6a4_a793_5bd1_e995) >> 17
}

/// Mixes (fingerprint, lower bucket of the pair) into a Bloom-part tag.
#[inline]
pub(crate) fn tag_mix(fp: u32, low_bucket: usize) -> u64 {
    let x = (u64::from(fp) << 32) ^ (low_bucket as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^ (x >> 32)
}
