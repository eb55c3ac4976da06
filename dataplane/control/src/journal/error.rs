//! What reading or writing the state directory can fail with.

use std::path::{Path, PathBuf};

use super::format;

/// Why the journal or a snapshot could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file or directory operation failed (a full disk, permissions).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A snapshot that is not one, or is damaged.
    #[error("{}: {what}", path.display())]
    BadSnapshot { path: PathBuf, what: Damage },
    /// A journal record that is damaged, or out of sequence.
    #[error("{}: line {line}: {what}", path.display())]
    BadRecord {
        path: PathBuf,
        line: u64,
        what: Damage,
    },
    /// An earlier append failed and could not be cut back: appends are
    /// refused until a snapshot starts a new journal.
    #[error("{}: {why}", path.display())]
    Broken { path: PathBuf, why: String },
}

/// What is wrong with the contents of a snapshot or a journal record:
/// which check failed, with the values it found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    // Journal records.
    #[error("longer than {max} bytes: not a record cfdp wrote")]
    Overlong { max: usize },
    #[error("not UTF-8 (damaged)")]
    NotUtf8,
    #[error("not a journal record (no checksum)")]
    NoChecksum,
    #[error("bad checksum field (damaged)")]
    BadChecksumField,
    #[error("checksum mismatch (the record is damaged)")]
    RecordChecksum,
    /// serde's message, with its line and column.
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("{0} missing")]
    Missing(&'static str),
    #[error("update {}: {source}", index + 1)]
    Update {
        index: usize,
        #[source]
        source: Box<cfdp_rules::UpdateError>,
    },
    #[error("generation {got} where {expected} was expected: records are missing")]
    Gap { got: u64, expected: u64 },
    // Snapshots.
    #[error(
        "not a cfdp binary rule snapshot of version {} with {}-byte records or {} with {}-byte \
         records (magic {magic_ok}, version {version}, {record}-byte records)",
        format::BIN_VERSION, cfdp_rules::binary::RECORD,
        format::BIN_VERSION_WIDE, cfdp_rules::binary::RECORD_WIDE,
        magic_ok = if *magic { "right" } else { "wrong" }
    )]
    NotBinarySnapshot {
        magic: bool,
        version: u32,
        record: usize,
    },
    #[error("snapshot header cut short (the file is damaged)")]
    HeaderCut,
    #[error("snapshot: {present} of {count} rules present (the file is cut short)")]
    CutShort { present: u64, count: u64 },
    #[error(
        "snapshot: {0} bytes after the rules where the 4-byte checksum belongs (the file is \
         damaged)"
    )]
    Tail(usize),
    #[error("snapshot: checksum mismatch (the file is damaged)")]
    SnapshotChecksum,
    #[error("snapshot: rule #{number}: {source}")]
    Rule {
        /// 1-based, in the file's order.
        number: u64,
        #[source]
        source: Box<cfdp_rules::binary::DecodeError>,
    },
    #[error(
        "not a cfdp rule snapshot of version {} (format {format:?}, version {version})",
        format::VERSION
    )]
    NotJsonSnapshot { format: String, version: u64 },
    #[error("snapshot: {0}")]
    RuleList(Box<cfdp_rules::RuleError>),
}

pub(super) fn io_err(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}
