//! Two ethdev ports joined back to back by DPDK rings (`rte_eth_from_rings`), for tests and
//! single-process benchmarks without any driver or kernel involvement.

use std::ffi::CString;

use crate::{ffi, Eal, Error, Port};

/// Two ring-backed ports: what one transmits, the other receives.
#[derive(Debug)]
pub struct RingPortPair {
    /// The first port (named `<prefix>_a`).
    pub a: Port,
    /// The second port (named `<prefix>_b`).
    pub b: Port,
}

impl RingPortPair {
    /// Creates rings `<prefix>_ab` and `<prefix>_ba` with `size` slots (a power of two) and the
    /// two ports over them. Names must be unique in the process.
    pub fn new(eal: &Eal, prefix: &str, size: u32) -> Result<RingPortPair, Error> {
        let ring = |suffix: &str| -> Result<*mut ffi::rte_ring, Error> {
            let name = format!("{prefix}_{suffix}");
            let c = CString::new(name.clone()).map_err(|_| Error::NulInArgument(name.clone()))?;
            // SAFETY: EAL is up; c is a valid C string (copied by DPDK). Single producer and
            // single consumer: one tx queue writes and one rx queue reads each ring.
            let r = unsafe {
                ffi::rte_ring_create(
                    c.as_ptr(),
                    size,
                    ffi::rte_socket_id() as i32,
                    ffi::RING_F_SP_ENQ | ffi::RING_F_SC_DEQ,
                )
            };
            if r.is_null() {
                return Err(Error::Ring {
                    name,
                    reason: Error::last_reason(),
                });
            }
            Ok(r)
        };
        let ab = ring("ab")?;
        let ba = ring("ba")?;
        let port = |name: String, rx: *mut ffi::rte_ring, tx: *mut ffi::rte_ring| {
            let c = CString::new(name.clone()).map_err(|_| Error::NulInArgument(name.clone()))?;
            let rxs = [rx];
            let txs = [tx];
            // SAFETY: the rings are valid and live for the rest of the process (never freed);
            // the arrays hold one ring each.
            let id = unsafe {
                ffi::rte_eth_from_rings(
                    c.as_ptr(),
                    rxs.as_ptr(),
                    1,
                    txs.as_ptr(),
                    1,
                    ffi::rte_socket_id(),
                )
            };
            if id < 0 {
                return Err(Error::Ring {
                    name,
                    reason: Error::last_reason(),
                });
            }
            Port::from_id(eal, id as u16)
        };
        let a = port(format!("{prefix}_a"), ba, ab)?;
        let b = port(format!("{prefix}_b"), ab, ba)?;
        Ok(RingPortPair { a, b })
    }
}
