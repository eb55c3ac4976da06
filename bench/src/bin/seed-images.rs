//! Writes a few small, valid filter images (plain, bit-mode and tag-mode
//! Bloom-Cuckoo, with values and Bloom elements; word and packed layouts)
//! to a directory: the seed
//! corpus of the `snapshot` fuzz target (`.ci/fuzz-seed.sh`).
#![forbid(unsafe_code)]

use cfdp_filter::{BloomConfig, BloomMode, Config, Filter};

fn main() -> std::io::Result<()> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| ".".into()));
    std::fs::create_dir_all(&dir)?;
    let modes = [
        None,
        Some(BloomConfig {
            mode: BloomMode::Bit,
            threshold: 0,
        }),
        Some(BloomConfig {
            mode: BloomMode::Tag { bits: 8 },
            threshold: 0,
        }),
    ];
    for (i, bloom) in modes.into_iter().enumerate() {
        for (log2, f_bits, v_bits, packed) in [
            (1u32, 8u32, 0u32, false),
            (3, 12, 4, false),
            (4, 16, 8, false),
            (3, 12, 0, true),
        ] {
            let f = Filter::new(Config {
                buckets_log2: Some(log2),
                fingerprint_bits: f_bits,
                value_bits: v_bits,
                bloom,
                max_kicks: 50,
                packed,
                ..Config::default()
            })
            .expect("config");
            // Fill past the cuckoo part's capacity so Bloom elements appear.
            for k in 0..(5u64 << log2) {
                let _ = f.insert_hash(
                    k.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    (k as u32) & f.max_value(),
                );
            }
            std::fs::write(
                dir.join(format!(
                    "image-{i}-{log2}-{f_bits}-{v_bits}{}",
                    if packed { "-packed" } else { "" }
                )),
                f.to_bytes(),
            )?;
        }
    }
    Ok(())
}
