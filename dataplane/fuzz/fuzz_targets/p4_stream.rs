//! Any bytes as a run of P4Runtime StreamChannel events from up to eight
//! clients, driven through the arbiter as the server drives it: a client
//! sends a `StreamMessageRequest` (its stream ends on an error, as the
//! server ends it), or closes its stream. Nothing may panic, and after
//! every event: the primary is the highest nonzero election id among the
//! connected clients whose certificate may write; no other id may write;
//! a client hears "primary" only when it is; no more clients than the cap
//! are connected.
#![no_main]
use std::collections::HashMap;

use cfdp_p4runtime::arbitration::{election, Arbiter, OUTBOX};
use cfdp_p4runtime::metrics::P4Metrics;
use cfdp_p4runtime::proto::p4::v1 as p4;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use tokio::sync::mpsc;

const CAP: usize = 4;

type Answer = Result<p4::StreamMessageResponse, tonic::Status>;

struct Stream {
    tx: mpsc::Sender<Answer>,
    rx: mpsc::Receiver<Answer>,
    writer: bool,
}

fuzz_target!(|data: &[u8]| {
    let arbiter = Arbiter::new(1, CAP, P4Metrics::default());
    let mut streams: HashMap<u64, Stream> = HashMap::new();
    // The connected clients as the spec defines them: election, writer.
    let mut model: HashMap<u64, (u128, bool)> = HashMap::new();
    let mut rest = data;
    while let [op, tail @ ..] = rest {
        let conn = u64::from(op & 7);
        if op & 0x80 != 0 {
            rest = tail;
            arbiter.leave(conn);
            streams.remove(&conn);
            model.remove(&conn);
        } else {
            let Some((&len, tail)) = tail.split_first() else {
                return;
            };
            let (msg, next) = tail.split_at(usize::from(len).min(tail.len()));
            rest = next;
            let s = streams.entry(conn).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(OUTBOX);
                Stream {
                    tx,
                    rx,
                    writer: op & 8 != 0,
                }
            });
            let update = p4::StreamMessageRequest::decode(msg).map(|m| m.update);
            let outcome = match update {
                Ok(Some(p4::stream_message_request::Update::Arbitration(a))) => arbiter
                    .arbitrate(conn, &a, s.writer, &s.tx)
                    .map(|()| election(a.election_id.as_ref())),
                _ => Err(tonic::Status::unimplemented("not an arbitration update")),
            };
            match outcome {
                Ok(e) => {
                    model.insert(conn, (e, s.writer));
                }
                Err(_) => {
                    arbiter.leave(conn);
                    streams.remove(&conn);
                    model.remove(&conn);
                }
            }
        }
        assert!(model.len() <= CAP, "{} clients past the cap", model.len());
        let primary = model
            .values()
            .filter(|&&(e, w)| w && e > 0)
            .map(|&(e, _)| e)
            .max();
        for &(e, _) in model.values() {
            assert_eq!(arbiter.check_primary(e).is_ok(), Some(e) == primary, "{e}");
        }
        for (conn, s) in &mut streams {
            while let Ok(answer) = s.rx.try_recv() {
                let Ok(p4::StreamMessageResponse {
                    update: Some(p4::stream_message_response::Update::Arbitration(a)),
                }) = answer
                else {
                    panic!("not an arbitration answer: {answer:?}");
                };
                let ok = a.status.is_some_and(|s| s.code == 0);
                let mine = model.get(conn).map(|m| m.0);
                assert_eq!(ok, mine.is_some() && mine == primary, "{conn}: {ok}");
            }
        }
    }
});
