//! The control socket: listeners, peer checks, per-connection limits.
//!
//! One thread per connection reads newline-delimited requests, answers
//! envelope errors itself, and hands well-formed requests to the control
//! thread, one at a time, waiting for each answer (responses come back in
//! request order). A slow or stuck client therefore only ever holds its own
//! thread: the control thread never writes to a socket, and workers never
//! see the control plane at all.
//!
//! Limits (all from `[control]`): the line length (`max_line_bytes`; an
//! over-long line is answered with an error and skipped), idle time
//! (`idle_timeout_s`: a connection that sends no request — blank lines do
//! not count — or stops in the middle of a line, is closed), write time (a
//! client that does not read its responses for 10 s is dropped), the
//! connection slots (`slots.rs`: `max_connections`, a quarter of them kept
//! for the Unix socket, `max_connections_per_peer`), and the bytes of
//! request lines being parsed at once (`max_parse_bytes`: a line waits for
//! its share; a JSON tree costs many times its text).
//!
//! The two doors differ in trust. A Unix-socket peer passed the kernel's
//! file mode and cfdp's `SO_PEERCRED` check; a bad line is answered and the
//! connection stays usable. A TCP peer must first authenticate (`hello`
//! with the token, `auth.rs`), and its connection closes on the first line
//! that is not a valid request. Either closes at once on a line that looks
//! like HTTP: a browser's cross-site POST to a loopback port must not be
//! read as requests.

use std::io::{BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use cfdp_rules::protocol::{check_params, code, parse_request_line, ErrorReply, Method};
use serde_json::Value;

use crate::api::{Command, ControlError, ControlHandle, NodeStatus, RequestLimits, Response};
use crate::auth::Token;
pub use crate::budget::ParseBudget;
use crate::lines::{looks_like_http, Deadlines};
pub use crate::lines::{read_line_limited, Line, Stream};
use crate::slots::{Peer, Slot, Slots};
use crate::stats::StatsBoard;
use crate::wire;

/// Limits and access rules of the listeners.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Line length and batch size (batches are parsed on the connection
    /// thread).
    pub requests: RequestLimits,
    pub idle_timeout: Duration,
    /// Most time from a request line's first byte to its newline (and,
    /// on TCP, to authenticate).
    pub request_timeout: Duration,
    /// Peers of the Unix socket whose uid is here, or whose gid is in
    /// `allowed_gids`, may connect.
    pub allowed_uids: Vec<u32>,
    pub allowed_gids: Vec<u32>,
}

/// How long a client may leave a response unread.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes of a TCP connection's first line, before it authenticated
/// (a `hello` with the token is about 100 bytes): nothing larger is read,
/// let alone parsed, before the token is checked.
pub const HELLO_MAX_BYTES: usize = 4096;
/// Most time a TCP connection has to authenticate: its slot is not held
/// longer by a peer that has not shown the token.
pub const AUTH_DEADLINE: Duration = Duration::from_secs(5);
/// How often the accept loops look at the stop flag while no client comes.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// Waits until `l` has a connection to accept or [`ACCEPT_POLL`] passes.
/// (A sleep between non-blocking accepts made every new connection wait up
/// to the whole poll interval: 20 ms per `cfdp ctl` call.)
pub(crate) fn wait_readable(l: &impl std::os::fd::AsFd) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(l, PollFlags::IN)];
    let t = Timespec {
        tv_sec: 0,
        tv_nsec: ACCEPT_POLL.as_nanos() as i64,
    };
    // An error (EINTR) is a spurious wake-up: the caller just tries accept.
    let _ = poll(&mut fds, Some(&t));
}

/// A node of a fleet takes its rules from etcd (`cfdp-cluster`): its
/// socket refuses `apply` (one source of truth), and `stats` carries the
/// agent's view — the fleet generation the node has applied, its last
/// error.
#[derive(Debug)]
pub struct ClusterMode {
    /// The fleet's key prefix in etcd.
    pub prefix: String,
    /// The agent's status, as it also writes it to etcd.
    pub status: std::sync::Mutex<NodeStatus>,
}

/// Shared by every listener.
#[derive(Clone)]
pub struct ServerCtx {
    pub limits: Limits,
    pub control: ControlHandle,
    /// Statistics published by the control thread: `stats` is answered
    /// from here, without queueing behind a batch.
    pub board: StatsBoard,
    pub stop: Arc<AtomicBool>,
    /// Connection slots of both doors.
    pub slots: Arc<Slots>,
    /// Bytes of request lines being parsed at once.
    pub parsing: Arc<ParseBudget>,
    /// Set when this node is part of a fleet.
    pub cluster: Option<Arc<ClusterMode>>,
}

