//! Truth from Linux: the crafted frames of `cfdp_testkit::crafted` go
//! through a Linux router namespace — nftables `ct state
//! established,related accept; iifname inside accept; policy drop`, every
//! conntrack sysctl at its default — and through `cfdp replay` with the
//! same policy as stateful rules (1 and 2 workers); the frames that come
//! out must be the same set. Once more with `tcp_be_liberal` on both
//! sides (`net.netfilter.nf_conntrack_tcp_be_liberal = 1` in the router,
//! `[conntrack] tcp_be_liberal = true` in cfdp): Linux's liberal path is
//! then the truth too.
//!
//! Needs root, `ip`, `nft` and `python3` (the frames are sent and caught
//! with packet sockets, `tests/lab/inject.py`); skipped without them
//! unless `REQUIRE_LINUX_LAB` is set (CI sets it, after installing
//! nftables).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use cfdp_testkit::captures::{write_pcap, Expect, GenFrame};
use cfdp_testkit::child::have;
use cfdp_testkit::crafted::{self, Crafted};

fn why_unavailable() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Some("not root".into());
    }
    ["ip", "nft", "python3"]
        .into_iter()
        .find(|c| !have(c))
        .map(|c| format!("{c} is not installed"))
}

/// The router's namespace `{p}r` and the hosts' `{p}h` (both router-facing
/// veth ends, no addresses), removed when dropped.
struct Router {
    p: String,
}

