//! `net_ring` ports: in-process packet injection and collection, for tests
//! that drive the real worker loop without a NIC.

use std::ffi::{c_void, CString};
use std::marker::PhantomData;
use std::ptr::NonNull;

use cfdp_dpdk_sys as sys;

use crate::eal::{last_error, Eal, Mempool};
use crate::DpdkError;

/// An `rte_ring` of mbufs (DPDK frees rings only with the EAL).
pub struct Ring<'eal> {
    ptr: NonNull<c_void>,
    _eal: PhantomData<&'eal Eal>,
}

// SAFETY: the rings are created single-producer/single-consumer; Ring's
// methods take &mut self, so one thread at a time uses each end here.
unsafe impl Send for Ring<'_> {}

impl Eal {
    /// A `net_ring` port with one receive and one transmit queue: packets
    /// put into the returned `rx` ring arrive on the port; packets the
    /// port transmits can be taken from `tx`. Returns the port's device
    /// name (DPDK prefixes `name`).
    pub fn ring_port(
        &self,
        name: &str,
        size: u32,
    ) -> Result<(String, Ring<'_>, Ring<'_>), DpdkError> {
        let (port, mut rx, mut tx) = self.ring_port_queues(name, size, 1)?;
        match (rx.pop(), tx.pop()) {
            (Some(r), Some(t)) => Ok((port, r, t)),
            _ => Err(DpdkError::Usage("a ring port without queues".into())),
        }
    }

    /// A `net_ring` port with `queues` receive and transmit queues: ring
    /// `rx[q]` feeds receive queue q, transmit queue q fills ring `tx[q]`
    /// (a multi-queue port whose "RSS" is whatever the injector chooses).
    pub fn ring_port_queues(
        &self,
        name: &str,
        size: u32,
        queues: u16,
    ) -> Result<(String, Vec<Ring<'_>>, Vec<Ring<'_>>), DpdkError> {
        let ring = |suffix: String| -> Result<Ring<'_>, DpdkError> {
            let c = CString::new(format!("{name}_{suffix}"))
                .map_err(|e| DpdkError::Usage(e.to_string()))?;
            // SAFETY: valid C string; the EAL is up.
            let r = unsafe { sys::cfdp_ring_create(c.as_ptr(), size) };
            NonNull::new(r)
                .map(|ptr| Ring {
                    ptr,
                    _eal: PhantomData,
                })
                .ok_or_else(|| last_error("rte_ring_create"))
        };
        let rx: Vec<Ring<'_>> = (0..queues)
            .map(|q| ring(format!("rx{q}")))
            .collect::<Result<_, _>>()?;
        let tx: Vec<Ring<'_>> = (0..queues)
            .map(|q| ring(format!("tx{q}")))
            .collect::<Result<_, _>>()?;
        let rxp: Vec<*mut c_void> = rx.iter().map(|r| r.ptr.as_ptr()).collect();
        let txp: Vec<*mut c_void> = tx.iter().map(|r| r.ptr.as_ptr()).collect();
        let c = CString::new(name).map_err(|e| DpdkError::Usage(e.to_string()))?;
        // SAFETY: rxp/txp hold `queues` live rings each;
        // rte_eth_from_rings copies the pointers.
        let port = unsafe {
            sys::cfdp_ring_port(
                c.as_ptr(),
                rxp.as_ptr(),
                u32::from(queues),
                txp.as_ptr(),
                u32::from(queues),
            )
        };
        if port < 0 {
            return Err(last_error("rte_eth_from_rings"));
        }
        Ok((self.port_name(port as u16)?, rx, tx))
    }
}

impl Ring<'_> {
    /// Copies frames into mbufs from `pool` and enqueues them; returns how
    /// many fit.
    pub fn inject(&mut self, pool: &Mempool<'_>, frames: &[&[u8]]) -> usize {
        let data: Vec<*const u8> = frames.iter().map(|f| f.as_ptr()).collect();
        let len: Vec<u32> = frames.iter().map(|f| f.len() as u32).collect();
        // SAFETY: data/len describe frames.len() live slices; the pool and
        // ring are live.
        unsafe {
            sys::cfdp_ring_inject(
                self.ptr.as_ptr(),
                pool.ptr.as_ptr(),
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
            let n = unsafe {
                sys::cfdp_ring_collect(self.ptr.as_ptr(), buf.as_mut_ptr(), buf.len() as u32)
            };
            if n < 0 {
                return out;
            }
            out.push(buf[..(n as usize).min(buf.len())].to_vec());
        }
    }
}
