//! HDR histograms as Prometheus buckets.

use hdrhistogram::Histogram as Hdr;

/// An HDR histogram (values in ns) as Prometheus buckets in seconds:
/// `(upper bound, count in this bucket)`, the last bound `f64::MAX` (+Inf),
/// as `encode_histogram` takes them; plus the sum in seconds.
pub fn hdr_buckets(h: &Hdr<u64>, bounds_ns: &[u64]) -> (Vec<(f64, u64)>, f64) {
    let mut counts = vec![0u64; bounds_ns.len() + 1];
    for v in h.iter_recorded() {
        let x = h.median_equivalent(v.value_iterated_to());
        let i = bounds_ns.partition_point(|&b| b < x);
        counts[i] += v.count_at_value();
    }
    let buckets = bounds_ns
        .iter()
        .map(|&b| b as f64 / 1e9)
        .chain(std::iter::once(f64::MAX))
        .zip(counts)
        .collect();
    (buckets, h.mean() * h.len() as f64 / 1e9)
}
