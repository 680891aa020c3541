//! Configuration from the environment, for programs that cannot take Warpcore's flags: the
//! drop-in rdma-core libraries run unmodified applications whose command lines are theirs
//! (issue 13), so the device, the address, the cores, the poll mode and the MPA options
//! come from `WARPCORE_*` variables instead. A variable that is missing where one is
//! needed, or whose value is bad (not UTF-8 too), is an [`EnvError`] naming it and saying
//! what was wanted.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `WARPCORE_MEMIF_SERVER=PATH` | a net_memif port, this process the memif server of `PATH` (no `,` or `=` in it) |
//! | `WARPCORE_MEMIF=PATH` | a net_memif port, this process the memif client of `PATH` (no `,` or `=` in it) |
//! | `WARPCORE_VDEV=ARGS[;ARGS...]` | DPDK vdevs (`net_tap0,iface=...`, `net_af_packet0,...`) |
//! | `WARPCORE_PCI=ADDR` | a NIC by PCI address (not beside a memif or a vdev) |
//! | `WARPCORE_EAL="ARGS"` | EAL arguments verbatim (replacing the defaults) |
//! | `WARPCORE_IP=A.B.C.D[/LEN]` | this side's address (required), /24 when no length |
//! | `WARPCORE_GATEWAY=A.B.C.D` | default gateway |
//! | `WARPCORE_MAC=xx:xx:xx:xx:xx:xx` | this side's Ethernet address |
//! | `WARPCORE_CORES=LIST` | CPUs: the first for the application, the rest for engine cores |
//! | `WARPCORE_MTU=N` | IP MTU, 576 to 9000 |
//! | `WARPCORE_CAPTURE=PATH` | pcapng of this side's traffic |
//! | `WARPCORE_POLL_MODE=thread\|busy\|caller` | engine threads that park when idle (default) or spin, or none: the application's polls and waits run the engine (a background thread of the drop-in runs it otherwise) |
//! | `WARPCORE_CRC=on\|off` | MPA CRC32c (default on) |
//! | `WARPCORE_MARKERS=on\|off` | MPA markers (default off) |
//! | `WARPCORE_MPA_REV=1\|2` | MPA revision (default 2) |
//! | `WARPCORE_P2P=none\|write\|send\|read` | RFC 6581 peer-to-peer mode and the RTR offered (default write) |

use std::ffi::OsString;
use std::path::PathBuf;

use warpcore_verbs::{Drive, MpaParams, RtrTypes};

use crate::device::{CpuList, DeviceArgs, IpPrefix, Mac};

/// A `WARPCORE_*` variable that is missing or bad.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}: {why}")]
pub struct EnvError {
    /// The variable.
    pub var: &'static str,
    /// What is wrong and what was wanted.
    pub why: String,
}

/// What the environment configures.
#[derive(Debug, Clone)]
pub struct EnvConfig {
    /// The device (the same fields as the tools' flags).
    pub dev: DeviceArgs,
    /// Who runs the engine cores.
    pub drive: Drive,
    /// MPA options for connect, listen and accept.
    pub mpa: MpaParams,
}

/// Reads the configuration from the process environment.
pub fn from_env() -> Result<EnvConfig, EnvError> {
    from_os_vars(|k| std::env::var_os(k))
}

/// One variable's value as text: `None` when unset, an [`EnvError`] naming it when it is
/// set but not UTF-8 (taken for unset, it would have left a default in its place or been
/// reported as missing).
pub fn utf8_var(var: &'static str, v: Option<OsString>) -> Result<Option<String>, EnvError> {
    v.map(|v| {
        v.into_string().map_err(|v| EnvError {
            var,
            why: format!("{v:?} is not valid UTF-8"),
        })
    })
    .transpose()
}

/// Reads the configuration from `get` (the environment, or a map in tests).
pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<EnvConfig, EnvError> {
    from_os_vars(|k| get(k).map(OsString::from))
}

