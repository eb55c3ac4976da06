//! Renderers of the filter's tables: hashes, space, the A/B runs against
//! the paper's code, layouts, the Bloom-Cuckoo reproduction, Table 3,
//! insert latency, lookups.

use std::path::Path;

use crate::csv::{f2, median, num, pct, table, thousands, Csv, R};

/// `hashes`: median ns per hash by key length.
pub(crate) fn hashes(d: &Path) -> R<String> {
    let c = Csv::load(d, "hashes.csv")?;
    let order = c.distinct("hash")?;
    let lens = ["8", "13", "37"];
    let rows = order
        .iter()
        .map(|h| {
            let mut row = vec![if *h == "rapidhash-v3" {
                format!("{h} (chosen)")
            } else {
                h.to_string()
            }];
            for l in lens {
                row.push(f2(c.value(&[("hash", h), ("key_bytes", l)], "ns_per_hash")?));
            }
            Ok(row)
        })
        .collect::<R<Vec<_>>>()?;
    Ok(table(&["hash", "8 B", "13 B", "37 B"], &rows) + &c.source())
}

/// `space`: bits per item and FPR at 95 % load per fingerprint size.
pub(crate) fn space(d: &Path) -> R<String> {
    let c = Csv::load(d, "filter_basics.csv")?;
    let mut rows = Vec::new();
    for r in c.records().iter().filter(|r| r["experiment"] == "space") {
        let f: i32 = num(r["fp_bits"], &c.name)? as i32;
        let bound = 1.0 - (1.0 - 2f64.powi(-f)).powi(8);
        rows.push(vec![
            f.to_string(),
            f2(num(r["bits_per_item"], &c.name)?),
            format!("{:.6}", num(r["fpr"], &c.name)?),
            format!("{bound:.6}"),
            f2(num(r["insert_mops"], &c.name)?),
        ]);
    }
    let log2 = c.find(&[("experiment", "space")])?[c.col("buckets_log2")?].clone();
    Ok(table(
        &[
            "f",
            "bits/item",
            "measured FPR",
            "bound 1−(1−2^−f)^8",
            "insert Mops (empty → 95 %, one writer handle)",
        ],
        &rows,
    ) + &c.source().replacen(
        "<sub>",
        &format!("<sub>2^{log2} buckets, 10^6 negative queries. "),
        1,
    ))
}

/// `filter-ab-22` / `filter-ab-25` (`filter_ab.csv`), `read-ab-22` /
/// `read-ab-25` (`filter_read_ab.csv`) and `issue12-ab-22` /
/// `issue12-ab-25` (`filter_issue12_ab.csv`): old / new / the paper's code,
/// medians of the rounds.
pub(crate) fn filter_ab(d: &Path, file: &str, log2: &str) -> R<String> {
    let c = Csv::load(d, file)?;
    let m = |variant: &str, metric: &str| -> Option<f64> {
        let v: Vec<f64> = c
            .records()
            .iter()
            .filter(|r| {
                r["variant"] == variant
                    && r["buckets_log2"] == log2
                    && r["metric"] == metric
                    && r["layout"] != "packed"
            })
            .filter_map(|r| r["value"].parse().ok())
            .collect();
        (!v.is_empty()).then(|| median(v))
    };
    let cell = |x: Option<f64>| x.map_or("–".to_owned(), f2);
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}×", a / b),
        _ => String::new(),
    };
    let rows: Vec<Vec<String>> = [
        (
            "inserts empty → 95 %, one `insert_hash` call each (M/s)",
            "insert_per_call_mops",
        ),
        (
            "inserts through one `FilterWriter` (M/s)",
            "insert_writer_mops",
        ),
        (
            "bulk build, `Filter::build`, 2 threads (M keys/s)",
            "build_mops",
        ),
        ("lookups, single key (M/s)", "lookup_single_mops"),
        (
            "lookups, batched, 32 per group (M/s)",
            "lookup_batched_mops",
        ),
    ]
    .iter()
    .map(|(label, metric)| {
        let (old, new, r) = (m("old", metric), m("new", metric), m("ref", metric));
        let reference = if r.is_none() && metric.contains("batched") {
            "(no batch API)".to_owned()
        } else if r.is_none() {
            String::new()
        } else {
            cell(r)
        };
        vec![
            label.to_string(),
            cell(old),
            cell(new),
            ratio(new, old),
            reference,
            ratio(new, r),
        ]
    })
    .collect();
    let head = format!("2^{log2} buckets");
    Ok(table(&[&head, "old", "new", "new/old", "ref", "new/ref"], &rows) + &c.source())
}

