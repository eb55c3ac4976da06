//! `trace-pcap TRACE OUT.pcap`: a ClassBench header trace as a capture
//! (one 64-byte frame a line; see `cfdp_testkit::trace`), for `cfdp replay
//! OUT.pcap --rules RULES.json` with rules from `cfdp rules import`.

use std::process::ExitCode;

use cfdp_rules::classbench::parse_trace;
use cfdp_testkit::captures::write_pcap;
use cfdp_testkit::trace::frames;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [trace, out] = args.as_slice() else {
        eprintln!("usage: trace-pcap TRACE OUT.pcap");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(trace) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("trace-pcap: {trace}: {e}");
            return ExitCode::from(2);
        }
    };
    let packets = match parse_trace(&text) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("trace-pcap: {trace}: {e}");
            return ExitCode::from(2);
        }
    };
    let keys: Vec<_> = packets.iter().map(|p| p.key).collect();
    let frames = frames(&keys);
    if let Err(e) = write_pcap(std::path::Path::new(out), &frames) {
        eprintln!("trace-pcap: {out}: {e}");
        return ExitCode::from(1);
    }
    eprintln!("trace-pcap: {} frames", frames.len());
    ExitCode::SUCCESS
}
