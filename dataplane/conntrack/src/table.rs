//! The connection table the workers share.
//!
//! Two parts:
//! * a **Bloom-Cuckoo filter** (`cfdp-filter`, Algorithm 2 insert path)
//!   over the keys' hashes, whose entries carry the index of the
//!   connection's slot: a packet of no tracked connection — most packets,
//!   when few rules are stateful — costs one lock-free probe;
//! * the **slots**, one 104-byte record a connection (key, state, rule,
//!   last packet time), read without a lock: a seqlock on each slot's
//!   control word (its generation changes whenever the slot is freed), so
//!   a reader that raced a reuse of the slot sees it and looks again. A
//!   filter positive is confirmed against the exact key: a fingerprint
//!   collision never admits a packet. The slots, the table's largest
//!   part, are in a [`cfdp_filter::ZeroedSlice`] whose pages the kernel is
//!   asked to back with transparent huge pages, as the filter's buckets
//!   are (at 2^20 slots: a lookup +15 %, an insert's p99.9 ~5 → ~2.5 µs,
//!   fewer page walks).
//!
//! A packet of a tracked connection is one hash, the filter's two buckets,
//! one slot line and, when its state moves, a compare-and-swap on the
//! control word; no lock. Opening and removing take the connection's lock
//! stripe (its hash picks one of at most [`SHARDS`]), which owns a
//! partition of the slots and its free list, and inside it the writer lock
//! of the filter's partition of the same number: at the default sizes the
//! stripe *is* the filter partition (the partition bits of the key's primary
//! bucket, which its alternate bucket and every cuckoo move keep), so the
//! filter lock is never waited for, and opens in different stripes share
//! no lock and, until the table is nearly full, no written line (a filter
//! sized by hand close to full gets fewer partitions than stripes:
//! `partitions`; the count against the capacity is shared only past each
//! stripe's quota: `ConnTable::quota`).
//!
//! Any worker may open, update or remove any connection, so the two
//! directions of a connection may arrive on different workers (no
//! symmetric RSS needed). Why one shared table and not one per worker: a
//! per-worker table is right only when the NIC's RSS is symmetric (both
//! directions of a 5-tuple on one queue), which `cfdp run` on DPDK does
//! not configure today and `cfdp replay`'s RSS does not promise either.
//!
//! Every write of a slot's control word is a read-modify-write (but the
//! release of a slot's TCP lock, which nothing else can write under), so
//! that a reader's compare-and-swap and a free of the slot are totally
//! ordered
//! (the loom model, `src/loom_tests.rs`, found a reader's state change
//! landing on the slot's next connection with plain stores there).
//!
//! Order: a slot is written before its index is in the filter; a slot is
//! marked free (by a compare-and-swap from the state its removal judged)
//! before its index leaves the filter, and reused only after. A reader that misses
//! the filter for an entry being opened treats the packet as new: the
//! rules decide it, as they would have a moment earlier. The reply of a
//! connection cannot be that packet: the worker opens the entry before it
//! sends the packet that opened it.
//!
//! Bloom part: an entry the filter's insert walk puts in its Bloom part
//! has no value in the filter's entries; the filter keeps its value
//! beside the pair's Bloom fields (`keep_bloom_values`), written under the
//! same stripes, so a reader's one validated read of the key's buckets
//! sees the entry either in a bucket or in the Bloom part with its slot:
//! never neither, and no lock or side set of the table's own.
//!
//! Full: a new connection may take the place of an embryonic entry of its
//! stripe (an unanswered SYN, UDP or ICMP request; a clock hand over the
//! stripe's slots finds the next one), as Linux's early drop does; an
//! established connection is never dropped to make room, so a flood of
//! spoofed SYNs can only push out other embryonic entries. With none to
//! take, the connection is refused and counted.
//!
//! Accounting (packets, bytes and the opening time of each connection,
//! `[conntrack] accounting`) is off by default, as Linux's
//! `nf_conntrack_acct` is: it adds 40 bytes a slot.

use crate::sync::Ordering::*;
use crate::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, CachePadded, Mutex, MutexGuard};

