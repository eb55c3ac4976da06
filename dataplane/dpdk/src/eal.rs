//! The EAL, mempools and thread registration.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use cfdp_dpdk_sys as sys;

use crate::DpdkError;

/// The error DPDK reports for `code` (negative or positive errno).
pub(crate) fn rte_error(what: impl Into<String>, code: c_int) -> DpdkError {
    let e = code.unsigned_abs() as c_int;
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string for any error number.
    let msg = unsafe { CStr::from_ptr(sys::cfdp_strerror(e)) };
    DpdkError::Rte {
        what: what.into(),
        errno: e,
        message: msg.to_string_lossy().into_owned(),
    }
}

/// DPDK's thread-local error number, as an error about `what`.
pub(crate) fn last_error(what: impl Into<String>) -> DpdkError {
    // SAFETY: reads DPDK's thread-local error number.
    rte_error(what, unsafe { sys::cfdp_errno() })
}

static EAL_UP: AtomicBool = AtomicBool::new(false);

/// The initialised EAL. DPDK allows one initialisation per process; every
/// DPDK object here borrows the `Eal`, so none outlives [`Eal::cleanup`].
pub struct Eal {
    _not_send: PhantomData<*const ()>,
}

impl Eal {
    /// `rte_eal_init` with `args` (program name first).
    pub fn init(args: &[String]) -> Result<Eal, DpdkError> {
        if EAL_UP.swap(true, Ordering::AcqRel) {
            return Err(DpdkError::Usage(
                "the DPDK EAL is already initialised in this process".into(),
            ));
        }
        let c: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(a.as_str())
                    .map_err(|_| DpdkError::Usage(format!("EAL argument {a:?} contains NUL")))
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
        let r = unsafe { sys::cfdp_eal_init(argc, argv_ptr) };
        if r < 0 {
            return Err(last_error("rte_eal_init"));
        }
        Ok(Eal {
            _not_send: PhantomData,
        })
    }

    /// Ports the EAL found (physical and virtual).
    pub fn port_count(&self) -> u16 {
        // SAFETY: the EAL is initialised (self exists).
        unsafe { sys::cfdp_port_count() }
    }

    /// Port id of a device by name (e.g. `net_pcap0`, a PCI address).
    pub fn port_by_name(&self, name: &str) -> Result<u16, DpdkError> {
        let c = CString::new(name)
            .map_err(|_| DpdkError::Usage(format!("port name {name:?} contains NUL")))?;
        let mut port = 0u16;
        // SAFETY: c is a valid C string, port a valid out pointer.
        let r = unsafe { sys::cfdp_port_by_name(c.as_ptr(), &mut port) };
        if r != 0 {
            return Err(rte_error(format!("port {name}"), r));
        }
        Ok(port)
    }

    /// The device name of a port.
    pub fn port_name(&self, port: u16) -> Result<String, DpdkError> {
        let mut buf = [0 as c_char; 128];
        // SAFETY: buf has buf.len() bytes; the shim NUL-terminates.
        let r = unsafe { sys::cfdp_port_name(port, buf.as_mut_ptr(), buf.len()) };
        if r != 0 {
            return Err(rte_error(format!("name of port {port}"), r));
        }
        // SAFETY: NUL-terminated by the shim within buf.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned())
    }

    /// Creates a packet mbuf pool of `n` mbufs.
    pub fn mempool(&self, name: &str, n: u32, cache: u32) -> Result<Mempool<'_>, DpdkError> {
        let c = CString::new(name)
            .map_err(|_| DpdkError::Usage("pool name contains NUL".to_string()))?;
        // 2048 bytes of data room plus the headroom: DPDK's default size.
        // SAFETY: valid C string; the EAL is initialised.
        let p = unsafe { sys::cfdp_pool_create(c.as_ptr(), n, cache, 2048 + 128) };
        NonNull::new(p)
            .map(|ptr| Mempool {
                ptr,
                _eal: PhantomData,
            })
            .ok_or_else(|| last_error("rte_pktmbuf_pool_create"))
    }

    /// `rte_eal_cleanup`. Takes the `Eal`: every port, queue, pool and
    /// burst borrowed from it is gone by then.
    pub fn cleanup(self) {
        // SAFETY: called once (self is consumed); nothing borrows the EAL.
        unsafe {
            sys::cfdp_eal_cleanup();
        }
    }
}

/// A packet mbuf pool. DPDK has no way to free a pool a port may still
/// reference, so it lives until the EAL is cleaned up.
pub struct Mempool<'eal> {
    pub(crate) ptr: NonNull<c_void>,
    _eal: PhantomData<&'eal Eal>,
}

// SAFETY: rte_mempool is designed for concurrent use by many threads.
unsafe impl Send for Mempool<'_> {}
// SAFETY: as above.
unsafe impl Sync for Mempool<'_> {}

/// Registers the calling (non-EAL) thread with DPDK so it gets an lcore id
/// and per-lcore mempool caches; unregisters when dropped.
pub struct ThreadRegistration<'eal> {
    _eal: PhantomData<&'eal Eal>,
    _not_send: PhantomData<*const ()>,
}

impl<'eal> ThreadRegistration<'eal> {
    pub fn new(_eal: EalRef<'eal>) -> Result<Self, DpdkError> {
        // SAFETY: registers the current thread; the EAL is up (borrowed).
        let r = unsafe { sys::cfdp_thread_register() };
        if r != 0 {
            return Err(last_error("rte_thread_register"));
        }
        Ok(Self {
            _eal: PhantomData,
            _not_send: PhantomData,
        })
    }
}

impl Drop for ThreadRegistration<'_> {
    fn drop(&mut self) {
        // SAFETY: this thread registered itself in `new` (the type is not
        // Send, so it is dropped on that thread).
        unsafe { sys::cfdp_thread_unregister() }
    }
}

/// Proof that the EAL is up, for worker threads: borrowed from the
/// [`Eal`] (which stays on the thread that will clean it up), so it cannot
/// outlive [`Eal::cleanup`].
#[derive(Clone, Copy)]
pub struct EalRef<'eal> {
    _eal: PhantomData<&'eal ()>,
}

impl Eal {
    /// A token worker threads can hold while the EAL is borrowed.
    pub fn token(&self) -> EalRef<'_> {
        EalRef { _eal: PhantomData }
    }
}
