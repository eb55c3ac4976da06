//! End-to-end replays of the generated capture (`pcap/mixed.pcap`) through
//! the real pipeline: counts, and the exact sets of forwarded, redirected
//! and dropped frames, in verify and filter-only modes, with 1 and 3 workers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cfdp_control::RuleStore;
use cfdp_engine::Mode;
use cfdp_pcap::{replay, ReplayOptions, ReplayReport};
use cfdp_rules::parse_rule_file;
use cfdp_testkit::captures::{self as gen, Expect};
use pcap_file::pcap::PcapReader;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

use cfdp_testkit::dirs::test_dir as tmpdir;

fn frames_of(path: &Path) -> Vec<Vec<u8>> {
    let mut r = PcapReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

fn run(mode: Mode, workers: usize, dir: &Path) -> ReplayReport {
    let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
    let (store, dp) = RuleStore::fixed(&rules[..], mode, workers).unwrap();
    let opts = ReplayOptions {
        out: Some(dir.join("out.pcap")),
        flows_csv: Some(dir.join("flows.csv")),
        ..ReplayOptions::new(repo().join("pcap/mixed.pcap"), workers)
    };
    let mut r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
    r.rule_counters = store.count_rule_counters();
    r
}

#[test]
fn committed_captures_match_the_generator() {
    let dir = tmpdir("gen");
    let frames = gen::mixed();
    gen::write_pcap(&dir.join("mixed.pcap"), &frames).unwrap();
    let fresh = std::fs::read(dir.join("mixed.pcap")).unwrap();
    let committed = std::fs::read(repo().join("pcap/mixed.pcap")).unwrap();
    assert!(
        fresh == committed,
        "pcap/mixed.pcap differs from the generator: run gen-pcaps"
    );
    let rules = std::fs::read_to_string(repo().join("pcap/mixed.rules.json")).unwrap();
    assert_eq!(rules, gen::MIXED_RULES);
    let expected = std::fs::read_to_string(repo().join("pcap/mixed.expected.json")).unwrap();
    assert_eq!(
        expected,
        gen::expected_json(&frames, &gen::mixed_expected())
    );
}

fn check(mode: Mode, workers: usize) {
    let dir = tmpdir(&format!("{mode:?}-{workers}"));
    let r = run(mode, workers, &dir);
    let e = gen::mixed_expected();
    let t = &r.stats.totals;
    let got = gen::ExpectedCounts {
        packets: t.packets,
        ipv4: t.ipv4,
        ipv6: t.ipv6,
        non_ip: t.non_ip,
        malformed: t.malformed,
        fragments: t.fragments,
        fragments_resolved: t.fragments_resolved,
        fragments_unresolved: t.fragments_unresolved,
        flows: r.flows.expect("flow accounting is on with flows_csv"),
        dropped: t.dropped,
        forwarded: t.forwarded,
        redirected: t.redirected,
        counted: t.counted,
    };
    assert_eq!(got, e, "{mode:?}, {workers} workers");
    assert!(r.capture_error.is_none());
    assert_eq!(r.rule_counters.len(), 1);
    assert_eq!((r.rule_counters[0].id, r.rule_counters[0].packets), (3, 2));

    // Exactly the expected frames come out of each port, and each flow's
    // frames keep their capture order.
    let frames = gen::mixed();
    let want_port0: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| f.verdict == Expect::Forward)
        .map(|f| &f.data)
        .collect();
    let want_port2: Vec<&Vec<u8>> = frames
        .iter()
        .filter(|f| f.verdict == Expect::Redirect(2))
        .map(|f| &f.data)
        .collect();
    let out0 = frames_of(&dir.join("out.pcap"));
    let out2 = frames_of(&dir.join("out.port2.pcap"));
    let multiset = |v: Vec<&Vec<u8>>| {
        let mut m: HashMap<Vec<u8>, usize> = HashMap::new();
        for f in v {
            *m.entry(f.clone()).or_default() += 1;
        }
        m
    };
    assert_eq!(
        multiset(out0.iter().collect()),
        multiset(want_port0.clone()),
        "port 0 set"
    );
    assert_eq!(
        multiset(out2.iter().collect()),
        multiset(want_port2),
        "port 2 set"
    );
    // Per-flow order: the TCP conversation's replies (identical lengths
    // differ by payload byte) appear in generation order.
    let replies: Vec<&Vec<u8>> = out0
        .iter()
        .filter(|f| f.len() == 14 + 20 + 20 + 20 && f[14 + 20 + 1] == 80)
        .collect();
    let want_replies: Vec<&Vec<u8>> = want_port0
        .iter()
        .copied()
        .filter(|f| f.len() == 74 && f[14 + 20 + 1] == 80)
        .collect();
    assert_eq!(replies, want_replies);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn verify_mode_one_worker() {
    check(Mode::Verify, 1);
}

#[test]
fn verify_mode_three_workers() {
    check(Mode::Verify, 3);
}

#[test]
fn filter_only_mode_gives_the_same_verdicts_here() {
    check(Mode::FilterOnly, 2);
}

#[test]
fn damaged_capture_reports_what_was_read() {
    let dir = tmpdir("damaged");
    let bytes = std::fs::read(repo().join("pcap/mixed.pcap")).unwrap();
    // Cut in the middle of the 6th record: header 24 bytes, then records.
    let frames = gen::mixed();
    let mut off = 24;
    for f in &frames[..5] {
        off += 16 + f.data.len();
    }
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..off + 20]).unwrap();
    let (_store, dp) = RuleStore::fixed(Vec::new(), Mode::Verify, 2).unwrap();
    let opts = ReplayOptions::new(cut, 2);
    let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
    assert_eq!(r.stats.totals.packets, 5);
    let err = r.capture_error.expect("damage reported");
    assert!(err.contains("after 5 frames"), "{err}");

    let empty = dir.join("empty.pcap");
    std::fs::write(&empty, b"").unwrap();
    let e = replay(
        &ReplayOptions {
            input: empty,
            ..opts.clone()
        },
        &dp,
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a pcap"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Later fragments sent before their first fragment wait for it and take
/// its verdict: a port rule drops all of them, and an unruled datagram's
/// fragments all leave; a fragment whose first never comes is dropped once
/// it has waited out the hold time. With one worker and with two (the
/// replay's RSS sends every fragment of a datagram to one worker).
#[test]
fn fragments_sent_before_their_first_fragment_get_its_verdict() {
    let frames = gen::reordered_fragments();
    for workers in [1, 2] {
        let dir = tmpdir(&format!("reordered-{workers}"));
        let input = dir.join("reordered.pcap");
        gen::write_pcap(&input, &frames).unwrap();
        let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
        let (_store, dp) = RuleStore::fixed(&rules[..], Mode::Verify, workers).unwrap();
        let opts = ReplayOptions {
            out: Some(dir.join("out.pcap")),
            ..ReplayOptions::new(input, workers)
        };
        let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
        let t = &r.stats.totals;
        let dropped = frames.iter().filter(|f| f.verdict == Expect::Drop).count() as u64;
        assert_eq!(
            (
                t.packets,
                t.fragments_unresolved,
                t.fragments_released,
                t.fragments_timed_out,
                t.fragments_overflow,
                t.dropped,
                t.forwarded,
            ),
            (
                frames.len() as u64,
                gen::REORDERED_HELD,
                gen::REORDERED_RELEASED,
                gen::REORDERED_TIMED_OUT,
                0,
                dropped,
                frames.len() as u64 - dropped,
            ),
            "{workers} workers: {t:?}"
        );
        let mut want: Vec<Vec<u8>> = frames
            .iter()
            .filter(|f| f.verdict == Expect::Forward)
            .map(|f| f.data.clone())
            .collect();
        let mut got = frames_of(&dir.join("out.pcap"));
        want.sort();
        got.sort();
        assert_eq!(got, want, "{workers} workers: forwarded frames");
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// A flood of first fragments is counted: those refused because their
/// source holds its share of the table, and the entries evicted when many
/// sources fill it (what a many-source flood costs real flows).
#[test]
fn first_fragment_floods_are_counted() {
    let frames =
        gen::first_fragment_flood(cfdp_engine::FRAG_PER_SOURCE, cfdp_engine::FRAG_CAPACITY);
    let (dir, input) = capture("frag-flood", &frames);
    let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
    let (_store, dp) = RuleStore::fixed(&rules[..], Mode::Verify, 1).unwrap();
    let r = replay(&ReplayOptions::new(input, 1), &dp, &mut |_, _| {}).unwrap();
    let t = &r.stats.totals;
    assert_eq!(
        (
            t.fragments,
            t.forwarded,
            t.matched,
            t.fragments_source_refused,
            t.fragments_evicted
        ),
        (
            frames.len() as u64,
            frames.len() as u64,
            0,
            10,
            cfdp_engine::FRAG_PER_SOURCE as u64
        ),
        "{t:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// First fragments without their ports (an IPv6 chain cut short, an IPv4
/// tiny fragment) are dropped, and their later fragments do not take ports
/// from them: port rules cannot be bypassed by splitting the headers.
#[test]
fn incomplete_first_fragments_are_dropped_with_their_datagrams() {
    let frames = gen::incomplete_first_fragments();
    let (dir, input) = capture("incomplete", &frames);
    let rules = parse_rule_file(gen::MIXED_RULES).unwrap();
    let (_store, dp) = RuleStore::fixed(&rules[..], Mode::Verify, 1).unwrap();
    let opts = ReplayOptions {
        out: Some(dir.join("out.pcap")),
        ..ReplayOptions::new(input, 1)
    };
    let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
    let t = &r.stats.totals;
    assert_eq!(
        (
            t.fragments_incomplete,
            t.fragments_resolved,
            t.fragments_timed_out,
            t.dropped,
            t.forwarded
        ),
        (2, 0, 2, 4, 1),
        "{t:?}"
    );
    let want: Vec<Vec<u8>> = frames
        .iter()
        .filter(|f| f.verdict == Expect::Forward)
        .map(|f| f.data.clone())
        .collect();
    assert_eq!(frames_of(&dir.join("out.pcap")), want);
    std::fs::remove_dir_all(&dir).ok();
}

/// Filter-only mode hashes with a secret drawn per node (security review,
/// item 11): probes that collide with a rule under rapidhash's public
/// secrets — what an attacker computes offline — take the rule's redirect
/// there, and not under a node's own secret. The filter is made small and
/// its fingerprints 8 bits wide (a 32-bit Bloom tag) so that collisions
/// show up among a few thousand probes.
#[test]
fn precomputed_collisions_miss_a_node_with_its_own_hash_secret() {
    use cfdp_control::StoreConfig;
    use cfdp_rules::{Action, FlowKey, HashSecret, Match, Rule};
    let rule = Rule {
        id: 1,
        matcher: Match::Flow(
            cfdp_rules::ExactFlow::of_key(FlowKey::v4([10, 0, 0, 1], [10, 0, 0, 2], 17, 1, 2))
                .expect("a valid flow"),
        ),
        action: Action::Redirect(2),
    };
    let redirected = |secret: HashSecret, frames: &[gen::GenFrame], name: &str| {
        let cfg = StoreConfig {
            mode: Mode::FilterOnly,
            flow_capacity: 16,
            bloom: Some(cfdp_filter::BloomMode::Tag { bits: 32 }),
            max_rules: 256,
            hash_secret: secret,
            ..StoreConfig::default()
        };
        let stats = std::sync::Arc::new(cfdp_engine::LiveStats::new(1, cfg.max_rules));
        let store = RuleStore::with_rules(cfg, stats, vec![rule]).unwrap();
        let dir = tmpdir(name);
        let input = dir.join("probes.pcap");
        gen::write_pcap(&input, frames).unwrap();
        let opts = ReplayOptions {
            out: Some(dir.join("out.pcap")),
            ..ReplayOptions::new(input, 1)
        };
        replay(&opts, &store.worker_context(), &mut |_, _| {}).unwrap();
        let port2 = dir.join("out.port2.pcap");
        let got = if port2.exists() {
            frames_of(&port2)
        } else {
            Vec::new()
        };
        std::fs::remove_dir_all(&dir).ok();
        got
    };
    let probes = gen::probes(8192);
    let colliding = redirected(HashSecret::PUBLIC, &probes, "collide-public");
    assert!(
        colliding.len() >= 4,
        "only {} public collisions: the probe set is too small",
        colliding.len()
    );
    let frames: Vec<gen::GenFrame> = colliding
        .iter()
        .enumerate()
        .map(|(i, data)| gen::GenFrame {
            data: data.clone(),
            ts_ns: i as u64 * 1000,
            verdict: Expect::Forward,
            note: "precomputed collision",
        })
        .collect();
    // The same frames again under the public secrets: all redirected
    // (the attack works there) ...
    assert_eq!(
        redirected(HashSecret::PUBLIC, &frames, "again").len(),
        frames.len()
    );
    // ... and under a node's own secret, none is.
    let own = HashSecret::from_seed(0x5eed_cafe_f00d_d00d);
    assert_eq!(redirected(own, &frames, "own").len(), 0);
    // The rule's own flow still is: the store and the workers hash alike.
    let mut data = Vec::new();
    etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .udp(1, 2)
        .write(&mut data, b"x")
        .unwrap();
    let own_flow = [gen::GenFrame {
        data,
        ts_ns: 0,
        verdict: Expect::Redirect(2),
        note: "the rule's flow",
    }];
    assert_eq!(redirected(own, &own_flow, "own-flow").len(), 1);
    eprintln!("{} precomputed collisions of 8192 probes", colliding.len());
}

/// Whether an IPv4 frame is a whole datagram (not a fragment).
/// `frames` written as `NAME.pcap` in a new scratch directory (removed
/// when the directory is dropped): the directory and the capture's path.
fn capture(name: &str, frames: &[gen::GenFrame]) -> (cfdp_testkit::dirs::TestDir, PathBuf) {
    let dir = tmpdir(name);
    let input = dir.join(format!("{name}.pcap"));
    gen::write_pcap(&input, frames).unwrap();
    (dir, input)
}

fn whole(f: &[u8]) -> bool {
    f.len() < 22 || u16::from_be_bytes([f[20], f[21]]) & 0x3fff == 0
}

/// `v` sorted, without the frames of `out`.
fn sorted_without(v: &[Vec<u8>], out: &std::collections::HashSet<&[u8]>) -> Vec<Vec<u8>> {
    let mut w: Vec<Vec<u8>> = v
        .iter()
        .filter(|f| !out.contains(&f[..]))
        .cloned()
        .collect();
    w.sort();
    w
}

/// Stateful rules in a replay: every frame of the generated conversations
/// gets what `ct state established,related accept`, then the rules, then
/// drop would give it (replies, an ICMP error about a tracked connection,
/// timeouts by capture time, TIME_WAIT and CLOSE, a port reused), frame by
/// frame in order; and without a connection table the same rules drop
/// every answer.
#[test]
fn stateful_rules_let_answers_back_in() {
    use cfdp_testkit::stateful;
    let frames = stateful::stateful_conversations();
    let (dir, input) = capture("stateful", &frames);
    let rules = parse_rule_file(stateful::STATEFUL_RULES).unwrap();
    let run_on = |workers: usize, table: Option<std::sync::Arc<cfdp_conntrack::ConnTable>>| {
        let (_store, dp) =
            RuleStore::fixed_tracked(rules.clone(), Mode::Verify, workers, table).unwrap();
        let opts = ReplayOptions {
            out: Some(dir.join("out.pcap")),
            ..ReplayOptions::new(input.clone(), workers)
        };
        let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
        (r, frames_of(&dir.join("out.pcap")))
    };
    let table = || {
        let t = cfdp_conntrack::ConntrackSection::default()
            .table(cfdp_rules::HashSecret::from_seed(3))
            .unwrap();
        Some(std::sync::Arc::new(t))
    };
    let run = |t| run_on(1, t);
    let (r, got) = run(table());
    let want: Vec<&[u8]> = frames
        .iter()
        .filter(|f| f.verdict == Expect::Forward)
        .map(|f| &f.data[..])
        .collect();
    let unique: std::collections::HashSet<&[u8]> = frames.iter().map(|f| &f.data[..]).collect();
    assert_eq!(unique.len(), frames.len(), "frames are told apart");
    for (i, f) in frames.iter().enumerate() {
        let forwarded = got.iter().any(|g| g == &f.data);
        assert_eq!(
            forwarded,
            f.verdict == Expect::Forward,
            "frame {}: {}",
            i + 1,
            f.note
        );
    }
    // In order, but for fragments held until their first fragment came
    // (they follow it out).
    let got_whole: Vec<&[u8]> = got.iter().map(|g| &g[..]).filter(|f| whole(f)).collect();
    let want_whole: Vec<&[u8]> = want.iter().copied().filter(|f| whole(f)).collect();
    assert_eq!(got_whole, want_whole, "forwarded in order");
    assert_eq!(got.len(), want.len());
    let t = &r.stats.totals;
    assert_eq!(
        (t.ct_opened, t.ct_established, t.ct_related, t.ct_refused),
        (
            stateful::STATEFUL_OPENED,
            stateful::STATEFUL_ESTABLISHED,
            stateful::STATEFUL_RELATED,
            0
        ),
        "{t:?}"
    );
    // The same verdicts with three workers: both directions of a
    // connection and the ICMP errors about it share a worker (the replay's
    // RSS), and no worker's sweep runs ahead of another's capture time.
    // An answer in fragments in order goes with its flow (the first
    // fragment's 5-tuple); not the one whose fragments come last first:
    // they go to the worker of its addresses (a later fragment shows no
    // ports), which may judge them before the query's worker has opened
    // the connection — a limit of the replay's RSS (cfdp-pcap's `rss.rs`).
    let racing: std::collections::HashSet<&[u8]> = frames
        .iter()
        .filter(|f| f.note.contains("last first"))
        .map(|f| &f.data[..])
        .collect();
    for _ in 0..3 {
        let (r3, got3) = run_on(3, table());
        assert_eq!(
            sorted_without(&got3, &racing),
            sorted_without(&got, &racing),
            "3 workers forward what 1 does"
        );
        let ct = |t: &cfdp_engine::Totals| (t.ct_opened, t.ct_related);
        assert_eq!(ct(&r3.stats.totals), ct(&r.stats.totals));
    }
    // Stateless (no table): the rules alone, so no answer comes back in.
    let (r, got) = run(None);
    assert_eq!(r.stats.totals.ct_established, 0);
    assert!(
        got.len() < want.len() - 10,
        "{} of {}",
        got.len(),
        want.len()
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Flow export of a connection whose 5-tuple is opened again after
/// conntrack let it expire (its timeout, 120 s, shorter than the flow
/// cache's idle timeout here, 600 s): the old connection's record ends
/// there (connection expired) and the new connection starts its own.
/// Records: uniflow, the query's two and the answer's one; biflow, one a
/// connection. (A record that ran on would be one fewer either way.)
#[test]
fn a_reopened_connection_starts_a_record_of_its_own() {
    use cfdp_testkit::stateful;
    let frames = stateful::reopened_udp();
    let (_dir, input) = capture("reopened", &frames);
    let rules = parse_rule_file(stateful::STATEFUL_RULES).unwrap();
    // A collector nobody reads: what is counted is what was sent.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for (biflow, records) in [(false, 3), (true, 2)] {
        let table = cfdp_conntrack::ConntrackSection::default()
            .table(cfdp_rules::HashSecret::from_seed(3))
            .unwrap();
        let (_store, dp) = RuleStore::fixed_tracked(
            rules.clone(),
            Mode::Verify,
            1,
            Some(std::sync::Arc::new(table)),
        )
        .unwrap();
        let opts = ReplayOptions {
            ipfix: vec![sink.local_addr().unwrap()],
            ipfix_cache: cfdp_export::CacheSettings {
                idle_ns: 600_000_000_000,
                biflow,
                ..cfdp_export::CacheSettings::default()
            },
            ..ReplayOptions::new(input.clone(), 1)
        };
        let r = replay(&opts, &dp, &mut |_, _| {}).unwrap();
        let t = &r.stats.totals;
        assert_eq!((t.forwarded, t.ct_opened, t.ct_established), (3, 2, 1));
        assert_eq!(r.stats.export.records, records, "biflow {biflow}");
    }
}
