//! Bulk build: a filter from a known set of items (start-up from a rule
//! file, `auto_grow` rebuilds, benchmark fills), several times faster than
//! inserting them one by one, with the same result guarantees: every item is
//! in one of its two buckets (or the build fails and says how many it
//! placed), the counts are exact, and the filter answers exactly as one
//! filled by [`Filter::insert_hash_with`] with the plain walk would (same
//! fingerprints, same buckets; only which of the two buckets holds an item
//! may differ).
//!
//! Why it is faster: one-by-one inserts touch a random bucket per item, a
//! cache miss each once the table outgrows the cache. The build instead
//! sorts the items by target bucket into chunks that fit in L2 (a counting
//! sort: one pass to count, one to scatter), then fills chunk by chunk, so
//! the table is written in order. Pass 1 puts items into their primary
//! bucket up to three per bucket; pass 2 puts what overflowed into its
//! alternate bucket, again chunk by chunk; pass 3 tries the primaries'
//! last slots. Only the items whose two buckets are then full (8.3 % at 95 %
//! load) take the ordinary insert path (breadth-first search), one by one,
//! software-pipelined: while one is inserted, the buckets of the item eight
//! ahead and the search's first level of the item four ahead are
//! prefetched (14.2 → 19.9 M keys/s at 2^22 buckets, 11.6 → 17.9 at 2^25:
//! before, the leftovers' dependent misses were half the build's time). Chunks are bucket ranges, so
//! threads fill disjoint chunks with no locks; nothing is visible to readers
//! until the build returns.

use std::fmt;

use crate::config::{Config, ConfigError};
use crate::state::Filter;
use crate::sync::Ordering;

/// Why a bulk build failed. No filter is returned in any case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    Config(ConfigError),
    /// An item's value does not fit in the configured value bits.
    ValueTooWide {
        value: u32,
        bits: u32,
    },
    /// The items do not fit: `placed` of `total` found room.
    Full {
        placed: usize,
        total: usize,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Config(e) => write!(f, "{e}"),
            BuildError::ValueTooWide { value, bits } => {
                write!(f, "value {value} does not fit in {bits} value bits")
            }
            BuildError::Full { placed, total } => write!(
                f,
                "filter full: placed {placed} of {total} items (raise the capacity)"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// log2 of the buckets in one chunk: 2^16 one-word buckets are 512 KiB,
/// well inside this machine kind's 2.5 MiB L2 (and two-word ones 1 MiB).
const CHUNK_LOG2: u32 = 16;

/// How many leftover inserts ahead the build prefetches (4, 8 and 16
/// measured the same).
const AHEAD: usize = 8;

/// Below this many items the build runs on one thread.
const PARALLEL_MIN: usize = 1 << 16;

/// Which of an item's buckets a pass fills.
#[derive(Clone, Copy)]
enum Target {
    Primary,
    Alternate,
}

impl Filter {
    /// Builds a filter holding `items` (pre-hashed keys with their values)
    /// with the bulk path described in the module docs, using up to
    /// `threads` threads (0: all available). The plain cuckoo walk places
    /// the last few items, so the Bloom part stays empty for bursts.
    pub fn build(config: Config, items: &[(u64, u32)], threads: usize) -> Result<Self, BuildError> {
        let f = Filter::new(config).map_err(BuildError::Config)?;
        let max = f.max_value();
        if let Some(&(_, value)) = items.iter().find(|&&(_, v)| v > max) {
            return Err(BuildError::ValueTooWide {
                value,
                bits: f.config().value_bits,
            });
        }
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            t => t,
        };
        let threads = if items.len() < PARALLEL_MIN {
            1
        } else {
            threads.min(16)
        };
        // Primaries first, leaving a slot per bucket for the alternates,
        // then the alternates, then the primaries' last slots: fewer items
        // are left for the search than with full primaries first (8.3 %
        // against 10.5 % of the items at 95 % load).
        let overflow = f.fill_pass(items, Target::Primary, threads, 3);
        let rest = f.fill_pass(&overflow, Target::Alternate, threads, 4);
        drop(overflow);
        let rest = f.fill_pass(&rest, Target::Primary, threads, 4);
        let placed = items.len() - rest.len();
        // The entries placed, by partition (the leftovers' inserts below
        // count themselves).
        let mut per_part = vec![0usize; f.partitions()];
        for &(h, _) in items {
            per_part[f.partition_of(h)] += 1;
        }
        for &(h, _) in &rest {
            per_part[f.partition_of(h)] -= 1;
        }
        for (p, n) in per_part.into_iter().enumerate() {
            f.counts(p).entries.store(n, Ordering::Relaxed);
        }
        let mut w = f.writer();
        for (i, &(h, v)) in rest.iter().enumerate() {
            // Software pipeline over the leftovers: the buckets of the item
            // AHEAD inserts on, the search's first level of the one half as
            // far, so their misses overlap this insert's.
            if let Some(&(ha, _)) = rest.get(i + AHEAD) {
                f.prefetch_insert(ha, false);
            }
            if let Some(&(hc, _)) = rest.get(i + AHEAD / 2) {
                f.prefetch_insert(hc, true);
            }
            if w.insert_hash_with(h, v, None).is_err() {
                return Err(BuildError::Full {
                    placed: placed + i,
                    total: items.len(),
                });
            }
        }
        drop(w);
        Ok(f)
    }

    /// One pass: sorts `items` by the chunk of their `target` bucket, fills
    /// the chunks (split between `threads`) up to `cap` entries per bucket,
    /// returns the items that found no room in that bucket.
    fn fill_pass(
        &self,
        items: &[(u64, u32)],
        target: Target,
        threads: usize,
        cap: u32,
    ) -> Vec<(u64, u32)> {
        let buckets_log2 = self.buckets().trailing_zeros();
        let chunk_log2 = CHUNK_LOG2.min(buckets_log2);
        let chunks = 1usize << (buckets_log2 - chunk_log2);
        let bucket_of = |h: u64| {
            let (i1, i2, _) = self.locate_hash(h);
            match target {
                Target::Primary => i1,
                Target::Alternate => i2,
            }
        };
        let chunk_of = |h: u64| bucket_of(h) >> chunk_log2;

        let (sorted, chunk_start) = sort_by_chunk(items, chunks, threads, chunk_of);

        // Fill: thread t takes a contiguous range of chunks, i.e. of
        // buckets, so no two threads ever write the same bucket.
        let per_thread = chunks.div_ceil(threads);
        let overflow: Vec<Vec<(u64, u32)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let lo = chunk_start[(t * per_thread).min(chunks)];
                    let hi = chunk_start[((t + 1) * per_thread).min(chunks)];
                    let part = &sorted[lo..hi];
                    s.spawn(move || {
                        let mut spill = Vec::new();
                        for &(h, v) in part {
                            if !self.place_unpublished(bucket_of(h), h, v, cap) {
                                spill.push((h, v));
                            }
                        }
                        spill
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("fill thread"))
                .collect()
        });
        overflow.concat()
    }
}

