//! Measured false-positive rate at 95 % load, f = 8, 12, 16, over 10^6
//! negative queries, against the theoretical bound 1 − (1 − 2^−f)^(2b).

mod common;

use cfdp_filter::{Config, Filter};
use common::{fill_to, Keys};

fn measured_fpr(f_bits: u32) -> (f64, f64, f64) {
    let f = Filter::new(Config {
        buckets_log2: Some(18),
        fingerprint_bits: f_bits,
        ..Config::default()
    })
    .unwrap();
    let mut keys = Keys::new(u64::from(f_bits));
    fill_to(&f, 0.95, &mut keys);
    // Negative queries: keys from another seed (a 64-bit collision with an
    // inserted key is impossible in practice; hashes are compared directly).
    let mut neg = Keys::new(0xfeed_0000 + u64::from(f_bits));
    let n = 1_000_000;
    let hits = (0..n).filter(|_| f.contains_hash(neg.next_key())).count();
    let s = f.stats();
    (hits as f64 / n as f64, s.fpr_bound, s.estimated_fpr)
}

#[test]
fn fpr_at_95_percent_load_is_within_bound() {
    for f_bits in [8, 12, 16] {
        let (fpr, bound, est) = measured_fpr(f_bits);
        eprintln!("f={f_bits}: measured {fpr:.6}, estimate {est:.6}, bound {bound:.6}");
        assert!(
            fpr <= 1.2 * bound,
            "f={f_bits}: FPR {fpr} above 1.2 × bound {bound}"
        );
        // And the fingerprints really are compared: not far below the model.
        assert!(
            fpr >= 0.7 * est,
            "f={f_bits}: FPR {fpr} implausibly below estimate {est}"
        );
    }
}
