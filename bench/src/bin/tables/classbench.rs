//! Renderers of the multi-field classifier's tables on ClassBench sets:
//! cfdp beside rte_acl, the worst cases, the compile's cost.

use std::path::Path;

use crate::csv::{f2, num, table, Csv, R};

/// The `classbench` table's columns.
const CLASSBENCH_COLUMNS: [&str; 20] = [
    "set",
    "rules",
    "rte_acl best Mpps (alg)",
    "cfdp batched",
    "/ best",
    "cfdp single",
    "/ best",
    "rte_acl 32 a call (alg): cfdp batched /",
    "rte_acl 1 a call (alg): cfdp single /",
    "worker path",
    "IPv6 batched / rte_acl's best (verdict diffs)",
    "replay (1 worker)",
    "tables / probed a packet",
    "store build s",
    "cfdp MB (as built; after the updates)",
    "rte_acl MB",
    "compiled MB (build s)",
    "batched after 10 % churn (same ids; new ids)",
    "update p99 µs insert / delete",
    "verdict diffs / replay rule diffs",
];

/// `classbench`: cfdp's multi-field classifier beside rte_acl's fastest
/// algorithm on each ClassBench set (`bench/classbench.sh`).
pub(crate) fn classbench(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let recs = c.records();
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        let of = |impl_: &str| recs.iter().find(|r| r["set"] == set && r["impl"] == impl_);
        let mpps = |impl_: &str| -> R<f64> {
            let r = of(impl_).ok_or_else(|| format!("classbench.csv: no {impl_} for {set}"))?;
            num(r["mpps"], &c.name)
        };
        let (best_alg, best) = rte_acl_best(&recs, set, "", &c)?
            .ok_or_else(|| format!("classbench.csv: no rte_acl rows for {set}"))?;
        let single = of("cfdp-single").ok_or("classbench.csv: no cfdp-single row")?;
        let (batched, one) = (mpps("cfdp-batched")?, mpps("cfdp-single")?);
        let replay = of("cfdp-replay");
        let (compiled, churned) = compiled_cols(
            single,
            [
                of("cfdp-batched-churned"),
                of("cfdp-batched-churned-new-ids"),
            ],
            batched,
            &c,
        )?;
        let acl_mb = rte_acl_mb(&recs, set, &c)?;
        // IPv6 rows came with the --v6 runs (2026-11-26 on), rte_acl's
        // IPv6 rows on 2026-11-28: "–" before.
        let v6 = match (of("cfdp-batched-v6"), rte_acl_best(&recs, set, "-v6", &c)?) {
            (Some(r), Some((alg, acl))) => {
                let m = num(r["mpps"], &c.name)?;
                format!(
                    "{} / {} ({alg}): {:.2}× ({})",
                    f2(m),
                    f2(acl),
                    m / acl,
                    r["verdict_diffs"]
                )
            }
            (Some(r), None) => format!("{} ({})", f2(num(r["mpps"], &c.name)?), r["verdict_diffs"]),
            _ => "–".to_string(),
        };
        rows.push(vec![
            set.to_string(),
            single["rules"].to_string(),
            format!("{} ({best_alg})", f2(best)),
            f2(batched),
            vs_best(of("cfdp-batched"), batched / best, &c)?,
            f2(one),
            vs_best(Some(single), one / best, &c)?,
            per_call(rte_acl_best(&recs, set, "-step32", &c)?, batched),
            per_call(rte_acl_best(&recs, set, "-step1", &c)?, one),
            {
                let r = of("cfdp-worker").ok_or("classbench.csv: no cfdp-worker row")?;
                let (w, vs) = paired_over(r, batched, &c)?;
                format!("{} ({vs:.2}× batched)", f2(w))
            },
            v6,
            replay.map_or(Ok("–".to_string()), |r| num(r["mpps"], &c.name).map(f2))?,
            format!("{} / {}", single["tables"], single["probes_per_packet"]),
            single["store_build_s"].to_string(),
            cfdp_mb(single, &c)?,
            acl_mb,
            compiled,
            churned,
            format!("{} / {}", single["insert_us_p99"], single["delete_us_p99"]),
            format!(
                "{} / {}",
                single["verdict_diffs"],
                replay.map_or("–", |r| r["verdict_diffs"])
            ),
        ]);
    }
    Ok(table(&CLASSBENCH_COLUMNS, &rows) + &c.source())
}

