//! Any bytes as a P4Runtime WriteRequest from a controller: decoding and
//! turning its entries into cfdp rules must not panic, and every entry
//! that becomes a rule must come back as the same rule from the entry
//! cfdp answers reads with.
#![no_main]
use cfdp_p4runtime::entry::{entry_action, entry_match, rule_entry};
use cfdp_p4runtime::proto::p4::v1 as p4;
use cfdp_rules::Rule;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(w) = p4::WriteRequest::decode(data) else {
        return;
    };
    for u in &w.updates {
        let Some(p4::entity::Entity::TableEntry(e)) = u.entity.as_ref().and_then(|e| e.entity.as_ref())
        else {
            continue;
        };
        let (Ok(matcher), Ok(action)) = (entry_match(e), entry_action(e)) else {
            continue;
        };
        let rule = Rule {
            id: 1,
            matcher,
            action,
        };
        let back = rule_entry(&rule).expect("a P4Runtime rule is a table entry");
        assert_eq!(entry_match(&back), Ok(matcher), "{e:?} -> {back:?}");
        assert_eq!(entry_action(&back), Ok(action));
    }
});
