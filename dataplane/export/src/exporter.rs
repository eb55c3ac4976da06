//! The exporter: a thread that takes finished records from the workers
//! through a bounded queue and sends them, as IPFIX messages over UDP, to
//! every collector.
//!
//! Workers never wait: a batch that finds the queue full is counted as
//! lost records (`queue_full`), not retried. Templates go first, then
//! again every [`TEMPLATE_EVERY`] data messages and at least every
//! [`TEMPLATE_REFRESH`] (RFC 7011 §8.4: over UDP, templates are resent
//! periodically, since a collector may have started or lost state). A
//! collector that is down costs a counted send error per message.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam::channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};

use crate::ipfix::{self, Setup};
use crate::record::FlowRecord;

/// Data messages between two template messages.
pub const TEMPLATE_EVERY: u64 = 64;
/// Wall time between two template messages at most.
pub const TEMPLATE_REFRESH: Duration = Duration::from_secs(30);
/// Records gathered from the queue into one round of messages at most.
const COALESCE: usize = 4096;
/// Batches of records the queue holds before workers' batches are lost.
const QUEUE: usize = 1024;

/// What the exporter did, for the statistics and the metrics.
#[derive(Debug, Default)]
pub struct ExportCounters {
    /// Data records sent (to each collector: counted once).
    pub records: AtomicU64,
    /// Messages sent, templates included, summed over the collectors.
    pub messages: AtomicU64,
    /// Messages a collector's send failed for.
    pub send_errors: AtomicU64,
    /// Records lost because the queue to the exporter was full.
    pub queue_full: AtomicU64,
}

/// [`ExportCounters`] as of one read, for reports and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExportTotals {
    pub records: u64,
    pub messages: u64,
    pub send_errors: u64,
    pub queue_full: u64,
}

impl ExportCounters {
    pub fn totals(&self) -> ExportTotals {
        ExportTotals {
            records: self.records.load(Relaxed),
            messages: self.messages.load(Relaxed),
            send_errors: self.send_errors.load(Relaxed),
            queue_full: self.queue_full.load(Relaxed),
        }
    }
}

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    #[error("no IPFIX collector given")]
    NoCollector,
    #[error("cannot open a UDP socket for IPFIX export: {0}")]
    Socket(#[source] std::io::Error),
}

/// The handle workers send finished records through (cheap to clone).
#[derive(Clone, Debug)]
pub struct ExportSender {
    tx: Sender<Vec<FlowRecord>>,
    counters: Arc<ExportCounters>,
}

impl ExportSender {
    /// Hands `records` to the exporter without waiting; counted as lost
    /// when its queue is full.
    pub fn send(&self, records: Vec<FlowRecord>) {
        if records.is_empty() {
            return;
        }
        match self.tx.try_send(records) {
            Ok(()) => {}
            Err(TrySendError::Full(r) | TrySendError::Disconnected(r)) => {
                self.counters.queue_full.fetch_add(r.len() as u64, Relaxed);
            }
        }
    }
}

/// The running exporter (see the module docs).
#[derive(Debug)]
pub struct Exporter {
    sender: ExportSender,
    thread: std::thread::JoinHandle<()>,
}

impl Exporter {
    /// Starts the exporter's thread, sending to `collectors` with
    /// observation domain `domain`, every packet counted, no rule named.
    pub fn start(collectors: Vec<SocketAddr>, domain: u32) -> Result<Self, ExporterError> {
        Self::start_counting(collectors, Setup::domain(domain), Arc::default())
    }

    /// [`Self::start`] as `setup` says (records of 1 in `setup.sampling`
    /// packets, stated in an options template when more than 1; rules
    /// named under `setup.rule_pen`), counting into `counters` (the data
    /// plane's statistics hold them, so metrics read them while it runs).
    pub fn start_counting(
        collectors: Vec<SocketAddr>,
        setup: Setup,
        counters: Arc<ExportCounters>,
    ) -> Result<Self, ExporterError> {
        if collectors.is_empty() {
            return Err(ExporterError::NoCollector);
        }
        let bind: SocketAddr = if collectors.iter().any(SocketAddr::is_ipv6) {
            "[::]:0".parse().expect("address")
        } else {
            "0.0.0.0:0".parse().expect("address")
        };
        let socket = UdpSocket::bind(bind).map_err(ExporterError::Socket)?;
        let (tx, rx) = bounded(QUEUE);
        let c = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("cfdp-ipfix".into())
            .spawn(move || run(&socket, &collectors, &setup, &rx, &c))
            .map_err(ExporterError::Socket)?;
        Ok(Exporter {
            sender: ExportSender { tx, counters },
            thread,
        })
    }

    /// A handle for a worker.
    pub fn sender(&self) -> ExportSender {
        self.sender.clone()
    }

    pub fn counters(&self) -> Arc<ExportCounters> {
        Arc::clone(&self.sender.counters)
    }

    /// Sends what is queued and stops (once every other sender is gone).
    pub fn finish(self) -> Arc<ExportCounters> {
        let counters = self.counters();
        drop(self.sender);
        let _ = self.thread.join();
        counters
    }
}

/// Seconds since the Unix epoch: a message's export time.
fn now_s() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// The exporter's thread: until every sender is gone and the queue is
/// empty.
fn run(
    socket: &UdpSocket,
    collectors: &[SocketAddr],
    setup: &Setup,
    rx: &Receiver<Vec<FlowRecord>>,
    c: &ExportCounters,
) {
    let send = |msg: &[u8]| {
        for to in collectors {
            match socket.send_to(msg, to) {
                Ok(_) => c.messages.fetch_add(1, Relaxed),
                Err(_) => c.send_errors.fetch_add(1, Relaxed),
            };
        }
    };
    let mut sequence = 0u32;
    let mut since_templates = u64::MAX;
    let mut templates_at = Instant::now();
    loop {
        let mut batch = match rx.recv_timeout(TEMPLATE_REFRESH) {
            Ok(b) => b,
            Err(RecvTimeoutError::Timeout) => {
                // Quiet: the templates again, so a collector that started
                // meanwhile can read what comes next.
                send(&ipfix::templates(now_s(), &mut sequence, setup));
                since_templates = 0;
                templates_at = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        // Every batch already queued with it: workers hand over a burst's
        // few records at a time, and a message each sent thousands of
        // small datagrams where full ones do (a collector on loopback
        // lost some of them: nfcapd counted a sequence error).
        while batch.len() < COALESCE {
            match rx.try_recv() {
                Ok(more) => batch.extend(more),
                Err(_) => break,
            }
        }
        let export_s = now_s();
        for chunk in ipfix::chunks(&batch, setup) {
            if since_templates >= TEMPLATE_EVERY || templates_at.elapsed() >= TEMPLATE_REFRESH {
                // Before the data message is numbered: the sampling
                // options record, when sent, counts in the sequence.
                send(&ipfix::templates(export_s, &mut sequence, setup));
                since_templates = 0;
                templates_at = Instant::now();
            }
            send(&ipfix::data_message(&chunk, export_s, &mut sequence, setup));
            since_templates += 1;
        }
        c.records.fetch_add(batch.len() as u64, Relaxed);
    }
}
