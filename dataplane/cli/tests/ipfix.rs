//! Flow export read back by real collectors: captures the project
//! generates (and, where present, `../shared/pcaps`) go through `cfdp
//! replay --ipfix` to nfdump's `nfcapd` and pmacct's `nfacctd` at once;
//! the flows, packets and bytes `nfdump` reads back and `nfacctd`'s print
//! plugin writes, summed by 5-tuple, equal `cfdp replay --flows`' CSV of
//! the same replay, and `nfcapd` reports no sequence errors and no bad
//! packets. Where `softflowd` is installed, its own export of the
//! generated captures is printed beside (the issue's peer; not asserted).
//! With 1-in-N sampling (`--ipfix-sampling`, `[ipfix] sampling`) both
//! collectors scale each flow back to N times the frames taken.
//! Biflow records (`--ipfix-biflow`, `[ipfix] biflow`): nfdump reads every
//! answer of the stateful conversations in its initiator's record. The
//! deciding rule (`--ipfix-rule-pen`, `[ipfix] rule_pen`): pmacct reads
//! each record's rule as a custom primitive.
//!
//! Needs `nfcapd`, `nfdump` (Debian's `nfdump`) and `nfacctd` (`pmacct`);
//! skipped without them unless `REQUIRE_IPFIX_COLLECTORS` is set (CI sets
//! it, after installing nfdump, pmacct, softflowd and tshark). A second test has `tshark` decode every
//! message (seen failing with a record a byte shorter than its template;
//! tshark does not flag a set length that overruns its message).

use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;

use cfdp_testkit::captures::{self, write_pcap};
use cfdp_testkit::child::have;
use cfdp_testkit::stateful;

// Shared with tests/dpdk.rs, which reads records' times as well.
#[path = "ipfix/collectors.rs"]
#[allow(dead_code)]
mod collectors;

use collectors::{
    by_five_tuple, collectors_installed, flows_csv, nfdump_flow_records, nfdump_flows, same_flows,
    Flows, Nfacctd, Nfcapd,
};

/// The peer, where it is installed: `softflowd -r` on the same capture
/// (IPFIX, timeouts at their defaults) to an `nfcapd` of its own, read
/// back by nfdump and printed beside cfdp's figures. Not asserted equal:
/// softflowd counts IP bytes (no link header), keys ICMP by type and
/// code, and reads fragments otherwise.
fn softflowd_beside(name: &str, capture: &Path, dir: &Path, ours: &Flows) {
    if !have("softflowd") {
        eprintln!("{name}: softflowd not installed: no peer");
        return;
    }
    let nfcapd = Nfcapd::start(dir, "softflowd");
    let out = Command::new("softflowd")
        .arg("-r")
        .arg(capture)
        .args([
            "-n",
            &format!("127.0.0.1:{}", nfcapd.port),
            "-v",
            "10",
            "-d",
        ])
        .output()
        .expect("run softflowd");
    let store = nfcapd.store.clone();
    nfcapd.stop();
    let theirs = nfdump_flows(&store);
    let sum = |f: &Flows| f.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    eprintln!(
        "{name}: side by side, (flows, packets, bytes): cfdp ({}, {:?}), softflowd ({}, {:?}){}",
        ours.len(),
        sum(ours),
        theirs.len(),
        sum(&theirs),
        if out.status.success() {
            ""
        } else {
            " [softflowd failed]"
        }
    );
}

/// What one replay sent to the collector, read back.
struct ReadBack {
    csv: Flows,
    nfdump: Flows,
    /// nfcapd's last summary line.
    summary: String,
    /// What pmacct's `nfacctd` wrote.
    nfacctd: Flows,
}

/// `cfdp replay capture` with `args`, exporting to each of `ports` on
/// 127.0.0.1: its report, once it exited successfully.
fn replay_to(capture: &Path, args: &[&str], ports: &[u16]) -> serde_json::Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cfdp"));
    c.arg("replay").arg(capture).args(args);
    for p in ports {
        c.args(["--ipfix", &format!("127.0.0.1:{p}")]);
    }
    let out = c.output().expect("run cfdp replay");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Replays `capture` to a fresh `nfcapd` and the test's `nfacctd` (two
