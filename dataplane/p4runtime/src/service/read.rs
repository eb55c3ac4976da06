//! What a P4Runtime Read asks for: its entities as queries (tables, one
//! entry by its match and priority, counters or not) and the entities
//! that answer them from the rule set.

use cfdp_control::api::RuleEntry;
use cfdp_rules::Rule;
use tonic::{Code, Status};

use crate::entry::{self, EntryError};
use crate::pipeline::Table;
use crate::proto::p4::v1 as p4;

/// Distinct entities one `ReadRequest` may hold (after duplicates are
/// dropped): each is one pass over every page, so they bound the work a
/// Read costs per rule.
pub const MAX_READ_ENTITIES: usize = 64;

/// Which entries a read entity asks for.
struct Wanted {
    tables: Vec<Table>,
    /// One entry, by its match and priority (`None`: every entry).
    one: Option<cfdp_rules::Match>,
    counters: bool,
}

impl Wanted {
    fn of(e: &p4::TableEntry, counters: bool) -> Result<Self, Status> {
        let tables = if e.table_id == 0 {
            vec![Table::Acl, Table::Acl6]
        } else {
            vec![entry::table_of(e).map_err(|e| entry_status(&e))?]
        };
        let one = if e.r#match.is_empty() && e.priority == 0 {
            None
        } else {
            Some(entry::entry_match(e).map_err(|e| entry_status(&e))?)
        };
        Ok(Self {
            tables,
            one,
            counters,
        })
    }

    fn takes(&self, r: &Rule) -> Option<p4::TableEntry> {
        let e = entry::rule_entry(r)?;
        let t = Table::of_id(e.table_id)?;
        (self.tables.contains(&t) && self.one.is_none_or(|m| m == r.matcher)).then_some(e)
    }
}

fn entry_status(e: &EntryError) -> Status {
    Status::new(entry_code(e), e.to_string())
}

pub(super) fn entry_code(e: &EntryError) -> Code {
    match e.code {
        entry::Code::InvalidArgument => Code::InvalidArgument,
        entry::Code::Unimplemented => Code::Unimplemented,
        entry::Code::NotFound => Code::NotFound,
    }
}

fn counter_data(r: &RuleEntry) -> p4::CounterData {
    p4::CounterData {
        byte_count: i64::try_from(r.bytes).unwrap_or(i64::MAX),
        packet_count: i64::try_from(r.packets).unwrap_or(i64::MAX),
    }
}

/// What one read entity asks for.
pub(super) struct Query {
    wanted: Wanted,
    /// Direct counter entries rather than table entries.
    direct: bool,
}

/// A Read's queries: its entities with duplicates dropped (the same
/// entity twice asks for the same answer), at most
/// [`MAX_READ_ENTITIES`].
pub(super) fn read_queries(entities: &[p4::Entity]) -> Result<Vec<Query>, Status> {
    use prost::Message;
    let mut seen = std::collections::HashSet::new();
    let mut queries = Vec::new();
    for e in entities {
        if !seen.insert(e.encode_to_vec()) {
            continue;
        }
        if queries.len() == MAX_READ_ENTITIES {
            return Err(Status::resource_exhausted(format!(
                "entities: at most {MAX_READ_ENTITIES} distinct entities in one ReadRequest"
            )));
        }
        queries.push(Query::of(e)?);
    }
    Ok(queries)
}

impl Query {
    fn of(entity: &p4::Entity) -> Result<Self, Status> {
        use p4::entity::Entity as E;
        match &entity.entity {
            Some(E::TableEntry(e)) => Ok(Self {
                wanted: Wanted::of(e, e.counter_data.is_some())?,
                direct: false,
            }),
            Some(E::DirectCounterEntry(d)) => {
                let e = d.table_entry.clone().unwrap_or_default();
                Ok(Self {
                    wanted: Wanted::of(&e, true)?,
                    direct: true,
                })
            }
            None => Err(Status::unimplemented(
                "entity: cfdp serves table entries and direct counters",
            )),
        }
    }

    /// Its entities among `rules`.
    pub(super) fn answers<'a>(
        &'a self,
        rules: &'a [RuleEntry],
    ) -> impl Iterator<Item = p4::Entity> + 'a {
        use p4::entity::Entity as E;
        rules.iter().filter_map(|r| {
            let mut e = self.wanted.takes(&r.rule)?;
            let data = counter_data(r);
            Some(p4::Entity {
                entity: Some(if self.direct {
                    E::DirectCounterEntry(p4::DirectCounterEntry {
                        table_entry: Some(e),
                        data: Some(data),
                    })
                } else {
                    if self.wanted.counters {
                        e.counter_data = Some(data);
                    }
                    E::TableEntry(e)
                }),
            })
        })
    }
}
