//! Bit layout of a bucket: four entries (fingerprint + associated value) and
//! the Bloom-part field, packed into one or two 64-bit words.
//!
//! ```text
//! one word  (4·e + T ≤ 64):
//!   bit 0                                                           63
//!   | entry 0 (e) | entry 1 (e) | entry 2 (e) | entry 3 (e) | ... | T |
//! two words (2·e + T ≤ 64):
//!   word 0: | entry 0 (e) | entry 1 (e) | ... | T |
//!   word 1: | entry 2 (e) | entry 3 (e) | ... unused ... |
//! entry (e = f + v bits): | fingerprint (f) | value (v) |
//! ```
//!
//! The packed layout (`Config::packed`) stores one-word buckets back to back
//! at `4·e + T` bits each instead of a whole word, with the Bloom field right
//! above the entries (`tag_shift = 4·e`): f = 12 with a 1-bit field is 49
//! bits a bucket, 12.9 bits per item at 95 % load instead of 16.8. The table
//! extracts a bucket into the same one-word form, so everything below works
//! on both (`raw.rs` does the packing).
//!
//! A fingerprint is never zero, so an entry whose fingerprint bits are zero
//! is empty. The Bloom-part field `T` (0 when the filter has no Bloom part)
//! sits in the top bits of word 0, so a lookup reads it with the entries: no
//! extra memory access, exactly as the Bloom-Cuckoo paper asks of its `bf` bit.
//!
//! Matching uses SWAR ("SIMD within a register"): the probe fingerprint is
//! broadcast to every lane, XOR-ed with the word and masked to the
//! fingerprint bits, and the classic has-zero-lane test finds a lane that
//! matched. With zero gaps between masked fields the test is exact for "some
//! lane is zero", and its lowest flagged lane is the lowest matching lane
//! (a borrow can only raise false flags *above* a true zero lane).

use crate::config::ConfigError;

/// One bucket as loaded from the table. Word 1 is always zero in the
/// one-word layout, which keeps every helper branch-free on the layout.
pub(crate) type Bucket = [u64; 2];

pub use crate::config::ENTRIES_PER_BUCKET;

/// The bucket layouts the read path is compiled for, as a const parameter:
/// a lookup loop then has no branch on the layout (the caller dispatches
/// once per call or batch, [`Layout::kind`]).
pub(crate) mod kind {
    /// One 64-bit word per bucket.
    pub const ONE_WORD: u8 = 0;
    /// Two words per bucket.
    pub const TWO_WORDS: u8 = 1;
    /// Buckets of `packed_bits` bits back to back.
    pub const PACKED: u8 = 2;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub fp_bits: u32,
    pub value_bits: u32,
    pub entry_bits: u32,
    /// 64-bit words per bucket: 1 or 2.
    pub words: usize,
    /// Entries per word: 4 (one word) or 2 (two words).
    pub lanes_per_word: u32,
    /// Width of the Bloom-part field; 0 when there is no Bloom part.
    pub tag_bits: u32,
    /// Bits a bucket occupies in the packed layout; 0 in the word layout.
    pub packed_bits: u32,
    pub tag_shift: u32,
    pub fp_mask: u64,
    pub value_mask: u64,
    pub entry_mask: u64,
    /// Bit 0 of every lane in a word.
    lane_ones: u64,
    /// Fingerprint bits of every lane in a word.
    lane_fp: u64,
    /// Top fingerprint bit of every lane.
    lane_fp_high: u64,
    /// All entry bits of every lane.
    lane_entry: u64,
    /// Top entry bit of every lane.
    lane_entry_high: u64,
}

