//! The one worker loop (`run_worker`) over the in-memory backend, against
//! tables built from operations the way the rule store builds them: every
//! frame gets its rule's verdict, and the counters the worker publishes per
//! burst are exactly what it processed.

use std::sync::Arc;

use cfdp_engine::{
    run_worker, Limit, LiveStats, MemoryBackend, Mode, Op, RuleRef, Tables, Worker, WorkerContext,
    WorkerOptions, MAX_BURST,
};
use cfdp_filter::{Config, Filter};
use cfdp_rules::{Action, FlowKey};
mod common;
use common::frame;

fn key(i: u8) -> FlowKey {
    FlowKey::v4([10, 0, 0, i], [10, 0, 1, i], 17, 1000 + u16::from(i), 53)
}

/// A data plane with `drop` on key 1, `count` on key 2, and 1 worker.
fn context(mode: Mode) -> (left_right::WriteHandle<Tables, Op>, WorkerContext) {
    let filter = Arc::new(Filter::new(Config::cuckoo(1024, 16)).unwrap());
    let (mut w, r) = left_right::new_from_empty::<Tables, Op>(Tables::new(
        Arc::clone(&filter),
        mode == Mode::FilterOnly,
    ));
    let stats = Arc::new(LiveStats::new(1, 16));
    for (slot, (i, action)) in [(1u8, Action::Drop), (2, Action::Count)]
        .into_iter()
        .enumerate()
    {
        let k = key(i);
        let slot = slot as u32;
        assert!(stats.ensure_slot(slot, slot));
        filter.insert_hash(k.hash(), 0).unwrap();
        w.append(Op::InsertFlow(k, RuleRef { action, slot }));
    }
    w.publish();
    let cx = WorkerContext {
        mode,
        readers: r.factory(),
        stats,
        conntrack: None,
    };
    (w, cx)
}

#[test]
fn run_worker_applies_verdicts_and_publishes_what_it_counted() {
    for mode in [Mode::Verify, Mode::Exact] {
        let (_w, cx) = context(mode);
        // 50 frames: keys 0..5 in turn (key 1 dropped, key 2 counted).
        let frames: Vec<Vec<u8>> = (0..50).map(|i| frame(&key(i % 5))).collect();
        let tables = cx.readers.handle();
        let mut worker = Worker::new(&cx, 0, WorkerOptions::default());
        let mut b = MemoryBackend::new(&frames, Limit::Passes(3));
        let end = run_worker(&mut b, &mut worker, &tables);
        assert_eq!(end.packets, 150, "{mode:?}");
        assert_eq!(end.bursts, 3 * 50_u64.div_ceil(MAX_BURST as u64));
        assert_eq!((b.dropped, b.forwarded), (30, 120), "{mode:?}");
        assert_eq!(worker.finish(), None, "no flow accounting by default");
        let t = cx.stats.totals();
        assert_eq!(
            (
                t.packets,
                t.ipv4,
                t.dropped,
                t.forwarded,
                t.matched,
                t.counted
            ),
            (150, 150, 30, 120, 60, 30),
            "{mode:?}"
        );
        assert_eq!(t.bursts, end.bursts);
        assert_eq!(cx.stats.slot_totals(0).0, 30, "drop rule's hits");
        assert_eq!(cx.stats.slot_totals(1).0, 30, "count rule's hits");
        // The snapshot is the same numbers, typed.
        let s = cx.stats.snapshot();
        assert_eq!(s.totals, t);
        assert_eq!(s.workers[0].totals, t);

        // A worker that takes over the index continues the counts.
        let mut again = Worker::new(
            &cx,
            0,
            WorkerOptions {
                account_flows: true,
                ..WorkerOptions::default()
            },
        );
        let mut b = MemoryBackend::new(&frames, Limit::Passes(1));
        run_worker(&mut b, &mut again, &tables);
        let flows = again.finish().expect("accounting on");
        assert_eq!(flows.len(), 5);
        assert_eq!(flows[&key(1)].0, 10);
        assert_eq!(cx.stats.totals().packets, 200);
    }
}

/// One burst in `stages::SAMPLE` is timed stage by stage, from the
/// worker's first: 40 full bursts time bursts 0, 16 and 32, and their
/// packets; every stage is named, and the timed bursts took time.
#[test]
fn one_burst_in_sixteen_is_timed_stage_by_stage() {
    use cfdp_engine::stages::{Stage, SAMPLE};
    let (_w, cx) = context(Mode::Verify);
    let frames: Vec<Vec<u8>> = (0..40 * MAX_BURST)
        .map(|i| frame(&key(i as u8 % 5)))
        .collect();
    let tables = cx.readers.handle();
    let mut worker = Worker::new(&cx, 0, WorkerOptions::default());
    let mut b = MemoryBackend::new(&frames, Limit::Passes(1));
    let end = run_worker(&mut b, &mut worker, &tables);
    assert_eq!(end.bursts, 40);
    let s = cx.stats.snapshot();
    let timed = end.bursts.div_ceil(SAMPLE);
    assert_eq!(s.stages.sampled_bursts, timed);
    assert_eq!(s.stages.sampled_packets, timed * MAX_BURST as u64);
    assert_eq!(
        s.workers[0].stages, s.stages,
        "one worker: the sum is its own"
    );
    let names: Vec<&str> = Stage::ALL.iter().map(|s| s.name()).collect();
    let mut keys: Vec<&str> = s.stages.ns.keys().copied().collect();
    keys.sort_unstable();
    let mut want = names.clone();
    want.sort_unstable();
    assert_eq!(keys, want);
    assert!(s.stages.ns.values().sum::<u64>() > 0);
    assert!(s.stages.ns["classify"] > 0 && s.stages.ns["decode"] > 0);
}

