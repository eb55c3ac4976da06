//! The connection table the workers share.
//!
//! Two parts, written together under one lock stripe:
//! * a **Bloom-Cuckoo filter** (`cfdp-filter`, Algorithm 2 insert path)
//!   over the keys' hashes, read without a lock: a packet of no tracked
//!   connection — most packets, when few rules are stateful — costs one
//!   lock-free probe and never touches a lock;
//! * the **exact entries**, in [`SHARDS`] hash maps each behind its own
//!   mutex (the lock stripes). A filter positive is confirmed against
//!   the exact key: a fingerprint collision never admits a packet.
//!
//! Any worker may open, update or remove any connection, so the two
//! directions of a connection may arrive on different workers (no
//! symmetric RSS needed): both take the same stripe. Why one shared
//! table and not one per worker: a per-worker table is right only when
//! the NIC's RSS is symmetric (both directions of a 5-tuple on one
//! queue), which `cfdp run` on DPDK does not configure today and `cfdp
//! replay`'s RSS does not promise either.
//!
//! Order: an entry is in the map before its key is in the filter, and
//! leaves the map before its key leaves the filter, both under its
//! stripe's lock (and the filter's own writer lock inside it, never the
//! other way round). A reader that misses the filter for an entry being
//! opened treats the packet as new: the rules decide it, as they would
//! have a moment earlier. The reply of a connection cannot be that
//! packet: the worker opens the entry before it sends the packet that
//! opened it.
//!
//! Full: a new connection may take the place of the oldest embryonic
//! entry of its stripe (an unanswered SYN, UDP or ICMP request), as
//! Linux's early drop does; an established connection is never
//! dropped to make room, so a flood of spoofed SYNs can only push out
//! other embryonic entries. With none to take, the connection is refused
//! and counted.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};

use cfdp_filter::{BloomConfig, BloomMode, Config, ConfigError, Filter};
use cfdp_rules::{Action, FlowKey, HashSecret};
use hashbrown::HashMap;

use crate::key::{ConnKey, Dir};
use crate::state::{State, Timeouts};

/// Lock stripes of the exact entries at most (fewer for a small table: one
/// per 64 connections, so that a full stripe has entries to drop).
pub const SHARDS: usize = 256;

/// One lock stripe: its entries, and the keys of those opened embryonic,
/// oldest first (some may have been answered or removed since: they are
/// skipped when met), so that a full table finds the oldest embryonic
/// entry without scanning.
#[derive(Default)]
struct Shard {
    map: HashMap<ConnKey, Entry>,
    embryonic: std::collections::VecDeque<ConnKey>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    state: State,
    /// Which directions have sent a FIN (bit 0: original, bit 1: reply).
    fin: u8,
    /// Whether the opener is the key's lower endpoint.
    orig_lo: bool,
    slot: u32,
    action: Action,
    opened_ns: u64,
    last_ns: u64,
    packets: [u64; 2],
    bytes: [u64; 2],
}

impl Entry {
    fn expired(&self, now_ns: u64, t: &Timeouts) -> bool {
        now_ns.saturating_sub(self.last_ns) > t.of(self.state)
    }

    /// The direction of a packet from the key's lower endpoint (`from_lo`)
    /// or from its higher one.
    fn dir(&self, from_lo: bool) -> Dir {
        if from_lo == self.orig_lo {
            Dir::Orig
        } else {
            Dir::Reply
        }
    }

    fn hit(&self, from_lo: bool) -> Hit {
        Hit {
            slot: self.slot,
            action: self.action,
            dir: self.dir(from_lo),
            state: self.state,
        }
    }

    fn info(&self, k: &ConnKey) -> ConnInfo {
        ConnInfo {
            orig: k.flow(self.orig_lo),
            state: self.state,
            fin: self.fin,
            slot: self.slot,
            action: self.action,
            opened_ns: self.opened_ns,
            last_ns: self.last_ns,
            packets: self.packets,
            bytes: self.bytes,
        }
    }
}

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
    /// The packet cannot open one (a TCP segment other than a SYN, an
    /// ICMP message other than an echo request, another protocol).
    NotAnOpener,
    /// The table is full of connections that may not be dropped.
    Full,
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
    pub opened_ns: u64,
    pub last_ns: u64,
    /// Original, reply.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
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
}

