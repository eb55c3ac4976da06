//! Output captures: forwarded frames to `OUT` (port 0) and redirected
//! frames to `OUT.portN.EXT`, in the input's format (pcap or pcapng), and
//! the writer thread that drains processed bursts into them in order.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use cfdp_engine::Verdict;
use cfdp_packet::LinkType;
use crossbeam::channel::{Receiver, Sender};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

use crate::burst::{Burst, Meta};

/// Why an output capture could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("port {port}: {source}")]
    Write {
        port: u16,
        #[source]
        source: pcap_file::PcapError,
    },
    #[error("flush: {0}")]
    Flush(#[source] std::io::Error),
    #[error(
        "port {port}: frames redirected to more than {MAX_PORTS} ports; pcap mode writes one \
         file per port and stops here (the frames read so far are written)"
    )]
    TooManyPorts { port: u16 },
}

/// Output files open at most (port 0 and redirect ports): a rule set
/// redirecting to every one of 65,536 ports would otherwise open as many
/// files, each with its buffer.
pub const MAX_PORTS: usize = 256;
/// Write buffer of the port-0 output and of each redirect port's.
const BUF_MAIN: usize = 1 << 20;
const BUF_PORT: usize = 64 << 10;

/// Output files: port 0 to `out`, port N to `out` with `.portN` before the extension.
pub(crate) struct Outputs {
    base: PathBuf,
    pcapng: bool,
    link: LinkType,
    files: HashMap<u16, Sink>,
}

enum Sink {
    Pcap(PcapWriter<BufWriter<File>>),
    PcapNg(PcapNgWriter<BufWriter<File>>, HashMap<LinkType, u32>),
}

fn port_path(base: &Path, port: u16) -> PathBuf {
    if port == 0 {
        return base.to_path_buf();
    }
    let stem = base.file_stem().and_then(|s| s.to_str()).unwrap_or("out");
    let ext = base.extension().and_then(|s| s.to_str()).unwrap_or("pcap");
    base.with_file_name(format!("{stem}.port{port}.{ext}"))
}

impl Outputs {
    /// Outputs based at `base` (nothing is created before the first write).
    pub(crate) fn new(base: PathBuf, pcapng: bool, link: LinkType) -> Self {
        Self {
            base,
            pcapng,
            link,
            files: HashMap::new(),
        }
    }

    fn sink(&mut self, port: u16) -> Result<&mut Sink, OutputError> {
        let write = |source| OutputError::Write { port, source };
        if !self.files.contains_key(&port) {
            if self.files.len() >= MAX_PORTS {
                return Err(OutputError::TooManyPorts { port });
            }
            let path = port_path(&self.base, port);
            let f = create_output(&path).map_err(|source| OutputError::Create { path, source })?;
            let buf = if port == 0 { BUF_MAIN } else { BUF_PORT };
            let w = BufWriter::with_capacity(buf, f);
            let sink = if self.pcapng {
                Sink::PcapNg(PcapNgWriter::new(w).map_err(write)?, HashMap::new())
            } else {
                let header = PcapHeader {
                    datalink: DataLink::from(self.link.to_linktype()),
                    ts_resolution: pcap_file::TsResolution::NanoSecond,
                    ..PcapHeader::default()
                };
                Sink::Pcap(PcapWriter::with_header(w, header).map_err(write)?)
            };
            self.files.insert(port, sink);
        }
        Ok(self.files.get_mut(&port).expect("just inserted"))
    }