use cfdp_filter::{ConfigError, Filter, Lookup, ZeroedSlice};
use cfdp_packet::TcpSeg;
use cfdp_rules::{Action, FlowKey};

use crate::key::{ConnKey, Dir};
use crate::state::{State, Timeouts};
use crate::tcp::TcpSettings;

mod build;
mod count;
mod inspect;
mod packet;
mod slot;
mod stripe;

use slot::{
    mum, time_of, AcctSlot, Fields, Shard, Slot, RESET_TIMEOUT, STATE_SHIFT, STATE_SLOTS,
    TIMEOUT_INDEX, USED,
};
pub use slot::{ACCT_BYTES, DROP_SCAN, SLOT_BYTES};

/// Lock stripes at most (fewer for a smaller table: see
/// [`ConnTable::with_options`]).
pub const SHARDS: usize = 256;

/// Epochs on a cache line ([`ConnTable`]'s `epochs`).
const EPOCH_LINE: usize = 8;

/// Kicks an insert's walk takes before the filter's Bloom part may take
/// the item (Algorithm 2's threshold). With 0 the Bloom part took ~5 % of
/// the items at 95 % of the capacity and its one-bit fields answered
/// "maybe" for ~18 % of strangers, each then a look at the candidates and
/// the (hash, slot) set; with 16, ~1.3 % of the items and ~2 %. Measured
/// beside `rte_hash` (bench/conntrack-rte-hash.sh, 2^20 slots, two runs
/// each): strangers' lookups ~2x faster, established 1.1x single and in
/// bursts, the burst's insert p50 ~8 % slower, p99 and p99.9 alike.
pub const BLOOM_THRESHOLD: u32 = 16;

/// Slots the table can index: the filter's entries carry a slot index in
/// at most 23 bits beside a fingerprint of at least 8 (an entry is at most
/// 31 bits with the Bloom field in the two-word bucket layout).
pub const MAX_SLOTS: usize = 1 << 23;

/// What the table says of a packet of a tracked connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The slot of the rule that opened the connection (the control
    /// plane names its rule), and its action.
    pub slot: u32,
    pub action: Action,
    pub dir: Dir,
    /// The state after this packet.
    pub state: State,
}

/// Why a connection was not opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenError {
    /// The packet cannot open one (a TCP segment other than a SYN or,
    /// with `tcp_loose`, an ACK; invalid TCP flags; an ICMP message other
    /// than an echo request).
    NotAnOpener,
    /// The packet belongs to a tracked connection but is invalid for it
    /// (out of its TCP window, a state it cannot be in): as Linux, it
    /// meets the rules alone and the connection stays.
    Invalid,
    /// The table is full of connections that may not be dropped.
    Full,
}

/// A connection's accounting (`[conntrack] accounting = true`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Acct {
    pub opened_ns: u64,
    /// Original, reply.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
}

/// One connection, as `cfdp ctl conns` lists it and a graceful restart
/// saves it ([`crate::persist`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// The 5-tuple of the packet that opened it.
    pub orig: FlowKey,
    pub state: State,
    /// Which directions have sent a FIN (bit 0: original, bit 1: reply).
    pub fin: u8,
    /// The slot of the rule that opened it.
    pub slot: u32,
    pub action: Action,
    pub last_ns: u64,
    /// With accounting on.
    pub acct: Option<Acct>,
}

/// Which connections `cfdp ctl conns` lists: each field given must match
/// the packet that opened the connection (`port`: either of its ports).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnQuery {
    pub src: Option<cfdp_rules::IpPrefix>,
    pub dst: Option<cfdp_rules::IpPrefix>,
    pub proto: Option<u8>,
    pub port: Option<u16>,
}

impl ConnQuery {
    pub fn matches(&self, c: &ConnInfo) -> bool {
        let k = &c.orig;
        self.src.is_none_or(|p| p.contains(k.v6, &k.src))
            && self.dst.is_none_or(|p| p.contains(k.v6, &k.dst))
            && self.proto.is_none_or(|p| p == k.proto)
            && self.port.is_none_or(|p| p == k.sport || p == k.dport)
    }
}

