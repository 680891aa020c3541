//! What every role shares: the stack under test, its configuration and clock, the data
//! pattern both sides check, and sending what fits.

use std::time::Instant as StdInstant;

use warpcore_tcp::smoltcp::time::Instant;
use warpcore_tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_tcp::{ConnId, PollDevice, Stack, StackConfig, TcpTuning};

/// The TCP implementation `WARPCORE_TCP` names: `warpcore` (also when unset) or
/// `reference` (smoltcp's socket, for same-run comparisons and bisecting a difference
/// between the two); any other value is an error naming it (it ran Warpcore's TCP, so a
/// misspelt `reference` measured the wrong stack and said nothing).
pub(crate) fn tcp_implementation() -> Result<warpcore_tcp::TcpImplementation, String> {
    match std::env::var("WARPCORE_TCP") {
        Err(std::env::VarError::NotPresent) => Ok(warpcore_tcp::TcpImplementation::Warpcore),
        Ok(v) if v == "warpcore" => Ok(warpcore_tcp::TcpImplementation::Warpcore),
        Ok(v) if v == "reference" => Ok(warpcore_tcp::TcpImplementation::SmoltcpReference),
        Ok(v) => Err(format!(
            "WARPCORE_TCP={v:?}: expected \"warpcore\" or \"reference\""
        )),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!(
            "WARPCORE_TCP={v:?}: expected \"warpcore\" or \"reference\""
        )),
    }
}

/// The stack under test: Warpcore's TCP, or smoltcp's reference with `WARPCORE_TCP=reference`
/// ([`tcp_implementation`], checked by `main` before any run).
pub(crate) fn new_stack<D: PollDevice>(
    device: D,
    cfg: &StackConfig,
    now: Instant,
) -> Result<Stack<D>, warpcore_tcp::StackError> {
    let imp = tcp_implementation().unwrap_or(warpcore_tcp::TcpImplementation::Warpcore);
    Stack::with_implementation(device, cfg, now, imp)
}

/// The process clock, turned into the `Instant`s the stack takes.
#[derive(Debug)]
pub(crate) struct Clock(pub(crate) StdInstant);

impl Clock {
    pub(crate) fn now(&self) -> Instant {
        Instant::from_micros(self.0.elapsed().as_micros() as i64)
    }
}

pub(crate) fn pattern(salt: u32, i: u64) -> u8 {
    (((i >> 2) as u32) ^ salt).to_be_bytes()[(i & 3) as usize]
}

pub(crate) fn fill_pattern(buf: &mut [u8], salt: u32, off: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = pattern(salt, off + k as u64);
    }
}

pub(crate) fn tuning(buffer: usize) -> TcpTuning {
    TcpTuning {
        rx_buffer: buffer,
        tx_buffer: buffer,
        ..TcpTuning::default()
    }
}

pub(crate) fn stack_config(
    mac: [u8; 6],
    ip: Ipv4Cidr,
    gateway: Option<Ipv4Address>,
) -> StackConfig {
    StackConfig {
        mac,
        ip,
        gateway,
        routes: Vec::new(),
        random_seed: u64::from(u32::from_be_bytes(ip.address().octets())) ^ 0x7c9e,
        max_connections: 64,
        out_of_order_budget_bytes: warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
    }
}

/// Sends as much of `pending[*done..]` as fits; returns whether anything was sent.
pub(crate) fn send_some<D: PollDevice>(
    s: &mut Stack<D>,
    c: ConnId,
    data: &[u8],
    done: &mut usize,
) -> bool {
    if *done >= data.len() {
        return false;
    }
    match s.send(c, &data[*done..]) {
        Ok(n) if n > 0 => {
            *done += n;
            true
        }
        _ => false,
    }
}