/// Connections shared by the workers (see the module docs).
pub struct ConnTable {
    filter: Filter,
    shards: Box<[Mutex<Shard>]>,
    shard_mask: usize,
    secret: HashSecret,
    capacity: usize,
    len: AtomicUsize,
    timeouts: Timeouts,
    opened: AtomicU64,
    refused: AtomicU64,
    early_dropped: AtomicU64,
    expired: AtomicU64,
    false_positives: AtomicU64,
    /// Each worker's packet time ([`Self::advance`]); `u64::MAX`: none.
    clocks: Box<[AtomicU64]>,
}

/// Workers whose packet time the table follows ([`ConnTable::advance`]).
pub const CLOCKS: usize = 64;

impl ConnTable {
    /// A table for `capacity` connections. `secret` keys its hash: a
    /// random one, so that nobody can compute offline keys that crowd one
    /// stripe or one filter bucket.
    pub fn new(
        capacity: usize,
        timeouts: Timeouts,
        secret: HashSecret,
    ) -> Result<Self, ConfigError> {
        Self::with_filter(capacity, timeouts, secret, true, None)
    }

    /// [`Self::new`] with the filter's insert path chosen (`bloom = false`:
    /// the plain cuckoo walk instead of the Bloom-assisted one) and, with
    /// `buckets_log2`, its size (else the smallest that holds `capacity` at
    /// 95 % load): the comparisons the `conntrack` bench makes.
    pub fn with_filter(
        capacity: usize,
        timeouts: Timeouts,
        secret: HashSecret,
        bloom: bool,
        buckets_log2: Option<u32>,
    ) -> Result<Self, ConfigError> {
        let capacity = capacity.max(1);
        let filter = Filter::new(Config {
            capacity,
            buckets_log2,
            fingerprint_bits: 16,
            value_bits: 0,
            bloom: bloom.then_some(BloomConfig {
                mode: BloomMode::Bit,
                threshold: 0,
            }),
            ..Config::default()
        })?;
        // A stripe per 64 connections, 256 at most, each allocated up
        // front for its share and a margin: a map or queue that grew would
        // rehash under its stripe's lock, and a burst of new connections
        // would wait behind it (measured: 130 µs at the 99.9th percentile
        // of a burst into a table whose maps grew, `bench --bin conntrack`).
        let shards = (capacity / 64)
            .clamp(1, SHARDS)
            .next_power_of_two()
            .min(SHARDS);
        let share = capacity.div_ceil(shards);
        let per_shard = share + share / 4 + 8;
        Ok(Self {
            filter,
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::with_capacity(per_shard),
                        embryonic: std::collections::VecDeque::with_capacity(per_shard),
                    })
                })
                .collect(),
            shard_mask: shards - 1,
            secret,
            capacity,
            len: AtomicUsize::new(0),
            timeouts,
            opened: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            early_dropped: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            false_positives: AtomicU64::new(0),
            clocks: (0..CLOCKS).map(|_| AtomicU64::new(u64::MAX)).collect(),
        })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Entries held (expired ones not yet removed included).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// The filter's statistics (load, Bloom-part items).
    pub fn filter_stats(&self) -> cfdp_filter::Stats {
        self.filter.stats()
    }

    /// Memory held, in bytes: the filter and every stripe's map at its
    /// allocated size (one control byte and one entry per slot) and queue.
    pub fn memory_bytes(&self) -> usize {
        let slot = SLOT_BYTES;
        self.filter.stats().memory_bytes
            + self
                .shards
                .iter()
                .map(|s| {
                    let s = lock(s);
                    s.map.capacity() * slot
                        + s.embryonic.capacity() * std::mem::size_of::<ConnKey>()
                })
                .sum::<usize>()
    }

    fn hash(&self, key: &ConnKey) -> u64 {
        self.secret.hash_bytes(&key.bytes())
    }

    fn shard(&self, h: u64) -> MutexGuard<'_, Shard> {
        // Bits the filter does not take its bucket from (the low ones).
        lock(&self.shards[(h >> 56) as usize & self.shard_mask])
    }

    /// Which of `keys` may belong to a tracked connection (`false`:
    /// certainly none), the filter probed for all of them at once so that
    /// their cache misses overlap (a burst of packets of no connection pays
    /// about one miss, not one each). `out` is as long as `keys`.
    pub fn may_hold(&self, keys: &[FlowKey], out: &mut [bool]) {
        const CHUNK: usize = 32;
        let mut hashes = [0u64; CHUNK];
        let mut found = [cfdp_filter::Lookup::Miss; CHUNK];
        for (ks, os) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            for (h, k) in hashes.iter_mut().zip(ks) {
                *h = self.hash(&ConnKey::of(k).0);
            }
            self.filter
                .get_batch_hashes(&hashes[..ks.len()], &mut found[..ks.len()]);
            for (o, f) in os.iter_mut().zip(&found) {
                *o = f.is_hit();
            }
        }
    }

    /// The connection of packet `k`, if one is tracked: its state moves
    /// with the packet (`tcp_flags`: 0 unless TCP), and its counters.
    /// An entry found past its timeout is removed and the packet is new.
    pub fn lookup(&self, k: &FlowKey, tcp_flags: u8, len: u32, now_ns: u64) -> Option<Hit> {
        let (key, from_lo) = ConnKey::of(k);
        let h = self.hash(&key);
        if !self.filter.contains_hash(h) {
            return None;
        }
        let mut shard = self.shard(h);
        let Some(e) = shard.map.get_mut(&key) else {
            self.false_positives.fetch_add(1, Relaxed);
            return None;
        };
        if e.expired(now_ns, &self.timeouts) {
            self.remove(&mut shard, &key, h);
            self.expired.fetch_add(1, Relaxed);
            return None;
        }
        Some(Self::step(e, from_lo, tcp_flags, len, now_ns))
    }

    /// The live connection an ICMP error is about (`inner`: the 5-tuple of
    /// the packet it quotes, either direction): the error is related to
    /// it. Its state and timeout do not move. (`dir` is the quoted
    /// packet's; the error goes the other way.)
    pub fn related(&self, inner: &FlowKey, now_ns: u64) -> Option<Hit> {
        self.find(inner, Some(now_ns))
    }

    /// The connection packet `k` belongs to, as it stands (nothing moves:
    /// for `trace`). An entry past its timeout but not yet swept is still
    /// shown.
    pub fn peek(&self, k: &FlowKey) -> Option<Hit> {
        self.find(k, None)
    }

    /// The entry of `k`'s connection, unchanged; with `now_ns`, only if it
    /// is live then.
    fn find(&self, k: &FlowKey, now_ns: Option<u64>) -> Option<Hit> {
        let (key, from_lo) = ConnKey::of(k);
        let h = self.hash(&key);
        if !self.filter.contains_hash(h) {
            return None;
        }
        let shard = self.shard(h);
        let e = shard.map.get(&key)?;
        if now_ns.is_some_and(|now| e.expired(now, &self.timeouts)) {
            return None;
        }
        Some(e.hit(from_lo))
    }

    fn step(e: &mut Entry, from_lo: bool, tcp_flags: u8, len: u32, now_ns: u64) -> Hit {
        let dir = e.dir(from_lo);
        e.state = e.state.next(dir, tcp_flags, &mut e.fin);
        e.last_ns = e.last_ns.max(now_ns);
        e.packets[dir.index()] += 1;
        e.bytes[dir.index()] += u64::from(len);
        e.hit(from_lo)
    }

    /// Opens the connection of packet `k`, which the rule in `slot` allowed
    /// with `action` (the caller found no live entry with [`Self::lookup`]).
    /// If another worker opened it meanwhile, that entry is used.
    #[allow(clippy::too_many_arguments)] // the packet's facts and the rule's
    pub fn open(
        &self,
        k: &FlowKey,
        tcp_flags: u8,
        icmp_echo: bool,
        slot: u32,
        action: Action,
        len: u32,
        now_ns: u64,
    ) -> Result<Hit, OpenError> {
        let state = State::open(k.proto, tcp_flags, icmp_echo).ok_or(OpenError::NotAnOpener)?;
        let (key, from_lo) = ConnKey::of(k);
        let h = self.hash(&key);
        let mut shard = self.shard(h);
        if let Some(e) = shard.map.get_mut(&key) {
            if !e.expired(now_ns, &self.timeouts) {
                return Ok(Self::step(e, from_lo, tcp_flags, len, now_ns));
            }
            self.remove(&mut shard, &key, h);
            self.expired.fetch_add(1, Relaxed);
        }
        if self.len.fetch_add(1, Relaxed) >= self.capacity {
            self.len.fetch_sub(1, Relaxed);
            if !self.drop_one(&mut shard, now_ns) {
                self.refused.fetch_add(1, Relaxed);
                return Err(OpenError::Full);
            }
            self.len.fetch_add(1, Relaxed);
        }
        if self.filter.insert_hash(h, 0).is_err() {
            // The filter's buckets are full around this key even with its
            // Bloom part: refused like a full table.
            self.len.fetch_sub(1, Relaxed);
            self.refused.fetch_add(1, Relaxed);
            return Err(OpenError::Full);
        }
        let e = Entry {
            state,
            fin: 0,
            orig_lo: from_lo,
            slot,
            action,
            opened_ns: now_ns,
            last_ns: now_ns,
            packets: [1, 0],
            bytes: [u64::from(len), 0],
        };
        shard.map.insert(key, e);
        if state.embryonic() {
            shard.embryonic.push_back(key);
            // Keys answered or removed since stay behind until met; a
            // queue twice its stripe's size is cleared of them at once.
            if shard.embryonic.len() > 2 * shard.map.len() + 16 {
                let Shard { map, embryonic } = &mut *shard;
                embryonic.retain(|k| map.get(k).is_some_and(|e| e.state.embryonic()));
            }
        }
        self.opened.fetch_add(1, Relaxed);
        Ok(Hit {
            slot,
            action,
            dir: Dir::Orig,
            state,
        })
    }

    /// Removes the oldest embryonic (or expired) entry of `shard` to make
    /// room; `false` when it has none.
    fn drop_one(&self, shard: &mut Shard, now_ns: u64) -> bool {
        while let Some(k) = shard.embryonic.pop_front() {
            let Some(e) = shard.map.get(&k) else {
                continue;
            };
            let expired = e.expired(now_ns, &self.timeouts);
            if !(expired || e.state.embryonic()) {
                continue;
            }
            self.remove(shard, &k, self.hash(&k));
            if expired {
                self.expired.fetch_add(1, Relaxed);
            } else {
                self.early_dropped.fetch_add(1, Relaxed);
            }
            return true;
        }
        false
    }

    /// Removes `key`'s entry from its stripe (held), then its hash `h`
    /// from the filter.
    fn remove(&self, shard: &mut Shard, key: &ConnKey, h: u64) {
        if shard.map.remove(key).is_some() {
            self.forget(h);
        }
    }

    /// Takes a removed entry's hash out of the filter and the count.
    fn forget(&self, h: u64) {
        let removed = self.filter.remove_hash(h, 0);
        debug_assert!(removed, "an entry's key was not in the filter");
        self.len.fetch_sub(1, Relaxed);
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
    /// work (a stripe per turn).
    pub fn sweep_shard(&self, i: usize, now_ns: u64) -> usize {
        let now_ns = self.sweep_time(now_ns);
        let mut shard = lock(&self.shards[i & self.shard_mask]);
        let before = shard.map.len();
        let t = &self.timeouts;
        let mut gone = Vec::new();
        shard.map.retain(|k, e| {
            let keep = !e.expired(now_ns, t);
            if !keep {
                gone.push(*k);
            }
            keep
        });
        for k in &gone {
            self.forget(self.hash(k));
        }
        self.expired.fetch_add(gone.len() as u64, Relaxed);
        before - shard.map.len()
    }

    /// Counters, and the live entries by state (a pass over every stripe).
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            opened: self.opened.load(Relaxed),
            refused: self.refused.load(Relaxed),
            early_dropped: self.early_dropped.load(Relaxed),
            expired: self.expired.load(Relaxed),
            false_positives: self.false_positives.load(Relaxed),
            ..Counts::default()
        };
        for s in &*self.shards {
            for e in lock(s).map.values() {
                c.by_state[e.state.index()] += 1;
            }
        }
        c
    }

    /// The newest packet time any entry has seen: what `cfdp ctl conns`
    /// measures ages against (time is the packets'). 0 when empty.
    pub fn newest_ns(&self) -> u64 {
        self.shards
            .iter()
            .filter_map(|s| lock(s).map.values().map(|e| e.last_ns).max())
            .max()
            .unwrap_or(0)
    }

    /// Every entry, for a graceful restart (the workers stopped).
    pub fn export(&self) -> Vec<ConnInfo> {
        self.list(usize::MAX, |_| true)
    }

    /// Puts saved entries back (before the workers start); `slot_of` gives
    /// each its rule's slot now (a rule's slot may differ after a restart;
    /// `None`: keep the saved one). Returns how many were taken: an entry
    /// already present or past the capacity is left out.
    pub fn import(&self, saved: &[ConnInfo], slot_of: impl Fn(&ConnInfo) -> Option<u32>) -> usize {
        let mut taken = 0;
        for e in saved {
            let (key, from_lo) = ConnKey::of(&e.orig);
            let h = self.hash(&key);
            let mut shard = self.shard(h);
            if shard.map.contains_key(&key) || self.len() >= self.capacity {
                continue;
            }
            if self.filter.insert_hash(h, 0).is_err() {
                continue;
            }
            self.len.fetch_add(1, Relaxed);
            shard.map.insert(
                key,
                Entry {
                    state: e.state,
                    fin: e.fin,
                    orig_lo: from_lo,
                    slot: slot_of(e).unwrap_or(e.slot),
                    action: e.action,
                    opened_ns: e.opened_ns,
                    last_ns: e.last_ns,
                    packets: e.packets,
                    bytes: e.bytes,
                },
            );
            if e.state.embryonic() {
                shard.embryonic.push_back(key);
            }
            taken += 1;
        }
        taken
    }

    /// Up to `limit` connections that `keep` accepts.
    pub fn list(&self, limit: usize, keep: impl Fn(&ConnInfo) -> bool) -> Vec<ConnInfo> {
        let mut out = Vec::new();
        for s in &*self.shards {
            for (k, e) in &lock(s).map {
                let info = e.info(k);
                if keep(&info) {
                    out.push(info);
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
        }
        out
    }
}

/// A stripe's lock. A worker that panicked while holding one left its map
/// whole (each change is one insert or remove): keep serving.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl std::fmt::Debug for ConnTable {
    /// Its size, not its entries (a pass over them is `counts`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnTable")
            .field("capacity", &self.capacity)
            .field("entries", &self.len())
            .field("stripes", &self.shards.len())
            .finish_non_exhaustive()
    }
}

/// Bytes of one connection's slot in its stripe's map (entry and key,
/// plus the map's control byte), before the map's spare room and the
/// filter's ~2 bytes.
pub const SLOT_BYTES: usize = std::mem::size_of::<(ConnKey, Entry)>() + 1;
