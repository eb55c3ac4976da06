//! The collectors the IPFIX tests send to — nfdump's `nfcapd` and
//! pmacct's `nfacctd`, each on a UDP port of its own on 127.0.0.1 — and
//! what they and `cfdp replay --flows` say, summed by 5-tuple. Shared by
//! `tests/ipfix.rs` (the pcap backend) and `tests/dpdk.rs` (the DPDK
//! backend).

use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::path::Path;
use std::process::Command;

/// (src, dst, proto, sport, dport) → (packets, bytes).
pub(super) type Flows = BTreeMap<(String, String, u8, u16, u16), (u64, u64)>;

/// Adds a CSV row's packets and bytes (its sixth and seventh columns) to
/// its flow; `cols`: the columns of source, destination, protocol, source
/// port and destination port.
pub(super) fn add_csv_row(flows: &mut Flows, line: &str, cols: [usize; 5]) {
    let f: Vec<&str> = line.split(',').collect();
    let [src, dst, proto, sport, dport] = cols;
    let k = (
        f[src].to_string(),
        f[dst].to_string(),
        f[proto].parse().unwrap(),
        f[sport].parse().unwrap(),
        f[dport].parse().unwrap(),
    );
    let e = flows.entry(k).or_default();
    e.0 += f[5].parse::<u64>().unwrap();
    e.1 += f[6].parse::<u64>().unwrap();
}

/// `cfdp replay --flows`' CSV, by 5-tuple.
pub(super) fn flows_csv(path: &Path) -> Flows {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Flows::new();
    for line in text.lines().skip(1) {
        add_csv_row(&mut out, line, [0, 1, 2, 3, 4]);
    }
    out
}

/// Every flow of the replay's CSV, with its packets and bytes, is in what
/// `collector` read back, and nothing else is.
pub(super) fn same_flows(name: &str, collector: &str, theirs: &Flows, csv: &Flows) {
    for (k, v) in csv {
        assert_eq!(theirs.get(k), Some(v), "{name}: {collector}: flow {k:?}");
    }
    assert_eq!(
        theirs.len(),
        csv.len(),
        "{name}: flows {collector} has that the replay has not"
    );
}

/// The flow records `nfdump -R dir -o json` reads (none: empty).
pub(super) fn nfdump_flow_records(dir: &Path) -> Vec<serde_json::Value> {
    let out = Command::new("nfdump")
        .arg("-R")
        .arg(dir)
        .args(["-o", "json"])
        .output()
        .expect("run nfdump");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No record: nfdump prints its brackets around "No matching flows"
    // (or the opening one alone).
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim() == "[" || text.contains("No matching flows") {
        return Vec::new();
    }
    let records: Vec<serde_json::Value> = serde_json::from_str(&text).expect("nfdump's JSON");
    records
        .into_iter()
        .filter(|r| r["type"] == "FLOW")
        .collect()
}

/// Each flow record's first time as nfdump prints it (`first`, e.g.
/// "2026-11-29T20:40:12.123").
pub(super) fn nfdump_first_times(dir: &Path) -> Vec<String> {
    nfdump_flow_records(dir)
        .iter()
        .map(|r| {
            r["first"]
                .as_str()
                .unwrap_or_else(|| panic!("no first time in {r}"))
                .to_string()
        })
        .collect()
}

/// What `nfdump -R dir -o json` reads, summed by 5-tuple (a flow may be
/// several records: idle, active, forced ends; a biflow record is two
/// flows). An ICMP flow's ports are
/// its type and code, as the replay's CSV has them (type · 256 + code).
pub(super) fn nfdump_flows(dir: &Path) -> Flows {
    let mut flows = Flows::new();
    for r in &nfdump_flow_records(dir) {
        let num = |f: &str| r[f].as_u64().unwrap_or(0);
        let addr = |v4: &str, v6: &str| {
            r[v4]
                .as_str()
                .or_else(|| r[v6].as_str())
                .unwrap_or_else(|| panic!("no address in {r}"))
                .to_string()
        };
        let proto = num("proto") as u8;
        let (sp, dp) = if matches!(proto, 1 | 58) && r.get("icmp_type").is_some() {
            (0, num("icmp_type") << 8 | num("icmp_code"))
        } else {
            (num("src_port"), num("dst_port"))
        };
        let k = (
            addr("src4_addr", "src6_addr"),
            addr("dst4_addr", "dst6_addr"),
            proto,
            sp as u16,
            dp as u16,
        );
        // A biflow record's out packets and bytes (RFC 5103's reverse
        // elements, as nfdump reads them) are its answers': the reversed
        // 5-tuple's (a record started by an answer counts no packet the
        // other way: no flow there).
        let back = (k.1.clone(), k.0.clone(), k.2, k.4, k.3);
        for (key, p, b) in [
            (k, "in_packets", "in_bytes"),
            (back, "out_packets", "out_bytes"),
        ] {
            if num(p) > 0 {
                let e = flows.entry(key).or_default();
                e.0 += num(p);
                e.1 += num(b);
            }
        }
    }
    flows
}

