//! Prometheus text exposition of `stats` on an optional loopback HTTP port.
//!
//! Hand-written on purpose: the endpoint answers one fixed `GET /metrics`
//! on loopback, and the statistics already come from the control thread as
//! JSON. An HTTP server crate would bring an async runtime or a general
//! request router for what is a dozen lines of request-line checking.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use cfdp_rules::protocol::{Method, Request};
use crossbeam::channel::bounded;
use serde_json::{json, Value};

use super::plane::Job;
use super::server::ServerCtx;

/// Serves `GET /metrics` until `ctx.stop`.
pub fn serve(l: TcpListener, ctx: ServerCtx) -> std::io::Result<JoinHandle<()>> {
    l.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("cfdp-metrics".into())
        .spawn(move || {
            while !ctx.stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        let _ = answer(s, &ctx);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        })
}

fn answer(s: TcpStream, ctx: &ServerCtx) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut first = String::new();
    r.by_ref().take(8192).read_line(&mut first)?;
    // Read the rest of the head (bounded) so the client sees a clean close.
    let mut line = String::new();
    for _ in 0..100 {
        line.clear();
        if r.by_ref().take(8192).read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut w = s;
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" || (path != "/metrics" && path != "/") {
        let body = "only GET /metrics is served here\n";
        return write!(
            w,
            "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
    let (tx, rx) = bounded(1);
    let req = Request {
        id: json!("metrics"),
        method: Method::Stats,
        params: json!({}),
    };
    let stats = ctx
        .jobs
        .send(Job { req, reply: tx })
        .ok()
        .and_then(|_| rx.recv().ok())
        .map(|v| v["result"].clone())
        .unwrap_or(Value::Null);
    let body = render(&stats);
    write!(
        w,
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Renders the `stats` result as Prometheus text.
pub fn render(stats: &Value) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        out += &format!("# HELP cfdp_{name} {help}\n# TYPE cfdp_{name} {kind}\n");
        for (labels, v) in samples {
            out += &format!("cfdp_{name}{labels} {v}\n");
        }
    };
    let num = |v: &Value| v.as_f64().unwrap_or(0.0);
    let workers = stats["workers"].as_array().cloned().unwrap_or_default();
    for (key, help) in [
        ("packets", "Packets received"),
        ("bytes", "Bytes received (wire length)"),
        ("forwarded", "Packets forwarded (incl. redirected)"),
        ("dropped", "Packets dropped by a rule"),
        ("matched", "Packets that matched a rule"),
        ("redirected", "Packets redirected to another port"),
        ("malformed", "Malformed packets"),
        ("non_ip", "Non-IP packets"),
        (
            "rx_dropped",
            "Packets dropped because the worker fell behind",
        ),
        (
            "filter_false_positives",
            "Filter positives the exact tables refuted",
        ),
    ] {
        let samples = workers
            .iter()
            .map(|w| (format!("{{worker=\"{}\"}}", w["worker"]), num(&w[key])))
            .collect();
        metric(&format!("{key}_total"), "counter", help, samples);
    }
    let rules = stats["rule_counters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let per_rule = |k: &str| {
        rules
            .iter()
            .map(|r| (format!("{{rule=\"{}\"}}", r["id"]), num(&r[k])))
            .collect()
    };
    metric(
        "rule_packets_total",
        "counter",
        "Packets counted by count rules",
        per_rule("packets"),
    );
    metric(
        "rule_bytes_total",
        "counter",
        "Bytes counted by count rules",
        per_rule("bytes"),
    );
    let f = &stats["filter"];
    metric(
        "rules",
        "gauge",
        "Installed rules",
        vec![(String::new(), num(&stats["rules"]))],
    );
    metric(
        "generation",
        "gauge",
        "Rule-set generation",
        vec![(String::new(), num(&stats["generation"]))],
    );
    metric(
        "filter_items",
        "gauge",
        "Items in the filters",
        vec![(String::new(), num(&f["items"]))],
    );
    metric(
        "filter_bloom_items",
        "gauge",
        "Items in the filters' Bloom parts",
        vec![(String::new(), num(&f["bloom_items"]))],
    );
    metric(
        "filter_occupancy",
        "gauge",
        "Occupied cuckoo entries / all entries",
        vec![(String::new(), num(&f["occupancy"]))],
    );
    metric(
        "filter_estimated_fpr",
        "gauge",
        "Sum of the filters' estimated false-positive rates",
        vec![(String::new(), num(&f["estimated_fpr_sum"]))],
    );
    let b = &stats["batch_us"];
    metric(
        "batch_latency_us",
        "gauge",
        "Batch apply wall time percentiles (µs)",
        ["p50", "p99", "max"]
            .iter()
            .map(|q| (format!("{{quantile=\"{q}\"}}"), num(&b[*q])))
            .collect(),
    );
    let bn = &stats["burst_ns"];
    metric(
        "burst_ns",
        "gauge",
        "Per-burst processing time percentiles (ns)",
        [("p50", "p50_ns"), ("p99", "p99_ns"), ("max", "max_ns")]
            .iter()
            .map(|(q, k)| (format!("{{quantile=\"{q}\"}}"), num(&bn[*k])))
            .collect(),
    );
    out
}
