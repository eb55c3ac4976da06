//! cfdp's statistics as DPDK telemetry commands, so `dpdk-telemetry.py`
//! (and anything speaking the telemetry socket,
//! `/var/run/dpdk/<file-prefix>/dpdk_telemetry.v2`) shows them beside
//! `/ethdev/stats`.
//!
//! DPDK calls a command's callback on its telemetry thread with no user
//! pointer, so the providers live in one process-wide table keyed by
//! command; a provider is a plain Rust closure that returns the entries
//! (this crate does not know what cfdp's statistics are). DPDK 22.11's
//! dictionaries hold unsigned integers and strings only (no floats), keys
//! and values of at most 127 bytes, at most 256 entries.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Mutex, OnceLock};

use cfdp_dpdk_sys as sys;

use crate::eal::{rte_error, Eal};
use crate::DpdkError;

/// One value of a telemetry dictionary.
#[derive(Clone, Debug, PartialEq)]
pub enum TelValue {
    U64(u64),
    Str(String),
}

/// What a command answers: its dictionary, or why not (the provider's own
/// error type; its client reads `{"error": "<its Display>"}`).
pub type TelAnswer = Result<Vec<(String, TelValue)>, Box<dyn std::error::Error + Send + Sync>>;

/// A command DPDK routed here that has no provider (registered, then
/// dropped from the table: never in practice, but answered, not a panic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoProvider {
    pub command: String,
}

impl std::fmt::Display for NoProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: no provider", self.command)
    }
}

impl std::error::Error for NoProvider {}

/// A command's provider: called with the command's parameters (the text
/// after the comma, empty if none).
pub type Provider = Box<dyn Fn(&str) -> TelAnswer + Send + Sync>;

fn providers() -> &'static Mutex<HashMap<String, Provider>> {
    static P: OnceLock<Mutex<HashMap<String, Provider>>> = OnceLock::new();
    P.get_or_init(Default::default)
}

/// Registers `cmd` (e.g. `/cfdp/stats`: starts with `/`, letters, digits,
/// `_` and `/`) with DPDK's telemetry. Registering a command again
/// replaces its provider (DPDK keeps the first registration's help).
pub fn register(_eal: &Eal, cmd: &str, help: &str, provider: Provider) -> Result<(), DpdkError> {
    let valid = cmd.starts_with('/')
        && cmd.len() < sys::TEL_MAX_STRING_LEN
        && cmd
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'/');
    if !valid {
        return Err(DpdkError::Usage(format!(
            "telemetry command {cmd:?}: must start with '/' and use only letters, digits, '_' and '/'"
        )));
    }
    let first = {
        let mut p = providers().lock().unwrap_or_else(|e| e.into_inner());
        p.insert(cmd.to_owned(), provider).is_none()
    };
    if !first {
        return Ok(());
    }
    let c_cmd = CString::new(cmd).expect("checked: no NUL");
    let c_help = CString::new(help.replace('\0', " ")).expect("NULs replaced");
    // SAFETY: both strings are NUL-terminated and live for the call (DPDK
    // copies them); `callback` has the `telemetry_cb` signature and is
    // valid for the whole process.
    let rc = unsafe { sys::rte_telemetry_register_cmd(c_cmd.as_ptr(), callback, c_help.as_ptr()) };
    if rc < 0 {
        providers()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(cmd);
        return Err(rte_error(format!("register telemetry command {cmd}"), rc));
    }
    Ok(())
}

/// A dictionary key or value as DPDK takes it: at most 127 bytes (cut at a
/// character boundary), no NUL.
fn c_text(s: &str) -> CString {
    let mut end = s.len().min(sys::TEL_MAX_STRING_LEN - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    CString::new(s[..end].replace('\0', " ")).expect("NULs replaced")
}

/// The answer as DPDK dictionary calls: `(key, value)` with keys and
/// values cut to size, at most [`sys::TEL_MAX_DICT_ENTRIES`] entries (the
/// last one says how many were left out when there were more).
fn dictionary(answer: TelAnswer) -> Vec<(CString, TelValue)> {
    let entries = match answer {
        Ok(e) => e,
        Err(e) => vec![("error".to_owned(), TelValue::Str(e.to_string()))],
    };
    let max = sys::TEL_MAX_DICT_ENTRIES;
    let mut out: Vec<(CString, TelValue)> = Vec::with_capacity(entries.len().min(max));
    let total = entries.len();
    for (k, v) in entries {
        if out.len() == max - 1 && total > max {
            out.push((
                c_text("entries_left_out"),
                TelValue::U64((total - (max - 1)) as u64),
            ));
            break;
        }
        out.push((c_text(&k), v));
    }
    out
}

unsafe extern "C" fn callback(cmd: *const c_char, params: *const c_char, d: *mut c_void) -> c_int {
    // A panic must not unwind into DPDK's thread.
    std::panic::catch_unwind(|| {
        // SAFETY: DPDK passes the registered command as a NUL-terminated
        // string.
        let cmd = unsafe { CStr::from_ptr(cmd) }.to_string_lossy();
        let params = if params.is_null() {
            String::new()
        } else {
            // SAFETY: non-NULL params are NUL-terminated (DPDK's parser).
            unsafe { CStr::from_ptr(params) }
                .to_string_lossy()
                .into_owned()
        };
        let answer = {
            let p = providers().lock().unwrap_or_else(|e| e.into_inner());
            match p.get(cmd.as_ref()) {
                Some(f) => f(params.trim()),
                None => Err(NoProvider {
                    command: cmd.to_string(),
                }
                .into()),
            }
        };
        // SAFETY: `d` is the `rte_tel_data` DPDK handed this callback;
        // every key and value is NUL-terminated and under 128 bytes, and
        // there are at most 256 entries (`dictionary`).
        unsafe {
            if sys::rte_tel_data_start_dict(d) != 0 {
                return -1;
            }
            for (k, v) in dictionary(answer) {
                match v {
                    TelValue::U64(x) => sys::rte_tel_data_add_dict_u64(d, k.as_ptr(), x),
                    TelValue::Str(s) => {
                        let s = c_text(&s);
                        sys::rte_tel_data_add_dict_string(d, k.as_ptr(), s.as_ptr())
                    }
                };
            }
        }
        0
    })
    .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_answers_are_cut_to_what_dpdk_takes() {
        let many: Vec<_> = (0..300)
            .map(|i| (format!("k{i}"), TelValue::U64(i)))
            .collect();
        let d = dictionary(Ok(many));
        assert_eq!(d.len(), 256);
        assert_eq!(d[255].0.to_str().unwrap(), "entries_left_out");
        assert_eq!(d[255].1, TelValue::U64(45));
        let key = "é".repeat(100);
        let c = c_text(&key);
        assert!(c.as_bytes().len() <= 127);
        assert!(std::str::from_utf8(c.as_bytes()).is_ok());
        let e = dictionary(Err(NoProvider {
            command: "/x".into(),
        }
        .into()));
        assert_eq!(e[0].0.to_str().unwrap(), "error");
        assert_eq!(e[0].1, TelValue::Str("/x: no provider".into()));
    }
}
