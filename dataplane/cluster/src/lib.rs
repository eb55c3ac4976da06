//! # cfdp-cluster — a fleet of nodes, one rule set, kept in etcd
//!
//! When traffic outgrows one box, several `cfdp run` nodes (behind ECMP or
//! a load balancer) must enforce the same rules. As Calico and Cilium do
//! with etcd, the rule set lives in etcd and every node lists and watches
//! it; no consensus or replication of our own.
//!
//! * [`keys`]: the key layout under the fleet's prefix.
//! * [`plan`]: a batch (the socket's `apply` JSON) turned into one etcd
//!   transaction whose compares do the batch's validation — so two
//!   controllers writing at once cannot both win. Plain data, tested
//!   without etcd.
//! * `etcd` (feature `etcd`): a blocking wrapper over the `etcd-client`
//!   crate; `ctl`: `cfdp ctl --etcd … apply | wait | fleet | rules | get`;
//!   `node`: the agent in every `cfdp run` with `[cluster]` set — resync on
//!   start, then every revision that touches the rules as one local
//!   `dataplane_atomic` batch through the node's own control plane
//!   (journal, Bloom-assisted inserts), and the node's status under a
//!   lease.
//!
//! The fleet's generation is the etcd revision of its last batch's
//! transaction.
#![forbid(unsafe_code)]

pub mod error;
pub mod keys;
pub mod plan;
pub mod security;
pub mod settings;

#[cfg(feature = "etcd")]
pub mod ctl;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub mod node;

/// Whether this build can talk to etcd.
pub const AVAILABLE: bool = cfg!(feature = "etcd");

pub use error::ClusterError;
pub use keys::Keys;
pub use security::EtcdSecurity;
pub use settings::ClusterSection;
