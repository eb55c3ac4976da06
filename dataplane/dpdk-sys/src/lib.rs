//! # cfdp-dpdk-sys — the system DPDK, raw
//!
//! Declarations of the C shim in `src/shim.c`, which wraps DPDK's inline
//! fast-path functions (`rte_eth_rx_burst`, `rte_eth_tx_burst`, mbuf
//! fields) and its set-up calls with plain C types. Nothing here is safe to
//! call without the invariants `cfdp-dpdk` keeps; that crate is the safe
//! layer. FFI is crossed per burst, never per packet.
//!
//! Without a system DPDK (pkg-config `libdpdk` ≥ 22.11) the build script
//! compiles no shim and this crate declares nothing ([`AVAILABLE`] is
//! false), so a workspace build needs only the Rust toolchain; the
//! `require` feature turns a missing DPDK into a build error instead.
//!
//! Why not `capsule`: it is pinned to DPDK 19.11 and does not build against
//! the DPDK 22.11 we can install; bindgen would need libclang at build time
//! for a dozen functions.
#![no_std]
// The raw FFI declarations are this crate: unsafe by nature.
#![allow(unsafe_code)]

/// Whether this build found the system DPDK.
pub const AVAILABLE: bool = cfg!(dpdk);

#[cfg(dpdk)]
pub use ffi::*;

#[cfg(dpdk)]
mod ffi {
    use core::ffi::{c_char, c_int, c_void};

    /// Largest burst handled at once.
    pub const MAX_BURST: usize = 32;

    /// A telemetry command's callback (`telemetry_cb`): the command, its
    /// parameters (may be NULL) and the `struct rte_tel_data` to fill.
    pub type TelemetryCb =
        unsafe extern "C" fn(cmd: *const c_char, params: *const c_char, d: *mut c_void) -> c_int;

    /// Longest telemetry dictionary key or string value, NUL included
    /// (`RTE_TEL_MAX_STRING_LEN`).
    pub const TEL_MAX_STRING_LEN: usize = 128;
    /// Most entries in one telemetry dictionary (`RTE_TEL_MAX_DICT_ENTRIES`).
    pub const TEL_MAX_DICT_ENTRIES: usize = 256;

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

    unsafe extern "C" {
        pub fn cfdp_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
        pub fn cfdp_eal_cleanup() -> c_int;
        pub fn cfdp_errno() -> c_int;
        pub fn cfdp_strerror(e: c_int) -> *const c_char;
        pub fn cfdp_thread_register() -> c_int;
        pub fn cfdp_thread_unregister();
        pub fn cfdp_port_count() -> u16;
        pub fn cfdp_port_by_name(name: *const c_char, port: *mut u16) -> c_int;
        pub fn cfdp_pool_create(
            name: *const c_char,
            n: u32,
            cache: u32,
            data_room: u16,
        ) -> *mut c_void;
        pub fn cfdp_port_start(
            port: u16,
            rxq: u16,
            txq: u16,
            nb_rxd: u16,
            nb_txd: u16,
            pool: *mut c_void,
            rss_out: *mut c_int,
            csum_out: *mut c_int,
        ) -> c_int;
        pub fn cfdp_port_stop(port: u16);
        pub fn cfdp_port_stats(port: u16, out: *mut PortStats) -> c_int;
        pub fn cfdp_rx_burst(port: u16, q: u16, mbufs: *mut *mut c_void, n: u16) -> u16;
        pub fn cfdp_tx_burst(port: u16, q: u16, mbufs: *mut *mut c_void, n: u16) -> u16;
        pub fn cfdp_free_bulk(mbufs: *mut *mut c_void, n: u32);
        pub fn cfdp_mbufs_from(
            pool: *mut c_void,
            data: *const *const u8,
            len: *const u32,
            n: u32,
            out: *mut *mut c_void,
        ) -> u32;
        pub fn cfdp_port_name(port: u16, out: *mut c_char, len: usize) -> c_int;
        pub fn cfdp_ring_create(name: *const c_char, count: u32) -> *mut c_void;
        pub fn cfdp_ring_port(
            name: *const c_char,
            rx: *const *mut c_void,
            nrx: u32,
            tx: *const *mut c_void,
            ntx: u32,
        ) -> c_int;
        pub fn cfdp_ring_inject(
            ring: *mut c_void,
            pool: *mut c_void,
            data: *const *const u8,
            len: *const u32,
            n: u32,
        ) -> u32;
        pub fn cfdp_ring_collect(ring: *mut c_void, out: *mut u8, cap: u32) -> c_int;
        // DPDK's telemetry library (exported functions, no shim needed).
        // `d` is an opaque `struct rte_tel_data *` handed to a callback.
        pub fn rte_telemetry_register_cmd(
            cmd: *const c_char,
            f: TelemetryCb,
            help: *const c_char,
        ) -> c_int;
        pub fn rte_tel_data_start_dict(d: *mut c_void) -> c_int;
        pub fn rte_tel_data_add_dict_u64(d: *mut c_void, name: *const c_char, val: u64) -> c_int;
        pub fn rte_tel_data_add_dict_string(
            d: *mut c_void,
            name: *const c_char,
            val: *const c_char,
        ) -> c_int;
        pub fn cfdp_mbuf_views(
            mbufs: *const *mut c_void,
            n: u16,
            data: *mut *const u8,
            data_len: *mut u32,
            pkt_len: *mut u32,
            l4_vouched: *mut u8,
        );
    }
}
