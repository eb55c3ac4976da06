//! The table across a graceful restart: `cfdp run` writes every entry to a
//! file in its `state_dir` when it stops on a signal and reads them back at
//! its next start (then removes the file: a table is restored once).
//!
//! Format: a 16-byte header (magic `CFDPCT02`, the entry count as u32, a
//! CRC32 of the records as u32, little-endian), then one fixed-size record
//! per entry. Fixed records and a checksum, not JSON: a stateful rule's
//! action has no serde form of its own (it is written as an action and
//! `track`), and a damaged file must be refused whole, not half-read.

use cfdp_rules::{Action, Allowing, FlowKey};

use crate::state::State;
use crate::table::{Acct, ConnInfo};

/// `02`: the accounting flag (a table of `01`, before accounting was
/// optional, is refused as not a table: one restart loses it).
const MAGIC: &[u8; 8] = b"CFDPCT02";
const HEADER: usize = 16;
/// v6, proto, src, dst, sport, dport, state, fin, action, port, slot,
/// last, whether accounting follows, opened, packets ×2, bytes ×2 (zero
/// without accounting).
pub const RECORD: usize = 1 + 1 + 16 + 16 + 2 + 2 + 1 + 1 + 1 + 2 + 4 + 8 + 1 + 8 + 16 + 16;

/// Why a saved table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PersistError {
    #[error("not a connection table (bad magic or a short header)")]
    NotATable,
    #[error("{records} records announced, {bytes} bytes of records found")]
    Length { records: u32, bytes: usize },
    #[error("checksum mismatch: the file is damaged")]
    Checksum,
    #[error("record {index}: {what}")]
    Record { index: usize, what: &'static str },
}

fn action_code(a: Action) -> Option<(u8, u16)> {
    match a {
        Action::Track(Allowing::Allow) => Some((1, 0)),
        Action::Track(Allowing::Count) => Some((2, 0)),
        Action::Track(Allowing::Redirect(p)) => Some((3, p)),
        _ => None,
    }
}

/// The file's bytes for `entries` (only stateful actions are saved: an
/// entry holds no other).
pub fn encode(entries: &[ConnInfo]) -> Vec<u8> {
    let mut records = Vec::with_capacity(entries.len() * RECORD);
    let mut count = 0u32;
    for e in entries {
        let Some((code, port)) = action_code(e.action) else {
            continue;
        };
        let k = &e.orig;
        records.push(u8::from(k.v6));
        records.push(k.proto);
        records.extend_from_slice(&k.src);
        records.extend_from_slice(&k.dst);
        records.extend_from_slice(&k.sport.to_le_bytes());
        records.extend_from_slice(&k.dport.to_le_bytes());
        records.push(e.state.index() as u8);
        records.push(e.fin);
        records.push(code);
        records.extend_from_slice(&port.to_le_bytes());
        records.extend_from_slice(&e.slot.to_le_bytes());
        records.extend_from_slice(&e.last_ns.to_le_bytes());
        records.push(u8::from(e.acct.is_some()));
        let a = e.acct.unwrap_or_default();
        records.extend_from_slice(&a.opened_ns.to_le_bytes());
        for v in a.packets.iter().chain(&a.bytes) {
            records.extend_from_slice(&v.to_le_bytes());
        }
        count += 1;
    }
    let mut out = Vec::with_capacity(HEADER + records.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&records).to_le_bytes());
    out.extend_from_slice(&records);
    out
}

/// The entries of a file [`encode`] wrote, or why it is refused.
pub fn decode(b: &[u8]) -> Result<Vec<ConnInfo>, PersistError> {
    if b.len() < HEADER || &b[..8] != MAGIC {
        return Err(PersistError::NotATable);
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let (count, crc) = (u32_at(8), u32_at(12));
    let records = &b[HEADER..];
    if records.len() != count as usize * RECORD {
        return Err(PersistError::Length {
            records: count,
            bytes: records.len(),
        });
    }
    if crc32fast::hash(records) != crc {
        return Err(PersistError::Checksum);
    }
    records
        .chunks_exact(RECORD)
        .enumerate()
        .map(|(index, r)| record(r).map_err(|what| PersistError::Record { index, what }))
        .collect()
}

fn record(r: &[u8]) -> Result<ConnInfo, &'static str> {
    let mut at = 0;
    let mut take = |n: usize| {
        let s = &r[at..at + n];
        at += n;
        s
    };
    let v6 = match take(1)[0] {
        0 => false,
        1 => true,
        _ => return Err("family neither IPv4 nor IPv6"),
    };
    let proto = take(1)[0];
    let src: [u8; 16] = take(16).try_into().expect("16 bytes");
    let dst: [u8; 16] = take(16).try_into().expect("16 bytes");
    let u16_of = |s: &[u8]| u16::from_le_bytes([s[0], s[1]]);
    let u64_of = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let sport = u16_of(take(2));
    let dport = u16_of(take(2));
    let state = *State::ALL
        .get(usize::from(take(1)[0]))
        .ok_or("unknown state")?;
    let fin = take(1)[0];
    if fin > 3 {
        return Err("FIN bits beyond both directions");
    }
    let code = take(1)[0];
    let port = u16_of(take(2));
    let action = match (code, port) {
        (1, 0) => Action::Track(Allowing::Allow),
        (2, 0) => Action::Track(Allowing::Count),
        (3, p) => Action::Track(Allowing::Redirect(p)),
        _ => return Err("not a stateful action"),
    };
    let slot = u32::from_le_bytes(take(4).try_into().expect("4 bytes"));
    let last_ns = u64_of(take(8));
    let has_acct = match take(1)[0] {
        0 => false,
        1 => true,
        _ => return Err("accounting flag neither 0 nor 1"),
    };
    let acct = Acct {
        opened_ns: u64_of(take(8)),
        packets: [u64_of(take(8)), u64_of(take(8))],
        bytes: [u64_of(take(8)), u64_of(take(8))],
    };
    if !v6 && (src[4..].iter().chain(&dst[4..]).any(|&x| x != 0)) {
        return Err("IPv4 address with bytes past its fourth");
    }
    Ok(ConnInfo {
        orig: FlowKey {
            v6,
            src,
            dst,
            proto,
            sport,
            dport,
        },
        state,
        fin,
        slot,
        action,
        last_ns,
        acct: has_acct.then_some(acct),
    })
}
