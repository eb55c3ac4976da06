//! # cfdp-testkit — what the data plane is tested with
//!
//! * [`captures`]: the project's own test captures, generated
//!   deterministically, with hand-worked expectations (`pcap/`).
//! * `gen-pcaps`: writes them to `pcap/`.
//! * `soak`: random rule batches against a looping `cfdp run`, every answer
//!   and every rule's packet count checked against a model.
//! * `conformance`: replays real captures (`../shared/pcaps`) and compares
//!   the flows with tshark's, with every accepted difference listed in
//!   `conformance/known-differences.tsv`.
#![forbid(unsafe_code)]

pub mod captures;