/// Who may open the socket file (the kernel's check, before cfdp's
/// `SO_PEERCRED` check of every peer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SocketAccess {
    /// Mode 0660 with this group (one allowed gid).
    pub group: Option<u32>,
    /// Mode 0666 (other users' uids, or several gids, are allowed: a file
    /// has one group, and the peer check does the filtering).
    pub others: bool,
}

impl SocketAccess {
    /// What `allowed_uids` / `allowed_gids` need: 0600 when only `own_uid`
    /// (or nobody listed) is allowed, 0660 with the group when one gid is,
    /// 0666 when other users or several groups are.
    pub fn for_peers(own_uid: u32, uids: &[u32], gids: &[u32]) -> Self {
        let others = uids.iter().any(|&u| u != own_uid) || gids.len() > 1;
        Self {
            group: if others { None } else { gids.first().copied() },
            others,
        }
    }

    fn mode(&self) -> u32 {
        match (self.others, self.group) {
            (true, _) => 0o666,
            (false, Some(_)) => 0o660,
            (false, None) => 0o600,
        }
    }
}

/// Binds the Unix socket at `path` with the mode (and group) `access`
/// asks for: 0600 by default.
///
/// The socket is bound in a private (0700) temporary directory, given its
/// group and mode, then renamed into place, so it is never reachable with
/// looser permissions than configured. An existing
/// socket that answers belongs to a running cfdp: refused. One that does not
/// answer is a leftover of a crash: replaced. Anything else at `path` is
/// refused.
pub fn bind_unix(path: &Path, access: SocketAccess) -> Result<UnixListener, SocketError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SocketError::Io { path, source }
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(SocketError::NotASocket(path.to_path_buf()));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(SocketError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io(path))?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    // Bound inside a fresh 0700 directory beside `path`: until the rename,
    // nobody else can even reach the socket, whatever the umask.
    let mut private = path.as_os_str().to_owned();
    private.push(format!(".{}.d", std::process::id()));
    let private = PathBuf::from(private);
    let _ = std::fs::remove_dir_all(&private);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&private)
            .map_err(io(&private))?;
    }
    let tmp = private.join("s");
    let bound = UnixListener::bind(&tmp).map_err(io(&tmp));
    let l = match bound {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&private);
            return Err(e);
        }
    };
    // The group is set before the mode opens the socket to it.
    let group = match access.group {
        Some(g) => rustix::fs::chown(&tmp, None, Some(rustix::fs::Gid::from_raw(g)))
            .map_err(|e| std::io::Error::new(e.kind(), format!("group {g}: {e}"))),
        None => Ok(()),
    };
    let setup = group
        .and_then(|_| {
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(access.mode()))
        })
        .and_then(|_| std::fs::rename(&tmp, path));
    let _ = std::fs::remove_dir_all(&private);
    if let Err(e) = setup {
        return Err(io(path)(e));
    }
    Ok(l)
}

/// Why the control socket could not be bound, or a peer was refused.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("control.socket {}: exists and is not a socket: refusing to replace it", .0.display())]
    NotASocket(PathBuf),
    #[error("control.socket {}: another cfdp is already serving on this socket", .0.display())]
    InUse(PathBuf),
    #[error("control.socket {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read peer credentials: {0}")]
    PeerCredentials(#[source] std::io::Error),
    #[error("peer uid {uid} gid {gid} (pid {pid}) is not allowed on this socket")]
    PeerRefused { uid: u32, gid: u32, pid: i32 },
}

/// Whether a Unix-socket peer may use the socket (SO_PEERCRED); its uid.
fn peer_allowed(s: &UnixStream, limits: &Limits) -> Result<u32, SocketError> {
    let cred = rustix::net::sockopt::socket_peercred(s)
        .map_err(|e| SocketError::PeerCredentials(e.into()))?;
    let (uid, gid) = (cred.uid.as_raw(), cred.gid.as_raw());
    if limits.allowed_uids.contains(&uid) || limits.allowed_gids.contains(&gid) {
        Ok(uid)
    } else {
        Err(SocketError::PeerRefused {
            uid,
            gid,
            pid: cred.pid.as_raw_nonzero().get(),
        })
    }
}