/// The table's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Live entries by state ([`State::index`]).
    pub by_state: [u64; State::ALL.len()],
    pub opened: u64,
    /// New connections refused: the table was full.
    pub refused: u64,
    /// Embryonic entries dropped to make room.
    pub early_dropped: u64,
    /// Entries removed after their timeout.
    pub expired: u64,
    /// Lookups the filter let through that no entry confirmed.
    pub false_positives: u64,
    /// Packets of a tracked connection that were invalid for it (Linux's
    /// `ct state invalid`): they met the rules alone.
    pub invalid: u64,
}

/// The table's shape beyond its capacity: what the `conntrack` bench
/// varies, and accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Count packets, bytes and the opening time of each connection.
    pub accounting: bool,
    /// The filter's insert path: Bloom-assisted (Algorithm 2) or the plain
    /// cuckoo walk.
    pub bloom: bool,
    /// Kicks before the Bloom part may take an item ([`BLOOM_THRESHOLD`]);
    /// 0 sends an item there as soon as its two buckets are full, what
    /// the tests of the Bloom part's path want.
    pub bloom_threshold: u32,
    /// The filter's size, as log2 of its buckets (else the smallest that
    /// holds the slots at 95 % load).
    pub buckets_log2: Option<u32>,
    /// The filter's fingerprint bits (else as many as fit beside the slot
    /// index, 16 at most): fewer make collisions common, what the tests of
    /// the collision path want.
    pub fingerprint_bits: Option<u32>,
    /// TCP tracking's settings (Linux's `tcp_be_liberal`, `tcp_loose`).
    pub tcp: TcpSettings,
    /// Packets whose transport checksum is wrong are invalid (Linux's
    /// `nf_conntrack_checksum`, on by default): the data plane asks
    /// [`ConnTable::checks_checksums`] and checks before it looks up or
    /// opens.
    pub checksum: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            accounting: false,
            bloom: true,
            bloom_threshold: BLOOM_THRESHOLD,
            buckets_log2: None,
            fingerprint_bits: None,
            tcp: TcpSettings::default(),
            checksum: true,
        }
    }
}

/// What the table reads of a packet beyond its 5-tuple: its TCP segment
/// (for a TCP packet; without one a TCP packet is invalid), whether an
/// ICMP query is the request or the reply (its 5-tuple carries the
/// identifier and the query's class as its ports), that it is a later fragment (its ports
/// from its first fragment, no header of its own), or nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L4 {
    Tcp(TcpSeg),
    Echo {
        request: bool,
    },
    /// A later fragment (its header was in the checked first fragment):
    /// it passes with its connection and moves nothing, as the rest of a
    /// datagram Linux reassembles before its conntrack sees it.
    Fragment,
    None,
}

impl From<TcpSeg> for L4 {
    fn from(s: TcpSeg) -> Self {
        L4::Tcp(s)
    }
}

impl From<u8> for L4 {
    /// A TCP segment with these flags and sequence numbers 0
    /// ([`TcpSeg::flags`]); ignored for a packet of another protocol.
    fn from(flags: u8) -> Self {
        L4::Tcp(TcpSeg::flags(flags))
    }
}

/// The key of packet `k`'s connection and its side (an echo's by its
/// requester, see [`ConnKey::echo`]).
fn key_of(k: &FlowKey, l4: &L4) -> (ConnKey, bool) {
    match l4 {
        L4::Echo { request } if matches!(k.proto, 1 | 58) => ConnKey::echo(k, *request),
        _ => ConnKey::of(k),
    }
}

/// What a packet did to the connection it belongs to.
enum Step {
    Hit(Hit),
    /// Invalid for it: the packet meets the rules; the entry stays.
    Invalid,
    /// The entry is gone (freed meanwhile, or removed for a reopening
    /// SYN): the packet is new.
    Gone,
}

/// A packet's connection key built, hashed and probed in the filter
/// ([`ConnTable::probe`]): what [`ConnTable::lookup_probed`] and
/// [`ConnTable::open_probed`] start from. The key is built and hashed
/// once a packet, here. The default is no probe.
#[derive(Clone, Copy, Debug, Default)]
pub struct Probe {
    /// The canonical key's words, and whether the packet came from its
    /// lower endpoint.
    words: ([u64; 4], u64),
    from_lo: bool,
    hash: u64,
    found: Lookup,
    /// The key's stripe's count of connections opened, read before the
    /// filter was probed ([`ConnTable::unchanged`]).
    epoch: u64,
    probed: bool,
}

