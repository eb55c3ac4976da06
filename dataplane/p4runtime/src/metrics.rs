//! The P4Runtime door in cfdp's Prometheus export: calls by RPC and status
//! code, Write updates by operation and outcome, connected controllers.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tonic::Code;

type Labels = Vec<(&'static str, String)>;

/// Shared by the service and the arbiter; cheap to clone (atomics inside).
#[derive(Clone, Debug, Default)]
pub struct P4Metrics {
    calls: Family<Labels, Counter>,
    updates: Family<Labels, Counter>,
    controllers: Gauge,
}

/// A status code as its name in the specification (`OK`,
/// `INVALID_ARGUMENT`, …), as controllers log it.
fn code_name(c: Code) -> String {
    let d = format!("{c:?}");
    let mut out = String::with_capacity(d.len() + 4);
    for (i, ch) in d.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

impl P4Metrics {
    /// Registers the metrics (under the registry's `cfdp_` prefix).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "p4runtime_calls",
            "P4Runtime calls answered, by RPC and status code",
            self.calls.clone(),
        );
        r.register(
            "p4runtime_updates",
            "P4Runtime Write updates, by operation and outcome",
            self.updates.clone(),
        );
        r.register(
            "p4runtime_controllers",
            "Controllers with an open stream channel",
            self.controllers.clone(),
        );
    }

    /// [`P4Metrics::register`] as the metrics exporter takes it.
    pub fn exporter(&self) -> cfdp_control::metrics::ExtraMetrics {
        let m = self.clone();
        Arc::new(move |r| m.register(r))
    }

    pub(crate) fn call(&self, rpc: &'static str, code: Code) {
        self.calls
            .get_or_create(&vec![("rpc", rpc.to_string()), ("code", code_name(code))])
            .inc();
    }

    pub(crate) fn update(&self, op: &'static str, code: Code) {
        self.updates
            .get_or_create(&vec![("op", op.to_string()), ("code", code_name(code))])
            .inc();
    }

    pub(crate) fn set_controllers(&self, n: usize) {
        self.controllers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The count of one label pair, for tests.
    #[cfg(test)]
    fn calls_of(&self, rpc: &'static str, code: Code) -> u64 {
        self.calls
            .get_or_create(&vec![("rpc", rpc.to_string()), ("code", code_name(code))])
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_the_specification_names_them() {
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::PermissionDenied), "PERMISSION_DENIED");
    }

    #[test]
    fn calls_are_exported_under_the_prefix() {
        let m = P4Metrics::default();
        m.call("Write", Code::Ok);
        m.call("Write", Code::Ok);
        m.update("insert", Code::AlreadyExists);
        m.set_controllers(2);
        assert_eq!(m.calls_of("Write", Code::Ok), 2);
        let mut r = Registry::with_prefix("cfdp");
        m.register(&mut r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        assert!(
            text.contains("cfdp_p4runtime_calls_total{rpc=\"Write\",code=\"OK\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("cfdp_p4runtime_updates_total{op=\"insert\",code=\"ALREADY_EXISTS\"} 1"),
            "{text}"
        );
        assert!(text.contains("cfdp_p4runtime_controllers 2"), "{text}");
    }
}