fn refuse(mut w: impl Write, msg: &str) {
    let e = ErrorReply::new(Value::Null, code::INVALID_REQUEST, msg);
    let _ = writeln!(w, "{}", e.to_json());
}

/// Serves the Unix socket until `ctx.stop`; removes the socket file at the end.
pub fn serve_unix(
    l: UnixListener,
    path: PathBuf,
    ctx: ServerCtx,
) -> std::io::Result<JoinHandle<()>> {
    l.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("cfdp-ctl-unix".into())
        .spawn(move || {
            while !ctx.stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => match peer_allowed(&s, &ctx.limits) {
                        Ok(uid) => admit(s, Door::Unix(uid), &ctx, UnixStream::try_clone),
                        Err(msg) => {
                            eprintln!("cfdp: control: {msg}");
                            refuse(&s, &msg.to_string());
                        }
                    },
                    Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(&l),
                    Err(e) => {
                        eprintln!("cfdp: control: accept: {e}");
                        std::thread::sleep(ACCEPT_POLL);
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        })
}

/// Serves a TCP listener until `ctx.stop`. No peer credentials exist on
/// TCP: a connection must present `token` first (see the module docs).
pub fn serve_tcp(l: TcpListener, ctx: ServerCtx, token: Token) -> std::io::Result<JoinHandle<()>> {
    l.set_nonblocking(true)?;
    let token = Arc::new(token);
    std::thread::Builder::new()
        .name("cfdp-ctl-tcp".into())
        .spawn(move || {
            while !ctx.stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, addr)) => {
                        let door = Door::Tcp(addr.ip(), Arc::clone(&token));
                        admit(s, door, &ctx, TcpStream::try_clone);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => wait_readable(&l),
                    Err(e) => {
                        eprintln!("cfdp: control: accept: {e}");
                        std::thread::sleep(ACCEPT_POLL);
                    }
                }
            }
        })
}

/// The door a connection came in by, with what that door checks.
#[derive(Clone)]
enum Door {
    /// A Unix-socket peer (already checked), by uid.
    Unix(u32),
    /// A TCP peer, by address, that must present the token.
    Tcp(std::net::IpAddr, Arc<Token>),
}

impl Door {
    fn peer(&self) -> Peer {
        match self {
            Door::Unix(uid) => Peer::Unix(*uid),
            Door::Tcp(ip, _) => Peer::Tcp(*ip),
        }
    }
}

/// Takes a slot for the connection, or refuses it; spawns its thread.
fn admit<S: Stream>(s: S, door: Door, ctx: &ServerCtx, clone: impl Fn(&S) -> std::io::Result<S>) {
    let slot: Slot = match ctx.slots.take(door.peer()) {
        Ok(slot) => slot,
        Err(e) => return refuse(s, &e.to_string()),
    };
    let setup = s
        .set_nonblocking(false)
        .and_then(|_| s.set_read_timeout(Some(ctx.limits.idle_timeout)))
        .and_then(|_| s.set_write_timeout(Some(WRITE_TIMEOUT)))
        .and_then(|_| clone(&s));
    let writer = match setup {
        Ok(w) => w,
        Err(e) => {
            eprintln!("cfdp: control: connection setup: {e}");
            return;
        }
    };
    let ctx2 = ctx.clone();
    let spawned = std::thread::Builder::new()
        .name("cfdp-ctl-conn".into())
        .spawn(move || {
            serve_conn(s, writer, &ctx2, &door);
            drop(slot);
        });
    if let Err(e) = spawned {
        eprintln!("cfdp: control: cannot start a connection thread: {e}");
    }
}

/// Whether the connection goes on after a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    Continue,
    Close,
}

