//! Planning a walk (Algorithm 2's random walk, or a breadth-first search):
//! against a read of the table, with nothing written, so a failed insert
//! has touched nothing. `execute` carries a plan out.

use crate::layout::{Bucket, ENTRIES_PER_BUCKET};
use crate::state::{BloomRecord, Filter, Keyed, Loc, Rng};

/// One planned displacement: `placed` goes into `loc`, whose occupant at
/// planning time was `orig`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Step {
    pub(crate) loc: Loc,
    pub(crate) placed: u64,
    pub(crate) orig: u64,
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Terminal {
    Empty(Loc),
    Bloom { a: usize, b: usize },
}

#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) path: Vec<Step>,
    pub(crate) terminal: Terminal,
    pub(crate) iterations: u32,
}

/// A bucket the breadth-first search reached by moving `victim` out of
/// `slot` of the parent node's bucket.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Node {
    pub(crate) bucket: usize,
    pub(crate) parent: u32,
    pub(crate) slot: u8,
    pub(crate) victim: u64,
}

std::thread_local! {
    /// The search's node buffer, reused like the path buffer.
    static BFS_NODES: std::cell::Cell<Vec<Node>> = const { std::cell::Cell::new(Vec::new()) };

    /// Each writer thread's path buffer, reused from plan to plan: growing a
    /// fresh `Vec` on every insert that kicks was a fifth of the insert
    /// path's instructions (callgrind, filling 2^16 buckets to 95 %).
    static PATH_BUFFER: std::cell::Cell<Vec<Step>> = const { std::cell::Cell::new(Vec::new()) };
}

impl Plan {
    pub(crate) fn buffer() -> Vec<Step> {
        let mut path = PATH_BUFFER
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        path.clear();
        path
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        let path = std::mem::take(&mut self.path);
        if path.capacity() == 0 {
            return; // nothing worth keeping (and keep the buffer there is)
        }
        // Fails only while the thread is being torn down; the buffer is then
        // simply freed.
        let _ = PATH_BUFFER.try_with(|b| b.set(path));
    }
}

/// What the last step of an executed plan does with the planned item.
#[derive(Clone, Copy)]
pub(crate) enum Final {
    /// Write a new item.
    Insert,
    /// Move a Bloom-part element (its record) into an entry.
    Migrate(BloomRecord),
}

/// The buckets a plan's path touches, as a 1024-bit set of `bucket mod
/// 1024`: most bucket reads of the walk skip the scan of the path. (A
/// 64-bit set saturated on the long walks near full load, and the scans
/// made planning quadratic in the walk's length.)
#[derive(Clone, Copy)]
pub(crate) struct OnPath([u64; 16]);

impl OnPath {
    pub(crate) fn new() -> Self {
        OnPath([0; 16])
    }
    #[inline(always)]
    pub(crate) fn split(bucket: usize) -> (usize, u64) {
        ((bucket >> 6) & 15, 1u64 << (bucket & 63))
    }
    #[inline(always)]
    pub(crate) fn insert(&mut self, bucket: usize) {
        let (w, b) = Self::split(bucket);
        self.0[w] |= b;
    }
    #[inline(always)]
    pub(crate) fn may_contain(&self, bucket: usize) -> bool {
        let (w, b) = Self::split(bucket);
        self.0[w] & b != 0
    }
    pub(crate) fn of(path: &[Step]) -> Self {
        let mut set = Self::new();
        for st in path {
            set.insert(st.loc.bucket);
        }
        set
    }
}

/// The path of a random walk and the buckets it touches.
struct Walked {
    path: Vec<Step>,
    on_path: OnPath,
}

impl Walked {
    /// `placed` goes to `loc`, evicting `victim`. The walk is loop-erased:
    /// when `victim` is an entry the walk placed itself earlier, the steps
    /// from there on formed a cycle that would end where it started, so
    /// they are dropped.
    #[inline(always)]
    fn evict(&mut self, loc: Loc, placed: u64, victim: u64) {
        let erase_at = if self.on_path.may_contain(loc.bucket) {
            self.path.iter().position(|st| st.loc == loc)
        } else {
            None
        };
        if let Some(j) = erase_at {
            self.path.truncate(j);
            self.on_path = OnPath::of(&self.path);
        } else {
            self.path.push(Step {
                loc,
                placed,
                orig: victim,
            });
            self.on_path.insert(loc.bucket);
        }
    }
}

impl Filter {
    /// A bucket as the plan sees it: the table with the plan's placements.
    /// `on_path` holds every bucket the path
    /// touches, so most reads skip the scan of the path.
    #[inline]
    pub(crate) fn sim_bucket(&self, bucket: usize, path: &[Step], on_path: &OnPath) -> Bucket {
        let l = &self.raw.layout;
        let mut b = self.raw.load_hint(bucket);
        if !on_path.may_contain(bucket) {
            return b;
        }
        for st in path.iter().filter(|st| st.loc.bucket == bucket) {
            let (w, v) = l.set_entry(&b, st.loc.slot, st.placed);
            b[w] = v;
        }
        b
    }

