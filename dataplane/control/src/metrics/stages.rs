//! The workers' time by stage (`cfdp_engine::stages`) as metrics.

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Label values here are worker numbers and stage names: nothing to
/// escape (the parent's `escape` is for values from the configuration).
type Res = Result<(), std::fmt::Error>;

/// Each worker's time by stage on its sampled bursts (`cfdp_engine::stages`),
/// as OVS's `pmd-perf-show` gives it: nanoseconds and packets sampled (a
/// rate of one over the other is the stage's time a packet), and the cycles
/// a packet at the CPU's clock.
pub(super) fn encode_stages(
    e: &mut DescriptorEncoder<'_>,
    workers: &[cfdp_engine::stats::WorkerSnapshot],
) -> Res {
    let mut m = e.encode_descriptor(
        "stage_sampled_packets",
        "Packets of the bursts timed stage by stage (one burst in 16)",
        None,
        MetricType::Counter,
    )?;
    for w in workers {
        m.encode_family(&[("worker", w.worker.to_string())])?
            .encode_counter::<NoLabelSet, _, u64>(&w.stages.sampled_packets, None)?;
    }
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
