//! # cfdp-dpdk-sys — the system DPDK, thinly
//!
//! Declarations of the C shim in `src/shim.c` (which wraps DPDK's inline
//! fast-path functions and its set-up calls with plain C types) and a small
//! safe layer: EAL initialisation (once per process), mempools, ports, and
//! [`RxBurst`], which owns the mbufs of one received burst until they are
//! transmitted or freed. FFI is crossed per burst, never per packet.
//!
//! Why not `capsule`: it is pinned to DPDK 19.11 and does not build against
//! the DPDK 22.11 we can install; bindgen would need libclang at build time
//! for a dozen functions.
#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

/// Largest burst handled at once.
pub const MAX_BURST: usize = 32;

/// Device statistics of a port (`rte_eth_stats`, the fields cfdp reports).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

extern "C" {
    fn cfdp_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
    fn cfdp_eal_cleanup() -> c_int;
    fn cfdp_errno() -> c_int;
    fn cfdp_strerror(e: c_int) -> *const c_char;
    fn cfdp_thread_register() -> c_int;
    fn cfdp_thread_unregister();
    fn cfdp_port_count() -> u16;
    fn cfdp_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
    fn cfdp_pool_create(name: *const c_char, n: u32, cache: u32, data_room: u16) -> *mut c_void;
    fn cfdp_port_start(
        port: u16,
        rxq: u16,
        txq: u16,
        nb_rxd: u16,
        nb_txd: u16,
        pool: *mut c_void,
        rss_out: *mut c_int,
    ) -> c_int;
    fn cfdp_port_stop(port: u16);
    fn cfdp_port_stats(port: u16, out: *mut PortStats) -> c_int;
    fn cfdp_rx_burst(port: u16, q: u16, mbufs: *mut *mut c_void, n: u16) -> u16;
    fn cfdp_tx_burst(port: u16, q: u16, mbufs: *mut *mut c_void, n: u16) -> u16;
    fn cfdp_free_bulk(mbufs: *mut *mut c_void, n: u32);
    fn cfdp_port_name(port: u16, out: *mut c_char, len: usize) -> c_int;
    fn cfdp_ring_create(name: *const c_char, count: u32) -> *mut c_void;
    fn cfdp_ring_port(name: *const c_char, rx: *mut c_void, tx: *mut c_void) -> c_int;
    fn cfdp_ring_inject(
        ring: *mut c_void,
        pool: *mut c_void,
        data: *const *const u8,
        len: *const u32,
        n: u32,
    ) -> u32;
    fn cfdp_ring_collect(ring: *mut c_void, out: *mut u8, cap: u32) -> c_int;
    fn cfdp_mbuf_views(
        mbufs: *const *mut c_void,
        n: u16,
        data: *mut *const u8,
        data_len: *mut u32,
        pkt_len: *mut u32,
    );
}

fn rte_error(what: &str, code: c_int) -> String {
    let e = if code < 0 { -code } else { code };
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string for any error number.
    let msg = unsafe { CStr::from_ptr(cfdp_strerror(e)) };
    format!("{what}: {} (errno {e})", msg.to_string_lossy())
}

static EAL_UP: AtomicBool = AtomicBool::new(false);

/// The initialised EAL. DPDK allows one initialisation per process.
pub struct Eal(());

