//! Renderers of the connection table's tables: bursts of opens, table
//! operations, floods through the worker, the answered flood, beside
//! `rte_hash`.

use std::path::Path;

use crate::csv::{num, table, Csv, R};

/// `conntrack`: a burst of new connections into a nearly full table, the
/// Bloom-assisted insert path beside the plain cuckoo walk.
pub(crate) fn conntrack_burst(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack.csv")?;
    let mut rows = Vec::new();
    for r in c.records().iter().filter(|r| r["part"] == "burst") {
        let (path, pct) = r["variant"]
            .split_once('-')
            .ok_or_else(|| format!("{}: variant {}", c.name, r["variant"]))?;
        let us = |k: &str| -> R<String> { Ok(format!("{:.2}", num(r[k], &c.name)? / 1e3)) };
        rows.push(vec![
            format!("{pct} %"),
            if path == "bloom" {
                "Bloom-assisted".into()
            } else {
                "plain cuckoo".into()
            },
            r["n"].to_string(),
            format!(
                "{} · {} · {} · {}",
                us("p50_ns_or_mops")?,
                us("p99_ns")?,
                us("p999_ns")?,
                us("max_ns")?
            ),
            r["refused"].to_string(),
            format!("{:.3}", num(r["load"], &c.name)?),
            r["bloom_items"].to_string(),
        ]);
    }
    Ok(table(
        &[
            "capacity (of the filter's slots)",
            "insert path",
            "burst (new connections)",
            "open µs: p50 · p99 · p99.9 · max",
            "refused",
            "filter load after",
            "Bloom-part items",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack`: lookups and concurrent opens.
pub(crate) fn conntrack_ops(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack.csv")?;
    let mut rows = Vec::new();
    for r in c
        .records()
        .iter()
        .filter(|r| r["part"] != "burst" && r["part"] != "flood")
    {
        let what = match (r["part"], r["variant"]) {
            ("lookup", "established") => "lookup, a packet of an established connection",
            ("lookup", "none") => "lookup, a packet of no connection",
            ("concurrent", _) => "open a connection and look its answer up",
            ("worker", "none") => "worker path, stateless rules, no connection table",
            ("worker", "empty") => "worker path, stateless rules, an empty table",
            ("worker", "100k-other") => {
                "worker path, stateless rules, a table of 100k other connections"
            }
            (p, v) => return Err(format!("{}: row {p},{v}", c.name).into()),
        };
        rows.push(vec![
            what.to_string(),
            r["slots_or_threads"].to_string(),
            format!("{:.2}", num(r["p50_ns_or_mops"], &c.name)?),
        ]);
    }
    Ok(table(&["operation", "threads", "million operations/s"], &rows) + &c.source())
}

/// `conntrack`: the worker under a SYN flood.
pub(crate) fn conntrack_flood(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack.csv")?;
    let mut rows = Vec::new();
    for r in c.records().iter().filter(|r| r["part"] == "flood") {
        rows.push(vec![
            r["variant"].replace('+', " + "),
            format!("{:.2}", num(r["p50_ns_or_mops"], &c.name)?),
            format!("{:.2} %", num(r["load"], &c.name)? * 100.0),
        ]);
    }
    Ok(table(
        &[
            "traffic (one worker)",
            "Mpps",
            "established connections kept",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack`: the answered SYN flood at the table, and what a refused
/// open costs (`conntrack_answered_flood.csv`).
pub(crate) fn conntrack_answered_flood(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack_answered_flood.csv")?;
    let mut rows = Vec::new();
    let us = |r: &std::collections::BTreeMap<&str, &str>, k: &str| -> R<String> {
        Ok(format!("{:.2}", num(r[k], &c.name)? / 1000.0))
    };
    for r in c.records() {
        rows.push(vec![
            format!("{} · {}", r["capacity"], r["established"]),
            r["flood_syns"].to_string(),
            format!(
                "{} · {} · {}",
                us(&r, "open_p50_ns")?,
                us(&r, "open_p99_ns")?,
                us(&r, "open_p999_ns")?
            ),
            format!(
                "{} · {} · {}",
                us(&r, "refused_p50_ns")?,
                us(&r, "refused_p99_ns")?,
                us(&r, "refused_max_ns")?
            ),
            format!("{:.2} %", num(r["legit_completed_share"], &c.name)? * 100.0),
            format!(
                "{:.2} %",
                num(r["established_kept_share"], &c.name)? * 100.0
            ),
        ]);
    }
    Ok(table(
        &[
            "capacity · established",
            "answered flood SYNs",
            "open µs: p50 · p99 · p99.9",
            "refused open (full table) µs: p50 · p99 · max",
            "legitimate short connections completed",
            "established kept",
        ],
        &rows,
    ) + &c.source())
}

/// cfdp's connection table beside `rte_hash` on the same keys
/// (`conntrack_rte_hash.csv`), with cfdp's ratio in each column (a rate's
/// ratio is cfdp/rte_hash; a latency's, rte_hash/cfdp: above 1 is cfdp
/// ahead either way).
pub(crate) fn conntrack_rte_hash(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack_rte_hash.csv")?;
    let recs = c.records();
    let find = |name: &str| {
        recs.iter()
            .find(|r| r["impl"] == name)
            .ok_or_else(|| format!("{}: no {name} row", c.name))
    };
    let (ours, theirs) = (find("cfdp")?, find("rte_hash")?);
    let cols = [
        ("insert p50 (ns)", "insert_p50_ns", false),
        ("insert p99 (ns)", "insert_p99_ns", false),
        ("insert p99.9 (ns)", "insert_p999_ns", false),
        ("failed inserts", "failed", false),
        ("lookup, established (M/s)", "lookup_mops", true),
        (
            "lookup, established, 32 at a time (M/s)",
            "lookup_bulk_mops",
            true,
        ),
        ("lookup, stranger (M/s)", "stranger_mops", true),
    ];
    let mut rows = Vec::new();
    for (label, col, rate) in cols {
        let (a, b) = (num(ours[col], &c.name)?, num(theirs[col], &c.name)?);
        let ratio = match (rate, a, b) {
            (_, a, b) if a == 0.0 && b == 0.0 => "=".to_owned(),
            (true, a, b) if b > 0.0 => format!("{:.2}×", a / b),
            (false, a, b) if a > 0.0 => format!("{:.2}×", b / a),
            _ => "–".to_owned(),
        };
        let fmt = |x: f64| {
            if rate {
                format!("{x:.2}")
            } else {
                format!("{x:.0}")
            }
        };
        rows.push(vec![label.to_owned(), fmt(a), fmt(b), ratio]);
    }
    let (pages_ours, pages_theirs) = (ours["pages"], theirs["pages"]);
    Ok(table(
        &[
            "figure",
            &format!("cfdp ({pages_ours} pages)"),
            &format!("rte_hash (RW_CONCURRENCY_LF, crc, {pages_theirs} pages)"),
            "cfdp's ratio",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack --part scaling`: opens, lookups and both from 1..N threads.
pub(crate) fn conntrack_scaling(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack_scaling.csv")?;
    let mut rows = Vec::new();
    for r in c.records() {
        let work = match r["workload"] {
            "opens" => "open a connection (its SYN)",
            "lookups" => "look up an established connection's packet",
            "mixed" => "open, and look the answer up",
            other => return Err(format!("{}: workload {other}", c.name).into()),
        };
        rows.push(vec![
            work.to_string(),
            r["threads"].to_string(),
            format!("{:.2}", num(r["mops"], &c.name)?),
            format!("{:.2}×", num(r["vs_one_thread"], &c.name)?),
        ]);
    }
    Ok(table(
        &[
            "operation",
            "threads",
            "million operations/s",
            "× one thread",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack --part scaling` on a machine with many cores: a row per
/// thread count, the three operations side by side.
pub(crate) fn conntrack_scaling_wide(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let mut rows = Vec::new();
    for t in c.distinct("threads")? {
        let mut row = vec![t.to_string()];
        for work in ["opens", "lookups", "mixed"] {
            let want = [("workload", work), ("threads", t)];
            row.push(format!(
                "{:.2} ({:.2}×)",
                c.value(&want, "mops")?,
                c.value(&want, "vs_one_thread")?
            ));
        }
        rows.push(row);
    }
    Ok(table(
        &[
            "threads",
            "opens, M/s (× one thread)",
            "lookups of established connections",
            "open + look the answer up",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack --part scaling` before and after a change on a many-core
/// machine, the two binaries' sweeps alternated: per thread count, each
/// operation's median of the sweeps and the ratio.
pub(crate) fn conntrack_scaling_ab(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let mut rows = Vec::new();
    for t in c.distinct("threads")? {
        let mut row = vec![t.to_string()];
        for work in ["opens", "mixed", "lookups"] {
            let at = |build| {
                c.median_where(
                    &[("build", build), ("workload", work), ("threads", t)],
                    "mops",
                )
            };
            let (before, after) = (at("before")?, at("after")?);
            row.push(format!("{before:.2} → {after:.2} ({:.2}×)", after / before));
        }
        rows.push(row);
    }
    Ok(table(
        &[
            "threads",
            "opens, M/s: before → after (after / before)",
            "open + look the answer up",
            "lookups of established connections",
        ],
        &rows,
    ) + &c.source())
}

/// `conntrack-rte-hash.sh`'s writers: cfdp's opens and `rte_hash`'s
/// multi-writer inserts from 1 and 2 threads.
pub(crate) fn conntrack_rte_hash_writers(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack_rte_hash_writers.csv")?;
    let get = |imp: &str, t: &str| c.value(&[("impl", imp), ("threads", t)], "mops");
    let mut rows = Vec::new();
    for t in ["1", "2"] {
        let (ours, theirs) = (get("cfdp", t)?, get("rte_hash", t)?);
        rows.push(vec![
            t.to_string(),
            format!("{ours:.2}"),
            format!("{theirs:.2}"),
            format!("{:.2}×", ours / theirs),
        ]);
    }
    Ok(table(
        &[
            "threads",
            "cfdp opens (M/s)",
            "rte_hash multi-writer inserts (M/s)",
            "cfdp's ratio",
        ],
        &rows,
    ) + &c.source())
}
