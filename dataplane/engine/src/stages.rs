//! Where a worker's time goes, stage by stage — receive, decode, the
//! connection table, classification, the verdicts and their counters,
//! transmit — as Open vSwitch's `pmd-perf-show` tells an operator.
//!
//! Measured on one burst in [`SAMPLE`]: a sampled burst reads the clock
//! at its start and each stage's end but the last (six reads, ~20 ns each;
//! the transmit's end is the burst's own reading), the others read
//! nothing more than they did, so the whole costs under a nanosecond a
//! packet at full bursts. The sampled bursts are every SAMPLE-th of the
//! worker's, whatever their content, so the shares stand for the traffic.
//! Times are nanoseconds; cycles a packet are those times at the CPU's
//! clock as `/proc/cpuinfo` gives it (a core that busy-polls, as OVS's
//! cycles are).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use serde::Serialize;

/// One burst in this many is timed stage by stage.
pub const SAMPLE: u64 = 16;

/// A stage of the worker path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The backend's receive (its rx burst, the frames' views).
    Rx,
    /// Decode, fragments, flow accounting.
    Decode,
    /// The connection table's probe and lookups.
    Track,
    /// The rules: flow filter, prefix classes, multi-field classifier.
    Classify,
    /// Verdicts, connection opens, per-rule and worker counters.
    Act,
    /// The backend's transmit (and frees).
    Tx,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::Rx,
        Stage::Decode,
        Stage::Track,
        Stage::Classify,
        Stage::Act,
        Stage::Tx,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Rx => "rx",
            Stage::Decode => "decode",
            Stage::Track => "track",
            Stage::Classify => "classify",
            Stage::Act => "act",
            Stage::Tx => "tx",
        }
    }
}

/// A sampled burst's clock and the times it has taken so far.
#[derive(Debug, Default)]
pub struct Laps {
    at: Option<Instant>,
    ns: [u64; 6],
}

impl Laps {
    /// Starts timing a burst (its receive begins now).
    pub fn start(&mut self) {
        self.at = Some(Instant::now());
        self.ns = [0; 6];
    }

    /// Whether this burst is timed.
    #[inline]
    pub fn on(&self) -> bool {
        self.at.is_some()
    }

    /// Stage `s` of a timed burst ended now: its time since the last lap.
    #[inline]
    pub fn lap(&mut self, s: Stage) {
        if self.at.is_some() {
            self.lap_at(s, Instant::now());
        }
    }

    /// Stage `s` of a timed burst ended at `now` (a reading the caller
    /// took anyway).
    #[inline]
    pub fn lap_at(&mut self, s: Stage, now: Instant) {
        if let Some(at) = &mut self.at {
            self.ns[s as usize] += now.saturating_duration_since(*at).as_nanos() as u64;
            *at = now;
        }
    }

    /// The timed burst of `packets` is over: its times into `into`.
    pub fn finish(&mut self, packets: usize, into: &StageCounters) {
        if self.at.take().is_some() {
            into.add(packets as u64, &self.ns);
        }
    }

    /// A timed receive that brought nothing: not counted.
    pub fn cancel(&mut self) {
        self.at = None;
    }
}

/// One worker's sampled stage times (written by that worker only).
#[derive(Debug, Default)]
pub struct StageCounters {
    bursts: AtomicU64,
    packets: AtomicU64,
    ns: [AtomicU64; 6],
}

impl StageCounters {
    fn add(&self, packets: u64, ns: &[u64; 6]) {
        // One writer: load and store, no read-modify-write.
        let bump =
            |a: &AtomicU64, v: u64| a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
        for (a, &v) in self.ns.iter().zip(ns) {
            bump(a, v);
        }
        bump(&self.bursts, 1);
        // Last, with release: a reader that sees the packets sees their times.
        self.packets.store(
            self.packets.load(Ordering::Relaxed) + packets,
            Ordering::Release,
        );
    }

