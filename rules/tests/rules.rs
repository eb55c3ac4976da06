//! Rule files: parsing and field-level errors. The priority order and the
//! duplicate checks belong to the rule store and its tables
//! (`dataplane/control/tests/store.rs`).

use cfdp_rules::parse_rule_file;

const FILE: &str = r#"{"rules": [
  {"id": 10, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "tcp", "sport": 40000, "dport": 80}}, "action": "drop"},
  {"id": 20, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow"},
  {"id": 21, "match": {"dst_prefix": "10.0.0.0/16"}, "action": "count"},
  {"id": 22, "match": {"dst_prefix": "10.0.0.0/16", "proto": "udp", "port": 53}, "action": {"redirect": 2}},
  {"id": 23, "match": {"src_prefix": "10.0.0.0/16"}, "action": "drop"},
  {"id": 30, "match": {"src_prefix": "2001:db8::/32", "proto": 58}, "action": "drop"},
  {"id": 40, "match": {"flow": {"src": "192.0.2.1", "dst": "192.0.2.2", "proto": "icmp"}}, "action": "count"},
  {"id": 50, "priority": 3, "match": {"src_prefix": "10.0.0.0/8", "proto": "tcp", "dport": 22}, "action": "allow", "track": true},
  {"id": 51, "match": {"dst_prefix": "10.9.0.0/16"}, "action": {"redirect": 1}, "track": true},
  {"id": 52, "match": {"dst_prefix": "10.8.0.0/16"}, "action": "count", "track": false}
]}"#;

