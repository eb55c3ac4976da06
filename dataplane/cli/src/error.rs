//! What `cfdp run` can fail with; `main` prints each with its causes
//! ([`chain`]) and picks the exit code.

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The `--config` file is not there.
    #[error("config file {} does not exist", .0.display())]
    ConfigMissing(std::path::PathBuf),
    /// A section this build was compiled without.
    #[error(
        "{setting} is set, but this cfdp was built without {feature}: cargo build --release \
         -p cfdp --features {feature}{}",
        if *feature == "etcd" { " (needs protoc: apt-get install protobuf-compiler)" } else { "" }
    )]
    NotBuiltWith {
        setting: &'static str,
        feature: &'static str,
    },
    /// The doors' caps need more file descriptors than the hard limit.
    #[error(
        "the configured doors need {needed} file descriptors (RLIMIT_NOFILE hard limit {hard}): \
         lower control.max_connections or p4runtime.max_controllers, or raise the limit"
    )]
    Descriptors { needed: u64, hard: u64 },
    /// The TCP door's token file cannot be used.
    #[error("control.token_file")]
    Token(#[source] cfdp_control::auth::TokenError),
    /// The P4Runtime listener did not start.
    #[error("p4runtime")]
    P4Runtime(#[source] cfdp_p4runtime::P4Error),
    /// A configuration value refused by its section's checks.
    #[error(transparent)]
    Setting(#[from] cfdp_control::settings::SettingError),
    /// The configuration files or environment could not be read.
    #[error("{what}")]
    ConfigLoad {
        what: String,
        #[source]
        source: config::ConfigError,
    },
    /// Crash recovery refused: the fallback rule file, the state
    /// directory, a journal record that no longer applies.
    #[error(transparent)]
    Recover(#[from] cfdp_control::recover::RecoverError),
    /// An operating-system call failed (`what`: which, and on what).
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Socket(#[from] cfdp_control::server::SocketError),
    #[error("control thread panicked")]
    ControlPanicked,
    #[cfg(feature = "etcd")]
    #[error("cluster")]
    Cluster(#[source] cfdp_cluster::ClusterError),
    /// The pcap backend stopped with an error.
    #[error("pcap replay")]
    PcapReplay(#[source] cfdp_pcap::ReplayError),
    /// DPDK's EAL did not start, its ports are not a plan, or the DPDK
    /// backend stopped with an error.
    #[cfg(feature = "dpdk")]
    #[error("{what}")]
    Dpdk {
        what: &'static str,
        #[source]
        source: cfdp_dpdk::DpdkError,
    },
    /// The IPFIX exporter of a DPDK run did not start (its UDP socket).
    #[cfg(feature = "dpdk")]
    #[error("ipfix")]
    Export(#[source] cfdp_export::ExporterError),
    #[error("output")]
    Json(#[source] serde_json::Error),
}

impl RunError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
        let what = what.into();
        move |source| RunError::Io { what, source }
    }
}

/// An error with its causes, one line (`cfdp_control::api::error_chain`).
pub use cfdp_control::api::error_chain as chain;
