//! Opening contexts on DPDK ports: initialise the EAL once per process
//! ([`init_eal`]), then turn a port into a [`DpdkPort`] (one rx/tx queue pair per engine
//! core) and open a [`crate::Context`] on it with [`crate::Device::Dpdk`].

use warpcore_engine::tcp::dpdk_sys::{Eal, EalBuilder, Mempool, PcapngWriter, Port, PortConfig};
use warpcore_engine::tcp::{DpdkDevice, DpdkDeviceConfig};

pub use warpcore_engine::tcp::dpdk_sys;

use crate::Error;

/// Initialises the DPDK EAL with `args` (EAL options such as `--no-huge`, `--no-pci`,
/// `--vdev=net_memif0,...`, `--file-prefix=...`). Once per process.
pub fn init_eal(program: &str, args: &[String]) -> Result<Eal, Error> {
    EalBuilder::new(program)
        .args(args.iter().map(String::as_str))
        .init()
        .map_err(dpdk)
}

fn dpdk(e: dpdk_sys::Error) -> Error {
    Error::Dpdk(crate::DpdkError(std::sync::Arc::new(e)))
}

/// Initialises the EAL with `eal_args` (vdevs included, e.g.
/// `--vdev=net_memif0,role=server,socket=/tmp/x.sock`) and opens the port `port_name` with
/// one queue: everything a [`crate::Device::Dpdk`] needs for a process with one port.
pub fn open_port(eal_args: &[String], port_name: &str) -> Result<DpdkPort, Error> {
    let eal = init_eal("warpcore", eal_args)?;
    DpdkPort::open(&eal, port_name, 1, 8191)
}

/// The smallest IP MTU a port takes here: the datagram every IPv4 host must accept
/// (RFC 791).
const MTU_MIN: u16 = 576;
/// The largest (jumbo frames).
const MTU_MAX: u16 = 9000;

/// How [`DpdkPort::from_port_with`] configures a port beyond its queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortOptions {
    /// IP MTU (576 to 9,000, else [`Error::Config`]; the pool's mbufs must hold a whole
    /// frame of it); `None` keeps the driver's default (refused with
    /// [`Error::PortUnsupported`] if outside that range).
    pub mtu: Option<u16>,
    /// Hand the port TSO super-frames: each engine core's device joins a connection's
    /// consecutive segments for the port to cut ([`warpcore_engine::tcp::tso`]).
    pub tso: bool,
}

/// A configured, started DPDK port split into one device per engine core.
#[derive(Debug)]
pub struct DpdkPort {
    devices: Vec<DpdkDevice>,
    driver: String,
    pub(crate) mac: [u8; 6],
    pub(crate) mtu: usize,
}

impl DpdkPort {
    /// Configures and starts the port named `name` (e.g. `net_memif0`) with `queues` rx/tx
    /// queue pairs (one per engine core, at least one, else [`Error::Config`]; more than
    /// one enables RSS where the port has it) and a pool of `mbufs` mbufs.
    pub fn open(eal: &Eal, name: &str, queues: u16, mbufs: u32) -> Result<DpdkPort, Error> {
        let port = Port::by_name(eal, name).map_err(dpdk)?;
        let pool = Mempool::new(
            eal,
            &format!("wc_{name}"),
            mbufs,
            256,
            Mempool::DEFAULT_DATA_ROOM,
        )
        .map_err(dpdk)?;
        DpdkPort::from_port(port, pool, queues)
    }

    /// Configures and starts an already opened port (e.g. one end of a
    /// [`dpdk_sys::RingPortPair`]) with `queues` queue pairs over `pool`.
    pub fn from_port(port: Port, pool: Mempool, queues: u16) -> Result<DpdkPort, Error> {
        DpdkPort::from_port_with_mtu(port, pool, queues, None)
    }

    /// [`DpdkPort::from_port`] with the port's IP MTU set to `mtu` (576 to 9,000; the pool's
    /// mbufs must hold a whole frame of it) instead of the driver's default.
    pub fn from_port_with_mtu(
        port: Port,
        pool: Mempool,
        queues: u16,
        mtu: Option<u16>,
    ) -> Result<DpdkPort, Error> {
        DpdkPort::from_port_with(port, pool, queues, PortOptions { mtu, tso: false })
    }

