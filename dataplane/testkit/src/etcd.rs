//! A throw-away single-member etcd for the fleet's tests, soak and
//! benchmark: Debian's `etcd` binary on loopback ports it picks itself
//! (port 0; the client port read back from its log), data in a directory
//! the caller owns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_config::RunConfig;

/// Writes `dir/NAME.toml`: a fleet node `name` under `prefix` of the etcd
/// at `url`, looping `pcap/mixed.pcap` at 20 k frames/s, its socket at
/// `dir/NAME.sock` and its state in `dir/NAME-state`, built from `cfdp
/// run`'s configuration structs; `edit` then sets what a test needs
/// beyond it. The config the fleet's tests, soak and benchmark start
/// their nodes with.
pub fn node_config(
    dir: &Path,
    url: &str,
    prefix: &str,
    name: &str,
    edit: impl FnOnce(&mut RunConfig),
) -> PathBuf {
    let cfg = dir.join(format!("{name}.toml"));
    let mut c = crate::node::looping(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pcap/mixed.pcap"),
        20_000,
        &dir.join(format!("{name}.sock")),
        &dir.join(format!("{name}-state")),
    );
    c.cluster.etcd = vec![url.to_string()];
    c.cluster.prefix = prefix.to_string();
    c.cluster.node = name.to_string();
    edit(&mut c);
    crate::node::write(&cfg, &c);
    cfg
}

/// A running etcd; killed when dropped.
pub struct EtcdServer {
    child: Option<Child>,
    /// Client URL (`http://127.0.0.1:PORT`).
    pub url: String,
    scheme: &'static str,
    data: PathBuf,
    /// etcd's log (its standard error, every start appended).
    log: PathBuf,
    /// The client port etcd bound at its first start; a restart binds
    /// it again, so that the URL nodes were given stays right.
    port: Option<u16>,
    extra: Vec<String>,
}

impl EtcdServer {
    /// Whether the `etcd` binary is installed.
    pub fn installed() -> bool {
        Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts etcd with its data in a new directory under `dir` and
    /// `extra` arguments.
    pub fn start(dir: &Path, extra: &[&str]) -> Result<EtcdServer, EtcdNotStarted> {
        Self::start_scheme(dir, "http", extra)
    }

    /// As [`EtcdServer::start`], serving clients over TLS: `extra` must
    /// give etcd its `--cert-file` and `--key-file` (and, for client
    /// certificates, `--trusted-ca-file` and `--client-cert-auth`).
    pub fn start_tls(dir: &Path, extra: &[&str]) -> Result<EtcdServer, EtcdNotStarted> {
        Self::start_scheme(dir, "https", extra)
    }

    fn start_scheme(
        dir: &Path,
        scheme: &'static str,
        extra: &[&str],
    ) -> Result<EtcdServer, EtcdNotStarted> {
        // A directory of its own: tests may start several in one `dir`.
        let data = tempfile::Builder::new()
            .prefix("etcd-")
            .tempdir_in(dir)
            .map_err(|_| EtcdNotStarted)?
            .keep();
        let mut e = EtcdServer {
            child: None,
            url: String::new(),
            scheme,
            log: data.with_extension("log"),
            data,
            port: None,
            extra: extra.iter().map(std::string::ToString::to_string).collect(),
        };
        if e.spawn() {
            Ok(e)
        } else {
            Err(EtcdNotStarted)
        }
    }

    /// (Re)starts etcd on this instance's data — at its first start on a
    /// client port it picks, after on that port again — and waits until
    /// its log says it serves clients (etcd says so once its member is
    /// ready). Whether it came up: a restart whose port was taken
    /// meanwhile exits.
    pub fn spawn(&mut self) -> bool {
        let scheme = self.scheme;
        let listen = format!("{scheme}://127.0.0.1:{}", self.port.unwrap_or(0));
        // A single member never dials its peer URL: port 0 is only a name.
        let peer = "http://127.0.0.1:0";
        let Ok(log) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        else {
            return false;
        };
        let from = log.metadata().map_or(0, |m| m.len());
        let Ok(mut child) = Command::new("etcd")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen-client-urls", &listen])
            .args(["--advertise-client-urls", &listen])
            .args(["--listen-peer-urls", peer])
            .args(["--initial-advertise-peer-urls", peer])
            .args(["--initial-cluster", &format!("default={peer}")])
            // The HTTP gateway dials the listen address as written (port
            // 0); the fleet speaks gRPC.
            .arg("--enable-grpc-gateway=false")
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
        else {
            return false;
        };
        let start = Instant::now();
        loop {
            if !matches!(child.try_wait(), Ok(None)) {
                return false; // exited: its port was taken, or bad arguments
            }
            if let Some(port) = serving_port(&self.log, from) {
                self.port = Some(port);
                self.url = format!("{scheme}://127.0.0.1:{port}");
                self.child = Some(child);
                return true;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Kills etcd (its data stays: [`EtcdServer::spawn`] brings it back).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// etcd did not come up (not installed, or it exited: see its log).
#[derive(Debug)]
pub struct EtcdNotStarted;

impl std::fmt::Display for EtcdNotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("etcd did not start (apt-get install etcd-server)")
    }
}

impl std::error::Error for EtcdNotStarted {}

/// The client port in etcd's log after byte `from`: its line "serving
/// client traffic securely" (or "insecurely") with `"address":"HOST:PORT"`.
fn serving_port(log: &Path, from: u64) -> Option<u16> {
    let text = std::fs::read(log).ok()?;
    let text = String::from_utf8_lossy(text.get(from as usize..)?);
    text.lines()
        .filter(|l| l.contains("serving client traffic"))
        .find_map(|l| {
            let address = l.split("\"address\":\"").nth(1)?.split('"').next()?;
            address.rsplit(':').next()?.parse().ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The port is read from the serving line after the start's offset,
    /// secure or not, and from no other line.
    #[test]
    fn the_client_port_is_read_from_the_serving_line() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("etcd.log");
        let first = "{\"msg\":\"serving peer traffic\",\"address\":\"127.0.0.1:1111\"}\n\
                     {\"msg\":\"serving client traffic insecurely; this is strongly discouraged!\",\"address\":\"127.0.0.1:43663\"}\n";
        std::fs::write(&log, first).unwrap();
        assert_eq!(serving_port(&log, 0), Some(43663));
        let from = first.len() as u64;
        assert_eq!(serving_port(&log, from), None);
        let again =
            "{\"msg\":\"serving client traffic securely\",\"address\":\"127.0.0.1:2379\"}\n";
        std::fs::write(&log, format!("{first}{again}")).unwrap();
        assert_eq!(serving_port(&log, from), Some(2379));
    }
}
