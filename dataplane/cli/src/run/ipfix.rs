//! `cfdp run`'s `[ipfix]`: the flow export's collectors and caches.

use cfdp_control::settings::SettingError;

use crate::config::RunConfig;
use crate::error::RunError;

/// `[ipfix]`, checked: the collectors' addresses and the caches'
/// settings. Export runs on the pcap path only for now: a DPDK run with
/// collectors is refused rather than exporting nothing.
pub(super) fn settings(
    cfg: &RunConfig,
) -> Result<(Vec<std::net::SocketAddr>, cfdp_export::CacheSettings), RunError> {
    let x = cfg
        .ipfix
        .resolve()
        .map_err(|b| RunError::Setting(SettingError::new("ipfix", b.key, b.value, b.need)))?;
    if cfg.dpdk.enabled && !x.0.is_empty() {
        return Err(RunError::Setting(SettingError::new(
            "ipfix",
            "collectors",
            cfg.ipfix.collectors.join(", "),
            "dpdk.enabled = false: flow export runs with pcap replay only for now",
        )));
    }
    Ok(x)
}