/// `classbench-*-avx2`: both sides capped at AVX2 on an AVX-512 CPU (the
/// `cfdp-*-avx2` rows, 2026-12-01 on): cfdp with its leaf kernel's AVX2
/// version beside rte_acl's best of scalar, sse and avx2 (at its default
/// or 32 packets a call).
pub(crate) fn classbench_capped(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let recs = c.records();
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        let of = |impl_: &str| recs.iter().find(|r| r["set"] == set && r["impl"] == impl_);
        let (Some(batched), Some(single)) = (of("cfdp-batched-avx2"), of("cfdp-single-avx2"))
        else {
            continue;
        };
        let capped = ["scalar", "sse", "avx2"]
            .iter()
            .flat_map(|a| [a.to_string(), format!("{a}-step32")])
            .filter_map(|alg| {
                let r = of(&format!("rte_acl-{alg}"))?;
                Some(num(r["mpps"], &c.name).map(|m| (alg, m)))
            })
            .collect::<R<Vec<_>>>()?;
        let (alg, best) = capped
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .ok_or_else(|| format!("{file}: no rte_acl rows up to avx2 for {set}"))?;
        let (b, s) = (
            num(batched["mpps"], &c.name)?,
            num(single["mpps"], &c.name)?,
        );
        rows.push(vec![
            set.to_string(),
            format!("{} ({alg})", f2(best)),
            f2(b),
            vs_best(Some(batched), b / best, &c)?,
            f2(s),
            vs_best(Some(single), s / best, &c)?,
        ]);
    }
    if rows.is_empty() {
        return Err(format!("{file}: no cfdp-*-avx2 rows").into());
    }
    let head = [
        "set",
        "rte_acl best up to AVX2, Mpps (alg)",
        "cfdp batched, AVX2 kernel",
        "/ best",
        "cfdp single, AVX2 kernel",
        "/ best",
    ];
    Ok(table(&head, &rows) + &c.source())
}

/// cfdp's rate over rte_acl's best: the median of the rounds' paired
/// ratios where the run recorded them (`vs_rte_acl_best`, 2026-11-30T06Z
/// on: each round's cfdp rate over the rate in the same round of the
/// rte_acl variant with the highest median), else `medians`, the ratio
/// of the two sides' medians.
fn vs_best(
    row: Option<&std::collections::BTreeMap<&str, &str>>,
    medians: f64,
    c: &Csv,
) -> R<String> {
    match row.and_then(|r| r.get("vs_rte_acl_best").copied().filter(|v| !v.is_empty())) {
        Some(v) => Ok(format!("{:.2}×", num(v, &c.name)?)),
        None => Ok(format!("{medians:.2}×")),
    }
}

/// rte_acl at a fixed count of packets a call (`--tracestep` rows, from
/// 2026-11-29 on; "–" before) beside cfdp's rate for the same count.
fn per_call(acl: Option<(&str, f64)>, cfdp: f64) -> String {
    acl.map_or("–".to_string(), |(alg, m)| {
        format!("{} ({alg}): {:.2}×", f2(m), cfdp / m)
    })
}

