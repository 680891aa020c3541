//! Handles never alias (`ConnId`, `ListenerId`: "stale handles are rejected, never
//! aliased"), not even once a table entry has served every one of its 2^32 generations.
//! The generations count with `wrapping_add`: the entry that served generation
//! `u32::MAX` came back at generation 0, so a handle of 2^32 uses before named the
//! connection (or listener) of the entry's next use, and a call on the stale handle (a
//! `release`, an `abort`, an `accept`) reached another user's connection. A table entry
//! is freed and reused LIFO, so one connect/release loop (no network round trip: a
//! release in SYN-SENT sends nothing) walks one slot's generations in a few hours.
//!
//! The tests set the generation counter to where 2^32 - 1 further uses of the entry leave
//! it (a loop of that many connects would take hours), then take the entry once more.

use smoltcp::time::Instant;
use smoltcp::wire::{Ipv4Address, Ipv4Cidr};

use super::Host;
use crate::link::{self, LinkConfig};
use crate::stack::{StackConfig, StackError, TcpTuning};

fn host() -> Host<link::LinkEnd> {
    let (a, _b) = link::pair(&LinkConfig::default());
    let config = StackConfig {
        mac: [0x02, 0, 0, 0, 0, 1],
        ip: Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 1), 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: 7,
        max_connections: 16,
        out_of_order_budget_bytes: crate::OUT_OF_ORDER_BUDGET_DEFAULT,
    };
    Host::new(a, &config, Instant::from_secs(1)).unwrap()
}

const PEER: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 4791);

#[test]
fn a_connection_slot_whose_generations_wrapped_names_no_stale_handle() {
    let mut h = host();
    let tuning = TcpTuning::default();
    let old = h.connect(PEER, None, &tuning).unwrap();
    h.release(old).unwrap();
    // Freed at once (SYN-SENT owes no RST).
    assert!(h.inner.slots[old.slot()].is_none());
    assert_eq!(h.inner.free, vec![old.index]);
    // 2^32 - 1 connect/release cycles on this slot later its last handle had generation
    // u32::MAX (the slot is reused LIFO: every cycle takes it).
    h.inner.generations[old.slot()] = old.generation.wrapping_sub(1);
    let new = h.connect(PEER, None, &tuning).unwrap();
    assert_ne!(new, old, "a stale handle names the new connection");
    assert_eq!(h.state(old), Err(StackError::UnknownConnection));
    assert_eq!(h.release(old), Err(StackError::UnknownConnection));
    assert!(h.state(new).is_ok());
    // Later connections take slots as before.
    h.release(new).unwrap();
    let next = h.connect(PEER, None, &tuning).unwrap();
    assert_eq!(next.slot(), new.slot());
    assert_ne!(next, new);
}

#[test]
fn a_listener_entry_whose_generations_wrapped_names_no_stale_handle() {
    let mut h = host();
    let tuning = TcpTuning::default();
    let old = h.listen(4791, 4, &tuning).unwrap();
    h.unlisten(old).unwrap();
    // 2^32 listen/unlisten cycles on this entry later its generation wrapped to the
    // stale handle's.
    h.inner.listeners[old.0 as usize].generation = old.1;
    let new = h.listen(4791, 4, &tuning).unwrap();
    assert_ne!(new, old, "a stale listener handle names the new listener");
    assert_eq!(h.accept(old), Err(StackError::UnknownListener));
    assert_eq!(h.unlisten(old), Err(StackError::UnknownListener));
    assert_eq!(h.accept(new), Ok(None));
    h.unlisten(new).unwrap();
    let next = h.listen(4791, 4, &tuning).unwrap();
    assert_eq!(next.0, new.0, "entries are reused as before");
}
