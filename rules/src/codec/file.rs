//! Rule files and rule lists, parsed as a stream and in parallel.
//!
//! A rule file (`{"rules": [...]}`) or a bare rule list (a snapshot's) can
//! hold ten million rules (1.5 GB of JSON). It is never one JSON tree (that
//! tree cost about 2 KB a rule): the list is scanned element by element
//! into borrowed raw slices of the text, which are handed in chunks to one
//! parsing thread per core; each element becomes a small JSON value only
//! for as long as `parse_rule` validates it. Chunks come back in order, so
//! the result and the error (the first problem in document order, naming
//! the rule's position, id and field) are what a sequential parse gives.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam::channel;
use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::rule::{Rule, RuleError};

/// Rules per chunk handed to a parsing thread.
const CHUNK: usize = 16 * 1024;

/// Parses a rule file (`{"rules": [...]}`) into validated rules. The whole
/// file is checked; the first problem in document order is returned.
pub fn parse_rule_file(text: &str) -> Result<Vec<Rule>, RuleError> {
    parse_with(text, FileSeed(ListSeed::default()))
        .and_then(|r| r.ok_or_else(|| RuleError::new(None, None, "rules", "missing or not a list")))
}

/// Parses a bare rule list (`[...]`, as in a snapshot) like
/// [`parse_rule_file`].
pub fn parse_rule_list(text: &str) -> Result<Vec<Rule>, RuleError> {
    parse_with(text, ListSeed::default())
}

/// Runs a seed over the whole text; a rule's own problem (recorded by the
/// list seed) wins over the serde error it was carried up as.
fn parse_with<'de, S>(text: &'de str, seed: S) -> Result<S::Value, RuleError>
where
    S: DeserializeSeed<'de> + Found,
{
    let found = seed.found();
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = seed.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    let first = found
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    match (parsed, first) {
        (_, Some(e)) => Err(e),
        (Ok(v), None) => Ok(v),
        (Err(e), None) if e.is_data() => Err(RuleError::new(None, None, "", e.to_string())),
        (Err(e), None) => Err(RuleError::new(
            None,
            None,
            "",
            format!("not valid JSON: {e}"),
        )),
    }
}

type FoundCell = std::sync::Arc<std::sync::Mutex<Option<RuleError>>>;

trait Found {
    fn found(&self) -> FoundCell;
}

/// The top level of a rule file: an object whose only field is `rules`.
struct FileSeed(ListSeed);

impl Found for FileSeed {
    fn found(&self) -> FoundCell {
        self.0.found()
    }
}

impl<'de> DeserializeSeed<'de> for FileSeed {
    type Value = Option<Vec<Rule>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FileSeed {
    type Value = Option<Vec<Rule>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a rule file: an object {\"rules\": [...]}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut rules = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != "rules" || rules.is_some() {
                let msg = if key == "rules" {
                    "duplicate field"
                } else {
                    "unknown field (expected only \"rules\")"
                };
                self.0.record(RuleError::new(None, None, &key, msg));
                return Err(A::Error::custom(msg));
            }
            rules = Some(map.next_value_seed(self.0.clone())?);
        }
        Ok(rules)
    }
}

/// The rule list: scanned here, parsed by a thread per core.
#[derive(Clone, Default)]
struct ListSeed {
    found: FoundCell,
}

impl ListSeed {
    fn record(&self, e: RuleError) {
        *self
            .found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
    }
}

impl Found for ListSeed {
    fn found(&self) -> FoundCell {
        std::sync::Arc::clone(&self.found)
    }
}

impl<'de> DeserializeSeed<'de> for ListSeed {
    type Value = Vec<Rule>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

/// One chunk's outcome: its rules, or the first bad rule's error.
type ChunkResult = (usize, Result<Vec<Rule>, RuleError>);

/// Parses one chunk of raw rules starting at list position `first`.
fn parse_chunk(first: usize, raw: &[&RawValue]) -> Result<Vec<Rule>, RuleError> {
    raw.iter()
        .enumerate()
        .map(|(i, r)| crate::fast::parse_rule_text(r.get(), Some(first + i)))
        .collect()
}

impl<'de> Visitor<'de> for ListSeed {
    type Value = Vec<Rule>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of rules")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        // The first chunk with a bad rule: later chunks need no parsing.
        let first_bad = AtomicUsize::new(usize::MAX);
        let (work_tx, work_rx) = channel::bounded::<(usize, Vec<&'de RawValue>)>(2 * threads);
        let (done_tx, done_rx) = channel::unbounded::<ChunkResult>();
        let worker = |done_tx: channel::Sender<ChunkResult>| {
            for (c, raw) in &work_rx {
                if c > first_bad.load(Ordering::Relaxed) {
                    continue;
                }
                let r = parse_chunk(c * CHUNK, &raw);
                if r.is_err() {
                    first_bad.fetch_min(c, Ordering::Relaxed);
                }
                if done_tx.send((c, r)).is_err() {
                    break;
                }
            }
        };
        let (results, scanned) = std::thread::scope(|s| {
            // Scan: split the list into raw element slices (no parsing).
            // Threads start with the first full chunk: a short list (a
            // batch-sized file, a fuzz input) is parsed right here.
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut chunks = 0usize;
            let scanned = loop {
                match seq.next_element::<&'de RawValue>() {
                    Ok(Some(raw)) => {
                        chunk.push(raw);
                        if chunk.len() == CHUNK {
                            if chunks == 0 {
                                for _ in 0..threads {
                                    let tx = done_tx.clone();
                                    s.spawn(|| worker(tx));
                                }
                            }
                            let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
                            // Workers only stop once this sender is dropped.
                            let _ = work_tx.send((chunks, full));
                            chunks += 1;
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(e) => break Err(e),
                }
                if first_bad.load(Ordering::Relaxed) != usize::MAX {
                    break Ok(()); // a bad rule: the rest cannot matter
                }
            };
            if !chunk.is_empty() && first_bad.load(Ordering::Relaxed) == usize::MAX {
                let _ = done_tx.send((chunks, parse_chunk(chunks * CHUNK, &chunk)));
            }
            drop(work_tx);
            drop(done_tx);
            let mut results: Vec<ChunkResult> = done_rx.iter().collect();
            results.sort_unstable_by_key(|r| r.0);
            (results, scanned)
        });
        // The first problem in document order: a bad rule in an earlier
        // chunk, else a syntax error met while scanning.
        let mut rules = Vec::with_capacity(
            results
                .iter()
                .map(|r| r.1.as_ref().map_or(0, Vec::len))
                .sum(),
        );
        for (_, r) in results {
            match r {
                Ok(chunk) => rules.extend(chunk),
                Err(e) => {
                    self.record(e);
                    return Err(A::Error::custom("invalid rule"));
                }
            }
        }
        scanned?;
        Ok(rules)
    }
}