impl Layout {
    pub fn new(
        fp_bits: u32,
        value_bits: u32,
        tag_bits: u32,
        packed: bool,
    ) -> Result<Self, ConfigError> {
        if !(4..=32).contains(&fp_bits) {
            return Err(ConfigError::FingerprintBits(fp_bits));
        }
        if value_bits > 24 {
            return Err(ConfigError::ValueBits(value_bits));
        }
        let e = fp_bits + value_bits;
        let words = if 4 * e + tag_bits <= 64 {
            1
        } else if 2 * e + tag_bits <= 64 {
            2
        } else {
            return Err(ConfigError::DoesNotFit {
                fp_bits,
                value_bits,
                tag_bits,
            });
        };
        if packed && words != 1 {
            return Err(ConfigError::PackedDoesNotFit {
                fp_bits,
                value_bits,
                tag_bits,
            });
        }
        let lanes_per_word = if words == 1 { 4 } else { 2 };
        let low = |bits: u32| {
            if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            }
        };
        let broadcast = |x: u64| (0..lanes_per_word).fold(0u64, |acc, k| acc | (x << (k * e)));
        let fp_mask = low(fp_bits);
        let entry_mask = low(e);
        Ok(Self {
            fp_bits,
            value_bits,
            entry_bits: e,
            words,
            lanes_per_word,
            tag_bits,
            packed_bits: if packed { 4 * e + tag_bits } else { 0 },
            tag_shift: if packed { 4 * e } else { 64 - tag_bits },
            fp_mask,
            value_mask: low(value_bits),
            entry_mask,
            lane_ones: broadcast(1),
            lane_fp: broadcast(fp_mask),
            lane_fp_high: broadcast(1u64 << (fp_bits - 1)),
            lane_entry: broadcast(entry_mask),
            lane_entry_high: broadcast(1u64 << (e - 1)),
        })
    }

    /// Which of the [`kind`]s this layout is.
    #[inline(always)]
    pub fn kind(&self) -> u8 {
        if self.packed_bits != 0 {
            kind::PACKED
        } else if self.words == 2 {
            kind::TWO_WORDS
        } else {
            kind::ONE_WORD
        }
    }

    /// Bits a bucket occupies in memory (whole words).
    pub fn bucket_bits(&self) -> usize {
        if self.packed_bits > 0 {
            self.packed_bits as usize
        } else {
            self.words * 64
        }
    }

    #[inline(always)]
    fn slot_pos(&self, slot: usize) -> (usize, u32) {
        // Shifts, not a division by the run-time lane count (4 or 2): this
        // sits on every step of the insert walk.
        // 4 lanes per word with one word, 2 with two.
        let w = slot >> (3 - self.words);
        let lane = slot & (self.lanes_per_word as usize - 1);
        (w, lane as u32 * self.entry_bits)
    }

    #[inline(always)]
    pub fn make_entry(&self, fp: u32, value: u32) -> u64 {
        u64::from(fp) | (u64::from(value) << self.fp_bits)
    }

    #[inline(always)]
    pub fn entry_fp(&self, entry: u64) -> u32 {
        (entry & self.fp_mask) as u32
    }

    #[inline(always)]
    pub fn entry_value(&self, entry: u64) -> u32 {
        ((entry >> self.fp_bits) & self.value_mask) as u32
    }

    #[inline(always)]
    pub fn entry(&self, b: &Bucket, slot: usize) -> u64 {
        let (w, shift) = self.slot_pos(slot);
        (b[w] >> shift) & self.entry_mask
    }

    /// The word index and the new word value that writes `entry` into `slot`.
    #[inline(always)]
    pub fn set_entry(&self, b: &Bucket, slot: usize, entry: u64) -> (usize, u64) {
        let (w, shift) = self.slot_pos(slot);
        (w, (b[w] & !(self.entry_mask << shift)) | (entry << shift))
    }

    #[inline(always)]
    pub fn is_empty(&self, b: &Bucket, slot: usize) -> bool {
        self.entry(b, slot) & self.fp_mask == 0
    }

    /// The Bloom-part field of a bucket (0 when free or when there is none).
    #[inline(always)]
    pub fn tag(&self, b: &Bucket) -> u64 {
        if self.tag_bits == 0 {
            0
        } else {
            b[0] >> self.tag_shift
        }
    }

    /// Word 0 with its Bloom-part field replaced by `tag`.
    #[inline(always)]
    pub fn with_tag(&self, word0: u64, tag: u64) -> u64 {
        debug_assert!(self.tag_bits > 0);
        let mask = u64::MAX << self.tag_shift;
        (word0 & !mask) | (tag << self.tag_shift)
    }

    /// Lowest slot whose masked lane equals `pattern` (already shifted to lane 0).
    #[inline(always)]
    fn find_lane(&self, b: &Bucket, pattern: u64, lane_mask: u64, lane_high: u64) -> Option<usize> {
        let bcast = pattern.wrapping_mul(self.lane_ones);
        for (w, &word) in b.iter().enumerate().take(self.words) {
            let x = (word ^ bcast) & lane_mask;
            let hit = x.wrapping_sub(self.lane_ones) & !x & lane_high;
            if hit != 0 {
                let lane = hit.trailing_zeros() / self.entry_bits;
                return Some(w * self.lanes_per_word as usize + lane as usize);
            }
        }
        None
    }

    /// Lanes of `word` whose fingerprint equals the broadcast probe, as the
    /// top fingerprint bit of each such lane (plus, possibly, false flags
    /// above a true one: see the module docs).
    #[inline(always)]
    fn fp_hits(&self, word: u64, bcast: u64) -> u64 {
        let x = (word ^ bcast) & self.lane_fp;
        x.wrapping_sub(self.lane_ones) & !x & self.lane_fp_high
    }

    /// The lookup's probe of an item's two buckets for a layout of kind `K`
    /// known at compile time (a packed bucket is probed in its extracted
    /// one-word form), without branches on the buckets' contents: whether
    /// some entry holds the broadcast fingerprint (`bcast` from
    /// [`Layout::broadcast`]) and the value of the first such entry, `b1`'s
    /// before `b2`'s (meaningless when none does).
    ///
    /// Branch-free matters for single-key lookups: a mispredicted branch on
    /// a bucket that is still on its way from DRAM throws away the loads of
    /// the next keys that the CPU had already started, so the misses of
    /// consecutive lookups no longer overlap. The value is extracted once,
    /// from the first word with a match, not once per bucket.
    #[inline(always)]
    pub fn probe<const K: u8>(&self, b1: &Bucket, b2: &Bucket, bcast: u64) -> (bool, u32) {
        debug_assert_eq!(K, self.kind());
        // (word, its hit flags), the first word with a hit winning.
        // `select_unpredictable`: LLVM otherwise turns the choice into a
        // branch on the first bucket's contents, mispredicted at every
        // other key at 50 % positive (and a packed-layout single-key
        // lookup lost 10-25 % to it).
        let first = |a: (u64, u64), b: (u64, u64)| std::hint::select_unpredictable(a.1 != 0, a, b);
        let hits = |w: u64| (w, self.fp_hits(w, bcast));
        let (word, h) = if K == kind::TWO_WORDS {
            first(
                first(hits(b1[0]), hits(b1[1])),
                first(hits(b2[0]), hits(b2[1])),
            )
        } else {
            first(hits(b1[0]), hits(b2[0]))
        };
        // The lowest flag is the top fingerprint bit of the lowest matching
        // lane; the entry's value sits right above it.
        let shift = (h.trailing_zeros() + 1) & 63;
        let value = ((word >> shift) & self.value_mask) as u32;
        (h != 0, value)
    }

    /// A fingerprint broadcast to every lane of a word.
    #[inline(always)]
    pub fn broadcast(&self, fp: u32) -> u64 {
        u64::from(fp).wrapping_mul(self.lane_ones)
    }

    /// Lowest slot holding exactly `entry` (fingerprint and value).
    #[inline(always)]
    pub fn find_entry(&self, b: &Bucket, entry: u64) -> Option<usize> {
        self.find_lane(b, entry, self.lane_entry, self.lane_entry_high)
    }

    /// Empty slots of a bucket as a bit set (bit s = slot s is empty).
    #[inline]
    pub fn empty_slots(&self, b: &Bucket) -> u32 {
        (0..ENTRIES_PER_BUCKET).fold(0, |acc, s| acc | (u32::from(self.is_empty(b, s)) << s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket_with(l: &Layout, entries: &[(usize, u64)], tag: u64) -> Bucket {
        let mut b = [0u64; 2];
        for &(s, e) in entries {
            let (w, v) = l.set_entry(&b, s, e);
            b[w] = v;
        }
        if l.tag_bits > 0 {
            b[0] = l.with_tag(b[0], tag);
        }
        b
    }

    #[test]
    fn layouts_pick_one_or_two_words() {
        assert_eq!(Layout::new(12, 0, 1, false).unwrap().words, 1);
        assert_eq!(Layout::new(15, 0, 4, false).unwrap().words, 1);
        assert_eq!(Layout::new(16, 0, 1, false).unwrap().words, 2);
        assert_eq!(Layout::new(16, 8, 16, false).unwrap().words, 2);
        assert!(Layout::new(24, 8, 1, false).is_err());
        assert!(Layout::new(3, 0, 0, false).is_err());
        assert_eq!(Layout::new(12, 0, 1, true).unwrap().packed_bits, 49);
        assert!(Layout::new(16, 0, 1, true).is_err());
    }

    #[test]
    fn swar_find_matches_scalar_scan() {
        for &(f, v, t, packed) in &[
            (8, 0, 1, false),
            (12, 4, 0, false),
            (12, 0, 8, false),
            (16, 0, 0, false),
            (16, 8, 8, false),
            (13, 3, 2, false),
            (12, 0, 1, true),
            (13, 2, 3, true),
        ] {
            let l = Layout::new(f, v, t, packed).unwrap();
            let mut seed = 0x1234_5678_9abc_def0u64 ^ u64::from(f * 100 + v);
            for _ in 0..2000 {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                // Small fingerprint alphabet so that collisions and zeros are common.
                let pick = |k: u32| ((seed >> (k * 8)) & 3) as u32;
                let entries: Vec<(usize, u64)> = (0..4)
                    .map(|s| {
                        (
                            s,
                            l.make_entry(pick(s as u32), pick(s as u32 + 4) & l.value_mask as u32),
                        )
                    })
                    .collect();
                let tag = (seed >> 60) & ((1u64 << t.max(1)) - 1);
                let b = bucket_with(&l, &entries, tag);
                for probe in 0..4u32 {
                    let scalar = (0..4).find(|&s| l.entry_fp(l.entry(&b, s)) == probe);
                    // Probed as either bucket of a pair, beside a full bucket
                    // that matches none of the probes (fingerprints 0..4).
                    let e = bucket_with(&l, &[0, 1, 2, 3].map(|s| (s, l.make_entry(4, 0))), 0);
                    let bc = l.broadcast(probe);
                    let (hit, value) = match l.kind() {
                        kind::PACKED => l.probe::<{ kind::PACKED }>(&b, &e, bc),
                        kind::TWO_WORDS => l.probe::<{ kind::TWO_WORDS }>(&b, &e, bc),
                        _ => l.probe::<{ kind::ONE_WORD }>(&b, &e, bc),
                    };
                    let (hit2, value2) = match l.kind() {
                        kind::PACKED => l.probe::<{ kind::PACKED }>(&e, &b, bc),
                        kind::TWO_WORDS => l.probe::<{ kind::TWO_WORDS }>(&e, &b, bc),
                        _ => l.probe::<{ kind::ONE_WORD }>(&e, &b, bc),
                    };
                    assert_eq!(hit, hit2, "f={f} v={v} probe={probe}");
                    if hit {
                        assert_eq!(value, value2, "f={f} v={v} probe={probe}");
                    }
                    // Both buckets match: the first bucket's entry answers.
                    if let Some(slot) = scalar {
                        let mine = l.entry_value(l.entry(&b, slot));
                        let other = (mine + 1) & l.value_mask as u32;
                        let o = bucket_with(
                            &l,
                            &[0, 1, 2, 3].map(|s| (s, l.make_entry(probe, other))),
                            0,
                        );
                        let (hit3, value3) = match l.kind() {
                            kind::PACKED => l.probe::<{ kind::PACKED }>(&b, &o, bc),
                            kind::TWO_WORDS => l.probe::<{ kind::TWO_WORDS }>(&b, &o, bc),
                            _ => l.probe::<{ kind::ONE_WORD }>(&b, &o, bc),
                        };
                        assert!(hit3);
                        assert_eq!(value3, mine, "f={f} v={v} probe={probe}");
                    }
                    assert_eq!(hit, scalar.is_some(), "f={f} v={v} probe={probe}");
                    if let Some(s) = scalar {
                        assert_eq!(value, l.entry_value(l.entry(&b, s)), "f={f} v={v}");
                    }
                    let e = l.make_entry(probe, 1 & l.value_mask as u32);
                    let scalar_e = (0..4).find(|&s| l.entry(&b, s) == e);
                    assert_eq!(l.find_entry(&b, e), scalar_e);
                }
                if t > 0 {
                    assert_eq!(l.tag(&b), tag);
                }
                for (s, e) in &entries {
                    assert_eq!(l.entry(&b, *s), *e);
                }
            }
        }
    }
}
