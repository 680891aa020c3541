//! pcapng capture of rx and tx traffic with DPDK's `rte_pcapng`, readable by Wireshark.

use std::ffi::CString;
use std::os::fd::IntoRawFd;
use std::ptr::NonNull;

use crate::{ffi, Eal, Error, Mbuf, Mempool};

/// Which way a captured packet went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received by the port.
    Rx,
    /// Transmitted by the port.
    Tx,
}

/// Writes copies of packets to a pcapng file.
///
/// Packets are copied (never the originals) into mbufs from the writer's own pool, stamped
/// with the time-stamp counter, and written in batches of up to 32.
#[derive(Debug)]
pub struct PcapngWriter {
    raw: NonNull<ffi::rte_pcapng>,
    pool: Mempool,
    pending: Vec<*mut ffi::rte_mbuf>,
    path: String,
    snaplen: u32,
    written: u64,
    dropped: u64,
}

// SAFETY: the writer owns its file handle and pending copies; it is used from one thread at a
// time (&mut self).
unsafe impl Send for PcapngWriter {}

impl PcapngWriter {
    /// Creates (truncates) `path` and writes the section header with the interfaces of all
    /// probed ports. `pool_name` must be unique; copies are cut to `snaplen` bytes.
    pub fn create(eal: &Eal, path: &str, pool_name: &str, snaplen: u32) -> Result<Self, Error> {
        let perr = |reason: String| Error::Pcapng {
            path: path.into(),
            reason,
        };
        // SAFETY: pure computation.
        let room = unsafe { ffi::rte_pcapng_mbuf_size(snaplen) };
        let room = u16::try_from(room).map_err(|_| perr(format!("snaplen {snaplen} too big")))?;
        let pool = Mempool::new(eal, pool_name, 1023, 0, room)?;
        let file = std::fs::File::create(path).map_err(|e| perr(e.to_string()))?;
        let fd = file.into_raw_fd();
        let app = CString::new("warpcore").expect("no NUL");
        // SAFETY: fd is an open, writable descriptor whose ownership passes to rte_pcapng
        // (closed by rte_pcapng_close); the strings are copied.
        let raw = unsafe {
            ffi::rte_pcapng_fdopen(
                fd,
                std::ptr::null(),
                std::ptr::null(),
                app.as_ptr(),
                std::ptr::null(),
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| perr(Error::last_reason()))?;
        Ok(PcapngWriter {
            raw,
            pool,
            pending: Vec::with_capacity(32),
            path: path.into(),
            snaplen,
            written: 0,
            dropped: 0,
        })
    }

    /// Records a copy of `m`, seen on `port`/`queue` going `dir`. When the writer's pool is
    /// empty the copy is skipped and counted in [`PcapngWriter::dropped`].
    pub fn record(&mut self, port: u16, queue: u16, m: &Mbuf, dir: Direction) {
        let d = match dir {
            Direction::Rx => ffi::RTE_PCAPNG_DIRECTION_IN,
            Direction::Tx => ffi::RTE_PCAPNG_DIRECTION_OUT,
        };
        // SAFETY: m is a valid packet borrowed for the call (only read); the pool is valid.
        let copy = unsafe {
            ffi::rte_pcapng_copy(
                port,
                u32::from(queue),
                m.as_raw(),
                self.pool.as_ptr(),
                self.snaplen,
                crate::tsc_cycles(),
                d,
            )
        };
        if copy.is_null() {
            self.dropped += 1;
            return;
        }
        self.pending.push(copy);
        if self.pending.len() == 32 {
            self.flush();
        }
    }

    /// Writes the pending copies to the file.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let n = self.pending.len() as u16;
        // SAFETY: pending holds n copies made by rte_pcapng_copy, valid for the call.
        let ret = unsafe {
            ffi::rte_pcapng_write_packets(self.raw.as_ptr(), self.pending.as_mut_ptr(), n)
        };
        // DPDK 22.11's header says the copies are freed by the write, but its implementation
        // (like its own dpdk-dumpcap, which frees them after writing) leaves them to the
        // caller: without this the pool runs dry after its size in packets (the test checks).
        for &m in &self.pending {
            // SAFETY: each copy is owned here and freed exactly once.
            unsafe { ffi::wc_pktmbuf_free(m) };
        }
        if ret < 0 {
            self.dropped += u64::from(n);
        } else {
            self.written += u64::from(n);
        }
        self.pending.clear();
    }

    /// Packets written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Packets that could not be captured (pool empty or write error).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The file path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for PcapngWriter {
    fn drop(&mut self) {
        self.flush();
        // SAFETY: raw came from rte_pcapng_fdopen and is closed exactly once.
        unsafe { ffi::rte_pcapng_close(self.raw.as_ptr()) }
    }
}
