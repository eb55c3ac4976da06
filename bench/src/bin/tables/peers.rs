//! The worker path's tables: cfdp against its peers on the same virtual
//! devices (`ovs.csv`), the worker path from memory (`worker_path.csv`),
//! and established traffic before and after window tracking
//! (`conntrack_window_ab_established.csv`).

use std::path::Path;

use crate::csv::{median, num, table, Csv, R};

/// `bench/ovs.sh`: per workload, each peer's rate, cycles a packet and
/// forwarded share, and cfdp's ratios to OVS and testpmd.
pub(crate) fn ovs(d: &Path) -> R<String> {
    let c = Csv::load(d, "ovs.csv")?;
    let mut rows = Vec::new();
    for w in c.distinct("workload")? {
        let rate = |imp: &str| c.value(&[("workload", w), ("impl", imp)], "mpps").ok();
        let cell = |imp: &str| -> R<String> {
            let recs = c.records();
            let r = recs
                .iter()
                .find(|r| r["workload"] == w && r["impl"] == imp)
                .ok_or_else(|| format!("{}: no {imp} row for {w}", c.name))?;
            let cycles = num(r["cycles_per_packet"], &c.name)?;
            let mpps = num(r["mpps"], &c.name)?;
            // A collapse (OVS on some ClassBench sets) keeps its digits.
            let digits = if mpps < 0.1 { 3 } else { 2 };
            Ok(format!("{mpps:.digits$} Mpps · {cycles:.0}"))
        };
        let (cfdp, ovs) = (rate("cfdp"), rate("ovs-dpdk"));
        let testpmd = rate("testpmd-io");
        // The share each forwarded, and for a ClassBench set the rules
        // whose packet counts differ (empty for the other workloads).
        let share = |imp: &str| -> R<String> {
            let v = c.value(&[("workload", w), ("impl", imp)], "forwarded_share")?;
            Ok(format!("{v:.4}"))
        };
        let diffs = c
            .records()
            .iter()
            .find(|r| r["workload"] == w && r["impl"] == "cfdp")
            .and_then(|r| r.get("verdict_diffs").map(ToString::to_string))
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "–".into());
        rows.push(vec![
            w.to_string(),
            cell("cfdp")?,
            cell("ovs-dpdk")?,
            if testpmd.is_some() {
                cell("testpmd-io")?
            } else {
                "–".into()
            },
            match (cfdp, ovs) {
                (Some(a), Some(b)) => format!("{:.2}×", a / b),
                _ => "–".into(),
            },
            match (cfdp, testpmd) {
                (Some(a), Some(b)) => format!("{:.2}×", a / b),
                _ => "–".into(),
            },
            format!("{} · {}", share("cfdp")?, share("ovs-dpdk")?),
            diffs,
        ]);
    }
    Ok(table(
        &[
            "workload",
            "cfdp (Mpps · cycles)",
            "OVS-DPDK",
            "testpmd io",
            "cfdp / OVS",
            "cfdp / testpmd",
            "forwarded (cfdp · OVS)",
            "rules differing",
        ],
        &rows,
    ) + &c.source())
}

/// `worker-path`: the worker's rate and time a packet from memory.
pub(crate) fn worker_path(d: &Path) -> R<String> {
    let c = Csv::load(d, "worker_path.csv")?;
    let rows = c
        .records()
        .iter()
        .map(|r| {
            vec![
                r["workload"].to_string(),
                r["rules"].to_string(),
                r["mpps"].to_string(),
                r["ns_per_packet"].to_string(),
            ]
        })
        .collect::<Vec<_>>();
    Ok(table(&["workload", "rules", "Mpps", "ns a packet"], &rows) + &c.source())
}

