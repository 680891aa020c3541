//! pcapng capture of rx and tx traffic with DPDK's `rte_pcapng`, readable by Wireshark.

use std::ffi::CString;
use std::io::{Seek, SeekFrom};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::ptr::NonNull;

use crate::{ffi, Eal, Error, Mbuf, Mempool};

/// Serialises `rte_pcapng_copy` across threads (see [`PcapngWriter::record`]).
static COPY_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
///
/// The stamps are converted to wall-clock time here, not by DPDK: 22.11's `rte_pcapng_copy`
/// reads its own base on the first conversion in the process, after the caller read the
/// TSC, so the first delta is negative, wraps, and puts that packet and every later one some
/// 2^64 / TSC-Hz seconds (about two centuries) in the future.
#[derive(Debug)]
pub struct PcapngWriter {
    raw: NonNull<ffi::rte_pcapng>,
    pool: Mempool,
    pending: Vec<*mut ffi::rte_mbuf>,
    path: String,
    snaplen: u32,
    /// The ports with an interface in the file (the only ones rte_pcapng maps).
    ports: Vec<u16>,
    clock: TscClock,
    written: u64,
    dropped: u64,
    /// A second descriptor of the file (sharing its offset with rte_pcapng's): a write cut
    /// short (disk full) is taken back to `good` through it, so the file never ends in
    /// half a block, which would make everything written after it unreadable.
    file: std::fs::File,
    /// The file's length up to its last whole batch of blocks.
    good: u64,
    /// Octets the next flush pretends it could not write (tests of the cut-back).
    short_next: u64,
}

// SAFETY: the writer owns its file handle and pending copies; it is used from one thread at a
// time (&mut self).
unsafe impl Send for PcapngWriter {}

impl PcapngWriter {
    /// Creates (truncates) `path` and writes the section header with the interfaces of all
    /// probed ports: only their packets can be recorded ([`PcapngWriter::record`]). Copies
    /// are cut to `snaplen` bytes (1 to 65,535; a pool of the copies' size is made, named
    /// `pool_name`, which must be unique). A failure leaves no file descriptor open and
    /// no pool made, so the same call may be tried again.
    pub fn create(eal: &Eal, path: &str, pool_name: &str, snaplen: u32) -> Result<Self, Error> {
        let perr = |reason: String| Error::Pcapng {
            path: path.into(),
            reason,
        };
        // rte_pcapng_mbuf_size adds the mbuf, the options and the alignment in 32 bits
        // (a snaplen near 2^32 wraps round to a small pool); a copy cut to 0 octets holds
        // nothing.
        if snaplen == 0 || snaplen > u32::from(u16::MAX) {
            return Err(perr(format!(
                "snaplen {snaplen} is not in 1..=65535 (octets kept of each packet)"
            )));
        }
        // SAFETY: pure computation; snaplen is small enough not to wrap.
        let room = unsafe { ffi::rte_pcapng_mbuf_size(snaplen) };
        let room = u16::try_from(room).map_err(|_| {
            perr(format!(
                "snaplen {snaplen} needs mbufs of {room} octets (at most 65,535)"
            ))
        })?;
        // The interfaces rte_pcapng_fdopen writes, in its order (RTE_ETH_FOREACH_DEV). A
        // port outside them has no interface in the file and no entry in its port map.
        let mut ports = Vec::new();
        // SAFETY: the EAL is up; the call only reads the port table.
        let mut p = unsafe { ffi::rte_eth_find_next_owned_by(0, 0) };
        while p < u64::from(ffi::RTE_MAX_ETHPORTS) {
            ports.push(p as u16);
            // SAFETY: as above; p + 1 <= RTE_MAX_ETHPORTS.
            p = unsafe { ffi::rte_eth_find_next_owned_by(p as u16 + 1, 0) };
        }
        let file = std::fs::File::create(path).map_err(|e| perr(e.to_string()))?;
        let app = CString::new("warpcore").expect("no NUL");
        // SAFETY: the descriptor is open and writable; rte_pcapng takes it over only on
        // success (then closed by rte_pcapng_close), on failure `file` still closes it. The
        // strings are copied.
        let raw = unsafe {
            ffi::rte_pcapng_fdopen(
                file.as_raw_fd(),
                std::ptr::null(),
                std::ptr::null(),
                app.as_ptr(),
                std::ptr::null(),
            )
        };
        let Some(raw) = NonNull::new(raw) else {
            // The writes of the headers failed (errno), or the allocation (rte_errno).
            let io = std::io::Error::last_os_error();
            return Err(perr(format!(
                "writing the section header failed: {io}; {}",
                Error::last_reason()
            )));
        };
        let keep = match file
            .try_clone()
            .and_then(|mut f| Ok((f.stream_position()?, f)))
        {
            Ok(k) => k,
            Err(e) => {
                // SAFETY: raw came from rte_pcapng_fdopen and is closed once (with its fd).
                unsafe { ffi::rte_pcapng_close(raw.as_ptr()) };
                let _ = file.into_raw_fd();
                return Err(perr(format!("a second descriptor of the file: {e}")));
            }
        };
        let _ = file.into_raw_fd();
        let pool = match Mempool::new(eal, pool_name, 1023, 0, room) {
            Ok(pool) => pool,
            Err(e) => {
                // SAFETY: raw came from rte_pcapng_fdopen and is closed once (with its fd).
                unsafe { ffi::rte_pcapng_close(raw.as_ptr()) };
                return Err(e);
            }
        };
        Ok(PcapngWriter {
            raw,
            pool,
            pending: Vec::with_capacity(32),
            path: path.into(),
            snaplen,
            ports,
            clock: TscClock::new(),
            written: 0,
            dropped: 0,
            good: keep.0,
            file: keep.1,
            short_next: 0,
        })
    }

