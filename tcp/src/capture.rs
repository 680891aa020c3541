//! A capture wrapper: any [`PollDevice`] whose received and transmitted frames are also written
//! to a classic pcap stream (Ethernet link type), stamped with the `Instant`s smoltcp passes
//! in. A transmitted frame is recorded when it leaves the device, once: when its token is
//! consumed, or, for a device that hands frames to a driver in [`PollDevice::flush`]
//! ([`PollDevice::defers_tx`], a DPDK port), when the driver has taken it (a frame the tx
//! ring refused is recorded by the flush that sends it, one never sent not at all), stamped
//! with the last poll's `Instant`. Wireshark and tshark read the result. A snaplen of 0 (every frame cut to nothing) or
//! one the file header cannot hold is refused: [`Capture::try_new`] says so with
//! [`StackError::InvalidArgument`], [`Capture::new`] writes nothing and counts errors.

use std::cell::RefCell;
use std::io::Write;

use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::Instant;

use crate::device::{DeviceStats, PollDevice};
use crate::StackError;

/// The largest snaplen a capture takes: the pcap file header holds it in 32 bits.
pub const MAX_SNAPLEN: usize = u32::MAX as usize;

/// Refuses a snaplen no capture can use: 0, which cuts every frame to nothing (a file of
/// empty records), and one above [`MAX_SNAPLEN`], which the file header cannot hold.
fn check_snaplen(snaplen: usize) -> Result<(), StackError> {
    match snaplen {
        0 => Err(StackError::InvalidArgument(
            "snaplen",
            "of 0 would cut every frame to nothing: give at least 1 octet (65535 keeps \
             every frame whole)",
        )),
        n if n > MAX_SNAPLEN => Err(StackError::InvalidArgument(
            "snaplen",
            "is above 4294967295 octets, more than the pcap file header can hold",
        )),
        _ => Ok(()),
    }
}

/// The pcap sink shared by the tokens of a [`Capture`].
#[derive(Debug)]
struct Sink<W: Write> {
    out: W,
    snaplen: usize,
    frames: u64,
    errors: u64,
    /// What the writer has not yet taken of the last record (or of the file header): a
    /// write that failed or was cut short leaves its tail here, and it is written before
    /// anything else, so the stream only ever holds whole records (half a record would make
    /// every record after it unreadable). Reused for each record, so it is also where a
    /// record is put together and handed to the writer in one piece.
    owed: Vec<u8>,
    /// Whether `owed` ends a frame's record (counted in `frames` once written).
    owed_frame: bool,
    /// The snaplen was refused ([`check_snaplen`]): nothing is written, and the header
    /// and every frame count as errors.
    refused: bool,
}

