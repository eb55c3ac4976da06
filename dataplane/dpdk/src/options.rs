//! The backend's settings, kept apart from the FFI so that a build without
//! DPDK still reads (and refuses) them.

/// The DPDK backend's settings: `[dpdk]` in cfdp's configuration (the
/// `dpdk` cargo feature; see [`crate::backend`]). Deserialized here, so the
/// binary's configuration and the backend share one definition.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DpdkOptions {
    /// Use DPDK instead of pcap replay.
    pub enabled: bool,
    /// EAL arguments (without the program name), e.g. `["-l", "0-1",
    /// "--vdev", "net_null0"]`.
    pub eal_args: Vec<String>,
    /// Port pairs (DPDK device names, e.g. `0000:01:00.0` or
    /// `net_af_packet0`): every port of a pair is polled, and a packet
    /// forwarded from one leaves by the other. Excludes `rx_ports`.
    pub xconnect: Vec<(String, String)>,
    /// One-way: devices polled for packets; forwarded packets leave by
    /// `tx_ports[0]`.
    pub rx_ports: Vec<String>,
    /// Output ports: index n is output port n (`redirect N`).
    pub tx_ports: Vec<String>,
    /// Worker threads = receive queues per rx port = transmit queues per
    /// tx port.
    pub workers: u16,
    /// CPU of each worker (worker w is pinned to `worker_cpus[w]`); empty:
    /// not pinned. Keep them off the EAL's main lcore (`-l`).
    pub worker_cpus: Vec<usize>,
    pub mempool_size: u32,
    pub descriptors: u16,
    /// Packets per receive burst (1..=32).
    pub burst: usize,
    /// Stop after this long without a packet on any queue (0: never; for
    /// replays of finite captures through net_pcap).
    pub stop_when_idle_ms: u64,
}

impl Default for DpdkOptions {
    /// Off; one worker; a mempool, ring and burst sized for one port at
    /// 10 GbE.
    fn default() -> Self {
        Self {
            enabled: false,
            eal_args: Vec::new(),
            xconnect: Vec::new(),
            rx_ports: Vec::new(),
            tx_ports: Vec::new(),
            workers: 1,
            worker_cpus: Vec::new(),
            mempool_size: 8191,
            descriptors: 1024,
            burst: 32,
            stop_when_idle_ms: 0,
        }
    }
}
