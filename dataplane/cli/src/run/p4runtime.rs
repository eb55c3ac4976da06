//! `cfdp run`'s P4Runtime door: `[p4runtime]` checked against the rest of
//! the configuration, and the server started.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use cfdp_control::settings::SettingError;

use crate::error::RunError;
use cfdp_config::RunConfig;

/// The P4Runtime server, when `[p4runtime] listen` is set.
pub(super) fn spawn_p4runtime(
    cfg: &RunConfig,
    handle: &cfdp_control::ControlHandle,
    metrics: cfdp_p4runtime::P4Metrics,
    stop: &Arc<AtomicBool>,
) -> Result<Option<std::thread::JoinHandle<()>>, RunError> {
    let Some(opts) = p4runtime_options(cfg)? else {
        return Ok(None);
    };
    let (t, bound) = cfdp_p4runtime::spawn(&opts, handle.clone(), metrics, Arc::clone(stop))
        .map_err(RunError::P4Runtime)?;
    if opts.tls.is_none() {
        eprintln!(
            "cfdp: warning: P4Runtime without TLS (p4runtime.insecure_plaintext): every local \
             user can program the rule set"
        );
    }
    // The address bound, not the one asked for: with port 0 the kernel's
    // choice (tests and scripts read it here).
    eprintln!(
        "cfdp: P4Runtime on {bound}{} (device {})",
        if opts.tls.is_some() { " with TLS" } else { "" },
        opts.device_id
    );
    Ok(Some(t))
}

/// `[p4runtime]`, checked: `None` when off.
pub(super) fn p4runtime_options(
    cfg: &RunConfig,
) -> Result<Option<cfdp_p4runtime::P4Options>, RunError> {
    let Some(opts) = cfg.p4runtime.options()? else {
        return Ok(None);
    };
    if cfg.cluster.enabled() {
        return Err(RunError::Setting(SettingError::new(
            "p4runtime",
            "listen",
            opts.listen,
            "this node takes its rules from etcd (cluster.etcd is set): program the fleet \
             through etcd, not one node",
        )));
    }
    Ok(Some(opts))
}
