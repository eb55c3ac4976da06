//! Prometheus (OpenMetrics text) exposition of the statistics on an
//! optional loopback HTTP port.
//!
//! Each scrape reads the typed [`ControlStats`] from the [`StatsBoard`] the
//! control thread publishes (never through the control thread, so a scrape
//! answers while a batch runs) and encodes it with `prometheus-client`:
//! counters and gauges are built per scrape from the board
//! ([`Exporter`] is a `Collector`), latencies are real histograms —
//! cumulative `le` buckets, `_sum` and `_count` — so they can be summed
//! across workers and across a fleet (quantile gauges cannot):
//!
//! - `cfdp_batch_duration_seconds`: every batch's wall time in the control
//!   thread, observed into a `prometheus-client` histogram when the batch
//!   is answered ([`StatsBoard::batch_seconds`]).
//! - `cfdp_burst_duration_seconds{worker}`: a burst's time (its receive,
//!   processing and transmit),
//!   bucketed at scrape time from each worker's HDR histogram (which the
//!   worker already keeps for `stats`' percentiles, 3 significant digits:
//!   a value within 0.1 % of a bucket bound may count on either side, and
//!   `_sum` is the histogram's, exact to the same 0.1 %).
//!
//! The HTTP side is hand-written on purpose: the endpoint answers one fixed
//! `GET /metrics` on loopback, and an HTTP server crate would bring an
//! async runtime or a general request router for a dozen lines of
//! request-line checking. The accept thread reads the request heads of all
//! waiting connections at once (`heads`: at most [`WAITING`], the oldest
//! closed to make room, each within [`REQUEST_DEADLINE`] of its
//! connection), and hands whole heads to [`HANDLERS`] threads through a
//! short queue (a full queue closes that connection): idle or trickling
//! sockets never hold a handler, and a scraper whose request comes with
//! its connection is served however many of them are open.

