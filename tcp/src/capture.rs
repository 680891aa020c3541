//! A capture wrapper: any [`PollDevice`] whose received and transmitted frames are also written
//! to a classic pcap stream (Ethernet link type), stamped with the `Instant`s smoltcp passes
//! in. Wireshark and tshark read the result.

use std::cell::RefCell;
use std::io::Write;

use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::Instant;

use crate::device::{DeviceStats, PollDevice};

/// The pcap sink shared by the tokens of a [`Capture`].
#[derive(Debug)]
struct Sink<W: Write> {
    out: W,
    snaplen: usize,
    frames: u64,
    errors: u64,
}

impl<W: Write> Sink<W> {
    fn header(&mut self) {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        h[16..20].copy_from_slice(&(self.snaplen as u32).to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
        if self.out.write_all(&h).is_err() {
            self.errors += 1;
        }
    }

    fn record(&mut self, at: Instant, frame: &[u8]) {
        let us = at.total_micros().max(0);
        let incl = frame.len().min(self.snaplen);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(incl as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        // A failed write loses the capture record, never the packet.
        if self.out.write_all(&h).is_err() || self.out.write_all(&frame[..incl]).is_err() {
            self.errors += 1;
        } else {
            self.frames += 1;
        }
    }
}

/// Wraps a device and writes every frame it receives or sends to `W` in pcap format.
#[derive(Debug)]
pub struct Capture<D, W: Write> {
    inner: D,
    sink: RefCell<Sink<W>>,
}

impl<D: PollDevice, W: Write> Capture<D, W> {
    /// Wraps `inner`, writing the pcap file header to `out` at once. Frames longer than
    /// `snaplen` are cut.
    pub fn new(inner: D, out: W, snaplen: usize) -> Self {
        let mut sink = Sink {
            out,
            snaplen,
            frames: 0,
            errors: 0,
        };
        sink.header();
        Capture {
            inner,
            sink: RefCell::new(sink),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Frames written and write errors so far.
    pub fn captured(&self) -> (u64, u64) {
        let s = self.sink.borrow();
        (s.frames, s.errors)
    }

    /// Flushes the sink and returns the wrapped device and the writer.
    pub fn into_parts(self) -> (D, W) {
        let mut s = self.sink.into_inner();
        let _ = s.out.flush();
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
}

impl<T: phy::TxToken, W: Write> phy::TxToken for CaptureTxToken<'_, T, W> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let (sink, at) = (self.sink, self.at);
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
            },
        ))
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let tx = self.inner.transmit(timestamp)?;
        Some(CaptureTxToken {
            inner: tx,
            sink: &self.sink,
            at: timestamp,
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

    fn flush(&mut self) -> bool {
        // The sink is flushed by into_parts (or by the writer's own drop), not per poll.
        self.inner.flush()
    }

    fn stats(&self) -> DeviceStats {
        self.inner.stats()
    }
}
