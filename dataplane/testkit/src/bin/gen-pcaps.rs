//! Writes the project's generated test captures to `pcap/` (see `cfdp_testkit::captures`).
//! Run: `cargo run -p cfdp-testkit --bin gen-pcaps [-- DIR]`
#![forbid(unsafe_code)]

use std::path::PathBuf;

use cfdp_testkit::captures as gen;

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../pcap"));
    std::fs::create_dir_all(&dir)?;
    let frames = gen::mixed();
    gen::write_pcap(&dir.join("mixed.pcap"), &frames)?;
    std::fs::write(dir.join("mixed.rules.json"), gen::MIXED_RULES)?;
    std::fs::write(
        dir.join("mixed.expected.json"),
        gen::expected_json(&frames, &gen::mixed_expected()),
    )?;
    println!(
        "wrote mixed.pcap ({} frames), mixed.rules.json, mixed.expected.json to {}",
        frames.len(),
        dir.display()
    );
    Ok(())
}
