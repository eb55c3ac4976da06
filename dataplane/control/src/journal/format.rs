//! The state directory's file names and format constants.

/// The binary snapshot.
pub(super) const SNAPSHOT: &str = "snapshot.bin";
/// The version-1 (JSON) snapshot, read when there is no binary one.
pub(super) const SNAPSHOT_JSON: &str = "snapshot.json";
/// The journal of batches since the snapshot.
pub(super) const JOURNAL: &str = "journal.ndjson";
pub(super) const MAGIC: &[u8; 8] = b"CFDPSNAP";
/// Binary snapshots of 48-byte records.
pub(super) const BIN_VERSION: u32 = 2;
/// Snapshots holding multi-field rules: 64-byte records.
pub(super) const BIN_VERSION_WIDE: u32 = 3;
/// Bytes of a binary snapshot's header.
pub(super) const HEADER: usize = 32;
/// The JSON snapshot's `format` and `version`.
pub(super) const FORMAT: &str = "cfdp-rules";
pub(super) const VERSION: u64 = 1;
