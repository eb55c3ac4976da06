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

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use cfdp_rules::{parse_update, Rule, Update};
use serde_json::Value;

const SNAPSHOT: &str = "snapshot.bin";
/// The version-1 (JSON) snapshot, read when there is no binary one.
const SNAPSHOT_JSON: &str = "snapshot.json";
const MAGIC: &[u8; 8] = b"CFDPSNAP";
const BIN_VERSION: u32 = 2;
/// Snapshots holding multi-field rules: 64-byte records.
const BIN_VERSION_WIDE: u32 = 3;
const HEADER: usize = 32;
const JOURNAL: &str = "journal.ndjson";
/// The longest journal record restore reads (a record is one batch's
/// updates, bounded by the socket's `max_line_bytes`, 16 MiB by default;
/// this leaves room for raised limits and refuses a damaged or planted
/// file before it takes the memory).
pub const MAX_RECORD_BYTES: usize = 1 << 30;
const FORMAT: &str = "cfdp-rules";
const VERSION: u64 = 1;

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

/// What is wrong with the contents of a snapshot or a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Damage(pub String);

impl From<&str> for Damage {
    fn from(s: &str) -> Self {
        Damage(s.to_string())
    }
}

impl From<String> for Damage {
    fn from(s: String) -> Self {
        Damage(s)
    }
}

fn io_err(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn sync_dir(dir: &Path) -> Result<(), JournalError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err(dir, e))
}

fn crc_line(body: &str) -> String {
    format!("{:08x} {body}\n", crc32fast::hash(body.as_bytes()))
}

/// Reads the snapshot and journal of `dir` (created when missing).
pub fn restore(dir: &Path) -> Result<Restored, JournalError> {
    restore_capped(dir, MAX_RECORD_BYTES)
}

/// [`restore`] with records longer than `max_record` refused.
/// Reads `dir`'s snapshot, binary or (older) JSON, into `out`.
fn read_snapshot(dir: &Path, out: &mut Restored) -> Result<(), JournalError> {
    let snap = dir.join(SNAPSHOT);
    let old = dir.join(SNAPSHOT_JSON);
    if snap.exists() {
        let f = File::open(&snap).map_err(|e| io_err(&snap, e))?;
        let (g, rules) = read_binary_snapshot(f).map_err(|what| JournalError::BadSnapshot {
            path: snap.clone(),
            what,
        })?;
        out.snapshot_generation = g;
        out.rules = rules;
    } else if old.exists() {
        let text = std::fs::read_to_string(&old).map_err(|e| io_err(&old, e))?;
        let (g, rules) = parse_snapshot(&text).map_err(|what| JournalError::BadSnapshot {
            path: old.clone(),
            what,
        })?;
        out.snapshot_generation = g;
        out.rules = rules;
    }
    Ok(())
}

fn restore_capped(dir: &Path, max_record: usize) -> Result<Restored, JournalError> {
    crate::files::private_dir(dir).map_err(|e| io_err(dir, e))?;
    let mut out = Restored::default();
    read_snapshot(dir, &mut out)?;
    let jpath = dir.join(JOURNAL);
    if !jpath.exists() {
        return Ok(out);
    }
    let f = File::open(&jpath).map_err(|e| io_err(&jpath, e))?;
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
                what: Damage(format!(
                    "longer than {max_record} bytes: not a record cfdp wrote"
                )),
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
            return Err(at(Damage(format!(
                "generation {g} where {expect} was expected: records are missing"
            ))));
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

/// The snapshot document; `rules` is kept as its raw text (checksummed as
/// it is on disk, then parsed rule by rule: a ten-million-rule snapshot is
/// never one JSON tree).
#[derive(serde::Deserialize)]
struct SnapshotDoc<'a> {
    format: &'a str,
    version: u64,
    generation: u64,
    crc32: u64,
    #[serde(borrow)]
    rules: &'a serde_json::value::RawValue,
}

fn parse_snapshot(text: &str) -> Result<(u64, Vec<Rule>), Damage> {
    let doc: SnapshotDoc =
        serde_json::from_str(text).map_err(|e| format!("snapshot is not valid JSON: {e}"))?;
    if doc.format != FORMAT || doc.version != VERSION {
        return Err(Damage(format!(
            "not a cfdp rule snapshot of version {VERSION} (format {:?}, version {})",
            doc.format, doc.version
        )));
    }
    // Written compactly (no whitespace), so the list's bytes on disk are
    // its serialization: what the checksum covers.
    if u64::from(crc32fast::hash(doc.rules.get().as_bytes())) != doc.crc32 {
        return Err("snapshot: checksum mismatch (the file is damaged)".into());
    }
    let rules =
        cfdp_rules::parse_rule_list(doc.rules.get()).map_err(|e| format!("snapshot: {e}"))?;
    Ok((doc.generation, rules))
}