/// `conntrack-window-ab.sh`: established traffic before and after window
/// tracking, run by run, and the median ratio.
pub(crate) fn window_established(d: &Path) -> R<String> {
    let c = Csv::load(d, "conntrack_window_ab_established.csv")?;
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for r in c.records() {
        let ratio = num(r["ratio"], &c.name)?;
        ratios.push(ratio);
        rows.push(vec![
            r["run"].to_string(),
            r["old_established_mpps"].to_string(),
            r["new_established_mpps"].to_string(),
            format!("{ratio:.2}×"),
        ]);
    }
    rows.push(vec![
        "median".into(),
        String::new(),
        String::new(),
        format!("{:.2}×", median(ratios)),
    ]);
    Ok(table(
        &[
            "run",
            "before window tracking (Mpps)",
            "after (Mpps)",
            "after / before",
        ],
        &rows,
    ) + &c.source())
}

/// `flow-export`: the worker with flow export off and on (every packet,
/// sampled, biflow records).
pub(crate) fn flow_export(d: &Path) -> R<String> {
    let c = Csv::load(d, "flow_export.csv")?;
    let rate = c.distinct("sampling")?.join(", ");
    let sampled = format!("on, 1 in {rate} packets (Mpps, / off)");
    let mut rows = Vec::new();
    for r in c.records() {
        let n = |col: &str| num(r[col], &c.name);
        rows.push(vec![
            match r["workload"] {
                "hit" => "every packet's flow cached (hit)".to_string(),
                "miss" => "every packet a new flow, cache full (miss)".to_string(),
                "conversations" => "UDP conversations, stateful rule".to_string(),
                other => other.to_string(),
            },
            r["frames"].to_string(),
            format!("{:.2}", n("off_mpps")?),
            format!("{:.2} ({:.2}×)", n("on_mpps")?, n("on_vs_off")?),
            format!("{:.2} ({:.2}×)", n("sampled_mpps")?, n("sampled_vs_off")?),
            format!("{:.2} ({:.2}×)", n("biflow_mpps")?, n("biflow_vs_off")?),
            format!("{:.2} ({:.2}×)", n("rules_mpps")?, n("rules_vs_off")?),
            format!("{} / {}", r["cached_flows"], r["biflow_records"]),
            format!(
                "{:.0} / {:.0}",
                n("cache_bytes_per_flow")?,
                n("biflow_bytes_per_record")?
            ),
        ]);
    }
    Ok(table(
        &[
            "traffic",
            "frames",
            "export off (Mpps)",
            "on (Mpps, / off)",
            &sampled,
            "on, biflow records (Mpps, / off)",
            "on, rules named (Mpps, / off)",
            "records cached: uniflow / biflow",
            "bytes a record: uniflow / biflow",
        ],
        &rows,
    ) + &c.source())
}

/// `flow_export_ab.csv`: export on, before and after a change, the two
/// builds alternated: per workload, the medians of the pairs.
pub(crate) fn flow_export_ab(d: &Path) -> R<String> {
    let c = Csv::load(d, "flow_export_ab.csv")?;
    let mut rows = Vec::new();
    for w in c.distinct("workload")? {
        let at = |build, col| c.median_where(&[("build", build), ("workload", w)], col);
        let (off_b, off_a) = (at("before", "off_mpps")?, at("after", "off_mpps")?);
        let (on_b, on_a) = (at("before", "on_mpps")?, at("after", "on_mpps")?);
        let (bi_b, bi_a) = (at("before", "biflow_mpps")?, at("after", "biflow_mpps")?);
        rows.push(vec![
            w.to_string(),
            format!("{off_b:.2} → {off_a:.2} ({:.2}×)", off_a / off_b),
            format!("{on_b:.2} → {on_a:.2} ({:.2}×)", on_a / on_b),
            format!(
                "{:.2}× → {:.2}×",
                at("before", "on_vs_off")?,
                at("after", "on_vs_off")?
            ),
            format!("{bi_b:.2} → {bi_a:.2} ({:.2}×)", bi_a / bi_b),
        ]);
    }
    Ok(table(
        &[
            "traffic",
            "export off, Mpps: before → after",
            "on, every packet",
            "on / off",
            "on, biflow records",
        ],
        &rows,
    ) + &c.source())
}
