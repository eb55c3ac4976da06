//! Filter parameters and their validation.

use std::fmt;

/// Number of entries per bucket (`b` in the papers).
pub const ENTRIES_PER_BUCKET: usize = 4;

/// What the per-bucket Bloom field holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BloomMode {
    /// The Bloom-Cuckoo paper exactly: one `bf` bit per bucket. An element in the Bloom
    /// part sets the bits of both its buckets.
    Bit,
    /// Beyond the paper (its "future work"): a `bits`-wide tag per bucket.
    /// An element in the Bloom part writes the same non-zero tag, derived
    /// from its fingerprint and bucket pair, into both its buckets; a lookup
    /// is positive only if both buckets hold *its* tag. See the crate docs
    /// for the FPR model.
    Tag {
        /// Tag width, 2..=32 bits.
        bits: u32,
    },
}

impl BloomMode {
    pub(crate) fn field_bits(self) -> u32 {
        match self {
            BloomMode::Bit => 1,
            BloomMode::Tag { bits } => bits,
        }
    }
}

/// The Bloom-Cuckoo insert path of the Bloom-Cuckoo paper (Algorithm 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BloomConfig {
    pub mode: BloomMode,
    /// Threshold `t`: the Bloom part may be used from iteration `t + 1` on.
    /// `t = 0` allows it already on the first access.
    pub threshold: u32,
}

/// Largest accepted `max_kicks`: an insert's time is bounded by it, so an
/// image from elsewhere must not be able to set billions (the papers use
/// 500 and 1000).
pub const MAX_KICKS_LIMIT: u32 = 1 << 16;

/// Parameters of a [`crate::Filter`].
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// How many items the filter must hold; the bucket count is the smallest
    /// power of two that holds them at 95 % load. Ignored when
    /// [`Config::buckets_log2`] is set.
    pub capacity: usize,
    /// Exact table size as a power of two (overrides `capacity`).
    pub buckets_log2: Option<u32>,
    /// Fingerprint width `f` (4..=32 bits).
    pub fingerprint_bits: u32,
    /// Associated value width per entry (0..=24 bits).
    pub value_bits: u32,
    /// `None`: plain cuckoo filter. `Some`: Bloom-Cuckoo filter.
    pub bloom: Option<BloomConfig>,
    /// MaxNumKicks of the cuckoo filter paper, `max_iter` of the Bloom-Cuckoo paper: the
    /// most iterations (bucket accesses) one insert may take.
    pub max_kicks: u32,
    /// Number of lock stripes (power of two); 0 picks one from the size.
    pub stripes: usize,
    /// Seed of the writers' random choices (which bucket, which entry).
    pub seed: u64,
    /// The packed bucket layout: buckets of `4·(f + v) + T` bits stored back
    /// to back instead of one or two whole words each (f = 12, bit mode:
    /// 12.9 instead of 16.8 bits per item at 95 % load), for one-word
    /// configurations (`4·(f + v) + T ≤ 64`). Lookups read one or two words
    /// that may straddle a cache line; see `bench/README.md` for the cost.
    pub packed: bool,
    /// Writer partitions (a power of two, 1 by default): a key's two
    /// buckets, and so every cuckoo move and Bloom pair, stay inside the
    /// partition that bits of its primary bucket name (bits 3 and up, or
    /// the lowest in a small table: `Filter::partition_shift`), and each
    /// partition has its own writer lock, side table and counters, so
    /// writers of different partitions never wait for each other. At most
    /// half the buckets; the stripes are at least as many. 1 is the
    /// paper's filter exactly.
    pub partitions: usize,
    /// Keep each Bloom-part element's value (4 bytes a bucket), readable
    /// without a lock: [`crate::Filter::candidates_hash`] then names the
    /// value of the element that holds a key's bucket pair, read with the
    /// buckets as of one instant. For a caller that resolves items by
    /// value (the connection table), whose Bloom-part items would
    /// otherwise need a side set of its own. Not stored in images: a
    /// loaded filter keeps no values unless its config is changed before
    /// use (`Filter::from_bytes` gives `false`).
    pub keep_bloom_values: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            capacity: 1 << 16,
            buckets_log2: None,
            fingerprint_bits: 12,
            value_bits: 0,
            bloom: None,
            max_kicks: 500,
            stripes: 0,
            seed: 0x0cfd_9f11_7e55_eed5,
            packed: false,
            partitions: 1,
            keep_bloom_values: false,
        }
    }
}