/// Reads a binary snapshot as a stream (the file is never held whole):
/// header, records decoded as they come, CRC checked at the end.
fn read_binary_snapshot(f: File) -> Result<(u64, Vec<Rule>), Damage> {
    use cfdp_rules::binary::{decode, decode_wide, RECORD, RECORD_WIDE};
    use std::io::Read;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut crc = crc32fast::Hasher::new();
    let mut head = [0u8; HEADER];
    r.read_exact(&mut head)
        .map_err(|e| format!("snapshot header: {e} (the file is damaged)"))?;
    crc.update(&head);
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let long = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    // Version 2: 48-byte records; version 3: 64-byte records (a set with
    // multi-field rules).
    let record = match (&head[..8] == MAGIC, word(8), word(12) as usize) {
        (true, BIN_VERSION, RECORD) => RECORD,
        (true, BIN_VERSION_WIDE, RECORD_WIDE) => RECORD_WIDE,
        _ => {
            return Err(Damage(format!(
                "not a cfdp binary rule snapshot of version {BIN_VERSION} with {RECORD}-byte \
                 records or {BIN_VERSION_WIDE} with {RECORD_WIDE}-byte records"
            )))
        }
    };
    let (generation, count) = (long(16), long(24));
    // The count comes from the file: reserve only what the file can hold,
    // so a damaged count cannot make this allocate without bound.
    let cap = r
        .get_ref()
        .metadata()
        .map(|m| m.len().saturating_sub(HEADER as u64) / record as u64)
        .unwrap_or(0)
        .min(count);
    let mut rules = Vec::with_capacity(cap as usize);
    let mut block = vec![0u8; record * 8192];
    let mut left = count;
    while left > 0 {
        let n = left.min(8192) as usize;
        let buf = &mut block[..n * record];
        let mut got = 0;
        while got < buf.len() {
            match r.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Damage(format!("snapshot: {e}"))),
            }
        }
        if got < buf.len() {
            return Err(Damage(format!(
                "snapshot: {} of {count} rules present (the file is cut short)",
                count - left + (got / record) as u64
            )));
        }
        crc.update(buf);
        for (j, rec) in buf.chunks_exact(record).enumerate() {
            let rule = if record == RECORD {
                decode(rec.try_into().expect("a whole record"))
            } else {
                decode_wide(rec.try_into().expect("a whole record"))
            };
            let i = count - left + j as u64;
            rules.push(rule.map_err(|e| format!("snapshot: rule #{}: {e}", i + 1))?);
        }
        left -= n as u64;
    }
    let mut tail = Vec::new();
    r.read_to_end(&mut tail)
        .map_err(|e| format!("snapshot: {e}"))?;
    if tail.len() != 4 {
        return Err(Damage(format!(
            "snapshot: {} bytes after the rules where the 4-byte checksum belongs (the file is damaged)",
            tail.len()
        )));
    }
    if u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) != crc.finalize() {
        return Err("snapshot: checksum mismatch (the file is damaged)".into());
    }
    Ok((generation, rules))
}

fn parse_record(line: &[u8]) -> Result<(u64, Vec<Update>), Damage> {
    let text = std::str::from_utf8(line).map_err(|_| Damage::from("not UTF-8 (damaged)"))?;
    let (crc, body) = text
        .split_once(' ')
        .ok_or("not a journal record (no checksum)")?;
    let crc = u32::from_str_radix(crc, 16).map_err(|_| "bad checksum field (damaged)")?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err("checksum mismatch (the record is damaged)".into());
    }
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not valid JSON: {e}"))?;
    let g = v["generation"].as_u64().ok_or("generation missing")?;
    let updates = v["updates"]
        .as_array()
        .ok_or("updates missing")?
        .iter()
        .map(parse_update)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Damage(e.to_string()))?;
    Ok((g, updates))
}

