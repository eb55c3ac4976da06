//! Every reader and writer of the rule grammar, apart from the model
//! they read into ([`crate::rule`] and the match types, each valid by
//! construction): the JSON value form of rules (`json`) and of updates
//! and batches (`batch`), the typed fast path from
//! text (`fast`, over `shape` and the byte-level `strict`), rule files
//! and lists (`file`, `stream`), 48-byte binary records (`binary`),
//! ClassBench filter sets and traces (`classbench`), the
//! JSON writer (`rule_json`) and the control protocol's envelope
//! (`protocol`). Every reader (the text ones, the binary records,
//! ClassBench lines, and P4Runtime entries in `cfdp-p4runtime`) builds
//! one raw form (`shape`) and one validator (`validate`) turns it into the
//! model's rule. A codec may use the model; the model uses no codec.

pub mod batch;
pub mod binary;
pub mod classbench;
pub mod fast;
pub mod file;
pub mod json;
pub mod protocol;
pub(crate) mod rule_json;
pub mod shape;
pub mod stream;
pub(crate) mod strict;
pub(crate) mod validate;