impl Probe {
    /// `false`: the packet certainly belongs to no tracked connection.
    pub fn may_hold(&self) -> bool {
        self.found.is_hit()
    }
}

/// Connections shared by the workers (see the module docs).
pub struct ConnTable {
    pub(crate) filter: Filter,
    slots: ZeroedSlice<Slot>,
    acct: Option<Box<[AcctSlot]>>,
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Each stripe's counts of connections put in the filter, bumped under
    /// its lock after the filter insert: a probe that read one before
    /// missing in the filter knows its key is still absent while it has
    /// not moved (a key can only be opened in its own stripe). A stripe's
    /// epochs fill whole cache lines of their own (`2^epoch_bits` of them,
    /// at least [`EPOCH_LINE`]): opens in different stripes write no
    /// common line, and a probe's read misses only after an open of its
    /// own stripe (they were eight stripes to a line; with the filter's
    /// counters a line a partition too, opens on 16 cores went 1.06×
    /// faster).
    epochs: Box<[CachePadded<[AtomicU64; EPOCH_LINE]>]>,
    epoch_bits: u32,
    /// The stripe's bits in a hash's index bits (`log2` of the stripes).
    shard_bits: u32,
    /// Slots a stripe owns.
    per_shard: u32,
    shard_mask: usize,
    /// A hash's stripe is bits of its primary bucket from this one up:
    /// the filter's partition bits ([`Filter::partition_shift`]), of
    /// which the stripe's are the same or more.
    stripe_shift: u32,
    /// The hash's keys, drawn from the table's secret.
    seeds: [u64; 7],
    capacity: usize,
    /// Connections counted against the capacity: every stripe's
    /// [`Self::quota`] from the start, and each connection a stripe holds
    /// beyond its quota. Never above the capacity, never below the
    /// connections held. The one line every stripe may write, and only
    /// once a stripe holds more than its quota.
    len: AtomicUsize,
    /// Connections each stripe may hold without counting them in
    /// [`Self::len`]: its mean share of the capacity less six standard
    /// deviations of a binomial share, so that a full table is all but
    /// certain to have every stripe past its quota (whose rest then never
    /// idles while an open elsewhere is refused). Opens into a table less
    /// full than that write no shared line at all: the count every open
    /// wrote was what capped 16 threads' opens at ~12 M/s, ~4× one thread
    /// (`conntrack --part scaling` on the 16-core device machine), while
    /// lookups, which write nothing shared, scaled 16.8×.
    quota: u32,
    /// Set by the first connection counted since the table was last seen
    /// empty (a load and, once, a store: no line written per open), and
    /// cleared only by [`Self::forget_if_empty`], which holds every
    /// stripe's lock while it finds none holding a connection — so never
    /// false while a connection is held. A worker asks it once a burst
    /// ([`Self::surely_empty`]) to skip the whole lookup stage.
    occupied: AtomicBool,
    timeouts: Timeouts,
    /// Each state's timeout in ns, by the state's index in a control word
    /// and its [`CAP`] bit above (64 entries: no bounds check on six
    /// bits).
    timeout_ns: [u64; 2 * STATE_SLOTS],
    tcp: TcpSettings,
    checksum: bool,
    refused: AtomicU64,
    false_positives: AtomicU64,
    invalid: AtomicU64,
    /// Each worker's packet time ([`Self::advance`]); `u64::MAX`: none.
    clocks: Box<[AtomicU64]>,
}

/// Workers whose packet time the table follows ([`ConnTable::advance`]);
/// two in the loom model (each is an atomic every sweep reads).
pub const CLOCKS: usize = if cfg!(loom) { 2 } else { 64 };

/// Why a table was not built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("{slots} slots are more than the table can index ({MAX_SLOTS})")]
    TooLarge { slots: usize },
    #[error(transparent)]
    Filter(#[from] ConfigError),
}

