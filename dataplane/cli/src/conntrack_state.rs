//! The connection table across a graceful restart, in `control.state_dir`
//! beside the journal: `cfdp run` saves it when it stops on a signal
//! (`conntrack.bin`, written to a temporary and renamed) and restores it at
//! its next start, then removes the file. While it runs, `conntrack.running`
//! marks the table unsaved: found at a start, it says the last run did not
//! stop cleanly (a crash or SIGKILL), and its connections are lost.
//!
//! A rule's counter slot may differ after a restart: the file names each
//! connection's rule by id, mapped back to its slot when restored.

use std::io::Write;
use std::path::Path;

use cfdp_conntrack::{persist, ConnTable};
use cfdp_control::RuleStore;

use crate::error::RunError;

const FILE: &str = "conntrack.bin";
const TEMP: &str = "conntrack.bin.tmp";
const RUNNING: &str = "conntrack.running";
/// In the saved file, a connection whose rule is gone.
const NO_RULE: u32 = u32::MAX;

/// At start, before the workers: restores what the last graceful stop
/// saved, or says it was lost; then marks this run as running.
pub fn restore(dir: &Path, table: &ConnTable, store: &RuleStore) -> Result<(), RunError> {
    let (file, running) = (dir.join(FILE), dir.join(RUNNING));
    if running.exists() {
        eprintln!(
            "cfdp: the last run did not stop cleanly (a crash or SIGKILL): its tracked \
             connections are lost; stateful rules start with an empty connection table"
        );
    } else if file.exists() {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut cfdp_control::files::open_read(&file).map_err(RunError::io("conntrack.bin"))?,
            &mut bytes,
        )
        .map_err(RunError::io("conntrack.bin"))?;
        match persist::decode(&bytes) {
            Ok(saved) => {
                let taken = table.import(&saved, |s| match s.slot {
                    NO_RULE => Some(NO_RULE),
                    id => Some(store.slot_of(id).unwrap_or(NO_RULE)),
                });
                eprintln!(
                    "cfdp: restored {taken} of {} tracked connections from {}",
                    saved.len(),
                    file.display()
                );
            }
            Err(e) => eprintln!(
                "cfdp: {}: {e}: tracked connections start empty",
                file.display()
            ),
        }
    }
    let _ = std::fs::remove_file(&file);
    cfdp_control::files::create_temp(&running).map_err(RunError::io("conntrack.running"))?;
    Ok(())
}

/// At a graceful stop, the workers stopped: saves the table and clears
/// the running mark. Returns the connections saved.
pub fn save(dir: &Path, table: &ConnTable, store: &RuleStore) -> Result<usize, RunError> {
    let mut saved = table.export();
    for s in &mut saved {
        // The rule by id (its slot may change); none if the slot now holds
        // another rule or nothing.
        s.slot = store
            .rule_at_slot(s.slot)
            .filter(|r| r.action == s.action)
            .map_or(NO_RULE, |r| r.id);
    }
    let bytes = persist::encode(&saved);
    let temp = dir.join(TEMP);
    let mut f = cfdp_control::files::create_temp(&temp).map_err(RunError::io("conntrack.bin"))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&temp, dir.join(FILE)))
        .and_then(|()| cfdp_control::files::sync_dir(dir))
        .map_err(RunError::io("conntrack.bin"))?;
    std::fs::remove_file(dir.join(RUNNING)).map_err(RunError::io("conntrack.running"))?;
    Ok(saved.len())
}