fn serve_conn<S: Stream>(reader: S, mut writer: S, ctx: &ServerCtx, door: &Door) {
    // TCP: the token is still to be presented, and a bad line closes.
    let mut gate = match door {
        Door::Unix(_) => None,
        Door::Tcp(_, token) => Some(&**token),
    };
    let strict = gate.is_some();
    let idle = if strict {
        ctx.limits
            .idle_timeout
            .min(ctx.limits.request_timeout)
            .min(AUTH_DEADLINE)
    } else {
        ctx.limits.idle_timeout
    };
    let reader = Deadlines {
        s: reader,
        idle_deadline: std::time::Instant::now() + idle,
        request: ctx.limits.request_timeout,
        line_deadline: None,
    };
    let mut r = BufReader::with_capacity(64 << 10, reader);
    let mut line = Vec::new();
    loop {
        // A new line: its clock starts with its first byte (now, if that
        // byte is already buffered).
        r.get_mut().line_deadline = (!r.buffer().is_empty())
            .then(|| std::time::Instant::now() + ctx.limits.request_timeout);
        let max_line = if gate.is_some() {
            HELLO_MAX_BYTES
        } else {
            ctx.limits.requests.max_line_bytes
        };
        let (reply, next) = match read_line_limited(&mut r, &mut line, max_line) {
            // Blank lines get no answer and do not restart the idle clock.
            Ok(Line::Complete) if line.iter().all(u8::is_ascii_whitespace) => continue,
            Ok(Line::Complete) if looks_like_http(&line) => return,
            Ok(Line::Complete) => answer(&line, ctx, &mut gate, strict),
            Ok(Line::TooLong) => (
                ErrorReply::new(
                    Value::Null,
                    code::REQUEST_TOO_LARGE,
                    format!("request line longer than max_line_bytes = {max_line} (skipped)"),
                )
                .to_json()
                .to_string(),
                if strict { Next::Close } else { Next::Continue },
            ),
            Ok(Line::Eof | Line::Idle) | Err(_) => return,
        };
        let mut out = reply;
        out.push('\n');
        if writer
            .write_all(out.as_bytes())
            .and_then(|_| writer.flush())
            .is_err()
            || next == Next::Close
        {
            return;
        }
        let idle = if gate.is_some() {
            idle
        } else {
            ctx.limits.idle_timeout
        };
        r.get_mut().idle_deadline = std::time::Instant::now() + idle;
    }
}

/// Whether `line` is a `hello` presenting `token`.
fn presents(line: &[u8], token: &Token) -> bool {
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        token: Option<std::borrow::Cow<'a, str>>,
    }
    #[derive(serde::Deserialize)]
    struct Hello<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        params: Option<Params<'a>>,
    }
    serde_json::from_slice::<Hello>(line).is_ok_and(|h| {
        h.method == "hello"
            && h.params
                .and_then(|p| p.token)
                .is_some_and(|t| token.matches(&t))
    })
}

