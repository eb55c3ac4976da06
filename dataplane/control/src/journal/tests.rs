use super::format::{FORMAT, HEADER, SNAPSHOT, SNAPSHOT_JSON, VERSION};
use super::restore::restore_capped;
use super::*;
use cfdp_rules::binary::{DecodeError, Kind};
use cfdp_rules::rule_to_json;
use serde_json::json;
use serde_json::Value;

/// Writes a version-1 (JSON) snapshot as cfdp did before the binary
/// format (the streamed writer's field order).
fn write_json_snapshot(dir: &Path, generation: u64, rules: &[Rule]) -> Result<(), JournalError> {
    let path = dir.join(SNAPSHOT_JSON);
    let mut text = format!(
        "{{\"format\":\"{FORMAT}\",\"version\":{VERSION},\"generation\":{generation},\"rules\":"
    );
    let list = serde_json::to_string(&rules.iter().map(rule_to_json).collect::<Vec<_>>())
        .expect("JSON serializes");
    text += &list;
    text += &format!(",\"crc32\":{}}}\n", crc32fast::hash(list.as_bytes()));
    std::fs::write(&path, text).map_err(|e| io_err(&path, e))?;
    crate::files::sync_dir(dir).map_err(|e| error::io_err(dir, e))
}

/// The state directory is 0700 and every file in it 0600, whatever
/// the umask: the rule set is nobody else's to read.
#[test]
fn state_files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-private-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
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
}

/// A journal line longer than the cap is refused before it is read
/// whole.
#[test]
fn overlong_records_are_refused() {
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-longrec-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
    std::fs::write(dir.join(JOURNAL), format!("{}\n", "x".repeat(1000))).unwrap();
    let e = restore_capped(dir, 100).unwrap_err();
    assert!(bad_record(&e, 1, &Damage::Overlong { max: 100 }), "{e}");
}

/// Whether `e` is a damaged record at `line` for reason `why`.
fn bad_record(e: &JournalError, line: u64, why: &Damage) -> bool {
    matches!(e, JournalError::BadRecord { line: l, what, .. }
        if *l == line && what == why)
}

/// A scratch directory (removed on drop) and the state directory in it
/// (not created: restore and open create it).
fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::Builder::new()
        .prefix(&format!("cfdp-journal-{name}-"))
        .tempdir()
        .unwrap();
    let d = t.path().join("state");
    (t, d)
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
    let (_tmp, d) = tmp("rt");
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
    let (_tmp, d) = tmp("dmg");
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
    assert!(bad_record(&e, 1, &Damage::RecordChecksum), "{e}");
    // A damaged snapshot: a changed address, a cut file, extra bytes,
    // a foreign header, a rule no rule file could express.
    std::fs::write(&path, &good).unwrap();
    write_snapshot(&d, 0, &[rule(5), rule(6)]).unwrap();
    let snap = d.join(SNAPSHOT);
    let bytes = std::fs::read(&snap).unwrap();
    let damaged = |f: &dyn Fn(&mut Vec<u8>), want: &dyn Fn(&Damage) -> bool| {
        let mut b = bytes.clone();
        f(&mut b);
        std::fs::write(&snap, &b).unwrap();
        let e = restore(&d).unwrap_err();
        assert!(
            matches!(&e, JournalError::BadSnapshot { path, what }
                if path.ends_with(SNAPSHOT) && want(what)),
            "{e}"
        );
    };
    // Rule 6's address 10.6.0.0 → 10.7.0.0 (byte 15 of its record).
    damaged(&|b| b[HEADER + 48 + 15] = 7, &|w| {
        *w == Damage::SnapshotChecksum
    });
    damaged(&|b| b.truncate(HEADER + 48 + 10), &|w| {
        *w == Damage::CutShort {
            present: 1,
            count: 2,
        }
    });
    damaged(&|b| b.truncate(b.len() - 1), &|w| *w == Damage::Tail(3));
    damaged(&|b| b.push(0), &|w| *w == Damage::Tail(5));
    damaged(&|b| b.truncate(HEADER - 1), &|w| *w == Damage::HeaderCut);
    damaged(&|b| b[..8].copy_from_slice(b"CFDPSNAQ"), &|w| {
        matches!(w, Damage::NotBinarySnapshot { magic: false, .. })
    });
    damaged(&|b| b[8] = 3, &|w| {
        *w == Damage::NotBinarySnapshot {
            magic: true,
            version: 3,
            record: 48,
        }
    });
    // A host bit set in rule 1's /16 (checksum made to match): refused
    // by the rule check, not loaded.
    damaged(
        &|b| {
            b[HEADER + 17] = 1;
            let n = b.len() - 4;
            let c = crc32fast::hash(&b[..n]);
            b[n..].copy_from_slice(&c.to_le_bytes());
        },
        &|w| {
            let Damage::Rule { number: 1, source } = w else {
                return false;
            };
            matches!(&**source, DecodeError::Prefix {
                kind: Kind::Prefix,
                source: cfdp_rules::PrefixError::HostBits { given, .. },
                ..
            } if given == "10.5.0.1/16")
        },
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
    let (_tmp, d) = tmp("text");
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
    assert!(bad_record(&e, 2, &Damage::RecordChecksum), "{e}");
    std::fs::remove_dir_all(&d).ok();
}

/// Version-1 (JSON) snapshots — of the tree writer (one JSON tree,
/// keys sorted) and of the streamed writer — still load when there is no
/// binary snapshot; the binary one that replaces them holds the same
/// rules, and the JSON file is removed.
#[test]
fn json_snapshots_still_load_and_are_replaced() {
    let (_tmp, d) = tmp("old");
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
            if path.ends_with(SNAPSHOT_JSON)
                && matches!(what, Damage::NotJsonSnapshot { version: 9, .. })),
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
    let (_tmp, d) = tmp("gap");
    let mut j = Journal::open(&d, 0).unwrap();
    j.append(1, &[Update::Insert(rule(1))]).unwrap();
    j.append(3, &[Update::Insert(rule(3))]).unwrap();
    let e = restore(&d).unwrap_err();
    assert!(
        bad_record(
            &e,
            2,
            &Damage::Gap {
                got: 3,
                expected: 2
            }
        ),
        "{e}"
    );
    std::fs::remove_dir_all(&d).ok();
}
