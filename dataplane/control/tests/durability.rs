//! A response means the batch is durable: through the real control thread
//! (`ControlPlane::run`) and a real journal, the record is written, then
//! synced, and only then published to the workers and answered. The
//! journal reports its write and its sync; at each, the test reads the
//! generation the workers see and whether the reply has been sent.
//!
//! Fails if the sync is skipped or deferred (no `Synced` event before the
//! reply), or if the publish moves before the journal (the workers already
//! see the new generation at the write or the sync).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cfdp_control::journal::{restore, Journal, JournalEvent};
use cfdp_control::plane::{ControlPlane, PlaneConfig};
use cfdp_control::{wire, ControlHandle, RuleStore, StoreConfig};
use cfdp_engine::LiveStats;
use cfdp_rules::protocol::parse_request_line;

#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// A journal event and the generation the workers saw at that moment.
    Journal(JournalEvent, u64),
    /// The client got its answer; the generation the workers saw then.
    Replied(u64),
}

#[test]
fn the_journal_is_synced_before_the_publish_and_the_reply() {
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-durability-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
    assert!(restore(dir).unwrap().is_empty());
    let cfg = StoreConfig::default();
    let stats = Arc::new(LiveStats::new(1, cfg.max_rules));
    let store = RuleStore::new(cfg, stats).unwrap();
    let readers = store.readers();
    let generation = move || readers.handle().enter().map_or(0, |t| t.generation());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut journal = Journal::open(dir, 0).unwrap();
    {
        let (seen, generation) = (Arc::clone(&seen), generation.clone());
        journal.observe(move |e| seen.lock().unwrap().push(Seen::Journal(e, generation())));
    }
    let mut plane = ControlPlane::new(store, Some(journal), PlaneConfig::default());
    let (jobs, rx) = crossbeam::channel::unbounded();
    let handle = ControlHandle::new(jobs.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let control = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || plane.run(rx, &stop))
    };
    for g in 1..=3u64 {
        let line = format!(
            r#"{{"id": {g}, "method": "apply", "params": {{"updates": [{{"op": "insert", "rule": {{"id": {g}, "match": {{"src_prefix": "10.{g}.0.0/16"}}, "action": "drop"}}}}]}}}}"#
        );
        // The socket's way in: the line's own text is what is journaled.
        let request = parse_request_line(line.as_bytes(), 1024).unwrap();
        let command = wire::command(request, 1024, 0).unwrap();
        let report = match handle.call(command).unwrap() {
            cfdp_control::api::Response::Batch(r) => r,
            other => panic!("not a batch report: {other:?}"),
        };
        assert!(report.applied, "{report:?}");
        seen.lock().unwrap().push(Seen::Replied(generation()));
        let mut s = seen.lock().unwrap();
        assert_eq!(
            *s,
            [
                Seen::Journal(JournalEvent::Written, g - 1),
                Seen::Journal(JournalEvent::Synced, g - 1),
                Seen::Replied(g),
            ],
            "batch {g}: write, sync, then publish and reply"
        );
        s.clear();
    }
    stop.store(true, Ordering::Relaxed);
    drop((jobs, handle));
    control.join().unwrap();
    // And what was answered is what a restart restores.
    assert_eq!(restore(dir).unwrap().records.len(), 3);
}
