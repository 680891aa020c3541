//! Command line: rping's options (`-s`/`-c`, `-a`, `-p`, `-C`, `-S`, `-v`, `-V`, `-d`) plus
//! the device, addressing and MPA settings of a user-space engine.

use std::net::Ipv4Addr;

use clap::Parser;
use warpcore_apps::device::{DeviceArgs, IpPrefix};
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

    /// Our own address (rping's -I, the address to bind to); --ip ADDR/LEN says the same
    /// with a prefix length.
    #[arg(short = 'I')]
    pub source: Option<Ipv4Addr>,
    /// Server: persistent (rping's -P): serve every client that comes, one after another,
    /// until stopped.
    #[arg(short = 'P')]
    pub persistent: bool,
    /// rping's -q (the application creates the QP with the verbs API and moves it through
    /// its states itself, instead of rdma_create_qp): this is how iwping always works, as
    /// Warpcore's QPs are created by the application and handed to the connection manager.
    #[arg(short = 'q')]
    pub self_created_qp: bool,

    /// The device: --memif, --vdev, --pci, --eal, --dpdk-port, --ip, --gateway, --mac,
    /// --cores, --mtu, --no-csum, --capture (the same in every Warpcore tool).
    #[command(flatten)]
    pub dev: DeviceArgs,
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
    /// Seconds to wait for any one step (connection, completion) before giving up (1 to a
    /// year).
    #[arg(long, default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=warpcore_apps::MAX_TIMEOUT_S))]
    pub timeout: u64,
    /// Client: seconds to keep retrying a connection refused, unanswered or whose server's
    /// host does not answer ARP yet (the server may still boot; at most a year).
    #[arg(long, default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(..=warpcore_apps::MAX_TIMEOUT_S))]
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
        if self.client && self.local().is_err() {
            return Err("-c needs --ip ADDR/LEN or -I ADDR (our own address)".into());
        }
        if self.server && self.local().is_err() {
            return Err("-s needs --ip ADDR/LEN, -I ADDR or -a ADDR (our own address)".into());
        }
        // Our own address from two flags: one of them would be silently ignored (local()
        // takes --ip first, then -I, then a server's -a), and the run would bind an address
        // the user did not mean.
        if let (Some(ip), Some(i)) = (self.dev.ip, self.source) {
            if ip.addr != i {
                return Err(format!(
                    "--ip {} and -I {i} name two different addresses of our own: give one",
                    ip.addr
                ));
            }
        }
        if let (true, Some(a), Ok(own)) = (self.server, self.addr, self.local()) {
            if own.addr != a {
                return Err(format!(
                    "-s -a {a} names our own address, and --ip/-I another ({}): give one",
                    own.addr
                ));
            }
        }
        if self.persistent && !self.server {
            return Err("-P (persistent server) applies to the server (-s)".into());
        }
        if let Some(l) = self.dev.loopback {
            return Err(format!(
                "--loopback={l:?}: iwping talks to a peer in another process or machine (use \
                 iwperf --loopback for both ends in one process)"
            ));
        }
        if self.client && !self.rtr.is_empty() && !self.p2p {
            return Err(
                "--rtr on the client names the RTR types peer-to-peer mode offers: give --p2p \
                 too (without it the client asks for no peer-to-peer mode)"
                    .into(),
            );
        }
        if self.p2p && self.mpa_rev != 2 {
            return Err("--p2p needs --mpa-rev 2 (RFC 6581)".into());
        }
        if self.ird_ord == 0 || self.ird_ord > 0x3FFF {
            return Err("--ird-ord must be 1..=16383".into());
        }
        Ok(())
    }

    /// Our address and prefix length: --ip, else -I (/24), else the server's -a (/24).
    pub fn local(&self) -> Result<IpPrefix, String> {
        let len24 = |addr| IpPrefix { addr, len: 24 };
        match (self.dev.ip, self.source, self.addr) {
            (Some(p), _, _) => Ok(p),
            (None, Some(a), _) => Ok(len24(a)),
            (None, None, Some(a)) if self.server => Ok(len24(a)),
            _ => Err("no local address".into()),
        }
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
        assert_eq!(
            c.local().unwrap(),
            IpPrefix {
                addr: "198.18.0.2".parse().unwrap(),
                len: 24
            }
        );
        let c =
            Cli::try_parse_from(["iwping", "-s", "-P", "-q", "-I", "10.0.0.5", "-C", "3"]).unwrap();
        assert!(c.persistent && c.self_created_qp && c.validate().is_ok());
        assert_eq!(c.local().unwrap().addr, Ipv4Addr::new(10, 0, 0, 5));
        let c = Cli::try_parse_from(["iwping", "-c", "-P", "-a", "1.2.3.4", "-I", "1.2.3.5"]);
        assert!(c.unwrap().validate().unwrap_err().contains("-P"));
        let c =
            Cli::try_parse_from(["iwping", "-c", "-a", "1.2.3.4", "--rtr", "read,send"]).unwrap();
        assert_eq!(
            c.rtr_types(RtrTypes::WRITE),
            RtrTypes::READ.union(RtrTypes::SEND)
        );
    }

    /// Two flags that name our own address must agree: `--ip` used to win over `-I`, and
    /// either over a server's `-a`, silently, so the run bound an address not asked for.
    #[test]
    fn own_address_given_twice_must_agree() {
        let v = |args: &[&str]| {
            Cli::try_parse_from([&["iwping"][..], args].concat())
                .unwrap()
                .validate()
        };
        let e = v(&["-c", "-a", "1.2.3.4", "-I", "1.2.3.5", "--ip", "1.2.3.6/24"]).unwrap_err();
        assert!(e.contains("--ip 1.2.3.6 and -I 1.2.3.5"), "{e}");
        let e = v(&["-s", "-a", "10.0.0.1", "--ip", "10.0.0.2/24"]).unwrap_err();
        assert!(e.contains("-s -a 10.0.0.1"), "{e}");
        let e = v(&["-s", "-a", "10.0.0.1", "-I", "10.0.0.3"]).unwrap_err();
        assert!(e.contains("(10.0.0.3)"), "{e}");
        // The same address twice, or each flag alone, is fine.
        assert!(v(&["-c", "-a", "1.2.3.4", "-I", "1.2.3.5", "--ip", "1.2.3.5/16"]).is_ok());
        assert!(v(&["-s", "-a", "10.0.0.2", "--ip", "10.0.0.2/24"]).is_ok());
        assert!(v(&["-s", "-I", "10.0.0.2"]).is_ok());
    }
}
