//! Capture tests: every siw capture in the repository's `interop/pcaps` decoded by the
//! library and by the `iwdump` binary, with the negotiated parameters and message counts the
//! captures are known to hold (see `interop/pcaps/README.md`), the deframer split at every
//! byte position, a corrupted CRC, and damaged files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use warpcore_apps::analysis::{
    fpdu_streams, Addressing, CrcCheck, Direction, FindingKind, IwarpConnection, Segment, TcpClose,
};
use warpcore_apps::capture::{parse_capture, read_capture_file, Capture, CaptureFormat};
use warpcore_apps::fpdu::{deframe, Deframed, DeframerConfig, FpduEvent};
use warpcore_apps::report::{analyse_capture, render_json, render_text, CaptureReport};
use warpcore_apps::tcp::{parse_segment, reassemble};
use warpcore_proto::wire::rdmap::Opcode;

/// The siw reference captures, untrimmed originals and trimmed pcapng copies side by side,
/// in the checkout itself (`interop/pcaps`): every test here runs from a plain clone.
fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/pcaps")
}

fn captures_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("pcap" | "pcapng")
            )
        })
        .collect();
    files.sort();
    files
}

fn analyse(path: &Path) -> CaptureReport {
    let capture = read_capture_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    analyse_capture(&path.display().to_string(), &capture)
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// IRD/ORD (initiator, responder) each connection of a capture announced, from the capture
/// README: rping/ucmatose 1/1, perftest's exchange connection 0/0, its read and atomic tests
/// 128/128, its send and write tests 0/0; with P2P siw raises the initiator's ORD 0 to 1 and
/// the reply mirrors it.
fn expected_ird_ord(name: &str, connection: usize) -> ((u16, u16), (u16, u16)) {
    let p2p = name.contains("mpa2p2p");
    let zero = if p2p {
        ((0, 1), (1, 0))
    } else {
        ((0, 0), (0, 0))
    };
    if name.contains("rping") || name.contains("ucmatose") {
        ((1, 1), (1, 1))
    } else if connection == 0 {
        zero
    } else if name.contains("read") || name.contains("atomic") {
        ((128, 128), (128, 128))
    } else {
        zero
    }
}

/// Checks everything a clean siw capture must show; returns a description of each problem.
fn check_clean_capture(path: &Path) -> Vec<String> {
    let name = file_name(path);
    let report = analyse(path);
    let mut problems = Vec::new();
    let mut fail = |m: String| problems.push(format!("{name}: {m}"));
    if report.violations() != 0 {
        fail(format!(
            "violations: {:?}",
            report.findings().collect::<Vec<_>>()
        ));
    }
    let conns: Vec<&IwarpConnection> = report.iwarp().collect();
    let expected_conns = if name.contains("rping") || name.contains("ucmatose") {
        1
    } else {
        2
    };
    if conns.len() != expected_conns {
        fail(format!(
            "{} iWARP connections, expected {expected_conns}",
            conns.len()
        ));
    }
    let rev = if name.contains("mpa1") { 1 } else { 2 };
    let crc = name.contains("mpa2crc");
    let p2p = name.contains("mpa2p2p");
    for (i, c) in conns.iter().enumerate() {
        let Some(reply) = &c.reply else {
            fail(format!("connection {i}: no MPA Reply"));
            continue;
        };
        let Some(ng) = &c.negotiated else {
            fail(format!("connection {i}: nothing negotiated"));
            continue;
        };
        // The initiator is the TCP client (198.18.0.12) in every capture.
        if c.initiator.ip().to_string() != "198.18.0.12" || c.initiator_sent_syn != Some(true) {
            fail(format!("connection {i}: initiator {}", c.initiator));
        }
        if (c.request.rev, reply.rev) != (rev, rev) {
            fail(format!(
                "connection {i}: Rev {}/{}, expected {rev}",
                c.request.rev, reply.rev
            ));
        }
        if ng.crc != crc || (c.request.crc, reply.crc) != (crc, crc) {
            fail(format!("connection {i}: CRC {}, expected {crc}", ng.crc));
        }
        if ng.markers != [false, false] {
            fail(format!("connection {i}: markers {:?}", ng.markers));
        }
        if ng.peer_to_peer != p2p {
            fail(format!("connection {i}: P2P {}", ng.peer_to_peer));
        }
        if p2p && ng.rtr_sent != Some(warpcore_proto::wire::mpa::RtrType::Write) {
            fail(format!(
                "connection {i}: RTR sent {:?}, expected Write",
                ng.rtr_sent
            ));
        }
        if rev == 2 {
            let (Some(req_e), Some(rep_e)) = (c.request.enhanced, reply.enhanced) else {
                fail(format!("connection {i}: Rev 2 without enhanced data"));
                continue;
            };
            let want = expected_ird_ord(&name, i);
            let got = ((req_e.ird, req_e.ord), (rep_e.ird, rep_e.ord));
            if got != want {
                fail(format!(
                    "connection {i}: IRD/ORD {got:?}, expected {want:?}"
                ));
            }
        } else if c.request.enhanced.is_some() || reply.enhanced.is_some() {
            fail(format!("connection {i}: Rev 1 frame with enhanced data"));
        }
        for dir in Direction::BOTH {
            let d = &c.directions[dir.index()];
            if d.crc_errors + d.marker_errors + d.malformed_segments + d.unknown_opcode_segments
                != 0
            {
                fail(format!("connection {i} {dir}: errors {d:?}"));
            }
        }
        // Every FPDU decoded, and its CRC verified wherever CRCs were negotiated.
        let fpdus: u64 = c
            .directions
            .iter()
            .flat_map(|d| d.opcodes.values())
            .map(|s| s.segments)
            .sum();
        if fpdus != c.segments.len() as u64 {
            fail(format!(
                "connection {i}: {fpdus} counted, {} decoded",
                c.segments.len()
            ));
        }
        let want_crc = if crc {
            CrcCheck::Good
        } else {
            CrcCheck::NotChecked
        };
        if let Some(s) = c.segments.iter().find(|s| s.crc != want_crc) {
            fail(format!(
                "connection {i}: frame {} CRC {:?}, expected {want_crc:?}",
                s.frame, s.crc
            ));
        }
    }
    // Every iWARP connection's FPDU-mode stream was deframed to the end (the trimmed
    // captures may end inside an FPDU; nothing else may be left over).
    for c in &conns {
        for dir in Direction::BOTH {
            let d = &c.directions[dir.index()];
            if d.trailing_octets != 0 && !name.contains("first") {
                fail(format!(
                    "{dir}: {} octets left after the last FPDU",
                    d.trailing_octets
                ));
            }
        }
    }
    problems
}

/// The untrimmed bandwidth captures: the large originals the trimmed pcapng copies were cut
/// from. They must be present (a missing one fails, it is not skipped).
const ORIGINALS: [&str; 6] = [
    "siw_mpa2_ib_read_bw.pcap",
    "siw_mpa2_ib_send_bw.pcap",
    "siw_mpa2_ib_write_bw.pcap",
    "siw_mpa2crc_ib_read_bw_first1500.pcap",
    "siw_mpa2crc_ib_send_bw_first1500.pcap",
    "siw_mpa2crc_ib_write_bw_first1500.pcap",
];

#[test]
fn every_repository_capture_decodes_cleanly() {
    let files = captures_in(&data_dir());
    assert!(files.len() >= 28, "test data missing: {files:?}");
    // At least one full small capture of every mode, and every untrimmed original.
    for mode in [
        "siw_mpa1_rping",
        "siw_mpa2_rping",
        "siw_mpa2crc_rping",
        "siw_mpa2p2p_rping",
    ] {
        assert!(
            files.iter().any(|f| file_name(f).starts_with(mode)),
            "{mode} missing"
        );
    }
    for name in ORIGINALS {
        assert!(files.iter().any(|f| file_name(f) == name), "{name} missing");
    }
    let problems: Vec<String> = files.iter().flat_map(|f| check_clean_capture(f)).collect();
    assert!(problems.is_empty(), "{problems:#?}");
    // Both container formats are exercised, with sane timestamps (captured in 2025-2026;
    // a pcapng resolution mix-up would land in 1970 or far in the future).
    let mut formats = Vec::new();
    for f in &files {
        let c = read_capture_file(f).unwrap();
        formats.push(c.format);
        let t = c.frames[0].timestamp.as_secs();
        assert!(
            (1_700_000_000..1_900_000_000).contains(&t),
            "{}: timestamp {t}",
            f.display()
        );
        assert!(c.warnings.is_empty(), "{}: {:?}", f.display(), c.warnings);
    }
    assert!(formats.contains(&CaptureFormat::Pcap) && formats.contains(&CaptureFormat::PcapNg));
}

/// The trimmed pcapng copies hold exactly the first 400 frames of the pcap originals beside
/// them: same octets, same timestamps (pcapng's if_tsresol handled).
#[test]
fn trimmed_pcapng_copies_match_the_originals() {
    let dir = data_dir();
    let mut compared = 0;
    for f in captures_in(&dir) {
        let name = file_name(&f);
        let Some(stem) = name.strip_suffix("_first400.pcapng") else {
            continue;
        };
        // The mpa2crc originals were themselves trimmed to 1500 packets.
        let original = [format!("{stem}.pcap"), format!("{stem}_first1500.pcap")]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no original for {name}"));
        let original = read_capture_file(&original).unwrap();
        let copy = read_capture_file(&f).unwrap();
        assert_eq!(copy.format, CaptureFormat::PcapNg);
        assert_eq!(copy.frames.len(), 400);
        for (a, b) in copy.frames.iter().zip(&original.frames) {
            assert_eq!(
                (a.number, a.timestamp, &a.data),
                (b.number, b.timestamp, &b.data),
                "{name}"
            );
        }
        compared += 1;
    }
    assert_eq!(compared, ORIGINALS.len(), "trimmed copies compared");
}

type Counts = BTreeMap<(Direction, Opcode), (u64, u64, u64)>;

fn counts(c: &IwarpConnection) -> Counts {
    let mut m = Counts::new();
    for dir in Direction::BOTH {
        for (op, s) in &c.directions[dir.index()].opcodes {
            m.insert((dir, *op), (s.segments, s.messages, s.payload_octets));
        }
    }
    m
}

/// rping -C 5 -S 64: per iteration the client (initiator) sends a Send of 16 octets (its
/// buffer advertisement), the server reads 64 octets (Read Request, Read Response), sends a
/// Send, the client sends a Send, the server writes 64 octets back and sends a Send.
#[test]
fn rping_message_counts() {
    use Direction::{InitiatorToResponder as IR, ResponderToInitiator as RI};
    for mode in ["mpa2", "mpa2crc", "mpa2p2p"] {
        let report = analyse(&data_dir().join(format!("siw_{mode}_rping.pcap")));
        let conns: Vec<_> = report.iwarp().collect();
        assert_eq!(conns.len(), 1);
        let c = conns[0];
        let mut want = Counts::new();
        want.insert((IR, Opcode::Send), (10, 10, 160));
        want.insert((IR, Opcode::ReadResponse), (5, 5, 320));
        want.insert((RI, Opcode::ReadRequest), (5, 5, 0));
        want.insert((RI, Opcode::Send), (10, 10, 160));
        want.insert((RI, Opcode::Write), (5, 5, 320));
        if mode == "mpa2p2p" {
            // The RTR: a zero-length RDMA Write, before anything else.
            want.insert((IR, Opcode::Write), (1, 1, 0));
            let first = &c.segments[0];
            assert_eq!(
                (first.direction, first.opcode, first.payload_len),
                (IR, Some(Opcode::Write), 0)
            );
        }
        assert_eq!(counts(c), want, "{mode}");
        // The iteration order, message by message, and the sizes.
        let order: Vec<(Direction, Opcode, usize)> = c
            .segments
            .iter()
            .filter(|s| {
                !(mode == "mpa2p2p" && s.payload_len == 0 && s.opcode == Some(Opcode::Write))
            })
            .map(|s| (s.direction, s.opcode.unwrap(), s.payload_len))
            .collect();
        let iteration = [
            (IR, Opcode::Send, 16),
            (RI, Opcode::ReadRequest, 0),
            (IR, Opcode::ReadResponse, 64),
            (RI, Opcode::Send, 16),
            (IR, Opcode::Send, 16),
            (RI, Opcode::Write, 64),
            (RI, Opcode::Send, 16),
        ];
        assert_eq!(order, iteration.repeat(5), "{mode}");
        // Each Read Response answers its Read Request: STag/TO from the sink fields.
        let reads: Vec<&Segment> = c
            .segments
            .iter()
            .filter(|s| s.opcode == Some(Opcode::ReadRequest))
            .collect();
        let responses: Vec<&Segment> = c
            .segments
            .iter()
            .filter(|s| s.opcode == Some(Opcode::ReadResponse))
            .collect();
        for (rq, rs) in reads.iter().zip(&responses) {
            let rr = rq.read_request.unwrap();
            assert_eq!(rr.read_size, 64);
            assert_eq!(
                rs.addressing,
                Addressing::Tagged {
                    stag: rr.sink_stag,
                    to: rr.sink_to
                }
            );
        }
        // Sends on QN 0 with MSN 1, 2, 3... per direction.
        for dir in Direction::BOTH {
            let msns: Vec<u32> = c
                .segments
                .iter()
                .filter(|s| s.direction == dir && s.opcode == Some(Opcode::Send))
                .map(|s| match s.addressing {
                    Addressing::Untagged {
                        qn: 0, msn, mo: 0, ..
                    } => msn,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(msns, (1..=10).collect::<Vec<u32>>());
        }
    }
    // MPA v1: one Send, then the server aborts (its Read post fails) and closes.
    let report = analyse(&data_dir().join("siw_mpa1_rping.pcap"));
    let c = report.iwarp().next().unwrap();
    let mut want = Counts::new();
    want.insert((Direction::InitiatorToResponder, Opcode::Send), (1, 1, 16));
    assert_eq!(counts(c), want);
    assert_eq!(report.violations(), 0);
    // Both sides closed with a FIN (the abort is the application's, not the protocol's).
    assert_eq!(c.closed, [TcpClose::Fin, TcpClose::Fin]);
}

/// ib_write_bw -s 65536: 64 KiB Writes in 46 DDP segments each: 45 with ULPDU_Length 1442
/// (1428 payload octets) and a last one of 1290 (1276 octets) with L = 1, TO advancing.
fn check_write_bw(path: &Path, full: bool) {
    let report = analyse(path);
    let c = report.iwarp().nth(1).expect("test connection");
    let writes: Vec<&Segment> = c
        .segments
        .iter()
        .filter(|s| s.opcode == Some(Opcode::Write))
        .collect();
    assert!(
        writes.len() >= 46 * 5,
        "{}: {} Write segments",
        path.display(),
        writes.len()
    );
    let complete = writes.len() / 46;
    if full {
        assert_eq!(writes.len(), 20 * 46);
    }
    for m in writes.chunks(46).take(complete) {
        let Addressing::Tagged { stag, to: to0 } = m[0].addressing else {
            panic!("untagged Write")
        };
        let mut to = to0;
        for (i, s) in m.iter().enumerate() {
            let last = i == 45;
            assert_eq!(s.last, last);
            assert_eq!(s.ulpdu_len, if last { 1290 } else { 1442 });
            assert_eq!(s.addressing, Addressing::Tagged { stag, to });
            to += s.payload_len as u64;
        }
        assert_eq!(to - to0, 65536);
    }
    let stats = &c.directions[0].opcodes[&Opcode::Write];
    assert_eq!(stats.messages, complete as u64);
    // siw's Writes are MPA-aligned (mpa-08 §4 item 4): each 1,448-octet FPDU (ULPDU 1442,
    // length, CRC) fills a segment of its own, and iwdump counts every one aligned.
    let d = &c.directions[0];
    assert!(d.data_segments >= writes.len() as u64, "{d:?}");
    assert_eq!(d.aligned_segments, d.data_segments, "{}", path.display());
    assert_eq!(d.alignment_unknown_segments, 0, "{}", path.display());
}

#[test]
fn ib_write_bw_segmentation() {
    check_write_bw(
        &data_dir().join("siw_mpa2_ib_write_bw_first400.pcapng"),
        false,
    );
    check_write_bw(
        &data_dir().join("siw_mpa2crc_ib_write_bw_first400.pcapng"),
        false,
    );
    check_write_bw(&data_dir().join("siw_mpa2_ib_write_bw.pcap"), true);
}

/// (aligned, not aligned) TCP data segments of FPDU mode of one connection, I>R and R>I.
type ConnectionAlignment = [(u64, u64); 2];

/// Segment alignment per capture, connection and direction (I>R, R>I): (aligned, not
/// aligned) TCP data segments of FPDU mode, every one judged (no capture gap, no error).
/// Checked apart from iwdump: the segment ranges from `tshark -r F -Y tcp.len>0 -T fields
/// -e tcp.stream -e ip.src -e tcp.seq -e tcp.len -e tcp.payload` and the FPDU boundaries
/// from walking the ULPDU_Length chain of the reassembled payloads after the startup frame
/// (no markers in these captures) gave the same figures for every file. siw sends each FPDU
/// (or a few whole small ones) per segment: what is not aligned is Read Responses, whose
/// 1,448-octet FPDUs siw sometimes sends as 1,444 octets and then 4 (10 segments of
/// ib_read_bw; 90 of the first 1,500 frames of the CRC run).
const ALIGNMENT: &[(&str, &[ConnectionAlignment])] = &[
    (
        "siw_mpa1_ib_read_lat.pcap",
        &[[(11, 0), (11, 0)], [(200, 0), (200, 0)]],
    ),
    ("siw_mpa1_rping.pcap", &[[(1, 0), (0, 0)]]),
    (
        "siw_mpa2_ib_atomic_bw.pcap",
        &[[(9, 0), (9, 0)], [(0, 0), (0, 0)]],
    ),
    (
        "siw_mpa2_ib_read_bw.pcap",
        &[[(16, 0), (16, 0)], [(11, 0), (915, 10)]],
    ),
    (
        "siw_mpa2_ib_read_bw_first400.pcapng",
        &[[(9, 0), (9, 0)], [(11, 0), (182, 10)]],
    ),
    (
        "siw_mpa2_ib_read_lat.pcap",
        &[[(11, 0), (11, 0)], [(200, 0), (200, 0)]],
    ),
    (
        "siw_mpa2_ib_send_bw.pcap",
        &[[(11, 0), (11, 0)], [(940, 0), (4, 0)]],
    ),
    (
        "siw_mpa2_ib_send_bw_first400.pcapng",
        &[[(10, 0), (10, 0)], [(248, 0), (0, 0)]],
    ),
    (
        "siw_mpa2_ib_send_lat.pcap",
        &[[(11, 0), (11, 0)], [(200, 0), (200, 0)]],
    ),
    (
        "siw_mpa2_ib_write_bw.pcap",
        &[[(16, 0), (16, 0)], [(920, 0), (0, 0)]],
    ),
    (
        "siw_mpa2_ib_write_bw_first400.pcapng",
        &[[(9, 0), (9, 0)], [(251, 0), (0, 0)]],
    ),
    (
        "siw_mpa2_ib_write_lat.pcap",
        &[[(10, 0), (10, 0)], [(200, 0), (200, 0)]],
    ),
    ("siw_mpa2_rping.pcap", &[[(15, 0), (20, 0)]]),
    ("siw_mpa2_ucmatose.pcap", &[[(5, 0), (5, 0)]]),
    (
        "siw_mpa2crc_ib_atomic_bw.pcap",
        &[[(9, 0), (9, 0)], [(0, 0), (0, 0)]],
    ),
    (
        "siw_mpa2crc_ib_read_bw_first1500.pcap",
        &[[(9, 0), (9, 0)], [(18, 0), (872, 90)]],
    ),
    (
        "siw_mpa2crc_ib_read_bw_first400.pcapng",
        &[[(9, 0), (9, 0)], [(18, 0), (186, 51)]],
    ),
    (
        "siw_mpa2crc_ib_read_lat.pcap",
        &[[(11, 0), (11, 0)], [(200, 0), (200, 0)]],
    ),
    (
        "siw_mpa2crc_ib_send_bw_first1500.pcap",
        &[[(10, 0), (10, 0)], [(987, 0), (1, 0)]],
    ),
    (
        "siw_mpa2crc_ib_send_bw_first400.pcapng",
        &[[(10, 0), (10, 0)], [(249, 0), (0, 0)]],
    ),
    (
        "siw_mpa2crc_ib_send_lat.pcap",
        &[[(11, 0), (11, 0)], [(200, 0), (200, 0)]],
    ),
    (
        "siw_mpa2crc_ib_write_bw_first1500.pcap",
        &[[(9, 0), (9, 0)], [(982, 0), (0, 0)]],
    ),
    (
        "siw_mpa2crc_ib_write_bw_first400.pcapng",
        &[[(9, 0), (9, 0)], [(244, 0), (0, 0)]],
    ),
    (
        "siw_mpa2crc_ib_write_lat.pcap",
        &[[(10, 0), (10, 0)], [(200, 0), (200, 0)]],
    ),
    ("siw_mpa2crc_rping.pcap", &[[(15, 0), (20, 0)]]),
    (
        "siw_mpa2p2p_ib_read_lat.pcap",
        &[[(12, 0), (11, 0)], [(201, 0), (200, 0)]],
    ),
    (
        "siw_mpa2p2p_ib_write_lat.pcap",
        &[[(11, 0), (10, 0)], [(201, 0), (200, 0)]],
    ),
    ("siw_mpa2p2p_rping.pcap", &[[(16, 0), (20, 0)]]),
];

#[test]
fn segment_alignment_of_every_capture() {
    let files = captures_in(&data_dir());
    let names: Vec<String> = files.iter().map(|f| file_name(f)).collect();
    let listed: Vec<&str> = ALIGNMENT.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, listed, "a capture without alignment figures here");
    for (path, (name, want)) in files.iter().zip(ALIGNMENT) {
        let report = analyse(path);
        let got: Vec<ConnectionAlignment> = report
            .iwarp()
            .map(|c| {
                c.directions
                    .clone()
                    .map(|d| (d.aligned_segments, d.unaligned_segments()))
            })
            .collect();
        assert_eq!(got, *want, "{name}");
        for c in report.iwarp() {
            for d in &c.directions {
                assert_eq!(
                    (d.alignment_unknown_segments, d.alignment_unknown_from),
                    (0, None),
                    "{name}"
                );
            }
        }
    }
}

/// What the binary prints for it, in text and JSON (ib_read_bw: the Read Responses).
#[test]
fn segment_alignment_in_iwdump_output() {
    let path = data_dir().join("siw_mpa2_ib_read_bw.pcap");
    let (code, text, _) = iwdump(&[&path]);
    assert_eq!(code, 0, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let r2i = lines
        .iter()
        .rposition(|l| l.starts_with("  R>I: 920 FPDUs"))
        .expect("the test connection's R>I line");
    assert_eq!(
        lines[r2i + 1],
        "      TCP data segments 925: 915 aligned with FPDUs, 10 not aligned (98.9 % aligned)"
    );
    assert_eq!(
        lines[r2i - 2],
        "      TCP data segments 11: 11 aligned with FPDUs, 0 not aligned (100.0 % aligned)"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("--json")
        .arg(&path)
        .output()
        .unwrap();
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(
        json.contains(
            "\"segments_aligned\":915,\"segments_unaligned\":10,\
             \"segments_alignment_unknown\":0,\"segments_retransmitted\":0,\"segments_aligned_percent\":98.9,\
             \"alignment_unknown_from\":null"
        ),
        "{json}"
    );
}

/// A small deterministic generator for the split points (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// Feeds `bytes` split at `k`, but only up to the end of the first FPDU that ends after `k`
/// (the deframer's output up to there cannot depend on what follows, and this keeps the
/// test fast), and compares with the same part of the unsplit result.
fn check_split(config: DeframerConfig, bytes: &[u8], whole: &Deframed, k: usize, what: &str) {
    let cut = whole
        .events
        .iter()
        .map(|e| e.end() as usize)
        .find(|&end| end > k)
        .unwrap_or(bytes.len());
    let split = deframe(config, &[&bytes[..k], &bytes[k..cut]]);
    let expected: Vec<&FpduEvent> = whole
        .events
        .iter()
        .filter(|e| e.end() as usize <= cut)
        .collect();
    assert_eq!(
        split.events.iter().collect::<Vec<_>>(),
        expected,
        "{what} split at {k}"
    );
    if cut == bytes.len() {
        assert_eq!(
            split.trailing_octets, whole.trailing_octets,
            "{what} split at {k}"
        );
    } else {
        assert_eq!(split.trailing_octets, 0, "{what} split at {k}");
    }
}

/// The deframer gives the same ULPDUs (and offsets, and end state) for a stream fed whole or
/// in two chunks split anywhere (MPA-5.1-5: FPDU boundaries never depend on TCP's): every
/// split point in the first 4 KiB of every stream, plus seeded random ones beyond.
#[test]
fn deframer_is_split_invariant_on_every_capture() {
    const EVERY_SPLIT_UP_TO: usize = 4096;
    const RANDOM_SPLITS: usize = 16;
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut streams = 0;
    let mut random_splits = 0;
    for path in captures_in(&data_dir()) {
        let capture = read_capture_file(&path).unwrap();
        for conn in reassemble(&capture).connections {
            let Some((initiator, fs)) = fpdu_streams(&conn) else {
                continue;
            };
            let from_i = conn.stream_from(initiator);
            let from_r = if initiator == conn.client {
                &conn.to_client
            } else {
                &conn.to_server
            };
            for (dir, stream) in [from_i, from_r].into_iter().enumerate() {
                let (start, config) = fs.start[dir];
                let bytes = &stream.data[start as usize..];
                if bytes.is_empty() {
                    continue;
                }
                streams += 1;
                let what = format!("{} direction {dir}", path.display());
                let whole = deframe(config, &[bytes]);
                assert!(!whole.stopped, "{what}: deframing failed");
                assert!(!whole.events.is_empty(), "{what}: no FPDU");
                for k in 0..=bytes.len().min(EVERY_SPLIT_UP_TO) {
                    check_split(config, bytes, &whole, k, &what);
                }
                if bytes.len() > EVERY_SPLIT_UP_TO {
                    random_splits += RANDOM_SPLITS;
                    for _ in 0..RANDOM_SPLITS {
                        let k = EVERY_SPLIT_UP_TO + rng.below(bytes.len() - EVERY_SPLIT_UP_TO + 1);
                        check_split(config, bytes, &whole, k, &what);
                    }
                }
            }
        }
    }
    assert!(streams >= 40, "only {streams} FPDU streams found");
    assert!(
        random_splits >= 300,
        "only {random_splits} random split points"
    );
}

/// Writes `capture` as a classic pcap file.
fn write_pcap(capture: &Capture, path: &Path) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    let file = std::fs::File::create(path).unwrap();
    let header = PcapHeader {
        datalink: pcap_file::DataLink::ETHERNET,
        ..Default::default()
    };
    let mut w = PcapWriter::with_header(file, header).unwrap();
    for f in &capture.frames {
        w.write_packet(&PcapPacket::new(f.timestamp, f.original_len, &f.data))
            .unwrap();
    }
}

fn iwdump(args: &[&Path]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status
            .code()
            .expect("iwdump killed by a signal (a panic would abort?)"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Output that cannot be written is an I/O error (exit 2, said on stderr), and a reader
/// that goes away (`iwdump -v x.pcap | head`) ends the run quietly: print! panicked on both.
#[test]
fn unwritable_or_closed_output_is_no_panic() {
    use std::process::Stdio;
    let file = data_dir().join("siw_mpa2_ib_write_bw.pcap");
    let full = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("-v")
        .arg(&file)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&full.stderr);
    assert_eq!(full.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot write the output"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // The reader closes the pipe before iwdump writes its first line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("-v")
        .arg(&file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
}

/// MPA-4.4, MPA-8 code 2: one flipped CRC octet is reported as a CRC error on exactly that
/// FPDU, and iwdump exits 1; the unmodified file is clean and exits 0.
#[test]
fn flipped_crc_is_reported() {
    let original = data_dir().join("siw_mpa2crc_rping.pcap");
    let (code, out, _) = iwdump(&[&original]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no protocol violations"), "{out}");

    let mut capture = read_capture_file(&original).unwrap();
    let report = analyse_capture("original", &capture);
    let conn = report.iwarp().next().unwrap();
    // The third FPDU from the initiator: a Send in a frame of its own.
    let victim = conn
        .segments
        .iter()
        .filter(|s| s.direction == Direction::InitiatorToResponder)
        .nth(2)
        .unwrap()
        .clone();
    let frame = &mut capture.frames[victim.frame as usize - 1];
    let seg = parse_segment(frame.link, &frame.data).unwrap();
    let payload_end =
        seg.payload.as_ptr() as usize + seg.payload.len() - frame.data.as_ptr() as usize;
    assert_eq!(payload_end, frame.data.len(), "frame has a trailer");
    assert_eq!(
        seg.payload.len(),
        victim.ulpdu_len + 2 + 4 + (4 - (victim.ulpdu_len + 2) % 4) % 4
    );
    // The CRC is the last four octets of the FPDU; flip one of them.
    frame.data[payload_end - 3] ^= 0x01;

    let lib = analyse_capture("flipped", &capture);
    let findings: Vec<_> = lib.findings().collect();
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].kind, FindingKind::CrcError);
    assert_eq!(findings[0].frame, victim.frame);
    assert_eq!(findings[0].direction, Some(Direction::InitiatorToResponder));
    let c = lib.iwarp().next().unwrap();
    assert_eq!(c.directions[0].crc_errors, 1);
    assert_eq!(c.directions[1].crc_errors, 0);
    // Every other FPDU of that direction still decoded: iwdump resumes after the bad FPDU.
    let before = conn
        .segments
        .iter()
        .filter(|s| s.direction == Direction::InitiatorToResponder)
        .count();
    assert_eq!(
        c.segments
            .iter()
            .filter(|s| s.direction == Direction::InitiatorToResponder)
            .count(),
        before - 1
    );
    // Resuming after the CRC error does not depend on where the stream is split either.
    let conn = reassemble(&capture).connections.remove(0);
    let (initiator, fs) = fpdu_streams(&conn).unwrap();
    let (start, config) = fs.start[0];
    let bytes = &conn.stream_from(initiator).data[start as usize..];
    let whole = deframe(config, &[bytes]);
    assert_eq!(whole.resumed, 1);
    for k in 0..=bytes.len() {
        assert_eq!(
            deframe(config, &[&bytes[..k], &bytes[k..]]),
            whole,
            "split at {k}"
        );
    }

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iwdump-crc");
    std::fs::create_dir_all(&dir).unwrap();
    let flipped = dir.join("siw_mpa2crc_rping_flipped.pcap");
    write_pcap(&capture, &flipped);
    let (code, out, _) = iwdump(&[&flipped]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("[crc-error]"), "{out}");
    assert!(out.contains(&format!("frame {}", victim.frame)), "{out}");
    // JSON says the same.
    let json = render_json(&lib, false);
    assert!(json.contains("\"kind\":\"crc-error\""), "{json}");
    assert!(json.contains("\"violations\":1"), "{json}");
}

#[test]
fn usage_and_io_errors_exit_2() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iwdump-io");
    std::fs::create_dir_all(&dir).unwrap();
    let missing = dir.join("does-not-exist.pcap");
    let (code, _, err) = iwdump(&[&missing]);
    assert_eq!(code, 2);
    assert!(err.contains("does-not-exist.pcap"), "{err}");
    let text = dir.join("not-a-capture.pcap");
    std::fs::write(&text, "hello, this is not a capture\n").unwrap();
    let (code, _, err) = iwdump(&[&text]);
    assert_eq!(code, 2);
    assert!(err.contains("not a pcap or pcapng capture"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A capture cut short (a capturer killed mid-write, a copy that stopped) is reported as
/// far as it goes, but iwdump exits 2 and says so: the frames after the cut were not
/// examined, so "no protocol violations" covers part of the file. It exited 0.
#[test]
fn a_capture_cut_short_exits_2() {
    let original = data_dir().join("siw_mpa2crc_rping.pcap");
    let bytes = std::fs::read(&original).unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iwdump-cut");
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let (code, out, err) = iwdump(&[&cut]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("could not be read whole"), "{err}");
    assert!(out.contains("warning: capture file damaged"), "{out}");
    let json = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("--json")
        .arg(&cut)
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["incomplete"], true, "{v}");
    // The whole file reads whole.
    let (code, out, err) = iwdump(&[&original]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn verbose_and_json_output() {
    let path = data_dir().join("siw_mpa2p2p_rping.pcap");
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .arg("-v")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    // One line per segment: 36 FPDUs in rping with the RTR.
    assert_eq!(
        text.lines().filter(|l| l.contains(" L=")).count(),
        36,
        "{text}"
    );
    assert!(text.contains("RDMA Read Request"));
    assert!(text.contains("STag 0x"));
    let out = Command::new(env!("CARGO_BIN_EXE_iwdump"))
        .args(["--json", "-v"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let json = String::from_utf8(out.stdout).unwrap();
    assert!(json.starts_with('{') && json.trim_end().ends_with('}'));
    assert!(json.contains("\"peer_to_peer\":true"));
    // The RTR: a zero-length Write to STag 1, TO 0 (hex strings keep 64-bit TOs exact).
    assert!(
        json.contains("\"stag\":\"0x00000001\",\"to\":\"0x0000000000000000\""),
        "{json}"
    );
    assert_eq!(json.matches("\"opcode\":").count(), 36);
}

/// Garbled and truncated copies of real captures: the library and the binary must never
/// panic; the binary exits 0, 1 or 2.
#[test]
fn damaged_captures_never_panic() {
    let mut rng = Rng(0xDA4A_6ED0_0000_0001);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iwdump-fuzz");
    std::fs::create_dir_all(&dir).unwrap();
    let sources = [
        "siw_mpa2crc_rping.pcap",
        "siw_mpa2p2p_rping.pcap",
        "siw_mpa1_rping.pcap",
    ];
    let mut written = Vec::new();
    for (n, name) in sources.iter().enumerate() {
        let bytes = std::fs::read(data_dir().join(name)).unwrap();
        for round in 0..60 {
            let mut b = bytes.clone();
            match round % 3 {
                // Truncated anywhere.
                0 => b.truncate(rng.below(b.len() + 1)),
                // A few random octets changed (headers included).
                1 => {
                    for _ in 0..1 + rng.below(8) {
                        let i = rng.below(b.len());
                        b[i] = rng.below(256) as u8;
                    }
                }
                // A run of garbage in the TCP payloads.
                _ => {
                    let i = 24 + rng.below(b.len() - 24);
                    let end = (i + 1 + rng.below(64)).min(b.len());
                    for x in &mut b[i..end] {
                        *x = rng.below(256) as u8;
                    }
                }
            }
            if let Ok(capture) = parse_capture(&b) {
                let report = analyse_capture("fuzz", &capture);
                let _ = render_text(&report, true);
                let _ = render_json(&report, true);
            }
            if round % 10 == 0 {
                let p = dir.join(format!("damaged-{n}-{round}.pcap"));
                std::fs::write(&p, &b).unwrap();
                written.push(p);
            }
        }
    }
    let args: Vec<&Path> = written.iter().map(PathBuf::as_path).collect();
    let (code, _, err) = iwdump(&args);
    assert!(matches!(code, 0..=2), "exit {code}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}
