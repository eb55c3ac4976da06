//! Persistence: an append-only journal of applied batches, compacted into
//! snapshots.
//!
//! `state_dir` holds two files:
//!
//! * `snapshot.bin`: the rule set at a generation, binary — a 32-byte
//!   header (`CFDPSNAP`, version 2, record size, generation, rule count),
//!   one 48-byte record per rule (`cfdp_rules::binary`), and the CRC-32 of
//!   everything before it. Written to a temporary file, fsynced, renamed
//!   over the old one, and the directory fsynced: a crash leaves the old or
//!   the new snapshot, never a mix. Ten million rules are 480 MB read
//!   without parsing (the JSON form was 1.44 GB and took seconds to parse).
//!   A `snapshot.json` (version 1: `{"format": "cfdp-rules", "version": 1,
//!   "generation": G, "rules": [...], "crc32": C}`, written before
//!   2026-11-23) is still read when there is no `snapshot.bin`, and removed
//!   once a binary snapshot replaces it.
//! * `journal.ndjson`: one line per applied batch, `CRC32HEX {"generation":
//!   G, "updates": [...]}`, appended and fsynced **before** the batch is
//!   published or acknowledged. Only the updates that took effect are
//!   recorded, so replaying them cannot fail on a correct journal.
//!
//! On start the snapshot is loaded and the journal records after its
//! generation are replayed in order. A damaged snapshot, a record with a bad
//! checksum, or a gap in the generations is an error naming the file and
//! line: cfdp refuses to start rather than start with a silently different
//! rule set. One case is not damage: a last line with no newline is a write
//! cut by a crash before its fsync returned — that batch was never
//! acknowledged — so it is dropped, with a warning, and the file truncated.
//!
//! Split by concern: `record` is the journal line format, `snapshot`
//! the snapshot formats (binary, and the version-1 JSON one still read),
//! [`restore`] reads both back and repairs a cut last line; this file
//! appends records and compacts them into a snapshot.

mod error;
mod format;
mod record;
mod restore;
mod snapshot;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use cfdp_rules::{Rule, Update};

pub use error::{Damage, JournalError};
pub use record::MAX_RECORD_BYTES;
pub use restore::{restore, Restored};
pub use snapshot::write_snapshot;

use error::io_err;
use format::JOURNAL;

/// The journal of one state directory.
pub struct Journal {
    dir: PathBuf,
    file: File,
    /// Bytes of acknowledged records: a failed append is cut back to here.
    len: u64,
    /// Set when a failed append could not be cut back: later appends are
    /// refused (they would follow a partial record) until a compaction
    /// starts a new journal.
    broken: Option<String>,
    records: u64,
    /// µs the last append spent writing and syncing.
    last: (u64, u64),
    /// Told when a record has been written and when it is synced (tests
    /// check the order against the publish and the reply).
    observer: Option<Observer>,
}

/// What [`Journal::observe`] reports, in the order it happens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalEvent {
    /// A record's bytes were handed to the file (not yet durable).
    Written,
    /// `fdatasync` returned: the record is on disk.
    Synced,
}

type Observer = Box<dyn FnMut(JournalEvent) + Send>;