impl Journal {
    /// Opens `dir`'s journal for appending (after [`restore`]).
    pub fn open(dir: &Path, records: u64) -> Result<Self, JournalError> {
        crate::files::private_dir(dir).map_err(|e| io_err(dir, e))?;
        let path = dir.join(JOURNAL);
        let file = crate::files::open_append(&path).map_err(|e| io_err(&path, e))?;
        sync_dir(dir)?;
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
        let line = crc_line(body);
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
        sync_dir(&self.dir)?;
        self.file = crate::files::open_append(&path).map_err(|e| io_err(&path, e))?;
        self.len = 0;
        self.broken = None;
        self.records = 0;
        Ok(())
    }
}

/// Writes `snapshot.bin` atomically (temporary file, fsync, rename, fsync
/// of the directory), then removes a version-1 `snapshot.json` it
/// replaces.
pub fn write_snapshot(dir: &Path, generation: u64, rules: &[Rule]) -> Result<(), JournalError> {
    let path = dir.join(SNAPSHOT);
    let tmp = dir.join(format!("{SNAPSHOT}.tmp"));
    let f = crate::files::create_temp(&tmp).map_err(|e| io_err(&tmp, e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, f);
    let write = |out: &mut std::io::BufWriter<File>| -> std::io::Result<()> {
        let mut crc = crc32fast::Hasher::new();
        let mut head = [0u8; HEADER];
        head[..8].copy_from_slice(MAGIC);
        // Sets without multi-field rules keep the 48-byte records.
        let wide = rules
            .iter()
            .any(|r| matches!(r.matcher, cfdp_rules::Match::Acl { .. }));
        let (version, record) = if wide {
            (BIN_VERSION_WIDE, cfdp_rules::binary::RECORD_WIDE)
        } else {
            (BIN_VERSION, cfdp_rules::binary::RECORD)
        };
        head[8..12].copy_from_slice(&version.to_le_bytes());
        head[12..16].copy_from_slice(&(record as u32).to_le_bytes());
        head[16..24].copy_from_slice(&generation.to_le_bytes());
        head[24..32].copy_from_slice(&(rules.len() as u64).to_le_bytes());
        crc.update(&head);
        out.write_all(&head)?;
        for r in rules {
            let rec = cfdp_rules::binary::encode_wide(r);
            let rec = &rec[..record];
            crc.update(rec);
            out.write_all(rec)?;
        }
        out.write_all(&crc.finalize().to_le_bytes())?;
        out.flush()?;
        out.get_ref().sync_all()
    };
    write(&mut out).map_err(|e| io_err(&tmp, e))?;
    drop(out);
    std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
    sync_dir(dir)?;
    // The binary snapshot is on disk: a version-1 one is now stale (restore
    // prefers the binary one, so a crash before this is harmless).
    let old = dir.join(SNAPSHOT_JSON);
    if old.exists() {
        std::fs::remove_file(&old).map_err(|e| io_err(&old, e))?;
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cfdp_rules::rule_to_json;
    use serde_json::json;

    /// Writes a version-1 (JSON) snapshot as cfdp did before the binary
    /// format (the streamed writer's field order).
    fn write_json_snapshot(
        dir: &Path,
        generation: u64,
        rules: &[Rule],
    ) -> Result<(), JournalError> {
        let path = dir.join(SNAPSHOT_JSON);
        let mut text = format!(
            "{{\"format\":\"{FORMAT}\",\"version\":{VERSION},\"generation\":{generation},\"rules\":"
        );
        let list = serde_json::to_string(&rules.iter().map(rule_to_json).collect::<Vec<_>>())
            .expect("JSON serializes");
        text += &list;
        text += &format!(",\"crc32\":{}}}\n", crc32fast::hash(list.as_bytes()));
        std::fs::write(&path, text).map_err(|e| io_err(&path, e))?;
        sync_dir(dir)
    }

    /// The state directory is 0700 and every file in it 0600, whatever
    /// the umask: the rule set is nobody else's to read.
    #[test]
    fn state_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("cfdp-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let state = dir.join("state");
        restore(&state).unwrap();
        let mut j = Journal::open(&state, 0).unwrap();
        let rule = cfdp_rules::parse_rule_list(
            r#"[{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}]"#,
        )
        .unwrap();
        j.append(1, &[Update::Insert(rule[0])]).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(&state.join(JOURNAL)), 0o600);
        j.compact(1, &rule).unwrap();
        assert_eq!(mode(&state.join(SNAPSHOT)), 0o600);
        assert_eq!(mode(&state.join(JOURNAL)), 0o600, "the compacted journal");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A journal line longer than the cap is refused before it is read
    /// whole.
    #[test]
    fn overlong_records_are_refused() {
        let dir = std::env::temp_dir().join(format!("cfdp-longrec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(JOURNAL), format!("{}\n", "x".repeat(1000))).unwrap();
        let e = restore_capped(&dir, 100).unwrap_err();
        assert!(bad_record(&e, 1, "longer than 100 bytes"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Whether `e` is a damaged record at `line` whose reason says `why`.
    fn bad_record(e: &JournalError, line: u64, why: &str) -> bool {
        matches!(e, JournalError::BadRecord { line: l, what, .. }
            if *l == line && what.0.contains(why))
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cfdp-journal-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn rule(id: u32) -> Rule {
        cfdp_rules::parse_rule(
            &json!({"id": id, "match": {"dst_prefix": format!("10.{id}.0.0/16")}, "action": "drop"}),
            None,
        )
        .unwrap()
    }

    #[test]
    fn records_and_snapshots_round_trip() {
        let d = tmp("rt");
        assert!(restore(&d).unwrap().is_empty());
        let mut j = Journal::open(&d, 0).unwrap();
        j.append(1, &[Update::Insert(rule(1)), Update::Insert(rule(2))])
            .unwrap();
        j.append(2, &[Update::Delete(1)]).unwrap();
        let r = restore(&d).unwrap();
        assert_eq!(r.records.len(), 2);
        assert_eq!(r.records[1], (2, vec![Update::Delete(1)]));
        j.compact(2, &[rule(2)]).unwrap();
        j.append(3, &[Update::Insert(rule(3))]).unwrap();
        let r = restore(&d).unwrap();
        assert_eq!((r.snapshot_generation, r.rules.clone()), (2, vec![rule(2)]));
        assert_eq!(r.records, vec![(3, vec![Update::Insert(rule(3))])]);
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_cut_last_line_is_dropped_but_damage_is_an_error() {
        let d = tmp("dmg");
        let mut j = Journal::open(&d, 0).unwrap();
        j.append(1, &[Update::Insert(rule(1))]).unwrap();
        let path = d.join(JOURNAL);
        let good = std::fs::read(&path).unwrap();
        // A crash in the middle of the second record's write.
        let mut cut = good.clone();
        cut.extend_from_slice(b"0badc0de {\"generation\": 2, \"upd");
        std::fs::write(&path, &cut).unwrap();
        let r = restore(&d).unwrap();
        assert_eq!(r.records.len(), 1);
        assert!(r.dropped_tail.is_some());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            good,
            "truncated to the good part"
        );
        // A flipped byte inside a complete record.
        let mut bad = good.clone();
        let i = bad.len() - 5;
        bad[i] ^= 0x20;
        std::fs::write(&path, &bad).unwrap();
        let e = restore(&d).unwrap_err();
        assert!(bad_record(&e, 1, "damaged"), "{e}");
        // A damaged snapshot: a changed address, a cut file, extra bytes,
        // a foreign header, a rule no rule file could express.
        std::fs::write(&path, &good).unwrap();
        write_snapshot(&d, 0, &[rule(5), rule(6)]).unwrap();
        let snap = d.join(SNAPSHOT);
        let bytes = std::fs::read(&snap).unwrap();
        let damaged = |f: &dyn Fn(&mut Vec<u8>), want: &str| {
            let mut b = bytes.clone();
            f(&mut b);
            std::fs::write(&snap, &b).unwrap();
            let e = restore(&d).unwrap_err();
            assert!(
                matches!(&e, JournalError::BadSnapshot { path, what }
                    if path.ends_with(SNAPSHOT) && what.0.contains(want)),
                "{want}: {e}"
            );
        };
        // Rule 6's address 10.6.0.0 → 10.7.0.0 (byte 15 of its record).
        damaged(&|b| b[HEADER + 48 + 15] = 7, "checksum mismatch");
        damaged(&|b| b.truncate(HEADER + 48 + 10), "1 of 2 rules present");
        damaged(&|b| b.truncate(b.len() - 1), "3 bytes after the rules");
        damaged(&|b| b.push(0), "5 bytes after the rules");
        damaged(
            &|b| b[..8].copy_from_slice(b"CFDPSNAQ"),
            "not a cfdp binary rule snapshot",
        );
        damaged(&|b| b[8] = 3, "not a cfdp binary rule snapshot");
        // A host bit set in rule 1's /16 (checksum made to match): refused
        // by the rule check, not loaded.
        damaged(
            &|b| {
                b[HEADER + 17] = 1;
                let n = b.len() - 4;
                let c = crc32fast::hash(&b[..n]);
                b[n..].copy_from_slice(&c.to_le_bytes());
            },
            "rule #1: prefix: '10.5.0.1/16' has host bits set",
        );
        std::fs::write(&snap, &bytes).unwrap();
        assert_eq!(restore(&d).unwrap().rules, [rule(5), rule(6)]);
        std::fs::remove_dir_all(&d).ok();
    }

    /// A batch journaled as the client's own text restores as the same
    /// updates as one journaled from the typed updates, and its checksum
    /// guards it the same way.
    #[test]
    fn records_of_the_clients_text_restore_like_typed_ones() {
        let d = tmp("text");
        let mut j = Journal::open(&d, 0).unwrap();
        let ups = vec![Update::Insert(rule(1)), Update::Delete(9)];
        j.append(1, &ups).unwrap();
        let text = format!(
            "[ {} ,{{\"id\": 9, \"op\": \"delete\"}}]",
            serde_json::to_string(&ups[0]).unwrap()
        );
        j.append_text(2, &text).unwrap();
        drop(j);
        let r = restore(&d).unwrap();
        assert_eq!(r.records, vec![(1, ups.clone()), (2, ups)]);
        // A flipped byte in the text record is damage, named by line.
        let path = d.join(JOURNAL);
        let mut bytes = std::fs::read(&path).unwrap();
        let i = bytes.len() - 10;
        bytes[i] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let e = restore(&d).unwrap_err();
        assert!(bad_record(&e, 2, "damaged"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }

    /// Version-1 (JSON) snapshots — of the tree writer (one JSON tree,
    /// keys sorted) and of the streamed writer — still load when there is no
    /// binary snapshot; the binary one that replaces them holds the same
    /// rules, and the JSON file is removed.
    #[test]
    fn json_snapshots_still_load_and_are_replaced() {
        let d = tmp("old");
        std::fs::create_dir_all(&d).unwrap();
        let rules = [rule(1), rule(2), rule(3)];
        let list = Value::Array(rules.iter().map(rule_to_json).collect());
        let body = serde_json::to_string(&list).unwrap();
        let old = json!({
            "format": FORMAT,
            "version": VERSION,
            "generation": 7,
            "crc32": crc32fast::hash(body.as_bytes()),
            "rules": list,
        });
        std::fs::write(d.join(SNAPSHOT_JSON), format!("{old}\n")).unwrap();
        let r = restore(&d).unwrap();
        assert_eq!((r.snapshot_generation, r.rules.as_slice()), (7, &rules[..]));
        write_json_snapshot(&d, 8, &rules).unwrap();
        let r = restore(&d).unwrap();
        assert_eq!((r.snapshot_generation, r.rules.as_slice()), (8, &rules[..]));
        // A JSON snapshot of another format version is refused by name.
        let text = std::fs::read_to_string(d.join(SNAPSHOT_JSON)).unwrap();
        std::fs::write(
            d.join(SNAPSHOT_JSON),
            text.replace("\"version\":1", "\"version\":9"),
        )
        .unwrap();
        let e = restore(&d).unwrap_err();
        assert!(
            matches!(&e, JournalError::BadSnapshot { path, what }
                if path.ends_with(SNAPSHOT_JSON) && what.0.contains("version 9")),
            "{e}"
        );
        write_snapshot(&d, 9, &rules).unwrap();
        assert!(
            !d.join(SNAPSHOT_JSON).exists(),
            "the JSON snapshot is replaced"
        );
        let r = restore(&d).unwrap();
        assert_eq!((r.snapshot_generation, r.rules.as_slice()), (9, &rules[..]));
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_gap_in_generations_is_an_error() {
        let d = tmp("gap");
        let mut j = Journal::open(&d, 0).unwrap();
        j.append(1, &[Update::Insert(rule(1))]).unwrap();
        j.append(3, &[Update::Insert(rule(3))]).unwrap();
        let e = restore(&d).unwrap_err();
        assert!(bad_record(&e, 2, "missing"), "{e}");
        std::fs::remove_dir_all(&d).ok();
    }
}