/// rte_acl's fastest algorithm on `set` (IPv4 rows at its default or 32
/// packets a call, or those whose name ends in `suffix`: "-v6",
/// "-step32", "-step1"), and its rate.
fn rte_acl_best<'a>(
    recs: &[std::collections::BTreeMap<&'a str, &'a str>],
    set: &str,
    suffix: &str,
    c: &Csv,
) -> R<Option<(&'a str, f64)>> {
    Ok(recs
        .iter()
        .filter(|r| r["set"] == set)
        .filter_map(|r| Some((r["impl"].strip_prefix("rte_acl-")?, r)))
        .filter(|(alg, _)| {
            if suffix.is_empty() {
                // Batched: one packet a call is not a batch.
                !alg.ends_with("-v6") && !alg.ends_with("-step1")
            } else {
                alg.ends_with(suffix)
            }
        })
        .map(|(alg, r)| Ok((alg.trim_end_matches(suffix), num(r["mpps"], &c.name)?)))
        .collect::<R<Vec<_>>>()?
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1)))
}

/// cfdp's classifier, MB: as built and after the update timings (both
/// from 2026-11-28T08Z on; the one figure before, after the updates).
fn cfdp_mb(single: &std::collections::BTreeMap<&str, &str>, c: &Csv) -> R<String> {
    let after = num(single["bytes"], &c.name)? / 1e6;
    Ok(
        match single.get("bytes_fresh").copied().filter(|b| !b.is_empty()) {
            Some(b) => format!("{:.2}; {after:.2}", num(b, &c.name)? / 1e6),
            None => format!("–; {after:.2}"),
        },
    )
}

/// rte_acl's runtime footprint on `set`, MB (2026-11-28 on): "–" before.
fn rte_acl_mb(recs: &[std::collections::BTreeMap<&str, &str>], set: &str, c: &Csv) -> R<String> {
    recs.iter()
        .find(|r| {
            r["set"] == set && r["impl"].starts_with("rte_acl-") && !r["impl"].ends_with("-v6")
        })
        .and_then(|r| r.get("bytes").copied().filter(|b| !b.is_empty()))
        .map_or(Ok("–".to_string()), |b| {
            num(b, &c.name).map(|b| format!("{:.2}", b / 1e6))
        })
}

/// The compiled layer's size and build time, and the batched rate after
/// the churn against the fresh one. They came with the compiled layer
/// (2026-11-28 on): "–" before.
fn compiled_cols(
    single: &std::collections::BTreeMap<&str, &str>,
    [churned, new_ids]: [Option<&std::collections::BTreeMap<&str, &str>>; 2],
    batched: f64,
    c: &Csv,
) -> R<(String, String)> {
    let compiled = match single
        .get("compiled_bytes")
        .copied()
        .filter(|b| !b.is_empty())
    {
        Some(b) => format!(
            "{:.1} ({} s)",
            num(b, &c.name)? / 1e6,
            single.get("compile_s").copied().unwrap_or("–")
        ),
        None => "–".to_string(),
    };
    let over_fresh = |r| paired_over(r, batched, c);
    let mut churned = match churned {
        Some(r) => {
            let (m, vs) = over_fresh(r)?;
            format!("{} ({vs:.2}× fresh)", f2(m))
        }
        None => "–".to_string(),
    };
    // Churned under new ids (2026-11-28 on, with the overlay).
    if let Some(r) = new_ids {
        let (m, vs) = over_fresh(r)?;
        churned += &format!("; new ids {} ({vs:.2}×)", f2(m));
    }
    Ok((compiled, churned))
}

/// A cfdp row's rate and its ratio to `base` (cfdp-batched's rate): paired
/// round by round where the run gives it (the row's vs_rte_acl_best on
/// the cfdp-worker and cfdp-batched-churned rows, 2026-12-02 on), else
/// the medians' ratio.
fn paired_over(r: &std::collections::BTreeMap<&str, &str>, base: f64, c: &Csv) -> R<(f64, f64)> {
    let m = num(r["mpps"], &c.name)?;
    let vs = match r.get("vs_rte_acl_best").filter(|v| !v.is_empty()) {
        Some(v) => num(v, &c.name)?,
        None => m / base,
    };
    Ok((m, vs))
}

