//! `cfdp run` on DPDK registers its statistics as DPDK telemetry commands:
//!
//! - `/cfdp/stats`: the same typed statistics as `stats` on the control
//!   socket (`ControlStats`), flattened to one dictionary (`totals_packets`,
//!   `filter_occupancy`, `memory_tables`, …; lists such as the workers and
//!   count rules are left out — see the next command and the socket).
//! - `/cfdp/worker,N`: worker N's counters.
//!
//! `dpdk-telemetry.py -f <file-prefix>` then shows them beside
//! `/ethdev/stats`. Answers are read from the statistics board, never
//! through the control thread, like `stats` and Prometheus scrapes.

use cfdp_control::stats::StatsBoard;
use cfdp_dpdk::telemetry::{self, TelAnswer, TelValue};
use cfdp_dpdk::{DpdkError, Eal};
use serde_json::Value;

/// Registers `/cfdp/stats` and `/cfdp/worker`.
pub fn register(eal: &Eal, board: &StatsBoard) -> Result<(), DpdkError> {
    let b = board.clone();
    telemetry::register(
        eal,
        "/cfdp/stats",
        "cfdp statistics (as `cfdp ctl stats`, flattened; no parameters)",
        Box::new(move |_| Ok(flatten(&serde_json::to_value(b.read())?))),
    )?;
    let b = board.clone();
    telemetry::register(
        eal,
        "/cfdp/worker",
        "one cfdp worker's counters. Parameters: int worker_id",
        Box::new(move |params| worker(&b, params)),
    )
}

fn worker(board: &StatsBoard, params: &str) -> TelAnswer {
    let stats = board.read();
    let n = stats.dataplane.workers.len();
    let i: usize = params.parse().map_err(|_| NoWorker::NotANumber {
        given: params.to_string(),
        workers: n,
    })?;
    let w = stats
        .dataplane
        .workers
        .get(i)
        .ok_or(NoWorker::Absent { i, workers: n })?;
    Ok(flatten(&serde_json::to_value(w)?))
}

/// `/cfdp/worker`'s parameter names no worker.
#[derive(Debug, thiserror::Error)]
enum NoWorker {
    #[error("parameter {given:?}: a worker number 0..{} is needed", workers.saturating_sub(1))]
    NotANumber { given: String, workers: usize },
    #[error("worker {i}: there are {workers} workers (0..{})", workers.saturating_sub(1))]
    Absent { i: usize, workers: usize },
}

/// A JSON object as telemetry entries: nested objects' keys joined with
/// `_`, unsigned integers and booleans as integers, other numbers and
/// strings as strings, lists and nulls left out; keys keep only letters,
/// digits and `_`.
pub fn flatten(v: &Value) -> Vec<(String, TelValue)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, TelValue)>) {
        let key = |k: &str| {
            let k: String = k
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            if prefix.is_empty() {
                k
            } else {
                format!("{prefix}_{k}")
            }
        };
        if let Value::Object(m) = v {
            for (k, x) in m {
                match x {
                    Value::Object(_) => walk(&key(k), x, out),
                    Value::Number(n) => out.push((
                        key(k),
                        match n.as_u64() {
                            Some(u) => TelValue::U64(u),
                            None => TelValue::Str(n.to_string()),
                        },
                    )),
                    Value::Bool(b) => out.push((key(k), TelValue::U64(u64::from(*b)))),
                    Value::String(s) => out.push((key(k), TelValue::Str(s.clone()))),
                    Value::Array(_) | Value::Null => {}
                }
            }
        }
    }
    let mut out = Vec::new();
    walk("", v, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_flatten_to_one_dictionary() {
        let v = serde_json::json!({
            "generation": 7,
            "uptime_s": 1.5,
            "totals": {"packets": 10, "bytes": 640},
            "filter": {"filters": {"dst/24 v4": {"items": 2}}},
            "workers": [{"worker": 0}],
            "journal": null,
            "ok": true,
        });
        let mut f = flatten(&v);
        f.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            f,
            [
                (
                    "filter_filters_dst_24_v4_items".to_owned(),
                    TelValue::U64(2)
                ),
                ("generation".to_owned(), TelValue::U64(7)),
                ("ok".to_owned(), TelValue::U64(1)),
                ("totals_bytes".to_owned(), TelValue::U64(640)),
                ("totals_packets".to_owned(), TelValue::U64(10)),
                ("uptime_s".to_owned(), TelValue::Str("1.5".into())),
            ]
        );
    }
}
