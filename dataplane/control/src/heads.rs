//! HTTP request heads of many connections, read by one thread that polls
//! them all, for the metrics endpoint. A connection that sends nothing
//! costs one place in a bounded set, not a handler thread: when the set is
//! full the oldest waiting connection is closed to make room, so idle
//! sockets reopened in a loop cannot keep a scraper out (its request comes
//! with its connection). Handlers only ever get complete heads.
//!
//! Hand-written over `poll(2)` (rustix): the endpoint answers one `GET`,
//! and an HTTP server crate would bring an async runtime for it.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Bytes of a request head at most (a larger one is closed).
pub const MAX_HEAD: usize = 8192;

struct Waiting {
    s: TcpStream,
    until: Instant,
    head: Vec<u8>,
}

/// Connections whose request head is still being read.
pub struct Heads {
    waiting: VecDeque<Waiting>,
    max: usize,
    deadline: Duration,
    /// Connections closed to make room for newer ones.
    pub evicted: u64,
}

/// What one [`Heads::poll`] found.
pub struct Polled {
    /// The listener has connections to accept.
    pub acceptable: bool,
    /// Connections whose head arrived whole, with it.
    pub complete: Vec<(TcpStream, Vec<u8>)>,
}

impl Heads {
    /// At most `max` connections wait, each at most `deadline` from its
    /// acceptance for its whole head.
    pub fn new(max: usize, deadline: Duration) -> Self {
        Self {
            waiting: VecDeque::with_capacity(max),
            max: max.max(1),
            deadline,
            evicted: 0,
        }
    }

    /// A new connection (closed if it cannot be made non-blocking). When
    /// the set is full, the oldest waiting connection is closed.
    pub fn add(&mut self, s: TcpStream) {
        if s.set_nonblocking(true).is_err() {
            return;
        }
        if self.waiting.len() == self.max {
            self.waiting.pop_front();
            self.evicted += 1;
        }
        self.waiting.push_back(Waiting {
            s,
            until: Instant::now() + self.deadline,
            head: Vec::new(),
        });
    }

    /// Connections waiting now.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Waits up to `wait` for the listener or a waiting connection to be
    /// readable, reads what came, and drops connections past their
    /// deadline, closed, or sending more than [`MAX_HEAD`] without a blank
    /// line.
    pub fn poll(&mut self, l: &TcpListener, wait: Duration) -> Polled {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let now = Instant::now();
        let wait = self
            .waiting
            .iter()
            .map(|w| w.until.saturating_duration_since(now))
            .fold(wait, Duration::min);
        let (acceptable, ready) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(self.waiting.len() + 1);
            fds.push(PollFd::new(l, PollFlags::IN));
            fds.extend(
                self.waiting
                    .iter()
                    .map(|w| PollFd::new(&w.s, PollFlags::IN)),
            );
            let t = Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            // An error (EINTR) is a spurious wake-up: nothing is ready.
            if poll(&mut fds, Some(&t)).is_err() {
                return Polled {
                    acceptable: false,
                    complete: Vec::new(),
                };
            }
            let ready: Vec<bool> = fds[1..].iter().map(|f| !f.revents().is_empty()).collect();
            (!fds[0].revents().is_empty(), ready)
        };
        let now = Instant::now();
        let mut complete = Vec::new();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for (mut w, ready) in self.waiting.drain(..).zip(ready) {
            if ready && !read_some(&mut w) {
                continue; // closed, failed, or too long
            }
            if ends_head(&w.head) {
                complete.push((w.s, w.head));
            } else if now < w.until {
                kept.push_back(w);
            }
        }
        self.waiting = kept;
        Polled {
            acceptable,
            complete,
        }
    }
}

/// Reads what is there; `false` when the connection is to be dropped.
fn read_some(w: &mut Waiting) -> bool {
    let mut buf = [0u8; 2048];
    loop {
        match w.s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => {
                w.head.extend_from_slice(&buf[..n]);
                if w.head.len() > MAX_HEAD {
                    return false;
                }
                if ends_head(&w.head) {
                    return true;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

/// Whether `head` holds a whole request head (up to its blank line).
fn ends_head(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Idle connections beyond the set's size push out the oldest, not
    /// the newest: a scraper that connects and sends at once is served
    /// however many idle sockets were opened before it.
    #[test]
    fn idle_connections_make_room_for_a_request() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let mut heads = Heads::new(4, Duration::from_secs(60));
        let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut accepted = 0;
        while accepted < idle.len() {
            let p = heads.poll(&l, Duration::from_secs(5));
            assert!(p.complete.is_empty());
            while let Ok((s, _)) = l.accept() {
                heads.add(s);
                accepted += 1;
            }
        }
        assert_eq!((heads.len(), heads.evicted), (4, 6));
        let mut scraper = TcpStream::connect(addr).unwrap();
        scraper.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut got = Vec::new();
        while got.is_empty() {
            let p = heads.poll(&l, Duration::from_secs(5));
            got.extend(p.complete);
            while let Ok((s, _)) = l.accept() {
                heads.add(s);
            }
        }
        assert_eq!(got[0].1, b"GET /metrics HTTP/1.0\r\n\r\n");
        assert_eq!(
            (heads.len(), heads.evicted),
            (3, 7),
            "the oldest idle connection made room, and the scraper left with its head"
        );
        drop(idle);
    }

    #[test]
    fn a_head_past_the_limit_or_the_deadline_is_dropped() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let mut heads = Heads::new(4, Duration::ZERO);
        let _slow = TcpStream::connect(addr).unwrap();
        let mut big = TcpStream::connect(addr).unwrap();
        big.write_all(&vec![b'a'; MAX_HEAD + 10]).unwrap();
        let mut accepted = 0;
        while accepted < 2 {
            heads.poll(&l, Duration::from_secs(5));
            while let Ok((s, _)) = l.accept() {
                heads.add(s);
                accepted += 1;
            }
        }
        let p = heads.poll(&l, Duration::ZERO);
        assert!(p.complete.is_empty());
        assert!(heads.is_empty(), "past the deadline (zero) or too long");
    }
}
