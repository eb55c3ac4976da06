//! Any text as a rule file: a rule set or an error naming what is wrong,
//! never a panic, and the streaming reader agrees with the whole-text one;
//! a valid rule set round-trips through JSON and through the binary
//! snapshot records (48-byte, or 64-byte for multi-field rules with a
//! priority). Any bytes as binary records of either width: a rule or an
//! error, and an accepted record is the canonical encoding of a rule the
//! JSON form expresses identically.
#![no_main]
use cfdp_rules::binary::{decode, decode_wide, encode, encode_wide, RECORD, RECORD_WIDE};
use cfdp_rules::stream::read_rule_stream;
use cfdp_rules::{parse_rule, parse_rule_file, rule_to_json, PrefixClass};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for rec in data.chunks_exact(RECORD) {
        let rec: &[u8; RECORD] = rec.try_into().unwrap();
        if let Ok(r) = decode(rec) {
            assert_eq!(encode(&r).as_ref(), Some(rec), "accepted a non-canonical record");
            assert_eq!(parse_rule(&rule_to_json(&r), None), Ok(r));
        }
    }
    for rec in data.chunks_exact(RECORD_WIDE) {
        let rec: &[u8; RECORD_WIDE] = rec.try_into().unwrap();
        if let Ok(r) = decode_wide(rec) {
            assert_eq!(&encode_wide(&r), rec, "accepted a non-canonical wide record");
            assert_eq!(parse_rule(&rule_to_json(&r), None), Ok(r));
        }
    }
    // The streaming reader only accepts, and what it accepts the whole-text
    // parser accepts with the same rules, wherever the blocks are cut.
    for block in [150, 4096] {
        if let Some(rules) = read_rule_stream(data, block, 0).expect("reading a slice") {
            let text = std::str::from_utf8(data).expect("accepted text is UTF-8");
            assert_eq!(parse_rule_file(text).as_ref(), Ok(&rules), "block {block}");
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // One rule's text: the fast paths (byte-level reader, serde) give
    // exactly what the JSON-value parser gives, rule or error.
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
        assert_eq!(cfdp_rules::parse_rule_text(text, None), parse_rule(&v, None));
    }
    let Ok(rules) = parse_rule_file(text) else {
        return;
    };
    let again: Vec<_> = rules.iter().map(rule_to_json).collect();
    let file = serde_json::json!({ "rules": again }).to_string();
    assert_eq!(parse_rule_file(&file).expect("own output parses"), rules);
    for r in &rules {
        if let Some(b) = encode(r) {
            assert_eq!(decode(&b), Ok(*r));
        }
        assert_eq!(decode_wide(&encode_wide(r)), Ok(*r));
    }
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