/// collectors of one exporter).
fn through_collectors(capture: &Path, dir: &Path, nfacctd: &mut Nfacctd) -> ReadBack {
    let nfcapd = Nfcapd::start(dir, "nfcapd");
    let csv = dir.join("flows.csv");
    let flows = ["--flows", csv.to_str().unwrap()];
    let report = replay_to(capture, &flows, &[nfcapd.port, nfacctd.port]);
    assert_eq!(report["export"]["send_errors"], 0, "{}", report["export"]);
    assert_eq!(report["export"]["queue_full"], 0, "{}", report["export"]);
    assert!(report["export"]["records"].as_u64() >= Some(1) || report["flows"] == 0);
    let store = nfcapd.store.clone();
    let summary = nfcapd.stop();
    let csv = flows_csv(&csv);
    let packets = csv.values().map(|v| v.0).sum();
    ReadBack {
        nfdump: nfdump_flows(&store),
        summary,
        nfacctd: nfacctd.take(packets),
        csv,
    }
}

/// `generated`: a capture the project made, which must have flows (a
/// shared one may hold no IP at all).
fn check(name: &str, capture: &Path, dir: &Path, generated: bool, nfacctd: &mut Nfacctd) {
    let r = through_collectors(capture, dir, nfacctd);
    assert!(
        !generated || !r.csv.is_empty(),
        "{name}: no flows in the replay"
    );
    let sum = |f: &Flows| f.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
    eprintln!(
        "{name}: replay {} flows {:?}, nfdump {} {:?}; nfcapd: {}",
        r.csv.len(),
        sum(&r.csv),
        r.nfdump.len(),
        sum(&r.nfdump),
        r.summary
    );
    assert!(
        r.summary.contains("Sequence Errors: 0"),
        "{name}: {}",
        r.summary
    );
    assert!(
        r.summary.contains("Bad Packets: 0"),
        "{name}: {}",
        r.summary
    );
    same_flows(name, "nfdump", &r.nfdump, &r.csv);
    eprintln!(
        "{name}: nfacctd {} flows {:?}",
        r.nfacctd.len(),
        sum(&r.nfacctd)
    );
    same_flows(name, "nfacctd", &r.nfacctd, &r.csv);
}

#[test]
fn nfcapd_reads_back_every_flow_packet_and_byte() {
    if !collectors_installed(&["nfcapd", "nfdump", "nfacctd"], "IPFIX collectors") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut nfacctd = Nfacctd::start(dir.path());
    let generated = [
        ("mixed", captures::mixed()),
        ("pairs", captures::pairs(3000)),
        ("soak", captures::soak(40, 50)),
    ];
    for (name, frames) in generated {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let pcap = d.join("capture.pcap");
        write_pcap(&pcap, &frames).unwrap();
        check(name, &pcap, &d, true, &mut nfacctd);
        softflowd_beside(name, &pcap, &d, &flows_csv(&d.join("flows.csv")));
    }
    // The shared captures, where this checkout has them beside it.
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/pcaps");
    if let Ok(entries) = std::fs::read_dir(&shared) {
        let mut caps: Vec<_> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "pcap" || x == "pcapng"))
            .collect();
        caps.sort();
        for (i, cap) in caps.iter().enumerate() {
            let d = dir.path().join(format!("shared{i}"));
            std::fs::create_dir_all(&d).unwrap();
            check(
                &cap.file_name().unwrap().to_string_lossy(),
                cap,
                &d,
                false,
                &mut nfacctd,
            );
        }
    }
}

