//! Any bytes as a capture file (pcap or pcapng): reading must end in
//! frames or a clear error, never a panic; every frame is decoded too.
#![no_main]
use cfdp_pcap::capture::Capture;
use cfdp_packet::decode::decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut c) = Capture::from_bytes(data.to_vec()) {
        let _ = c.for_each(|f| {
            let _ = decode(f.link, f.data);
            std::ops::ControlFlow::Continue(())
        });
    }
});
