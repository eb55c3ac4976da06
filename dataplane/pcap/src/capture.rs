//! Capture files: pcap (both byte orders, micro- and nanosecond
//! timestamps) and pcapng (several interfaces and link types), read with
//! the `pcap-file` crate, frame by frame without copying.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Cursor, Read};
use std::path::Path;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::TsResolution;

use cfdp_packet::LinkType;

/// One captured frame, borrowed from the reader's buffer.
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    pub link: LinkType,
    pub ts_ns: u64,
    pub orig_len: u32,
    /// pcapng interface id (0 for pcap).
    pub iface: u32,
    pub data: &'a [u8],
}

/// A capture that could not be opened or read to its end.
#[derive(Debug)]
pub enum CaptureError {
    Open(std::io::Error),
    NotACapture(String),
    /// The file is damaged or cut after `frames` good frames.
    Damaged {
        frames: u64,
        reason: String,
    },
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaptureError::Open(e) => write!(f, "cannot open capture: {e}"),
            CaptureError::NotACapture(m) => write!(f, "not a pcap or pcapng file: {m}"),
            CaptureError::Damaged { frames, reason } => {
                write!(f, "capture damaged after {frames} frames: {reason}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

/// The byte source: a buffered file, or memory (tests, fuzzing).
type Source = Box<dyn Read + Send>;

enum Inner {
    Pcap(PcapReader<Source>, LinkType, TsResolution),
    PcapNg(PcapNgReader<Source>),
}

/// A capture file opened for reading.
pub struct Capture {
    inner: Inner,
    frames: u64,
    /// pcapng: link type of each interface of the current section.
    links: Vec<LinkType>,
}

impl Capture {
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let mut f = File::open(path).map_err(CaptureError::Open)?;
        let mut magic = [0u8; 4];
        f.read_exact(&mut magic)
            .map_err(|_| CaptureError::NotACapture("shorter than a file header".into()))?;
        let f = File::open(path).map_err(CaptureError::Open)?;
        Self::from_source(magic, Box::new(BufReader::with_capacity(1 << 20, f)))
    }

    /// A capture held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, CaptureError> {
        let magic: [u8; 4] = bytes
            .get(..4)
            .and_then(|m| m.try_into().ok())
            .ok_or_else(|| CaptureError::NotACapture("shorter than a file header".into()))?;
        Self::from_source(magic, Box::new(Cursor::new(bytes)))
    }

    fn from_source(magic: [u8; 4], r: Source) -> Result<Self, CaptureError> {
        let inner = match u32::from_le_bytes(magic) {
            0x0a0d_0d0a => Inner::PcapNg(
                PcapNgReader::new(r).map_err(|e| CaptureError::NotACapture(e.to_string()))?,
            ),
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let p = PcapReader::new(r).map_err(|e| CaptureError::NotACapture(e.to_string()))?;
                let h = p.header();
                let link = LinkType::from_linktype(u32::from(h.datalink));
                Inner::Pcap(p, link, h.ts_resolution)
            }
            m => {
                return Err(CaptureError::NotACapture(format!(
                    "unknown magic {m:#010x}"
                )))
            }
        };
        Ok(Self {
            inner,
            frames: 0,
            links: Vec::new(),
        })
    }

    /// Whether the file is pcapng (output then mirrors it as pcapng).
    pub fn is_pcapng(&self) -> bool {
        matches!(self.inner, Inner::PcapNg(_))
    }

    /// Link type of a pcap file, or of the first pcapng interface seen.
    pub fn link_type(&self) -> Option<LinkType> {
        match &self.inner {
            Inner::Pcap(_, l, _) => Some(*l),
            Inner::PcapNg(r) => r
                .interfaces()
                .first()
                .map(|i| LinkType::from_linktype(u32::from(i.linktype))),
        }
    }

    /// Calls `f` with each frame in order. Stops at the end (`Ok(frames)`),
    /// when `f` breaks (`Ok`), or at damage (`Err`, after every good frame
    /// before it was delivered).
    pub fn for_each(
        &mut self,
        mut f: impl FnMut(&Frame<'_>) -> std::ops::ControlFlow<()>,
    ) -> Result<u64, CaptureError> {
        match &mut self.inner {
            Inner::Pcap(r, link, res) => {
                // Raw records: pcap-file's validated reader refuses a wire
                // length above the snaplen, which is normal for a capture
                // cut by its snaplen. We only need the timestamp converted.
                while let Some(p) = r.next_raw_packet() {
                    let p = p.map_err(|e| CaptureError::Damaged {
                        frames: self.frames,
                        reason: e.to_string(),
                    })?;
                    let frac = u64::from(p.ts_frac);
                    let frac_ns = if *res == TsResolution::MicroSecond {
                        frac * 1_000
                    } else {
                        frac
                    };
                    self.frames += 1;
                    let flow = f(&Frame {
                        link: *link,
                        ts_ns: u64::from(p.ts_sec) * 1_000_000_000 + frac_ns,
                        orig_len: p.orig_len.max(p.incl_len),
                        iface: 0,
                        data: &p.data,
                    });
                    if flow.is_break() {
                        break;
                    }
                }
            }
            Inner::PcapNg(r) => {
                while let Some(b) = r.next_block() {
                    let b = b.map_err(|e| CaptureError::Damaged {
                        frames: self.frames,
                        reason: e.to_string(),
                    })?;
                    let (iface, ts, orig_len, data) = match &b {
                        Block::EnhancedPacket(p) => (
                            p.interface_id,
                            p.timestamp.as_nanos() as u64,
                            p.original_len,
                            &p.data,
                        ),
                        Block::SimplePacket(p) => (0, 0, p.original_len, &p.data),
                        Block::InterfaceDescription(i) => {
                            self.links
                                .push(LinkType::from_linktype(u32::from(i.linktype)));
                            continue;
                        }
                        Block::SectionHeader(_) => {
                            self.links.clear();
                            continue;
                        }
                        _ => continue,
                    };
                    let Some(&link) = self.links.get(iface as usize) else {
                        return Err(CaptureError::Damaged {
                            frames: self.frames,
                            reason: format!("packet on undeclared interface {iface}"),
                        });
                    };
                    self.frames += 1;
                    let flow = f(&Frame {
                        link,
                        ts_ns: ts,
                        orig_len,
                        iface,
                        data,
                    });
                    if flow.is_break() {
                        break;
                    }
                }
            }
        }
        Ok(self.frames)
    }
}