impl<W: Write> Sink<W> {
    /// Writes what is owed; false, keeping the rest owed, when the writer fails.
    fn pay(&mut self) -> bool {
        while !self.owed.is_empty() {
            match self.out.write(&self.owed) {
                Ok(0) => return false,
                Ok(n) => {
                    self.owed.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if std::mem::take(&mut self.owed_frame) {
            self.frames += 1;
        }
        true
    }

    fn header(&mut self) {
        if self.refused {
            self.errors += 1;
            return;
        }
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&(self.snaplen as u32).to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        self.owed.extend_from_slice(&h);
        if !self.pay() {
            self.errors += 1;
        }
    }

    fn record(&mut self, at: Instant, frame: &[u8]) {
        // A failed write loses capture records, never the packet. While an earlier record
        // is still owed (the writer keeps failing), this one is lost.
        if self.refused || !self.pay() {
            self.errors += 1;
            return;
        }
        let us = at.total_micros().max(0);
        let incl = frame.len().min(self.snaplen);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.owed.extend_from_slice(&h);
        self.owed.extend_from_slice(&frame[..incl]);
        self.owed_frame = true;
        if !self.pay() {
            self.errors += 1;
        }
    }

    /// Writes what is owed and flushes the writer (a failure counted in `errors`).
    fn finish(&mut self) {
        if !self.pay() || self.out.flush().is_err() {
            self.errors += 1;
        }
    }
}

/// Wraps a device and writes every frame it receives or sends to `W` in pcap format.
#[derive(Debug)]
pub struct Capture<D, W: Write> {
    inner: D,
    sink: RefCell<Sink<W>>,
    /// The `Instant` of the last receive or transmit call: the stamp of the frames the next
    /// flush reports ([`PollDevice::flush_observed`]).
    last_at: Instant,
}

impl<D: PollDevice, W: Write> Capture<D, W> {
    /// Wraps `inner` (telling it so: [`PollDevice::observe_tx`]), writing the pcap file
    /// header to `out` at once. Frames longer than
    /// `snaplen` are cut. A snaplen of 0 (every frame cut to nothing) or above
    /// [`MAX_SNAPLEN`] (more than the file header holds) is refused with
    /// [`StackError::InvalidArgument`] naming `snaplen`; `inner` and `out` are dropped.
    pub fn try_new(inner: D, out: W, snaplen: usize) -> Result<Self, StackError> {
        check_snaplen(snaplen)?;
        Ok(Self::new(inner, out, snaplen))
    }

    /// [`Capture::try_new`] for a snaplen known to be good (a constant such as 65535).
    /// A snaplen `try_new` refuses is refused here too, without a panic: nothing at all is
    /// written to `out` (not a file of empty records a reader would take for a capture),
    /// the file header and every frame count as errors in [`Capture::captured`] and
    /// [`Capture::finish`] (which a caller checks before judging a capture complete),
    /// and [`Capture::refused`] says why. The packets pass all the same.
    pub fn new(inner: D, out: W, snaplen: usize) -> Self {
        let mut sink = Sink {
            out,
            snaplen,
            frames: 0,
            errors: 0,
            owed: Vec::new(),
            owed_frame: false,
            refused: check_snaplen(snaplen).is_err(),
        };
        sink.header();
        let mut inner = inner;
        inner.observe_tx();
        Capture {
            inner,
            sink: RefCell::new(sink),
            last_at: Instant::ZERO,
        }
    }

    /// Why this capture writes nothing: the snaplen [`Capture::new`] was given, refused as
    /// [`Capture::try_new`] would refuse it. `None` for a capture that writes.
    pub fn refused(&self) -> Option<StackError> {
        check_snaplen(self.sink.borrow().snaplen).err()
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Frames written whole and failed writes so far. A record a write cut short is
    /// finished by the next write before anything else, so the stream holds whole records
    /// only and a writer that recovers loses nothing; a frame that comes while the writer
    /// still refuses an earlier record's tail is not recorded (one more error).
    pub fn captured(&self) -> (u64, u64) {
        let s = self.sink.borrow();
        (s.frames, s.errors)
    }

    /// Writes what a failed write left owed and flushes the writer (a failure is one more
    /// error); returns [`Capture::captured`]. Call it before judging a capture complete:
    /// errors mean frames are missing from it.
    pub fn finish(&mut self) -> (u64, u64) {
        self.sink.get_mut().finish();
        self.captured()
    }

    /// Finishes the sink ([`Capture::finish`]) and returns the wrapped device and the writer.
    pub fn into_parts(mut self) -> (D, W) {
        self.finish();
        let s = self.sink.into_inner();
        (self.inner, s.out)
    }
}

/// Receive token of a [`Capture`].
#[derive(Debug)]
pub struct CaptureRxToken<'a, T, W: Write> {
    inner: T,
    sink: &'a RefCell<Sink<W>>,
    at: Instant,
}

impl<T: phy::RxToken, W: Write> phy::RxToken for CaptureRxToken<'_, T, W> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let (sink, at) = (self.sink, self.at);
        self.inner.consume(|frame| {
            sink.borrow_mut().record(at, frame);
            f(frame)
        })
    }

    fn meta(&self) -> phy::PacketMeta {
        self.inner.meta()
    }
}

/// Transmit token of a [`Capture`].
#[derive(Debug)]
pub struct CaptureTxToken<'a, T, W: Write> {
    inner: T,
    sink: &'a RefCell<Sink<W>>,
    at: Instant,
    /// The device sends in its flush ([`PollDevice::defers_tx`]): recorded there, not here.
    deferred: bool,
}

impl<T: phy::TxToken, W: Write> phy::TxToken for CaptureTxToken<'_, T, W> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let (sink, at) = (self.sink, self.at);
        if self.deferred {
            return self.inner.consume(len, f);
        }
        self.inner.consume(len, |buf| {
            let r = f(buf);
            sink.borrow_mut().record(at, buf);
            r
        })
    }

    fn set_meta(&mut self, meta: phy::PacketMeta) {
        self.inner.set_meta(meta)
    }
}