impl ConnTable {
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slots allocated: the capacity and each stripe's margin.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Whether packets, bytes and opening times are kept.
    pub fn accounting(&self) -> bool {
        self.acct.is_some()
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// The filter's statistics (load, Bloom-part items).
    pub fn filter_stats(&self) -> cfdp_filter::Stats {
        self.filter.stats()
    }

    /// Memory held, in bytes: the filter (its Bloom part's values
    /// included), every slot and its accounting.
    pub fn memory_bytes(&self) -> usize {
        self.filter.stats().memory_bytes
            + self.slots.len() * SLOT_BYTES
            + self.acct.as_ref().map_or(0, |a| a.len() * ACCT_BYTES)
    }

    pub(crate) fn hash(&self, key: &ConnKey) -> u64 {
        self.hash_words(&key.words())
    }

    /// [`Self::hash`] of a key's words.
    #[inline]
    pub(crate) fn hash_words(&self, (a, m): &([u64; 4], u64)) -> u64 {
        let s = &self.seeds;
        // Three independent multiplies of the key's words with the seeds,
        // folded by a fourth: the mixing rapidhash does for short keys,
        // without its byte loads and its serial chain.
        let x = mum(a[0] ^ s[0], a[1] ^ s[1]);
        let y = mum(a[2] ^ s[2], a[3] ^ s[3]);
        let z = mum(*m ^ s[4], s[5]);
        mum(x ^ s[6], y ^ z)
    }

    /// Every line slot `i` spans on its way into the cache (a 104-byte
    /// slot spans two or three; the TCP windows are in the last). A hint:
    /// an index past the slots is ignored.
    pub(super) fn prefetch_slot(&self, i: u32) {
        if let Some(s) = self.slots.get(i as usize) {
            let p: *const u8 = std::ptr::from_ref(s).cast();
            for off in [0, SLOT_BYTES / 2, SLOT_BYTES - 1] {
                cfdp_filter::prefetch_read(p.wrapping_add(off));
            }
        }
    }

    /// The stripe of hash `h`: bits of its primary bucket (the filter's
    /// bucket index is `h >> 32`) from the filter's partition shift up, of
    /// which its filter partition takes the lowest (the partitions are no
    /// more than the stripes).
    fn stripe(&self, h: u64) -> usize {
        let stripe = self.stripe_bits(h) & self.shard_mask;
        debug_assert_eq!(
            stripe & (self.filter.partitions() - 1),
            self.filter.partition_of(h)
        );
        stripe
    }

    /// Hash `h`'s primary bucket from the filter's partition bits up: its
    /// stripe in the low bits ([`Self::stripe`]), its epoch above them.
    #[inline(always)]
    fn stripe_bits(&self, h: u64) -> usize {
        (h >> 32) as usize >> self.stripe_shift
    }

    /// Hash `h`'s open counter: one of its stripe's (a whole line of them
    /// or more, each stripe's side by side), so each counter is bumped
    /// under one stripe's lock only and stripes share no line of them.
    /// The index from shifts and masks kept with the table (a division by
    /// the stripes, then a `count_ones`, cost ~24 instructions a probed
    /// packet: callgrind, `worker-path` udp-stateful 1003 → 980).
    pub(super) fn epoch(&self, h: u64) -> &AtomicU64 {
        let bits = self.stripe_bits(h);
        let within = (bits >> self.shard_bits) & ((1 << self.epoch_bits) - 1);
        let i = (bits & self.shard_mask) << self.epoch_bits | within;
        &self.epochs[i / EPOCH_LINE][i % EPOCH_LINE]
    }

    fn shard(&self, h: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[self.stripe(h)])
    }

    /// Whether packets with a wrong transport checksum are invalid here
    /// (`[conntrack] checksum`, Linux's `nf_conntrack_checksum`): the data
    /// plane then checks each packet it looks up or opens, and counts a
    /// wrong one with [`Self::count_invalid`].
    pub fn checks_checksums(&self) -> bool {
        self.checksum
    }

    /// Counts a packet that is invalid before the table sees it (a wrong
    /// checksum): in `invalid`, with the ones the table finds.
    pub fn count_invalid(&self) {
        self.invalid.fetch_add(1, Relaxed);
    }

