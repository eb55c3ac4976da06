//! The OpenMetrics text encoders every family of the exporter is written
//! with: one family of counters or gauges by one label, one gauge, and
//! the escaping of label values.

use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, NoLabelSet};
use prometheus_client::metrics::MetricType;

pub(super) type Enc<'a, 'b> = &'a mut DescriptorEncoder<'b>;
pub(super) type Res = Result<(), std::fmt::Error>;

/// A label value as OpenMetrics text needs it (`prometheus-client` writes
/// label values as given): backslash, double quote and newline escaped. A
/// fleet's key prefix comes from the configuration and may hold any of
/// them; unescaped, one would corrupt the whole exposition.
fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

/// One counter family, one sample per label value.
pub(super) fn counters<L: AsRef<str>>(
    e: Enc,
    name: &str,
    help: &str,
    label: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> Res {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in samples {
        m.encode_family(&[(label, escape(l.as_ref()))])?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

/// One gauge without labels.
pub(super) fn gauge(e: Enc, name: &str, help: &str, v: impl EncodeGaugeValue) -> Res {
    e.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// One gauge family, one sample per label value.
pub(super) fn gauges<L: AsRef<str>>(
    e: Enc,
    name: &str,
    help: &str,
    label: &str,
    samples: impl IntoIterator<Item = (L, f64)>,
) -> Res {
    let mut m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in samples {
        m.encode_family(&[(label, escape(l.as_ref()))])?
            .encode_gauge(&v)?;
    }
    Ok(())
}