    /// Whether packets of `port` can be recorded: it was probed when the file was created
    /// and has an interface in it; else an error naming the ports that have one.
    pub fn covers(&self, port: u16) -> Result<(), Error> {
        if self.ports.contains(&port) {
            return Ok(());
        }
        Err(Error::Pcapng {
            path: self.path.clone(),
            reason: format!(
                "port {port} has no interface in the capture (only the ports probed when it \
                 was created have: {:?})",
                self.ports
            ),
        })
    }

    /// Records a copy of `m`, seen on `port`/`queue` going `dir`. When the writer's pool is
    /// empty the copy is skipped and counted in [`PcapngWriter::dropped`]. A port the file
    /// has no interface for ([`PcapngWriter::covers`]) is refused, the packet counted in
    /// `dropped` too: DPDK would write it under an interface read from outside its port map.
    pub fn record(&mut self, port: u16, queue: u16, m: &Mbuf, dir: Direction) -> Result<(), Error> {
        if let Err(e) = self.covers(port) {
            self.dropped += 1;
            return Err(e);
        }
        let d = match dir {
            Direction::Rx => ffi::RTE_PCAPNG_DIRECTION_IN,
            Direction::Tx => ffi::RTE_PCAPNG_DIRECTION_OUT,
        };
        let cycles = crate::tsc_cycles();
        // 22.11's rte_pcapng_copy sets a process-wide time base on its first call without a
        // lock: writers on two threads (a capture per engine core) would race on it in C.
        let _one_at_a_time = COPY_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: m is a valid packet borrowed for the call (only read); the pool is valid.
        // The copy carries `port`, which rte_pcapng_write_packets looks up in its port map:
        // checked above to be one of the ports the map was filled for.
        let copy = unsafe {
            ffi::rte_pcapng_copy(
                port,
                u32::from(queue),
                m.as_raw(),
                self.pool.as_ptr(),
                self.snaplen,
                cycles,
                d,
            )
        };
        let Some(copy) = NonNull::new(copy) else {
            self.dropped += 1;
            return Ok(());
        };
        // SAFETY: a packet rte_pcapng_copy just made for us; owned here until flush.
        let mut copy = unsafe { Mbuf::from_raw(copy) };
        // The enhanced packet block's header, prepended in the first segment: its timestamp
        // (high and low 32 bits, in the host's byte order like the whole file) is DPDK's
        // wrong one (see the type's docs) until replaced here.
        // The copy is made of fresh direct mbufs (rte_pktmbuf_copy), which data_mut never
        // refuses; were it refused, the block would keep DPDK's stamp.
        let ns = self.clock.ns(cycles);
        if let Some(stamp) = copy.data_mut().ok().and_then(|d| d.get_mut(12..20)) {
            stamp[..4].copy_from_slice(&((ns >> 32) as u32).to_ne_bytes());
            stamp[4..].copy_from_slice(&(ns as u32).to_ne_bytes());
        }
        self.pending.push(copy.into_raw().as_ptr());
        if self.pending.len() == 32 {
            self.flush();
        }
        Ok(())
    }

