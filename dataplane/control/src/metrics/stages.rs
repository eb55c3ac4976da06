//! The workers' time by stage (`cfdp_engine::stages`) as metrics.

use prometheus_client::encoding::NoLabelSet;
use prometheus_client::metrics::MetricType;

use super::encode::{counters, Enc, Res};

/// Each worker's time by stage on its sampled bursts (`cfdp_engine::stages`),
/// as OVS's `pmd-perf-show` gives it: nanoseconds and packets sampled (a
/// rate of one over the other is the stage's time a packet), and the cycles
/// a packet at the CPU's clock.
pub(super) fn encode_stages(e: Enc, workers: &[cfdp_engine::stats::WorkerSnapshot]) -> Res {
    counters(
        e,
        "stage_sampled_packets",
        "Packets of the bursts timed stage by stage (one burst in 16)",
        "worker",
        workers
            .iter()
            .map(|w| (w.worker.to_string(), w.stages.sampled_packets)),
    )?;
    // Two labels (worker, stage): written here, label values that need no
    // escaping (worker numbers and stage names).
    let mut m = e.encode_descriptor(
        "stage_nanoseconds",
        "Time spent in each stage of the timed bursts (rx, decode, track, classify, act, tx)",
        None,
        MetricType::Counter,
    )?;
    for w in workers {
        for (stage, v) in &w.stages.ns {
            m.encode_family(&[
                ("worker", w.worker.to_string()),
                ("stage", (*stage).to_string()),
            ])?
            .encode_counter::<NoLabelSet, _, u64>(v, None)?;
        }
    }
    let mut m = e.encode_descriptor(
        "stage_cycles_per_packet",
        "Cycles a packet in each stage, at the CPU's clock (timed bursts since start)",
        None,
        MetricType::Gauge,
    )?;
    for w in workers {
        for (stage, v) in &w.stages.cycles_per_packet {
            m.encode_family(&[
                ("worker", w.worker.to_string()),
                ("stage", (*stage).to_string()),
            ])?
            .encode_gauge(v)?;
        }
    }
    Ok(())
}
