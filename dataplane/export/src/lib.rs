//! Flow export: what cfdp saw of each flow, for the flow collectors
//! operators already run (nfdump's `nfcapd`, pmacct's `nfacctd`, GoFlow2…).
//!
//! Data flows one way:
//!
//! * [`cache`]: a worker's flow cache. Each packet adds to its flow's record
//!   (packets, bytes, first and last time, the verdict, the input port);
//!   records leave it when idle, when active too long, at the end of a
//!   capture, or early when the cache is full (counted). Plain data owned
//!   by one worker: no lock, no I/O.
//! * [`ipfix`]: the records as IPFIX messages (RFC 7011): templates for IPv4
//!   and IPv6 records, data sets, every field an IANA information element.
//! * [`exporter`]: a thread off the workers' path that takes finished
//!   records from a bounded queue and sends them over UDP to each
//!   collector, templates resent as RFC 7011 asks of UDP exporters. A
//!   collector that is down costs send errors, counted; a full queue costs
//!   records, counted: a worker never waits.
#![forbid(unsafe_code)]

pub mod cache;
pub mod exporter;
pub mod ipfix;
pub mod record;
pub mod settings;

pub use cache::{CacheSettings, Close, FlowCache, Observed};
pub use exporter::{ExportCounters, ExportSender, ExportTotals, Exporter, ExporterError};
pub use ipfix::Setup;
pub use record::{Counts, EndReason, FlowRecord, Forwarding};
pub use settings::IpfixSection;
