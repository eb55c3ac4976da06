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

mod classbench;
mod conntrack;
mod control;
mod csv;
mod dataplane;
mod filter;
mod peers;

use std::path::{Path, PathBuf};

use crate::classbench::{
    classbench, classbench_capped, classbench_compile, classbench_pair, classbench_worst,
};
use crate::conntrack::{
    conntrack_answered_flood, conntrack_burst, conntrack_flood, conntrack_ops, conntrack_rte_hash,
    conntrack_rte_hash_writers, conntrack_scaling, conntrack_scaling_ab, conntrack_scaling_wide,
};
use crate::control::{
    control_batch, control_churn, control_p4runtime, control_path, control_path_stages, dpdk,
    fleet, floods, fold_stall, inline, p4runtime_read,
};
use crate::csv::R;
use crate::dataplane::{
    architecture, large_rules, large_rules_ab, large_rules_components, large_rules_filter_only,
    scaling, scaling_replay_ab, worker_ab,
};
use crate::filter::{
    bcf_burst, build_ab, filter_ab, hashes, insert_latency, layouts, lookup, lookup_anatomy,
    lookup_scaling, read_ab_layouts, space, table3,
};

fn render(dir: &Path, name: &str) -> R<String> {
    match name {
        "classbench" => classbench(dir, "classbench.csv"),
        "classbench-seeds" => classbench(dir, "classbench_seeds.csv"),
        "classbench-xeon-emr" => classbench(dir, "classbench_xeon_emr.csv"),
        "classbench-xeon-emr-avx2" => classbench_capped(dir, "classbench_xeon_emr.csv"),
        "classbench-epyc-avx512" => classbench(dir, "classbench_epyc_avx512.csv"),
        "classbench-epyc-avx512-avx2" => classbench_capped(dir, "classbench_epyc_avx512.csv"),
        "classbench-worst" => classbench_worst(dir),
        "classbench-compile" => classbench_compile(dir),
        "classbench-xeon16" => classbench_pair(dir, "classbench_xeon16.csv"),
        "classbench-xeon16-lease2" => classbench_pair(dir, "classbench_xeon16_lease2.csv"),
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
        "scaling" => scaling(dir),
        "scaling-replay-ab" => scaling_replay_ab(dir),
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
        "control-p4runtime" => control_p4runtime(dir),
        "floods" => floods(dir),
        "p4runtime-read" => p4runtime_read(dir),
        "conntrack-burst" => conntrack_burst(dir),
        "conntrack-ops" => conntrack_ops(dir),
        "conntrack-flood" => conntrack_flood(dir),
        "conntrack-answered-flood" => conntrack_answered_flood(dir),
        "conntrack-rte-hash" => conntrack_rte_hash(dir),
        "conntrack-scaling" => conntrack_scaling(dir),
        "conntrack-scaling-16core" => conntrack_scaling_wide(dir, "conntrack_scaling_16core.csv"),
        "conntrack-scaling-16core-ab" => {
            conntrack_scaling_ab(dir, "conntrack_scaling_16core_ab.csv")
        }
        "conntrack-scaling-16core-lines-ab" => {
            conntrack_scaling_ab(dir, "conntrack_scaling_16core_lines_ab.csv")
        }
        "conntrack-rte-hash-writers" => conntrack_rte_hash_writers(dir),
        "control-batch" => control_batch(dir),
        "fold-stall" => fold_stall(dir),
        "control-churn" => control_churn(dir),
        "fleet" => fleet(dir),
        "inline" => inline(dir),
        "dpdk" => dpdk(dir),
        "ovs" => peers::ovs(dir),
        "worker-path" => peers::worker_path(dir),
        "conntrack-window-established" => peers::window_established(dir),
        "flow-export" => peers::flow_export(dir),
        "flow-export-ab" => peers::flow_export_ab(dir),
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
    cfdp_bench::expect_flags(&["--check"]);
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
    use crate::csv::{count_short, median, thousands};

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
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        std::fs::write(
            dir.join("hashes.csv"),
            "# run X\nhash,key_bytes,ns_per_hash\nh,8,1\nh,13,2\nh,37,3.5\n",
        )
        .unwrap();
        let doc = "before\n<!-- table: hashes -->\nstale\n<!-- /table -->\nafter\n";
        let (out, names) = regenerate(doc, dir).unwrap();
        assert_eq!(names, ["hashes"]);
        assert_eq!(
            out,
            "before\n<!-- table: hashes -->\n| hash | 8 B | 13 B | 37 B |\n|---|---|---|---|\n\
             | h | 1.00 | 2.00 | 3.50 |\n\n<sub>`results/hashes.csv` — run X</sub>\n<!-- /table -->\nafter\n"
        );
        assert!(regenerate("<!-- table: nope -->\n<!-- /table -->", dir).is_err());
        std::fs::write(dir.join("hashes.csv"), "hash,key_bytes,ns_per_hash\n").unwrap();
        assert!(regenerate(doc, dir)
            .unwrap_err()
            .to_string()
            .contains("no run record"));
    }
}