/// `lookup-anatomy`: single-key lookup rates of cfdp, bare probes and the
/// paper's code, medians of the rounds, each against the paper's code.
pub(crate) fn lookup_anatomy(d: &Path) -> R<String> {
    let c = Csv::load(d, "lookup_anatomy.csv")?;
    let m = |variant: &str, log2: &str| {
        c.median_where(&[("variant", variant), ("buckets_log2", log2)], "mops")
    };
    let variants = [
        (
            "ref-cuckoo12",
            "the paper authors' `Cuckoo12` (no validation, multiply-shift hash, 6-byte buckets)",
        ),
        (
            "bare-multiply-shift",
            "bare probe of one-word buckets, no validation, multiply-shift hash",
        ),
        (
            "bare-rapidhash",
            "bare probe, no validation, rapidhash (cfdp's hash)",
        ),
        (
            "seqlock1-multiply-shift",
            "+ one stripe counter validated, multiply-shift",
        ),
        (
            "seqlock1-rapidhash",
            "+ one stripe counter validated, rapidhash",
        ),
        (
            "seqlock2-multiply-shift",
            "+ both stripe counters (cfdp's protocol), multiply-shift",
        ),
        (
            "seqlock2-rapidhash",
            "+ both stripe counters (cfdp's protocol), rapidhash",
        ),
        ("cfdp-single", "cfdp `Filter::contains_hash` (rapidhash)"),
    ];
    let mut rows = Vec::new();
    for (variant, what) in variants {
        let mut row = vec![what.to_owned()];
        for log2 in ["22", "25"] {
            let (x, r) = (m(variant, log2)?, m("ref-cuckoo12", log2)?);
            row.push(f2(x));
            row.push(format!("{:.2}×", x / r));
        }
        rows.push(row);
    }
    Ok(table(
        &[
            "single-key lookup (f = 12, 50 % positive, hashing included)",
            "2^22 (M/s)",
            "/ref",
            "2^25 (M/s)",
            "/ref",
        ],
        &rows,
    ) + &c.source())
}

/// `build-ab`: the bulk build with and without the leftovers' prefetching,
/// medians of the rounds, per table size.
pub(crate) fn build_ab(d: &Path) -> R<String> {
    let c = Csv::load(d, "filter_build_ab.csv")?;
    let m = |variant: &str, log2: &str, metric: &str| {
        c.median_where(
            &[
                ("variant", variant),
                ("buckets_log2", log2),
                ("metric", metric),
            ],
            "value",
        )
    };
    let mut rows = Vec::new();
    for log2 in c.distinct("buckets_log2")? {
        let mut row = vec![format!("2^{log2}")];
        for metric in ["build_mops", "lookup_batched_mops", "lookup_single_mops"] {
            let (old, new) = (m("old", log2, metric)?, m("new", log2, metric)?);
            row.push(format!("{} → {}", f2(old), f2(new)));
        }
        row.push(format!(
            "{:.2}×",
            m("new", log2, "build_mops")? / m("old", log2, "build_mops")?
        ));
        rows.push(row);
    }
    Ok(table(
        &[
            "buckets",
            "bulk build, M keys/s",
            "batched lookups, M/s",
            "single-key lookups, M/s",
            "build new/old",
        ],
        &rows,
    ) + &c.source())
}