impl Eal {
    /// `rte_eal_init` with `args` (program name first).
    pub fn init(args: &[String]) -> Result<Eal, String> {
        if EAL_UP.swap(true, Ordering::AcqRel) {
            return Err("the DPDK EAL is already initialised in this process".into());
        }
        let c: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(a.as_str()).map_err(|_| format!("EAL argument {a:?} contains NUL"))
            })
            .collect::<Result<_, _>>()?;
        // rte_eal_init may permute argv; it keeps pointers into the strings
        // for the life of the process, so they are leaked on purpose.
        let mut argv: Vec<*mut c_char> = c.into_iter().map(CString::into_raw).collect();
        let argv_ptr = argv.as_mut_ptr();
        let argc = argv.len() as c_int;
        std::mem::forget(argv);
        // SAFETY: argv holds argc valid NUL-terminated strings that live
        // for the rest of the process; the EAL is initialised only once
        // (EAL_UP).
        let r = unsafe { cfdp_eal_init(argc, argv_ptr) };
        if r < 0 {
            // SAFETY: reads DPDK's thread-local error number.
            let e = unsafe { cfdp_errno() };
            return Err(rte_error("rte_eal_init", e));
        }
        Ok(Eal(()))
    }

    /// Ports the EAL found (physical and virtual).
    pub fn port_count(&self) -> u16 {
        // SAFETY: the EAL is initialised (self exists).
        unsafe { cfdp_port_count() }
    }

    /// Port id of a device by name (e.g. `net_pcap0`).
    pub fn port_by_name(&self, name: &str) -> Result<u16, String> {
        let c = CString::new(name).map_err(|_| format!("port name {name:?} contains NUL"))?;
        let mut port = 0u16;
        // SAFETY: c is a valid C string, port a valid out pointer.
        let r = unsafe { cfdp_port_by_name(c.as_ptr(), &mut port) };
        if r != 0 {
            return Err(rte_error(&format!("port {name}"), r));
        }
        Ok(port)
    }

    /// The device name of a port.
    pub fn port_name(&self, port: u16) -> Result<String, String> {
        let mut buf = [0 as c_char; 128];
        // SAFETY: buf has buf.len() bytes; the shim NUL-terminates.
        let r = unsafe { cfdp_port_name(port, buf.as_mut_ptr(), buf.len()) };
        if r != 0 {
            return Err(rte_error(&format!("name of port {port}"), r));
        }
        // SAFETY: NUL-terminated by the shim within buf.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Creates a packet mbuf pool of `n` mbufs.
    pub fn mempool(&self, name: &str, n: u32, cache: u32) -> Result<Mempool, String> {
        let c = CString::new(name).map_err(|_| "pool name contains NUL".to_string())?;
        // 2048 bytes of data room plus the headroom: DPDK's default size.
        // SAFETY: valid C string; the EAL is initialised.
        let p = unsafe { cfdp_pool_create(c.as_ptr(), n, cache, 2048 + 128) };
        NonNull::new(p).map(Mempool).ok_or_else(|| {
            // SAFETY: reads DPDK's thread-local error number.
            rte_error("rte_pktmbuf_pool_create", unsafe { cfdp_errno() })
        })
    }

    /// Configures and starts a port; returns whether RSS was enabled.
    pub fn port_start(
        &self,
        port: u16,
        rxq: u16,
        txq: u16,
        descriptors: u16,
        pool: &Mempool,
    ) -> Result<bool, String> {
        let mut rss: c_int = 0;
        // SAFETY: the pool pointer is a live mempool; rss a valid out pointer.
        let r = unsafe {
            cfdp_port_start(
                port,
                rxq,
                txq,
                descriptors,
                descriptors,
                pool.0.as_ptr(),
                &mut rss,
            )
        };
        if r != 0 {
            return Err(rte_error(&format!("starting port {port}"), r));
        }
        Ok(rss != 0)
    }

    pub fn port_stop(&self, port: u16) {
        // SAFETY: stopping/closing an unknown or stopped port is an error
        // DPDK reports, not undefined behaviour.
        unsafe { cfdp_port_stop(port) }
    }

    pub fn port_stats(&self, port: u16) -> Result<PortStats, String> {
        let mut s = PortStats::default();
        // SAFETY: s is a valid out pointer of the C struct's layout.
        let r = unsafe { cfdp_port_stats(port, &mut s) };
        if r != 0 {
            return Err(rte_error(&format!("stats of port {port}"), r));
        }
        Ok(s)
    }

    /// `rte_eal_cleanup` (ports should be stopped first).
    pub fn cleanup(self) {
        // SAFETY: called once, after the ports were stopped.
        unsafe {
            cfdp_eal_cleanup();
        }
    }
}

