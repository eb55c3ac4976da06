//! Shared helpers for the integration tests.
#![allow(dead_code)]

/// SplitMix64: deterministic distinct keys from a seed.
pub struct Keys(u64);

impl Keys {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_key(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Inserts fresh keys through the plain cuckoo path until the cuckoo part
/// reaches `load`; returns their hashes. Panics if an insert fails first.
pub fn fill_to(f: &cfdp_filter::Filter, load: f64, keys: &mut Keys) -> Vec<u64> {
    let target = (f.slots() as f64 * load).ceil() as usize;
    let mut inserted = Vec::with_capacity(target);
    while f.stats().entries < target {
        let k = keys.next_key();
        let h = cfdp_filter::hash::hash_u64(k);
        f.insert_hash_with(h, 0, None)
            .unwrap_or_else(|e| panic!("insert failed at load {:.4}: {e}", f.stats().load_factor));
        inserted.push(h);
    }
    inserted
}
