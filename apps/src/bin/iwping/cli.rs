//! Command line: rping's options (`-s`/`-c`, `-a`, `-p`, `-C`, `-S`, `-v`, `-V`, `-d`) plus
//! the device, addressing and MPA settings of a user-space engine.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::Parser;
use warpcore_verbs::{RtrType, RtrTypes};

use crate::wire::{MAX_SIZE, MIN_SIZE};

/// One RTR type on the command line (RFC 6581 §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RtrArg {
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read Request.
    Read,
    /// Zero-length Send.
    Send,
}

impl Cli {
    /// `--rtr` as a set, or `default` when not given.
    pub fn rtr_types(&self, default: RtrTypes) -> RtrTypes {
        if self.rtr.is_empty() {
            return default;
        }
        self.rtr.iter().fold(RtrTypes::EMPTY, |s, r| {
            s.with(match r {
                RtrArg::Write => RtrType::Write,
                RtrArg::Read => RtrType::Read,
                RtrArg::Send => RtrType::Send,
            })
        })
    }
}

/// What to get wrong on purpose, to provoke a Terminate from the peer or from us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    /// Client: advertise a start buffer STag that does not exist, so the server's RDMA
    /// Read hits an invalid STag at our side and our engine answers with a Terminate.
    /// Server: use a wrong STag for the RDMA Read, so the peer answers with a Terminate.
    BadRkey,
}

/// An rping-compatible client and server over Warpcore (the same exchange as rdma-core's
/// rping: buffer advertisement Sends, an RDMA Read of the client's start buffer, an RDMA
/// Write of the result back, validation of the data pattern).
#[derive(Debug, Parser)]
#[command(name = "iwping", version, disable_version_flag = true)]
pub struct Cli {
    /// Server side: listen on -p and serve one client until it disconnects.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Client side: connect to -a ADDR.
    #[arg(short = 'c')]
    pub client: bool,
    /// Client: the server's address. Server: our own address when --ip is not given.
    #[arg(short = 'a')]
    pub addr: Option<Ipv4Addr>,
    /// TCP port (rping's default 7174).
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Ping count (0: until interrupted, as rping).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u64,
    /// Ping data size in octets.
    #[arg(short = 'S', default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(i64::from(MIN_SIZE)..=i64::from(MAX_SIZE)))]
    pub size: u32,
    /// Display the ping data.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Validate the ping data (client: the echo equals what it sent; server: what it Read
    /// is rping's pattern for that ping).
    #[arg(short = 'V')]
    pub validate: bool,
    /// Debug output (every advertisement and work request).
    #[arg(short = 'd')]
    pub debug: bool,

    /// A DPDK vdev, e.g. net_tap0,iface=wctap0 or net_af_packet0,iface=veth0 (repeatable).
    #[arg(long)]
    pub vdev: Vec<String>,
    /// EAL arguments verbatim instead of the defaults (--no-huge, --no-pci, ...).
    #[arg(long)]
    pub eal: Option<String>,
    /// Our address with prefix length, e.g. 198.18.0.2/24 (server default: -a with /24).
    #[arg(long)]
    pub ip: Option<String>,
    /// Default gateway.
    #[arg(long)]
    pub gateway: Option<Ipv4Addr>,
    /// Ethernet address of our port (default: the port's own).
    #[arg(long)]
    pub mac: Option<String>,
    /// Ask for MPA CRC32c (siw's default is off; either side asking turns it on).
    #[arg(long)]
    pub crc: bool,
    /// MPA revision we send: 1 (RFC 5044) or 2 (RFC 6581 with IRD/ORD).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub mpa_rev: u8,
    /// Client at Rev 2: ask for the peer-to-peer model (RFC 6581 RTR).
    #[arg(long)]
    pub p2p: bool,
    /// RTR types (comma list of write, read, send): the client offers them with --p2p
    /// (default write), the server accepts them (default all three) and marks them in its
    /// Reply.
    #[arg(long, value_delimiter = ',')]
    pub rtr: Vec<RtrArg>,
    /// Require markers from the peer (siw refuses: a clean rejection is the expected end).
    #[arg(long)]
    pub markers: bool,
    /// IRD and ORD we ask for (rping asks rdma_cm for 1 and 1).
    #[arg(long, default_value_t = 1)]
    pub ird_ord: u16,
    /// Record every frame of our port into this pcapng file.
    #[arg(long)]
    pub capture: Option<PathBuf>,
    /// Seconds to wait for any one step (connection, completion) before giving up.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Client: seconds to keep retrying a refused connection (the server may still boot).
    #[arg(long, default_value_t = 0)]
    pub retry: u64,
    /// Client: milliseconds to wait after the connection is established before the first
    /// Send. Linux siw as responder sends its MPA Reply before it hooks the socket to the
    /// QP (siw_accept: siw_send_mpareqrep, then siw_qp_socket_assoc), and ignores data that
    /// arrives in between, so an FPDU sent at once can sit unread (docs/interop.md). rping
    /// leaves the same gap naturally (its event thread wakes the main thread first).
    #[arg(long, default_value_t = 100)]
    pub settle_ms: u64,
    /// Provoke a remote access error on purpose (Terminate tests).
    #[arg(long, value_enum)]
    pub fault: Option<Fault>,
}

