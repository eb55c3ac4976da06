//! `cfdp replay --trace N`: frame N of a capture (1-based, as Wireshark
//! numbers them) through the rule set, offline — its decoding, its
//! fragment state (the frames before it are walked through a fragment
//! table, as a worker's), and the rule store's `trace` of its 5-tuple.
//! `cfdp ctl trace --pcap FILE --frame N` reads the frame the same way and
//! asks the running node about its 5-tuple.

use std::ops::ControlFlow;
use std::path::Path;
use std::process::ExitCode;

use cfdp_control::RuleStore;
use cfdp_packet::decode::{decode, Decoded, Frag};
use cfdp_packet::frag::FragTable;
use cfdp_rules::FlowKey;
use serde_json::{json, Value};

/// Frame `n` of a capture as the workers would see it: its 5-tuple (later
/// fragments with their first fragment's ports) and what its fragment
/// state says, or — for frames no rule is consulted on — the whole answer.
pub enum FrameKey {
    Key {
        key: FlowKey,
        fragment: String,
        anomaly: Option<&'static str>,
    },
    Settled(Value),
}

/// Why frame `n` could not be read: the message and the exit code.
pub struct FrameError(pub String, pub u8);

/// Reads `input` up to frame `n` (1-based), walking the frames before it
/// through a fragment table as a worker does.
pub fn frame_key(input: &Path, n: u64) -> Result<FrameKey, FrameError> {
    if n == 0 {
        return Err(FrameError("frames are numbered from 1".into(), 2));
    }
    let mut cap = cfdp_pcap::Capture::open(input)
        .map_err(|e| FrameError(format!("{}: {e}", input.display()), 1))?;
    let mut frags = FragTable::new(
        cfdp_engine::FRAG_CAPACITY,
        cfdp_engine::FRAG_PER_SOURCE,
        cfdp_engine::FRAG_TTL_NS,
    );
    let mut seen = 0u64;
    let mut answer = None;
    cap.for_each(|f| {
        seen += 1;
        let d = decode(f.link, f.data);
        if seen == n {
            answer = Some(settle(&d, f.ts_ns, &mut frags));
            return ControlFlow::Break(());
        }
        if let Decoded::Ip(ip) = d {
            if let Frag::First { id, .. } = ip.frag {
                frags.first(&ip.key, id, f.ts_ns);
            }
        }
        ControlFlow::Continue(())
    })
    .map_err(|e| FrameError(format!("{}: {e}", input.display()), 3))?;
    answer.ok_or_else(|| {
        FrameError(
            format!("{}: {seen} frames, no frame {n}", input.display()),
            2,
        )
    })
}

/// Traces frame `n` of `input` against `store`; prints JSON.
pub fn trace_frame(input: &Path, n: u64, store: &RuleStore) -> ExitCode {
    let mut v = match frame_key(input, n) {
        Ok(FrameKey::Settled(v)) => v,
        Ok(FrameKey::Key {
            key,
            fragment,
            anomaly,
        }) => json!({
            "decoded": "ip",
            "anomaly": anomaly,
            "fragment": fragment,
            "trace": store.trace(&key),
        }),
        Err(FrameError(msg, code)) => {
            eprintln!("cfdp: --trace: {msg}");
            return ExitCode::from(code);
        }
    };
    v["frame"] = n.into();
    println!("{}", serde_json::to_string_pretty(&v).expect("JSON"));
    ExitCode::SUCCESS
}

/// The frame's 5-tuple and fragment state, or the answer when no rule is
/// consulted.
fn settle(d: &Decoded, ts_ns: u64, frags: &mut FragTable) -> FrameKey {
    let ip = match d {
        Decoded::Ip(ip) => ip,
        Decoded::NonIp(k) => {
            return FrameKey::Settled(
                json!({"decoded": "non_ip", "kind": k.name(), "verdict": "forwarded, no rule applies"}),
            );
        }
        Decoded::Malformed(r) => {
            return FrameKey::Settled(
                json!({"decoded": "malformed", "reason": r.name(), "verdict": "forwarded, no rule applies"}),
            );
        }
    };
    let mut key = ip.key;
    let fragment = match ip.frag {
        Frag::None => "not a fragment".to_string(),
        Frag::First { id, .. } => {
            format!("first fragment of datagram {id}: its ports apply to the rest")
        }
        Frag::IncompleteFirst { id } => {
            return FrameKey::Settled(json!({
                "decoded": "ip",
                "fragment": format!("first fragment of datagram {id} without its ports or the rest of its IPv6 header chain"),
                "verdict": "dropped (RFC 7112), no rule consulted",
            }));
        }
        Frag::Later { id, .. } => {
            match frags.resolve(&ip.key, id, ts_ns) {
                Some((sp, dp)) => {
                    key.sport = sp;
                    key.dport = dp;
                    format!("later fragment of datagram {id}: ports {sp} -> {dp} from its first fragment")
                }
                None => {
                    return FrameKey::Settled(json!({
                        "decoded": "ip",
                        "fragment": format!("later fragment of datagram {id} before its first fragment"),
                        "verdict": "held until its first fragment comes (then its verdict), dropped after 1 s",
                    }));
                }
            }
        }
    };
    FrameKey::Key {
        key,
        fragment,
        anomaly: ip.anomaly.map(cfdp_packet::Malformed::name),
    }
}
