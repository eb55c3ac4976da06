//! Connection slots of the control socket's two doors.
//!
//! One counter for both doors let 64 idle TCP connections lock the owner
//! out of the Unix socket. Now: TCP may take at most `max_connections`
//! less the slots reserved for the Unix socket, and one peer — a TCP
//! client address, a Unix user — holds at most `max_per_peer` connections
//! at once. A slot is given back when its [`Slot`] drops.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Who is connecting, as far as the door can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A TCP client's address.
    Tcp(IpAddr),
    /// A Unix socket peer's uid (SO_PEERCRED).
    Unix(u32),
}

/// Slot limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotLimits {
    /// Connections of both doors together.
    pub max_connections: usize,
    /// Of those, kept for the Unix socket: TCP cannot take them.
    pub unix_reserved: usize,
    /// Connections one peer may hold at once.
    pub max_per_peer: usize,
}

impl SlotLimits {
    /// A quarter of `max_connections` (at least one) kept for the Unix
    /// socket.
    pub fn new(max_connections: usize, max_per_peer: usize) -> Self {
        Self {
            max_connections,
            unix_reserved: (max_connections / 4).max(1).min(max_connections),
            max_per_peer: max_per_peer.max(1),
        }
    }
}

/// Why a connection got no slot (told to the client, then closed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NoSlot {
    #[error("too many connections (max_connections = {0})")]
    Full(usize),
    #[error("too many TCP connections ({0} of max_connections are kept for the Unix socket)")]
    TcpFull(usize),
    #[error("too many connections from this peer (max_connections_per_peer = {0})")]
    PeerFull(usize),
}

#[derive(Default)]
struct Counts {
    tcp: usize,
    unix: usize,
    peers: HashMap<Peer, usize>,
}

/// The slots of one server (shared by its doors).
pub struct Slots {
    limits: SlotLimits,
    counts: Mutex<Counts>,
}

/// A taken slot; dropping it gives the slot back.
pub struct Slot {
    slots: Arc<Slots>,
    peer: Peer,
}

impl Slots {
    pub fn new(limits: SlotLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// Takes a slot for `peer`, or says why there is none.
    pub fn take(self: &Arc<Self>, peer: Peer) -> Result<Slot, NoSlot> {
        let l = self.limits;
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.tcp + c.unix >= l.max_connections {
            return Err(NoSlot::Full(l.max_connections));
        }
        if matches!(peer, Peer::Tcp(_)) && c.tcp >= l.max_connections - l.unix_reserved {
            return Err(NoSlot::TcpFull(l.unix_reserved));
        }
        let mine = c.peers.entry(peer).or_insert(0);
        if *mine >= l.max_per_peer {
            return Err(NoSlot::PeerFull(l.max_per_peer));
        }
        *mine += 1;
        match peer {
            Peer::Tcp(_) => c.tcp += 1,
            Peer::Unix(_) => c.unix += 1,
        }
        Ok(Slot {
            slots: Arc::clone(self),
            peer,
        })
    }

    /// Connections open now (both doors).
    pub fn active(&self) -> usize {
        let c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.tcp + c.unix
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self
            .slots
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match self.peer {
            Peer::Tcp(_) => c.tcp -= 1,
            Peer::Unix(_) => c.unix -= 1,
        }
        if let Some(n) = c.peers.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                c.peers.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TCP clients cannot take the Unix socket's reserved slots, one peer
    /// cannot take everything, and dropped slots come back.
    #[test]
    fn tcp_leaves_the_unix_socket_its_slots_and_peers_have_a_cap() {
        let s = Slots::new(SlotLimits::new(8, 4));
        let a = Peer::Tcp("127.0.0.1".parse().unwrap());
        let b = Peer::Tcp("127.0.0.2".parse().unwrap());
        let mut held: Vec<Slot> = (0..4).map(|_| s.take(a).unwrap()).collect();
        assert_eq!(s.take(a).err(), Some(NoSlot::PeerFull(4)));
        held.extend((0..2).map(|_| s.take(b).unwrap()));
        assert_eq!(s.take(b).err(), Some(NoSlot::TcpFull(2)), "6 of 8 for TCP");
        let owner = Peer::Unix(1000);
        held.push(s.take(owner).unwrap());
        held.push(s.take(Peer::Unix(1001)).unwrap());
        assert_eq!(s.take(owner).err(), Some(NoSlot::Full(8)));
        assert_eq!(s.active(), 8);
        held.truncate(5);
        assert_eq!(s.active(), 5);
        s.take(b).unwrap();
    }
}