    /// [`DpdkPort::from_port`] with `options`. Asking for TSO on a port that cannot do it
    /// (with checksum offload and chained mbufs; net_tap and most NICs can, net_memif,
    /// net_af_packet and net_ring cannot) is refused with [`Error::PortUnsupported`].
    pub fn from_port_with(
        mut port: Port,
        pool: Mempool,
        queues: u16,
        options: PortOptions,
    ) -> Result<DpdkPort, Error> {
        let PortOptions { mtu, tso } = options;
        // No queue, no device, no engine core: a context on it would have none, and
        // creating a queue pair there divided by zero (round robin over the cores).
        if queues == 0 {
            return Err(Error::Config(warpcore_engine::config::ConfigError {
                field: "queues",
                reason: "must be at least 1 (one per engine core)",
            }));
        }
        if mtu.is_some_and(|m| !(MTU_MIN..=MTU_MAX).contains(&m)) {
            return Err(Error::Config(warpcore_engine::config::ConfigError {
                field: "mtu",
                reason: "the IP MTU must be 576 to 9000 octets",
            }));
        }
        // One core per queue needs every frame of a connection to arrive on the queue of
        // the core that owns it. net_memif delivers a frame on the queue index its peer
        // sent it on, so two processes with the same number of cores pair core k with core
        // k (a connection set up from core k stays on queue k both ways). On an RSS NIC the
        // set-up would have to choose local ports whose hash lands on the QP's core; that is
        // not implemented, so other multi-queue ports are refused.
        if queues != 1 && port.info().driver != "net_memif" {
            return Err(Error::PortUnsupported {
                driver: port.info().driver.clone(),
                what: "run several engine cores (one queue each)",
                why: "only net_memif is queue-symmetric; RSS-steered connection set-up is not \
                      implemented",
            });
        }
        let dev = dpdk;
        let cfg = PortConfig {
            rx_queues: queues,
            tx_queues: queues,
            mtu,
            tso,
            ..PortConfig::default()
        };
        let off = port.configure(&cfg, &pool).map_err(dev)?;
        if tso && !DpdkDevice::tso_possible(&off) {
            return Err(Error::PortUnsupported {
                driver: port.info().driver.clone(),
                what: "use TCP segmentation offload",
                why: "the driver does not offer TSO together with checksum offload and \
                      chained mbufs",
            });
        }
        port.start().map_err(dev)?;
        let mac = port.mac().map_err(dev)?;
        let port_mtu = port.mtu().map_err(dev)?;
        if !(MTU_MIN..=MTU_MAX).contains(&port_mtu) {
            // Its frames would be sized for an MTU the port does not have.
            return Err(Error::PortUnsupported {
                driver: port.info().driver.clone(),
                what: "serve as a device with its default MTU",
                why: "it is outside 576 to 9000 octets (give PortOptions::mtu)",
            });
        }
        let mtu = usize::from(port_mtu);
        let mut devices = Vec::new();
        for q in 0..queues {
            let rx = port.rx_queue(q).map_err(dev)?;
            let tx = port.tx_queue(q).map_err(dev)?;
            devices.push(
                DpdkDevice::new(
                    rx,
                    tx,
                    pool,
                    DpdkDeviceConfig {
                        mtu,
                        ..DpdkDeviceConfig::default()
                    },
                )
                // Not reached: the MTU is 576 to 9000 (checked above) and the rest the defaults.
                .map_err(|_| Error::PortUnsupported {
                    driver: port.info().driver.clone(),
                    what: "run a device on its queues",
                    why: "its MTU is outside 68 to 9000",
                })?,
            );
        }
        Ok(DpdkPort {
            devices,
            driver: port.info().driver.clone(),
            mac,
            mtu,
        })
    }

    /// Records every frame of the first queue into a pcapng file at `path` (DPDK's
    /// `rte_pcapng`); the file is complete once the context is dropped.
    pub fn capture_pcapng(&mut self, eal: &Eal, path: &str, pool_name: &str) -> Result<(), Error> {
        let w = PcapngWriter::create(eal, path, pool_name, self.mtu as u32 + 18).map_err(dpdk)?;
        if let Some(d) = self.devices.first_mut() {
            d.set_pcapng(w).map_err(dpdk)?;
        }
        Ok(())
    }

    /// Stops computing and verifying IPv4/TCP checksums on every queue of this port
    /// ([`DpdkDevice::skip_checksums`]). Refused on anything but net_memif: memif is shared
    /// memory between two processes (no wire, nothing can corrupt a frame), like the
    /// kernel's loopback, which skips checksums too. Both ends must do it, or the end that
    /// still verifies drops every frame of the other.
    pub fn skip_checksums(&mut self) -> Result<(), Error> {
        if self.driver != "net_memif" {
            return Err(Error::PortUnsupported {
                driver: self.driver.clone(),
                what: "skip IPv4/TCP checksums",
                why: "only net_memif is shared memory that nothing can corrupt",
            });
        }
        for d in &mut self.devices {
            d.skip_checksums();
        }
        Ok(())
    }

    /// Has every queue's device join segments into TSO super-frames whatever the port
    /// offers ([`warpcore_engine::tcp::DpdkDevice::force_tso_for_test`]). Only for tests
    /// whose wire cuts them itself ([`warpcore_engine::tcp::gso_wire`]).
    #[doc(hidden)]
    pub fn force_tso_for_test(&mut self) {
        for d in &mut self.devices {
            d.force_tso_for_test();
        }
    }

    /// The port's IP MTU, as the engine uses it.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The DPDK driver's name (`net_memif`, `net_tap`, ...).
    pub fn driver(&self) -> &str {
        &self.driver
    }

    pub(crate) fn into_devices(self) -> Vec<DpdkDevice> {
        self.devices
    }
}
