//! Prometheus text exposition of the statistics on an optional loopback
//! HTTP port.
//!
//! Each scrape reads the typed [`ControlStats`] from the [`StatsBoard`] the
//! control thread publishes (never through the control thread, so a scrape
//! answers while a batch runs). The HTTP side is hand-written on purpose:
//! the endpoint answers one fixed `GET /metrics` on loopback, and an HTTP
//! server crate would bring an async runtime or a general request router
//! for a dozen lines of request-line checking.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::server::ServerCtx;
use crate::stats::ControlStats;

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
                    Err(e) if e.kind() == ErrorKind::WouldBlock => crate::server::wait_readable(&l),
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
    let mut body = render(&ctx.board.read());
    if let Some(c) = &ctx.cluster {
        let s = c.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
        body += &render_cluster(&c.prefix, &s);
    }
    write!(
        w,
        "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A fleet node's state as Prometheus text: the fleet generation it has
/// applied, whether it is caught up (counted by `wait`), whether its agent
/// has an error (etcd unreachable, a batch it cannot apply).
pub fn render_cluster(prefix: &str, status: &serde_json::Value) -> String {
    let l = format!("{{prefix=\"{}\"}}", prefix.replace(['"', '\\', '\n'], "_"));
    let g = status["generation"].as_i64().unwrap_or(0);
    let up = u8::from(status["caught_up"] == true);
    let err = u8::from(!status["error"].is_null());
    format!(
        "# HELP cfdp_cluster_generation The fleet generation (etcd revision) this node has applied\n\
         # TYPE cfdp_cluster_generation gauge\ncfdp_cluster_generation{l} {g}\n\
         # HELP cfdp_cluster_caught_up 1 once the node has caught up with the fleet's rule set\n\
         # TYPE cfdp_cluster_caught_up gauge\ncfdp_cluster_caught_up{l} {up}\n\
         # HELP cfdp_cluster_error 1 while the node's agent has an error (see cfdp ctl stats)\n\
         # TYPE cfdp_cluster_error gauge\ncfdp_cluster_error{l} {err}\n"
    )
}

/// Renders the statistics as Prometheus text.
pub fn render(stats: &ControlStats) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>| {
        out += &format!("# HELP cfdp_{name} {help}\n# TYPE cfdp_{name} {kind}\n");
        for (labels, v) in samples {
            out += &format!("cfdp_{name}{labels} {v}\n");
        }
    };
    let workers = &stats.dataplane.workers;
    let per_worker =
        |f: &dyn Fn(&cfdp_engine::stats::WorkerSnapshot) -> u64| -> Vec<(String, f64)> {
            workers
                .iter()
                .map(|w| (format!("{{worker=\"{}\"}}", w.worker), f(w) as f64))
                .collect()
        };
    type Field = (
        &'static str,
        &'static str,
        fn(&cfdp_engine::stats::WorkerSnapshot) -> u64,
    );
    let fields: [Field; 10] = [
        ("packets", "Packets received", |w| w.totals.packets),
        ("bytes", "Bytes received (wire length)", |w| w.totals.bytes),
        ("forwarded", "Packets forwarded (incl. redirected)", |w| {
            w.totals.forwarded
        }),
        ("dropped", "Packets dropped by a rule", |w| w.totals.dropped),
        ("matched", "Packets that matched a rule", |w| {
            w.totals.matched
        }),
        ("redirected", "Packets redirected to another port", |w| {
            w.totals.redirected
        }),
        ("malformed", "Malformed packets", |w| w.totals.malformed),
        ("non_ip", "Non-IP packets", |w| w.totals.non_ip),
        (
            "rx_dropped",
            "Packets dropped because the worker fell behind",
            |w| w.rx_dropped,
        ),
        (
            "filter_false_positives",
            "Filter positives the exact tables refuted",
            |w| w.totals.filter_false_positives,
        ),
    ];
    for (key, help, get) in fields {
        metric(&format!("{key}_total"), "counter", help, per_worker(&get));
    }
    let per_rule = |f: fn(&crate::store::RuleCount) -> u64| -> Vec<(String, f64)> {
        stats
            .rule_counters
            .iter()
            .map(|r| (format!("{{rule=\"{}\"}}", r.id), f(r) as f64))
            .collect()
    };
    metric(
        "rule_packets_total",
        "counter",
        "Packets counted by count rules",
        per_rule(|r| r.packets),
    );
    metric(
        "rule_bytes_total",
        "counter",
        "Bytes counted by count rules",
        per_rule(|r| r.bytes),
    );
    let f = &stats.filter;
    let one = |v: f64| vec![(String::new(), v)];
    metric("rules", "gauge", "Installed rules", one(stats.rules as f64));
    metric(
        "generation",
        "gauge",
        "Rule-set generation",
        one(stats.generation as f64),
    );
    metric(
        "filter_items",
        "gauge",
        "Items in the filters",
        one(f.items as f64),
    );
    metric(
        "filter_bloom_items",
        "gauge",
        "Items in the filters' Bloom parts",
        one(f.bloom_items as f64),
    );
    metric(
        "filter_occupancy",
        "gauge",
        "Occupied cuckoo entries / all entries",
        one(f.occupancy),
    );
    metric(
        "filter_estimated_fpr",
        "gauge",
        "Sum of the filters' estimated false-positive rates",
        one(f.estimated_fpr_sum),
    );
    let m = &stats.memory;
    metric(
        "memory_bytes",
        "gauge",
        "Heap bytes of the rule set by component",
        [
            ("rule_store", m.rule_store),
            ("tables", m.tables),
            ("filters", m.filters),
            ("rule_counters", m.rule_counters),
            ("other", m.other),
        ]
        .iter()
        .map(|(c, v)| (format!("{{component=\"{c}\"}}"), *v as f64))
        .collect(),
    );
    let b = &stats.batch_us;
    metric(
        "batch_latency_us",
        "gauge",
        "Batch apply wall time percentiles (µs)",
        [("p50", b.p50), ("p99", b.p99), ("max", b.max)]
            .iter()
            .map(|(q, v)| (format!("{{quantile=\"{q}\"}}"), *v as f64))
            .collect(),
    );
    let bn = &stats.dataplane.burst_ns;
    metric(
        "burst_ns",
        "gauge",
        "Per-burst processing time percentiles (ns)",
        [("p50", bn.p50_ns), ("p99", bn.p99_ns), ("max", bn.max_ns)]
            .iter()
            .map(|(q, v)| (format!("{{quantile=\"{q}\"}}"), *v as f64))
            .collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fleet_node_exports_its_generation_and_state() {
        let t = super::render_cluster(
            "/cfdp/prod",
            &serde_json::json!({"generation": 42, "caught_up": true, "error": null}),
        );
        assert!(
            t.contains("cfdp_cluster_generation{prefix=\"/cfdp/prod\"} 42\n"),
            "{t}"
        );
        assert!(
            t.contains("cfdp_cluster_caught_up{prefix=\"/cfdp/prod\"} 1\n"),
            "{t}"
        );
        assert!(
            t.contains("cfdp_cluster_error{prefix=\"/cfdp/prod\"} 0\n"),
            "{t}"
        );
        let t = super::render_cluster(
            "/p",
            &serde_json::json!({"generation": 0, "error": "etcd connect: refused"}),
        );
        assert!(t.contains("cfdp_cluster_error{prefix=\"/p\"} 1\n"), "{t}");
        assert!(
            t.contains("cfdp_cluster_caught_up{prefix=\"/p\"} 0\n"),
            "{t}"
        );
    }
}
