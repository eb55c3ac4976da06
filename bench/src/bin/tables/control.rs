//! Renderers of the control path's tables: the control path end to end,
//! folds, the control plane, the fleet, the inline lab, DPDK.

use std::path::Path;

use crate::csv::{count_short, f2, median, num, pct, table, thousands, Csv, R};

/// `control-path`: the real control path, each label's p50 · p99 side by
/// side (labels in the order of the file: e.g. old_a, new_a, old_b, new_b).
pub(crate) fn control_path(d: &Path) -> R<String> {
    let c = Csv::load(d, "control_path.csv")?;
    let labels = c.distinct("label")?;
    let mut rows = Vec::new();
    for (label, cell) in &control_path_rows(&c) {
        let mut row = vec![label.to_string()];
        for l in &labels {
            // A run by an older bench lacks the newer rows.
            row.push(cell(l).unwrap_or_else(|_| "–".into()));
        }
        rows.push(row);
    }
    let mut head = vec![""];
    head.extend(labels.iter().copied());
    Ok(table(&head, &rows) + &c.source())
}

/// One cell of a row of `control-path`, by label.
type Cell<'a> = Box<dyn Fn(&str) -> R<String> + 'a>;

/// The rows of `control-path`: what each shows and how a label's cell is
/// computed from the CSV.
fn control_path_rows(c: &Csv) -> Vec<(&'static str, Cell<'_>)> {
    let v = move |l: &str, what: &str, m: &str| {
        c.value(&[("label", l), ("what", what), ("metric", m)], "value")
    };
    let p50_p99 = move |what: &'static str| -> Cell {
        Box::new(move |l| {
            Ok(format!(
                "{:.2} · {:.2}",
                v(l, what, "rtt_ms_p50")?,
                v(l, what, "rtt_ms_p99")?
            ))
        })
    };
    vec![
        (
            "1024 inserts at 97 %, round trip p50 · p99 (ms)",
            p50_p99("insert 1024"),
        ),
        (
            "1024 inserts, server `wall_us` p50 (ms)",
            Box::new(move |l| Ok(format!("{:.2}", v(l, "insert 1024", "server_ms_p50")?))),
        ),
        (
            "1024 deletes, round trip p50 · p99 (ms)",
            p50_p99("delete 1024"),
        ),
        (
            "single update, round trip p50 · p99 (ms)",
            p50_p99("single update"),
        ),
        (
            "`cfdp ctl ping` process, added to a call (ms)",
            Box::new(move |l| {
                Ok(format!(
                    "{:.2}",
                    v(l, "ctl", "ctl_process_ms_p50")? - v(l, "ctl", "ping_ms_p50")?
                ))
            }),
        ),
        (
            "sustained, batches of 1024, 8 in flight (updates/s)",
            Box::new(move |l| {
                Ok(format!(
                    "{:.0} k",
                    v(l, "sustained", "updates_per_s")? / 1e3
                ))
            }),
        ),
        (
            "worker Mpps during that churn vs quiet",
            Box::new(move |l| {
                Ok(format!(
                    "{:+.1} %",
                    (v(l, "sustained", "worker_mpps_churn")?
                        / v(l, "sustained", "worker_mpps_quiet")?
                        - 1.0)
                        * 100.0
                ))
            }),
        ),
        (
            "worker packets per worker CPU-second, churn vs quiet",
            Box::new(move |l| {
                Ok(format!(
                    "{:+.1} %",
                    (v(l, "sustained", "worker_mp_per_cpu_s_churn")?
                        / v(l, "sustained", "worker_mp_per_cpu_s_quiet")?
                        - 1.0)
                        * 100.0
                ))
            }),
        ),
    ]
}

