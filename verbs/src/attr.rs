//! What a Warpcore device says about itself (`ibv_query_device`, `ibv_query_port`,
//! `ibv_query_gid`): an iWARP device with one Ethernet port whose one GID is its IPv4
//! address, and the limits of the engine configuration it was opened with.

use std::net::Ipv4Addr;

/// The transport of a device (`ibv_transport_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// iWARP (`IBV_TRANSPORT_IWARP`): RDMAP over DDP over MPA over TCP.
    Iwarp,
}

/// Atomicity guarantees (`ibv_atomic_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AtomicCap {
    /// Atomic within this device only (`IBV_ATOMIC_HCA`, RFC 7306 section 5.4 rule 2):
    /// every atomic on a region goes through the engine, not through the CPU's own atomics.
    Device,
}

/// A device's attributes (`ibv_device_attr`, the fields that apply to iWARP).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Device name (`ibv_get_device_name`): `warpcore0`.
    pub name: &'static str,
    /// `IBV_TRANSPORT_IWARP`.
    pub transport: Transport,
    /// Node GUID: the port's MAC address in modified EUI-64 form.
    pub node_guid: u64,
    /// Most queue pairs (every engine core's table).
    pub max_qp: usize,
    /// Most outstanding work requests of one queue (the smaller of the send and receive
    /// depths).
    pub max_qp_wr: usize,
    /// Most scatter/gather elements per work request.
    pub max_sge: usize,
    /// Most entries of one completion queue.
    pub max_cqe: usize,
    /// Most memory registrations (regions, windows and fast registrations together).
    pub max_mr: usize,
    /// Most RDMA Reads and atomics one queue pair serves at once (IRD).
    pub max_qp_rd_atom: u16,
    /// Most RDMA Reads and atomics one queue pair issues at once (ORD).
    pub max_qp_init_rd_atom: u16,
    /// Atomicity of RFC 7306 atomics.
    pub atomic_cap: AtomicCap,
    /// Physical ports: 1.
    pub phys_port_cnt: u8,
}

/// A port's state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PortState {
    /// The engine runs on the port (`IBV_PORT_ACTIVE`).
    Active,
}

/// A port's attributes (`ibv_port_attr`, the fields that apply to iWARP over Ethernet).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// `IBV_PORT_ACTIVE` while the context is open: the engine started the port. (The
    /// Ethernet link's own state is DPDK's; a link that is down shows as connections that
    /// do not come up.)
    pub state: PortState,
    /// The IP MTU of the port.
    pub mtu: usize,
    /// The largest InfiniBand MTU value (256, 512, 1024, 2048 or 4096) not above the IP
    /// MTU, as iWARP providers report `active_mtu`.
    pub active_mtu: u32,
    /// The port's one GID, index 0: its IPv4 address as an IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`). (The kernel's iWARP providers report the MAC followed by zeroes
    /// instead, as the drop-in libibverbs does: `rdma-compat`'s `ibv_query_gid`.)
    pub gid: [u8; 16],
    /// GIDs in the table: 1.
    pub gid_tbl_len: u32,
    /// The port's IPv4 address and prefix length.
    pub addr: (Ipv4Addr, u8),
    /// The port's MAC address.
    pub mac: [u8; 6],
}

/// The modified EUI-64 of a MAC address (the universal/local bit flipped, ff:fe inserted).
pub(crate) fn eui64(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// `::ffff:a.b.c.d`.
pub(crate) fn ipv4_gid(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// The largest InfiniBand MTU value not above `ip_mtu`.
pub(crate) fn ib_mtu(ip_mtu: usize) -> u32 {
    [4096u32, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| *m as usize <= ip_mtu)
        .unwrap_or(256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_guid_and_mtu_follow_the_port() {
        assert_eq!(
            ipv4_gid(Ipv4Addr::new(198, 18, 0, 2)),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2]
        );
        assert_eq!(eui64([0x02, 0x57, 0x43, 0, 0, 2]), 0x0057_43ff_fe00_0002);
        assert_eq!((ib_mtu(1500), ib_mtu(9000), ib_mtu(576)), (1024, 4096, 512));
    }
}