impl<D: PollDevice, W: Write> Device for Capture<D, W> {
    type RxToken<'a>
        = CaptureRxToken<'a, D::RxToken<'a>, W>
    where
        Self: 'a;
    type TxToken<'a>
        = CaptureTxToken<'a, D::TxToken<'a>, W>
    where
        Self: 'a;

    fn receive(&mut self, timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.last_at = timestamp;
        let deferred = self.inner.defers_tx();
        let (rx, tx) = self.inner.receive(timestamp)?;
        Some((
            CaptureRxToken {
                inner: rx,
                sink: &self.sink,
                at: timestamp,
            },
            CaptureTxToken {
                inner: tx,
                sink: &self.sink,
                at: timestamp,
                deferred,
            },
        ))
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        self.last_at = timestamp;
        let deferred = self.inner.defers_tx();
        let tx = self.inner.transmit(timestamp)?;
        Some(CaptureTxToken {
            inner: tx,
            sink: &self.sink,
            at: timestamp,
            deferred,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

impl<D: PollDevice, W: Write> PollDevice for Capture<D, W> {
    fn begin_poll(&mut self) {
        self.inner.begin_poll()
    }

    fn end_rx(&mut self) {
        self.inner.end_rx()
    }

    fn flush(&mut self) -> bool {
        // The sink is flushed by into_parts (or by the writer's own drop), not per poll.
        self.flush_observed(&mut |_| {})
    }

    fn defers_tx(&self) -> bool {
        self.inner.defers_tx()
    }

    fn observe_tx(&mut self) {
        self.inner.observe_tx()
    }

    fn flush_observed(&mut self, sent: &mut dyn FnMut(&[u8])) -> bool {
        // What the driver took in this flush (nothing from a device that sends with its
        // tokens, recorded as they were consumed).
        let (sink, at) = (&self.sink, self.last_at);
        self.inner.flush_observed(&mut |frame| {
            sink.borrow_mut().record(at, frame);
            sent(frame)
        })
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer into memory that, once `cut_at` octets are in, takes no more in that call
    /// and fails the next one (a full disk freed again, a socket's send timeout), then
    /// takes everything.
    struct Flaky {
        out: Vec<u8>,
        cut_at: usize,
        failed: bool,
    }

    impl Write for Flaky {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.failed && self.out.len() >= self.cut_at {
                self.failed = true;
                return Err(std::io::Error::other("no space left"));
            }
            let n = if self.failed {
                buf.len()
            } else {
                buf.len().min(self.cut_at - self.out.len())
            };
            self.out.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The records of a pcap stream (little-endian, Ethernet): each one's timestamp in
    /// microseconds, original length and captured octets. Panics where the stream is not
    /// whole records.
    fn records(pcap: &[u8]) -> Vec<(u64, usize, Vec<u8>)> {
        assert_eq!(pcap[..4], 0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(pcap[20..24], 1u32.to_le_bytes(), "LINKTYPE_ETHERNET");
        let snaplen = u32::from_le_bytes(pcap[16..20].try_into().unwrap()) as usize;
        let word = |at: usize| u32::from_le_bytes(pcap[at..at + 4].try_into().unwrap());
        let mut at = 24;
        let mut out = Vec::new();
        while at < pcap.len() {
            assert!(at + 16 <= pcap.len(), "half a record header at {at}");
            let us = u64::from(word(at)) * 1_000_000 + u64::from(word(at + 4));
            let (incl, orig) = (word(at + 8) as usize, word(at + 12) as usize);
            assert!(
                incl <= snaplen && incl <= orig,
                "record at {at}: {incl} of {orig}"
            );
            assert!(at + 16 + incl <= pcap.len(), "half a record at {at}");
            out.push((us, orig, pcap[at + 16..at + 16 + incl].to_vec()));
            at += 16 + incl;
        }
        out
    }

    fn frame(n: usize, fill: u8) -> Vec<u8> {
        vec![fill; n]
    }

    /// A write cut short in the middle of a record (the file header, a record header, a
    /// frame) leaves the stream whole: the record's tail goes first at the next write, and
    /// every record is there. Before, the next record followed the half-written one, and
    /// everything after it was unreadable.
    #[test]
    fn a_write_cut_short_leaves_whole_records() {
        let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(60 + 300 * i, i as u8 + 1)).collect();
        let sizes: Vec<usize> = frames.iter().map(|f| 16 + f.len().min(1000)).collect();
        let record_at = |i: usize| 24 + sizes[..i].iter().sum::<usize>();
        // In the file header; in record 2's header; in record 2's frame; right before
        // record 3; in the last record (finished by `finish`).
        for cut_at in [
            10,
            record_at(2) + 5,
            record_at(2) + 100,
            record_at(3),
            record_at(4) + 20,
        ] {
            let mut sink = Sink {
                out: Flaky {
                    out: Vec::new(),
                    cut_at,
                    failed: false,
                },
                snaplen: 1000,
                frames: 0,
                errors: 0,
                owed: Vec::new(),
                owed_frame: false,
                refused: false,
            };
            sink.header();
            for (i, f) in frames.iter().enumerate() {
                sink.record(Instant::from_micros(1_500_000 + i as i64), f);
            }
            sink.finish();
            assert_eq!((sink.frames, sink.errors), (5, 1), "cut at {cut_at}");
            let got = records(&sink.out.out);
            assert_eq!(got.len(), 5, "cut at {cut_at}");
            for (i, (us, orig, data)) in got.iter().enumerate() {
                assert_eq!(*us, 1_500_000 + i as u64);
                assert_eq!(*orig, frames[i].len());
                assert_eq!(
                    data[..],
                    frames[i][..frames[i].len().min(1000)],
                    "frame {i}"
                );
            }
        }
    }

    /// A writer that fails for good: the stream ends in whole records and a record's head
    /// at most, every frame after the failure is counted as an error.
    #[test]
    fn a_writer_that_keeps_failing_loses_records_counted() {
        struct Full(Vec<u8>);
        impl Write for Full {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                if self.0.len() >= 100 {
                    return Err(std::io::Error::other("no space left"));
                }
                let n = buf.len().min(100 - self.0.len());
                self.0.extend_from_slice(&buf[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut sink = Sink {
            out: Full(Vec::new()),
            snaplen: 65535,
            frames: 0,
            errors: 0,
            owed: Vec::new(),
            owed_frame: false,
            refused: false,
        };
        sink.header();
        for i in 0..4 {
            sink.record(Instant::from_micros(i), &frame(40, 7));
        }
        sink.finish();
        // 24 + 56 octets: one whole record, the second cut short; the second's failure,
        // the two frames after it and the final flush of its tail are the errors.
        assert_eq!((sink.frames, sink.errors), (1, 4));
        assert_eq!(records(&sink.out.0[..80]).len(), 1);
    }

    /// A snaplen of 0 wrote a pcap whose every record was cut to nothing (a capture in
    /// name only). `try_new` refuses it, and one the file header cannot hold, naming the
    /// argument; `new` writes nothing, says why, and counts the header and every frame as
    /// errors.
    #[test]
    fn a_snaplen_of_zero_is_refused() {
        use crate::link::{pair, LinkConfig};
        let (a, _b) = pair(&LinkConfig::default());
        let e = Capture::try_new(a, Vec::new(), 0).unwrap_err();
        assert!(
            matches!(e, StackError::InvalidArgument("snaplen", _)),
            "{e}"
        );
        assert!(e.to_string().contains("cut every frame to nothing"), "{e}");
        #[cfg(target_pointer_width = "64")]
        {
            let (a, _b) = pair(&LinkConfig::default());
            let e = Capture::try_new(a, Vec::new(), MAX_SNAPLEN + 1).unwrap_err();
            assert!(
                matches!(e, StackError::InvalidArgument("snaplen", _)),
                "{e}"
            );
        }
        let (a, _b) = pair(&LinkConfig::default());
        let (_, out) = Capture::try_new(a, Vec::new(), 1).unwrap().into_parts();
        assert_eq!(out[16..20], 1u32.to_le_bytes());

        let (a, _b) = pair(&LinkConfig::default());
        let mut cap = Capture::new(a, Vec::new(), 0);
        assert!(matches!(
            cap.refused(),
            Some(StackError::InvalidArgument("snaplen", _))
        ));
        for i in 0..3 {
            cap.sink
                .borrow_mut()
                .record(Instant::from_micros(i), &frame(60, 9));
        }
        assert_eq!(cap.finish(), (0, 4), "the header and three frames");
        let (_, out) = cap.into_parts();
        assert!(out.is_empty(), "{} octets written", out.len());

        let (a, _b) = pair(&LinkConfig::default());
        assert_eq!(Capture::new(a, Vec::new(), 65535).refused(), None);
    }
}
