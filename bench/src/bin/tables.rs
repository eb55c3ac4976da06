//! Regenerates every results table in `bench/README.md` from the committed
//! CSVs under `bench/results/`, so a figure in the README is always the
//! one a CSV records (with its run: date, commit, machine).
//!
//! ```sh
//! cargo run -p cfdp-bench --bin tables            # rewrite the tables in place
//! cargo run -p cfdp-bench --bin tables -- --check # exit 1 if a table differs (CI)
//! ```
//!
//! A table lives between `<!-- table: NAME -->` and `<!-- /table -->`;
//! NAME picks the renderer below. What the renderers compute (medians of
//! rounds, ratios, differences) they compute from the CSV's rows only. Prose
//! around the tables is written by hand and quotes the same CSVs.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A CSV file as the benches write it: `#` lines (the run record) first.
struct Csv {
    name: String,
    run: Vec<String>,
    cols: Vec<String>,
    rows: Vec<Vec<String>>,
}

type R<T> = Result<T, Box<dyn std::error::Error>>;

impl Csv {
    fn load(dir: &Path, name: &str) -> R<Csv> {
        let path = dir.join(name);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let run: Vec<String> = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .map(|l| l.trim_start_matches('#').trim().to_owned())
            .collect();
        let mut rd = csv::ReaderBuilder::new()
            .comment(Some(b'#'))
            .from_reader(text.as_bytes());
        let cols = rd
            .headers()
            .map_err(|e| format!("{name}: {e}"))?
            .iter()
            .map(str::to_owned)
            .collect();
        let rows = rd
            .records()
            .map(|r| r.map(|r| r.iter().map(str::to_owned).collect()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{name}: {e}"))?;
        let mut c = Csv {
            name: name.to_owned(),
            run,
            cols,
            rows,
        };
        // Files that record the run per row (date, commit, machine columns).
        if c.run.is_empty() {
            if let (Ok(d), Ok(k), Ok(m)) = (c.col("date"), c.col("commit"), c.col("machine")) {
                let mut runs: Vec<String> = Vec::new();
                for r in &c.rows {
                    let line = format!("run {}, commit {}, {}", r[d], r[k], r[m]);
                    if !runs.contains(&line) {
                        runs.push(line);
                    }
                }
                c.run = runs;
            }
        }
        if c.run.is_empty() {
            return Err(format!("{name}: no run record (a first `# run …` line)").into());
        }
        Ok(c)
    }

    fn col(&self, c: &str) -> R<usize> {
        self.cols
            .iter()
            .position(|x| x == c)
            .ok_or_else(|| format!("{}: no column {c}", self.name).into())
    }

    /// Rows as column → value maps.
    fn records(&self) -> Vec<BTreeMap<&str, &str>> {
        self.rows
            .iter()
            .map(|r| {
                self.cols
                    .iter()
                    .map(String::as_str)
                    .zip(r.iter().map(String::as_str))
                    .collect()
            })
            .collect()
    }

    /// The values of column `c`, each once, in the order they first appear.
    fn distinct(&self, c: &str) -> R<Vec<&str>> {
        let i = self.col(c)?;
        let mut out: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !out.contains(&r[i].as_str()) {
                out.push(&r[i]);
            }
        }
        Ok(out)
    }

    /// The first row where every `(column, value)` matches.
    fn find(&self, want: &[(&str, &str)]) -> R<Vec<String>> {
        let idx: Vec<usize> = want.iter().map(|(c, _)| self.col(c)).collect::<R<_>>()?;
        self.rows
            .iter()
            .find(|r| idx.iter().zip(want).all(|(&i, (_, v))| r[i] == *v))
            .cloned()
            .ok_or_else(|| format!("{}: no row {want:?}", self.name).into())
    }

    /// The median of column `col` over the rows where every `(column,
    /// value)` matches (the rounds of an A/B); an error when none does.
    fn median_where(&self, want: &[(&str, &str)], col: &str) -> R<f64> {
        let idx: Vec<usize> = want.iter().map(|(c, _)| self.col(c)).collect::<R<_>>()?;
        let k = self.col(col)?;
        let v: Vec<f64> = self
            .rows
            .iter()
            .filter(|r| idx.iter().zip(want).all(|(&i, (_, v))| r[i] == *v))
            .map(|r| num(&r[k], &self.name))
            .collect::<R<_>>()?;
        if v.is_empty() {
            return Err(format!("{}: no row {want:?}", self.name).into());
        }
        Ok(median(v))
    }

    fn value(&self, want: &[(&str, &str)], col: &str) -> R<f64> {
        let r = self.find(want)?;
        num(&r[self.col(col)?], &self.name)
    }

    /// The source line printed under every table.
    fn source(&self) -> String {
        format!(
            "\n<sub>`results/{}` — {}</sub>\n",
            self.name,
            self.run.join(" · ")
        )
    }
}

fn num(s: &str, file: &str) -> R<f64> {
    s.trim()
        .parse()
        .map_err(|_| format!("{file}: {s:?} is not a number").into())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// 1234567 → "1,234,567".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// 10000000 → "10 M", 100000 → "100 k".
fn count_short(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{} M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{} k", n / 1_000),
        n => n.to_string(),
    }
}

fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    for _ in head {
        s.push_str("---|");
    }
    s.push('\n');
    for r in rows {
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s
}

fn f2(x: f64) -> String {
    format!("{x:.2}")
}

fn pct(x: f64, digits: usize) -> String {
    format!("{:.*} %", digits, x * 100.0)
}

/// `hashes`: median ns per hash by key length.
fn hashes(d: &Path) -> R<String> {
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

/// `classbench`: cfdp's multi-field classifier beside rte_acl's fastest
/// algorithm on each ClassBench set (`bench/classbench.sh`).
fn classbench(d: &Path) -> R<String> {
    let c = Csv::load(d, "classbench.csv")?;
    let recs = c.records();
    let mut rows = Vec::new();
    for set in c.distinct("set")? {
        let of = |impl_: &str| recs.iter().find(|r| r["set"] == set && r["impl"] == impl_);
        let mpps = |impl_: &str| -> R<f64> {
            let r = of(impl_).ok_or_else(|| format!("classbench.csv: no {impl_} for {set}"))?;
            num(r["mpps"], &c.name)
        };
        let (best_alg, best) = recs
            .iter()
            .filter(|r| r["set"] == set && r["impl"].starts_with("rte_acl-"))
            .map(|r| {
                Ok((
                    r["impl"].trim_start_matches("rte_acl-"),
                    num(r["mpps"], &c.name)?,
                ))
            })
            .collect::<R<Vec<_>>>()?
            .into_iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .ok_or_else(|| format!("classbench.csv: no rte_acl rows for {set}"))?;
        let single = of("cfdp-single").ok_or("classbench.csv: no cfdp-single row")?;
        let (batched, one) = (mpps("cfdp-batched")?, mpps("cfdp-single")?);
        let replay = of("cfdp-replay");
        rows.push(vec![
            set.to_string(),
            single["rules"].to_string(),
            format!("{} ({best_alg})", f2(best)),
            f2(batched),
            format!("{:.2}×", batched / best),
            f2(one),
            format!("{:.2}×", one / best),
            f2(mpps("cfdp-worker")?),
            replay.map_or(Ok("–".to_string()), |r| num(r["mpps"], &c.name).map(f2))?,
            format!("{} / {}", single["tables"], single["probes_per_packet"]),
            single["store_build_s"].to_string(),
            format!("{:.1}", num(single["bytes"], &c.name)? / 1e6),
            format!("{} / {}", single["insert_us_p99"], single["delete_us_p99"]),
            format!(
                "{} / {}",
                single["verdict_diffs"],
                replay.map_or("–", |r| r["verdict_diffs"])
            ),
        ]);
    }
    Ok(table(
        &[
            "set",
            "rules",
            "rte_acl best Mpps (alg)",
            "cfdp batched",
            "/ best",
            "cfdp single",
            "/ best",
            "worker path",
            "replay (1 worker)",
            "tables / probed a packet",
            "store build s",
            "cfdp MB",
            "update p99 µs insert / delete",
            "verdict diffs / replay rule diffs",
        ],
        &rows,
    ) + &c.source())
}

/// `classbench-worst`: the cost of a packet that misses every rule and of
/// a 1089-shape set, against the ClassBench trace's mean (single-packet).
fn classbench_worst(d: &Path) -> R<String> {
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
        rows.push(vec![
            set.to_string(),
            f2(base),
            cost(mpps("cfdp-miss"))?,
            cost(mpps("cfdp-explosion"))?,
        ]);
    }
    Ok(table(
        &[
            "set",
            "ClassBench trace Mpps",
            "miss trace Mpps",
            "1089-shape set Mpps",
        ],
        &rows,
    ) + &c.source())
}

/// `space`: bits per item and FPR at 95 % load per fingerprint size.
fn space(d: &Path) -> R<String> {
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
fn filter_ab(d: &Path, file: &str, log2: &str) -> R<String> {
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
fn lookup_anatomy(d: &Path) -> R<String> {
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
fn build_ab(d: &Path) -> R<String> {
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
fn read_ab_layouts(d: &Path) -> R<String> {
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
fn layouts(d: &Path) -> R<String> {
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

/// `worker-ab`: the pipeline before and after the worker changes.
fn worker_ab(d: &Path) -> R<String> {
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
fn architecture(d: &Path, dpdk: bool) -> R<String> {
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

/// `bcf-burst` (the occupancy experiment) and `bcf-burst-size` (the
/// burst-size experiment): the CSV holds the first, then the second (which
/// starts at the first row of burst 0).
#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn bcf_burst(d: &Path, sizes: bool) -> R<String> {
    let c = Csv::load(d, "bcf_burst.csv")?;
    let recs = c.records();
    let split = recs
        .iter()
        .position(|r| r["burst"] == "0")
        .unwrap_or(recs.len());
    let (occ, size) = recs.split_at(split);
    let n = |s: &str| num(s, &c.name);
    let slash = |v: Vec<String>| v.join(" / ");
    if !sizes {
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
        return Ok(table(
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
        ) + &c.source());
    }
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
fn table3(d: &Path) -> R<String> {
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
fn insert_latency(d: &Path) -> R<String> {
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
fn lookup(d: &Path) -> R<String> {
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
fn lookup_scaling(d: &Path) -> R<String> {
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

/// `large-rules`: ready time and bytes per rule by size and mode.
fn large_rules(d: &Path) -> R<String> {
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
fn large_rules_components(d: &Path, file: &str, build: Option<&str>) -> R<String> {
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
fn large_rules_filter_only(d: &Path) -> R<String> {
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
fn large_rules_ab(d: &Path, file: &str) -> R<String> {
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

/// `control-path`: the real control path, each label's p50 · p99 side by
/// side (labels in the order of the file: e.g. old_a, new_a, old_b, new_b).
#[allow(clippy::too_many_lines)] // a benchmark's main loop
fn control_path(d: &Path) -> R<String> {
    let c = Csv::load(d, "control_path.csv")?;
    let labels = c.distinct("label")?;
    let v = |l: &str, what: &str, m: &str| {
        c.value(&[("label", l), ("what", what), ("metric", m)], "value")
    };
    type Cell<'a> = Box<dyn Fn(&str) -> R<String> + 'a>;
    let p50_p99 = |what: &'static str| -> Cell {
        Box::new(move |l| {
            Ok(format!(
                "{:.2} · {:.2}",
                v(l, what, "rtt_ms_p50")?,
                v(l, what, "rtt_ms_p99")?
            ))
        })
    };
    let rows_spec: Vec<(&str, Cell)> = vec![
        (
            "1024 inserts at 97 %, round trip p50 · p99 (ms)",
            p50_p99("insert 1024"),
        ),
        (
            "1024 inserts, server `wall_us` p50 (ms)",
            Box::new(|l| Ok(format!("{:.2}", v(l, "insert 1024", "server_ms_p50")?))),
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
            Box::new(|l| {
                Ok(format!(
                    "{:.2}",
                    v(l, "ctl", "ctl_process_ms_p50")? - v(l, "ctl", "ping_ms_p50")?
                ))
            }),
        ),
        (
            "sustained, batches of 1024, 8 in flight (updates/s)",
            Box::new(|l| {
                Ok(format!(
                    "{:.0} k",
                    v(l, "sustained", "updates_per_s")? / 1e3
                ))
            }),
        ),
        (
            "worker Mpps during that churn vs quiet",
            Box::new(|l| {
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
            Box::new(|l| {
                Ok(format!(
                    "{:+.1} %",
                    (v(l, "sustained", "worker_mp_per_cpu_s_churn")?
                        / v(l, "sustained", "worker_mp_per_cpu_s_quiet")?
                        - 1.0)
                        * 100.0
                ))
            }),
        ),
    ];
    let mut rows = Vec::new();
    for (label, cell) in &rows_spec {
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

/// `control-path-stages`: where a batch's round trip goes, µs p50, per label.
fn control_path_stages(d: &Path) -> R<String> {
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
fn fold_stall(d: &Path) -> R<String> {
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
fn control_batch(d: &Path) -> R<String> {
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
fn control_churn(d: &Path) -> R<String> {
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
fn fleet(d: &Path) -> R<String> {
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

/// `inline`: the veth lab, medians of the rounds, ratios to testpmd io.
fn inline(d: &Path) -> R<String> {
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
    let (tcp0, udp0) = (
        med("testpmd-io", "tcp_gbps")?,
        med("testpmd-io", "udp64_kpps")?,
    );
    let mut rows = Vec::new();
    for (imp, label) in [
        ("testpmd-io", "dpdk-testpmd io".to_owned()),
        ("cfdp", "cfdp, no rules".to_owned()),
        (
            "cfdp-rules",
            format!(
                "cfdp, {} flow rules (none matching)",
                count_short(c.value(&[("impl", "cfdp-rules")], "rules")? as u64)
            ),
        ),
    ] {
        let (t, u) = (med(imp, "tcp_gbps")?, med(imp, "udp64_kpps")?);
        rows.push(vec![
            label,
            format!("{t:.3}"),
            f2(t / tcp0),
            format!("{u:.1}"),
            f2(u / udp0),
        ]);
    }
    Ok(table(
        &[
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
fn dpdk(d: &Path) -> R<String> {
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

fn render(dir: &Path, name: &str) -> R<String> {
    match name {
        "classbench" => classbench(dir),
        "classbench-worst" => classbench_worst(dir),
        "hashes" => hashes(dir),
        "space" => space(dir),
        "filter-ab-22" => filter_ab(dir, "filter_ab.csv", "22"),
        "filter-ab-25" => filter_ab(dir, "filter_ab.csv", "25"),
        "read-ab-22" => filter_ab(dir, "filter_read_ab.csv", "22"),
        "read-ab-25" => filter_ab(dir, "filter_read_ab.csv", "25"),
        "read-ab-layouts" => read_ab_layouts(dir),
        "issue12-ab-22" => filter_ab(dir, "filter_issue12_ab.csv", "22"),
        "issue12-ab-25" => filter_ab(dir, "filter_issue12_ab.csv", "25"),
        "build-ab" => build_ab(dir),
        "lookup-anatomy" => lookup_anatomy(dir),
        "layouts" => layouts(dir),
        "worker-ab" => worker_ab(dir),
        "architecture-memory" => architecture(dir, false),
        "architecture-dpdk" => architecture(dir, true),
        "bcf-burst" => bcf_burst(dir, false),
        "bcf-burst-size" => bcf_burst(dir, true),
        "table3" => table3(dir),
        "insert-latency" => insert_latency(dir),
        "lookup" => lookup(dir),
        "lookup-scaling" => lookup_scaling(dir),
        "large-rules" => large_rules(dir),
        "large-rules-ab" => large_rules_ab(dir, "large_rules_ab.csv"),
        "large-rules-filter-only" => large_rules_filter_only(dir),
        "large-rules-components" => large_rules_components(dir, "large_rules.csv", None),
        "large-rules-components-now" => {
            large_rules_components(dir, "large_rules_filter_only.csv", Some("new-"))
        }
        "large-rules-ab-stream" => large_rules_ab(dir, "large_rules_ab_stream.csv"),
        "control-path" => control_path(dir),
        "control-path-stages" => control_path_stages(dir),
        "control-batch" => control_batch(dir),
        "fold-stall" => fold_stall(dir),
        "control-churn" => control_churn(dir),
        "fleet" => fleet(dir),
        "inline" => inline(dir),
        "dpdk" => dpdk(dir),
        other => Err(format!("no renderer for table {other:?}").into()),
    }
}

const OPEN: &str = "<!-- table: ";
const CLOSE: &str = "<!-- /table -->";

/// The document with every marked table re-rendered, and the tables' names.
fn regenerate(doc: &str, dir: &Path) -> R<(String, Vec<String>)> {
    let mut out = String::with_capacity(doc.len());
    let mut names = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find(OPEN) {
        let after = &rest[i + OPEN.len()..];
        let end = after.find(" -->").ok_or("an unterminated table marker")?;
        let name = after[..end].trim().to_owned();
        let body_start = i + OPEN.len() + end + " -->".len();
        let close = rest[body_start..]
            .find(CLOSE)
            .ok_or_else(|| format!("table {name}: no {CLOSE}"))?;
        out.push_str(&rest[..body_start]);
        out.push('\n');
        out.push_str(&render(dir, &name).map_err(|e| format!("table {name}: {e}"))?);
        out.push_str(CLOSE);
        rest = &rest[body_start + close + CLOSE.len()..];
        names.push(name);
    }
    out.push_str(rest);
    Ok((out, names))
}

fn main() {
    let check = std::env::args().any(|a| a == "--check");
    let bench = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = bench.join("results");
    let mut failed = false;
    for doc in [bench.join("README.md"), bench.join("../README.md")] {
        let text = match std::fs::read_to_string(&doc) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("tables: {}: {e}", doc.display());
                std::process::exit(2);
            }
        };
        let (new, names) = match regenerate(&text, &dir) {
            Ok(x) => x,
            Err(e) => {
                eprintln!("tables: {}: {e}", doc.display());
                std::process::exit(2);
            }
        };
        if new == text {
            println!("{}: {} tables, up to date", doc.display(), names.len());
        } else if check {
            eprintln!(
                "tables: {}: tables differ from bench/results/*.csv; run `cargo run -p cfdp-bench --bin tables`",
                doc.display()
            );
            failed = true;
        } else if let Err(e) = std::fs::write(&doc, &new) {
            eprintln!("tables: {}: {e}", doc.display());
            std::process::exit(2);
        } else {
            println!("{}: {} tables regenerated", doc.display(), names.len());
        }
    }
    if failed {
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_as_tables_print_them() {
        assert_eq!(thousands(129447985), "129,447,985");
        assert_eq!(thousands(999), "999");
        assert_eq!(count_short(10_000_000), "10 M");
        assert_eq!(count_short(100_000), "100 k");
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn a_marked_table_is_replaced_and_the_rest_kept() {
        let dir = std::env::temp_dir().join(format!("cfdp-tables-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("hashes.csv"),
            "# run X\nhash,key_bytes,ns_per_hash\nh,8,1\nh,13,2\nh,37,3.5\n",
        )
        .unwrap();
        let doc = "before\n<!-- table: hashes -->\nstale\n<!-- /table -->\nafter\n";
        let (out, names) = regenerate(doc, &dir).unwrap();
        assert_eq!(names, ["hashes"]);
        assert_eq!(
            out,
            "before\n<!-- table: hashes -->\n| hash | 8 B | 13 B | 37 B |\n|---|---|---|---|\n\
             | h | 1.00 | 2.00 | 3.50 |\n\n<sub>`results/hashes.csv` — run X</sub>\n<!-- /table -->\nafter\n"
        );
        assert!(regenerate("<!-- table: nope -->\n<!-- /table -->", &dir).is_err());
        std::fs::write(dir.join("hashes.csv"), "hash,key_bytes,ns_per_hash\n").unwrap();
        assert!(regenerate(doc, &dir)
            .unwrap_err()
            .to_string()
            .contains("no run record"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
