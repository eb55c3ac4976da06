//! Any bytes as a control request line: an error reply or a request, never
//! a panic; when the request is an `apply`, its params as a batch: a batch
//! or a batch-level error, and every well-formed update round-trips. The
//! server's line parser (typed fast path, `parse_request_line`) must give
//! exactly what the JSON-value path gives, for every input — except where
//! it refuses earlier by design (it reads parameters without a JSON tree):
//! a parameter the method does not take, or a list or object where a
//! single value belongs, is an `invalid_params` error at once (the value
//! path accepts the envelope and the server refuses the parameter after);
//! `replace`'s `rules` come back as text, not in `params`.
#![no_main]
use cfdp_rules::protocol::{parse_request, parse_request_line, Method};
use cfdp_rules::{parse_batch, parse_batch_text, parse_update};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Differential: the fast line parser against the value path.
    let slow = parse_request(data);
    match (parse_request_line(data, 1 << 16), &slow) {
        (Err(f), Ok(s)) => {
            // Refused earlier: the value path's request has a parameter
            // the method does not take, or a non-scalar where one belongs.
            assert_eq!(f.code, cfdp_rules::protocol::code::INVALID_PARAMS, "{f:?}");
            let allowed = s.method.params();
            let obj = s.params.as_object().expect("params is an object");
            let bad = obj.iter().any(|(k, v)| {
                !allowed.contains(&k.as_str())
                    || ((v.is_array() || v.is_object()) && !(s.method == Method::Replace && k == "rules"))
            });
            assert!(bad, "fast refused {f:?}, value path took {s:?}");
        }
        (Ok(f), Ok(s)) if f.rules_text.is_some() => {
            assert_eq!((&f.req.id, f.req.method), (&s.id, s.method));
            let rules: serde_json::Value =
                serde_json::from_str(f.rules_text.as_deref().unwrap()).expect("rules text is JSON");
            assert_eq!(Some(&rules), s.params.get("rules"));
            let mut rest = s.params.clone();
            rest.as_object_mut().unwrap().remove("rules");
            assert_eq!(f.req.params, rest);
        }
        (Ok(f), Ok(s)) => {
            assert_eq!((&f.req.id, f.req.method), (&s.id, s.method));
            // The updates' text kept for the journal reads back as the
            // batch's updates.
            if let (Some(t), Some(Ok(b))) = (&f.updates_text, &f.batch) {
                let list: serde_json::Value = serde_json::from_str(t).expect("updates text is JSON");
                let again = parse_batch(&serde_json::json!({ "updates": list }), 1 << 16)
                    .expect("updates text parses");
                assert_eq!(again.updates, b.updates);
            }
            match f.batch {
                Some(fb) => {
                    let sb = parse_batch(&s.params, 1 << 16);
                    let key = |b: cfdp_rules::Batch| (b.atomicity, b.expected_generation, b.updates);
                    assert_eq!(fb.map(key), sb.map(key));
                }
                None => assert_eq!(f.req.params, s.params),
            }
        }
        (Err(f), Err(s)) => assert_eq!(&f, s),
        (f, s) => panic!("fast {f:?} vs value path {s:?}"),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let (Ok(v), fast) = (serde_json::from_str::<serde_json::Value>(text), parse_batch_text(text, 1 << 16)) {
            let key = |b: cfdp_rules::Batch| (b.atomicity, b.expected_generation, b.updates);
            assert_eq!(fast.map(key), parse_batch(&v, 1 << 16).map(key));
        }
    }
    match slow {
        Err(e) => {
            // The error reply is itself valid JSON with the right shape.
            let v = e.to_json();
            assert!(v["error"]["code"].is_i64());
            assert!(serde_json::from_str::<serde_json::Value>(&v.to_string()).is_ok());
        }
        Ok(req) => {
            assert!(req.params.is_object());
            if req.method == Method::Apply {
                if let Ok(batch) = parse_batch(&req.params, 1 << 16) {
                    for u in batch.updates.into_iter().flatten() {
                        assert_eq!(parse_update(&u.to_json()).expect("own output"), u);
                    }
                }
            }
        }
    }
    // The same bytes directly as batch params.
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = parse_batch(&v, 1 << 16);
    }
});