impl Router {
    /// The router, its conntrack sysctls at their defaults but
    /// `tcp_be_liberal` when `liberal`.
    fn up(p: &str, liberal: bool) -> Router {
        let r = Router { p: p.into() };
        r.down();
        let mac = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let (ra, rb, a, b, c) = (
            mac(crafted::MAC_RA),
            mac(crafted::MAC_RB),
            mac(crafted::MAC_A),
            mac(crafted::MAC_B),
            mac(crafted::MAC_C),
        );
        sh(&format!(
            "ip netns add {p}r; ip netns add {p}h
             ip link add {p}a type veth peer name {p}ra
             ip link add {p}b type veth peer name {p}rb
             ip link set {p}a netns {p}h; ip link set {p}b netns {p}h
             ip link set {p}ra netns {p}r; ip link set {p}rb netns {p}r
             ip netns exec {p}h sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
             for i in lo {p}a {p}b; do ip -n {p}h link set $i up; done
             ip -n {p}r link set {p}ra address {ra}; ip -n {p}r link set {p}rb address {rb}
             ip -n {p}r addr add 10.79.1.1/24 dev {p}ra; ip -n {p}r addr add 10.79.2.1/24 dev {p}rb
             ip -n {p}r addr add fd00:79:1::1/64 dev {p}ra nodad
             ip -n {p}r addr add fd00:79:2::1/64 dev {p}rb nodad
             for i in lo {p}ra {p}rb; do ip -n {p}r link set $i up; done
             ip netns exec {p}r sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1
             ip -n {p}r neigh replace 10.79.1.2 lladdr {a} dev {p}ra nud permanent
             ip -n {p}r neigh replace 10.79.1.3 lladdr {c} dev {p}ra nud permanent
             ip -n {p}r neigh replace 10.79.2.2 lladdr {b} dev {p}rb nud permanent
             ip -n {p}r neigh replace fd00:79:1::2 lladdr {a} dev {p}ra nud permanent
             ip -n {p}r neigh replace fd00:79:1::3 lladdr {c} dev {p}ra nud permanent
             ip -n {p}r neigh replace fd00:79:2::2 lladdr {b} dev {p}rb nud permanent"
        ));
        let ruleset = format!(
            "table inet lab {{
  chain forward {{
    type filter hook forward priority filter; policy drop;
    ct state established,related accept
    iifname \"{p}ra\" accept
  }}
}}
"
        );
        crafted::load_nftables(&format!("{p}r"), &ruleset);
        // After the ruleset: its `ct` expressions load conntrack, whose
        // sysctls are the namespace's own.
        sh(&format!(
            "ip netns exec {p}r sysctl -qw net.netfilter.nf_conntrack_tcp_be_liberal={}",
            u8::from(liberal)
        ));
        // cfdp's GRE defaults are this kernel's; the lab then shortens the
        // one-way timeout on both sides (`crafted::GRE_TIMEOUT_S`).
        let defaults = cfdp_conntrack::Timeouts::default();
        for (key, want) in [
            ("nf_conntrack_gre_timeout", defaults.gre_unreplied_s),
            ("nf_conntrack_gre_timeout_stream", defaults.gre_replied_s),
        ] {
            let out = Command::new("ip")
                .args(["netns", "exec", &format!("{p}r"), "sysctl", "-n"])
                .arg(format!("net.netfilter.{key}"))
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert_eq!(got, want.to_string(), "the kernel's {key}");
        }
        sh(&format!(
            "ip netns exec {p}r sysctl -qw net.netfilter.nf_conntrack_gre_timeout={}",
            crafted::GRE_TIMEOUT_S
        ));
        r
    }

    /// The serials of the frames the router let through.
    fn pass(&self, frames: &[Crafted], dir: &Path) -> BTreeSet<u32> {
        let p = &self.p;
        let list = dir.join("frames.txt");
        let mut text = String::new();
        for c in frames {
            let side = if c.inside { "in" } else { "out" };
            let hex: String = c.frame.iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("{side} {hex} {}\n", c.delay_ms));
        }
        std::fs::write(&list, text).unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/lab/inject.py");
        let out = Command::new("ip")
            .args(["netns", "exec", &format!("{p}h"), "python3", script])
            .arg(format!("{p}a"))
            .arg(format!("{p}b"))
            .arg(&list)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "inject.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sent: BTreeSet<u32> = frames.iter().map(|c| c.serial).collect();
        let out: Vec<Vec<u8>> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (_, hex) = l.split_once(' ')?;
                let bytes: Vec<u8> = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                    .collect();
                // Only the router's copies of our frames (not its own).
                let from_router = bytes.get(6..12) == Some(&crafted::MAC_RA[..])
                    || bytes.get(6..12) == Some(&crafted::MAC_RB[..]);
                from_router.then_some(bytes)
            })
            .collect();
        // Datagrams, not frames: Linux fragments again what it reassembled.
        crafted::delivered(out.iter().map(Vec::as_slice))
            .into_iter()
            .filter(|s| sent.contains(s))
            .collect()
    }

    fn down(&self) {
        for n in ["r", "h"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &format!("{}{n}", self.p)])
                .stderr(Stdio::null())
                .status();
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.down();
    }
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-ec", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// The serials `cfdp replay` forwards with `workers` workers, with
/// `tcp_be_liberal` when `liberal`.
fn cfdp_pass(frames: &[Crafted], dir: &Path, workers: usize, liberal: bool) -> BTreeSet<u32> {
    let capture = dir.join("lab.pcap");
    // The router's pace: one frame every 10 ms, and the cases' waits.
    let mut ts_ns = 1_000_000_000;
    let gen: Vec<GenFrame> = frames
        .iter()
        .map(|c| {
            ts_ns += 10_000_000 + u64::from(c.delay_ms) * 1_000_000;
            GenFrame {
                data: c.frame.clone(),
                ts_ns,
                verdict: Expect::Forward,
                note: c.case,
            }
        })
        .collect();
    write_pcap(&capture, &gen).unwrap();
    let rules = dir.join("rules.json");
    std::fs::write(&rules, crafted::LAB_RULES).unwrap();
    let config = dir.join("cfdp.toml");
    let mut cfg = cfdp_config::RunConfig::default();
    cfg.conntrack.tcp_be_liberal = liberal;
    cfg.conntrack.timeouts.gre_unreplied_s = u64::from(crafted::GRE_TIMEOUT_S);
    cfdp_testkit::node::write(&config, &cfg);
    let out = dir.join(format!("out{workers}.pcap"));
    let st = Command::new(env!("CARGO_BIN_EXE_cfdp"))
        .arg("replay")
        .arg(&capture)
        .arg("--rules")
        .arg(&rules)
        .arg("--config")
        .arg(&config)
        .arg("--out")
        .arg(&out)
        .args(["--workers", &workers.to_string()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "cfdp replay");
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut forwarded = Vec::new();
    while let Some(p) = r.next_packet() {
        forwarded.push(p.unwrap().data.into_owned());
    }
    crafted::delivered(forwarded.iter().map(Vec::as_slice))
}

#[test]
fn cfdp_lets_through_what_a_linux_router_with_conntrack_does() {
    compare_with_linux(false);
}

/// The same frames with `tcp_be_liberal` on both sides: only RSTs are
/// held to the window (and the other side's highest ACK), as Linux holds
/// them.
#[test]
fn with_tcp_be_liberal_cfdp_lets_through_what_linux_does() {
    compare_with_linux(true);
}

fn compare_with_linux(liberal: bool) {
    if let Some(why) = why_unavailable() {
        assert!(
            std::env::var_os("REQUIRE_LINUX_LAB").is_none(),
            "REQUIRE_LINUX_LAB is set, but the lab cannot run: {why}"
        );
        eprintln!("Linux lab skipped: {why}");
        return;
    }
    let frames = crafted::lab_cases();
    let dir = tempfile::tempdir().unwrap();
    let id = std::process::id() % 10_000;
    let name = format!("l{}{id}", if liberal { "l" } else { "x" });
    let linux = Router::up(&name, liberal).pass(&frames, dir.path());
    // Not vacuous: the router let some frames from outside through and
    // dropped others.
    let outside: Vec<&Crafted> = frames.iter().filter(|c| !c.inside).collect();
    assert!(
        outside.iter().any(|c| linux.contains(&c.serial)),
        "{linux:?}"
    );
    assert!(
        outside.iter().any(|c| !linux.contains(&c.serial)),
        "{linux:?}"
    );
    // One line a datagram (a fragmented one is several frames of one
    // serial): what Linux did, for the log.
    let mut datagrams: Vec<&Crafted> = frames.iter().collect();
    datagrams.dedup_by_key(|c| c.serial);
    for c in &datagrams {
        eprintln!(
            "#{:<3} {:<12} {:<6} {}",
            c.serial,
            side(c),
            verdict(&linux, c),
            c.case
        );
    }
    for workers in [1, 2] {
        let ours = cfdp_pass(&frames, dir.path(), workers, liberal);
        let (known, differ): (Vec<&&Crafted>, Vec<&&Crafted>) = datagrams
            .iter()
            .filter(|c| linux.contains(&c.serial) != ours.contains(&c.serial))
            .partition(|c| c.differs.is_some());
        let show = |c: &&Crafted| {
            format!(
                "#{} {} ({}): linux {}, cfdp {}",
                c.serial,
                side(c),
                c.case,
                verdict(&linux, c),
                verdict(&ours, c)
            )
        };
        assert!(
            differ.is_empty(),
            "{} of {} datagrams differ with {workers} worker(s), tcp_be_liberal {liberal}:\n{}",
            differ.len(),
            datagrams.len(),
            differ
                .iter()
                .map(|c| show(c))
                .collect::<Vec<_>>()
                .join("\n")
        );
        // The known differences are real ones (none has gone stale).
        let expected = datagrams.iter().filter(|c| c.differs.is_some()).count();
        assert_eq!(known.len(), expected, "a known difference is gone");
        for c in known {
            eprintln!("known difference: {} — {}", show(c), c.differs.unwrap());
        }
    }
}

fn side(c: &Crafted) -> &'static str {
    if c.inside {
        "from inside"
    } else {
        "from outside"
    }
}

fn verdict(passed: &BTreeSet<u32>, c: &Crafted) -> &'static str {
    if passed.contains(&c.serial) {
        "passes"
    } else {
        "drops"
    }
}
