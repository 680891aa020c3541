//! The Environment Abstraction Layer: argument builder and one-time initialisation.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{ffi, Error};

/// Set once `rte_eal_init` has been attempted; DPDK does not allow a second call.
static EAL_STARTED: AtomicBool = AtomicBool::new(false);

/// Set when [`EalBuilder::init_or_join`] joined the application's EAL ([`crate::eal_joined`]).
pub(crate) static EAL_JOINED: AtomicBool = AtomicBool::new(false);

/// Builds the EAL argument list.
///
/// The defaults suit machines without hugepages or NICs: see [`EalBuilder::no_huge`] and
/// [`EalBuilder::no_pci`]. Every setter appends exactly the documented argument.
#[derive(Debug, Clone)]
pub struct EalBuilder {
    args: Vec<String>,
}

impl EalBuilder {
    /// Starts an argument list whose program name is `program` (EAL's `argv[0]`).
    pub fn new(program: &str) -> Self {
        EalBuilder {
            args: vec![program.to_owned()],
        }
    }

    /// `-l <cores>`: the lcore list, e.g. `"0"` or `"0-1"`.
    pub fn cores(mut self, cores: &str) -> Self {
        self.args.push("-l".into());
        self.args.push(cores.into());
        self
    }

    /// `--no-huge -m <memory_mb>`: anonymous memory instead of hugepages (not with
    /// [`EalBuilder::in_memory`]).
    pub fn no_huge(mut self, memory_mb: u32) -> Self {
        self.args.push("--no-huge".into());
        self.args.push("-m".into());
        self.args.push(memory_mb.to_string());
        self
    }

    /// `--in-memory`: hugepages without files on hugetlbfs (needs reserved hugepages).
    pub fn in_memory(mut self) -> Self {
        self.args.push("--in-memory".into());
        self
    }

    /// `--no-shconf`: no shared configuration (no secondary processes).
    pub fn no_shconf(mut self) -> Self {
        self.args.push("--no-shconf".into());
        self
    }

    /// `--no-pci`: do not scan the PCI bus.
    pub fn no_pci(mut self) -> Self {
        self.args.push("--no-pci".into());
        self
    }

    /// `--no-telemetry`: no telemetry socket.
    pub fn no_telemetry(mut self) -> Self {
        self.args.push("--no-telemetry".into());
        self
    }

    /// `--file-prefix=<prefix>`: keeps runtime files of parallel processes apart.
    pub fn file_prefix(mut self, prefix: &str) -> Self {
        self.args.push(format!("--file-prefix={prefix}"));
        self
    }

    /// `--vdev=<spec>`: a virtual device such as `net_memif0,role=server,socket=/tmp/x.sock`.
    pub fn vdev(mut self, spec: &str) -> Self {
        self.args.push(format!("--vdev={spec}"));
        self
    }

    /// `--log-level=<level>`: e.g. `"notice"` or `"pmd.net.memif:debug"`.
    pub fn log_level(mut self, level: &str) -> Self {
        self.args.push(format!("--log-level={level}"));
        self
    }

    /// Appends one raw argument.
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends raw arguments, e.g. a user-supplied EAL argument string split on whitespace.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// The convenient set for tests and machines without hugepages:
    /// `-l <core> --no-huge -m <memory_mb> --no-shconf --no-pci --no-telemetry
    /// --file-prefix=<prefix>`.
    pub fn test_defaults(self, core: u32, memory_mb: u32, prefix: &str) -> Self {
        self.cores(&core.to_string())
            .no_huge(memory_mb)
            .no_shconf()
            .no_pci()
            .no_telemetry()
            .file_prefix(prefix)
    }

    /// What every test binary and test helper starts from: [`EalBuilder::test_defaults`]
    /// on `core` with `memory_mb`, a file prefix of `program` and the process id (so that
    /// concurrent test processes never share one), and only errors logged.
    pub fn for_test(program: &str, core: u32, memory_mb: u32) -> Self {
        EalBuilder::new(program)
            .test_defaults(
                core,
                memory_mb,
                &format!("{program}-{}", std::process::id()),
            )
            .log_level("error")
    }

    /// The arguments built so far (including `argv[0]`).
    pub fn as_args(&self) -> &[String] {
        &self.args
    }

