// A counting global allocator wraps the system one: unsafe by its trait.
#![allow(unsafe_code)]
//! Memory per request (security review, item 4): a request line is never
//! turned into a JSON tree of its whole size unless it is a batch to
//! apply. Parameters of methods that take none, unknown parameters, and
//! lines that are not requests at all cost a bounded amount of heap
//! whatever their length (a tree costs ~16 × the line: a 16 MiB line took
//! 256 MiB). Measured with a counting global allocator; this binary holds
//! only this test, so nothing else allocates meanwhile.

use std::sync::atomic::Ordering::Relaxed;

use cfdp_rules::protocol::{code, parse_request_line};

#[path = "common/counting.rs"]
mod counting;
use counting::{LIVE, PEAK};

/// Heap bytes parsing `line` took at its peak, over what was live before,
/// and the error code it was answered with (if refused).
fn peak_of(line: &[u8]) -> (usize, Option<i64>) {
    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let r = parse_request_line(line, 65_536);
    let peak = PEAK.load(Relaxed) - base;
    (peak, r.err().map(|e| e.code))
}

fn zeros(n: usize) -> String {
    let mut s = String::with_capacity(2 * n + 2);
    s.push('[');
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('0');
    }
    s.push(']');
    s
}

#[test]
fn big_lines_that_are_not_batches_cost_bounded_memory() {
    const BOUND: usize = 256 << 10;
    let list = zeros(2 << 20); // 4 MiB of text
    let cases = [
        (
            "ping with a big parameter",
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"x":{list}}}}}"#),
            Some(code::INVALID_PARAMS),
        ),
        (
            "rules with a big unknown parameter",
            format!(r#"{{"id":1,"method":"rules","params":{{"limit":5,"junk":{list}}}}}"#),
            Some(code::INVALID_PARAMS),
        ),
        (
            "get with a list for its id",
            format!(r#"{{"id":1,"method":"get","params":{{"id":{list}}}}}"#),
            Some(code::INVALID_PARAMS),
        ),
        (
            "a big list, not a request",
            list.clone(),
            Some(code::INVALID_REQUEST),
        ),
        (
            "a big request with an unknown envelope field",
            format!(r#"{{"id":1,"method":"ping","junk":{list}}}"#),
            Some(code::INVALID_REQUEST),
        ),
    ];
    for (what, line, want) in cases {
        let (peak, got) = peak_of(line.as_bytes());
        assert!(
            peak < BOUND,
            "{what}: parsing a {} byte line took {peak} heap bytes",
            line.len()
        );
        assert_eq!(got, want, "{what}");
    }
    // The detailed errors stay for ordinary lines.
    let (_, got) = peak_of(br#"{"id":1,"method":"ping","junk":[1]}"#);
    assert_eq!(got, Some(code::INVALID_REQUEST));
}
