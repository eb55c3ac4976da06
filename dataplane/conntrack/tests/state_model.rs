//! TCP tracking against Linux's transition table, `tcp_conntracks` in
//! `net/netfilter/nf_conntrack_proto_tcp.c`, transcribed here from the
//! kernel's table (not from `tcp.rs`): random segment sequences — flags of
//! every valid class, sequence and acknowledgement numbers now exact, now
//! anywhere — walk a connection, and every verdict must be one the table
//! allows:
//! * where the table says invalid (`sIV`), the segment is invalid;
//! * where it says ignore (`sIG`), the state does not move (except the
//!   SYN-ACK that answers a SYN the tracker ignored: it moves to SYN_RECV);
//! * where it names a state, the segment either moves there, or is
//!   refused by the window checks (invalid, or ignored without a move),
//!   or takes one of Linux's documented exceptions: a SYN reopening a
//!   closed connection; the reply's ACK of a simultaneous open going to
//!   ESTABLISHED; a RST in window but not exact keeping the state.

use cfdp_conntrack::state::tcp::{ACK, FIN, RST, SYN};
use cfdp_conntrack::tcp::{self, Status, TcpSettings, Verdict};
use cfdp_conntrack::{Dir, State};
use cfdp_packet::TcpSeg;
use proptest::prelude::*;

/// Linux's states in its table's column order.
const COLS: [Option<State>; 10] = [
    None, // sNO
    Some(State::TcpSynSent),
    Some(State::TcpSynRecv),
    Some(State::TcpEstablished),
    Some(State::TcpFinWait),
    Some(State::TcpCloseWait),
    Some(State::TcpLastAck),
    Some(State::TcpTimeWait),
    Some(State::TcpClose),
    Some(State::TcpSynSent2),
];

/// A cell: a column index into `COLS`, or IV / IG.
const IV: i8 = -1;
const IG: i8 = -2;
const SS: i8 = 1;
const SR: i8 = 2;
const ES: i8 = 3;
const FW: i8 = 4;
const CW: i8 = 5;
const LA: i8 = 6;
const TW: i8 = 7;
const CL: i8 = 8;
const S2: i8 = 9;

/// `tcp_conntracks[dir][index][state]`, rows syn, synack, fin, ack, rst.
const LINUX: [[[i8; 10]; 5]; 2] = [
    [
        [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
    ],
    [
        [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
    ],
];

const CLASSES: [u8; 5] = [SYN, SYN | ACK, FIN | ACK, ACK, RST];

fn col(s: State) -> usize {
    COLS.iter()
        .position(|c| *c == Some(s))
        .expect("a TCP state")
}

/// The table as `tcp::transition` reads it equals the transcription, cell
/// by cell (the opener's column included).
#[test]
fn the_table_is_linuxs() {
    for (d, dir) in [Dir::Orig, Dir::Reply].into_iter().enumerate() {
        for (r, &flags) in CLASSES.iter().enumerate() {
            for (c, &from) in COLS.iter().enumerate() {
                let want = match LINUX[d][r][c] {
                    IV => None,
                    IG => Some(None),
                    x => Some(COLS[x as usize]),
                };
                assert_eq!(
                    tcp::transition(dir, flags, from),
                    want,
                    "{dir:?} {flags:#x} {from:?}"
                );
            }
        }
    }
    // Invalid flag combinations are not a class of the table: refused.
    assert!(!tcp::valid_flags(SYN | FIN) && !tcp::valid_flags(FIN) && !tcp::valid_flags(0));
}

#[derive(Clone, Debug)]
struct Seg {
    reply: bool,
    class: usize,
    exact: bool,
    seq: u32,
    ack: u32,
    payload: u32,
}

fn seg() -> impl Strategy<Value = Seg> {
    (
        any::<bool>(),
        0..5usize,
        prop::bool::weighted(0.8),
        any::<u32>(),
        any::<u32>(),
        prop_oneof![Just(0u32), 1..1500u32],
    )
        .prop_map(|(reply, class, exact, seq, ack, payload)| Seg {
            reply,
            class,
            exact,
            seq,
            ack,
            payload,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn every_verdict_is_one_linuxs_table_allows(segs in proptest::collection::vec(seg(), 1..40)) {
        let cfg = TcpSettings::default();
        // Two endpoints' next sequence numbers: an exact segment carries
        // its side's and acknowledges the other's.
        let mut next = [1000u32, 90_000u32];
        let syn = TcpSeg { flags: SYN, seq: next[0], win: 64_000, ..TcpSeg::default() };
        let (mut conn, v) = tcp::open(&syn, &cfg).unwrap();
        next[0] += 1;
        let Verdict::Accept { mut state, .. } = v else { panic!("{v:?}") };
        prop_assert_eq!(state, State::TcpSynSent);
        let mut st = Status::default();
        for (n, s) in segs.iter().enumerate() {
            let d = usize::from(s.reply);
            let dir = if s.reply { Dir::Reply } else { Dir::Orig };
            let flags = CLASSES[s.class];
            let payload = if flags & (SYN | RST) != 0 { 0 } else { s.payload };
            let (seq, ack) = if s.exact { (next[d], next[1 - d]) } else { (s.seq, s.ack) };
            let sg = TcpSeg { flags, seq, ack, win: 64_000, payload, sack: ack, ..TcpSeg::default() };
            let before = conn;
            let v = tcp::packet(&mut conn, Some(state), st, dir, &sg, &cfg);
            let cell = LINUX[d][s.class][col(state)];
            match (cell, v) {
                (IV, v) => prop_assert_eq!(v, Verdict::Invalid, "step {}: {:?} {:?}", n, s, state),
                (IG, Verdict::Pass | Verdict::Invalid | Verdict::Reopen) => {}
                (IG, Verdict::Accept { state: to, .. }) => prop_assert!(
                    flags == SYN | ACK && to == State::TcpSynRecv && before.last_index == tcp::Index::Syn,
                    "step {}: ignored cell moved {:?} -> {:?}", n, state, to
                ),
                (_, Verdict::Invalid | Verdict::Pass) => {}
                (_, Verdict::Kill) => prop_assert!(flags == RST && !st.seen_reply, "step {}", n),
                (_, Verdict::Reopen) => prop_assert!(
                    flags == SYN && matches!(state, State::TcpTimeWait | State::TcpClose),
                    "step {}: reopen from {:?}", n, state
                ),
                (x, Verdict::Accept { state: to, .. }) => {
                    let table = COLS[x as usize].unwrap();
                    let simultaneous = dir == Dir::Reply && flags == ACK && table == State::TcpSynRecv
                        && to == State::TcpEstablished;
                    let kept = flags == RST && to == state;
                    prop_assert!(to == table || simultaneous || kept,
                        "step {}: {:?} {:#x} from {:?}: table {:?}, got {:?}", n, dir, flags, state, table, to);
                }
            }
            match v {
                Verdict::Accept { state: to, assured, .. } => {
                    state = to;
                    st.assured |= assured;
                    st.seen_reply |= s.reply;
                    if s.exact {
                        next[d] = seq.wrapping_add(payload)
                            .wrapping_add(u32::from(flags & (SYN | FIN) != 0));
                    }
                }
                Verdict::Pass => st.seen_reply |= s.reply,
                // The connection is gone: the walk ends.
                Verdict::Kill | Verdict::Reopen => break,
                Verdict::Invalid => {}
            }
        }
    }
}
