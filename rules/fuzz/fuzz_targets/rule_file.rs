//! Any text as a rule file: a rule set or an error naming what is wrong,
//! never a panic; a valid rule set round-trips through JSON.
#![no_main]
use cfdp_rules::{parse_rule_file, rule_to_json, RuleSet};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(rules) = parse_rule_file(text) else {
        return;
    };
    let again: Vec<_> = rules.iter().map(rule_to_json).collect();
    let file = serde_json::json!({ "rules": again }).to_string();
    assert_eq!(parse_rule_file(&file).expect("own output parses"), rules);
    if let Ok(set) = RuleSet::new(rules) {
        for r in set.rules() {
            if let cfdp_rules::Match::Flow(k) = r.matcher {
                assert!(set.classify(&k).is_some());
            }
        }
    }
});