    pub fn snapshot(&self) -> StageTimes {
        let packets = self.packets.load(Ordering::Acquire);
        StageTimes::new(
            self.bursts.load(Ordering::Relaxed),
            packets,
            std::array::from_fn(|i| self.ns[i].load(Ordering::Relaxed)),
        )
    }
}

/// Sampled stage times, with their per-packet views.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct StageTimes {
    pub sampled_bursts: u64,
    pub sampled_packets: u64,
    /// Nanoseconds spent in each stage over the sampled bursts.
    pub ns: BTreeMap<&'static str, u64>,
    pub ns_per_packet: BTreeMap<&'static str, f64>,
    /// At [`cpu_mhz`] (absent when it is unknown).
    pub cycles_per_packet: BTreeMap<&'static str, f64>,
    pub cpu_mhz: Option<f64>,
}

impl StageTimes {
    pub fn new(bursts: u64, packets: u64, ns: [u64; 6]) -> Self {
        let mhz = cpu_mhz();
        let per = |v: u64| v as f64 / packets.max(1) as f64;
        let round = |x: f64| (x * 100.0).round() / 100.0;
        Self {
            sampled_bursts: bursts,
            sampled_packets: packets,
            ns: Stage::ALL
                .iter()
                .map(|s| (s.name(), ns[*s as usize]))
                .collect(),
            ns_per_packet: Stage::ALL
                .iter()
                .map(|s| (s.name(), round(per(ns[*s as usize]))))
                .collect(),
            cycles_per_packet: mhz
                .map(|m| {
                    Stage::ALL
                        .iter()
                        .map(|s| (s.name(), round(per(ns[*s as usize]) * m / 1e3)))
                        .collect()
                })
                .unwrap_or_default(),
            cpu_mhz: mhz,
        }
    }

    /// Each stage's nanoseconds, in [`Stage::ALL`]'s order.
    pub fn ns_array(&self) -> [u64; 6] {
        std::array::from_fn(|i| self.ns.get(Stage::ALL[i].name()).copied().unwrap_or(0))
    }

    /// The sum of `parts` (workers' times into the data plane's).
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a StageTimes>) -> Self {
        let (mut b, mut p, mut ns) = (0, 0, [0u64; 6]);
        for t in parts {
            b += t.sampled_bursts;
            p += t.sampled_packets;
            for (a, v) in ns.iter_mut().zip(t.ns_array()) {
                *a += v;
            }
        }
        Self::new(b, p, ns)
    }
}

/// The CPU's clock in MHz, from `/proc/cpuinfo` (read once); `None` where
/// it does not say.
pub fn cpu_mhz() -> Option<f64> {
    static MHZ: OnceLock<Option<f64>> = OnceLock::new();
    *MHZ.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()?
            .lines()
            .find(|l| l.starts_with("cpu MHz"))?
            .split(':')
            .nth(1)?
            .trim()
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timed burst adds its laps to its stages and counts its packets;
    /// an untimed or cancelled one adds nothing; per-packet views divide
    /// by the sampled packets.
    #[test]
    fn laps_add_to_their_stages_only_when_timed() {
        let c = StageCounters::default();
        let mut l = Laps::default();
        l.lap(Stage::Rx);
        l.finish(32, &c);
        assert_eq!(c.snapshot().sampled_bursts, 0);
        l.start();
        l.cancel();
        l.finish(32, &c);
        assert_eq!(c.snapshot().sampled_packets, 0);
        l.start();
        std::thread::yield_now();
        for s in Stage::ALL {
            l.lap(s);
        }
        l.finish(32, &c);
        let t = c.snapshot();
        assert_eq!((t.sampled_bursts, t.sampled_packets), (1, 32));
        assert!(t.ns_array().iter().sum::<u64>() > 0);
        let t = StageTimes::new(2, 10, [100, 0, 0, 50, 0, 0]);
        assert_eq!(t.ns_per_packet["rx"], 10.0);
        assert_eq!(t.ns_per_packet["classify"], 5.0);
        assert_eq!(StageTimes::sum([&t, &t]).ns["rx"], 200);
    }
}
