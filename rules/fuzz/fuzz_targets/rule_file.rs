//! Any text as a rule file: a rule set or an error naming what is wrong,
//! never a panic; a valid rule set round-trips through JSON.
#![no_main]
use cfdp_rules::{parse_rule_file, rule_to_json, PrefixClass};
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
    for r in &rules {
        // A prefix rule has a class, and its address is already masked to
        // the class's length (host bits set are refused by the parser).
        if let Some((class, addr)) = PrefixClass::of(&r.matcher) {
            let mut k = cfdp_rules::FlowKey::v4([0; 4], [0; 4], 0, 0, 0);
            k.v6 = class.v6;
            k.src = addr;
            k.dst = addr;
            assert_eq!(class.masked(&k), addr);
        }
    }
});
