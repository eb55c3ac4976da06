//! Model checking of the table's lock-free read path with `loom`.
//!
//! Run: `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p
//! cfdp-conntrack --lib --release loom`
//!
//! A worker looks a connection up (and moves its state by a
//! compare-and-swap) while another worker opens, early-drops and reuses
//! slots. loom explores the interleavings of every atomic access of both
//! threads — the slots' control words and key words, the filter's buckets
//! and seqlock stripes — and in every one the reader must see a whole
//! connection that is its own, or none, and must never move another
//! connection's state. Two workers opening one connection from their
//! probes (each missed) open it once.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use cfdp_rules::{Action, FlowKey, HashSecret};
use loom::thread;

use crate::key::Dir;
use crate::state::{State, Timeouts};
use crate::table::ConnTable;

fn udp(i: u8) -> FlowKey {
    FlowKey::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)),
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, 53)),
        17,
        5000,
        53,
    )
}

/// A table of one connection (two slots).
fn tiny() -> ConnTable {
    ConnTable::new(1, Timeouts::default(), HashSecret::from_seed(1)).expect("table")
}

/// The reader answers connection A's reply while the writer opens B in a
/// full table: B takes A's place (A is unanswered, so it may be dropped)
/// and, the free list being last-in first-out, A's slot. The reader sees
/// A whole or nothing, never B; its compare-and-swap (A's state moving to
/// replied) never lands on B; and either B replaced A (and the reader saw
/// nothing) or A was answered first and B was refused: an answered
/// connection is never dropped for a new one.
#[test]
fn loom_a_reader_never_takes_a_reused_slot_for_its_connection() {
    loom::model(|| {
        let t = Arc::new(tiny());
        let (a, b) = (udp(1), udp(2));
        t.open(&a, 0, 1, Action::Allow, 60, 0).expect("room");
        let reader = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.lookup(&a.reply(), 0, 60, 1))
        };
        let opened = t.open(&b, 0, 2, Action::Count, 60, 1);
        let seen = reader.join().unwrap();
        if let Some(h) = seen {
            assert_eq!(
                (h.slot, h.action, h.dir, h.state),
                (1, Action::Allow, Dir::Reply, State::UdpReplied),
                "the reader took another connection for A"
            );
            // A's reply made it assured: it may not be dropped after.
            assert!(opened.is_err(), "A, answered, was dropped for B");
        }
        assert_eq!(t.len(), 1);
        match opened {
            Ok(_) => {
                assert!(t.peek(&a).is_none(), "A stayed beside B");
                let h = t.peek(&b).expect("B opened");
                assert_eq!(
                    (h.slot, h.action, h.state),
                    (2, Action::Count, State::UdpUnreplied),
                    "B's entry was changed by A's reader: {}",
                    t.dump()
                );
            }
            Err(_) => {
                assert!(seen.is_some(), "B refused though A was droppable");
                assert_eq!(t.peek(&a).map(|h| h.state), Some(State::UdpReplied));
            }
        }
    });
}

/// A connection being opened is found whole (its rule, its action, the
/// reply's direction) or not at all.
#[test]
fn loom_a_connection_being_opened_is_found_whole_or_not_at_all() {
    loom::model(|| {
        let t = Arc::new(tiny());
        let a = udp(1);
        let reader = {
            let t = Arc::clone(&t);
            thread::spawn(move || t.related(&a.reply(), 1))
        };
        t.open(&a, 0, 7, Action::Count, 60, 0).expect("room");
        if let Some(h) = reader.join().unwrap() {
            assert_eq!((h.slot, h.action, h.dir), (7, Action::Count, Dir::Reply));
        }
        assert!(t.peek(&a).is_some());
    });
}

/// Two workers see the first packets of one connection, one each way: each
/// probes, misses, and opens from its probe. Whatever the interleaving,
/// the connection is opened once (a probe's miss is trusted only while its
/// stripe's count of opens has not moved), and both packets get its entry.
#[test]
fn loom_two_openers_from_their_probes_open_one_connection() {
    loom::model(|| {
        let t = Arc::new(
            ConnTable::new(2, Timeouts::default(), HashSecret::from_seed(1)).expect("table"),
        );
        let a = udp(1);
        let open_from_probe = |t: &ConnTable, k: FlowKey, slot: u32| {
            let mut p = [crate::table::Probe::default(); 1];
            t.probe(&[k], &mut p);
            t.open_probed(&k, &p[0], 0, slot, Action::Allow, 60, 0)
                .expect("room")
        };
        let other = {
            let t = Arc::clone(&t);
            thread::spawn(move || open_from_probe(&t, a.reply(), 2))
        };
        let mine = open_from_probe(&t, a, 1);
        let theirs = other.join().unwrap();
        assert_eq!(t.len(), 1, "opened twice: {}", t.dump());
        assert_eq!(mine.slot, theirs.slot, "two entries answered");
        assert_ne!(mine.dir, theirs.dir);
    });
}