use std::io::{ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::heads::Heads;
use crate::server::{ClusterMode, ServerCtx};
use crate::stats::{ControlStats, StatsBoard};

/// Upper bounds (ns) of the burst-time buckets: 250 ns × 2^k up to ~8 ms.
const BURST_BOUNDS_NS: [u64; 16] = {
    let mut b = [0u64; 16];
    let mut i = 0;
    while i < 16 {
        b[i] = 250 << i;
        i += 1;
    }
    b
};

/// Threads answering scrapes.
pub const HANDLERS: usize = 4;
/// Whole requests not yet taken by a handler, at most.
pub const QUEUE: usize = 16;
/// Connections whose request head is being read, at most (the oldest is
/// closed to make room: see `heads`).
pub const WAITING: usize = 256;
/// Most time from accepting a connection to having read its request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// Metrics that a component above this crate adds to the export (the
/// P4Runtime server's): it registers them into the same registry, under
/// the same `cfdp_` prefix, when the exporter starts.
pub type ExtraMetrics = Arc<dyn Fn(&mut Registry) + Send + Sync>;

/// Serves `GET /metrics` until `ctx.stop`.
pub fn serve(
    l: TcpListener,
    ctx: ServerCtx,
    extra: &[ExtraMetrics],
) -> std::io::Result<JoinHandle<()>> {
    l.set_nonblocking(true)?;
    let mut registry = registry(&ctx.board, ctx.cluster.clone());
    for add in extra {
        add(&mut registry);
    }
    let registry = Arc::new(registry);
    let (tx, rx) = crossbeam::channel::bounded::<(TcpStream, Vec<u8>)>(QUEUE);
    let mut handlers = Vec::with_capacity(HANDLERS);
    for i in 0..HANDLERS {
        let (rx, registry) = (rx.clone(), Arc::clone(&registry));
        handlers.push(
            std::thread::Builder::new()
                .name(format!("cfdp-metrics-{i}"))
                .spawn(move || {
                    for (s, head) in rx {
                        let _ = answer(s, &head, &registry);
                    }
                })?,
        );
    }
    std::thread::Builder::new()
        .name("cfdp-metrics".into())
        .spawn(move || {
            // Heads are read here, for every connection at once; handlers
            // get whole heads only (an idle socket holds no handler).
            let mut heads = Heads::new(WAITING, REQUEST_DEADLINE);
            while !ctx.stop.load(Ordering::Relaxed) {
                let polled = heads.poll(&l, Duration::from_millis(50));
                for done in polled.complete {
                    // A full queue: the connection is closed at once.
                    drop(tx.try_send(done));
                }
                if polled.acceptable {
                    loop {
                        match l.accept() {
                            Ok((s, _)) => heads.add(s),
                            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                            Err(_) => {
                                std::thread::sleep(Duration::from_millis(20));
                                break;
                            }
                        }
                    }
                }
            }
            drop(tx);
            for h in handlers {
                let _ = h.join();
            }
        })
}

/// The registry a scrape encodes: everything under the `cfdp_` prefix.
pub fn registry(board: &StatsBoard, cluster: Option<Arc<ClusterMode>>) -> Registry {
    let mut r = Registry::with_prefix("cfdp");
    r.register(
        "batch_duration_seconds",
        "Wall time of each batch in the control thread (validation, filters, journal, publish)",
        board.batch_seconds.clone(),
    );
    r.register_collector(Box::new(Exporter {
        board: board.clone(),
        cluster,
    }));
    r
}

/// The whole exposition, as a scrape returns it.
pub fn render(r: &Registry) -> String {
    let mut body = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug.
    prometheus_client::encoding::text::encode(&mut body, r)
        .unwrap_or_else(|e| body.push_str(&format!("# encoding failed: {e}\n")));
    body
}

fn answer(s: TcpStream, head: &[u8], registry: &Registry) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let head = String::from_utf8_lossy(head);
    let mut lines = head.lines();
    let first = lines.next().unwrap_or("");
    let mut host_ok = true;
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        if let Some((name, value)) = line.split_once(':') {
            if name.trim().eq_ignore_ascii_case("host") {
                host_ok &= host_allowed(value.trim());
            }
        }
    }
    let mut w = s;
    if !host_ok {
        // A name other than localhost: a web page that rebound its own
        // name to this address, reading the metrics through a browser.
        let body = "Host must be an IP address or localhost\n";
        return write!(
            w,
            "HTTP/1.0 421 Misdirected Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
    }
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
    let body = render(registry);
    write!(
        w,
        "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Whether a request's `Host` names this endpoint as a scraper does (an
/// IP address, or `localhost`, with an optional port) rather than by a
/// DNS name, which is what a DNS-rebinding page sends: the browser sends
/// the page's own name, rebound to this address.
fn host_allowed(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if rest.is_empty() || rest.starts_with(':') => {
                return addr.parse::<std::net::Ipv6Addr>().is_ok()
            }
            _ => return false,
        },
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

/// Encodes the board's statistics on every scrape.
#[derive(Debug)]
pub struct Exporter {
    board: StatsBoard,
    cluster: Option<Arc<ClusterMode>>,
}

mod encode;
mod hdr;
mod stages;

pub use hdr::hdr_buckets;

use encode::{counters, gauge, gauges, Enc, Res};

impl Collector for Exporter {
    fn encode(&self, mut e: DescriptorEncoder) -> Res {
        let stats = self.board.read();
        encode_stats(&mut e, &stats)?;
        // Burst times per worker, from the workers' own histograms.
        let live = self.board.live();
        let mut m = e.encode_descriptor(
            "burst_duration_seconds",
            "Time of each burst in a worker: its receive, processing and transmit",
            None,
            MetricType::Histogram,
        )?;
        for (i, w) in live.workers.iter().enumerate() {
            let (buckets, sum) = hdr_buckets(
                &w.histogram
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                &BURST_BOUNDS_NS,
            );
            let count = buckets.iter().map(|b| b.1).sum();
            m.encode_family(&[("worker", i.to_string())])?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        if let Some(c) = &self.cluster {
            let s = c
                .status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone();
            encode_cluster(&mut e, &c.prefix, &s)?;
        }
        Ok(())
    }
}

/// A fleet node's state: the fleet generation it has applied, whether it
/// is caught up (counted by `wait`), whether its agent has an error (etcd
/// unreachable, a batch it cannot apply).
fn encode_cluster(e: Enc, prefix: &str, status: &crate::api::NodeStatus) -> Res {
    let g = status.generation as f64;
    let up = f64::from(u8::from(status.caught_up));
    let err = f64::from(u8::from(status.error.is_some()));
    let one = |v| [(prefix, v)];
    gauges(
        e,
        "cluster_generation",
        "The fleet generation (etcd revision) this node has applied",
        "prefix",
        one(g),
    )?;
    gauges(
        e,
        "cluster_caught_up",
        "1 once the node has caught up with the fleet's rule set",
        "prefix",
        one(up),
    )?;
    gauges(
        e,
        "cluster_error",
        "1 while the node's agent has an error (see cfdp ctl stats)",
        "prefix",
        one(err),
    )
}

/// The board's counters and gauges.
fn encode_stats(e: Enc, stats: &ControlStats) -> Res {
    encode_workers(e, stats)?;
    encode_export(e, &stats.dataplane.export)?;
    encode_control(e, stats)?;
    encode_rule_set(e, stats)
}

/// A per-worker counter: its name, its help, and how to read it.
type WorkerField = (
    &'static str,
    &'static str,
    fn(&cfdp_engine::stats::WorkerSnapshot) -> u64,
);

/// Per-worker packet counters.
fn encode_workers(e: Enc, stats: &ControlStats) -> Res {
    let workers = &stats.dataplane.workers;
    for (name, help, get) in WORKER_FIELDS {
        counters(
            e,
            name,
            help,
            "worker",
            workers.iter().map(|w| (w.worker.to_string(), get(w))),
        )?;
    }
    stages::encode_stages(e, workers)
}

/// The per-worker counters, in the order they are written.
const WORKER_FIELDS: [WorkerField; 20] = [
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
        "tx_dropped",
        "Packets a transmit queue did not take, or sent to a missing port",
        |w| w.tx_dropped,
    ),
    (
        "filter_false_positives",
        "Filter positives the exact tables refuted",
        |w| w.totals.filter_false_positives,
    ),
    (
        "fragments_evicted",
        "First-fragment entries evicted to make room (the table was full)",
        |w| w.totals.fragments_evicted,
    ),
    (
        "fragments_source_refused",
        "First fragments not remembered: their source held its share of the table",
        |w| w.totals.fragments_source_refused,
    ),
    (
        "fragments_overlap",
        "Fragments dropped because their datagram had overlapping fragments",
        |w| w.totals.fragments_overlap,
    ),
    (
        "fragments_duplicate",
        "Fragments dropped as duplicates of bytes already passed",
        |w| w.totals.fragments_duplicate,
    ),
    (
        "ct_established",
        "Packets decided by their tracked connection",
        |w| w.totals.ct_established,
    ),
    (
        "ct_related",
        "ICMP errors passed as related to a tracked connection",
        |w| w.totals.ct_related,
    ),
    ("ct_opened", "Connections a stateful rule opened", |w| {
        w.totals.ct_opened
    }),
    (
        "ct_refused",
        "Packets dropped because their connection could not be opened (table full)",
        |w| w.totals.ct_refused,
    ),
    (
        "export_early",
        "Flow records sent early because the worker's flow cache was full (IPFIX export)",
        |w| w.totals.export_early,
    ),
];

/// The count rules' counters and the control plane's own.
fn encode_control(e: Enc, stats: &ControlStats) -> Res {
    let rules = &stats.rule_counters;
    counters(
        e,
        "rule_packets",
        "Packets counted by count rules",
        "rule",
        rules.iter().map(|r| (r.id.to_string(), r.packets)),
    )?;
    counters(
        e,
        "rule_bytes",
        "Bytes counted by count rules",
        "rule",
        rules.iter().map(|r| (r.id.to_string(), r.bytes)),
    )?;
    counters(
        e,
        "batches",
        "Batches answered, by outcome",
        "outcome",
        [
            ("applied", stats.batches.applied),
            ("refused", stats.batches.refused),
        ],
    )?;
    e.encode_descriptor(
        "requests",
        "Control requests answered (all methods)",
        None,
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, u64>(&stats.requests, None)?;
    e.encode_descriptor(
        "migrated",
        "Items moved from the Bloom parts into cuckoo entries",
        None,
        MetricType::Counter,
    )?
    .encode_counter::<NoLabelSet, _, u64>(&stats.migrated, None)?;
    let c = &stats.acl_compiles;
    counters(
        e,
        "acl_compiles",
        "Background compiles of the multi-field rules, by outcome",
        "outcome",
        [
            ("started", c.started),
            ("landed", c.landed),
            ("refused", c.refused),
        ],
    )?;
    if let Some(ct) = &stats.conntrack {
        encode_conntrack(e, ct)?;
    }
    Ok(())
}

/// The connection table: entries by state, what happened to connections.
/// The flow exporter's counters (IPFIX; zeros without export).
fn encode_export(e: Enc, x: &cfdp_export::ExportTotals) -> Res {
    counters(
        e,
        "ipfix",
        "IPFIX export: records sent, messages sent (over all collectors), \
         messages whose send failed, records lost to a full queue",
        "event",
        [
            ("records", x.records),
            ("messages", x.messages),
            ("send_errors", x.send_errors),
            ("queue_full", x.queue_full),
        ],
    )
}

fn encode_conntrack(e: Enc, ct: &crate::stats::ConntrackStats) -> Res {
    gauges(
        e,
        "conntrack_entries",
        "Tracked connections by state",
        "state",
        ct.by_state.iter().map(|(s, n)| (*s, *n as f64)),
    )?;
    gauge(
        e,
        "conntrack_capacity",
        "Connections the table holds at most",
        ct.capacity as u64,
    )?;
    counters(
        e,
        "conntrack_connections",
        "Connections by what happened to them",
        "event",
        [
            ("opened", ct.opened),
            ("refused", ct.refused),
            ("early_dropped", ct.early_dropped),
            ("expired", ct.expired),
        ],
    )?;
    counters(
        e,
        "conntrack_packets",
        "Packets of tracked connections by what the table said of them",
        "verdict",
        [("invalid", ct.invalid)],
    )?;
    gauge(
        e,
        "conntrack_memory_bytes",
        "Memory of the connection table",
        ct.memory_bytes as u64,
    )
}

/// The rule set: size, generation, filters, memory, journal.
fn encode_rule_set(e: Enc, stats: &ControlStats) -> Res {
    gauge(e, "rules", "Installed rules", stats.rules as u64)?;
    gauge(e, "generation", "Rule-set generation", stats.generation)?;
    gauge(e, "uptime_seconds", "Seconds since start", stats.uptime_s)?;
    let f = &stats.filter;
    gauge(e, "filter_items", "Items in the filters", f.items as u64)?;
    gauge(
        e,
        "filter_bloom_items",
        "Items in the filters' Bloom parts",
        f.bloom_items as u64,
    )?;
    gauge(
        e,
        "filter_occupancy",
        "Occupied cuckoo entries / all entries",
        f.occupancy,
    )?;
    gauge(
        e,
        "filter_estimated_fpr",
        "Sum of the filters' estimated false-positive rates",
        f.estimated_fpr_sum,
    )?;
    gauges(
        e,
        "filter_load_factor",
        "Occupied cuckoo entries / all entries, per filter",
        "filter",
        f.filters.iter().map(|(n, o)| (n.as_str(), o.load_factor)),
    )?;
    let m = &stats.memory;
    gauges(
        e,
        "memory_bytes",
        "Heap bytes of the rule set by component",
        "component",
        [
            ("rule_store", m.rule_store),
            ("tables", m.tables),
            ("filters", m.filters),
            ("rule_counters", m.rule_counters),
            ("other", m.other),
        ]
        .map(|(c, v)| (c, v as f64)),
    )?;
    if let Some(j) = &stats.journal {
        gauge(
            e,
            "journal_records",
            "Journal records since the last snapshot",
            j.records,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses one sample line `name{labels} value` out of an exposition.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_fleet_node_exports_its_generation_and_state() {
        let mut r = Registry::with_prefix("cfdp");
        #[derive(Debug)]
        struct C(crate::api::NodeStatus);
        impl Collector for C {
            fn encode(&self, mut e: DescriptorEncoder) -> Res {
                encode_cluster(&mut e, "/cfdp/prod", &self.0)
            }
        }
        r.register_collector(Box::new(C(crate::api::NodeStatus {
            generation: 42,
            caught_up: true,
            ..Default::default()
        })));
        let t = render(&r);
        assert_eq!(
            sample(&t, "cfdp_cluster_generation{prefix=\"/cfdp/prod\"}"),
            Some(42.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, "cfdp_cluster_caught_up{prefix=\"/cfdp/prod\"}"),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, "cfdp_cluster_error{prefix=\"/cfdp/prod\"}"),
            Some(0.0),
            "{t}"
        );
        let mut r = Registry::with_prefix("cfdp");
        r.register_collector(Box::new(C(crate::api::NodeStatus {
            error: Some("etcd connect: refused".into()),
            ..Default::default()
        })));
        let t = render(&r);
        assert_eq!(
            sample(&t, "cfdp_cluster_error{prefix=\"/cfdp/prod\"}"),
            Some(1.0),
            "{t}"
        );
        assert_eq!(
            sample(&t, "cfdp_cluster_caught_up{prefix=\"/cfdp/prod\"}"),
            Some(0.0),
            "{t}"
        );
    }

    /// A prefix with a quote, a backslash and a newline is escaped: every
    /// line of the exposition stays one well-formed sample.
    #[test]
    fn only_addresses_and_localhost_pass_the_host_check() {
        for ok in [
            "127.0.0.1:9187",
            "127.0.0.1",
            "localhost:9187",
            "[::1]:9187",
            "[::1]",
        ] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:9187",
            "evil.example",
            "127.0.0.1.nip.io:9187",
            "[::1",
            "",
        ] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        #[derive(Debug)]
        struct C;
        impl Collector for C {
            fn encode(&self, mut e: DescriptorEncoder) -> Res {
                encode_cluster(
                    &mut e,
                    "/a\"b\\c\nd",
                    &crate::api::NodeStatus {
                        generation: 3,
                        ..Default::default()
                    },
                )
            }
        }
        let mut r = Registry::with_prefix("cfdp");
        r.register_collector(Box::new(C));
        let t = render(&r);
        assert_eq!(
            sample(&t, r#"cfdp_cluster_generation{prefix="/a\"b\\c\nd"}"#),
            Some(3.0),
            "{t}"
        );
        assert!(
            t.lines()
                .all(|l| l.starts_with('#') || l.starts_with("cfdp_")),
            "{t}"
        );
    }

    /// HDR values land in the Prometheus bucket whose bound is the first
    /// at or above them; the buckets sum to the count, the sum is the
    /// values' sum (within the HDR histogram's 0.1 %).
    #[test]
    fn hdr_values_land_in_the_right_buckets() {
        let mut h = cfdp_engine::stats::burst_histogram();
        for (v, n) in [
            (100u64, 3u64),
            (250, 2),
            (251, 1),
            (1_000, 4),
            (5_000_000_000, 1),
        ] {
            h.saturating_record_n(v.min(1_000_000_000), n);
        }
        let (b, sum) = hdr_buckets(&h, &[250, 500, 1_000, 2_000]);
        let counts: Vec<u64> = b.iter().map(|x| x.1).collect();
        assert_eq!(counts, [5, 1, 4, 0, 1]);
        assert_eq!(b[0].0, 250e-9);
        assert_eq!(b[4].0, f64::MAX);
        let exact = (3 * 100 + 2 * 250 + 251 + 4 * 1_000 + 1_000_000_000) as f64 / 1e9;
        assert!((sum - exact).abs() / exact < 1e-3, "{sum} vs {exact}");
    }
}
