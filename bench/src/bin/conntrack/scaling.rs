//! Opens and lookups from 1, 2, … N threads (N: the machine's cores, or
//! `--threads N`), each thread its own share of the keys: how the
//! connection table's writers scale now that each lock stripe is its own
//! filter partition (no lock, counter or side set shared between stripes).
//!
//! Strong scaling: a fixed number of operations split between the
//! threads, into a table of the same capacity for every thread count, so
//! each count ends at the same occupancy (80 %) and only the sharing of
//! the work differs. Per round, every thread count in turn (alternated);
//! the median of the rounds.
//!
//! - **opens**: a SYN of a new connection each (the table's write path:
//!   its stripe's lock, a slot, the filter insert);
//! - **lookups**: the server's ACK of an established connection (no lock);
//! - **mixed**: a new connection's SYN and the answer's lookup, as a
//!   worker sees both directions.

use std::sync::Barrier;
use std::time::Instant;

use cfdp_bench::median;
use cfdp_conntrack::state::tcp::{ACK, SYN};
use cfdp_conntrack::{ConnTable, Timeouts};
use cfdp_rules::HashSecret;

use crate::common::{conn, establish, TRACKED};

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Work {
    Opens,
    Lookups,
    Mixed,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Opens => "opens",
            Work::Lookups => "lookups",
            Work::Mixed => "mixed",
        }
    }
}

/// A table that `total` connections fill to 80 %.
pub(crate) fn fresh(total: u32) -> ConnTable {
    ConnTable::new(
        total as usize * 5 / 4,
        Timeouts::default(),
        HashSecret::from_seed(11),
    )
    .expect("table")
}

/// `total` operations of `work` split between `threads`: millions a second.
pub(crate) fn run(work: Work, threads: u32, total: u32, lookups_table: &ConnTable) -> f64 {
    let owned = (work != Work::Lookups).then(|| fresh(total));
    let t = owned.as_ref().unwrap_or(lookups_table);
    let per = total / threads;
    let start = Barrier::new(threads as usize + 1);
    let elapsed = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let start = &start;
                sc.spawn(move || {
                    start.wait();
                    for i in w * per..(w + 1) * per {
                        let k = conn(i, false);
                        match work {
                            Work::Opens => {
                                std::hint::black_box(t.open(&k, SYN, 1, TRACKED, 60, 0).is_ok());
                            }
                            Work::Lookups => {
                                std::hint::black_box(t.lookup(&k.reply(), ACK, 60, 2));
                            }
                            Work::Mixed => {
                                let _ = t.open(&k, SYN, 1, TRACKED, 60, 0);
                                std::hint::black_box(t.lookup(&k.reply(), SYN | ACK, 60, 0));
                            }
                        }
                    }
                })
            })
            .collect();
        start.wait();
        let s = Instant::now();
        for h in handles {
            h.join().expect("bench thread");
        }
        s.elapsed()
    });
    let ops = per * threads * if work == Work::Mixed { 2 } else { 1 };
    f64::from(ops) / elapsed.as_secs_f64() / 1e6
}

/// Rows `scaling,<work>,<threads>,<ops>,<Mops>,<× one thread>,<cores>`.
pub(crate) fn scaling_rows(quick: bool, rounds: usize) -> Vec<String> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let max = cfdp_bench::arg("--threads")
        .and_then(|s| s.parse().ok())
        .unwrap_or(cores)
        .max(1);
    let total: u32 = if quick { 1 << 17 } else { 1 << 19 };
    let established = fresh(total);
    for i in 0..total {
        establish(&established, &conn(i, false));
    }
    let counts: Vec<u32> = (1..=max).collect();
    let mut rows = Vec::new();
    for work in [Work::Opens, Work::Lookups, Work::Mixed] {
        let mut samples = vec![Vec::new(); counts.len()];
        for _ in 0..rounds {
            for (s, &n) in samples.iter_mut().zip(&counts) {
                s.push(run(work, n, total, &established));
            }
        }
        let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
        for (&n, &m) in counts.iter().zip(&medians) {
            let x = m / medians[0];
            println!(
                "{:<8} {n:>2} thread(s): {m:7.2} M/s, {x:.2}× one thread",
                work.name()
            );
            rows.push(format!(
                "scaling,{},{n},{total},{m:.3},{x:.3},{cores}",
                work.name()
            ));
        }
    }
    rows
}