    /// Calls `rte_eal_init` with the arguments.
    ///
    /// Fails with [`Error::EalAlreadyInitialised`] when called a second time in the process
    /// (also after a failed first attempt, which DPDK cannot undo), and with
    /// [`Error::EalInit`] naming the arguments when DPDK rejects them or passes over some
    /// (anything that is not an option, such as the `1` of `-l 0 1`, which DPDK ignores).
    pub fn init(self) -> Result<Eal, Error> {
        let cargs = self
            .args
            .iter()
            .map(|a| CString::new(a.as_str()).map_err(|_| Error::NulInArgument(a.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(Error::EalAlreadyInitialised);
        }
        // rte_eal_init may permute argv; it gets its own array of pointers. The strings and
        // the array are leaked on purpose: DPDK may keep pointers into argv for the life of
        // the process.
        let mut argv = std::mem::ManuallyDrop::new(
            cargs
                .into_iter()
                .map(CString::into_raw)
                .collect::<Vec<*mut c_char>>(),
        );
        let argc = c_int::try_from(argv.len()).expect("fewer than 2^31 EAL arguments");
        // SAFETY: argv holds argc valid NUL-terminated strings that are never freed; the
        // atomic flag above guarantees this is the only call in the process.
        let ret = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            return Err(Error::EalInit {
                args: self.args[1..].join(" "),
                reason: Error::last_reason(),
            });
        }
        remove_empty_runtime_dir();
        // rte_eal_init returns how many arguments its getopt took, having moved the ones it
        // did not (anything not an option: `-l 0 1` leaves `1`) past them, to argv[ret + 1..],
        // and ignores those: the EAL is up, but not as asked.
        let taken = (ret as usize).min(argv.len() - 1);
        let ignored: Vec<String> = argv[taken + 1..]
            .iter()
            // SAFETY: every pointer is one of the leaked CStrings above (permuted, never
            // freed), NUL-terminated.
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            .collect();
        if !ignored.is_empty() {
            return Err(Error::EalInit {
                args: self.args[1..].join(" "),
                reason: format!(
                    "{ignored:?} not taken (not EAL options); the EAL is up without them"
                ),
            });
        }
        Ok(Eal {
            args: self.args,
            _not_send: std::marker::PhantomData,
        })
    }

    /// [`EalBuilder::init`], unless the process's application has started DPDK's EAL itself
    /// (a DPDK application, such as SPDK's NVMe-oF target, that loads Warpcore's drop-in
    /// libibverbs): that EAL is then joined as it is. Its options are the application's:
    /// of these arguments only the devices are used, each `--vdev` and each `-a`/`--allow`
    /// probed now (`rte_dev_probe`; one the application has probed already is taken as it
    /// is), and [`Eal::joined`] says so. The application's EAL must have the drivers
    /// (Debian's DPDK loads every one it ships) and memory for Warpcore's pool. As a guest,
    /// Warpcore gives its threads no lcore id there ([`crate::Mempool::use_lcore_cache`]
    /// answers `None` for a thread without one): registering one would disable DPDK's
    /// multi-process mode for the application.
    ///
    /// Fails as [`EalBuilder::init`] does, and with [`Error::EalJoin`] naming the device
    /// that could not be probed.
    pub fn init_or_join(self) -> Result<Eal, Error> {
        // SAFETY: rte_lcore_count reads the EAL configuration's lcore count, a static that
        // stays 0 until an rte_eal_init has succeeded; it has no other precondition.
        let running = unsafe { ffi::rte_lcore_count() } > 0;
        if !running || EAL_STARTED.load(Ordering::SeqCst) {
            return self.init();
        }
        let devices = self.devices();
        let cdevs = devices
            .iter()
            .map(|d| CString::new(d.as_str()).map_err(|_| Error::NulInArgument(d.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        if EAL_STARTED.swap(true, Ordering::SeqCst) {
            return Err(Error::EalAlreadyInitialised);
        }
        EAL_JOINED.store(true, Ordering::Relaxed);
        for (d, c) in devices.iter().zip(&cdevs) {
            // SAFETY: the EAL is up (its lcore count is set); `c` is a valid NUL-terminated
            // string for the call (DPDK copies the device arguments).
            let rc = unsafe { ffi::rte_dev_probe(c.as_ptr()) };
            if rc < 0 && rc != -EEXIST {
                return Err(Error::EalJoin {
                    device: d.clone(),
                    reason: Error::code_reason(rc),
                });
            }
        }
        Ok(Eal {
            args: self.args,
            _not_send: std::marker::PhantomData,
        })
    }

    /// The devices the arguments name: each `--vdev` and each `-a`/`--allow`.
    fn devices(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut it = self.args.iter().skip(1);
        while let Some(a) = it.next() {
            if let Some(v) = a
                .strip_prefix("--vdev=")
                .or_else(|| a.strip_prefix("--allow="))
            {
                out.push(v.to_owned());
            } else if a == "--vdev" || a == "-a" || a == "--allow" {
                if let Some(v) = it.next() {
                    out.push(v.clone());
                }
            } else if let Some(v) = a.strip_prefix("-a").filter(|v| !v.is_empty()) {
                out.push(v.to_owned());
            }
        }
        out
    }
}

/// Removes the runtime directory of the EAL this process just started if it holds nothing.
/// DPDK makes one for the file prefix (`/var/run/dpdk/PREFIX` for root, else under
/// `$XDG_RUNTIME_DIR` or `/tmp`) and never removes it; Warpcore's prefixes carry the process
/// id, so every run left one behind. With nothing shared (`--no-shconf`, which
/// `--in-memory` implies: no configuration file, no multi-process socket; with
/// `--no-telemetry`, no telemetry socket) it is empty once `rte_eal_init` returns, and
/// nothing is made there later. `rmdir` removes only an empty directory: one that holds
/// anything (a shared configuration, a telemetry socket) stays.
fn remove_empty_runtime_dir() {
    // SAFETY: rte_eal_init succeeded; the call returns a pointer to the EAL's static,
    // NUL-terminated path.
    let p = unsafe { CStr::from_ptr(ffi::rte_eal_get_runtime_dir()) };
    let dir = std::path::Path::new(std::ffi::OsStr::from_bytes(p.to_bytes()));
    let _ = std::fs::remove_dir(dir);
}

/// Linux's `EEXIST`: what `rte_dev_probe` answers (negated) for a device already probed.
const EEXIST: c_int = 17;

/// Proof that the EAL is initialised. Creating pools and ports takes a reference to it.
///
/// It is neither `Send` nor `Sync`: DPDK objects are set up from the thread that
/// initialised the EAL (the main lcore). The EAL stays up until the process exits.
#[derive(Debug)]
pub struct Eal {
    args: Vec<String>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Eal {
    /// The arguments the EAL was initialised with (when [`Eal::joined`]: the arguments
    /// given, of which only the devices were used).
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Whether this is the EAL the process's application started, joined by
    /// [`EalBuilder::init_or_join`], rather than one started here.
    pub fn joined(&self) -> bool {
        crate::eal_joined()
    }

    /// Number of ethdev ports that probed.
    pub fn port_count(&self) -> u16 {
        // SAFETY: the EAL is initialised (self exists); the call only reads the port table.
        unsafe { ffi::rte_eth_dev_count_avail() }
    }

    /// The EAL's runtime directory (`/var/run/dpdk/PREFIX` for root): removed at start
    /// when it held nothing ([`EalBuilder::init`]), so it need not exist.
    pub fn runtime_dir(&self) -> std::path::PathBuf {
        // SAFETY: the EAL is initialised (self exists); the call returns a pointer to the
        // EAL's static, NUL-terminated path.
        let p = unsafe { CStr::from_ptr(ffi::rte_eal_get_runtime_dir()) };
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(p.to_bytes()))
    }

    /// Whether `rte_eal_init` has been attempted in this process.
    pub fn is_started() -> bool {
        EAL_STARTED.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What `init_or_join` probes on an EAL the application started: every device, in each
    /// spelling DPDK takes, and nothing else.
    #[test]
    fn the_devices_a_join_probes_are_every_vdev_and_allowed_device() {
        let b = EalBuilder::new("prog").args([
            "--no-huge",
            "-m",
            "256",
            "--vdev=net_memif0,role=client,socket=/tmp/s",
            "--vdev",
            "net_tap0,iface=wc0",
            "-a",
            "0000:01:00.0",
            "-a0000:02:00.0",
            "--allow=0000:03:00.0",
            "--allow",
            "0000:04:00.0",
            "--file-prefix=x",
            "--vdev",
        ]);
        assert_eq!(
            b.devices(),
            [
                "net_memif0,role=client,socket=/tmp/s",
                "net_tap0,iface=wc0",
                "0000:01:00.0",
                "0000:02:00.0",
                "0000:03:00.0",
                "0000:04:00.0",
            ]
        );
    }

    #[test]
    fn builder_emits_exactly_the_documented_arguments() {
        let b = EalBuilder::new("prog")
            .test_defaults(1, 256, "wcnet-x")
            .vdev("net_memif0,role=server")
            .log_level("error")
            .args("--a  --b".split_whitespace());
        assert_eq!(
            b.as_args(),
            [
                "prog",
                "-l",
                "1",
                "--no-huge",
                "-m",
                "256",
                "--no-shconf",
                "--no-pci",
                "--no-telemetry",
                "--file-prefix=wcnet-x",
                "--vdev=net_memif0,role=server",
                "--log-level=error",
                "--a",
                "--b"
            ]
        );
    }

    /// Held by this binary's tests around their `init` calls: `mbuf`'s test starts the EAL
    /// (once per process) on another thread, and `is_started` is the process's.
    pub(crate) static INIT_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn nul_in_an_argument_is_reported_before_dpdk_is_touched() {
        let _held = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let before = Eal::is_started();
        let err = EalBuilder::new("prog").arg("bad\0arg").init().unwrap_err();
        assert!(matches!(err, Error::NulInArgument(ref a) if a == "bad\0arg"));
        // When the other test started the EAL first, this call could not have; otherwise
        // it must not have attempted it.
        assert_eq!(Eal::is_started(), before, "the EAL was not attempted");
    }
}
