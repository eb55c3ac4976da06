//! A throw-away single-member etcd for the fleet's tests, soak and
//! benchmark: Debian's `etcd` binary on free loopback ports, data in a
//! directory the caller owns.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cfdp_config::RunConfig;

/// A loopback port free at the time of asking.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

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
    data: PathBuf,
    ports: (u16, u16),
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

    /// Starts etcd with its data in `dir/etcd` and `extra` arguments.
    /// Free ports can be taken again between the probe and etcd's bind
    /// (tests run in parallel): a start whose etcd exits is retried.
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
        scheme: &str,
        extra: &[&str],
    ) -> Result<EtcdServer, EtcdNotStarted> {
        for _ in 0..5 {
            let ports = (free_port(), free_port());
            let mut e = EtcdServer {
                child: None,
                url: format!("{scheme}://127.0.0.1:{}", ports.0),
                data: dir.join(format!("etcd-{}", ports.0)),
                ports,
                extra: extra.iter().map(std::string::ToString::to_string).collect(),
            };
            if e.spawn() {
                return Ok(e);
            }
        }
        Err(EtcdNotStarted)
    }

    /// (Re)starts etcd on this instance's ports and data; whether it came
    /// up.
    pub fn spawn(&mut self) -> bool {
        let (client, peer) = self.ports;
        let peer_url = format!("http://127.0.0.1:{peer}");
        let Ok(mut child) = Command::new("etcd")
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen-client-urls", &self.url])
            .args(["--advertise-client-urls", &self.url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            return false;
        };
        let start = Instant::now();
        loop {
            if !matches!(child.try_wait(), Ok(None)) {
                return false; // exited: a port was taken
            }
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                std::thread::sleep(Duration::from_millis(200));
                if matches!(child.try_wait(), Ok(None)) {
                    self.child = Some(child);
                    return true;
                }
                return false;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
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

/// etcd did not come up (not installed, or its ports kept being taken).
#[derive(Debug)]
pub struct EtcdNotStarted;

impl std::fmt::Display for EtcdNotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("etcd did not start in 5 tries (apt-get install etcd-server)")
    }
}

impl std::error::Error for EtcdNotStarted {}
