//! Which ports a child process holds, read from `/proc`: the socket
//! inodes among its open files (`/proc/PID/fd`) matched against the
//! kernel's socket tables (`/proc/net/{udp,udp6,tcp,tcp6}`). A program
//! told to bind port 0 is then asked which port it got — and a program
//! that cannot bind port 0 is seen holding the port it was given, not
//! merely that someone holds it (a port probed free and released here can
//! be taken by a parallel test before the program binds it).
//!
//! Hand-written: a few lines of `/proc` parsing; the crates that read
//! these tables (`procfs`) bring far more than this needs.

use std::collections::HashSet;

/// A socket table's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Udp,
    /// Listening sockets only.
    TcpListen,
}

/// The local ports of process `pid`'s `proto` sockets, IPv4 and IPv6,
/// sorted (empty when the process is gone or holds none).
pub fn bound_ports(pid: u32, proto: Proto) -> Vec<u16> {
    let inodes = socket_inodes(pid);
    let tables: &[&str] = match proto {
        Proto::Udp => &["/proc/net/udp", "/proc/net/udp6"],
        Proto::TcpListen => &["/proc/net/tcp", "/proc/net/tcp6"],
    };
    let mut ports: Vec<u16> = tables
        .iter()
        .filter_map(|t| std::fs::read_to_string(t).ok())
        .flat_map(|text| parse_table(&text, proto))
        .filter(|(_, inode)| inodes.contains(inode))
        .map(|(port, _)| port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The inodes of the sockets among `pid`'s open files.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    fds.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// (local port, inode) of every row of a `/proc/net` socket table:
/// `sl local_address rem_address st … inode`, the address as
/// `HEXADDR:HEXPORT`, TCP's listening state `0A`.
fn parse_table(text: &str, proto: Proto) -> Vec<(u16, u64)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            if proto == Proto::TcpListen && *f.get(3)? != "0A" {
                return None;
            }
            Some((port, f.get(9)?.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's own sockets: a UDP socket and a TCP listener on
    /// port 0 are found at the ports the kernel gave them, a connected
    /// TCP socket is not a listener, and another process's are not ours.
    #[test]
    fn a_process_s_own_ports_are_found() {
        let me = std::process::id();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpListener::bind("[::1]:0")
            .or_else(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let client = std::net::TcpStream::connect(tcp.local_addr().unwrap()).unwrap();
        let u = udp.local_addr().unwrap().port();
        let t = tcp.local_addr().unwrap().port();
        assert!(bound_ports(me, Proto::Udp).contains(&u));
        let listening = bound_ports(me, Proto::TcpListen);
        assert!(listening.contains(&t), "{listening:?} lacks {t}");
        assert!(!listening.contains(&client.local_addr().unwrap().port()));
        // PID 1 (init, or the container's first process) holds none of them.
        assert!(!bound_ports(1, Proto::Udp).contains(&u));
        drop(udp);
        assert!(!bound_ports(me, Proto::Udp).contains(&u));
    }

    #[test]
    fn table_rows_are_read_by_column() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
                    13192: 0100007F:B6BD 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4530546 2 0000 0\n\
                    1: 0100007F:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000 0\n";
        assert_eq!(
            parse_table(text, Proto::Udp),
            [(0xb6bd, 4_530_546), (80, 77)]
        );
        assert_eq!(parse_table(text, Proto::TcpListen), [(80, 77)]);
    }
}
