//! Renderers of the data plane's tables: the worker and architecture
//! A/Bs, large rule sets, multi-core scaling (ClassBench: classbench.rs).

use std::path::Path;

use crate::csv::{count_short, f2, median, num, table, thousands, Csv, R};

/// `worker-ab`: the pipeline before and after the worker changes.
pub(crate) fn worker_ab(d: &Path) -> R<String> {
    let c = Csv::load(d, "worker_ab.csv")?;
    let recs = c.records();
    let [old, new] = c.distinct("build")?[..] else {
        return Err("worker_ab.csv: two builds expected".into());
    };
    let mut rows = Vec::new();
    for r in recs.iter().filter(|r| r["build"] == new) {
        let (rules, m) = (r["rules"], r["match_pct"]);
        let o = c.find(&[("build", old), ("rules", rules), ("match_pct", m)])?;
        let oc = |k: &str| -> R<String> { Ok(o[c.col(k)?].clone()) };
        let pair = |k: &str| -> R<String> {
            let (a, b) = (oc(k)?, r[k].to_owned());
            Ok(if a.is_empty() && b.is_empty() {
                "–".into()
            } else {
                format!("{a} → {b}")
            })
        };
        let ratio = num(r["filter_mpps"], &c.name)? / num(r["exact_mpps"], &c.name)?;
        rows.push(vec![
            thousands(num(rules, &c.name)? as u64),
            m.to_owned(),
            pair("filter_mpps")?,
            pair("filter_only_mpps")?,
            pair("exact_mpps")?,
            f2(ratio),
        ]);
    }
    Ok(table(
        &[
            "rules",
            "match %",
            "filter (verify) old → new",
            "filter-only old → new",
            "exact old → new",
            "filter / exact, new",
        ],
        &rows,
    ) + &c.source())
}

/// `architecture-memory` and `architecture-dpdk`: the restructuring A/B.
pub(crate) fn architecture(d: &Path, dpdk: bool) -> R<String> {
    let c = Csv::load(d, "architecture_ab.csv")?;
    let v = |tree: &str, backend: &str, imp: &str, rules: &str, m: &str| {
        c.value(
            &[
                ("tree", tree),
                ("backend", backend),
                ("impl", imp),
                ("rules", rules),
                ("match_pct", m),
            ],
            "mpps_median",
        )
    };
    if dpdk {
        let rows = [
            ("net_null", "dpdk-null"),
            (
                "net_pcap (infinite_rx, 64-byte UDP, 1 % matching)",
                "dpdk-pcap",
            ),
        ]
        .iter()
        .map(|(label, b)| {
            Ok(vec![
                label.to_string(),
                format!(
                    "{} → {}",
                    f2(v("base", b, "filter", "1000000", "1")?),
                    f2(v("new", b, "filter", "1000000", "1")?)
                ),
            ])
        })
        .collect::<R<Vec<_>>>()?;
        return Ok(table(
            &[
                "DPDK `cfdp run`, 1M rules, 1 worker pinned, 30 s",
                "old → new Mpps",
            ],
            &rows,
        ) + &c.source());
    }
    let mut rows = Vec::new();
    for rules in ["1000", "100000", "1000000"] {
        for m in ["1", "50"] {
            let p = |imp| -> R<String> {
                Ok(format!(
                    "{} → {}",
                    f2(v("base", "memory", imp, rules, m)?),
                    f2(v("new", "memory", imp, rules, m)?)
                ))
            };
            rows.push(vec![
                thousands(rules.parse().unwrap_or(0)),
                m.to_owned(),
                p("filter")?,
                p("exact")?,
            ]);
        }
    }
    Ok(table(
        &[
            "rules",
            "match %",
            "filter (verify) Mpps old → new",
            "exact Mpps old → new",
        ],
        &rows,
    ) + &c.source())
}

