//! Any bytes as a P4Runtime ReadRequest: decoding it and reading each
//! entity as the server does (which table, which entry by match and
//! priority) must not panic, and an entry that names a match must name
//! the same match once answered back.
#![no_main]
use cfdp_p4runtime::entry::{entry_match, rule_entry, table_of};
use cfdp_p4runtime::proto::p4::v1 as p4;
use cfdp_rules::{Action, Rule};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = p4::ReadRequest::decode(data) else {
        return;
    };
    for entity in &r.entities {
        let e = match &entity.entity {
            Some(p4::entity::Entity::TableEntry(e)) => e.clone(),
            Some(p4::entity::Entity::DirectCounterEntry(d)) => {
                d.table_entry.clone().unwrap_or_default()
            }
            None => continue,
        };
        if e.table_id != 0 {
            let _ = table_of(&e);
        }
        if e.r#match.is_empty() && e.priority == 0 {
            continue;
        }
        let Ok(matcher) = entry_match(&e) else {
            continue;
        };
        let rule = Rule {
            id: 1,
            matcher,
            action: Action::Allow,
        };
        let back = rule_entry(&rule).expect("a P4Runtime match is a table entry");
        assert_eq!(entry_match(&back), Ok(matcher), "{e:?} -> {back:?}");
    }
});
