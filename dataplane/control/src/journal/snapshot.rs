//! The snapshot formats. `snapshot.bin` (version 2, 48-byte records;
//! version 3, 64-byte records when the set holds multi-field rules) is
//! written and read; `snapshot.json` (version 1) is only read, and removed
//! once a binary snapshot replaces it.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use cfdp_rules::Rule;

use super::error::{io_err, Damage, JournalError};
use super::format::{
    BIN_VERSION, BIN_VERSION_WIDE, FORMAT, HEADER, MAGIC, SNAPSHOT, SNAPSHOT_JSON, VERSION,
};

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
    crate::files::sync_dir(dir).map_err(|e| io_err(dir, e))?;
    // The binary snapshot is on disk: a version-1 one is now stale (restore
    // prefers the binary one, so a crash before this is harmless).
    let old = dir.join(SNAPSHOT_JSON);
    if old.exists() {
        std::fs::remove_file(&old).map_err(|e| io_err(&old, e))?;
        crate::files::sync_dir(dir).map_err(|e| io_err(dir, e))?;
    }
    Ok(())
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

/// A version-1 (JSON) snapshot's generation and rules.
pub(super) fn parse_snapshot(text: &str) -> Result<(u64, Vec<Rule>), Damage> {
    let doc: SnapshotDoc = serde_json::from_str(text).map_err(|e| Damage::Json(e.to_string()))?;
    if doc.format != FORMAT || doc.version != VERSION {
        return Err(Damage::NotJsonSnapshot {
            format: doc.format.to_string(),
            version: doc.version,
        });
    }
    // Written compactly (no whitespace), so the list's bytes on disk are
    // its serialization: what the checksum covers.
    if u64::from(crc32fast::hash(doc.rules.get().as_bytes())) != doc.crc32 {
        return Err(Damage::SnapshotChecksum);
    }
    let rules =
        cfdp_rules::parse_rule_list(doc.rules.get()).map_err(|e| Damage::RuleList(Box::new(e)))?;
    Ok((doc.generation, rules))
}

/// Reads a binary snapshot as a stream (the file is never held whole):
/// header, records decoded as they come, CRC checked at the end.
pub(super) fn read_binary_snapshot(path: &Path) -> Result<(u64, Vec<Rule>), JournalError> {
    use cfdp_rules::binary::{decode, decode_wide, RECORD};
    use std::io::Read;
    let bad = |what: Damage| bad(path, what);
    let f = crate::files::open_read(path).map_err(|e| io_err(path, e))?;
    let mut r = BufReader::with_capacity(1 << 20, f);
    let mut crc = crc32fast::Hasher::new();
    let (record, generation, count) = read_header(&mut r, &mut crc, path)?;
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
                Err(e) => return Err(io_err(path, e)),
            }
        }
        if got < buf.len() {
            return Err(bad(Damage::CutShort {
                present: count - left + (got / record) as u64,
                count,
            }));
        }
        crc.update(buf);
        for (j, rec) in buf.chunks_exact(record).enumerate() {
            let rule = if record == RECORD {
                decode(rec.try_into().expect("a whole record"))
            } else {
                decode_wide(rec.try_into().expect("a whole record"))
            };
            let i = count - left + j as u64;
            rules.push(rule.map_err(|source| {
                bad(Damage::Rule {
                    number: i + 1,
                    source: Box::new(source),
                })
            })?);
        }
        left -= n as u64;
    }
    let mut tail = Vec::new();
    r.read_to_end(&mut tail).map_err(|e| io_err(path, e))?;
    if tail.len() != 4 {
        return Err(bad(Damage::Tail(tail.len())));
    }
    if u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")) != crc.finalize() {
        return Err(bad(Damage::SnapshotChecksum));
    }
    Ok((generation, rules))
}

/// A binary snapshot's header, checked: the record size, the generation
/// and the rule count. The header's bytes go into `crc`.
fn read_header(
    r: &mut impl std::io::Read,
    crc: &mut crc32fast::Hasher,
    path: &Path,
) -> Result<(usize, u64, u64), JournalError> {
    use cfdp_rules::binary::{RECORD, RECORD_WIDE};
    let mut head = [0u8; HEADER];
    r.read_exact(&mut head).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            bad(path, Damage::HeaderCut)
        } else {
            io_err(path, e)
        }
    })?;
    crc.update(&head);
    let word = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
    let long = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().expect("8 bytes"));
    // Version 2: 48-byte records; version 3: 64-byte records (a set with
    // multi-field rules).
    let record = match (&head[..8] == MAGIC, word(8), word(12) as usize) {
        (true, BIN_VERSION, RECORD) => RECORD,
        (true, BIN_VERSION_WIDE, RECORD_WIDE) => RECORD_WIDE,
        (magic, version, record) => {
            return Err(bad(
                path,
                Damage::NotBinarySnapshot {
                    magic,
                    version,
                    record,
                },
            ))
        }
    };
    Ok((record, long(16), long(24)))
}

fn bad(path: &Path, what: Damage) -> JournalError {
    JournalError::BadSnapshot {
        path: path.to_path_buf(),
        what,
    }
}