/// `"track": true` makes an allowing rule stateful; `false` is the same as
/// leaving it out; the action is written back with it.
#[test]
fn tracked_rules_read_and_write_back() {
    use cfdp_rules::{Action, Allowing};
    let rules = parse_rule_file(FILE).unwrap();
    let action = |id| rules.iter().find(|r| r.id == id).unwrap().action;
    assert_eq!(action(50), Action::Track(Allowing::Allow));
    assert_eq!(action(51), Action::Track(Allowing::Redirect(1)));
    assert_eq!(action(52), Action::Count);
    let text = serde_json::to_string(rules.iter().find(|r| r.id == 51).unwrap()).unwrap();
    assert!(
        text.ends_with(r#""action":{"redirect":1},"track":true}"#),
        "{text}"
    );
}

#[test]
fn rules_round_trip_through_json() {
    let rules = parse_rule_file(FILE).unwrap();
    let json = serde_json::json!({ "rules": rules });
    let again = parse_rule_file(&json.to_string()).unwrap();
    assert_eq!(rules, again);
}

fn err(text: &str) -> String {
    parse_rule_file(text).unwrap_err().to_string()
}

#[test]
fn errors_name_the_rule_and_the_field() {
    let cases: &[(&str, &str)] = &[
        (r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "tcp", "sport": 70000, "dport": 1}}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.flow.sport: 70000 is not a port"),
        (r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 2, "match": {"dst_prefix": "10.0.0.1/8"}, "action": "drop"}]}"#,
         "rule #2 (id 2): match.dst_prefix: '10.0.0.1/8' has host bits set (did you mean 10.0.0.0/8?)"),
        (r#"{"rules": [{"id": 5, "match": {"dst_prefix": "10.0.0.0/8", "port": 80}, "action": "drop"}]}"#,
         "rule #1 (id 5): match.port: a port needs"),
        (r#"{"rules": [{"id": 5, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "reject"}]}"#,
         "rule #1 (id 5): action: unknown variant `reject`"),
        (r#"{"rules": [{"id": 5, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop", "prio": 1}]}"#,
         "rule #1 (id 5): prio: unknown field"),
        (r#"{"rules": [{"match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
         "rule #1: id: missing"),
        (r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "::1", "proto": 6, "sport": 1, "dport": 2}}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.flow.dst: src and dst must be the same IP version"),
        (r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": "icmp", "sport": 1}}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.flow.sport: only tcp and udp flows have ports"),
        (r#"{"rules": [{"id": 1, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
         "rule #1 (id 1): priority: a rule matching both prefixes needs a \"priority\""),
        (r#"{"rules": [{"id": 1, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 6, "sport": 1, "dport": 2}, "dst_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match: needs exactly one of \"flow\", \"src_prefix\", \"dst_prefix\""),
        (r#"{"rules": [{"id": 1, "match": {"proto": "tcp"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match: needs exactly one of"),
        // Multi-field rules (with a priority).
        (r#"{"rules": [{"id": 1, "priority": 5, "match": {"src_prefix": "10.0.0.0/8", "dst_prefix": "::/0"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.dst_prefix: not of the source prefix's IP version"),
        (r#"{"rules": [{"id": 1, "priority": 5, "match": {"src_prefix": "10.0.0.0/8", "dport": "90-80"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.dport: \"90-80\": the low port is above the high one"),
        (r#"{"rules": [{"id": 1, "priority": 5, "match": {"proto": "tcp"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match: a rule with a priority needs"),
        (r#"{"rules": [{"id": 1, "priority": -1, "match": {"src_prefix": "10.0.0.0/8"}, "action": "drop"}]}"#,
         "rule #1 (id 1): priority: -1 is not an integer"),
        (r#"{"rules": [{"id": 1, "priority": 5, "match": {"flow": {"src": "10.0.0.1", "dst": "10.0.0.2", "proto": 6, "sport": 1, "dport": 2}}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.flow: unknown field"),
        (r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8", "dport": 80}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.dport: port ranges are for rules with a \"priority\""),
        (r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8", "proto": "sctp"}, "action": "drop"}]}"#,
         "rule #1 (id 1): match.proto: unknown protocol \"sctp\""),
        (r#"{"rules": [ {"id": 1,  ]}"#, "not valid JSON"),
        (r#"{"rulez": []}"#, "rulez: unknown field"),
        (r#"[]"#, "expected a rule file: an object {\"rules\": [...]}"),
        (r#"{"rules": 5}"#, "expected a list of rules"),
        (r#"{}"#, "rules: missing or not a list"),
        (r#"{"rules": [], "rules": []}"#, "rules: duplicate field"),
        (r#"{"rules": []} 7"#, "not valid JSON: trailing characters"),
        (r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, 3]}"#,
         "rule #2: a rule is an object"),
        (r#"{"rules": [{"id": 4, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop", "track": true}]}"#,
         "rule #1 (id 4): track: only an allowing action (allow, count, redirect) can be tracked, not drop"),
        (r#"{"rules": [{"id": 4, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "allow", "track": "yes"}]}"#,
         "rule #1 (id 4): track: expected true or false"),
    ];
    for (text, want) in cases {
        let got = err(text);
        assert!(
            got.starts_with(want) || got.contains(want),
            "got: {got}\nwant: {want}"
        );
    }
}

/// Updates serialize (streamed, as the journal writes them) to what
/// `parse_update` reads back.
#[test]
fn updates_round_trip_through_json() {
    let rules = parse_rule_file(FILE).unwrap();
    for r in rules {
        for u in [
            cfdp_rules::Update::Insert(r),
            cfdp_rules::Update::Modify(r),
            cfdp_rules::Update::Delete(r.id),
        ] {
            let text = serde_json::to_string(&u).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(cfdp_rules::parse_update(&v).unwrap(), u, "{text}");
            assert_eq!(v, u.to_json());
        }
    }
}

/// A long list is parsed by several threads in chunks: the rules come back
/// in file order, and the error is the first problem in document order
/// whichever thread meets it first.
#[test]
fn long_lists_parse_in_order_and_report_the_first_problem() {
    let rule = |i: usize| {
        format!(
            r#"{{"id": {}, "match": {{"dst_prefix": "10.{}.{}.0/24"}}, "action": "drop"}}"#,
            i + 1,
            (i >> 8) & 255,
            i & 255
        )
    };
    let n = 50_000;
    let list = |bad: &[usize]| -> Vec<String> {
        (0..n)
            .map(|i| {
                if bad.contains(&i) {
                    format!(r#"{{"id": {}, "match": {{"dst_prefix": "10.0.0.1/8"}}, "action": "drop"}}"#, i + 1)
                } else {
                    rule(i)
                }
            })
            .collect()
    };
    let file = |items: Vec<String>| format!("{{\"rules\": [{}]}}", items.join(",\n"));
    let rules = parse_rule_file(&file(list(&[]))).unwrap();
    assert_eq!(rules.len(), n);
    assert!(rules
        .iter()
        .enumerate()
        .all(|(i, r)| r.id as usize == i + 1));
    // Two bad rules in different chunks: the earlier one is reported.
    let e = parse_rule_file(&file(list(&[45_000, 20_000]))).unwrap_err();
    assert_eq!(e.index, Some(20_000), "{e}");
    assert!(
        e.to_string()
            .starts_with("rule #20001 (id 20001): match.dst_prefix"),
        "{e}"
    );
    // A bad rule before a syntax error: the bad rule is the first problem.
    let mut text = file(list(&[30_000]));
    text.insert_str(text.len() - 3, ", {\"id\": ");
    let e = parse_rule_file(&text).unwrap_err();
    assert_eq!(e.index, Some(30_000), "{e}");
    // A syntax error alone, late in the list.
    let mut text = file(list(&[]));
    text.insert_str(text.len() - 3, ", {\"id\": ");
    assert!(parse_rule_file(&text)
        .unwrap_err()
        .to_string()
        .contains("not valid JSON"));
}

/// IPv4 addresses are written by hand when rules serialize: every octet
/// width and edge value comes out as `Ipv4Addr`'s own form.
#[test]
fn serialized_ipv4_addresses_match_their_display_form() {
    use cfdp_rules::{Action, FlowKey, Match, Rule};
    for o in [0u8, 1, 9, 10, 42, 99, 100, 199, 200, 255] {
        let src = [o, 255 - o, o / 2, 7];
        let dst = [10, o, 0, 255];
        let r = Rule {
            id: 1,
            matcher: Match::Flow(
                cfdp_rules::ExactFlow::of_key(FlowKey::v4(src, dst, 6, 1, 2))
                    .expect("a valid flow"),
            ),
            action: Action::Drop,
        };
        let v = serde_json::to_value(r).unwrap();
        assert_eq!(
            v["match"]["flow"]["src"],
            std::net::Ipv4Addr::from(src).to_string()
        );
        assert_eq!(
            v["match"]["flow"]["dst"],
            std::net::Ipv4Addr::from(dst).to_string()
        );
    }
}

/// `read_rule_file` streams a regular file and falls back to the whole-text
/// parser for its errors; a pipe (read once) gets the same answers. Seen
/// failing for the pipe when the fallback re-opened it (a second open of
/// a drained pipe waits for a writer that never comes).
#[test]
fn rule_files_and_pipes_read_alike() {
    let dir_tmp = tempfile::Builder::new()
        .prefix("cfdp-rules-read-")
        .tempdir()
        .unwrap();
    let dir = dir_tmp.path();
    let bad = r#"{"rules": [{"id": 1, "match": {"dst_prefix": "10.0.0.0/8"}, "action": "drop"}, {"id": 2, "match": {"dst_prefix": "10.0.0.1/8"}, "action": "drop"}]}"#;
    for (name, text) in [("good", FILE), ("bad", bad)] {
        let want = parse_rule_file(text);
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, text).unwrap();
        assert_eq!(cfdp_rules::read_rule_file(&file), want, "{name}: file");
        let fifo = dir.join(format!("{name}.fifo"));
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let writer = {
            let (fifo, text) = (fifo.clone(), text.to_owned());
            std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || tx.send(cfdp_rules::read_rule_file(&fifo)).unwrap())
        };
        writer.join().unwrap();
        // A reader that opens the pipe a second time waits for a writer
        // that never comes: fail instead of hanging (and let it go).
        let got = rx.recv_timeout(std::time::Duration::from_secs(10));
        if got.is_err() {
            std::fs::write(&fifo, "").unwrap();
        }
        reader.join().unwrap();
        assert_eq!(
            got.expect("read_rule_file blocked on a pipe"),
            want,
            "{name}: pipe"
        );
    }
    assert!(parse_rule_file(bad)
        .unwrap_err()
        .to_string()
        .starts_with("rule #2 (id 2)"));
}

/// One decision for every reader: a multi-field rule takes port ranges
/// with any protocol (as `rte_acl` and ClassBench do; see
/// `AclMatch::new`). A rule file, the single-rule reader, JSON written
/// back and the binary record all take the same rule and give it back.
#[test]
fn ports_on_any_protocol_are_one_decision_for_every_reader() {
    use cfdp_rules::binary::{decode_wide, encode, encode_wide};
    let text = r#"{"id": 9, "priority": 5, "match": {"src_prefix": "10.0.0.0/8", "proto": 2, "dport": "6000-6010"}, "action": "drop"}"#;
    let file = parse_rule_file(&format!(r#"{{"rules": [{text}]}}"#)).unwrap();
    let one = cfdp_rules::parse_rule_text(text, None).unwrap();
    assert_eq!(file, [one]);
    let back = parse_rule_file(&serde_json::json!({ "rules": file }).to_string()).unwrap();
    assert_eq!(back, file);
    // A multi-field rule has only the wide record.
    assert!(encode(&one).is_none());
    assert_eq!(decode_wide(&encode_wide(&one)).unwrap(), one);
}

/// Every reader of the grammar refuses what the one validator refuses,
/// with its words: a port range whose low is above its high, read from
/// JSON, a binary record, a ClassBench line and the raw form a P4Runtime
/// entry fills; and a priority over the bound from JSON and a record.
#[test]
fn every_reader_refuses_through_the_one_validator() {
    use cfdp_rules::binary::{decode_wide, encode_wide, DecodeError};
    use cfdp_rules::{classbench, parse_rule, Action, IpPrefix, Raw, RawMatch, RawPort, Rule};
    let said = "\"9-1\": the low port is above the high one";
    let json = |v: serde_json::Value| parse_rule(&v, None).unwrap_err();
    let e = json(serde_json::json!({"id": 1, "priority": 5,
        "match": {"src_prefix": "10.0.0.0/8", "sport": "9-1"}, "action": "drop"}));
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("match.sport", said)
    );
    let good = parse_rule(
        &serde_json::json!({"id": 1, "priority": 5,
            "match": {"src_prefix": "10.0.0.0/8", "sport": "1-9"}, "action": "drop"}),
        None,
    )
    .unwrap();
    let mut record = encode_wide(&good);
    record[10..14].copy_from_slice(&[9, 0, 1, 0]); // sport low 9, high 1
    let invalid = |r: &[u8; 64]| match decode_wide(r) {
        Err(DecodeError::Invalid { field, message, .. }) => (field, message),
        other => panic!("{other:?}"),
    };
    assert_eq!(invalid(&record), ("match.sport".into(), said.into()));
    let cb = classbench::parse_rules(
        "@10.0.0.0/8\t0.0.0.0/0\t9 : 1\t0 : 65535\t0x06/0xFF\t0x0000/0x0000",
        Action::Drop,
    )
    .unwrap_err();
    assert_eq!((cb.field, cb.message.as_str()), ("source ports", said));
    let raw = RawMatch {
        src_prefix: Some(Raw::Value("10.0.0.0/8".parse::<IpPrefix>().unwrap())),
        sport: Some(RawPort::Range(9, 1)),
        ..RawMatch::empty()
    };
    let e = raw.validate(Some(5)).unwrap_err();
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("match.sport", said)
    );
    // A priority over the bound.
    let over = cfdp_rules::rule::MAX_PRIORITY + 1;
    let e = json(serde_json::json!({"id": 1, "priority": over,
        "match": {"src_prefix": "10.0.0.0/8"}, "action": "drop"}));
    let mut record = encode_wide(&good);
    record[52..56].copy_from_slice(&over.to_le_bytes());
    assert_eq!(invalid(&record), (e.field.clone(), e.message.clone()));
    assert_eq!(e.field, "priority");
    // And a valid record is the rule the JSON names.
    assert_eq!(decode_wide(&encode_wide(&good)), Ok::<Rule, _>(good));
}
