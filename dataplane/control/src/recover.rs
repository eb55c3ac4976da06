//! Crash recovery: the rule store a node starts with, from its state
//! directory (the last snapshot and the journal's records after it) or,
//! when the directory holds nothing yet or there is none, from the
//! fallback rule file (`rules.file`). Lives beside the journal it reads, so
//! that each branch is tested here (`recover::tests`), not only end to end
//! through `cfdp run`.
//!
//! The branches:
//! * no state directory: the fallback rules, no journal;
//! * an empty state directory: the fallback rules, saved at once as its
//!   first snapshot (a crash right after start restores them);
//! * a snapshot and journal records: the snapshot's rules at its
//!   generation, then each record applied as the batch it was — every
//!   update must apply and land on its recorded generation, else recovery
//!   refuses ([`RecoverError`]) rather than start with a different rule
//!   set; a last record cut by a crash (no newline) is dropped and said
//!   ([`Recovered::dropped_tail`]); the fallback rules are not read.
//!
//! The connection table, where a graceful stop saved it, comes back
//! through [`connections`] (and a crash mark says it was lost).

use std::path::Path;
use std::sync::Arc;

use cfdp_engine::LiveStats;
use cfdp_rules::{Atomicity, Batch, Code, Rule, RuleError, Update};

use crate::journal::{self, Journal, JournalError};
use crate::store::{ApplyError, RuleStore, StoreConfig, StoreError};

/// Where the rule set came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// No state directory: the fallback rules.
    Fallback,
    /// The state directory was empty: the fallback rules, saved there.
    SavedFallback,
    /// The state directory's snapshot (at `snapshot_generation`) and
    /// `records` journal records after it.
    Restored {
        snapshot_generation: u64,
        records: usize,
    },
}

/// A recovered node's rule store and the journal to append to.
pub struct Recovered {
    pub store: RuleStore,
    /// `None` without a state directory.
    pub journal: Option<Journal>,
    pub source: Source,
    /// A last journal record cut by a crash, dropped: what it was.
    pub dropped_tail: Option<String>,
}

/// Why recovery refused (the messages `cfdp run` prints).
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The fallback rule file could not be read.
    #[error("{file}")]
    RuleFile {
        file: String,
        #[source]
        source: RuleError,
    },
    #[error("state_dir")]
    State(#[source] JournalError),
    /// The fallback rules do not make a store.
    #[error("rule store")]
    Store(#[source] StoreError),
    #[error("state_dir snapshot does not load")]
    Snapshot(#[source] StoreError),
    #[error("journal record {generation}")]
    Replay {
        generation: u64,
        #[source]
        source: ApplyError,
    },
    #[error(
        "journal record {generation}, update {}: {code:?}: {message} (does the configuration \
         still fit the saved rules?)",
        index + 1
    )]
    ReplayUpdate {
        generation: u64,
        index: usize,
        code: Code,
        message: String,
    },
    #[error("journal record {generation} restored as generation {got}")]
    ReplayGeneration { generation: u64, got: u64 },
}

/// The fallback rules: those of `file`, none without one.
fn fallback_rules(file: Option<&Path>) -> Result<Vec<Rule>, RecoverError> {
    let Some(file) = file else {
        return Ok(Vec::new());
    };
    cfdp_rules::read_rule_file(file).map_err(|source| RecoverError::RuleFile {
        file: file.display().to_string(),
        source,
    })
}

/// The rule store to start with (see the module docs): from `dir`, the
/// state directory, or the fallback `rules_file` (read only where the
/// state directory does not decide; no file: no rules).
pub fn recover(
    dir: Option<&Path>,
    rules_file: Option<&Path>,
    cfg: StoreConfig,
    stats: Arc<LiveStats>,
) -> Result<Recovered, RecoverError> {
    let Some(dir) = dir else {
        let rules = fallback_rules(rules_file)?;
        let store =
            RuleStore::with_rules_compiled_later(cfg, stats, rules).map_err(RecoverError::Store)?;
        return Ok(Recovered {
            store,
            journal: None,
            source: Source::Fallback,
            dropped_tail: None,
        });
    };
    let mut restored = journal::restore(dir).map_err(RecoverError::State)?;
    let dropped_tail = restored.dropped_tail.take();
    if restored.is_empty() {
        let rules = fallback_rules(rules_file)?;
        let store =
            RuleStore::with_rules_compiled_later(cfg, stats, rules).map_err(RecoverError::Store)?;
        let mut j = Journal::open(dir, 0).map_err(RecoverError::State)?;
        j.compact(store.generation(), &store.rules())
            .map_err(RecoverError::State)?;
        return Ok(Recovered {
            store,
            journal: Some(j),
            source: Source::SavedFallback,
            dropped_tail,
        });
    }
    let mut store =
        RuleStore::with_rules_compiled_later(cfg, stats, std::mem::take(&mut restored.rules))
            .map_err(RecoverError::Snapshot)?;
    store.set_generation(restored.snapshot_generation);
    replay(&mut store, &restored.records)?;
    let journal = Journal::open(dir, restored.records.len() as u64).map_err(RecoverError::State)?;
    Ok(Recovered {
        store,
        journal: Some(journal),
        source: Source::Restored {
            snapshot_generation: restored.snapshot_generation,
            records: restored.records.len(),
        },
        dropped_tail,
    })
}

/// Applies the journal's records after the snapshot, each as the batch it
/// was: every update must apply and land on its recorded generation.
fn replay(store: &mut RuleStore, records: &[(u64, Vec<Update>)]) -> Result<(), RecoverError> {
    for (g, updates) in records {
        let batch = Batch {
            atomicity: Atomicity::RollbackOnError,
            expected_generation: None,
            updates: updates.iter().map(|u| Ok(*u)).collect(),
        };
        let r = store
            .apply(&batch, |_, _| Ok(()))
            .map_err(|source| RecoverError::Replay {
                generation: *g,
                source,
            })?;
        if let Some((i, res)) = r
            .results
            .iter()
            .enumerate()
            .find(|(_, r)| r.code != Code::Ok)
        {
            return Err(RecoverError::ReplayUpdate {
                generation: *g,
                index: i,
                code: res.code,
                message: res.message.clone(),
            });
        }
        if store.generation() != *g {
            return Err(RecoverError::ReplayGeneration {
                generation: *g,
                got: store.generation(),
            });
        }
    }
    Ok(())
}

pub mod connections;

#[cfg(test)]
mod tests;