impl Eal {
    /// A `net_ring` port over two new rings: packets put into the returned
    /// [`Ring`] `rx` arrive on the port; packets the port transmits can be
    /// taken from `tx`. Returns the port's device name (DPDK prefixes
    /// `name`), for tests that inject and collect packets in-process.
    pub fn ring_port(&self, name: &str, size: u32) -> Result<(String, Ring, Ring), String> {
        let ring = |suffix: &str| -> Result<Ring, String> {
            let c = CString::new(format!("{name}_{suffix}")).map_err(|e| e.to_string())?;
            // SAFETY: valid C string; the EAL is up.
            let r = unsafe { cfdp_ring_create(c.as_ptr(), size) };
            NonNull::new(r).map(Ring).ok_or_else(|| {
                // SAFETY: reads DPDK's thread-local error number.
                rte_error("rte_ring_create", unsafe { cfdp_errno() })
            })
        };
        let (rx, tx) = (ring("rx")?, ring("tx")?);
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: both rings are live; rte_eth_from_rings copies the pointers.
        let port = unsafe { cfdp_ring_port(c.as_ptr(), rx.0.as_ptr(), tx.0.as_ptr()) };
        if port < 0 {
            // SAFETY: reads DPDK's thread-local error number.
            return Err(rte_error("rte_eth_from_rings", unsafe { cfdp_errno() }));
        }
        Ok((self.port_name(port as u16)?, rx, tx))
    }
}

/// An `rte_ring` of mbufs (lives for the rest of the process).
pub struct Ring(NonNull<c_void>);

// SAFETY: the rings are created single-producer/single-consumer; Ring's
// methods take &mut self, so one thread at a time uses each end here.
unsafe impl Send for Ring {}

impl Ring {
    /// Copies frames into mbufs from `pool` and enqueues them; returns how
    /// many fit.
    pub fn inject(&mut self, pool: &Mempool, frames: &[&[u8]]) -> usize {
        let data: Vec<*const u8> = frames.iter().map(|f| f.as_ptr()).collect();
        let len: Vec<u32> = frames.iter().map(|f| f.len() as u32).collect();
        // SAFETY: data/len describe frames.len() live slices; the pool and
        // ring are live.
        unsafe {
            cfdp_ring_inject(
                self.0.as_ptr(),
                pool.0.as_ptr(),
                data.as_ptr(),
                len.as_ptr(),
                frames.len() as u32,
            ) as usize
        }
    }

    /// Takes every packet waiting in the ring (copied out, mbufs freed).
    pub fn collect(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16384];
        loop {
            // SAFETY: buf has buf.len() writable bytes.
            let n =
                unsafe { cfdp_ring_collect(self.0.as_ptr(), buf.as_mut_ptr(), buf.len() as u32) };
            if n < 0 {
                return out;
            }
            out.push(buf[..(n as usize).min(buf.len())].to_vec());
        }
    }
}

/// Registers the calling (non-EAL) thread with DPDK so it gets an lcore id
/// and per-lcore mempool caches; unregisters when dropped.
pub struct ThreadRegistration(());

impl ThreadRegistration {
    pub fn new() -> Result<Self, String> {
        // SAFETY: registers the current thread; the EAL must be up.
        let r = unsafe { cfdp_thread_register() };
        if r != 0 {
            // SAFETY: reads DPDK's thread-local error number.
            return Err(rte_error("rte_thread_register", unsafe { cfdp_errno() }));
        }
        Ok(Self(()))
    }
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        // SAFETY: this thread registered itself in `new`.
        unsafe { cfdp_thread_unregister() }
    }
}

/// A packet mbuf pool (lives until the process ends: DPDK ports keep
/// references to it).
pub struct Mempool(NonNull<c_void>);

// SAFETY: rte_mempool is designed for concurrent use by many threads.
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

/// One received burst: owns its mbufs until [`RxBurst::dispatch`] sends or
/// frees them (or the burst is dropped, which frees them).
pub struct RxBurst {
    mbufs: [*mut c_void; MAX_BURST],
    data: [*const u8; MAX_BURST],
    data_len: [u32; MAX_BURST],
    pkt_len: [u32; MAX_BURST],
    len: usize,
}

