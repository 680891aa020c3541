//! Opening the engine through the apps library's device layer ([`warpcore_apps::device`]):
//! one engine core on the DPDK port `--memif`/`--vdev`/`--pci`/`--eal` names. The server is
//! the memif server of a `--memif` socket.

use warpcore_apps::device::{Endpoint, EngineOptions, MemifRole};

use crate::cli::Cli;

/// Initialises the EAL, opens the port and starts one engine core on it.
pub fn open(cli: &Cli) -> Result<Endpoint, String> {
    let local = cli.local()?;
    let dev = warpcore_apps::device::DeviceArgs {
        ip: Some(local),
        ..cli.dev.clone()
    };
    // The port's own MAC (siw's side learns it by ARP); --mac sets another.
    let o = EngineOptions::new("iwping", MemifRole::serving(cli.server));
    #[cfg(feature = "dpdk")]
    {
        dev.open_engine(&o).map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "dpdk"))]
    {
        let _ = (dev, o);
        Err("this iwping was built without DPDK".into())
    }
}
