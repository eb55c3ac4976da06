//! # cfdp-testkit — what the data plane is tested with
//!
//! * [`captures`]: the project's own test captures, generated
//!   deterministically, with hand-worked expectations (`pcap/`).
//! * [`etcd`]: a throw-away etcd for the fleet's tests, soak and bench.
//! * [`SplitMix`]: the harnesses' deterministic random numbers.
//! * `gen-pcaps`: writes them to `pcap/`.
//! * `soak`: random rule batches against a looping `cfdp run`, every answer
//!   and every rule's packet count checked against a model.
//! * `conformance`: replays real captures (`../shared/pcaps`) and compares
//!   the flows with tshark's, with every accepted difference listed in
//!   `conformance/known-differences.tsv`.
#![forbid(unsafe_code)]

pub mod captures;
pub mod child;
pub mod crafted;
pub mod dirs;
pub mod etcd;
mod frames;
pub mod node;
pub mod ports;
pub mod stateful;
pub mod trace;

/// SplitMix64: a tiny, well-known deterministic generator for the soak
/// harnesses and the benchmarks' keys. A full `rand` dependency buys
/// nothing here: numbers only need to be uniform and reproducible from a
/// seed.
#[derive(Clone, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