/// `read-ab-layouts`: old / new for f = 12 with a 1-bit Bloom field, word
/// and packed layouts, medians of the rounds.
pub(crate) fn read_ab_layouts(d: &Path) -> R<String> {
    let c = Csv::load(d, "filter_read_ab.csv")?;
    let m = |variant: &str, layout: &str, metric: &str| {
        c.median_where(
            &[("variant", variant), ("layout", layout), ("metric", metric)],
            "value",
        )
    };
    let mut rows = Vec::new();
    for layout in ["word", "packed"] {
        let mut row = vec![
            layout.to_owned(),
            f2(m("new-bloom1", layout, "bits_per_item")?),
        ];
        for metric in ["lookup_single_mops", "lookup_batched_mops"] {
            let (old, new) = (
                m("old-bloom1", layout, metric)?,
                m("new-bloom1", layout, metric)?,
            );
            row.push(format!("{} → {}", f2(old), f2(new)));
            row.push(format!("{:.2}×", new / old));
        }
        rows.push(row);
    }
    Ok(table(
        &[
            "layout (f = 12, 1-bit Bloom field, 2^22)",
            "bits/item",
            "single-key old → new (M/s)",
            "",
            "batched old → new (M/s)",
            "",
        ],
        &rows,
    ) + &c.source())
}

/// `layouts`: word vs packed layout at 2^22.
pub(crate) fn layouts(d: &Path) -> R<String> {
    let c = Csv::load(d, "filter_basics.csv")?;
    let mut rows = Vec::new();
    for l in ["word", "packed"] {
        let r = c.find(&[("experiment", &format!("layout-{l}"))])?;
        let g = |k: &str| -> R<String> { Ok(f2(num(&r[c.col(k)?], &c.name)?)) };
        rows.push(vec![
            l.to_owned(),
            g("bits_per_item")?,
            g("insert_mops")?,
            g("single_mops")?,
            g("batched_mops")?,
        ]);
    }
    Ok(table(
        &[
            "layout",
            "bits/item",
            "inserts (M/s, writer handle)",
            "single-key lookups (M/s)",
            "batched lookups (M/s)",
        ],
        &rows,
    ) + &c.source())
}

/// `bcf-burst` (the occupancy experiment) and `bcf-burst-size` (the
/// burst-size experiment): the CSV holds the first, then the second (which
/// starts at the first row of burst 0).
pub(crate) fn bcf_burst(d: &Path, sizes: bool) -> R<String> {
    let c = Csv::load(d, "bcf_burst.csv")?;
    let recs = c.records();
    let split = recs
        .iter()
        .position(|r| r["burst"] == "0")
        .unwrap_or(recs.len());
    let (occ, size) = recs.split_at(split);
    if sizes {
        bcf_sizes(&c, size)
    } else {
        bcf_occupancy(&c, occ)
    }
}

type Record<'a> = std::collections::BTreeMap<&'a str, &'a str>;