impl Journal {
    /// Opens `dir`'s journal for appending (after [`restore`]).
    pub fn open(dir: &Path, records: u64) -> Result<Self, JournalError> {
        crate::files::private_dir(dir).map_err(|e| io_err(dir, e))?;
        let path = dir.join(JOURNAL);
        let file = crate::files::open_append(&path).map_err(|e| io_err(&path, e))?;
        crate::files::sync_dir(dir).map_err(|e| io_err(dir, e))?;
        let len = file.metadata().map_err(|e| io_err(&path, e))?.len();
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            len,
            broken: None,
            records,
            last: (0, 0),
            observer: None,
        })
    }

    /// Calls `f` after each record is written and after it is synced.
    pub fn observe(&mut self, f: impl FnMut(JournalEvent) + Send + 'static) {
        self.observer = Some(Box::new(f));
    }

    fn tell(&mut self, e: JournalEvent) {
        if let Some(f) = &mut self.observer {
            f(e);
        }
    }

    /// Records in the journal since the last compaction.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes in the journal file.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// µs the last [`Journal::append`] spent building and writing its
    /// record, and syncing it.
    pub fn last_timing(&self) -> (u64, u64) {
        self.last
    }

    /// Appends one batch and waits until it is on disk.
    pub fn append(&mut self, generation: u64, updates: &[Update]) -> Result<(), JournalError> {
        #[derive(serde::Serialize)]
        struct Record<'a> {
            generation: u64,
            updates: &'a [Update],
        }
        let t0 = std::time::Instant::now();
        // Streamed from the typed updates (no JSON tree), one write.
        let body = serde_json::to_string(&Record {
            generation,
            updates,
        })
        .expect("updates serialize");
        self.write_record(&body, t0)
    }

    /// Appends one batch given as the text of its `updates` list, as the
    /// client sent it (`ParsedRequest::updates_text`: one line, and the
    /// updates the batch applied, all of them, in order), and waits until
    /// it is on disk. Restore parses it like any record.
    pub fn append_text(&mut self, generation: u64, updates_json: &str) -> Result<(), JournalError> {
        let t0 = std::time::Instant::now();
        let body = format!("{{\"generation\":{generation},\"updates\":{updates_json}}}");
        self.write_record(&body, t0)
    }

    /// Writes one record line and syncs it; on failure the journal is cut
    /// back to its acknowledged records.
    fn write_record(&mut self, body: &str, t0: std::time::Instant) -> Result<(), JournalError> {
        let path = self.dir.join(JOURNAL);
        if let Some(why) = &self.broken {
            return Err(JournalError::Broken {
                path,
                why: why.clone(),
            });
        }
        let line = record::crc_line(body);
        let mut t1 = t0;
        let written = self.file.write_all(line.as_bytes()).and_then(|()| {
            t1 = std::time::Instant::now();
            self.tell(JournalEvent::Written);
            self.file.sync_data()?;
            self.tell(JournalEvent::Synced);
            Ok(())
        });
        if let Err(e) = written {
            // A full disk (ENOSPC) or an I/O error, possibly after part of
            // the record went out: cut the journal back to its acknowledged
            // records, so the next batch (same generation) and the next
            // start find it exactly as before this one.
            let cut = self
                .file
                .set_len(self.len)
                .and_then(|()| self.file.sync_data());
            if let Err(c) = cut {
                self.broken = Some(format!(
                    "an earlier write failed ({e}) and could not be undone ({c}): \
                     refusing to append after a partial record (a snapshot, \
                     `cfdp ctl snapshot`, starts a new journal)"
                ));
            }
            return Err(io_err(&path, e));
        }
        self.len += line.len() as u64;
        self.last = (
            t1.duration_since(t0).as_micros() as u64,
            t1.elapsed().as_micros() as u64,
        );
        self.records += 1;
        Ok(())
    }

    /// Writes a snapshot of `rules` at `generation` and empties the journal.
    pub fn compact(&mut self, generation: u64, rules: &[Rule]) -> Result<(), JournalError> {
        write_snapshot(&self.dir, generation, rules)?;
        // The snapshot covers every record: start an empty journal the same
        // atomic way (a crash in between leaves records ≤ the snapshot's
        // generation, which restore skips).
        let path = self.dir.join(JOURNAL);
        let tmp = self.dir.join(format!("{JOURNAL}.tmp"));
        crate::files::create_temp(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        crate::files::sync_dir(&self.dir).map_err(|e| io_err(&self.dir, e))?;
        self.file = crate::files::open_append(&path).map_err(|e| io_err(&path, e))?;
        self.len = 0;
        self.broken = None;
        self.records = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
