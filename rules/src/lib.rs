//! # cfdp-rules — where rules live
//!
//! The rule model of the cfdp data plane: flow keys (`flow`), IP prefixes
//! (`prefix`), rules and rule files with field-level validation (`rule`),
//! and the validated rule set with its priority order and exact classifier
//! (`set`), rule batches (`batch`) and the control protocol's envelope
//! (`protocol`, documented in `PROTOCOL.md`). The data plane compiles a [`RuleSet`] into filters; the exact
//! tables here confirm filter positives in `verify` mode.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod batch;
pub mod flow;
pub mod prefix;
pub mod protocol;
pub mod rule;
pub mod set;

pub use batch::{
    parse_batch, parse_update, Atomicity, Batch, BatchError, Code, Update, UpdateResult,
};
pub use flow::{proto, FlowKey};
pub use prefix::IpPrefix;
pub use rule::{
    parse_rule, parse_rule_file, rule_to_json, Action, Dir, Match, Rule, RuleError, RuleId,
};
pub use set::{ClassTable, PrefixClass, RuleIndex, RuleSet};

/// Reads, parses and validates a rule file into a rule set.
pub fn load_rule_file(path: &std::path::Path) -> Result<RuleSet, RuleError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        RuleError::new(
            None,
            None,
            "",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    RuleSet::new(parse_rule_file(&text)?)
}