/// Reads the configuration from `get`, values as the environment holds them (any octets).
pub fn from_os_vars(get: impl Fn(&str) -> Option<OsString>) -> Result<EnvConfig, EnvError> {
    let bad = |var: &'static str, why: String| EnvError { var, why };
    let parse = |var: &'static str, want: &str| -> Result<Option<String>, EnvError> {
        match utf8_var(var, get(var))? {
            Some(v) if v.trim().is_empty() => Err(bad(var, format!("is empty; expected {want}"))),
            v => Ok(v),
        }
    };
    let mut dev = DeviceArgs::default();
    // The MTU first: a memif port's ring arguments depend on it (whole-frame buffers for
    // jumbo frames, `DeviceArgs::memif_ring_args`).
    if let Some(m) = parse("WARPCORE_MTU", "576 to 9000")? {
        let mtu: u16 = m
            .parse()
            .ok()
            .filter(|v| (576..=9000).contains(v))
            .ok_or_else(|| bad("WARPCORE_MTU", format!("{m:?}: expected 576 to 9000")))?;
        dev.mtu = Some(mtu);
    }
    // Which of the two memif variables made the memif port, if one did.
    let mut memif_var: Option<&'static str> = None;
    for (var, role) in [
        ("WARPCORE_MEMIF_SERVER", "server"),
        ("WARPCORE_MEMIF", "client"),
    ] {
        if let Some(p) = parse(var, "a socket path")? {
            if dev.vdev.iter().any(|v| v.starts_with("net_memif")) {
                return Err(bad(
                    var,
                    "WARPCORE_MEMIF_SERVER and WARPCORE_MEMIF exclude each other: this \
                     process is one end of one memif socket"
                        .into(),
                ));
            }
            // The path goes into DPDK's device arguments, `key=value` pairs split at ','
            // and '=': such a path would be cut there (a socket other than the one named,
            // or an EAL that refuses an argument it did not get).
            if let Some(c) = p.chars().find(|c| matches!(c, ',' | '=')) {
                return Err(bad(
                    var,
                    format!(
                        "{p:?}: a memif socket path cannot hold {c:?} (DPDK's device \
                         arguments are split there); pick another path"
                    ),
                ));
            }
            memif_var = Some(var);
            dev.vdev.push(format!(
                "net_memif0,role={role},socket={p},socket-abstract=no,{}",
                dev.memif_ring_args()
            ));
        }
    }
    if let Some(v) = parse("WARPCORE_VDEV", "DPDK vdev arguments")? {
        dev.vdev
            .extend(v.split(';').filter(|s| !s.is_empty()).map(String::from));
    }
    dev.pci = parse("WARPCORE_PCI", "a PCI address")?;
    if let (Some(pci), false) = (&dev.pci, dev.vdev.is_empty()) {
        // The port is the first vdev's (the environment has no --dpdk-port): the NIC would
        // only be probed, never used.
        let other = memif_var.unwrap_or("WARPCORE_VDEV");
        return Err(bad(
            "WARPCORE_PCI",
            format!("{pci:?} and {other} name two ports; the engine runs on one: set one of them"),
        ));
    }
    dev.eal = parse("WARPCORE_EAL", "EAL arguments")?;
    if !dev.names_port() {
        return Err(bad(
            "WARPCORE_MEMIF_SERVER",
            "no device: set WARPCORE_MEMIF_SERVER or WARPCORE_MEMIF (a memif socket path), \
             WARPCORE_VDEV, WARPCORE_PCI or WARPCORE_EAL"
                .into(),
        ));
    }
    let ip = parse("WARPCORE_IP", "A.B.C.D[/LEN]")?.ok_or_else(|| {
        bad(
            "WARPCORE_IP",
            "not set; expected this side's A.B.C.D[/LEN]".into(),
        )
    })?;
    dev.ip = Some(
        ip.parse::<IpPrefix>()
            .map_err(|e| bad("WARPCORE_IP", format!("{ip:?}: {e}")))?,
    );
    if let Some(g) = parse("WARPCORE_GATEWAY", "A.B.C.D")? {
        dev.gateway = Some(
            g.parse()
                .map_err(|_| bad("WARPCORE_GATEWAY", format!("{g:?} is not an IPv4 address")))?,
        );
    }
    if let Some(m) = parse("WARPCORE_MAC", "xx:xx:xx:xx:xx:xx")? {
        dev.mac = Some(m.parse::<Mac>().map_err(|e| bad("WARPCORE_MAC", e))?);
    }
    if let Some(c) = parse("WARPCORE_CORES", "a CPU list such as 0,2-3")? {
        dev.cores = Some(c.parse::<CpuList>().map_err(|e| bad("WARPCORE_CORES", e))?);
    }
    dev.capture = parse("WARPCORE_CAPTURE", "a file path")?.map(PathBuf::from);
    let drive = match parse("WARPCORE_POLL_MODE", "thread, busy or caller")?.as_deref() {
        None | Some("thread") => Drive::Thread,
        Some("busy") => Drive::BusyPoll,
        Some("caller") => Drive::Caller,
        Some(o) => {
            return Err(bad(
                "WARPCORE_POLL_MODE",
                format!("{o:?}: expected thread, busy or caller"),
            ))
        }
    };
    let on_off = |var: &'static str, default: bool| -> Result<bool, EnvError> {
        match parse(var, "on or off")?.as_deref() {
            None => Ok(default),
            Some("on") => Ok(true),
            Some("off") => Ok(false),
            Some(o) => Err(bad(var, format!("{o:?}: expected on or off"))),
        }
    };
    let mut mpa = MpaParams {
        crc: on_off("WARPCORE_CRC", true)?,
        markers: on_off("WARPCORE_MARKERS", false)?,
        ..MpaParams::default()
    };
    mpa.rev = match parse("WARPCORE_MPA_REV", "1 or 2")?.as_deref() {
        None | Some("2") => 2,
        Some("1") => 1,
        Some(o) => return Err(bad("WARPCORE_MPA_REV", format!("{o:?}: expected 1 or 2"))),
    };
    let p2p = parse("WARPCORE_P2P", "none, write, send or read")?;
    let (peer_to_peer, offer) = match p2p.as_deref() {
        None | Some("write") => (true, RtrTypes::WRITE),
        Some("send") => (true, RtrTypes::SEND),
        Some("read") => (true, RtrTypes::READ),
        Some("none") => (false, RtrTypes::WRITE),
        Some(o) => {
            return Err(bad(
                "WARPCORE_P2P",
                format!("{o:?}: expected none, write, send or read"),
            ))
        }
    };
    if peer_to_peer && mpa.rev == 1 && p2p.is_some() {
        return Err(bad(
            "WARPCORE_P2P",
            "peer-to-peer mode needs MPA revision 2 (RFC 6581): set WARPCORE_MPA_REV=2 or \
             WARPCORE_P2P=none"
                .into(),
        ));
    }
    mpa.peer_to_peer = peer_to_peer && mpa.rev == 2;
    mpa.rtr_offer = offer;
    Ok(EnvConfig { dev, drive, mpa })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn run(vars: &[(&str, &str)]) -> Result<EnvConfig, EnvError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn a_memif_port_gets_the_rings_of_its_mtu() {
        // Jumbo frames need whole-frame buffers (DPDK 22.11's memif redelivers chained
        // frames); WARPCORE_MTU may come after the socket in any order.
        for (mtu, rings) in [(None, "rsize=10"), (Some("9000"), "rsize=9,bsize=9216")] {
            let mut vars = vec![
                ("WARPCORE_MEMIF", "/tmp/y.sock"),
                ("WARPCORE_IP", "10.0.0.2"),
            ];
            vars.extend(mtu.map(|m| ("WARPCORE_MTU", m)));
            let c = run(&vars).unwrap();
            assert_eq!(
                c.dev.vdev,
                [format!(
                    "net_memif0,role=client,socket=/tmp/y.sock,socket-abstract=no,{rings}"
                )]
            );
        }
    }

    #[test]
    fn a_full_configuration_is_read() {
        let c = run(&[
            ("WARPCORE_MEMIF_SERVER", "/tmp/x.sock"),
            ("WARPCORE_IP", "198.18.0.2/16"),
            ("WARPCORE_GATEWAY", "198.18.0.1"),
            ("WARPCORE_CORES", "0,1"),
            ("WARPCORE_MTU", "9000"),
            ("WARPCORE_POLL_MODE", "busy"),
            ("WARPCORE_CRC", "off"),
            ("WARPCORE_P2P", "read"),
        ])
        .unwrap();
        assert_eq!(
            c.dev.vdev,
            ["net_memif0,role=server,socket=/tmp/x.sock,socket-abstract=no,rsize=9,bsize=9216"]
        );
        assert_eq!(c.dev.ip.unwrap().len, 16);
        assert_eq!(c.dev.engine_cpus(), vec![1]);
        assert_eq!(c.dev.mtu, Some(9000));
        assert_eq!(c.drive, Drive::BusyPoll);
        assert!(!c.mpa.crc && c.mpa.peer_to_peer && c.mpa.rev == 2);
        assert_eq!(c.mpa.rtr_offer, RtrTypes::READ);
    }

    #[test]
    fn errors_name_the_variable() {
        for (vars, var, says) in [
            (
                &[("WARPCORE_IP", "1.2.3.4")][..],
                "WARPCORE_MEMIF_SERVER",
                "no device",
            ),
            (&[("WARPCORE_MEMIF", "/s")][..], "WARPCORE_IP", "not set"),
            (
                &[("WARPCORE_MEMIF", "/s"), ("WARPCORE_IP", "1.2.3")][..],
                "WARPCORE_IP",
                "bad IPv4",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_MEMIF_SERVER", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                ][..],
                "WARPCORE_MEMIF",
                "exclude each other",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                    ("WARPCORE_MTU", "100"),
                ][..],
                "WARPCORE_MTU",
                "576 to 9000",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                    ("WARPCORE_CRC", "yes"),
                ][..],
                "WARPCORE_CRC",
                "on or off",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                    ("WARPCORE_POLL_MODE", "spin"),
                ][..],
                "WARPCORE_POLL_MODE",
                "thread, busy or caller",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                    ("WARPCORE_MPA_REV", "1"),
                    ("WARPCORE_P2P", "send"),
                ][..],
                "WARPCORE_P2P",
                "revision 2",
            ),
            (
                &[
                    ("WARPCORE_MEMIF", "/s"),
                    ("WARPCORE_IP", "1.2.3.4"),
                    ("WARPCORE_CORES", "x"),
                ][..],
                "WARPCORE_CORES",
                "bad CPU list",
            ),
            (
                &[("WARPCORE_MEMIF", ""), ("WARPCORE_IP", "1.2.3.4")][..],
                "WARPCORE_MEMIF",
                "is empty",
            ),
        ] {
            let e = run(vars).unwrap_err();
            assert_eq!(e.var, var, "{vars:?}: {e}");
            assert!(e.to_string().contains(says), "{vars:?}: {e}");
            assert!(e.to_string().starts_with(var), "{e}");
        }
    }

    /// A value that is not UTF-8 is named, not taken for unset: WARPCORE_CRC would have
    /// fallen back to its default silently, and a memif path was reported as no device
    /// under WARPCORE_MEMIF_SERVER.
    #[test]
    fn non_utf8_value_is_named() {
        use std::os::unix::ffi::OsStringExt;
        for (var, base) in [
            (
                "WARPCORE_CRC",
                &[("WARPCORE_MEMIF", "/s"), ("WARPCORE_IP", "1.2.3.4")][..],
            ),
            ("WARPCORE_MEMIF", &[("WARPCORE_IP", "1.2.3.4")][..]),
            ("WARPCORE_IP", &[("WARPCORE_MEMIF", "/s")][..]),
        ] {
            let e = from_os_vars(|k| {
                if k == var {
                    return Some(OsString::from_vec(b"o\xffn".to_vec()));
                }
                base.iter()
                    .find(|(b, _)| *b == k)
                    .map(|(_, v)| OsString::from(v))
            })
            .unwrap_err();
            assert_eq!(e.var, var, "{e}");
            assert!(e.to_string().contains("not valid UTF-8"), "{e}");
        }
    }

    /// A memif socket path with a ',' or '=' would be cut in DPDK's device arguments: it
    /// is refused, naming the variable, not passed on as another socket.
    #[test]
    fn memif_path_that_device_arguments_cut_is_refused() {
        for var in ["WARPCORE_MEMIF", "WARPCORE_MEMIF_SERVER"] {
            for path in ["/tmp/a,b.sock", "/tmp/a=b.sock"] {
                let e = run(&[(var, path), ("WARPCORE_IP", "1.2.3.4")]).unwrap_err();
                assert_eq!(e.var, var, "{e}");
                assert!(e.to_string().contains("cannot hold"), "{e}");
            }
        }
    }

    /// WARPCORE_PCI beside a memif or a vdev named a NIC the engine never used: the port is
    /// the first vdev's (the environment has no `--dpdk-port`), the NIC only probed. It is
    /// refused, naming both, not ignored.
    #[test]
    fn pci_beside_a_vdev_is_refused() {
        for other in [
            ("WARPCORE_MEMIF", "/s"),
            ("WARPCORE_MEMIF_SERVER", "/s"),
            ("WARPCORE_VDEV", "net_tap0,iface=wc0"),
        ] {
            let e = run(&[
                other,
                ("WARPCORE_PCI", "0000:00:04.0"),
                ("WARPCORE_IP", "1.2.3.4"),
            ])
            .unwrap_err();
            assert_eq!(e.var, "WARPCORE_PCI", "{e}");
            assert!(e.to_string().contains(other.0), "{e}");
        }
        let c = run(&[("WARPCORE_PCI", "0000:00:04.0"), ("WARPCORE_IP", "1.2.3.4")]).unwrap();
        assert_eq!(c.dev.pci.as_deref(), Some("0000:00:04.0"));
    }
}
