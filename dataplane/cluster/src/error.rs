//! What can go wrong between a node, its fleet and etcd.

/// Why a fleet operation failed. The agent records the message in its
/// status and tries again; `cfdp ctl --etcd` prints it with its causes.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A key prefix that cannot name a fleet.
    #[error("cluster prefix {0:?}: must start with '/' and name something, e.g. \"/cfdp/prod\"")]
    BadPrefix(String),
    /// etcd refused or did not answer (`what`: the operation).
    #[cfg(feature = "etcd")]
    #[error("etcd {what}: {source}")]
    Etcd {
        what: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A lease could not be renewed.
    #[error("etcd keep-alive: {0}")]
    Lease(&'static str),
    /// The agent's async runtime could not start.
    #[error("etcd runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The watch stream ended without being canceled.
    #[error("etcd watch: the stream ended")]
    WatchEnded,
    /// etcd canceled the watch (its start revision was compacted away).
    #[error("watch canceled (compacted to {compact_revision}: {reason}); resyncing")]
    WatchCanceled {
        compact_revision: i64,
        reason: String,
    },
    /// A value under the rules prefix that is not JSON.
    #[error("{key}: not JSON: {source}")]
    NotJson {
        key: String,
        #[source]
        source: serde_json::Error,
    },
    /// A value under the rules prefix that is not a valid rule.
    #[error("{key}: {source}")]
    BadRule {
        key: String,
        #[source]
        source: cfdp_rules::RuleError,
    },
    /// A rule set given to `cfdp ctl --etcd replace` that cannot be one.
    #[error("the rule set to replace with: {0}")]
    BadReplace(#[source] cfdp_rules::batch::ReplaceError),
    /// A match key whose value is not a rule id (written by something
    /// other than cfdp).
    #[cfg(feature = "etcd")]
    #[error("{0}: not a rule id")]
    BadOwner(String),
    /// A batch's transaction needs more operations than etcd takes.
    #[error(
        "the batch needs {ops} operations and {compares} compares in one etcd transaction; \
         etcd allows {max} (its --max-txn-ops). Nothing was applied: split the batch, or \
         raise --max-txn-ops on every etcd server and pass --max-txn-ops N to cfdp ctl"
    )]
    TooManyOps {
        ops: usize,
        compares: usize,
        max: usize,
    },
    /// A batch's transaction is larger than etcd takes.
    #[error(
        "the batch's transaction carries over {bytes} bytes; etcd accepts {max} (its \
         --max-request-bytes). Nothing was applied: split the batch, or raise \
         --max-request-bytes on every etcd server and pass --max-request-bytes N to cfdp ctl"
    )]
    TooManyBytes { bytes: usize, max: usize },
    /// `expected_generation` differs from the fleet's generation.
    #[error("expected_generation {expected}, but the fleet is at generation {current}")]
    GenerationMismatch { expected: u64, current: i64 },
    /// Other writers kept changing what a transaction read.
    #[error("{0}")]
    Contended(String),
    /// The node's own control plane refused a request.
    #[error("the node's control plane: {0}")]
    Control(#[from] cfdp_control::ControlError),
    /// A local batch was refused update by update (`first`: the first
    /// failing update's answer).
    #[error("local batch of {n} updates not applied: {first}")]
    NotApplied { n: usize, first: String },
    /// The TLS or authentication settings cannot be used.
    #[error(transparent)]
    Security(#[from] crate::security::SecurityError),
    /// The fleet's rule set cannot be one node's (two rules with one
    /// match: the planner's match keys should have prevented it).
    #[error("the fleet's rule set: {0}")]
    FleetSet(#[from] cfdp_rules::batch::ReplaceError),
    /// The agent thread could not be started.
    #[error("cannot start the cluster agent: {0}")]
    Spawn(#[source] std::io::Error),
}