impl Cli {
    /// Checks what clap cannot: a role, an address where one is needed.
    pub fn validate(&self) -> Result<(), String> {
        if !self.server && !self.client {
            return Err("give -s (server) or -c (client)".into());
        }
        if self.client && self.addr.is_none() {
            return Err("-c needs -a ADDR (the server's address)".into());
        }
        if self.client && self.ip.is_none() {
            return Err("-c needs --ip ADDR/LEN (our own address)".into());
        }
        if self.server && self.ip.is_none() && self.addr.is_none() {
            return Err("-s needs --ip ADDR/LEN or -a ADDR (our own address)".into());
        }
        if self.p2p && self.mpa_rev != 2 {
            return Err("--p2p needs --mpa-rev 2 (RFC 6581)".into());
        }
        if self.ird_ord == 0 || self.ird_ord > 0x3FFF {
            return Err("--ird-ord must be 1..=16383".into());
        }
        Ok(())
    }

    /// Our address and prefix length.
    pub fn local(&self) -> Result<(Ipv4Addr, u8), String> {
        match (&self.ip, self.addr) {
            (Some(s), _) => {
                let (a, l) = s.split_once('/').unwrap_or((s.as_str(), "24"));
                let a: Ipv4Addr = a.parse().map_err(|_| format!("--ip: bad address {s:?}"))?;
                let l: u8 = l
                    .parse()
                    .ok()
                    .filter(|l| *l <= 32)
                    .ok_or_else(|| format!("--ip: bad prefix length in {s:?}"))?;
                Ok((a, l))
            }
            (None, Some(a)) if self.server => Ok((a, 24)),
            _ => Err("no local address".into()),
        }
    }

    /// `--mac` parsed.
    pub fn mac(&self) -> Result<Option<[u8; 6]>, String> {
        let Some(s) = &self.mac else { return Ok(None) };
        let v: Vec<u8> = s
            .split(':')
            .map(|p| u8::from_str_radix(p, 16))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("--mac: bad address {s:?}"))?;
        let m: [u8; 6] = v
            .try_into()
            .map_err(|_| format!("--mac: bad address {s:?}"))?;
        Ok(Some(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        // rping's -V (validate) replaces clap's short version flag.
        Cli::command().debug_assert();
        let c = Cli::try_parse_from(["iwping", "-s", "-a", "198.18.0.2", "-V", "-vv", "-S", "26"])
            .unwrap();
        assert!(c.validate && c.server);
        assert_eq!((c.verbose, c.size, c.port), (2, 26, 7174));
        assert_eq!(c.local().unwrap(), ("198.18.0.2".parse().unwrap(), 24));
        let c =
            Cli::try_parse_from(["iwping", "-c", "-a", "1.2.3.4", "--rtr", "read,send"]).unwrap();
        assert_eq!(
            c.rtr_types(RtrTypes::WRITE),
            RtrTypes::READ.union(RtrTypes::SEND)
        );
    }
}
