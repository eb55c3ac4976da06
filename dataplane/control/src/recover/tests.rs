//! Each branch of [`recover`], on a real state directory.

use std::path::Path;
use std::sync::Arc;

use cfdp_engine::LiveStats;
use cfdp_rules::{Atomicity, Batch, Code, Rule, Update};

use super::*;
use crate::journal::Journal;
use crate::store::StoreConfig;

fn rules(json: &str) -> Vec<Rule> {
    cfdp_rules::parse_rule_list(json).unwrap()
}

/// The fallback rules the tests use.
const TWO_RULES: &str = r#"[{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"},
    {"id": 2, "match": {"src_prefix": "192.0.2.0/24"}, "action": "allow"}]"#;

fn two_rules() -> Vec<Rule> {
    rules(TWO_RULES)
}

/// The fallback rule file the tests use: [`TWO_RULES`], in `tmp`.
fn rule_file(tmp: &Path) -> std::path::PathBuf {
    let f = tmp.join("rules.json");
    std::fs::write(&f, format!(r#"{{"rules": {TWO_RULES}}}"#)).unwrap();
    f
}

fn go(dir: Option<&Path>, rules_file: Option<&Path>) -> Result<Recovered, RecoverError> {
    let stats = Arc::new(LiveStats::new(1, 1024));
    recover(dir, rules_file, StoreConfig::default(), stats)
}

/// A fallback file that must not be read (the state directory decides):
/// it does not exist, and reading it would refuse the start.
fn unread(tmp: &Path) -> Option<std::path::PathBuf> {
    Some(tmp.join("never-read.json"))
}

/// Applies `updates` to the recovered store as one batch, journaled as
/// `cfdp run` journals it; returns the batch's generation.
fn apply(r: &mut Recovered, updates: Vec<Update>) -> u64 {
    let batch = Batch {
        atomicity: Atomicity::RollbackOnError,
        expected_generation: None,
        updates: updates.into_iter().map(Ok).collect(),
    };
    let j = r.journal.as_mut().expect("a journal");
    let report = r
        .store
        .apply(&batch, |u, g| j.append(g, u))
        .expect("applies");
    assert!(report.results.iter().all(|x| x.code == Code::Ok));
    r.store.generation()
}

fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("cfdp-recover-")
        .tempdir()
        .unwrap()
}

#[test]
fn without_a_state_directory_the_fallback_rules_and_no_journal() {
    let tmp = state_dir();
    let r = go(None, Some(&rule_file(tmp.path()))).unwrap();
    assert_eq!(r.source, Source::Fallback);
    assert_eq!(r.store.len(), 2);
    assert!(r.journal.is_none());
}

#[test]
fn an_empty_state_directory_saves_the_fallback_rules_at_once() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    let r = go(Some(&dir), Some(&rule_file(tmp.path()))).unwrap();
    assert_eq!(r.source, Source::SavedFallback);
    assert_eq!(r.store.len(), 2);
    drop(r);
    // A crash right after start: the saved rules come back, and the
    // fallback is not read again.
    let again = go(Some(&dir), unread(tmp.path()).as_deref()).unwrap();
    assert_eq!(
        again.source,
        Source::Restored {
            snapshot_generation: 0,
            records: 0
        }
    );
    assert_eq!(again.store.rules(), two_rules());
}

#[test]
fn a_snapshot_and_its_journal_records_come_back_in_order() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    let mut r = go(Some(&dir), Some(&rule_file(tmp.path()))).unwrap();
    let added =
        rules(r#"[{"id": 3, "match": {"dst_prefix": "198.51.100.0/24"}, "action": "drop"}]"#);
    let g1 = apply(&mut r, vec![Update::Insert(added[0])]);
    let g2 = apply(&mut r, vec![Update::Delete(1)]);
    let want = r.store.rules();
    drop(r);
    let back = go(Some(&dir), unread(tmp.path()).as_deref()).unwrap();
    assert_eq!(
        back.source,
        Source::Restored {
            snapshot_generation: 0,
            records: 2
        }
    );
    assert_eq!((g1, g2, back.store.generation()), (1, 2, 2));
    assert_eq!(back.store.rules(), want);
    assert!(back.dropped_tail.is_none());
    // The journal reopened for appending after the two records.
    assert_eq!(back.journal.as_ref().map(Journal::records), Some(2));
}

#[test]
fn a_record_cut_by_a_crash_is_dropped_and_said() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    let mut r = go(Some(&dir), Some(&rule_file(tmp.path()))).unwrap();
    apply(&mut r, vec![Update::Delete(2)]);
    drop(r);
    // A second record whose write the crash cut: no newline.
    let journal = dir.join("journal.ndjson");
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text += "0123abcd {\"generation\": 2, \"upd";
    std::fs::write(&journal, text).unwrap();
    let back = go(Some(&dir), unread(tmp.path()).as_deref()).unwrap();
    assert!(back.dropped_tail.is_some());
    assert_eq!(back.store.generation(), 1);
    assert_eq!(back.store.len(), 1);
}

