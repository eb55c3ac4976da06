//! The connection table across a graceful restart, in `control.state_dir`
//! beside the journal (moved here from `cfdp run`, where only end-to-end
//! tests reached it): `cfdp run` saves it when it stops on a signal
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

use crate::files;
use crate::store::RuleStore;

/// The saved table, in the state directory.
pub const FILE: &str = "conntrack.bin";
const TEMP: &str = "conntrack.bin.tmp";
const RUNNING: &str = "conntrack.running";
/// In the saved file, a connection whose rule is gone.
const NO_RULE: u32 = u32::MAX;

/// What the start found of the last run's connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Connections {
    /// Nothing saved (a first start, or stateless rules only).
    Nothing,
    /// The last run did not stop cleanly (a crash or SIGKILL): its
    /// connections are lost.
    LostInCrash,
    /// `taken` of the `saved` connections restored (the rest: no room).
    Restored { taken: usize, saved: usize },
    /// The saved file did not decode (its error): the table starts empty.
    Damaged(String),
}

/// A state file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct StateFileError {
    pub what: &'static str,
    #[source]
    pub source: std::io::Error,
}

fn file_err(what: &'static str) -> impl FnOnce(std::io::Error) -> StateFileError {
    move |source| StateFileError { what, source }
}

/// At start, before the workers: restores what the last graceful stop
/// saved into `table`, or finds it lost; then marks this run as running.
pub fn restore(
    dir: &Path,
    table: &ConnTable,
    store: &RuleStore,
) -> Result<Connections, StateFileError> {
    let (file, running) = (dir.join(FILE), dir.join(RUNNING));
    let found = if running.exists() {
        Connections::LostInCrash
    } else if file.exists() {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut files::open_read(&file).map_err(file_err("conntrack.bin"))?,
            &mut bytes,
        )
        .map_err(file_err("conntrack.bin"))?;
        match persist::decode(&bytes) {
            Ok(saved) => {
                let taken = table.import(&saved, |s| match s.slot {
                    NO_RULE => Some(NO_RULE),
                    id => Some(store.slot_of(id).unwrap_or(NO_RULE)),
                });
                Connections::Restored {
                    taken,
                    saved: saved.len(),
                }
            }
            Err(e) => Connections::Damaged(e.to_string()),
        }
    } else {
        Connections::Nothing
    };
    let _ = std::fs::remove_file(&file);
    files::create_temp(&running).map_err(file_err("conntrack.running"))?;
    Ok(found)
}

/// At a graceful stop, the workers stopped: saves the table and clears
/// the running mark. Returns the connections saved.
pub fn save(dir: &Path, table: &ConnTable, store: &RuleStore) -> Result<usize, StateFileError> {
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
    let mut f = files::create_temp(&temp).map_err(file_err("conntrack.bin"))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&temp, dir.join(FILE)))
        .and_then(|()| files::sync_dir(dir))
        .map_err(file_err("conntrack.bin"))?;
    std::fs::remove_file(dir.join(RUNNING)).map_err(file_err("conntrack.running"))?;
    Ok(saved.len())
}