/// The response to one request line, as JSON text, and whether the
/// connection goes on. `gate`: the token a TCP connection has still to
/// present (`None`: it may send requests); `strict`: a line that is not a
/// valid request closes the connection.
fn answer(line: &[u8], ctx: &ServerCtx, gate: &mut Option<&Token>, strict: bool) -> (String, Next) {
    let t0 = std::time::Instant::now();
    // Before the token: only a hello's method and token are read, from a
    // line of at most HELLO_MAX_BYTES; nothing else is parsed for a peer
    // that has not authenticated.
    if let Some(token) = *gate {
        if !presents(line, token) {
            let e = ControlError::Unauthorized;
            return (wire::answer_line(&Value::Null, &Err(e), None), Next::Close);
        }
    }
    let share = ctx.parsing.take(line.len());
    let request = match parse_request_line(line, ctx.limits.requests.max_batch) {
        Ok(p) => p,
        Err(e) => {
            let next = if strict { Next::Close } else { Next::Continue };
            return (e.to_json().to_string(), next);
        }
    };
    let id = request.req.id.clone();
    if let Some(token) = *gate {
        let presented = request.req.params.get("token").and_then(Value::as_str);
        if request.req.method != Method::Hello || !presented.is_some_and(|p| token.matches(p)) {
            let e = ControlError::Unauthorized;
            return (wire::answer_line(&id, &Err(e), None), Next::Close);
        }
        *gate = None;
    }
    if ctx.stop.load(Ordering::Relaxed) {
        return (
            wire::answer_line(&id, &Err(ControlError::ShuttingDown), None),
            Next::Continue,
        );
    }
    let fleet = ctx.cluster.as_ref().map(|c| {
        let status = c
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (c.prefix.clone(), status.clone())
    });
    // `stats` is answered from the published board, without queueing
    // behind a batch.
    if request.req.method == Method::Stats && check_params(&request.req.params, &[]).is_ok() {
        let stats = Response::Stats(Box::new(ctx.board.read()));
        let extra = fleet.map(|(_, s)| ("cluster", serde_json::to_value(s).unwrap_or_default()));
        return (wire::answer_line(&id, &Ok(stats), extra), Next::Continue);
    }
    if let (Method::Apply | Method::Replace, Some((prefix, _))) = (request.req.method, &fleet) {
        let e = ControlError::FleetOwned {
            prefix: prefix.clone(),
        };
        return (wire::answer_line(&id, &Err(e), None), Next::Continue);
    }
    let parse_us = t0.elapsed().as_micros() as u64;
    let command: Command = match wire::command(request, ctx.limits.requests.max_batch, parse_us) {
        Ok(c) => c,
        Err(e) => return (e.to_json().to_string(), Next::Continue),
    };
    drop(share);
    let answer = ctx.control.call(command);
    // A fleet's node answers reads with the fleet generation it has
    // applied beside its own (local) generation.
    let extra = fleet.map(|(_, s)| ("fleet_generation", Value::from(s.generation)));
    (wire::answer_line(&id, &answer, extra), Next::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that sends only blank lines is idle: it is closed
    /// after the idle timeout however often the blank lines come (they
    /// restarted the clock, so 64 such connections held every slot).
    #[test]
    fn blank_lines_do_not_keep_an_idle_connection() {
        let stats = Arc::new(cfdp_engine::LiveStats::new(1, 1024));
        let cfg = crate::StoreConfig {
            max_rules: 1024,
            ..crate::StoreConfig::default()
        };
        let store = crate::RuleStore::new(cfg, stats).unwrap();
        let plane =
            crate::plane::ControlPlane::new(store, None, crate::plane::PlaneConfig::default());
        let (tx, _rx) = crossbeam::channel::bounded(1);
        let ctx = ServerCtx {
            limits: Limits {
                requests: RequestLimits::default(),
                idle_timeout: Duration::from_millis(300),
                request_timeout: Duration::from_secs(5),
                allowed_uids: vec![],
                allowed_gids: vec![],
            },
            control: ControlHandle::new(tx),
            board: plane.board(),
            stop: Arc::new(AtomicBool::new(false)),
            slots: Slots::new(crate::slots::SlotLimits::new(4, 4)),
            parsing: ParseBudget::new(1 << 20),
            cluster: None,
        };
        let (server_side, client) = UnixStream::pair().unwrap();
        let writer = server_side.try_clone().unwrap();
        let served =
            std::thread::spawn(move || serve_conn(server_side, writer, &ctx, &Door::Unix(0)));
        client
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        // A blank line every 50 ms for up to 10 s (pacing, not waiting for
        // anything); the server must close the connection meanwhile.
        let mut closed = false;
        for _ in 0..200 {
            if (&client).write_all(b"\n").is_err() {
                closed = true;
                break;
            }
            let mut buf = [0u8; 64];
            match std::io::Read::read(&mut &client, &mut buf) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(_) => panic!("an answer to a blank line"),
                Err(_) => {}
            }
        }
        assert!(closed, "a connection sending blank lines was never closed");
        served.join().unwrap();
    }

    /// The socket file's mode and group follow who is allowed: 0600 for
    /// the owner alone, 0660 with the group for one gid, 0666 when other
    /// users or several groups are (the peer check filters then).
    #[test]
    fn the_socket_mode_and_group_follow_the_allowed_peers() {
        use std::os::unix::fs::MetadataExt;
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let dir_tmp = tempfile::Builder::new()
            .prefix("cfdp-sock-mode-")
            .tempdir()
            .unwrap();
        let dir = dir_tmp.path();
        let cases = [
            (SocketAccess::for_peers(uid, &[], &[]), 0o600, None),
            (SocketAccess::for_peers(uid, &[uid], &[]), 0o600, None),
            (SocketAccess::for_peers(uid, &[], &[gid]), 0o660, Some(gid)),
            (
                SocketAccess::for_peers(uid, &[uid, uid + 1], &[]),
                0o666,
                None,
            ),
            (
                SocketAccess::for_peers(uid, &[], &[gid, gid + 1]),
                0o666,
                None,
            ),
        ];
        for (i, (access, mode, group)) in cases.into_iter().enumerate() {
            let path = dir.join(format!("s{i}.sock"));
            let l = bind_unix(&path, access).unwrap();
            let m = std::fs::metadata(&path).unwrap();
            assert_eq!(m.mode() & 0o777, mode, "{access:?}");
            if let Some(g) = group {
                assert_eq!(m.gid(), g, "{access:?}");
            }
            drop(l);
        }
    }
}