    pub(crate) fn write(&mut self, port: u16, m: &Meta, data: &[u8]) -> Result<(), OutputError> {
        let write = |source| OutputError::Write { port, source };
        let ts = std::time::Duration::from_nanos(m.ts_ns);
        match self.sink(port)? {
            Sink::Pcap(w) => w
                .write_packet(&PcapPacket::new(ts, m.orig_len, data))
                .map(|_| ())
                .map_err(write),
            Sink::PcapNg(w, ifaces) => {
                let next = ifaces.len() as u32;
                let iface = *ifaces.entry(m.link).or_insert(next);
                if iface == next {
                    let idb = InterfaceDescriptionBlock {
                        linktype: DataLink::from(m.link.to_linktype()),
                        snaplen: 0,
                        options: vec![],
                    };
                    w.write_pcapng_block(idb).map_err(write)?;
                }
                let epb = EnhancedPacketBlock {
                    interface_id: iface,
                    timestamp: ts,
                    original_len: m.orig_len,
                    data: std::borrow::Cow::Borrowed(data),
                    options: vec![],
                };
                w.write_pcapng_block(epb).map(|_| ()).map_err(write)
            }
        }
    }

    /// Flushes and closes every output file, reporting write errors.
    pub(crate) fn finish(self) -> Result<(), OutputError> {
        for (_, s) in self.files {
            match s {
                Sink::Pcap(w) => w.into_writer().flush(),
                Sink::PcapNg(w, _) => w.into_inner().flush(),
            }
            .map_err(OutputError::Flush)?;
        }
        Ok(())
    }
}

/// Writes the forwarded frames of every processed burst, then recycles
/// the burst to the reader.
pub(crate) fn writer_loop(
    rx: Receiver<Box<Burst>>,
    pool: Sender<Box<Burst>>,
    mut outputs: Outputs,
) -> Result<(), OutputError> {
    // The port-0 output exists even when nothing is forwarded.
    let mut err = outputs.sink(0).err();
    for burst in rx {
        if err.is_none() {
            for (i, m) in burst.meta.iter().enumerate() {
                let port = match burst.verdicts[i] {
                    Verdict::Forward => 0,
                    Verdict::Redirect(p) => p,
                    Verdict::Drop => continue,
                };
                if let Err(e) = outputs.write(port, m, burst.frame(i)) {
                    // Keep draining so workers never block; report once.
                    err = Some(e);
                    break;
                }
            }
        }
        let _ = pool.send(burst);
    }
    match err {
        Some(e) => Err(e),
        None => outputs.finish(),
    }
}

/// Creates (or truncates) an output file without following a link at
/// its name: a link planted where an output goes would otherwise truncate
/// and overwrite its target. New files get mode 0644 less the umask.
pub fn create_output(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link planted where an output goes is refused, and its target
    /// left as it was.
    #[test]
    fn outputs_never_write_through_a_link() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = t.path().join("out.pcap");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        assert!(create_output(&out).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        let fresh = t.path().join("fresh.pcap");
        std::fs::write(&fresh, "old").unwrap();
        create_output(&fresh).unwrap();
        assert_eq!(
            std::fs::read(&fresh).unwrap(),
            b"",
            "an output is truncated"
        );
    }

    /// Redirects to more ports than [`MAX_PORTS`] stop with an error that
    /// names the port, instead of opening a file (and a buffer) per port.
    #[test]
    fn output_files_are_bounded() {
        let dir_tmp = tempfile::Builder::new()
            .prefix("cfdp-outputs-")
            .tempdir()
            .unwrap();
        let dir = dir_tmp.path();
        let mut o = Outputs::new(dir.join("out.pcap"), false, LinkType::Ethernet);
        let m = Meta {
            off: 0,
            len: 4,
            orig_len: 4,
            ts_ns: 0,
            link: LinkType::Ethernet,
        };
        for port in 0..MAX_PORTS as u16 {
            o.write(port, &m, &[1, 2, 3, 4]).unwrap();
        }
        let e = o.write(MAX_PORTS as u16, &m, &[1, 2, 3, 4]).unwrap_err();
        assert!(matches!(e, OutputError::TooManyPorts { port } if port == MAX_PORTS as u16));
        o.write(7, &m, &[1, 2, 3, 4]).unwrap();
        o.finish().unwrap();
    }
}