/// `control-path-stages`: where a batch's round trip goes, µs p50, per label.
pub(crate) fn control_path_stages(d: &Path) -> R<String> {
    let c = Csv::load(d, "control_path.csv")?;
    let recs = c.records();
    let labels = c.distinct("label")?;
    let mut stages: Vec<&str> = Vec::new();
    for r in &recs {
        if r["what"] == "insert 1024"
            && r["metric"].starts_with("stage_")
            && !stages.contains(&r["metric"])
        {
            stages.push(r["metric"]);
        }
    }
    let mut rows = Vec::new();
    for s in stages {
        let mut row = vec![s
            .trim_start_matches("stage_")
            .trim_end_matches("_us_p50")
            .replace('_', " ")];
        for l in &labels {
            row.push(
                match c.value(
                    &[("label", l), ("what", "insert 1024"), ("metric", s)],
                    "value",
                ) {
                    Ok(x) => format!("{x:.0}"),
                    Err(_) => "–".into(),
                },
            );
        }
        rows.push(row);
    }
    let mut head = vec!["1024-insert batch, stage (µs p50)"];
    head.extend(labels.iter().copied());
    Ok(table(&head, &rows) + &c.source())
}

/// `fold-stall`: batch wall times through a fold of the exact tables, per
/// label.
pub(crate) fn fold_stall(d: &Path) -> R<String> {
    let c = Csv::load(d, "fold_stall.csv")?;
    let labels = c.distinct("label")?;
    let spec: [(&str, &str, usize); 5] = [
        ("batch wall p50 (ms)", "batch_ms_p50", 2),
        ("batch wall p99 (ms)", "batch_ms_p99", 1),
        ("batch wall max (ms)", "batch_ms_max", 1),
        (
            "the batch that started the fold (ms)",
            "freezing_batch_ms",
            2,
        ),
        ("folds started · landed", "folds_started", 0),
    ];
    let mut rows = Vec::new();
    for (name, metric, digits) in spec {
        let mut row = vec![name.to_string()];
        for l in &labels {
            let v = |m: &str| c.value(&[("label", l), ("metric", m)], "value");
            row.push(match (metric, v(metric)) {
                ("folds_started", Ok(x)) => format!("{x:.0} · {:.0}", v("folds_landed")?),
                (_, Ok(x)) => format!("{x:.digits$}"),
                // The old tree folded inside a batch and reported nothing.
                (_, Err(_)) => "–".into(),
            });
        }
        rows.push(row);
    }
    let rules: f64 = c.records().first().ok_or("fold_stall.csv: no rows")?["rules"]
        .parse()
        .map_err(|e| format!("fold_stall.csv: rules: {e}"))?;
    let first = format!("{} M loaded flow rules, churn batches of 4096", rules / 1e6);
    let mut head = vec![first.as_str()];
    head.extend(labels.iter().copied());
    Ok(table(&head, &rows) + &c.source())
}

/// `control-batch`: 1024-insert batches through the rule store.
pub(crate) fn control_batch(d: &Path) -> R<String> {
    let c = Csv::load(d, "control.csv")?;
    let mut rows = Vec::new();
    for r in c.records().iter().filter(|r| r["kind"] == "batch") {
        let path = match r["path"] {
            "cuckoo" => "plain cuckoo",
            "bloom-assisted" => "Bloom-assisted (t = 0)",
            p => p,
        };
        rows.push(vec![
            pct(num(r["occupancy"], &c.name)?, 0),
            path.to_owned(),
            r["p50_us"].to_owned(),
            r["p99_us"].to_owned(),
            r["failed"].to_owned(),
            r["to_bloom"].to_owned(),
        ]);
    }
    Ok(table(
        &[
            "occupancy",
            "path",
            "p50 µs",
            "p99 µs",
            "failed inserts",
            "placed in the Bloom part",
        ],
        &rows,
    ) + &c.source())
}

/// `control-churn`: worker throughput with and without rule churn.
pub(crate) fn control_churn(d: &Path) -> R<String> {
    let c = Csv::load(d, "control.csv")?;
    let mut rows = Vec::new();
    for target in ["10000", "100000", "max"] {
        let churn = c.find(&[("kind", "churn"), ("path", target)])?;
        let quiet = c.find(&[("kind", "churn"), ("path", &format!("none-vs-{target}"))])?;
        let (mc, mq) = (c.col("mpps")?, c.col("updates_per_s")?);
        let (a, b) = (num(&quiet[mc], &c.name)?, num(&churn[mc], &c.name)?);
        rows.push(vec![
            if target == "max" {
                "back to back".into()
            } else {
                format!("{}/s", thousands(num(target, &c.name)? as u64))
            },
            thousands(num(&churn[mq], &c.name)? as u64),
            f2(a),
            f2(b),
            format!("{:+.1} %", (b / a - 1.0) * 100.0),
        ]);
    }
    Ok(table(
        &[
            "churn target",
            "achieved updates/s",
            "no churn Mpps",
            "churn Mpps",
            "change",
        ],
        &rows,
    ) + &c.source())
}