/// `classbench-worst`: the cost of a packet that misses every rule and of
/// a 1089-shape set, against the ClassBench trace's mean (single-packet).
pub(crate) fn classbench_worst(d: &Path) -> R<String> {
    let c = Csv::load(d, "classbench.csv")?;
    let recs = c.records();
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        let mpps = |impl_: &str| -> Option<R<f64>> {
            recs.iter()
                .find(|r| r["set"] == set && r["impl"] == impl_)
                .map(|r| num(r["mpps"], &c.name))
        };
        let base = mpps("cfdp-single").ok_or("classbench.csv: no cfdp-single row")??;
        let cost = |m: Option<R<f64>>| -> R<String> {
            Ok(match m {
                None => "– (every packet matches a rule)".into(),
                Some(m) => {
                    let m = m?;
                    format!("{} ({:.1}× the cost)", f2(m), base / m)
                }
            })
        };
        let ports = recs
            .iter()
            .find(|r| r["set"] == set && r["impl"] == "cfdp-ports-live")
            .zip(
                recs.iter()
                    .find(|r| r["set"] == set && r["impl"] == "cfdp-ports-live-desc"),
            );
        let load = match ports {
            Some((a, d)) => {
                let (a, d) = (
                    num(a["store_build_s"], &c.name)?,
                    num(d["store_build_s"], &c.name)?,
                );
                format!("{:.2} / {:.2} ({:.2}×)", a * 1e3, d * 1e3, a / d)
            }
            None => "–".to_string(),
        };
        rows.push(vec![
            set.to_string(),
            f2(base),
            cost(mpps("cfdp-miss"))?,
            cost(mpps("cfdp-explosion"))?,
            mpps("cfdp-ports").map_or(Ok("–".into()), |m| cost(Some(m)))?,
            mpps("cfdp-ports-live").map_or(Ok("–".into()), |m| cost(Some(m)))?,
            load,
        ]);
    }
    Ok(table(
        &[
            "set",
            "ClassBench trace Mpps",
            "miss trace Mpps",
            "1089-shape set Mpps",
            "2,000 port rules, compiled",
            "the same, live layer",
            "their load ms ascending / descending",
        ],
        &rows,
    ) + &c.source())
}

/// `classbench-compile`: the workers' burst latency with nothing else
/// running and while full compiles of the set run back to back on the
/// other core (`classbench --compile-p99`).
pub(crate) fn classbench_compile(d: &Path) -> R<String> {
    let c = Csv::load(d, "classbench_compile_p99.csv")?;
    let recs = c.records();
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        let of = |phase: &str| {
            recs.iter()
                .find(|r| r["set"] == set && r["phase"] == phase)
                .ok_or_else(|| format!("{}: no {phase} row for {set}", c.name))
        };
        let (idle, busy) = (of("idle")?, of("compiling")?);
        let us = |r: &std::collections::BTreeMap<&str, &str>, k: &str| -> R<f64> {
            Ok(num(r[k], &c.name)? / 1e3)
        };
        let row = |r| -> R<String> {
            Ok(format!(
                "{:.2} / {:.2} / {:.2}",
                us(r, "burst_ns_p50")?,
                us(r, "burst_ns_p99")?,
                us(r, "burst_ns_p999")?
            ))
        };
        rows.push(vec![
            set.to_string(),
            format!("{} ({} s)", busy["compiles_during"], busy["compile_s"]),
            row(idle)?,
            row(busy)?,
            format!(
                "{:.2}×",
                us(busy, "burst_ns_p99")? / us(idle, "burst_ns_p99")?
            ),
        ]);
    }
    Ok(table(
        &[
            "set",
            "compiles during (one build)",
            "burst µs p50 / p99 / p99.9, idle",
            "the same, compiling",
            "p99 compiling / idle",
        ],
        &rows,
    ) + &c.source())
}