/// The records of a replay of the stateful conversations through their
/// stateful rules, exported with `extra` to a fresh
/// `nfcapd`: the flows nfdump reads (a biflow record split in two), the
/// replay's CSV, and nfdump's records.
fn stateful_export(dir: &Path, extra: &[&str]) -> (Flows, Flows, Vec<serde_json::Value>) {
    std::fs::create_dir_all(dir).unwrap();
    let pcap = dir.join("stateful.pcap");
    write_pcap(&pcap, &stateful::stateful_conversations()).unwrap();
    let rules = dir.join("rules.json");
    std::fs::write(&rules, stateful::STATEFUL_RULES).unwrap();
    let csv = dir.join("flows.csv");
    let nfcapd = Nfcapd::start(dir, "nfcapd");
    // One worker: with two, a datagram whose later fragments come first
    // goes where its addresses hash and may be judged before its query,
    // which the other worker opens (the replay's RSS), a race.
    let mut args = vec!["--workers", "1", "--rules", rules.to_str().unwrap()];
    args.extend(["--flows", csv.to_str().unwrap()]);
    args.extend(extra);
    replay_to(&pcap, &args, &[nfcapd.port]);
    let store = nfcapd.store.clone();
    let summary = nfcapd.stop();
    assert!(summary.contains("Sequence Errors: 0"), "{summary}");
    assert!(summary.contains("Bad Packets: 0"), "{summary}");
    (
        nfdump_flows(&store),
        flows_csv(&csv),
        nfdump_flow_records(&store),
    )
}

/// The stateful conversations' answers a biflow record counts: TCP and
/// UDP frames and ICMP echo replies from outside 10.1.0.0/16 that pass
/// (the rules drop every other frame from outside; an ICMP error that
/// passes is related to a connection, not its answer), each with its
/// transport header (a later fragment is keyed by its own frame, ports 0,
/// and is no connection's answer by its 5-tuple).
fn stateful_answers() -> u64 {
    let frames = stateful::stateful_conversations();
    let answer = |f: &captures::GenFrame| {
        let d = &f.data;
        d.len() > 34
            && d[12..14] == [0x08, 0x00]
            && (matches!(d[23], 6 | 17) || d[23] == 1 && d[34] == 0)
            && d[26..28] != [10, 1]
            && u16::from_be_bytes([d[20], d[21]]) & 0x1fff == 0
            && f.verdict == captures::Expect::Forward
    };
    frames.iter().filter(|f| answer(f)).count() as u64
}