/// What [`RxBurst::dispatch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dispatched {
    pub sent: u64,
    /// Transmit queue full: freed and counted.
    pub tx_dropped: u64,
    /// Dropped by verdict.
    pub dropped: u64,
}

impl Default for RxBurst {
    fn default() -> Self {
        Self::new()
    }
}

impl RxBurst {
    pub fn new() -> Self {
        Self {
            mbufs: [std::ptr::null_mut(); MAX_BURST],
            data: [std::ptr::null(); MAX_BURST],
            data_len: [0; MAX_BURST],
            pkt_len: [0; MAX_BURST],
            len: 0,
        }
    }

    /// Receives up to `max` (≤ [`MAX_BURST`]) packets from a port's queue.
    /// Any packets still held are freed first.
    pub fn receive(&mut self, port: u16, queue: u16, max: usize) -> usize {
        self.free_all();
        let max = max.min(MAX_BURST) as u16;
        // SAFETY: mbufs has room for max pointers; the port and queue were
        // set up (rx_burst checks neither in release builds, so callers
        // only pass started ports' configured queues).
        let n = unsafe { cfdp_rx_burst(port, queue, self.mbufs.as_mut_ptr(), max) };
        // SAFETY: the first n entries are valid mbufs just received.
        unsafe {
            cfdp_mbuf_views(
                self.mbufs.as_ptr(),
                n,
                self.data.as_mut_ptr(),
                self.data_len.as_mut_ptr(),
                self.pkt_len.as_mut_ptr(),
            )
        };
        self.len = n as usize;
        self.len
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
        // burst owns until dispatch/free; the borrow ties the slice to self.
        let s = unsafe { std::slice::from_raw_parts(self.data[i], self.data_len[i] as usize) };
        (s, self.pkt_len[i])
    }

    /// Sends frame i out of `dest[i]` = (port, queue), or frees it when
    /// `None`. Frames a transmit queue does not accept are freed and
    /// counted. The burst is empty afterwards.
    pub fn dispatch(&mut self, dest: &[Option<(u16, u16)>]) -> Dispatched {
        assert!(dest.len() >= self.len);
        let mut out = Dispatched::default();
        let mut drop = [std::ptr::null_mut(); MAX_BURST];
        let mut nd = 0;
        let mut done = [false; MAX_BURST];
        for i in 0..self.len {
            if done[i] {
                continue;
            }
            let Some(d) = dest[i] else {
                drop[nd] = self.mbufs[i];
                nd += 1;
                out.dropped += 1;
                done[i] = true;
                continue;
            };
            // Gather every frame for this (port, queue), in order.
            let mut tx = [std::ptr::null_mut(); MAX_BURST];
            let mut nt = 0;
            for j in i..self.len {
                if !done[j] && dest[j] == Some(d) {
                    tx[nt] = self.mbufs[j];
                    nt += 1;
                    done[j] = true;
                }
            }
            // SAFETY: tx holds nt owned mbufs; tx_burst takes ownership of
            // the first `sent`.
            let sent = unsafe { cfdp_tx_burst(d.0, d.1, tx.as_mut_ptr(), nt as u16) } as usize;
            out.sent += sent as u64;
            for &m in &tx[sent..nt] {
                drop[nd] = m;
                nd += 1;
                out.tx_dropped += 1;
            }
        }
        if nd > 0 {
            // SAFETY: drop holds nd owned mbufs, freed once.
            unsafe { cfdp_free_bulk(drop.as_mut_ptr(), nd as u32) };
        }
        self.len = 0;
        out
    }

    fn free_all(&mut self) {
        if self.len > 0 {
            // SAFETY: the first len mbufs are owned by this burst.
            unsafe { cfdp_free_bulk(self.mbufs.as_mut_ptr(), self.len as u32) };
            self.len = 0;
        }
    }
}

impl Drop for RxBurst {
    fn drop(&mut self) {
        self.free_all();
    }
}
