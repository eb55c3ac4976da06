//! The journal's line format: `CRC32HEX {"generation": G, "updates":
//! [...]}` and a newline, one line per applied batch.

use cfdp_rules::{parse_update, Update};
use serde_json::Value;

use super::Damage;

/// The longest journal record restore reads (a record is one batch's
/// updates, bounded by the socket's `max_line_bytes`, 16 MiB by default;
/// this leaves room for raised limits and refuses a damaged or planted
/// file before it takes the memory).
pub const MAX_RECORD_BYTES: usize = 1 << 30;

/// One record line of `body`.
pub(super) fn crc_line(body: &str) -> String {
    format!("{:08x} {body}\n", crc32fast::hash(body.as_bytes()))
}

/// A record line, without its newline: its generation and updates.
pub(super) fn parse_record(line: &[u8]) -> Result<(u64, Vec<Update>), Damage> {
    let text = std::str::from_utf8(line).map_err(|_| Damage::NotUtf8)?;
    let (crc, body) = text.split_once(' ').ok_or(Damage::NoChecksum)?;
    let crc = u32::from_str_radix(crc, 16).map_err(|_| Damage::BadChecksumField)?;
    if crc32fast::hash(body.as_bytes()) != crc {
        return Err(Damage::RecordChecksum);
    }
    let v: Value = serde_json::from_str(body).map_err(|e| Damage::Json(e.to_string()))?;
    let g = v["generation"]
        .as_u64()
        .ok_or(Damage::Missing("generation"))?;
    let updates = v["updates"]
        .as_array()
        .ok_or(Damage::Missing("updates"))?
        .iter()
        .enumerate()
        .map(|(index, u)| {
            parse_update(u).map_err(|source| Damage::Update {
                index,
                source: Box::new(source),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((g, updates))
}
