//! Building a table: its stripes and their shares of the slots, the
//! filter in front of them and its writer partitions.

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter, ZeroedSlice};
use cfdp_rules::HashSecret;

use super::slot::{AcctSlot, Shard, STATE_SLOTS};
use super::{ConnTable, Options, TableError, CLOCKS, EPOCH_LINE, MAX_SLOTS, SHARDS};
use crate::state::{State, Timeouts};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, CachePadded, Mutex};

impl ConnTable {
    /// A table for `capacity` connections, accounting off. `secret` keys
    /// its hash: a random one, so that nobody can compute offline keys
    /// that crowd one stripe or one filter bucket.
    pub fn new(
        capacity: usize,
        timeouts: Timeouts,
        secret: HashSecret,
    ) -> Result<Self, TableError> {
        Self::with_options(capacity, timeouts, secret, Options::default())
    }

    /// [`Self::new`] with its [`Options`].
    pub fn with_options(
        capacity: usize,
        timeouts: Timeouts,
        secret: HashSecret,
        opts: Options,
    ) -> Result<Self, TableError> {
        let capacity = capacity.max(1);
        // Stripes each owning its share of the slots and a margin of six
        // standard deviations of a binomial share (a stripe fills before
        // the table only by that much bad luck), all allocated up front:
        // nothing grows under a stripe's lock. Shares of 4,096 connections
        // at least (a margin of 10 %: at 64 a share, the margin was 40 %
        // of the default 65,536), but 16 stripes where there are 1,024
        // connections to share (writers on 16 cores rarely meet), 256 at
        // most.
        let shards = (capacity / 4096)
            .max((capacity / 64).min(16))
            .clamp(1, SHARDS)
            .next_power_of_two()
            .min(SHARDS);
        let share = capacity.div_ceil(shards);
        let margin = if cfg!(loom) {
            1 // the loom model's table: every slot is seven model atomics
        } else {
            6 * (share as f64).sqrt().ceil() as usize + 8
        };
        let per_shard = share + margin;
        let quota = quota(capacity, shards);
        let total = per_shard * shards;
        if total > MAX_SLOTS {
            return Err(TableError::TooLarge { slots: total });
        }
        let value_bits = usize::BITS - (total - 1).leading_zeros();
        let mut config = Config {
            capacity: total.min(capacity.max(per_shard)),
            buckets_log2: opts.buckets_log2,
            fingerprint_bits: opts.fingerprint_bits.unwrap_or((31 - value_bits).min(16)),
            value_bits,
            bloom: opts.bloom.then_some(BloomConfig {
                mode: BloomMode::Bit,
                threshold: opts.bloom_threshold,
            }),
            // The filter's seqlock stripes: its default, or four atomics in
            // the loom model.
            stripes: if cfg!(loom) { 4 } else { 0 },
            keep_bloom_values: true,
            ..Config::default()
        };
        config.partitions = partitions(capacity, config.bucket_count()?, shards);
        let filter = Filter::new(config)?;
        let stripe_shift = filter.partition_shift();
        let epoch_lines = if cfg!(loom) {
            shards
        } else {
            shards.max(SHARDS / EPOCH_LINE)
        };
        Ok(Self {
            filter,
            slots: ZeroedSlice::zeroed(total),
            acct: opts
                .accounting
                .then(|| (0..total).map(|_| AcctSlot::new()).collect()),
            shards: (0..shards)
                .map(|i| CachePadded::new(Mutex::new(Shard::new((i * per_shard) as u32))))
                .collect(),
            // Epochs apart from the stripes: an open makes stale only the
            // probes of its 1/256th of the hashes (or less), however few
            // the stripes (the loom model: one line a stripe). A stripe's
            // are whole lines, its bits the high bits of their index.
            epochs: (0..epoch_lines)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            epoch_bits: (epoch_lines / shards * EPOCH_LINE).trailing_zeros(),
            shard_bits: shards.trailing_zeros(),
            per_shard: per_shard as u32,
            shard_mask: shards - 1,
            stripe_shift,
            seeds: std::array::from_fn(|i| secret.hash_bytes(&[i as u8, 0x5a]) | 1),
            capacity,
            len: AtomicUsize::new(shards * quota as usize),
            quota,
            occupied: AtomicBool::new(false),
            timeout_ns: std::array::from_fn(|i| {
                State::ALL.get(i % STATE_SLOTS).map_or(u64::MAX, |&s| {
                    if i >= STATE_SLOTS {
                        timeouts.capped(s)
                    } else {
                        timeouts.of(s)
                    }
                })
            }),
            timeouts,
            tcp: opts.tcp,
            checksum: opts.checksum,
            refused: AtomicU64::new(0),
            false_positives: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            clocks: (0..CLOCKS).map(|_| AtomicU64::new(u64::MAX)).collect(),
        })
    }
}

/// Each stripe's quota (`ConnTable::quota`): its mean share of the
/// capacity less six standard deviations, never more than the mean (the
/// quotas together never above the capacity).
fn quota(capacity: usize, stripes: usize) -> u32 {
    let mean = capacity as f64 / stripes as f64;
    (mean - 6.0 * mean.sqrt()).max(0.0).floor() as u32
}

/// The filter's writer partitions for a table of `capacity` connections
/// in `stripes` stripes over a filter of `buckets` buckets: one a stripe
/// (the stripe's lock is then the only one its opens wait for) where each
/// partition's share of the connections, six standard deviations of bad
/// luck above its mean, fits in 97 % of its entries (the Bloom part takes
/// the rest of a full partition's walks); fewer, larger partitions where
/// it would not (the `conntrack` bench's burst into a filter sized by
/// hand to 95 % of its slots: with a partition a stripe, 256, its plain
/// cuckoo path refused 200 of 104,858 opens and 6,382 of 136,315 at 98 %,
/// against 0 and 1,784 with 8, and its Bloom part took 7 % more items:
/// small partitions fill unevenly), each then shared by
/// `stripes / partitions` stripes, whose opens may wait for each other in
/// the filter (never the other way round: a stripe's lock is always taken
/// first). At the default capacity, one a stripe.
fn partitions(capacity: usize, buckets: usize, stripes: usize) -> usize {
    let mut p = stripes.min(buckets / 2).max(1);
    while p > 1 {
        let mean = capacity as f64 / p as f64;
        let room = 0.97 * (4 * buckets / p) as f64;
        if mean + 6.0 * mean.sqrt() + 8.0 <= room {
            break;
        }
        p /= 2;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One filter partition a stripe at the default capacity; fewer where
    /// a filter sized by hand leaves a partition a stripe too little room
    /// for its share's bad luck (the `conntrack` bench's 2^18 buckets at
    /// 95 % of their slots: 8 for 256 stripes); one for a tiny table.
    #[test]
    fn partitions_are_the_stripes_where_they_have_room() {
        let t = ConnTable::new(65_536, Timeouts::default(), HashSecret::from_seed(1)).unwrap();
        assert_eq!((t.stripes(), t.filter.partitions()), (16, 16));
        assert_eq!(partitions(996_147, 1 << 18, 256), 8);
        assert_eq!(partitions(1, 2, 1), 1);
        let small = ConnTable::new(64, Timeouts::default(), HashSecret::from_seed(1)).unwrap();
        assert_eq!((small.stripes(), small.filter.partitions()), (1, 1));
    }
}