    /// Whether no connection was opened in `probe`'s stripe since it was
    /// taken: what it and the lookups from it found of its key still
    /// holds (removals only take entries away). `false` for no probe.
    pub fn unchanged(&self, probe: &Probe) -> bool {
        probe.probed && self.epoch(probe.hash).load(Acquire) == probe.epoch
    }

    /// Whether an entry (control word `c`, last-time word `last`) is past
    /// its timeout at `now_ns`.
    fn expired(&self, c: u64, last: u64, now_ns: u64) -> bool {
        let mut timeout = self.timeout_ns[(c >> STATE_SHIFT & TIMEOUT_INDEX) as usize];
        if last & RESET_TIMEOUT != 0 {
            timeout = timeout.min(self.timeout_ns[State::TcpClose.index()]);
        }
        now_ns.saturating_sub(time_of(last)) > timeout
    }

    /// Worker `worker`'s packet time is now `now_ns`. A sweep never runs
    /// ahead of the slowest worker that said so: in a replay each worker
    /// has its own capture time, and a sweep by one that is ahead must not
    /// expire an entry that the connection's own worker, still behind,
    /// would find live (a NIC's workers share one clock; it costs nothing
    /// there). A worker past [`CLOCKS`] is not followed.
    pub fn advance(&self, worker: usize, now_ns: u64) {
        if let Some(c) = self.clocks.get(worker) {
            c.store(now_ns, Relaxed);
        }
    }

    /// The time sweeps use for `now_ns`: no later than any worker's.
    fn sweep_time(&self, now_ns: u64) -> u64 {
        self.clocks
            .iter()
            .map(|c| c.load(Relaxed))
            .fold(now_ns, u64::min)
    }

    /// Removes every entry past its timeout at `now_ns`; returns how many.
    pub fn sweep(&self, now_ns: u64) -> usize {
        (0..self.shards.len())
            .map(|i| self.sweep_shard(i, now_ns))
            .sum()
    }

    /// Lock stripes: [`Self::sweep_shard`] takes `0..stripes()`.
    pub fn stripes(&self) -> usize {
        self.shards.len()
    }

    /// [`Self::sweep`] for one stripe, so that a caller can spread the
    /// work (a stripe per turn). The last stripe's turn also finds out
    /// whether the table has emptied ([`Self::surely_empty`]).
    pub fn sweep_shard(&self, i: usize, now_ns: u64) -> usize {
        let gone = self.sweep_one(i & self.shard_mask, now_ns);
        if i & self.shard_mask == self.shard_mask {
            self.forget_if_empty();
        }
        gone
    }

