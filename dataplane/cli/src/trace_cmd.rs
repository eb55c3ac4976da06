//! `cfdp replay --trace N`: frame N of a capture (1-based, as Wireshark
//! numbers them) through the rule set, offline — its decoding, its
//! fragment state (the frames before it are walked through a fragment
//! table, as a worker's), and the rule store's `trace` of its 5-tuple.

use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;

use cfdp_control::RuleStore;
use cfdp_packet::decode::{decode, Decoded, Frag};
use cfdp_packet::frag::FragTable;
use serde_json::{json, Value};

/// Traces frame `n` of `input` against `store`; prints JSON.
pub fn trace_frame(input: &Path, n: u64, store: &RuleStore) -> ExitCode {
    if n == 0 {
        eprintln!("cfdp: --trace: frames are numbered from 1");
        return ExitCode::from(2);
    }
    let mut cap = match cfdp_pcap::Capture::open(input) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cfdp: {}: {e}", input.display());
            return ExitCode::from(1);
        }
    };
    let mut frags = FragTable::new(cfdp_engine::FRAG_CAPACITY, cfdp_engine::FRAG_TTL_NS);
    let mut seen = 0u64;
    let mut answer = None;
    let read = cap.for_each(|f| {
        seen += 1;
        let d = decode(f.link, f.data);
        if seen == n {
            answer = Some(describe(&d, f.ts_ns, &mut frags, store));
            return ControlFlow::Break(());
        }
        if let Decoded::Ip(ip) = d {
            if let Frag::First { id } = ip.frag {
                frags.first(&ip.key, id, f.ts_ns);
            }
        }
        ControlFlow::Continue(())
    });
    if let Err(e) = read {
        eprintln!("cfdp: {}: {e}", input.display());
        return ExitCode::from(3);
    }
    match answer {
        Some(mut v) => {
            v["frame"] = n.into();
            println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("cfdp: {}: {seen} frames, no frame {n}", input.display());
            ExitCode::from(2)
        }
    }
}

/// The frame's decoding, fragment state and trace.
fn describe(d: &Decoded, ts_ns: u64, frags: &mut FragTable, store: &RuleStore) -> Value {
    let ip = match d {
        Decoded::Ip(ip) => ip,
        Decoded::NonIp(k) => {
            return json!({"decoded": "non_ip", "kind": k.name(), "verdict": "forwarded, no rule applies"});
        }
        Decoded::Malformed(r) => {
            return json!({"decoded": "malformed", "reason": r.name(), "verdict": "forwarded, no rule applies"});
        }
    };
    let mut key = ip.key;
    let fragment = match ip.frag {
        Frag::None => "not a fragment".to_string(),
        Frag::First { id } => {
            format!("first fragment of datagram {id}: its ports apply to the rest")
        }
        Frag::IncompleteFirst { id } => {
            return json!({
                "decoded": "ip",
                "fragment": format!("first fragment of datagram {id} without its ports or the rest of its IPv6 header chain"),
                "verdict": "dropped (RFC 7112), no rule consulted",
            });
        }
        Frag::Later { id } => {
            match frags.resolve(&ip.key, id, ts_ns) {
                Some((sp, dp)) => {
                    key.sport = sp;
                    key.dport = dp;
                    format!("later fragment of datagram {id}: ports {sp} -> {dp} from its first fragment")
                }
                None => {
                    return json!({
                        "decoded": "ip",
                        "fragment": format!("later fragment of datagram {id} before its first fragment"),
                        "verdict": "held until its first fragment comes (then its verdict), dropped after 1 s",
                    });
                }
            }
        }
    };
    json!({
        "decoded": "ip",
        "anomaly": ip.anomaly.map(cfdp_packet::Malformed::name),
        "fragment": fragment,
        "trace": store.trace(&key),
    })
}