/// Counting sort of `items` by `chunk_of` (below `chunks`): each of
/// `threads` threads counts its share of the items, then scatters it to its
/// own offsets inside each chunk's range. Returns the sorted items and
/// where each chunk starts (`chunks + 1` offsets).
fn sort_by_chunk(
    items: &[(u64, u32)],
    chunks: usize,
    threads: usize,
    chunk_of: impl Fn(u64) -> usize + Sync,
) -> (Vec<(u64, u32)>, Vec<usize>) {
    let chunk_of = &chunk_of;
    let shares: Vec<&[(u64, u32)]> = items.chunks(items.len().div_ceil(threads).max(1)).collect();
    let counts: Vec<Vec<usize>> = std::thread::scope(|s| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| {
                s.spawn(move || {
                    let mut c = vec![0usize; chunks];
                    for &(h, _) in *share {
                        c[chunk_of(h)] += 1;
                    }
                    c
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("count thread"))
            .collect()
    });
    // Where each chunk's items start in the sorted order.
    let mut chunk_start = vec![0usize; chunks + 1];
    for c in 0..chunks {
        chunk_start[c + 1] = chunk_start[c] + counts.iter().map(|n| n[c]).sum::<usize>();
    }
    let mut sorted = vec![(0u64, 0u32); items.len()];
    // Split `sorted` into one disjoint slice per (share, chunk) so that
    // threads scatter without sharing anything mutable.
    let mut per_share: Vec<Vec<&mut [(u64, u32)]>> = (0..shares.len())
        .map(|_| Vec::with_capacity(chunks))
        .collect();
    let mut rest: &mut [(u64, u32)] = &mut sorted;
    for c in 0..chunks {
        for (slots, n) in per_share.iter_mut().zip(&counts) {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(n[c]);
            slots.push(mine);
            rest = tail;
        }
    }
    std::thread::scope(|s| {
        for (share, mut slots) in shares.iter().zip(per_share) {
            s.spawn(move || {
                let mut fill = vec![0usize; chunks];
                for &item in *share {
                    let c = chunk_of(item.0);
                    slots[c][fill[c]] = item;
                    fill[c] += 1;
                }
            });
        }
    });
    (sorted, chunk_start)
}
