//! `cfdp run`'s `[ipfix]`: the flow export's collectors and caches.

use cfdp_control::settings::SettingError;

use crate::error::RunError;
use cfdp_config::RunConfig;

/// `[ipfix]`, checked: the collectors' addresses and the caches'
/// settings.
pub(super) fn settings(
    cfg: &RunConfig,
) -> Result<(Vec<std::net::SocketAddr>, cfdp_export::CacheSettings), RunError> {
    cfg.ipfix
        .resolve()
        .map_err(|b| RunError::Setting(SettingError::new("ipfix", b.key, b.value, b.need)))
}

/// What `[ipfix]` says the messages state: observation domain, sampling
/// rate, the PEN rules are named under (the pcap backend's replay takes
/// them one by one).
#[cfg(feature = "dpdk")]
fn setup(cfg: &RunConfig) -> cfdp_export::Setup {
    cfdp_export::Setup {
        domain: cfg.ipfix.observation_domain,
        sampling: cfg.ipfix.sampling,
        rule_pen: cfg.ipfix.rule_pen,
    }
}

/// The exporter `[ipfix]` asks for on the DPDK backend, started and
/// counting into the data plane's statistics, and the workers' options
/// that send to it (the backend sets their clock base); none without
/// collectors. (The pcap backend starts its own: `cfdp replay --ipfix`
/// runs without `cfdp run`.)
#[cfg(feature = "dpdk")]
pub(super) fn start(
    cfg: &RunConfig,
    cx: &cfdp_engine::WorkerContext,
) -> Result<(Option<cfdp_export::Exporter>, cfdp_engine::WorkerOptions), RunError> {
    let (collectors, cache) = settings(cfg)?;
    if collectors.is_empty() {
        return Ok((None, cfdp_engine::WorkerOptions::default()));
    }
    let x = cfdp_export::Exporter::start_counting(
        collectors,
        setup(cfg),
        std::sync::Arc::clone(&cx.stats.export),
    )
    .map_err(RunError::Export)?;
    let wopts = cfdp_engine::WorkerOptions {
        export: Some(cfdp_engine::export::FlowExport {
            cache,
            sender: x.sender(),
            clock_base_ns: 0,
            sampling: cfg.ipfix.sampling,
        }),
        ..Default::default()
    };
    Ok((Some(x), wopts))
}