/// `classbench-pair`: `bench/classbench-pair.sh`'s rounds (prebuilt
/// binaries on a machine that only runs them; rte_acl on 4 KB pages):
/// per set and family, rte_acl's best algorithm (the highest median), and
/// cfdp batched and single, each over that algorithm's rate in the same
/// round (the median of the rounds' ratios), and batched over rte_acl at
/// 32 packets a call the same way. The file's closing `#` lines (the
/// verdict check) go under the table with its run line.
pub(crate) fn classbench_pair(d: &Path, file: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let recs = c.records();
    // Rate by round of one implementation on one set.
    let rounds = |set: &str, imp: &str| -> R<ByRound> {
        recs.iter()
            .filter(|r| r["set"] == set && r["impl"] == imp)
            .map(|r| Ok((r["round"].to_string(), num(r["mpps"], &c.name)?)))
            .collect()
    };
    // The median over the rounds both have of a's rate over b's.
    let paired = |a: &ByRound, b: &ByRound| {
        crate::csv::median(
            a.iter()
                .filter_map(|(r, x)| b.get(r).map(|y| x / y))
                .collect(),
        )
    };
    let step32 = c
        .distinct("impl")?
        .into_iter()
        .find(|i| i.starts_with("rte_acl-") && i.ends_with("-step32"));
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        for fam in ["", "-v6"] {
            let Some((alg, top)) = pair_best(&c, set, fam, &rounds)? else {
                continue;
            };
            let batched = rounds(set, &format!("cfdp-batched{fam}"))?;
            let single = rounds(set, &format!("cfdp-single{fam}"))?;
            let per_call = match (fam, step32) {
                ("", Some(s)) => {
                    let r = rounds(set, s)?;
                    format!(
                        "{} ({}): {:.2}×",
                        f2(median_of(&r)),
                        s[8..].trim_end_matches("-step32"),
                        paired(&batched, &r)
                    )
                }
                _ => "–".to_string(),
            };
            rows.push(vec![
                format!("{set}{}", if fam.is_empty() { "" } else { " IPv6" }),
                format!("{} ({})", f2(median_of(&top)), alg.trim_end_matches(fam)),
                f2(median_of(&batched)),
                format!("{:.2}×", paired(&batched, &top)),
                f2(median_of(&single)),
                format!("{:.2}×", paired(&single, &top)),
                per_call,
            ]);
        }
    }
    // The `classbench` table's columns for the same figures: set, then
    // rte_acl's best through rte_acl at 32 a call.
    let head: Vec<&str> = std::iter::once(CLASSBENCH_COLUMNS[0])
        .chain(CLASSBENCH_COLUMNS[2..8].iter().copied())
        .collect();
    let mut out = table(&head, &rows) + &c.source();
    // The closing `#` lines, in order.
    let text = std::fs::read_to_string(d.join(file))?;
    let notes: Vec<&str> = text
        .lines()
        .rev()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    for n in notes.iter().rev() {
        out.push_str(&format!("<sub>{n}</sub>\n"));
    }
    Ok(out)
}

/// An implementation's rates on one set, by round.
type ByRound = std::collections::BTreeMap<String, f64>;

/// The median of one implementation's rounds.
fn median_of(m: &ByRound) -> f64 {
    crate::csv::median(m.values().copied().collect())
}

/// rte_acl's algorithm with the highest median on `set` in family `fam`
/// ("" IPv4 at its default packets a call, "-v6"), and its rounds
/// (`rounds(set, impl)`).
fn pair_best<'a>(
    c: &'a Csv,
    set: &str,
    fam: &str,
    rounds: &dyn Fn(&str, &str) -> R<ByRound>,
) -> R<Option<(&'a str, ByRound)>> {
    let mut best: Option<(&str, ByRound)> = None;
    for imp in c.distinct("impl")? {
        let Some(alg) = imp.strip_prefix("rte_acl-") else {
            continue;
        };
        let ours = if fam.is_empty() {
            !alg.ends_with("-v6") && !alg.contains("-step")
        } else {
            alg.ends_with(fam)
        };
        let r = rounds(set, imp)?;
        if ours
            && !r.is_empty()
            && best
                .as_ref()
                .is_none_or(|(_, b)| median_of(&r) > median_of(b))
        {
            best = Some((alg, r));
        }
    }
    Ok(best)
}
