//! A `cfdp run` child's doors, as it reports them.
//!
//! A test asks for port 0 and reads the port the child bound from the line
//! it prints for that door ("cfdp: metrics on http://127.0.0.1:40321/...").
//! Choosing a free port in the test and handing it over (bind, read the
//! number, drop the listener) leaves a window in which another process can
//! take that port first; this has none.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Child;
use std::time::Duration;

/// The address in the line of `stderr` (the child's standard error, in a
/// file) that starts with `prefix` — `http://` and anything after the
/// address (a path, a space) are skipped. Waits for the line while the
/// child runs; panics with the child's standard error if it exits first
/// (a start that fails ends the process, so no time bound is needed).
pub fn reported_addr(stderr: &Path, prefix: &str, child: &mut Child) -> SocketAddr {
    loop {
        let text = std::fs::read_to_string(stderr).unwrap_or_default();
        if let Some(addr) = find_addr(&text, prefix) {
            return addr;
        }
        if let Some(status) = child.try_wait().expect("the child's status") {
            panic!("cfdp exited {status} before reporting {prefix:?}: {text}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the control socket at `socket` accepts a connection while
/// the child runs; panics with the child's standard error (in the file
/// `stderr`) if it exits first (no time bound: a start that fails ends
/// the process).
pub fn wait_for_socket(socket: &Path, stderr: &Path, child: &mut Child) {
    while std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Some(status) = child.try_wait().expect("the child's status") {
            let text = std::fs::read_to_string(stderr).unwrap_or_default();
            panic!("cfdp exited {status} before its socket answered: {text}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The address after `prefix` on the first line that starts with it.
fn find_addr(text: &str, prefix: &str) -> Option<SocketAddr> {
    let rest = text.lines().find_map(|l| l.strip_prefix(prefix))?;
    let rest = rest.strip_prefix("http://").unwrap_or(rest);
    let end = rest.find(['/', ' ']).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Whether `cmd` is on the `PATH` (a test that needs a system tool skips,
/// or fails when its `REQUIRE_…` variable is set, without it).
pub fn have(cmd: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_door_s_address() {
        let text = "cfdp: control socket ctl.sock\n\
                    cfdp: control over TCP on 127.0.0.1:41001 (token in t)\n\
                    cfdp: metrics on http://127.0.0.1:41002/metrics\n\
                    cfdp: P4Runtime on [::1]:41003 with TLS (device 7)\n";
        let got = |p| find_addr(text, p).map(|a| a.to_string());
        assert_eq!(
            got("cfdp: control over TCP on ").as_deref(),
            Some("127.0.0.1:41001")
        );
        assert_eq!(got("cfdp: metrics on ").as_deref(), Some("127.0.0.1:41002"));
        assert_eq!(got("cfdp: P4Runtime on ").as_deref(), Some("[::1]:41003"));
        assert_eq!(got("cfdp: nothing on "), None);
    }
}