/// `large-rules`: ready time and bytes per rule by size and mode.
pub(crate) fn large_rules(d: &Path) -> R<String> {
    let c = Csv::load(d, "large_rules.csv")?;
    let recs = c.records();
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for mode in ["verify", "filter-only"] {
        for r in &recs {
            if r["mode"] == mode && r["rules"] != "0" && !keys.contains(&(r["rules"], mode)) {
                keys.push((r["rules"], mode));
            }
        }
    }
    let mut rows = Vec::new();
    for (rules, mode) in keys {
        let f = |src: &str, k: &str| -> R<f64> {
            c.value(&[("rules", rules), ("mode", mode), ("source", src)], k)
        };
        rows.push(vec![
            count_short(num(rules, &c.name)? as u64),
            mode.to_owned(),
            format!("{:.2} s", f("file", "ready_s")?),
            format!("{:.2} s", f("snapshot", "ready_s")?),
            format!("{:.0} B", f("file", "rss_per_rule")?),
            format!("{:.0} B", f("file", "peak_per_rule")?),
            format!("{:.0} B", f("file", "accounted_per_rule")?),
        ]);
    }
    Ok(table(
        &[
            "rules",
            "mode",
            "ready from file",
            "ready from snapshot",
            "RSS per rule",
            "peak RSS per rule",
            "accounted per rule (`stats` → `memory`)",
        ],
        &rows,
    ) + &c.source())
}

/// `large-rules-components*`: the store's own accounting (`stats` →
/// `memory`) by component, bytes per rule, for each size and mode of a
/// large-rules CSV (rule file loads; with `build`, that build's first
/// round).
pub(crate) fn large_rules_components(d: &Path, file: &str, build: Option<&str>) -> R<String> {
    let c = Csv::load(d, file)?;
    let recs: Vec<_> = c
        .records()
        .into_iter()
        .filter(|r| {
            r["source"] == "file"
                && r["rules"] != "0"
                && build.is_none_or(|b| r["build"].starts_with(b) && r["round"] == "1")
        })
        .collect();
    if recs.is_empty() {
        return Err(format!(
            "{file}: no rule-file loads{}",
            build.map_or(String::new(), |b| format!(" of {b}"))
        )
        .into());
    }
    let mut rows = Vec::new();
    for mode in ["verify", "filter-only"] {
        for r in recs.iter().filter(|r| r["mode"] == mode) {
            let n = num(r["rules"], &c.name)?;
            let per = |k: &str| -> R<String> { Ok(format!("{:.0} B", num(r[k], &c.name)? / n)) };
            rows.push(vec![
                count_short(n as u64),
                mode.to_owned(),
                per("rule_store")?,
                per("tables")?,
                per("filters")?,
                per("rule_counters")?,
                per("other")?,
                format!("{:.0} B", num(r["accounted_per_rule"], &c.name)?),
            ]);
        }
    }
    Ok(table(
        &[
            "rules",
            "mode",
            "rule store",
            "tables (both copies)",
            "filters",
            "rule counters (1 worker)",
            "other",
            "total",
        ],
        &rows,
    ) + &c.source())
}

/// `large-rules-filter-only`: memory per rule of an old and a new build,
/// alternated, per size and mode (each build's runs in order).
pub(crate) fn large_rules_filter_only(d: &Path) -> R<String> {
    let c = Csv::load(d, "large_rules_filter_only.csv")?;
    let recs = c.records();
    let [old, new] = c.distinct("build")?[..] else {
        return Err("large_rules_filter_only.csv: two builds expected".into());
    };
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for mode in ["filter-only", "verify"] {
        for r in &recs {
            if r["mode"] == mode && !keys.contains(&(r["rules"], mode)) {
                keys.push((r["rules"], mode));
            }
        }
    }
    let runs = |b: &str, rules: &str, mode: &str, col: &str| -> R<String> {
        let v: Vec<String> = recs
            .iter()
            .filter(|r| {
                r["build"] == b && r["rules"] == rules && r["mode"] == mode && r["source"] == "file"
            })
            .map(|r| num(r[col], &c.name).map(|x| format!("{x:.0} B")))
            .collect::<R<_>>()?;
        Ok(v.join(" · "))
    };
    let mut rows = Vec::new();
    for (rules, mode) in keys {
        let mut row = vec![count_short(num(rules, &c.name)? as u64), mode.to_owned()];
        for col in ["rss_per_rule", "peak_per_rule", "accounted_per_rule"] {
            row.push(runs(old, rules, mode, col)?);
            row.push(runs(new, rules, mode, col)?);
        }
        rows.push(row);
    }
    let h = |what: &str, b: &str| format!("{what}, {b}");
    Ok(table(
        &[
            "rules",
            "mode",
            &h("RSS per rule", old),
            &h("RSS per rule", new),
            &h("peak per rule", old),
            &h("peak per rule", new),
            &h("accounted per rule", old),
            &h("accounted per rule", new),
        ],
        &rows,
    ) + &c.source())
}

