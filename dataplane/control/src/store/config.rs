//! The store's settings and filter sizing: the filter configuration for a
//! mode and capacity.

use std::sync::Arc;

use cfdp_engine::{filter_params, Mode};
use cfdp_filter::{BloomConfig, BloomMode, Config, Filter};

use super::types::StoreError;

/// Filter and rule-store parameters (`[filter]` and `[control]` in the
/// configuration).
#[derive(Clone, Debug, PartialEq)]
pub struct StoreConfig {
    pub mode: Mode,
    /// Items the flow-rule filter is sized for at first.
    pub flow_capacity: usize,
    /// Items each prefix-class filter is sized for at first.
    pub prefix_capacity: usize,
    /// `None`: plain cuckoo inserts. `Some`: the Bloom-Cuckoo insert path.
    pub bloom: Option<BloomMode>,
    /// Threshold `t` of the Bloom-Cuckoo path.
    pub threshold: u32,
    pub max_kicks: u32,
    /// Rebuild a full filter at twice the size instead of refusing inserts.
    pub auto_grow: bool,
    /// Most rules at once (slots; also the filter value width in
    /// filter-only mode).
    pub max_rules: usize,
    /// The secrets filter keys are hashed with (`cfdp_rules::HashSecret`:
    /// the public ones by default; `cfdp run` draws random ones in
    /// filter-only mode).
    pub hash_secret: cfdp_rules::HashSecret,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Verify,
            flow_capacity: 1 << 16,
            prefix_capacity: 1 << 12,
            bloom: Some(BloomMode::Bit),
            threshold: 0,
            max_kicks: 500,
            auto_grow: true,
            max_rules: 1 << 20,
            hash_secret: cfdp_rules::HashSecret::PUBLIC,
        }
    }
}

impl StoreConfig {
    fn bloom_field_bits(&self) -> u32 {
        match self.bloom {
            None => 0,
            Some(BloomMode::Bit) => 1,
            Some(BloomMode::Tag { bits }) => bits,
        }
    }

    fn value_bits(&self) -> u32 {
        if self.mode == Mode::FilterOnly {
            usize::BITS - self.max_rules.saturating_sub(1).max(1).leading_zeros()
        } else {
            0
        }
    }

    /// The filter configuration for `capacity` items.
    pub fn filter_config(&self, capacity: usize) -> Result<Config, StoreError> {
        let (fp, v) = filter_params(self.mode, self.value_bits(), self.bloom_field_bits())?;
        Ok(Config {
            capacity: capacity.max(16),
            fingerprint_bits: fp,
            value_bits: v,
            bloom: self.bloom.map(|mode| BloomConfig {
                mode,
                threshold: self.threshold,
            }),
            max_kicks: self.max_kicks,
            ..Config::default()
        })
    }

    pub(super) fn new_filter(&self, capacity: usize) -> Result<Arc<Filter>, StoreError> {
        let cfg = self.filter_config(capacity)?;
        Ok(Arc::new(Filter::new(cfg)?))
    }
}

/// The hash secrets for `mode` and `[filter] hash_seed`: derived from that
/// seed when it is set (reproducible runs); otherwise random ones in
/// filter-only mode, where a precomputed collision would take another
/// rule's action, and the public ones in verify mode, where it costs one
/// exact-table probe (see `cfdp_rules::HashSecret`).
pub fn hash_secret_for(mode: Mode, seed: u64) -> Result<cfdp_rules::HashSecret, StoreError> {
    use cfdp_rules::HashSecret;
    if seed != 0 {
        return Ok(HashSecret::from_seed(seed));
    }
    if mode != Mode::FilterOnly {
        return Ok(HashSecret::PUBLIC);
    }
    random_secret()
}

/// Secrets derived from a seed drawn from the operating system: for
/// tables whose keys come from the network (filter-only mode's filters,
/// the connection table), so that nobody can compute colliding keys
/// offline.
pub fn random_secret() -> Result<cfdp_rules::HashSecret, StoreError> {
    let mut raw = [0u8; 8];
    getrandom::fill(&mut raw).map_err(|e| StoreError::Random(e.to_string()))?;
    Ok(cfdp_rules::HashSecret::from_seed(u64::from_le_bytes(raw)))
}

impl StoreConfig {
    /// Slots are `u32`: `max_rules` must fit.
    pub(super) fn check_max_rules(&self) -> Result<(), StoreError> {
        if self.max_rules == 0 || self.max_rules > u32::MAX as usize {
            return Err(StoreError::MaxRules(self.max_rules));
        }
        Ok(())
    }
}
