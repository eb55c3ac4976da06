//! Filter images: serialize to bytes and back.
//!
//! ```text
//! offset  size  field (all little-endian)
//!      0     8  magic "CFDPFILT"
//!      8     4  format version (4; version 3, without the partition
//!                 shift, is read with the partition bits lowest, and
//!                 versions 1 and 2, without the partitions field
//!                 either, as one partition)
//!     12     4  hash id (crate::hash::HASH_ID)
//!     16     4  fingerprint bits      20  4  value bits
//!     24     4  Bloom mode (0 none, 1 bit, 2 tag)
//!     28     4  Bloom field bits      32  4  threshold t
//!     36     4  max_kicks             40  4  buckets log2
//!     44     4  stripes               48  4  layout (0 word, 1 packed)
//!     52     4  partitions            56  4  partition shift (the
//!                 lowest bucket-index bit of a partition's index)
//!     60     8  seed                  68  8  entries
//!     76     8  table words (N)       84  8  side-table records (R)
//!     92   8·N  table words: each bucket as one or two words, the word
//!                 layout's form even for a packed table
//!                 (version 3: the partition shift is absent, offsets
//!                 from 56 are 4 less; version 2: the partitions field
//!                 too, 8 less from 52; version 1: the layout field too,
//!                 12 less from 48, and the layout is the word layout)
//!      …  24·R  records: low bucket u64, high bucket u64, fp u32, value u32
//!      …     4  CRC-32 (IEEE) of everything before it
//! ```
//!
//! Loading checks, in order: length, magic, version, checksum, hash id,
//! parameters, table size, then the content itself (entry count, every
//! Bloom record against the tags in the table), so a corrupt or foreign
//! image is refused with a message that says what is wrong.

use std::fmt;

use crate::config::{BloomConfig, BloomMode, Config, ConfigError};
use crate::hash::HASH_ID;
use crate::layout::{Layout, ENTRIES_PER_BUCKET};
use crate::state::{bump, BloomRecord, Filter};
use crate::sync::Ordering;

const MAGIC: &[u8; 8] = b"CFDPFILT";
const VERSION: u32 = 4;
const HEADER: usize = 92;
const HEADER_V3: usize = 88;
const HEADER_V2: usize = 84;
const HEADER_V1: usize = 80;
const RECORD: usize = 24;

/// Why an image was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotError {
    TooShort { len: usize },
    BadMagic,
    UnsupportedVersion(u32),
    ChecksumMismatch { stored: u32, computed: u32 },
    ForeignHash(u32),
    BadParameters(String),
    Config(ConfigError),
    SizeMismatch { expected: usize, actual: usize },
    Inconsistent(String),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::TooShort { len } => {
                write!(f, "filter image too short ({len} bytes; header alone is {HEADER})")
            }
            SnapshotError::BadMagic => write!(f, "not a cfdp filter image (bad magic)"),
            SnapshotError::UnsupportedVersion(v) => {
                write!(f, "filter image format version {v} is not supported (expected 1 to {VERSION})")
            }
            SnapshotError::ChecksumMismatch { stored, computed } => write!(
                f,
                "filter image checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): \
                 the file is corrupt or truncated"
            ),
            SnapshotError::ForeignHash(h) => {
                write!(f, "filter image was built with an unknown hash function (id {h:#x})")
            }
            SnapshotError::BadParameters(m) => write!(f, "filter image parameters invalid: {m}"),
            SnapshotError::Config(e) => write!(f, "filter image parameters invalid: {e}"),
            SnapshotError::SizeMismatch { expected, actual } => write!(
                f,
                "filter image size mismatch: expected {expected} bytes, found {actual}"
            ),
            SnapshotError::Inconsistent(m) => write!(f, "filter image inconsistent: {m}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<ConfigError> for SnapshotError {
    fn from(e: ConfigError) -> Self {
        SnapshotError::Config(e)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(
            self.buf[self.pos..self.pos + 4]
                .try_into()
                .expect("4 bytes"),
        );
        self.pos += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(
            self.buf[self.pos..self.pos + 8]
                .try_into()
                .expect("8 bytes"),
        );
        self.pos += 8;
        v
    }
}