/// Biflow records (`--ipfix-biflow`, `[ipfix] biflow`) as nfdump reads
/// them: the stateful conversations through their stateful rules. Every
/// answer of a connection — and nothing else — is counted
/// in its initiator's record (nfdump's out packets), where one record a
/// direction counts none so; and either way every flow's packets and bytes
/// equal the replay's CSV (a biflow record read as two flows), so what
/// moved into the reverse counts left the answers' own records.
#[test]
fn biflow_records_count_answers_with_their_initiator() {
    if !collectors_installed(&["nfcapd", "nfdump"], "biflow export") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out_packets = |records: &[serde_json::Value]| {
        records
            .iter()
            .map(|r| r["out_packets"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let (uni, uni_csv, uni_records) = stateful_export(&dir.path().join("uniflow"), &[]);
    same_flows("stateful, uniflow", "nfdump", &uni, &uni_csv);
    // Rules named too: nfdump skips the enterprise element it does not
    // know, and reads the rest of each record.
    let pen = DOC_PEN.to_string();
    let biflow = ["--ipfix-biflow", "--ipfix-rule-pen", &pen];
    let (bi, bi_csv, bi_records) = stateful_export(&dir.path().join("biflow"), &biflow);
    same_flows("stateful, biflow", "nfdump", &bi, &bi_csv);
    let answers = stateful_answers();
    eprintln!(
        "stateful: uniflow {} records, biflow {} records with {} answers in them",
        uni_records.len(),
        bi_records.len(),
        out_packets(&bi_records)
    );
    assert!(answers > 0);
    assert_eq!(out_packets(&uni_records), 0);
    assert_eq!(out_packets(&bi_records), answers);
    assert!(bi_records.len() < uni_records.len());
}

/// RFC 5612's private enterprise number for documentation: the PEN the
/// rule test names rules under.
const DOC_PEN: u32 = 32473;

/// The rule each record names (`--ipfix-rule-pen`: element 1 of that PEN)
/// as pmacct's `nfacctd` reads it, a custom primitive aggregated with the
/// 5-tuple: the soak capture's 40 flows, flows 0–29 each allowed by a
/// rule of its own (id 100 + flow), flows 30–39 by none (pmacct: 0, the
/// element absent from their records' template) — every flow's packets
/// and bytes equal the replay's CSV.
#[test]
fn pmacct_reads_the_rule_each_record_names() {
    if !collectors_installed(&["nfacctd"], "rule export") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("soak.pcap");
    write_pcap(&pcap, &captures::soak(40, 50)).unwrap();
    let rules: Vec<String> = (0..30)
        .map(|f| {
            let (src, _) = captures::soak_flow(f);
            let src = std::net::Ipv4Addr::from(src);
            format!(
                r#"{{"id": {}, "match": {{"src_prefix": "{src}/32"}}, "action": "allow"}}"#,
                100 + u32::from(f)
            )
        })
        .collect();
    let rule_file = dir.path().join("rules.json");
    std::fs::write(
        &rule_file,
        format!(r#"{{"rules": [{}]}}"#, rules.join(",\n")),
    )
    .unwrap();
    let primitives = dir.path().join("primitives.lst");
    std::fs::write(
        &primitives,
        format!("name=cfdp_rule field_type={DOC_PEN}:1 len=4 semantics=u_int\n"),
    )
    .unwrap();
    let mut nfacctd = Nfacctd::start_aggregating(
        dir.path(),
        "src_host, dst_host, proto, src_port, dst_port, cfdp_rule",
        &format!("aggregate_primitives: {}\n", primitives.display()),
    );
    let csv = dir.path().join("flows.csv");
    let pen = DOC_PEN.to_string();
    let args = [
        "--rules",
        rule_file.to_str().unwrap(),
        "--ipfix-rule-pen",
        &pen,
        "--flows",
        csv.to_str().unwrap(),
    ];
    replay_to(&pcap, &args, &[nfacctd.port]);
    let csv = flows_csv(&csv);
    let rows = nfacctd.take_rows(csv.values().map(|v| v.0).sum());
    for row in &rows {
        let flow = row["SRC_IP"]
            .rsplit('.')
            .next()
            .unwrap()
            .parse::<u32>()
            .unwrap();
        let want = if flow < 30 { 100 + flow } else { 0 };
        // The print plugin names a custom primitive's column as written.
        assert_eq!(row["cfdp_rule"], want.to_string(), "{row:?}");
    }
    same_flows("soak, rules named", "nfacctd", &by_five_tuple(&rows), &csv);
    eprintln!("nfacctd: {} rows, every flow's rule as named", rows.len());
}

/// What a collector scaling a 1-in-`n` export of the soak capture by
/// one worker reads back: for the first frame and every `n`th after it,
/// `n` packets of its flow and `n` times its bytes.
fn soak_sampled(frames: &[captures::GenFrame], n: u32) -> Flows {
    let mut want = Flows::new();
    for (k, f) in frames.iter().enumerate().step_by(n as usize) {
        let (s, d) = captures::soak_flow(captures::soak_frame_flow(k as u32, 40));
        let key = (
            std::net::Ipv4Addr::from(s).to_string(),
            std::net::Ipv4Addr::from(d).to_string(),
            17,
            1000,
            2000,
        );
        let e = want.entry(key).or_default();
        e.0 += u64::from(n);
        e.1 += u64::from(n) * f.data.len() as u64;
    }
    want
}

/// 1-in-N sampling as the collectors read it: one worker takes the first
/// frame and every Nth after it (systematic count-based selection),
/// the options template states N, and nfdump and pmacct (renormalizing)
/// scale each record by N: every flow's packets and bytes equal N times
/// those of the packets taken, computed here from the capture's own
/// order. The soak capture's frames are one length and cycle through
/// its flows (frame k of flow 7k mod 40), so the taken ones spread over
/// the flows unevenly — as a wrong phase or rate would show.
#[test]
fn sampled_export_is_scaled_back_by_both_collectors() {
    if !collectors_installed(&["nfcapd", "nfdump", "nfacctd"], "sampled export") {
        return;
    }
    const N: u32 = 7;
    let dir = tempfile::tempdir().unwrap();
    let frames = captures::soak(40, 50);
    let pcap = dir.path().join("soak.pcap");
    write_pcap(&pcap, &frames).unwrap();
    let want = soak_sampled(&frames, N);
    let nfcapd = Nfcapd::start(dir.path(), "nfcapd");
    // pmacct scales the counts only when asked to (without it, seen: the
    // counts of the frames taken, unscaled).
    let mut nfacctd = Nfacctd::start_with(dir.path(), "nfacctd_renormalize: true\n");
    let sampled = ["--workers", "1", "--ipfix-sampling", &N.to_string()];
    replay_to(&pcap, &sampled, &[nfcapd.port, nfacctd.port]);
    let store = nfcapd.store.clone();
    let summary = nfcapd.stop();
    assert!(summary.contains("Sequence Errors: 0"), "{summary}");
    let packets = want.values().map(|v| v.0).sum();
    same_flows("soak 1 in 7", "nfdump", &nfdump_flows(&store), &want);
    same_flows("soak 1 in 7", "nfacctd", &nfacctd.take(packets), &want);
    eprintln!(
        "1 in {N}: {} flows, {packets} packets as scaled by nfdump and nfacctd",
        want.len()
    );
}

/// `cfdp run`'s `[ipfix] sampling` reaches its workers and its exporter
/// (the pcap backend; the DPDK backend starts both from the same
/// section, `run/ipfix.rs`): one pass of the soak capture, 1 in 5, read
/// back by nfdump scaled as `cfdp replay --ipfix-sampling 5`'s would be.
#[test]
fn cfdp_run_samples_as_its_ipfix_section_says() {
    if !collectors_installed(&["nfcapd", "nfdump"], "cfdp run's sampling") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let frames = captures::soak(40, 50);
    let pcap = dir.path().join("soak.pcap");
    write_pcap(&pcap, &frames).unwrap();
    let store = run_to_nfcapd(dir.path(), &pcap, |c| c.ipfix.sampling = 5);
    same_flows(
        "cfdp run, 1 in 5",
        "nfdump",
        &nfdump_flows(&store),
        &soak_sampled(&frames, 5),
    );
}

/// `cfdp run` with `[ipfix] biflow` (and `rule_pen`): the stateful
/// conversations through their rules, read back by nfdump as `cfdp replay
/// --ipfix-biflow`'s are — every answer in its initiator's record, every
/// flow as the replay's CSV counts it.
#[test]
fn cfdp_run_makes_biflow_records_as_its_ipfix_section_says() {
    if !collectors_installed(&["nfcapd", "nfdump"], "cfdp run's biflow records") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, csv, _) = stateful_export(&dir.path().join("replay"), &[]);
    let pcap = dir.path().join("stateful.pcap");
    write_pcap(&pcap, &stateful::stateful_conversations()).unwrap();
    let rules = dir.path().join("rules.json");
    std::fs::write(&rules, stateful::STATEFUL_RULES).unwrap();
    let store = run_to_nfcapd(dir.path(), &pcap, |c| {
        c.rules.file = rules.display().to_string();
        c.ipfix.biflow = true;
        c.ipfix.rule_pen = DOC_PEN;
    });
    let records = nfdump_flow_records(&store);
    let answers: u64 = records
        .iter()
        .map(|r| r["out_packets"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(answers, stateful_answers());
    same_flows("cfdp run, biflow", "nfdump", &nfdump_flows(&store), &csv);
}

/// One pass of `pcap` through `cfdp run` (pcap backend, one worker, no
/// rules but those `edit` names) exporting to a fresh `nfcapd`: the
/// directory nfcapd wrote, once it has read every message (no sequence
/// error).
fn run_to_nfcapd(
    dir: &Path,
    pcap: &Path,
    edit: impl FnOnce(&mut cfdp_config::RunConfig),
) -> std::path::PathBuf {
    let nfcapd = Nfcapd::start(dir, "nfcapd");
    let cfg = dir.join("run.toml");
    let mut c = cfdp_config::RunConfig::default();
    c.dataplane.workers = 1;
    c.pcap.input = pcap.to_path_buf();
    c.rules.file = String::new();
    c.control.socket = String::new();
    c.ipfix.collectors = vec![format!("127.0.0.1:{}", nfcapd.port)];
    edit(&mut c);
    cfdp_testkit::node::write(&cfg, &c);
    // After its pass `cfdp run` serves until SIGTERM: its records are
    // out once it says the input is exhausted (the workers are done).
    let err = dir.join("run.err");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cfdp"))
        .args(["run", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start cfdp run");
    let done = (0..800).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        std::fs::read_to_string(&err).is_ok_and(|e| e.contains("input exhausted"))
    });
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    assert!(done && status.success(), "{status}: {stderr}");
    let store = nfcapd.store.clone();
    let summary = nfcapd.stop();
    assert!(summary.contains("Sequence Errors: 0"), "{summary}");
    store
}

/// `messages` ((source port, payload)) as raw IPv4/UDP packets from
/// 127.0.0.1 to 127.0.0.1:`port`, in a capture at `path`.
fn write_udp_capture(path: &Path, port: u16, messages: &[(u16, Vec<u8>)]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let header = PcapHeader {
        datalink: pcap_file::DataLink::IPV4,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(std::fs::File::create(path).unwrap(), header).unwrap();
    for (i, (from, m)) in messages.iter().enumerate() {
        let total = (20 + 8 + m.len()) as u16;
        let mut p = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1,
        ];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&from.to_be_bytes());
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&(total - 20).to_be_bytes());
        p.extend_from_slice(&[0, 0]);
        p.extend_from_slice(m);
        let ts = std::time::Duration::from_millis(i as u64);
        w.write_packet(&PcapPacket::new(ts, p.len() as u32, &p))
            .unwrap();
    }
}

/// The messages of four replays' export, caught on a socket of the
/// test's own (its port returned), each with the port it came from: each
/// replay's exporter is its own transport session, with its own sequence
/// numbers. The soak capture twice — every packet, then 1 in 7 (the
/// sampling options template and its record in the first message) — and
/// the stateful conversations through their rules as biflow records that
/// name their rules.
fn replays_caught(dir: &Path) -> (u16, Vec<(u16, Vec<u8>)>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .unwrap();
    let port = sock.local_addr().unwrap().port();
    let rules = dir.join("stateful.json");
    std::fs::write(&rules, stateful::STATEFUL_RULES).unwrap();
    let pen = DOC_PEN.to_string();
    let biflow = [
        "--ipfix-biflow",
        "--ipfix-rule-pen",
        &pen,
        "--rules",
        rules.to_str().unwrap(),
    ];
    for (name, frames, sampling, extra) in [
        ("mixed", captures::mixed(), "1", &[][..]),
        ("soak", captures::soak(40, 50), "1", &[]),
        ("soak", captures::soak(40, 50), "7", &[]),
        ("stateful", stateful::stateful_conversations(), "1", &biflow),
    ] {
        let pcap = dir.join(format!("{name}.pcap"));
        write_pcap(&pcap, &frames).unwrap();
        let mut args = vec!["--ipfix-sampling", sampling];
        args.extend(extra);
        replay_to(&pcap, &args, &[port]);
    }
    // The replays are over and their exporters joined: every datagram is
    // queued on the socket, which the reads below drain.
    let mut messages = Vec::new();
    let mut buf = [0u8; 2048];
    while let Ok((n, from)) = sock.recv_from(&mut buf) {
        messages.push((from.port(), buf[..n].to_vec()));
    }
    (port, messages)
}

/// `tshark -r file` with `extra`, UDP `port` decoded as IPFIX: its output.
fn tshark(file: &Path, port: u16, extra: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-d", &format!("udp.port=={port},cflow")])
        .args(extra)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every message of a replay's export, caught on a socket of the test's
/// own and written to a capture (raw IPv4/UDP), is decoded by `tshark`'s
/// IPFIX dissector (`cflow`) with no malformed packet and no expert
/// warning or error; the sampling rate and the biflow records' reverse
/// elements by their names. Needs `tshark`; skipped without it unless
/// `REQUIRE_IPFIX_COLLECTORS` is set.
#[test]
fn tshark_decodes_every_message() {
    if !have("tshark") {
        assert!(
            std::env::var_os("REQUIRE_IPFIX_COLLECTORS").is_none(),
            "REQUIRE_IPFIX_COLLECTORS is set, but tshark is not installed"
        );
        eprintln!("tshark check skipped: tshark not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (port, messages) = replays_caught(dir.path());
    assert!(messages.len() >= 6, "{} messages", messages.len());
    let file = dir.path().join("ipfix.pcap");
    write_udp_capture(&file, port, &messages);
    let decode = |extra: &[&str]| tshark(&file, port, extra);
    // One IPFIX version field a message: every one decoded as IPFIX.
    let versions = decode(&["-T", "fields", "-e", "cflow.version"]);
    assert_eq!(
        versions.lines().filter(|l| l.trim() == "10").count(),
        messages.len(),
        "{versions}"
    );
    // The sampled replay's options record, decoded by its elements' names.
    let rate = decode(&[
        "-T",
        "fields",
        "-e",
        "cflow.sampling_interval",
        "-e",
        "cflow.sampling_packet_interval",
        "-e",
        "cflow.sampling_packet_space",
        "-Y",
        "cflow.sampling_interval",
    ]);
    assert_eq!(rate.trim(), "7\t1\t6", "{rate}");
    // The stateful replay's biflow records: each names its source the
    // initiator (1), with its answers' counts as reverse elements (the
    // dissector labels them "Reverse Type 2 PKTS", "Reverse Type 1 BYTES").
    let directions = decode(&["-T", "fields", "-e", "cflow.biflow_direction"]);
    let values: Vec<&str> = directions
        .split([',', '\n'])
        .filter(|v| !v.trim().is_empty())
        .collect();
    assert!(
        !values.is_empty() && values.iter().all(|v| v.trim() == "1"),
        "{directions}"
    );
    let reverse = decode(&["-V", "-Y", "cflow.biflow_direction"]);
    assert_eq!(
        reverse.matches("(Reverse Type 2 PKTS)").count(),
        values.len(),
        "{reverse}"
    );
    let verbose = decode(&["-V"]);
    for bad in ["Malformed", "Expert Info", "Exception"] {
        assert!(!verbose.contains(bad), "tshark: {bad} in\n{verbose}");
    }
    eprintln!(
        "tshark decoded {} messages, no error; {} biflow records",
        messages.len(),
        values.len()
    );
}

/// An `--ipfix` collector that is not `HOST:PORT` is refused before the
/// replay starts: exit code 2, the value and what it needs named.
#[test]
fn a_collector_that_is_not_host_port_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("mixed.pcap");
    write_pcap(&pcap, &captures::mixed()).unwrap();
    for bad in ["no-port-here", "127.0.0.1:notaport"] {
        let out = Command::new(env!("CARGO_BIN_EXE_cfdp"))
            .arg("replay")
            .arg(&pcap)
            .args(["--ipfix", bad])
            .output()
            .expect("run cfdp replay");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains(bad) && err.contains("HOST:PORT"), "{err}");
        assert!(out.stdout.is_empty(), "{bad}: a report was printed");
    }
}