/// `fleet`: apply → wait through etcd, and the sustained / catch-up rows.
pub(crate) fn fleet(d: &Path) -> R<String> {
    let c = Csv::load(d, "fleet.csv")?;
    let mut rows = Vec::new();
    for r in c.records() {
        let n = |k: &str| num(r[k], &c.name);
        rows.push(match r["kind"] {
            "apply_wait" => vec![
                format!("{} updates (flow-rule inserts)", r["updates"]),
                format!("{:.1} ms", n("apply_ms_p50")?),
                format!("{:.1} ms", n("wait_ms_p50")?),
                format!("{:.1} ms", n("total_ms_p50_or_value")?),
                format!("{:.1} ms", n("total_ms_max")?),
            ],
            "sustained" => vec![
                format!("sustained, {} updates", thousands(n("updates")? as u64)),
                String::new(),
                String::new(),
                format!("{:.1} k updates/s", n("total_ms_p50_or_value")? / 1e3),
                String::new(),
            ],
            k => vec![
                format!(
                    "{} of a node {} updates behind",
                    k.replace('_', " "),
                    thousands(n("updates")? as u64)
                ),
                String::new(),
                String::new(),
                format!("{:.1} s", n("total_ms_p50_or_value")?),
                String::new(),
            ],
        });
    }
    Ok(table(
        &[
            "batch",
            "`ctl apply` p50",
            "`ctl wait` (all 3 nodes) p50",
            "apply → all applied, p50",
            "max",
        ],
        &rows,
    ) + &c.source())
}

/// `inline`: the veth lab, medians of the rounds, ratios to testpmd io on
/// the same PMD (AF_PACKET rows, then AF_XDP rows when the run has them).
pub(crate) fn inline(d: &Path) -> R<String> {
    let c = Csv::load(d, "inline.csv")?;
    let recs = c.records();
    let med = |imp: &str, k: &str| -> R<f64> {
        Ok(median(
            recs.iter()
                .filter(|r| r["impl"] == imp)
                .map(|r| num(r[k], &c.name))
                .collect::<R<_>>()?,
        ))
    };
    let rules = count_short(c.value(&[("impl", "cfdp-rules")], "rules")? as u64);
    let mut rows = Vec::new();
    for (suffix, pmd) in [("", "af_packet"), ("-afxdp", "af_xdp")] {
        let peer = format!("testpmd-io{suffix}");
        if !recs.iter().any(|r| r["impl"] == peer) {
            continue;
        }
        let (tcp0, udp0) = (med(&peer, "tcp_gbps")?, med(&peer, "udp64_kpps")?);
        for (imp, label) in [
            ("testpmd-io", "dpdk-testpmd io".to_owned()),
            ("cfdp", "cfdp, no rules".to_owned()),
            (
                "cfdp-rules",
                format!("cfdp, {rules} flow rules (none matching)"),
            ),
        ] {
            let imp = format!("{imp}{suffix}");
            let (t, u) = (med(&imp, "tcp_gbps")?, med(&imp, "udp64_kpps")?);
            rows.push(vec![
                pmd.to_owned(),
                label,
                format!("{t:.3}"),
                f2(t / tcp0),
                format!("{u:.1}"),
                f2(u / udp0),
            ]);
        }
    }
    Ok(table(
        &[
            "PMD",
            "forwarder",
            "TCP (iperf3, 1 stream), Gbit/s",
            "ratio",
            "64-byte UDP delivered, kpps",
            "ratio",
        ],
        &rows,
    ) + &c.source())
}

