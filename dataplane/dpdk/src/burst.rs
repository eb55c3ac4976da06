//! [`RxBurst`]: the mbufs of one received burst, owned until they are
//! transmitted or freed.

use std::ffi::c_void;
use std::marker::PhantomData;

use cfdp_dpdk_sys as sys;

use crate::eal::Mempool;
use crate::queue::{RxQueue, TxQueue};
use crate::MAX_BURST;

/// One received burst. Owns its mbufs until [`RxBurst::dispatch`] sends or
/// frees them, or the burst is dropped (which frees them). Borrows the
/// queue's port lifetime `'p`: the mbufs' pool and the port outlive it.
pub struct RxBurst<'p> {
    mbufs: [*mut c_void; MAX_BURST],
    data: [*const u8; MAX_BURST],
    data_len: [u32; MAX_BURST],
    pkt_len: [u32; MAX_BURST],
    /// The device checked frame i's TCP or UDP checksum and vouched for
    /// its data (1), or said nothing or found it bad (0).
    l4_vouched: [u8; MAX_BURST],
    len: usize,
    port: u16,
    _port: PhantomData<&'p ()>,
}

/// What [`RxBurst::dispatch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dispatched {
    pub sent: u64,
    /// A transmit queue was full: freed and counted.
    pub tx_dropped: u64,
    /// Dropped by verdict.
    pub dropped: u64,
}

impl Default for RxBurst<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'p> RxBurst<'p> {
    /// An empty burst buffer, reused for every receive (nothing the size
    /// of a burst is moved per burst).
    pub fn new() -> Self {
        RxBurst {
            mbufs: [std::ptr::null_mut(); MAX_BURST],
            data: [std::ptr::null(); MAX_BURST],
            data_len: [0; MAX_BURST],
            pkt_len: [0; MAX_BURST],
            l4_vouched: [0; MAX_BURST],
            len: 0,
            port: 0,
            _port: PhantomData,
        }
    }

    /// Receives up to `max` (≤ [`MAX_BURST`]) packets from `q` into this
    /// buffer (mbufs still held are freed first); returns how many.
    pub fn receive_from(&mut self, q: &mut RxQueue<'p>, max: usize) -> usize {
        let (port, queue) = q.ids();
        // SAFETY: (port, queue) is a configured receive queue of a started
        // port that outlives 'p (the handle borrows it), polled only through
        // this unique handle.
        unsafe { self.receive(port, queue, max) }
    }

    /// Receives up to `max` (≤ [`MAX_BURST`]) packets from `(port, queue)`
    /// into this buffer (mbufs still held are freed first).
    ///
    /// # Safety
    /// `(port, queue)` must be a configured receive queue of a started port
    /// (and its mempool) that outlives `'p`, and no other thread may poll
    /// that queue meanwhile. [`RxBurst::receive_from`] guarantees both.
    unsafe fn receive(&mut self, port: u16, queue: u16, max: usize) -> usize {
        self.free_all();
        let max = max.min(MAX_BURST) as u16;
        // SAFETY: mbufs has room for max pointers; the caller guarantees the
        // queue is configured, started and ours.
        let n = unsafe { sys::cfdp_rx_burst(port, queue, self.mbufs.as_mut_ptr(), max) };
        // SAFETY: the first n entries are valid mbufs just received; the
        // four out arrays hold MAX_BURST ≥ n entries each.
        unsafe {
            sys::cfdp_mbuf_views(
                self.mbufs.as_ptr(),
                n,
                self.data.as_mut_ptr(),
                self.data_len.as_mut_ptr(),
                self.pkt_len.as_mut_ptr(),
                self.l4_vouched.as_mut_ptr(),
            );
        };
        self.len = n as usize;
        self.port = port;
        self.len
    }

    /// Fills this buffer (mbufs still held are freed first) with copies of
    /// `frames` (at most [`MAX_BURST`]) in fresh mbufs from `pool`; returns
    /// how many were made (fewer when the pool runs dry or a frame does not
    /// fit one mbuf). For frames that are not received, e.g. held IP
    /// fragments the worker releases.
    pub fn copy_in(&mut self, pool: &'p Mempool<'p>, frames: &[&[u8]]) -> usize {
        self.free_all();
        let n = frames.len().min(MAX_BURST);
        let data: [*const u8; MAX_BURST] =
            std::array::from_fn(|i| frames.get(i).map_or(std::ptr::null(), |f| f.as_ptr()));
        let len: [u32; MAX_BURST] =
            std::array::from_fn(|i| frames.get(i).map_or(0, |f| f.len() as u32));
        // SAFETY: data/len describe n live slices; mbufs has room for n
        // pointers; the pool is live for 'p (borrowed).
        let made = unsafe {
            sys::cfdp_mbufs_from(
                pool.ptr.as_ptr(),
                data.as_ptr(),
                len.as_ptr(),
                n as u32,
                self.mbufs.as_mut_ptr(),
            )
        } as u16;
        // SAFETY: the first `made` entries are valid mbufs just filled;
        // the four out arrays hold MAX_BURST ≥ made entries each.
        unsafe {
            sys::cfdp_mbuf_views(
                self.mbufs.as_ptr(),
                made,
                self.data.as_mut_ptr(),
                self.data_len.as_mut_ptr(),
                self.pkt_len.as_mut_ptr(),
                self.l4_vouched.as_mut_ptr(),
            );
        };
        self.len = usize::from(made);
        self.len
    }

