//! Any bytes as a control request line: an error reply or a request, never
//! a panic; when the request is an `apply`, its params as a batch: a batch
//! or a batch-level error, and every well-formed update round-trips.
#![no_main]
use cfdp_rules::protocol::{parse_request, Method};
use cfdp_rules::{parse_batch, parse_update};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_request(data) {
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