    /// Plans Algorithm 2 for item `entry` at `k` without changing anything.
    /// `threshold`: `Some(t)` allows the Bloom part from iteration `t + 1`;
    /// `None` is the plain cuckoo filter's walk (Fan et al.), also used by
    /// migration: no Bloom part, and every eviction is from the bucket the
    /// homeless entry could not enter.
    ///
    /// The walk is loop-erased: when it evicts an entry that it placed
    /// itself earlier, the entries between form a cycle that would end where
    /// they started, so that part of the path is dropped and the walk goes
    /// on with the evicted entry. Iterations still count every step.
    /// Fails with the iterations spent when the walk finds no room.
    #[inline]
    pub(crate) fn plan(
        &self,
        k: &Keyed,
        entry: u64,
        threshold: Option<u32>,
        rng: &mut Rng,
    ) -> Result<Plan, u32> {
        let l = &self.raw.layout;
        let bloom_ok = |i: u32| threshold.is_some_and(|t| i > t);
        let mut path = Plan::buffer();
        let done = |path: Vec<Step>, terminal, iterations| {
            Ok(Plan {
                path,
                terminal,
                iterations,
            })
        };

        // Iteration 1: both candidate buckets, the primary first, and the
        // alternate only when the primary is full, as the paper authors'
        // code does: below high load most inserts then cost one cache miss,
        // not two (2^22 buckets, empty to 95 %: 1.25× the insert rate).
        let i = 1;
        let b1 = self.raw.load_hint(k.i1);
        let e1 = l.empty_slots(&b1);
        if e1 != 0 {
            let loc = Loc {
                bucket: k.i1,
                slot: e1.trailing_zeros() as usize,
            };
            return done(path, Terminal::Empty(loc), i);
        }
        let b2 = self.raw.load_hint(k.i2);
        let e2 = l.empty_slots(&b2);
        if e2 != 0 {
            let loc = Loc {
                bucket: k.i2,
                slot: e2.trailing_zeros() as usize,
            };
            return done(path, Terminal::Empty(loc), i);
        }
        // The plain path searches breadth-first; should that find nothing
        // within `max_kicks` bucket reads (it explores only about four
        // levels), the random walk, which can follow longer paths, gets
        // another `max_kicks`: near full load this is what keeps the load
        // factor the walk alone reached.
        let mut spent = 0;
        if threshold.is_none() {
            match self.plan_bfs(k, entry, path) {
                Ok(plan) => return Ok(plan),
                Err(reads) => {
                    spent = reads;
                    path = Plan::buffer();
                }
            }
        }
        if bloom_ok(i) && l.tag(&b1) == 0 && l.tag(&b2) == 0 {
            return done(path, Terminal::Bloom { a: k.i1, b: k.i2 }, i + spent);
        }
        self.walk(k, entry, [&b1, &b2], threshold, rng, path, spent)
    }

    /// The random walk of [`Filter::plan`] after its first iteration found
    /// both candidate buckets (`b`, as read) full and no Bloom terminal.
    /// `spent`: bucket reads of a breadth-first search that found nothing.
    #[allow(clippy::too_many_arguments)] // the plan's state, handed on once
    #[inline]
    fn walk(
        &self,
        k: &Keyed,
        entry: u64,
        b: [&Bucket; 2],
        threshold: Option<u32>,
        rng: &mut Rng,
        path: Vec<Step>,
        spent: u32,
    ) -> Result<Plan, u32> {
        let l = &self.raw.layout;
        let bloom_ok = |i: u32| threshold.is_some_and(|t| i > t);
        let done = |path: Vec<Step>, terminal, iterations| {
            Ok(Plan {
                path,
                terminal,
                iterations,
            })
        };
        let mut i = 1;
        let mut a = if rng.coin() { k.i1 } else { k.i2 };
        let slot = rng.below(ENTRIES_PER_BUCKET);
        let victim = l.entry(if a == k.i1 { b[0] } else { b[1] }, slot);
        let mut walk = Walked {
            path,
            on_path: OnPath::new(),
        };
        walk.evict(Loc { bucket: a, slot }, entry, victim);
        let mut homeless = victim;

        while i < self.config.max_kicks {
            i += 1;
            let be = self.alt(a, l.entry_fp(homeless));
            let bb = self.sim_bucket(be, &walk.path, &walk.on_path);
            let empty = l.empty_slots(&bb);
            if empty != 0 {
                let loc = Loc {
                    bucket: be,
                    slot: rng.pick_bit(empty),
                };
                return done(walk.path, Terminal::Empty(loc), i + spent);
            }
            if bloom_ok(i) && l.tag(&bb) == 0 && l.tag(&self.raw.load_hint(a)) == 0 {
                return done(walk.path, Terminal::Bloom { a, b: be }, i + spent);
            }
            // Algorithm 2 (line 37) picks the next bucket at random between
            // the pair; the plain cuckoo filter of Fan et al. always evicts
            // from the bucket the homeless entry could not enter.
            let next = if threshold.is_some() && rng.coin() {
                a
            } else {
                be
            };
            let contents = if next == be {
                bb
            } else {
                self.sim_bucket(a, &walk.path, &walk.on_path)
            };
            let loc = Loc {
                bucket: next,
                slot: rng.below(ENTRIES_PER_BUCKET),
            };
            let victim = l.entry(&contents, loc.slot);
            walk.evict(loc, homeless, victim);
            homeless = victim;
            a = next;
        }
        // Back to the thread's buffer, as a dropped plan would give it.
        drop(Plan {
            path: walk.path,
            terminal: Terminal::Empty(Loc { bucket: 0, slot: 0 }),
            iterations: i,
        });
        Err(i + spent)
    }