/// Whether the collector tools `tools` are installed; `false` (the test
/// skips, saying so as `what`) when they are not, unless
/// `REQUIRE_IPFIX_COLLECTORS` is set (CI): then missing ones fail it.
pub(super) fn collectors_installed(tools: &[&str], what: &str) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|c| !cfdp_testkit::child::have(c))
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("REQUIRE_IPFIX_COLLECTORS").is_none(),
        "REQUIRE_IPFIX_COLLECTORS is set, but {missing:?} are not installed"
    );
    eprintln!("{what} skipped: {missing:?} not installed");
    false
}

/// A UDP port nobody holds now, for `nfacctd`, which refuses port 0
/// ([`child_port`] then checks that nfacctd itself took it).
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Waits until `log` says `what` and `child` holds a UDP socket (`want`:
/// on that port) — a collector's log line may come before its socket, and
/// data sent before it binds, the templates first, would be lost — and
/// returns the socket's port; `None` once the child has exited (the port
/// it was given was taken meanwhile) or after 5 s.
fn child_port(
    child: &mut std::process::Child,
    log: &Path,
    what: &str,
    want: Option<u16>,
) -> Option<u16> {
    use cfdp_testkit::ports::{bound_ports, Proto};
    for _ in 0..200 {
        if !matches!(child.try_wait(), Ok(None)) {
            return None;
        }
        let said = std::fs::read_to_string(log).is_ok_and(|l| l.contains(what));
        let port = bound_ports(child.id(), Proto::Udp)
            .into_iter()
            .find(|p| want.is_none_or(|w| w == *p));
        if let (true, Some(port)) = (said, port) {
            return Some(port);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    None
}

/// Bytes queued for reading on UDP `port` of 127.0.0.1 (`None`: no such
/// socket), from `/proc/net/udp`.
pub(super) fn udp_queue(port: u16) -> Option<u64> {
    let want = format!("0100007F:{port:04X}");
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    let line = table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&want))?;
    // "tx_queue:rx_queue" in hex, the fifth column.
    let queues = line.split_whitespace().nth(4)?;
    u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
}

/// A running `nfcapd` writing to `dir/NAME/`, its log in `dir/NAME.log`,
/// listening on a port of its own on 127.0.0.1.
pub(super) struct Nfcapd {
    child: std::process::Child,
    pub(super) port: u16,
    pub(super) store: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl Nfcapd {
    pub(super) fn start(dir: &Path, name: &str) -> Self {
        let store = dir.join(name);
        std::fs::create_dir_all(&store).unwrap();
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).unwrap();
        // Port 0: the kernel picks one, read back from its socket.
        let mut child = Command::new("nfcapd")
            .arg("-w")
            .arg(&store)
            .args(["-b", "127.0.0.1", "-p", "0"])
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .expect("start nfcapd");
        let port = child_port(&mut child, &log, "Startup", None).unwrap_or_else(|| {
            panic!(
                "nfcapd did not start: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        Nfcapd {
            child,
            port,
            store,
            log,
        }
    }

    /// Stops it once its socket has nothing left to read (a datagram
    /// still queued when it stops would be lost); its log's last summary
    /// line (flows, packets, bytes, sequence errors, bad packets).
    pub(super) fn stop(mut self) -> String {
        for _ in 0..400 {
            if udp_queue(self.port) == Some(0) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        // SIGTERM: nfcapd writes what it holds and its summary, then exits.
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().unwrap();
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .rfind(|l| l.contains("Sequence Errors"))
            .unwrap_or_default()
            .to_string()
    }
}

/// A running pmacct `nfacctd` on a port of its own on 127.0.0.1, its print
/// plugin appending CSV (numeric protocols) to `dir/nfacctd.csv` each
/// second, aggregated by 5-tuple; its log in `dir/nfacctd.log`. One for
/// the whole test: each replay's rows are those appended after the last
/// replay's (a replay starts once the one before it is all written).
pub(super) struct Nfacctd {
    child: std::process::Child,
    pub(super) port: u16,
    out: std::path::PathBuf,
    /// The bytes of `out` that earlier replays' rows took.
    read: usize,
}

impl Nfacctd {
    pub(super) fn start(dir: &Path) -> Self {
        Self::start_with(dir, "")
    }

    /// [`Self::start`] with `extra` configuration lines.
    pub(super) fn start_with(dir: &Path, extra: &str) -> Self {
        Self::start_aggregating(dir, "src_host, dst_host, proto, src_port, dst_port", extra)
    }

    /// [`Self::start_with`], its print plugin aggregating by `aggregate`
    /// (read back by [`Self::take_rows`]).
    pub(super) fn start_aggregating(dir: &Path, aggregate: &str, extra: &str) -> Self {
        // nfacctd refuses port 0: a port free a moment ago, retried when
        // nfacctd exits because another took it meanwhile.
        for _ in 0..5 {
            let port = free_port();
            let out = dir.join("nfacctd.csv");
            let conf = dir.join("nfacctd.conf");
            std::fs::write(
                &conf,
                format!(
                    "daemonize: false\n\
                     nfacctd_ip: 127.0.0.1\n\
                     nfacctd_port: {port}\n\
                     plugins: print\n\
                     print_output: csv\n\
                     print_output_file: {}\n\
                     print_output_file_append: true\n\
                     print_num_protos: true\n\
                     print_refresh_time: 1\n\
                     aggregate: {aggregate}\n\
                     {extra}",
                    out.display()
                ),
            )
            .unwrap();
            let log = dir.join("nfacctd.log");
            let f = std::fs::File::create(&log).unwrap();
            let mut child = Command::new("nfacctd")
                .arg("-f")
                .arg(&conf)
                .stdin(std::process::Stdio::null())
                .stdout(f.try_clone().unwrap())
                .stderr(f)
                .spawn()
                .expect("start nfacctd");
            // Its print plugin's first purge: records that come before it
            // are held until nfacctd exits (seen here: a replay sent as
            // soon as the socket was bound was written only at the exit).
            if child_port(&mut child, &log, "Purging cache - END", Some(port)).is_some() {
                return Nfacctd {
                    child,
                    port,
                    out,
                    read: 0,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("nfacctd did not start in 5 tries");
    }

    /// The rows appended since the last call, summed by 5-tuple, once they
    /// hold `packets` packets (each purge appends the counts since the one
    /// before; 20 s at most, then what was written is returned).
    pub(super) fn take(&mut self, packets: u64) -> Flows {
        by_five_tuple(&self.take_rows(packets))
    }

    /// The rows appended since the last call, each by its column names
    /// (the print plugin's header: SRC_IP, PACKETS…), once they hold
    /// `packets` packets (20 s at most, then what was written).
    pub(super) fn take_rows(&mut self, packets: u64) -> Vec<BTreeMap<String, String>> {
        let mut rows = Vec::new();
        for _ in 0..800 {
            let text = std::fs::read_to_string(&self.out).unwrap_or_default();
            // Whole lines only: a purge may be half written.
            let end = text.rfind('\n').map_or(0, |i| i + 1).max(self.read);
            rows.clear();
            let mut header: Vec<&str> = Vec::new();
            let mut at = 0;
            for line in text[..end].lines() {
                let new = at >= self.read;
                at += line.len() + 1;
                if line.starts_with("SRC_IP") {
                    header = line.split(',').collect();
                } else if new {
                    let row = header.iter().map(ToString::to_string);
                    rows.push(row.zip(line.split(',').map(str::to_string)).collect());
                }
            }
            let sum: u64 = rows
                .iter()
                .map(|r: &BTreeMap<String, String>| r["PACKETS"].parse::<u64>().unwrap())
                .sum();
            if sum >= packets {
                self.read = end;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        rows
    }
}

/// The print plugin's rows (by column name) summed by 5-tuple.
pub(super) fn by_five_tuple(rows: &[BTreeMap<String, String>]) -> Flows {
    let mut flows = Flows::new();
    for row in rows {
        let k = (
            row["SRC_IP"].clone(),
            row["DST_IP"].clone(),
            row["PROTOCOL"].parse().unwrap(),
            row["SRC_PORT"].parse().unwrap(),
            row["DST_PORT"].parse().unwrap(),
        );
        let e = flows.entry(k).or_default();
        e.0 += row["PACKETS"].parse::<u64>().unwrap();
        e.1 += row["BYTES"].parse::<u64>().unwrap();
    }
    flows
}

impl Drop for Nfacctd {
    /// SIGINT: the core stops its plugin processes too (SIGKILL would
    /// leave them behind).
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}
