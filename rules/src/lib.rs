//! # cfdp-rules — where rules live
//!
//! The rule model of the cfdp data plane, with no knowledge of filters or
//! packets: flow keys and their hash (`flow`), IP prefixes (`prefix`), rules
//! with field-level validation (`rule`), rule files and lists read as a
//! stream on a thread per core (`file`), the typed fast path from JSON text
//! to rules, updates and batches (`fast`), prefix classes and
//! the priority order (`class`), rule batches (`batch`) and the control
//! protocol's envelope (`protocol`, documented in `PROTOCOL.md`), which the
//! control server and `cfdp ctl` share. Pure data and parsing, no I/O
//! beyond [`read_rule_file`].
#![forbid(unsafe_code)]

pub mod acl;
pub mod acl_match;
#[cfg(feature = "proptest")]
pub mod arbitrary;
pub mod batch;
pub mod class;
pub mod codec;
pub mod decide;
pub mod exact_flow;
pub mod flow;
pub mod precedence;
pub mod prefix;
pub mod prefix_match;
pub mod rule;

pub use acl::AclRule;
pub use acl_match::{AclMatch, MatchError, PortRange};
pub use batch::{
    replace_updates, Atomicity, Batch, BatchError, Code, ReplaceCounts, ReplaceError, Update,
    UpdateError, UpdateResult,
};
pub use class::PrefixClass;
pub use codec::batch::{parse_batch, parse_update};
pub use codec::json::{parse_exact_flow, parse_flow_key, parse_rule, rule_to_json};
/// The codecs at the crate's root, where their users have always found them.
pub use codec::shape::{
    Raw, RawAddr, RawError, RawFlow, RawMatch, RawPort, RawPrefix, RawProto, RawRule,
};
pub use codec::{binary, classbench, fast, file, protocol, stream};
pub use exact_flow::{ExactFlow, FlowError};
pub use fast::{parse_batch_text, parse_rule_text, parse_update_text};
pub use file::{parse_rule_file, parse_rule_list};
pub use flow::{proto, proto_by_name, FlowKey};
pub use precedence::{matching, Precedence};
pub use prefix::{IpPrefix, PrefixError};
pub use prefix_match::PrefixMatch;
pub use rule::{Action, Allowing, Dir, Match, NotAllowing, Rule, RuleError, RuleId};

/// Reads and parses a rule file; every field is validated (the error names
/// the rule and the field). Duplicate ids and matches are the rule store's
/// to refuse: it is the one validator of a rule set, for files and batches.
///
/// A regular file is read as a stream of blocks ([`stream`]); a file the
/// stream does not take (another spelling, a bad rule) is read again whole
/// and parsed by [`parse_rule_file`], which names the first problem. Other
/// files (pipes) are read whole once.
pub fn read_rule_file(path: &std::path::Path) -> Result<Vec<Rule>, RuleError> {
    let cannot = |e: std::io::Error| {
        RuleError::new(
            None,
            None,
            "",
            format!("cannot read {}: {e}", path.display()),
        )
    };
    let mut file = std::fs::File::open(path).map_err(cannot)?;
    // Only a regular file can be read a second time (a pipe, e.g. a shell's
    // `<(...)`, cannot): anything else is read whole, once.
    if file.metadata().map_err(cannot)?.is_file() {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let streamed = stream::read_rule_stream(&file, stream::BLOCK, threads);
        if let Some(rules) = streamed.map_err(cannot)? {
            return Ok(rules);
        }
        file = std::fs::File::open(path).map_err(cannot)?;
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text).map_err(cannot)?;
    parse_rule_file(&text)
}

/// The secrets the filters' key hash is computed with.
///
/// rapidhash's default secrets are published: with them anyone can compute
/// offline 5-tuples whose hashes give another rule's bucket and
/// fingerprint, and in filter-only mode (where the filter's answer is the
/// verdict) such a packet takes that rule's action, a redirect say. A node
/// in filter-only mode therefore hashes with secrets derived from a random
/// seed drawn at start (`[filter] hash_seed = 0`); nothing that outlives
/// the process stores a hash (snapshots hold rules, and the filters are
/// rebuilt from them), so the seed is not kept. Verify mode keeps the
/// public secrets: there a collision costs one exact-table probe, never a
/// wrong verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSecret(Option<rapidhash::v3::RapidSecrets>);

impl HashSecret {
    /// rapidhash v3's default secrets (reproducible; [`hash_bytes`]).
    pub const PUBLIC: Self = Self(None);

    /// Secrets derived from `seed` (rapidhash's own derivation).
    pub fn from_seed(seed: u64) -> Self {
        Self(Some(rapidhash::v3::RapidSecrets::seed(seed)))
    }

    /// The 64-bit hash of `key` under these secrets. The public ones are
    /// a branch apart (always taken the same way in one data plane) so
    /// that their constants stay folded into the code: passing them as
    /// data cost the worker loop ~2 % (`bench --bin pipeline`).
    #[inline]
    pub fn hash_bytes(&self, key: &[u8]) -> u64 {
        match &self.0 {
            None => rapidhash::v3::rapidhash_v3(key),
            Some(s) => rapidhash::v3::rapidhash_v3_seeded(key, s),
        }
    }
}

impl Default for HashSecret {
    fn default() -> Self {
        Self::PUBLIC
    }
}

/// The 64-bit hash of a key's bytes: rapidhash v3 with its default secrets,
/// the same function as `cfdp_filter::hash::hash_bytes` (snapshot images
/// store positions derived from it; `cfdp-engine`'s tests check the two
/// agree). Kept here so the rule model needs no filter.
#[inline]
pub fn hash_bytes(key: &[u8]) -> u64 {
    HashSecret::PUBLIC.hash_bytes(key)
}