    /// The port the burst came from.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Frame `i`'s bytes (its first segment) and its length on the wire.
    pub fn frame(&self, i: usize) -> (&[u8], u32) {
        assert!(i < self.len);
        // SAFETY: data[i] points at data_len[i] bytes of mbuf i, which this
        // burst owns until dispatch/drop; the borrow ties the slice to self.
        let s = unsafe { std::slice::from_raw_parts(self.data[i], self.data_len[i] as usize) };
        (s, self.pkt_len[i])
    }

    /// Whether the device checked frame `i`'s TCP or UDP checksum and
    /// vouched for its data (`RTE_MBUF_F_RX_L4_CKSUM_GOOD`, or `_NONE`: the
    /// field not filled in, the data checked). `false` for a frame of a
    /// device that does not check, one it found bad, and a frame made by
    /// [`Self::copy_in`].
    pub fn l4_vouched(&self, i: usize) -> bool {
        assert!(i < self.len);
        self.l4_vouched[i] != 0
    }

    /// Sends frame i through `txq[dest[i]]`, or frees it when `dest[i]` is
    /// `None`; frames a transmit queue does not accept are freed and
    /// counted. Frames for one queue leave in their order in the burst. The
    /// burst is empty afterwards.
    pub fn dispatch(&mut self, dest: &[Option<usize>], txq: &mut [TxQueue<'_>]) -> Dispatched {
        assert!(dest.len() >= self.len);
        // The common burst: every frame to one queue, sent as received
        // (no gather into a second array).
        if let Some(&Some(q)) = dest.first() {
            if q < txq.len() && dest[..self.len].iter().all(|&d| d == Some(q)) {
                return self.send_all(&mut txq[q]);
            }
        }
        let mut out = Dispatched::default();
        let mut drop = [std::ptr::null_mut(); MAX_BURST];
        let mut nd = 0;
        let mut done = [false; MAX_BURST];
        for i in 0..self.len {
            if done[i] {
                continue;
            }
            let Some(q) = dest[i].filter(|&q| q < txq.len()) else {
                drop[nd] = self.mbufs[i];
                nd += 1;
                if dest[i].is_some() {
                    out.tx_dropped += 1;
                } else {
                    out.dropped += 1;
                }
                done[i] = true;
                continue;
            };
            // Gather every frame for this queue, in order.
            let mut tx = [std::ptr::null_mut(); MAX_BURST];
            let mut nt = 0;
            for j in i..self.len {
                if !done[j] && dest[j] == Some(q) {
                    tx[nt] = self.mbufs[j];
                    nt += 1;
                    done[j] = true;
                }
            }
            let (port, queue) = txq[q].ids();
            // SAFETY: tx holds nt owned mbufs; (port, queue) is a configured
            // transmit queue of a started port, used only through this
            // unique (&mut) handle; tx_burst takes ownership of the first
            // `sent`.
            let sent =
                unsafe { sys::cfdp_tx_burst(port, queue, tx.as_mut_ptr(), nt as u16) } as usize;
            out.sent += sent as u64;
            for &m in &tx[sent..nt] {
                drop[nd] = m;
                nd += 1;
                out.tx_dropped += 1;
            }
        }
        if nd > 0 {
            // SAFETY: drop holds nd owned mbufs, freed once.
            unsafe { sys::cfdp_free_bulk(drop.as_mut_ptr(), nd as u32) };
        }
        self.len = 0;
        out
    }
}

impl RxBurst<'_> {
    /// Every frame of the burst through `q`, in order; those it does not
    /// take are freed and counted. The burst is empty afterwards.
    pub fn send_all(&mut self, q: &mut TxQueue<'_>) -> Dispatched {
        let n = self.len;
        let (port, queue) = q.ids();
        // SAFETY: the first n mbufs are owned by this burst; (port, queue)
        // is a configured transmit queue of a started port, used only
        // through this unique (&mut) handle; tx_burst takes ownership of
        // the first `sent`.
        let sent =
            unsafe { sys::cfdp_tx_burst(port, queue, self.mbufs.as_mut_ptr(), n as u16) } as usize;
        if sent < n {
            // SAFETY: mbufs[sent..n] are still owned here, freed once.
            unsafe { sys::cfdp_free_bulk(self.mbufs[sent..].as_mut_ptr(), (n - sent) as u32) };
        }
        self.len = 0;
        Dispatched {
            sent: sent as u64,
            tx_dropped: (n - sent) as u64,
            dropped: 0,
        }
    }

    fn free_all(&mut self) {
        if self.len > 0 {
            // SAFETY: the first len mbufs are owned by this burst.
            unsafe { sys::cfdp_free_bulk(self.mbufs.as_mut_ptr(), self.len as u32) };
            self.len = 0;
        }
    }
}

impl Drop for RxBurst<'_> {
    fn drop(&mut self) {
        self.free_all();
    }
}