/// `bcf-burst` by occupancy: one row per filter and occupancy, the
/// thresholds side by side.
fn bcf_occupancy(c: &Csv, occ: &[Record<'_>]) -> R<String> {
    let n = |s: &str| num(s, &c.name);
    let slash = |v: Vec<String>| v.join(" / ");
    let mut rows = Vec::new();
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for r in occ {
        let key = (r["filter"], r["occupancy"]);
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let group: Vec<_> = occ
            .iter()
            .filter(|x| (x["filter"], x["occupancy"]) == key)
            .collect();
        let col = |k: &str, fmt: &dyn Fn(f64) -> String| -> R<String> {
            Ok(slash(
                group.iter().map(|x| n(x[k]).map(fmt)).collect::<R<_>>()?,
            ))
        };
        let fprs: Vec<&str> = group.iter().map(|x| x["fpr"]).collect();
        let fpr = if fprs.len() > 1 && fprs.iter().all(|f| *f == fprs[0]) {
            format!("{:.5} (all t)", n(fprs[0])?)
        } else {
            col("fpr", &|x| format!("{x:.5}"))?
        };
        rows.push(vec![
            r["filter"].to_owned(),
            r["occupancy"].to_owned(),
            if r["t"] == "none" {
                "–".into()
            } else {
                slash(group.iter().map(|x| x["t"].to_owned()).collect())
            },
            col("max_iter_seen", &|x| format!("{x:.0}"))?,
            col("mean_iter", &|x| format!("{x:.3}"))?,
            col("bloom_items", &|x| format!("{x:.1}"))?,
            fpr,
        ]);
    }
    Ok(table(
        &[
            "filter",
            "occupancy",
            "t",
            "max iter",
            "mean iter",
            "Bloom elements",
            "FPR",
        ],
        &rows,
    ) + &c.source())
}

/// `bcf-burst-sizes`: by burst size, each filter's max / mean iterations
/// and FPR.
fn bcf_sizes(c: &Csv, size: &[Record<'_>]) -> R<String> {
    let n = |s: &str| num(s, &c.name);
    let get = |filter: &str, t: &str, burst: &str, k: &str| -> R<f64> {
        size.iter()
            .find(|r| r["filter"] == filter && r["t"] == t && r["burst"] == burst)
            .ok_or_else(|| format!("bcf_burst.csv: no {filter} t={t} burst {burst}").into())
            .and_then(|r| n(r[k]))
    };
    let mut bursts: Vec<&str> = size.iter().map(|r| r["burst"]).collect();
    bursts.dedup();
    let mut rows = Vec::new();
    for b in bursts {
        let mm = |f: &str, t: &str| -> R<String> {
            Ok(if b == "0" {
                "–".into()
            } else {
                format!(
                    "{:.0} / {:.3}",
                    get(f, t, b, "max_iter_seen")?,
                    get(f, t, b, "mean_iter")?
                )
            })
        };
        let fpr = |f: &str, t: &str| -> R<String> { Ok(format!("{:.5}", get(f, t, b, "fpr")?)) };
        rows.push(vec![
            b.to_owned(),
            mm("cf", "none")?,
            mm("bcf", "0")?,
            mm("bcf", "10")?,
            format!("{} / {}", fpr("bcf", "0")?, fpr("bcf", "10")?),
            fpr("bcf-tag", "0")?,
        ]);
    }
    Ok(table(
        &[
            "burst",
            "cf max / mean",
            "bcf t=0 max / mean",
            "bcf t=10 max / mean",
            "bcf FPR t=0 / t=10",
            "bcf-tag FPR",
        ],
        &rows,
    ) + &c.source())
}

/// `table3`: CoNEXT Table 3 with the peers.
pub(crate) fn table3(d: &Path) -> R<String> {
    let c = Csv::load(d, "table3.csv")?;
    let label = |i: &str| -> String {
        match i {
            "cfdp-cf" => "cfdp-cf (f = 12)",
            "cfdp-cf-f15" => "cfdp-cf-f15 (f = 15, same memory)",
            "cfdp-bcf" => "cfdp-bcf (bit, t = 5, to first failure)",
            "cfdp-bcf-tag" => "cfdp-bcf-tag (16-bit tags, t = 5)",
            "fastbloom" => "fastbloom (same memory as cfdp-cf, rapidhash)",
            "cuckoofilter" => "cuckoofilter crate (8-bit, rapidhash)",
            "xorf-bfuse8" => "xorf BinaryFuse8 (static)",
            "xorf-bfuse16" => "xorf BinaryFuse16 (static)",
            "hashbrown" => "hashbrown HashSet<u64> (exact)",
            other => other,
        }
        .to_owned()
    };
    let mut rows = Vec::new();
    for r in c.records() {
        let fpr = num(r["fpr"], &c.name)?;
        rows.push(vec![
            label(r["impl"]),
            thousands(num(r["items"], &c.name)? as u64),
            f2(num(r["bits_per_item"], &c.name)?),
            if fpr == 0.0 {
                "0".into()
            } else if fpr < 1e-4 {
                pct(fpr, 4)
            } else {
                pct(fpr, 3)
            },
            f2(num(r["construct_mkeys"], &c.name)?),
        ]);
    }
    Ok(table(
        &["impl", "items", "bits/item", "FPR", "construction Mkeys/s"],
        &rows,
    ) + &c.source())
}

/// `insert-latency`: ns per insert by cuckoo-entry occupancy band.
pub(crate) fn insert_latency(d: &Path) -> R<String> {
    let c = Csv::load(d, "insert_latency.csv")?;
    let mut rows = Vec::new();
    for r in c.records() {
        let n = |k: &str| num(r[k], &c.name);
        let band = r["band"]
            .split('-')
            .map(|x| format!("{:.0}", num(x, &c.name).unwrap_or(f64::NAN) * 100.0))
            .collect::<Vec<_>>()
            .join("–");
        let fpr = n("fpr")?;
        rows.push(vec![
            r["filter"].replace("bloom-t", "bloom t="),
            format!("{band} %"),
            thousands(n("mean_ns")?.round() as u64),
            thousands(n("p50_ns")? as u64),
            thousands(n("p99_ns")? as u64),
            thousands(n("p999_ns")? as u64),
            r["failures"].to_owned(),
            thousands(n("bloom_items")? as u64),
            if fpr < 0.01 { pct(fpr, 2) } else { pct(fpr, 1) },
        ]);
    }
    Ok(table(
        &[
            "path",
            "cuckoo occupancy",
            "mean",
            "p50",
            "p99",
            "p99.9",
            "failures",
            "Bloom items",
            "FPR",
        ],
        &rows,
    ) + &c.source())
}

/// `lookup`: lookup rates at 2^25 buckets, cfdp single and batched beside
/// the peers (single key; they have no batch API).
pub(crate) fn lookup(d: &Path) -> R<String> {
    let c = Csv::load(d, "lookup.csv")?;
    let get = |imp: &str, load: &str, p: &str, batched: &str| {
        c.value(
            &[
                ("impl", imp),
                ("buckets_log2", "25"),
                ("load", load),
                ("positive_pct", p),
                ("batched", batched),
                ("threads", "1"),
                ("writer", "false"),
            ],
            "mops",
        )
        .map(|x| format!("{x:.1}"))
    };
    let mut rows = Vec::new();
    for load in ["0.5", "0.95"] {
        for p in ["0", "50", "100"] {
            rows.push(vec![
                format!("{:.2}", num(load, &c.name)?),
                p.to_owned(),
                get("cfdp", load, p, "false")?,
                get("cfdp", load, p, "true")?,
                get("cuckoofilter", load, p, "false")?,
                get("fastbloom", load, p, "false")?,
                get("xorf", load, p, "false")?,
                get("hashbrown", load, p, "false")?,
            ]);
        }
    }
    Ok(table(
        &[
            "load",
            "positive %",
            "cfdp single",
            "cfdp batched",
            "cuckoofilter",
            "fastbloom",
            "xorf BinaryFuse8",
            "hashbrown",
        ],
        &rows,
    ) + &c.source())
}

/// `lookup-scaling`: batched readers with and without a writer at 2^22.
pub(crate) fn lookup_scaling(d: &Path) -> R<String> {
    let c = Csv::load(d, "lookup.csv")?;
    let get = |threads: &str, writer: &str| {
        c.value(
            &[
                ("impl", "cfdp"),
                ("buckets_log2", "22"),
                ("threads", threads),
                ("writer", writer),
            ],
            "mops",
        )
        .map(|x| format!("{x:.1}"))
    };
    let rows = ["1", "2"]
        .iter()
        .map(|t| Ok(vec![t.to_string(), get(t, "false")?, get(t, "true")?]))
        .collect::<R<Vec<_>>>()?;
    Ok(table(&["readers", "no writer", "with writer"], &rows) + &c.source())
}