/// Runs of one rule (a burst of one flow's packets) are counted whole:
/// the rule's hits and bytes, matched, counted and forwarded, across
/// bursts and a change of rule inside a burst.
#[test]
fn a_run_of_one_rules_hits_is_counted_whole() {
    let (_w, cx) = context(Mode::Verify);
    // 40 frames of key 2 (count), then 10 of key 1 (drop): a run that
    // crosses a burst, then another rule inside the second burst.
    let frames: Vec<Vec<u8>> = (0..50)
        .map(|i| frame(&key(if i < 40 { 2 } else { 1 })))
        .collect();
    let tables = cx.readers.handle();
    let mut worker = Worker::new(&cx, 0, WorkerOptions::default());
    let mut b = MemoryBackend::new(&frames, Limit::Passes(2));
    run_worker(&mut b, &mut worker, &tables);
    let t = cx.stats.totals();
    assert_eq!(
        (t.packets, t.matched, t.counted, t.forwarded, t.dropped),
        (100, 100, 80, 80, 20)
    );
    assert_eq!((b.forwarded, b.dropped), (80, 20));
    assert_eq!(cx.stats.slot_totals(1).0, 80, "count rule's hits");
    assert_eq!(cx.stats.slot_totals(0).0, 20, "drop rule's hits");
    assert_eq!(cx.stats.slot_totals(1).1, 80 * frames[0].len() as u64);
}

/// A backend whose second poll sleeps until its frames come (as a replay's
/// worker does when its reader is slower) and says so (`Rx::Waited`).
struct Sleepy<'a> {
    frames: &'a [Vec<u8>],
    polls: u32,
    pause: std::time::Duration,
    /// When the sleep began and ended.
    slept: Option<(std::time::Instant, std::time::Instant)>,
}

struct SleepyBurst<'a>(&'a [Vec<u8>]);

impl cfdp_engine::Frames for SleepyBurst<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn packet(&self, i: usize) -> cfdp_engine::PacketRef<'_> {
        cfdp_engine::PacketRef {
            link: cfdp_packet::LinkType::Ethernet,
            ts_ns: 0,
            orig_len: self.0[i].len() as u32,
            data: &self.0[i],
            l4_vouched: false,
        }
    }
}

impl<'a> cfdp_engine::Backend for Sleepy<'a> {
    type Burst = SleepyBurst<'a>;
    fn burst(&self) -> SleepyBurst<'a> {
        SleepyBurst(&[])
    }
    fn rx(&mut self, b: &mut SleepyBurst<'a>) -> cfdp_engine::Rx {
        self.polls += 1;
        match self.polls {
            1 | 3 => {
                *b = SleepyBurst(self.frames);
                cfdp_engine::Rx::Ready
            }
            2 => {
                let asleep = std::time::Instant::now();
                std::thread::sleep(self.pause);
                self.slept = Some((asleep, std::time::Instant::now()));
                cfdp_engine::Rx::Waited
            }
            _ => cfdp_engine::Rx::Done,
        }
    }
    fn tx(&mut self, b: &mut SleepyBurst<'a>, _: &[cfdp_engine::Verdict]) {
        *b = SleepyBurst(&[]);
    }
    fn release(&mut self, _: &mut SleepyBurst<'a>, _: &[cfdp_engine::Released]) {}
    fn now_ns(&self) -> u64 {
        0
    }
}

/// A burst's time is its own turn of the loop — receive, processing,
/// transmit — with one clock reading a burst: a poll that slept until
/// frames came is not counted in the next burst's time. Checked by order
/// alone: the first burst's time fits between the run's start and the
/// sleep, the second's between the end of the sleep and the end of the
/// run, so no burst took longer than the longer of those two windows (the
/// second would hold the 200 ms sleep if the wait were timed as the
/// burst's).
#[test]
fn a_wait_for_frames_is_not_timed_as_the_burst() {
    let (_w, cx) = context(Mode::Verify);
    let frames: Vec<Vec<u8>> = (0..MAX_BURST).map(|i| frame(&key(i as u8 % 5))).collect();
    let tables = cx.readers.handle();
    let mut worker = Worker::new(&cx, 0, WorkerOptions::default());
    let mut b = Sleepy {
        frames: &frames,
        polls: 0,
        pause: std::time::Duration::from_millis(200),
        slept: None,
    };
    let begin = std::time::Instant::now();
    let end = run_worker(&mut b, &mut worker, &tables);
    let after = std::time::Instant::now();
    assert_eq!((end.bursts, b.polls), (2, 4));
    assert_eq!(worker.finish(), None);
    let h = cx.stats.burst_histogram();
    assert_eq!(h.len(), 2, "one time a burst");
    let (asleep, woke) = b.slept.expect("the second poll slept");
    let window = (asleep - begin).max(after - woke);
    assert!(
        h.lowest_equivalent(h.max()) <= window.as_nanos() as u64,
        "the slowest burst took {} ns, but neither the time before the sleep nor the time after it was as long ({window:?})",
        h.max()
    );
}