    fn sweep_one(&self, i: usize, now_ns: u64) -> usize {
        let now_ns = self.sweep_time(now_ns);
        let mut shard = lock(&self.shards[i]);
        let mut gone = 0;
        for j in shard.base..shard.base + shard.fresh {
            let s = &self.slots[j as usize];
            let c = s.ctl().load(Acquire);
            if c & USED != 0 && self.expired(c, s.last().load(Relaxed), now_ns) {
                let h = self.hash_at(j);
                gone += usize::from(
                    self.remove_if(&mut shard, j, c, h, |c, last| self.expired(c, last, now_ns)),
                );
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::slot::Read;
    use super::*;
    use cfdp_rules::HashSecret;

    /// A probe's miss is trusted by `open_probed` only while nothing was
    /// opened in its stripe since: a connection another worker opened
    /// after the probe (here its answer's direction) is found and used,
    /// not opened twice. The worker's in-burst look-again hangs on the
    /// same `unchanged`.
    #[test]
    fn a_stale_probe_is_not_trusted() {
        let t = ConnTable::new(1024, Timeouts::default(), HashSecret::from_seed(3)).unwrap();
        let k = FlowKey::new(
            std::net::Ipv4Addr::new(10, 0, 0, 1).into(),
            std::net::Ipv4Addr::new(192, 0, 2, 1).into(),
            17,
            40000,
            53,
        );
        let mut p = [Probe::default(); 2];
        t.probe(&[k, k.reply()], &mut p);
        assert!(!p[0].may_hold() && t.unchanged(&p[0]) && t.unchanged(&p[1]));
        // Another worker opens the connection from the other side.
        t.open(&k.reply(), 0, 7, Action::Allow, 60, 0).unwrap();
        assert!(!t.unchanged(&p[0]), "the stripe's count moved");
        let hit = t
            .open_probed(&k, &p[0], 0, 1, Action::Count, 60, 1)
            .unwrap();
        assert_eq!(
            (hit.slot, hit.dir),
            (7, Dir::Reply),
            "the opened entry was not used"
        );
        assert_eq!(t.len(), 1);
        // A fresh probe's miss is trusted; one of another key is not.
        let other = FlowKey { sport: 40001, ..k };
        let third = FlowKey { sport: 40002, ..k };
        let mut q = [Probe::default(); 1];
        t.probe(&[other], &mut q);
        let hit = t
            .open_probed(&other, &q[0], 0, 2, Action::Allow, 60, 1)
            .unwrap();
        assert_eq!((hit.slot, hit.dir, t.len()), (2, Dir::Orig, 2));
        t.probe(&[third], &mut q);
        assert!(!q[0].may_hold() && t.unchanged(&q[0]));
        let hit = t
            .open_probed(&other, &q[0], 0, 3, Action::Allow, 60, 1)
            .unwrap();
        assert_eq!((hit.slot, t.len()), (2, 2), "opened twice");
    }

    /// Client `i` (10.0.0.0 + i, port 40000) of 192.0.2.1:`dport`.
    fn client(i: u32, proto: u8, dport: u16) -> FlowKey {
        FlowKey::new(
            std::net::Ipv4Addr::from(0x0a00_0000 + i).into(),
            std::net::Ipv4Addr::new(192, 0, 2, 1).into(),
            proto,
            40000,
            dport,
        )
    }

    /// A stripe that can take no more refuses a connection it cannot make
    /// room for, though the table is not full, and the table's length
    /// does not count the refused one; other stripes still open (each
    /// keeps its quota). Here one stripe is filled alone, as only keys
    /// chosen against the hash would: it stops where the other stripe's
    /// quota begins (or at its share of the slots, whichever is first).
    #[test]
    fn a_full_stripe_refuses_and_counts_nothing() {
        use crate::state::tcp::{ACK, SYN};
        let t = ConnTable::new(128, Timeouts::default(), HashSecret::from_seed(2)).unwrap();
        assert_eq!(t.stripes(), 2);
        let stripe = |k: &FlowKey| t.stripe(t.hash(&ConnKey::of(k).0));
        let mut keys = (0..).map(|i| client(i, 6, 80));
        let mut held = 0;
        loop {
            let k = keys.find(|k| stripe(k) == 0).unwrap();
            match t.open(&k, SYN, 1, Action::Allow, 60, 0) {
                Ok(_) => held += 1,
                Err(OpenError::Full) => break,
                Err(e) => panic!("{e:?}"),
            }
            t.lookup(&k.reply(), SYN | ACK, 60, 0).unwrap();
            t.lookup(&k, ACK, 60, 0).unwrap();
            assert!(held <= t.per_shard as usize, "past the stripe's slots");
        }
        let quota = t.quota as usize;
        assert_eq!(held, (t.capacity() - quota).min(t.per_shard as usize));
        assert!(held < t.capacity());
        assert_eq!(t.len(), held);
        let k = keys.find(|k| stripe(k) == 1).unwrap();
        t.open(&k, SYN, 1, Action::Allow, 60, 0).unwrap();
        assert_eq!(t.len(), held + 1);
    }

    /// Opens and removals within every stripe's quota write nothing
    /// shared: the count against the capacity stays where it started
    /// (each stripe's quota) until a stripe passes its own, then counts
    /// exactly the connections past the quotas.
    #[test]
    fn opens_within_the_quotas_leave_the_shared_count_alone() {
        let t = ConnTable::new(65_536, Timeouts::default(), HashSecret::from_seed(3)).unwrap();
        let quota = t.quota as usize;
        let reserved = quota * t.stripes();
        assert!(quota > 0 && reserved < t.capacity());
        let mut per_stripe = vec![0usize; t.stripes()];
        let key = |i: u32| client(i, 17, 53);
        let mut opened = Vec::new();
        for i in 0.. {
            let k = key(i);
            let s = t.stripe(t.hash(&ConnKey::of(&k).0));
            if per_stripe[s] == quota {
                if per_stripe.iter().all(|&n| n == quota) {
                    break;
                }
                continue;
            }
            per_stripe[s] += 1;
            t.open(&k, 0, 1, Action::Allow, 60, 0).unwrap();
            assert_eq!(t.len.load(Relaxed), reserved, "a shared write");
            opened.push(k);
        }
        assert_eq!((t.len.load(Relaxed), t.len()), (reserved, reserved));
        let k = (0..).map(key).find(|k| !opened.contains(k)).unwrap();
        t.open(&k, 0, 1, Action::Allow, 60, 0).unwrap();
        assert_eq!((t.len.load(Relaxed), t.len()), (reserved + 1, reserved + 1));
        // A sweep long after removes them all: every count given back.
        assert_eq!(t.sweep(u64::MAX / 2), reserved + 1);
        assert_eq!((t.len.load(Relaxed), t.len()), (reserved, 0));
    }

    /// `surely_empty` (what a worker asks once a burst) is never true
    /// while a connection is held: set by the first open, cleared only by
    /// the sweep turn of the last stripe once every stripe is empty.
    #[test]
    fn surely_empty_only_once_every_connection_is_gone() {
        let t = ConnTable::new(4096, Timeouts::default(), HashSecret::from_seed(4)).unwrap();
        assert!(t.stripes() > 1 && t.surely_empty());
        let key = |sport: u16| {
            FlowKey::new(
                std::net::Ipv4Addr::new(10, 0, 0, 1).into(),
                std::net::Ipv4Addr::new(192, 0, 2, 1).into(),
                17,
                sport,
                53,
            )
        };
        let sec = 1_000_000_000;
        t.open(&key(1), 0, 1, Action::Allow, 60, 0).unwrap();
        assert!(!t.surely_empty());
        // The first expires, the second does not: a whole sweep leaves
        // the flag set.
        t.open(&key(2), 0, 1, Action::Allow, 60, 100 * sec).unwrap();
        let last = t.stripes() - 1;
        assert_eq!(t.sweep(110 * sec), 1);
        assert!(!t.surely_empty() && t.len() == 1);
        // The second gone by a turn of its own stripe: only the last
        // stripe's turn finds the table empty.
        let second = t.stripe(t.hash(&ConnKey::of(&key(2)).0));
        assert_eq!(t.sweep_shard(second, 1000 * sec), 1);
        assert_eq!(t.surely_empty(), second == last);
        t.sweep_shard(last, 1000 * sec);
        assert!(t.surely_empty() && t.is_empty());
    }

    /// A slot answers only for its exact key: every field of the key
    /// (each address word, each port, the protocol, the family) changed
    /// alone makes it another connection's. The filter's fingerprints
    /// rarely bring such a twin to the slot, so this is checked on the
    /// slot itself.
    #[test]
    fn a_slot_answers_only_its_exact_key() {
        let t = ConnTable::new(64, Timeouts::default(), HashSecret::from_seed(1)).unwrap();
        let k = FlowKey::new(
            "2001:db8::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            17,
            5000,
            53,
        );
        t.open(&k, 0, 1, Action::Allow, 60, 0).unwrap();
        let (key, _) = ConnKey::of(&k);
        let w = key.words();
        let (i, ..) = t.locate(&w, t.hash(&key), None).unwrap();
        assert!(matches!(t.read(i, &w), Read::Mine(..)));
        let mut twins = Vec::new();
        for j in 0..4 {
            let mut x = w;
            x.0[j] ^= 1 << 63;
            twins.push(x);
        }
        for bit in [0, 16, 32, 40] {
            twins.push((w.0, w.1 ^ 1 << bit));
        }
        for x in twins {
            assert!(matches!(t.read(i, &x), Read::Other), "{x:x?}");
        }
    }
}
