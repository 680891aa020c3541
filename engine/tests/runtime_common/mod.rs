//! A core of its own for the runtime's tests: one end of an in-memory link, on the clock
//! the test gives.

use std::sync::Arc;

use warpcore_engine::clock::Clock;
use warpcore_engine::mem::MrTable;
use warpcore_engine::runtime::{spawn_core, CoreHandle, CoreSpec, Drive};
use warpcore_engine::tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::StackConfig;
use warpcore_engine::EngineConfig;

/// The core's hardware address.
pub const CORE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

/// A core at 10.0.0.2/24 with `CORE_MAC` on one end of an in-memory link (the other end
/// returned), driven `drive`, on `clock`.
#[allow(dead_code)] // Not every test file that shares this module uses it.
pub fn core_on(drive: Drive, clock: Clock) -> (CoreHandle, LinkEnd) {
    core_with(drive, clock, EngineConfig::default())
}

/// [`core_on`] with `cfg`.
pub fn core_with(drive: Drive, clock: Clock, cfg: EngineConfig) -> (CoreHandle, LinkEnd) {
    let (spec, peer) = core_spec(drive);
    let mrs = Arc::new(MrTable::new(cfg.mr_table_capacity));
    let handle = spawn_core(0, spec, cfg, mrs, clock).expect("core");
    (handle, peer)
}

/// The spec of a core at 10.0.0.2 on one end of an in-memory link, and the other end.
pub fn core_spec(drive: Drive) -> (CoreSpec<LinkEnd>, LinkEnd) {
    let (ours, peer) = link::pair(&LinkConfig::default());
    let spec = CoreSpec {
        device: Box::new(move || Ok(ours)),
        stack: StackConfig {
            mac: CORE_MAC,
            ip: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, 2), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: 7,
            max_connections: 16,
            out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        },
        cpu: None,
        drive,
    };
    (spec, peer)
}