impl Config {
    /// A plain cuckoo filter for `capacity` items with `f`-bit fingerprints.
    pub fn cuckoo(capacity: usize, fingerprint_bits: u32) -> Self {
        Self {
            capacity,
            fingerprint_bits,
            ..Self::default()
        }
    }

    /// Number of buckets this configuration asks for.
    pub fn bucket_count(&self) -> Result<usize, ConfigError> {
        if let Some(log2) = self.buckets_log2 {
            if !(1..=32).contains(&log2) {
                return Err(ConfigError::Buckets(log2));
            }
            return Ok(1usize << log2);
        }
        if self.capacity == 0 {
            return Err(ConfigError::Capacity(0));
        }
        let per_bucket = ENTRIES_PER_BUCKET as f64 * 0.95;
        let need = (self.capacity as f64 / per_bucket).ceil() as usize;
        let buckets = need.max(2).checked_next_power_of_two();
        match buckets {
            Some(b) if b <= 1usize << 32 => Ok(b),
            _ => Err(ConfigError::Capacity(self.capacity)),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let buckets = self.bucket_count()?;
        if self.max_kicks == 0 || self.max_kicks > MAX_KICKS_LIMIT {
            return Err(ConfigError::MaxKicks);
        }
        if self.stripes != 0 && !self.stripes.is_power_of_two() {
            return Err(ConfigError::Stripes(self.stripes));
        }
        if !self.partitions.is_power_of_two() || self.partitions > buckets / 2 {
            return Err(ConfigError::Partitions {
                partitions: self.partitions,
                buckets,
            });
        }
        if let Some(b) = self.bloom {
            if let BloomMode::Tag { bits } = b.mode {
                if !(2..=32).contains(&bits) {
                    return Err(ConfigError::TagBits(bits));
                }
            }
        }
        Ok(())
    }
}

/// Why a configuration or an image was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    FingerprintBits(u32),
    ValueBits(u32),
    TagBits(u32),
    DoesNotFit {
        fp_bits: u32,
        value_bits: u32,
        tag_bits: u32,
    },
    /// The packed layout needs a bucket that fits one word.
    PackedDoesNotFit {
        fp_bits: u32,
        value_bits: u32,
        tag_bits: u32,
    },
    Capacity(usize),
    Buckets(u32),
    MaxKicks,
    Stripes(usize),
    /// Partitions must be a power of two, at most half the buckets.
    Partitions {
        partitions: usize,
        buckets: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::FingerprintBits(b) => {
                write!(f, "fingerprint_bits = {b}: must be 4..=32")
            }
            ConfigError::ValueBits(b) => write!(f, "value_bits = {b}: must be 0..=24"),
            ConfigError::TagBits(b) => write!(f, "Bloom tag bits = {b}: must be 2..=32"),
            ConfigError::DoesNotFit {
                fp_bits,
                value_bits,
                tag_bits,
            } => write!(
                f,
                "a bucket of 4 × ({fp_bits}-bit fingerprint + {value_bits}-bit value) \
                 plus a {tag_bits}-bit Bloom field does not fit in two 64-bit words"
            ),
            ConfigError::PackedDoesNotFit {
                fp_bits,
                value_bits,
                tag_bits,
            } => write!(
                f,
                "the packed layout needs 4 × ({fp_bits}-bit fingerprint + {value_bits}-bit value) \
                 plus the {tag_bits}-bit Bloom field to fit in 64 bits"
            ),
            ConfigError::Capacity(c) => {
                write!(
                    f,
                    "capacity = {c}: must be between 1 and about 16 billion items"
                )
            }
            ConfigError::Buckets(l) => write!(f, "buckets_log2 = {l}: must be 1..=32"),
            ConfigError::MaxKicks => {
                write!(f, "max_kicks must be between 1 and {MAX_KICKS_LIMIT}")
            }
            ConfigError::Stripes(s) => write!(f, "stripes = {s}: must be a power of two"),
            ConfigError::Partitions {
                partitions,
                buckets,
            } => write!(
                f,
                "partitions = {partitions}: must be a power of two, at most half \
                 the {buckets} buckets"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