/// `large-rules-ab*`: 10 M rules, an old and a new load path alternated
/// (ready times per run, and the peak RSS of the starts from a rule file).
pub(crate) fn large_rules_ab(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let recs = c.records();
    let [old, new] = c.distinct("build")?[..] else {
        return Err(format!("{file}: two builds expected").into());
    };
    // One column's values for a build and source, in run order.
    let runs = |b: &str, src: &str, col: &str, scale: f64| -> R<Vec<f64>> {
        recs.iter()
            .filter(|r| r["build"] == b && r["source"] == src)
            .map(|r| num(r[col], &c.name).map(|x| x * scale))
            .collect()
    };
    // A row: each build's runs, and the ratio of their medians.
    let row = |label: &str, src: &str, col: &str, scale: f64, unit: &str, ratio: &str| {
        let (a, b) = (runs(old, src, col, scale)?, runs(new, src, col, scale)?);
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.2}{unit}"))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        R::Ok(vec![
            label.to_owned(),
            list(&a),
            list(&b),
            format!("{:.2}×{ratio}", median(a.clone()) / median(b.clone())),
        ])
    };
    let mut rows = Vec::new();
    for (src, label) in [
        ("file", "`cfdp run` ready from a rule file"),
        ("snapshot", "`cfdp run` ready from its snapshot"),
        ("replay", "`cfdp replay` with the rule file"),
    ] {
        rows.push(row(label, src, "ready_s", 1.0, "", "")?);
    }
    rows.push(row(
        "peak RSS, `cfdp run` from a rule file",
        "file",
        "peak_rss_bytes",
        1e-9,
        " GB",
        " less",
    )?);
    let (h_old, h_new) = (format!("{old}, s"), format!("{new}, s"));
    Ok(table(
        &[
            "10 M exact-flow rules",
            &h_old,
            &h_new,
            "speed-up (medians)",
        ],
        &rows,
    ) + &c.source())
}

/// `scaling`: aggregate read rates with 1..N threads (the filter's batched
/// lookups, the ClassBench worker path, `cfdp replay`), with the writer's
/// rate beside the rates measured under it.
pub(crate) fn scaling(d: &Path) -> R<String> {
    let c = Csv::load(d, "scaling.csv")?;
    let get = |part: &str, t: &str, writer: &str, col: &str| {
        c.value(&[("part", part), ("threads", t), ("writer", writer)], col)
    };
    let mut rows = Vec::new();
    for t in c.distinct("threads")? {
        let cell = |part: &str| -> R<String> {
            let alone = get(part, t, "false", "mops")?;
            let under = get(part, t, "true", "mops")?;
            let w = get(part, t, "true", "writer_ops_per_s")?;
            Ok(format!(
                "{alone:.1} ({:.1}/thread) · {under:.1} under {}/s",
                alone / num(t, &c.name)?,
                thousands(w.round() as u64)
            ))
        };
        let replay = get("replay", t, "false", "mops").map_or_else(|_| "–".into(), f2);
        rows.push(vec![t.to_string(), cell("filter")?, cell("acl")?, replay]);
    }
    Ok(table(
        &[
            "threads",
            "filter lookups, M/s: alone (per thread) · under a writer",
            "ClassBench acl1_10k worker path, Mpps: alone (per thread) · under a writer",
            "cfdp replay, Mpps",
        ],
        &rows,
    ) + &c.source())
}

/// `scaling-replay-ab`: `cfdp replay` with 1..N workers, the build before
/// the replay changes beside the one after, alternating in one run.
pub(crate) fn scaling_replay_ab(d: &Path) -> R<String> {
    let c = Csv::load(d, "scaling_replay_ab.csv")?;
    let mut rows = Vec::new();
    for t in c.distinct("threads")? {
        let get = |part: &str| c.value(&[("part", part), ("threads", t)], "mops");
        let (old, new) = (get("replay-old")?, get("replay")?);
        rows.push(vec![
            t.to_string(),
            f2(old),
            f2(new),
            format!("{:.2}×", new / old),
        ]);
    }
    Ok(table(
        &["workers", "before, Mpps", "after, Mpps", "after / before"],
        &rows,
    ) + &c.source())
}
