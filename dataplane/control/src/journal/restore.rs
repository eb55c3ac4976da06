//! Reading a state directory back: the snapshot, then the journal records
//! after it, in order. A damaged record or a gap is an error naming the
//! line; a last line without its newline (a write cut by a crash before
//! its fsync returned, never acknowledged) is dropped and the file cut
//! back to its last whole record.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use cfdp_rules::{Rule, Update};

use super::error::{io_err, Damage, JournalError};
use super::format::{JOURNAL, SNAPSHOT, SNAPSHOT_JSON};
use super::record::{parse_record, MAX_RECORD_BYTES};
use super::snapshot::{parse_snapshot, read_binary_snapshot};

/// What was on disk.
#[derive(Debug, Default)]
pub struct Restored {
    /// Rules of the snapshot, and its generation (0 without one).
    pub rules: Vec<Rule>,
    pub snapshot_generation: u64,
    /// Journal records after the snapshot, in order: (generation, updates).
    pub records: Vec<(u64, Vec<Update>)>,
    /// Set when a cut last record was dropped.
    pub dropped_tail: Option<String>,
}

impl Restored {
    /// True when the directory held no state at all.
    pub fn is_empty(&self) -> bool {
        self.snapshot_generation == 0 && self.rules.is_empty() && self.records.is_empty()
    }
}

/// Reads the snapshot and journal of `dir` (created when missing).
pub fn restore(dir: &Path) -> Result<Restored, JournalError> {
    restore_capped(dir, MAX_RECORD_BYTES)
}

/// Reads `dir`'s snapshot, binary or (older) JSON, into `out`.
fn read_snapshot(dir: &Path, out: &mut Restored) -> Result<(), JournalError> {
    let snap = dir.join(SNAPSHOT);
    let old = dir.join(SNAPSHOT_JSON);
    if snap.exists() {
        let (g, rules) = read_binary_snapshot(&snap)?;
        out.snapshot_generation = g;
        out.rules = rules;
    } else if old.exists() {
        let mut text = String::new();
        crate::files::open_read(&old)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|e| io_err(&old, e))?;
        let (g, rules) = parse_snapshot(&text).map_err(|what| JournalError::BadSnapshot {
            path: old.clone(),
            what,
        })?;
        out.snapshot_generation = g;
        out.rules = rules;
    }
    Ok(())
}

/// [`restore`] with records longer than `max_record` refused.
pub(super) fn restore_capped(dir: &Path, max_record: usize) -> Result<Restored, JournalError> {
    crate::files::private_dir(dir).map_err(|e| io_err(dir, e))?;
    let mut out = Restored::default();
    read_snapshot(dir, &mut out)?;
    let jpath = dir.join(JOURNAL);
    if !jpath.exists() {
        return Ok(out);
    }
    let f = crate::files::open_read(&jpath).map_err(|e| io_err(&jpath, e))?;
    let mut reader = BufReader::new(f);
    let mut line = Vec::new();
    let mut good_len = 0u64;
    let mut lineno = 0;
    let mut expect = out.snapshot_generation + 1;
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take(max_record as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| io_err(&jpath, e))?;
        if n == 0 {
            break;
        }
        lineno += 1;
        if n > max_record {
            return Err(JournalError::BadRecord {
                path: jpath.clone(),
                line: lineno,
                what: Damage::Overlong { max: max_record },
            });
        }
        if line.last() != Some(&b'\n') {
            out.dropped_tail = Some(format!(
                "{}: line {lineno}: {n} bytes with no newline (a write cut by a crash, \
                 never acknowledged): dropped",
                jpath.display()
            ));
            break;
        }
        let at = |what: Damage| JournalError::BadRecord {
            path: jpath.clone(),
            line: lineno,
            what,
        };
        let (g, updates) = parse_record(&line[..n - 1]).map_err(at)?;
        good_len += n as u64;
        if g <= out.snapshot_generation {
            continue; // already in the snapshot (a crash between compaction steps)
        }
        if g != expect {
            return Err(at(Damage::Gap {
                got: g,
                expected: expect,
            }));
        }
        expect += 1;
        out.records.push((g, updates));
    }
    if out.dropped_tail.is_some() {
        let f = OpenOptions::new()
            .write(true)
            .open(&jpath)
            .map_err(|e| io_err(&jpath, e))?;
        f.set_len(good_len).map_err(|e| io_err(&jpath, e))?;
        f.sync_all().map_err(|e| io_err(&jpath, e))?;
    }
    Ok(out)
}