impl Filter {
    /// Serializes the filter. Writers are paused for the copy (readers are
    /// not affected).
    pub fn to_bytes(&self) -> Vec<u8> {
        let (words, side, entries, _) = self.image_parts();
        let c = self.config();
        let (mode, field_bits, threshold) = match c.bloom {
            None => (0u32, 0u32, 0u32),
            Some(BloomConfig {
                mode: BloomMode::Bit,
                threshold,
            }) => (1, 1, threshold),
            Some(BloomConfig {
                mode: BloomMode::Tag { bits },
                threshold,
            }) => (2, bits, threshold),
        };
        let mut out = Vec::with_capacity(HEADER + words.len() * 8 + side.len() * RECORD + 4);
        out.extend_from_slice(MAGIC);
        for v in [
            VERSION,
            HASH_ID,
            c.fingerprint_bits,
            c.value_bits,
            mode,
            field_bits,
            threshold,
            c.max_kicks,
            self.buckets().trailing_zeros(),
            self.stripe_count() as u32,
            u32::from(c.packed),
            self.partitions() as u32,
            self.partition_shift(),
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            c.seed,
            entries as u64,
            words.len() as u64,
            side.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for w in &words {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for (lo, r) in &side {
            out.extend_from_slice(&(*lo as u64).to_le_bytes());
            out.extend_from_slice(&(r.high as u64).to_le_bytes());
            out.extend_from_slice(&r.fp.to_le_bytes());
            out.extend_from_slice(&r.value.to_le_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Rebuilds a filter from [`Filter::to_bytes`] output.
    pub fn from_bytes(bytes: &[u8]) -> Result<Filter, SnapshotError> {
        let (version, header) = check_envelope(bytes)?;
        let mut r = Reader {
            buf: bytes,
            pos: 12,
        };
        let Header {
            config,
            part_shift,
            field_bits,
            entries,
            n_words,
            n_side,
        } = read_header(&mut r, version)?;
        let (fingerprint_bits, value_bits, packed) =
            (config.fingerprint_bits, config.value_bits, config.packed);
        // Check the parameters and the image size *before* allocating the
        // table: a crafted header must not make us allocate gigabytes.
        config.validate()?;
        let layout = Layout::new(fingerprint_bits, value_bits, field_bits, packed)?;
        let buckets = config.bucket_count()?;
        let expect_words = buckets as u64 * layout.words as u64;
        if n_words != expect_words {
            return Err(SnapshotError::BadParameters(format!(
                "{n_words} table words for {buckets} buckets of {} words",
                layout.words
            )));
        }
        let expected_len = (header as u64)
            .checked_add(n_words.saturating_mul(8))
            .and_then(|x| x.checked_add(n_side.saturating_mul(RECORD as u64)))
            .and_then(|x| x.checked_add(4));
        if expected_len != Some(bytes.len() as u64) {
            return Err(SnapshotError::SizeMismatch {
                expected: expected_len.map_or(usize::MAX, |x| x as usize),
                actual: bytes.len(),
            });
        }
        // The partition bits where this version puts them, or lowest (a
        // version 3 image, or a table too small for them to move).
        let own = crate::raw::partition_shift(buckets, config.partitions);
        if part_shift != 0 && part_shift != own {
            return Err(SnapshotError::BadParameters(format!(
                "partition shift {part_shift} (0 or {own} for {} partitions of {buckets} buckets)",
                config.partitions
            )));
        }
        let filter = Filter::with_part_shift(config, part_shift)?;
        let words: Vec<u64> = (0..n_words).map(|_| r.u64()).collect();
        let mut side = Vec::with_capacity(n_side as usize);
        for _ in 0..n_side {
            let lo = r.u64() as usize;
            let high = r.u64() as usize;
            let fp = r.u32();
            let value = r.u32();
            side.push((lo, BloomRecord { fp, value, high }));
        }
        validate_content(&filter, &words, &side, entries)?;
        // The table the image was checked against, empty until now: one
        // allocation of it, not a second for the load.
        Ok(filter.load_parts(&words, side, entries as usize))
    }
}

/// Checks what comes before the parameters: length, magic, version and
/// checksum. Returns the version and its header length.
fn check_envelope(bytes: &[u8]) -> Result<(u32, usize), SnapshotError> {
    if bytes.len() < HEADER_V1 + 4 {
        return Err(SnapshotError::TooShort { len: bytes.len() });
    }
    if &bytes[..8] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let version = Reader { buf: bytes, pos: 8 }.u32();
    let header = match version {
        1 => HEADER_V1,
        2 => HEADER_V2,
        3 => HEADER_V3,
        VERSION => HEADER,
        _ => return Err(SnapshotError::UnsupportedVersion(version)),
    };
    if bytes.len() < header + 4 {
        return Err(SnapshotError::TooShort { len: bytes.len() });
    }
    let (body, tail) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(SnapshotError::ChecksumMismatch { stored, computed });
    }
    Ok((version, header))
}

/// An image's parameters and counts, as its header states them (not yet
/// checked against each other).
struct Header {
    config: Config,
    part_shift: u32,
    field_bits: u32,
    entries: u64,
    n_words: u64,
    n_side: u64,
}

/// Reads the header after the version field.
fn read_header(r: &mut Reader<'_>, version: u32) -> Result<Header, SnapshotError> {
    let hash = r.u32();
    if hash != HASH_ID {
        return Err(SnapshotError::ForeignHash(hash));
    }
    let fingerprint_bits = r.u32();
    let value_bits = r.u32();
    let mode = r.u32();
    let field_bits = r.u32();
    let threshold = r.u32();
    let max_kicks = r.u32();
    let buckets_log2 = r.u32();
    let stripes = r.u32() as usize;
    let packed = match if version == 1 { 0 } else { r.u32() } {
        0 => false,
        1 => true,
        other => {
            return Err(SnapshotError::BadParameters(format!(
                "layout {other} (0 word, 1 packed)"
            )))
        }
    };
    let partitions = if version < 3 { 1 } else { r.u32() as usize };
    let part_shift = if version < 4 { 0 } else { r.u32() };
    let seed = r.u64();
    let entries = r.u64();
    let n_words = r.u64();
    let n_side = r.u64();
    let bloom = match (mode, field_bits) {
        (0, 0) => None,
        (1, 1) => Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold,
        }),
        (2, bits) => Some(BloomConfig {
            mode: BloomMode::Tag { bits },
            threshold,
        }),
        _ => {
            return Err(SnapshotError::BadParameters(format!(
                "Bloom mode {mode} with {field_bits}-bit field"
            )))
        }
    };
    let config = Config {
        capacity: 0,
        buckets_log2: Some(buckets_log2),
        fingerprint_bits,
        value_bits,
        bloom,
        max_kicks,
        stripes,
        seed,
        packed,
        partitions,
        keep_bloom_values: false,
    };
    Ok(Header {
        config,
        part_shift,
        field_bits,
        entries,
        n_words,
        n_side,
    })
}

/// Checks that the table and the side table agree with each other and with
/// the header, so that a crafted image cannot produce a filter that breaks
/// its own invariants.
fn validate_content(
    filter: &Filter,
    words: &[u64],
    side: &[(usize, BloomRecord)],
    entries: u64,
) -> Result<(), SnapshotError> {
    let l = filter.layout();
    let buckets = filter.buckets();
    let bucket = |i: usize| -> [u64; 2] {
        let w = &words[i * l.words..(i + 1) * l.words];
        [w[0], if l.words == 2 { w[1] } else { 0 }]
    };
    let mut counted = 0u64;
    let mut tagged = 0usize;
    for i in 0..buckets {
        let b = bucket(i);
        counted += (0..ENTRIES_PER_BUCKET)
            .filter(|&s| !l.is_empty(&b, s))
            .count() as u64;
        // Rebuilt from its entries and Bloom field, the bucket must come out
        // the same: no stray bits, no value without a fingerprint.
        let mut rebuilt = [0u64; 2];
        for s in 0..ENTRIES_PER_BUCKET {
            let e = l.entry(&b, s);
            if l.entry_fp(e) != 0 {
                let (w, v) = l.set_entry(&rebuilt, s, e);
                rebuilt[w] = v;
            }
        }
        if l.tag_bits > 0 {
            rebuilt[0] = l.with_tag(rebuilt[0], l.tag(&b));
        }
        if rebuilt != b {
            return Err(SnapshotError::Inconsistent(format!(
                "bucket {i} has bits outside its entries and Bloom field"
            )));
        }
        if l.tag(&b) != 0 {
            tagged += 1;
        }
    }
    if counted != entries {
        return Err(SnapshotError::Inconsistent(format!(
            "header says {entries} entries, table holds {counted}"
        )));
    }
    let mut prev: Option<usize> = None;
    for (lo, rec) in side {
        let (lo, hi) = (*lo, rec.high);
        if prev.is_some_and(|p| p >= lo) {
            return Err(SnapshotError::Inconsistent("side table not sorted".into()));
        }
        prev = Some(lo);
        if lo >= hi || hi >= buckets || rec.fp == 0 || u64::from(rec.fp) > l.fp_mask {
            return Err(SnapshotError::Inconsistent(format!(
                "Bloom record at bucket {lo} is out of range"
            )));
        }
        if u64::from(rec.value) > l.value_mask || !filter.is_pair(lo, hi, rec.fp) {
            return Err(SnapshotError::Inconsistent(format!(
                "Bloom record at bucket {lo} does not describe a valid item"
            )));
        }
        let tag = filter.record_tag(lo, rec);
        if l.tag(&bucket(lo)) != tag || l.tag(&bucket(hi)) != tag {
            return Err(SnapshotError::Inconsistent(format!(
                "Bloom record at buckets {lo}/{hi} does not match the table's Bloom fields"
            )));
        }
    }
    if tagged != 2 * side.len() {
        return Err(SnapshotError::Inconsistent(format!(
            "{tagged} buckets carry Bloom fields for {} recorded elements",
            side.len()
        )));
    }
    Ok(())
}

/// The parts of a filter a snapshot reads, and the filter built back from
/// them.
impl Filter {
    /// Everything `to_bytes` needs, read while writers are excluded.
    pub(crate) fn image_parts(&self) -> (Vec<u64>, Vec<(usize, BloomRecord)>, usize, usize) {
        let all = self.raw.write_all();
        let words = self.raw.words_snapshot();
        let mut side: Vec<(usize, BloomRecord)> = all
            .iter()
            .flat_map(|w| w.side.iter().map(|(&k, &r)| (k, r)))
            .collect();
        side.sort_unstable_by_key(|&(lo, _)| lo);
        (words, side, self.entries(), self.bloom_len())
    }

    /// Fills this empty filter (the one the image was validated against)
    /// from its validated parts.
    pub(crate) fn load_parts(
        self,
        words: &[u64],
        side: Vec<(usize, BloomRecord)>,
        entries: usize,
    ) -> Self {
        self.raw.load_words(words);
        let mut all = self.raw.write_all();
        for (lo, rec) in side {
            let w = &mut all[self.raw.part_of(lo)];
            if let Some(v) = self.bloom_values.get(lo) {
                v.store(rec.value, Ordering::Relaxed);
            }
            w.side.insert(lo, rec);
            bump(&self.counts[w.part()].bloom_items, 1);
        }
        drop(all);
        // The entries by partition, from the table itself (the image
        // states their sum, checked against the table before this).
        let per_part = self.raw.entries_by_part();
        debug_assert_eq!(per_part.iter().sum::<usize>(), entries);
        for (c, n) in self.counts.iter().zip(per_part) {
            c.entries.store(n, Ordering::Relaxed);
        }
        self
    }

    /// Expected Bloom tag of a side-table record (snapshot validation).
    pub(crate) fn record_tag(&self, lo: usize, rec: &BloomRecord) -> u64 {
        self.tag_for(rec.fp, lo, rec.high)
    }

    /// Whether `high` is the alternate bucket of `lo` for fingerprint `fp`.
    pub(crate) fn is_pair(&self, lo: usize, high: usize, fp: u32) -> bool {
        self.alt(lo, fp) == high
    }
}