#[test]
fn a_record_that_no_longer_applies_refuses_the_start() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    let r = go(Some(&dir), Some(&rule_file(tmp.path()))).unwrap();
    drop(r);
    // A record (well formed, next generation) deleting a rule the
    // snapshot does not hold: the journal and the snapshot disagree.
    let mut j = Journal::open(&dir, 0).unwrap();
    j.append(1, &[Update::Delete(77)]).unwrap();
    drop(j);
    match go(Some(&dir), unread(tmp.path()).as_deref()) {
        Err(RecoverError::ReplayUpdate {
            generation: 1,
            index: 0,
            code,
            ..
        }) => assert_ne!(code, Code::Ok),
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("recovered a rule set the journal does not describe"),
    }
}

#[test]
fn a_record_that_lands_on_another_generation_refuses_the_start() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    drop(go(Some(&dir), Some(&rule_file(tmp.path()))).unwrap());
    // Two updates in one record move the store one generation (a batch
    // is one generation); a record claiming the next generation must
    // land there, and one claiming a later one (written by hand) not.
    let mut j = Journal::open(&dir, 0).unwrap();
    let more = rules(r#"[{"id": 9, "match": {"dst_prefix": "203.0.113.0/24"}, "action": "drop"}]"#);
    j.append(1, &[Update::Insert(more[0])]).unwrap();
    j.append(2, &[]).unwrap();
    drop(j);
    match go(Some(&dir), unread(tmp.path()).as_deref()) {
        Err(RecoverError::ReplayGeneration { generation: 2, got }) => assert_eq!(got, 1),
        Err(e) => panic!("another error: {e}"),
        Ok(r) => panic!(
            "recovered at generation {} from a record that did not move it",
            r.store.generation()
        ),
    }
}

#[test]
fn a_fallback_file_that_cannot_be_read_refuses_with_its_name() {
    let tmp = state_dir();
    let dir = tmp.path().join("state");
    let missing = tmp.path().join("missing.json");
    let e = go(Some(&dir), Some(&missing)).err().expect("refused");
    assert!(
        matches!(&e, RecoverError::RuleFile { file, .. } if file.ends_with("missing.json")),
        "{e:?}"
    );
}

// The connection table across a restart (`connections`).

use cfdp_conntrack::table::L4;
use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_rules::{Action, FlowKey};

use super::connections::{self, Connections};

/// A store with one stateful UDP rule (id 5), and a table.
fn tracked() -> (RuleStore, ConnTable) {
    let tmp = state_dir();
    let f = tmp.path().join("rules.json");
    std::fs::write(
        &f,
        r#"{"rules": [{"id": 5, "match": {"src_prefix": "10.0.0.0/8", "proto": "udp"},
             "action": "allow", "track": true}]}"#,
    )
    .unwrap();
    let r = go(None, Some(&f)).unwrap();
    let table = ConnTable::new(
        1024,
        Timeouts::default(),
        cfdp_rules::HashSecret::from_seed(7),
    )
    .unwrap();
    (r.store, table)
}

/// Opens `n` UDP conversations under rule 5.
fn open(store: &RuleStore, table: &ConnTable, n: u8) {
    let slot = store.slot_of(5).expect("rule 5 is in the store");
    let action = store.rule_at_slot(slot).unwrap().action;
    assert!(matches!(action, Action::Track(_)));
    for i in 0..n {
        let k = FlowKey::v4([10, 0, 0, i], [192, 0, 2, 1], 17, 40_000, 53);
        table.open(&k, L4::None, slot, action, 60, 1_000).unwrap();
    }
}

#[test]
fn saved_connections_come_back_at_the_next_start() {
    let tmp = state_dir();
    let dir = tmp.path();
    let (store, table) = tracked();
    assert_eq!(
        connections::restore(dir, &table, &store).unwrap(),
        Connections::Nothing
    );
    open(&store, &table, 3);
    assert_eq!(connections::save(dir, &table, &store).unwrap(), 3);
    let (store2, table2) = tracked();
    assert_eq!(
        connections::restore(dir, &table2, &store2).unwrap(),
        Connections::Restored { taken: 3, saved: 3 }
    );
    assert_eq!(table2.len(), 3);
    // Restored once: the file is gone, and this run is marked running.
    assert!(!dir.join("conntrack.bin").exists());
    assert!(dir.join("conntrack.running").exists());
}

#[test]
fn a_crash_mark_says_the_connections_are_lost() {
    let tmp = state_dir();
    let dir = tmp.path();
    let (store, table) = tracked();
    connections::restore(dir, &table, &store).unwrap();
    open(&store, &table, 2);
    connections::save(dir, &table, &store).unwrap();
    // A run that started (and marked itself) and was killed: its save
    // never came, and the file it found was already taken.
    let (store2, table2) = tracked();
    connections::restore(dir, &table2, &store2).unwrap();
    drop(table2);
    let (store3, table3) = tracked();
    assert_eq!(
        connections::restore(dir, &table3, &store3).unwrap(),
        Connections::LostInCrash
    );
    assert!(table3.is_empty());
}

#[test]
fn a_damaged_file_starts_an_empty_table() {
    let tmp = state_dir();
    let dir = tmp.path();
    std::fs::write(dir.join("conntrack.bin"), b"not a connection table").unwrap();
    let (store, table) = tracked();
    let found = connections::restore(dir, &table, &store).unwrap();
    assert!(matches!(found, Connections::Damaged(_)), "{found:?}");
    assert!(table.is_empty());
    assert!(!dir.join("conntrack.bin").exists());
}