    /// The plain cuckoo path (no Bloom part), found by breadth-first search
    /// from both full candidate buckets, as libcuckoo does, instead of the
    /// random walk: the shortest path to a free slot, and the buckets of a
    /// whole level are prefetched together, so a search costs about one
    /// memory latency per level rather than one per step of a walk. Bounded
    /// by `max_kicks` bucket reads. Buckets are visited at most once, so the
    /// path's slots are all distinct.
    pub(crate) fn plan_bfs(&self, k: &Keyed, entry: u64, path: Vec<Step>) -> Result<Plan, u32> {
        const ROOT: u32 = u32::MAX;
        let max = self.config.max_kicks;
        // Seen buckets, as a 4096-bit set of `bucket mod 4096`: a collision
        // only skips a bucket, which can make a path longer, never wrong.
        let mut seen = [0u64; 64];
        let mut mark = |b: usize| {
            let (w, bit) = ((b >> 6) & 63, 1u64 << (b & 63));
            let fresh = seen[w] & bit == 0;
            seen[w] |= bit;
            fresh
        };
        let root = |bucket| Node {
            bucket,
            parent: ROOT,
            slot: 0,
            victim: 0,
        };
        let mut nodes = BFS_NODES
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        nodes.clear();
        nodes.push(root(k.i1));
        nodes.push(root(k.i2));
        let result = self.bfs(k, entry, path, &mut nodes, &mut mark, max);
        // On failure the path buffer was dropped inside; the node buffer
        // goes back to the thread either way.
        let _ = BFS_NODES.try_with(|b| b.set(nodes));
        result
    }

    /// The search proper, over `nodes` (the two roots already in it).
    pub(crate) fn bfs(
        &self,
        k: &Keyed,
        entry: u64,
        mut path: Vec<Step>,
        nodes: &mut Vec<Node>,
        mark: &mut impl FnMut(usize) -> bool,
        max: u32,
    ) -> Result<Plan, u32> {
        const ROOT: u32 = u32::MAX;
        let l = &self.raw.layout;
        mark(k.i1);
        mark(k.i2);
        let mut reads = 2u32;
        let mut level = 0..nodes.len();
        while !level.is_empty() {
            // Expand: every entry of a full bucket could move to its other
            // bucket; prefetch those buckets all at once.
            let next = nodes.len();
            for n in level {
                let node = nodes[n];
                let b = self.raw.load_hint(node.bucket);
                for slot in 0..ENTRIES_PER_BUCKET {
                    let victim = l.entry(&b, slot);
                    let child = self.alt(node.bucket, l.entry_fp(victim));
                    if mark(child) {
                        self.raw.prefetch(child);
                        nodes.push(Node {
                            bucket: child,
                            parent: n as u32,
                            slot: slot as u8,
                            victim,
                        });
                    }
                }
            }
            for c in next..nodes.len() {
                if reads >= max {
                    return Err(reads);
                }
                reads += 1;
                let empty = l.empty_slots(&self.raw.load_hint(nodes[c].bucket));
                if empty == 0 {
                    continue;
                }
                // Found: walk back to the root emitting the steps last
                // first, then put them in order (see `Step` and `execute`).
                let mut moved = nodes[c];
                while moved.parent != ROOT {
                    let here = nodes[moved.parent as usize];
                    path.push(Step {
                        loc: Loc {
                            bucket: here.bucket,
                            slot: moved.slot as usize,
                        },
                        placed: if here.parent == ROOT {
                            entry
                        } else {
                            here.victim
                        },
                        orig: moved.victim,
                    });
                    moved = here;
                }
                path.reverse();
                let dst = Loc {
                    bucket: nodes[c].bucket,
                    slot: empty.trailing_zeros() as usize,
                };
                return Ok(Plan {
                    path,
                    terminal: Terminal::Empty(dst),
                    iterations: reads,
                });
            }
            level = next..nodes.len();
        }
        Err(reads)
    }
}