    /// Writes the pending copies to the file.
    pub fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let n = self.pending.len() as u16;
        // What the blocks take in the file: each copy is one whole block.
        let want: u64 = self
            .pending
            .iter()
            // SAFETY: each pointer is a live copy owned here (freed below).
            .map(|&m| u64::from(unsafe { (*m).pkt_len }))
            .sum();
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
        let wrote = u64::try_from(ret)
            .ok()
            .map(|w| w.saturating_sub(std::mem::take(&mut self.short_next)));
        if wrote == Some(want) {
            self.good += want;
            self.written += u64::from(n);
        } else {
            // A failed or short write (a full disk): the batch is lost, and the file is cut
            // back to its last whole block so that what follows, if anything can still be
            // written, is readable (the shared offset moves back with it).
            self.dropped += u64::from(n);
            let _ = self.file.set_len(self.good);
            let _ = self.file.seek(SeekFrom::Start(self.good));
        }
        self.pending.clear();
    }

    /// Packets written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Packets that could not be captured: the pool was empty, or a write of their batch
    /// failed or was cut short (the file then ends at the last whole packet before them).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// What the file lacks, in words, when packets could not be captured (`None` when
    /// every packet was written): the drop prints it to standard error once the last batch
    /// is flushed, so that a tool's capture missing packets says so where its user looks,
    /// whichever tool and device held the writer.
    pub fn loss_report(&self) -> Option<String> {
        (self.dropped > 0).then(|| {
            format!(
                "pcapng capture {}: {} packet(s) NOT captured (capture pool empty, or a write \
                 failed or was cut short, e.g. a full disk); {} written",
                self.path, self.dropped, self.written
            )
        })
    }

    /// Makes the next batch's write look `octets` short of what it wrote, as a full disk
    /// cuts one (for tests of the cut-back).
    #[doc(hidden)]
    pub fn pretend_next_write_short(&mut self, octets: u64) {
        self.short_next = octets;
    }

    /// The file path.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl Drop for PcapngWriter {
    fn drop(&mut self) {
        self.flush();
        if let Some(report) = self.loss_report() {
            eprintln!("warning: {report}");
        }
        // SAFETY: raw came from rte_pcapng_fdopen and is closed exactly once.
        unsafe { ffi::rte_pcapng_close(self.raw.as_ptr()) }
    }
}

/// Converts time-stamp counter readings to nanoseconds since 1970 from one reading of each
/// clock taken together.
#[derive(Debug, Clone, Copy)]
struct TscClock {
    tsc: u64,
    ns: u64,
    hz: u64,
}

impl TscClock {
    fn new() -> TscClock {
        let before = crate::tsc_cycles();
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let after = crate::tsc_cycles();
        TscClock {
            tsc: before + after.wrapping_sub(before) / 2,
            ns: wall,
            // SAFETY: reads the frequency the EAL measured at initialisation.
            hz: unsafe { ffi::rte_get_tsc_hz() },
        }
    }

    /// The time `tsc` stands for. A reading a little before the base (another core's
    /// counter) comes out a little earlier, not wrapped round.
    fn ns(&self, tsc: u64) -> u64 {
        if self.hz == 0 {
            return self.ns;
        }
        let delta = i128::from(tsc.wrapping_sub(self.tsc) as i64);
        let ns = i128::from(self.ns) + delta * 1_000_000_000 / i128::from(self.hz);
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::TscClock;

    #[test]
    fn tsc_readings_convert_around_the_base_without_wrapping() {
        let c = TscClock {
            tsc: 1_000_000,
            ns: 1_700_000_000_000_000_000,
            hz: 2_500_000_000,
        };
        assert_eq!(c.ns(1_000_000), c.ns);
        assert_eq!(c.ns(1_000_000 + 2_500_000_000), c.ns + 1_000_000_000);
        // An hour on: no overflow in the product.
        assert_eq!(
            c.ns(1_000_000 + 3600 * 2_500_000_000),
            c.ns + 3600 * 1_000_000_000
        );
        // 2,500 cycles before the base (another core's counter): a microsecond earlier.
        assert_eq!(c.ns(1_000_000 - 2_500), c.ns - 1_000);
        assert_eq!(TscClock { hz: 0, ..c }.ns(5), c.ns);
    }
}