/// `dpdk`: cfdp against testpmd on virtual devices.
pub(crate) fn dpdk(d: &Path) -> R<String> {
    let c = Csv::load(d, "dpdk.csv")?;
    let mut rows = Vec::new();
    for (b, label) in [
        ("dpdk-null", "net_null (frames are not IP: no rule lookup)"),
        (
            "dpdk-pcap",
            "net_pcap, infinite_rx, 64-byte UDP, 1 % matching",
        ),
    ] {
        let v = |imp: &str| c.value(&[("backend", b), ("impl", imp)], "mpps");
        let (cf, io, ms) = (v("filter")?, v("testpmd-io")?, v("testpmd-macswap")?);
        rows.push(vec![label.to_owned(), f2(cf), f2(io), f2(ms), f2(cf / ms)]);
    }
    Ok(table(
        &[
            "device",
            "cfdp (filter, 1M rules), Mpps",
            "testpmd io",
            "testpmd macswap",
            "cfdp / macswap",
        ],
        &rows,
    ) + &c.source())
}

/// `control-p4runtime`: a 1024-rule batch through the socket and the same
/// rules as a P4Runtime Write, p50 · p99, and P4Runtime's p50 over the
/// socket's.
pub(crate) fn control_p4runtime(d: &Path) -> R<String> {
    let c = Csv::load(d, "control_p4runtime.csv")?;
    let recs = c.records();
    let find = |door: &str, op: &str| {
        recs.iter()
            .find(|r| r["door"] == door && r["op"] == op)
            .ok_or_else(|| format!("{}: no row {door},{op}", c.name))
    };
    let mut rows = Vec::new();
    for op in ["insert", "delete"] {
        let (s, p) = (find("socket", op)?, find("p4runtime", op)?);
        let ms = |r: &std::collections::BTreeMap<&str, &str>, k: &str| num(r[k], &c.name);
        rows.push(vec![
            format!("{} × {op}", s["batch"]),
            format!("{:.2} · {:.2} ms", ms(s, "p50_ms")?, ms(s, "p99_ms")?),
            format!("{:.2} · {:.2} ms", ms(p, "p50_ms")?, ms(p, "p99_ms")?),
            format!("{:.2}×", ms(p, "p50_ms")? / ms(s, "p50_ms")?),
        ]);
    }
    Ok(table(
        &[
            "batch (multi-field rules)",
            "socket p50 · p99",
            "P4Runtime Write p50 · p99",
            "P4Runtime / socket (p50)",
        ],
        &rows,
    ) + &c.source())
}

/// `floods`: each flood's peak memory rise, the Unix socket's one-rule
/// batch round trip meanwhile and the packets received per second.
pub(crate) fn floods(d: &Path) -> R<String> {
    let c = Csv::load(d, "floods.csv")?;
    let mut rows = Vec::new();
    for r in c.records() {
        let n = |k: &str| num(r[k], &c.name);
        rows.push(vec![
            format!("`{}`", r["flood"]),
            format!("{:.1} MiB", n("peak_rise_mib")?),
            format!(
                "{:.2} · {:.2} ms ({} of {} failed)",
                n("probe_p50_ms")?,
                n("probe_max_ms")?,
                r["probe_failures"],
                r["probes"]
            ),
            format!("{:.0}", n("received_pps")?),
            format!("{} · {}", r["held"], r["closed"]),
        ]);
    }
    Ok(table(
        &[
            "flood",
            "peak RSS rise (goal ≤ 64 MiB)",
            "Unix-socket batch p50 · max (goal ≤ 1 s)",
            "packets/s received (paced at 100 k)",
            "flooder's connections held · closed by cfdp",
        ],
        &rows,
    ) + &c.source())
}

/// `p4runtime-read`: a whole-set Read at 10k and 100k rules, per rule.
pub(crate) fn p4runtime_read(d: &Path) -> R<String> {
    let c = Csv::load(d, "p4runtime_read.csv")?;
    let recs = c.records();
    let per_rule = |r: &std::collections::BTreeMap<&str, &str>| num(r["us_per_rule"], &c.name);
    let base = per_rule(recs.first().ok_or("no rows")?)?;
    let mut rows = Vec::new();
    for r in &recs {
        rows.push(vec![
            r["rules"].to_string(),
            format!("{:.3} s", num(r["read_s"], &c.name)?),
            format!("{:.2} µs", per_rule(r)?),
            format!("{:.2}×", per_rule(r)? / base),
        ]);
    }
    Ok(table(
        &[
            "rules",
            "Read of every entry (median)",
            "per rule",
            "per rule / first row's",
        ],
        &rows,
    ) + &c.source())
}
