//! What the filter answers: a lookup, an insert's outcome or error, its
//! statistics.

/// Answer of a lookup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lookup {
    /// Definitely not in the filter.
    #[default]
    Miss,
    /// A matching fingerprint with its associated value (0 when the filter
    /// stores no values). May be a false positive.
    Entry(u32),
    /// Matched by the Bloom part (both Bloom fields of the item's buckets
    /// hold its bit or tag). Carries no value: the value of a Bloom-part
    /// element lives in the side table, which lookups do not read. May be a
    /// false positive.
    Bloom,
}

impl Lookup {
    #[inline]
    pub fn is_hit(self) -> bool {
        !matches!(self, Lookup::Miss)
    }
}

/// Answer of [`crate::Filter::candidates_hash`]: the values of every
/// entry whose fingerprint matches, and whether the Bloom part may hold
/// the item (its value is then in no entry).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Candidates {
    pub(crate) values: [u32; 2 * crate::ENTRIES_PER_BUCKET],
    pub(crate) len: usize,
    pub bloom: bool,
    /// With [`crate::Config::keep_bloom_values`] and `bloom`: the value
    /// of the Bloom-part element whose pair is the key's buckets, if one
    /// is (each bucket's Bloom field belongs to at most one element, kept
    /// by the lower bucket of its pair); read with the buckets, as of the
    /// same instant. In bit mode both fields may also be set by two other
    /// elements: the value is then theirs, and a caller confirms it.
    pub bloom_value: Option<u32>,
}

impl Candidates {
    pub fn values(&self) -> &[u32] {
        &self.values[..self.len]
    }
}

/// Where an insert put the new item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// In a cuckoo entry.
    Entry,
    /// In the Bloom part (its two buckets' Bloom fields).
    Bloom,
}

/// Report of a successful insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InsertOutcome {
    pub placement: Placement,
    /// True when the Bloom part grew by one element: the new item itself
    /// went there, or an entry evicted along the walk did (Algorithm 2,
    /// line 33).
    pub bloom_added: bool,
    /// The value of the entry evicted into the Bloom part along the walk
    /// (Algorithm 2, line 33), if one was: that item's lookups now answer
    /// [`Lookup::Bloom`], without its value — a caller that resolves items
    /// by value must learn which one moved.
    pub evicted: Option<u32>,
    /// Iterations (bucket accesses) of Algorithm 2: 1 when a candidate
    /// bucket had room.
    pub iterations: u32,
}

/// Why an insert did not happen. The filter is unchanged in every case: the
/// walk is planned completely before anything is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError {
    /// No free entry (and no free Bloom pair) within `max_kicks` iterations
    /// (the plain path: a breadth-first search of up to `max_kicks` bucket
    /// reads, then a random walk of `max_kicks`).
    Full { iterations: u32 },
    /// The value does not fit in the configured value bits.
    ValueTooWide { value: u32, bits: u32 },
}

impl std::fmt::Display for InsertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InsertError::Full { iterations } => {
                write!(f, "filter full: no room found in {iterations} iterations")
            }
            InsertError::ValueTooWide { value, bits } => {
                write!(f, "value {value} does not fit in {bits} value bits")
            }
        }
    }
}

impl std::error::Error for InsertError {}

/// Filter statistics at one moment.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Items held: cuckoo entries plus Bloom-part elements.
    pub items: usize,
    pub entries: usize,
    pub bloom_items: usize,
    pub buckets: usize,
    pub fingerprint_bits: u32,
    pub value_bits: u32,
    /// Width of the per-bucket Bloom field (0: none).
    pub bloom_field_bits: u32,
    /// Occupied entries / (4 × buckets).
    pub load_factor: f64,
    /// Table memory in bits (whole words) per item held.
    pub bits_per_item: f64,
    /// Estimated false-positive rate: cuckoo part plus Bloom part (crate docs).
    pub estimated_fpr: f64,
    /// The filter's theoretical upper bound 1 − (1 − 2^−f)^(2b).
    pub fpr_bound: f64,
    pub memory_bytes: usize,
}
