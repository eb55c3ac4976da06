//! Reading a connection's request lines: a hard cap on a line's length, an
//! idle clock until a request starts and a deadline for the rest of it
//! once it has (a per-read timeout alone lets a client trickle a byte at a
//! time forever), and the look of an HTTP request. No protocol here: the
//! server (`server.rs`) decides what a line means.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// What both stream kinds offer.
pub trait Stream: Read + Write + Send + 'static {
    fn set_nonblocking(&self, on: bool) -> std::io::Result<()>;
    fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()>;
    fn set_write_timeout(&self, d: Option<Duration>) -> std::io::Result<()>;
}

macro_rules! impl_stream {
    ($t:ty) => {
        impl Stream for $t {
            fn set_nonblocking(&self, on: bool) -> std::io::Result<()> {
                <$t>::set_nonblocking(self, on)
            }
            fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
                <$t>::set_read_timeout(self, d)
            }
            fn set_write_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
                <$t>::set_write_timeout(self, d)
            }
        }
    };
}
impl_stream!(UnixStream);
impl_stream!(TcpStream);

/// One line from a connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line (without its newline) is in the buffer.
    Complete,
    /// The line exceeded the limit; its bytes were skipped up to the newline.
    TooLong,
    /// End of stream (a last line without newline is returned first as
    /// `Complete`).
    Eof,
    /// Nothing arrived within the idle timeout (or a line stalled half-way).
    Idle,
}

/// Reads one line of at most `max` bytes into `buf` (cleared first). Never
/// buffers more than `max` bytes of one line, however long it is.
pub fn read_line_limited<R: Read>(
    r: &mut BufReader<R>,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(Line::Idle)
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (&avail[..i], i + 1),
            None => (avail, avail.len()),
        };
        let newline = done > chunk.len();
        if !too_long {
            if buf.len() + chunk.len() > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        r.consume(done);
        if newline {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Complete
            });
        }
    }
}

/// Whether a line is the start of an HTTP request (`GET / HTTP/1.1`):
/// a browser talking to a loopback port, never a control client.
pub(crate) fn looks_like_http(line: &[u8]) -> bool {
    let word = line.iter().take_while(|b| b.is_ascii_uppercase()).count();
    word > 0 && line.get(word) == Some(&b' ') && line.windows(6).any(|w| w == b" HTTP/")
}

/// A connection's reads under two clocks: waiting for a request's first
/// byte lasts until `idle_deadline`; the rest of that line must come within `request`
/// of its first byte, however it is spread over reads (a per-read timeout
/// alone lets a client trickle a byte at a time forever).
pub(crate) struct Deadlines<S> {
    pub(crate) s: S,
    /// When the next request must have started (blank lines do not move
    /// it: they would keep an idle connection's slot forever).
    pub(crate) idle_deadline: std::time::Instant,
    pub(crate) request: Duration,
    /// When the line being read must be complete (`None`: no byte yet).
    pub(crate) line_deadline: Option<std::time::Instant>,
}

impl<S: Stream + Read> Read for Deadlines<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let deadline = self.line_deadline.unwrap_or(self.idle_deadline);
        let timeout = deadline.saturating_duration_since(std::time::Instant::now());
        if timeout.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some(timeout))?;
        let n = self.s.read(buf)?;
        if n > 0 && self.line_deadline.is_none() {
            self.line_deadline = Some(std::time::Instant::now() + self.request);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut r = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let l = read_line_limited(&mut r, &mut buf, max).unwrap();
            if l == Line::Eof {
                return out;
            }
            out.push((l, buf.clone()));
        }
    }

    #[test]
    fn long_lines_are_skipped_whole_and_the_next_line_survives() {
        let got = lines(b"short\nthis line is far too long\nok\nlast", 8);
        assert_eq!(
            got,
            vec![
                (Line::Complete, b"short".to_vec()),
                (Line::TooLong, vec![]),
                (Line::Complete, b"ok".to_vec()),
                (Line::Complete, b"last".to_vec()),
            ]
        );
    }
}
