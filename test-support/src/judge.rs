//! Judging a pcapng capture of an engine run: iwdump's library (no protocol violation, no
//! bad CRC, no malformed segment) and `tshark` (no malformed frame, no bad CRC, FPDUs
//! dissected).

use std::path::{Path, PathBuf};

use warpcore_analysis::report::{analyse_capture, analyse_reassembled, render_text, CaptureReport};

/// DPDK 22.11's `rte_pcapng` writes block options the pcap-file crate behind iwdump
/// refuses: the tools' one normaliser ([`warpcore_analysis::pcapng::clean_report`])
/// rewrites the capture next to it first. Returns the normalised file. Panics when the
/// capture was cut short (the normaliser keeps its whole blocks only): a judge of its head
/// would pass a run it never saw the end of.
pub fn normalised(path: &Path) -> PathBuf {
    let mut clean = path.as_os_str().to_owned();
    clean.push(".clean.pcapng");
    let clean = PathBuf::from(clean);
    let c = warpcore_analysis::pcapng::clean_report(path, &clean)
        .unwrap_or_else(|e| panic!("normalise {}: {e}", path.display()));
    if let Some((at, why)) = c.cut {
        panic!(
            "capture {} cut short at octet {at} ({why}) after {} packets: the rest cannot be judged",
            path.display(),
            c.packets
        );
    }
    clean
}

/// The DPDK pcapng capture at `path`, normalised and read.
fn read_capture(path: &Path) -> warpcore_analysis::capture::Capture {
    let clean = normalised(path);
    warpcore_analysis::capture::read_capture_file(&clean).expect("read capture")
}

/// iwdump's report (named `name`) of the DPDK pcapng capture at `path`.
pub fn iwdump_report(path: &Path, name: &str) -> CaptureReport {
    analyse_capture(name, &read_capture(path))
}

/// Asserts that the capture at `path` holds at least one iWARP connection with CRCs, that
/// iwdump judged all of it (every frame read and decoded, no capture gap, no frame cut by the snap length) and finds no
/// violation, CRC, marker or segment error in it and every TCP segment
/// aligned with FPDUs (both ends Warpcore on its own TCP), and that tshark (where it
/// runs, see [`crate::tshark::present_or_skip`]) finds no malformed frame, no expert error
/// (as the shell judge, scripts/lib/capture-verdict.sh) and no bad CRC and dissects more
/// than ten FPDUs.
pub fn judge_capture(path: &Path) {
    let cap = read_capture(path);
    // Reassembled once, for the report and the gap check below (captures run to hundreds of
    // megabytes).
    let tcp = warpcore_analysis::tcp::reassemble(&cap);
    let report = analyse_reassembled("engine", &cap, &tcp);
    let text = render_text(&report, false);
    // Every stream of every connection whole: a frame the capture lost leaves a gap, and
    // what follows it is not decoded. The alignment figures below name a gap only in a
    // direction that reached FPDU mode; one inside an MPA startup (or a lost Request)
    // leaves a connection no FPDU of which was checked, while the others pass.
    for c in &tcp.connections {
        for (from, s) in [(c.client, &c.to_server), (c.server, &c.to_client)] {
            if let Some(g) = s.gap {
                panic!(
                    "capture gap in the stream from {from} at seq {} ({} octets after it not decoded): the rest of the stream was not judged:\n{text}",
                    g.seq, g.discarded_octets
                );
            }
        }
    }
    // Every frame read and decoded: a frame the reader skipped (a packet block naming an
    // interface the file never described, damage) or whose TCP data it could not decode is
    // a part of the run that nothing below checked, and at the end of a stream no gap shows.
    assert!(
        report.warnings.is_empty(),
        "iwdump did not read all of the capture:\n{text}"
    );
    assert_eq!(report.violations(), 0, "iwdump found violations:\n{text}");
    let conns: Vec<_> = report.iwarp().collect();
    assert!(
        !conns.is_empty(),
        "no iWARP connection in the capture:\n{text}"
    );
    let mut crc_fpdus = 0;
    for c in &conns {
        for d in &c.directions {
            assert_eq!(d.crc_errors, 0, "bad CRC:\n{text}");
            assert_eq!(d.malformed_segments, 0, "malformed segment:\n{text}");
            assert_eq!(d.marker_errors, 0, "marker error:\n{text}");
            // Every octet of the run is judged, or the judge fails: past a capture gap (a
            // frame the capture dropped) or a frame cut by the snap length iwdump decodes
            // nothing, so no CRC, marker or segment there was checked, and counting only
            // what was checked passed a run the judge never saw the rest of.
            if let Some(u) = &d.alignment_unknown_from {
                panic!(
                    "{} from seq {} on ({} segments): the rest of the stream was not judged:\n{text}",
                    u.reason.description(),
                    u.seq,
                    d.alignment_unknown_segments
                );
            }
        }
        if c.negotiated.as_ref().is_some_and(|n| n.crc) {
            crc_fpdus += 1;
        }
    }
    assert!(crc_fpdus > 0, "no connection with CRCs:\n{text}");
    // Both ends are Warpcore on its own TCP, an MPA-aligned sender (mpa-08 §4 item 4):
    // every segment starts with an FPDU and ends with one, but for what a closed window
    // forces (a one-octet zero-window probe and the rest of its FPDU after it, RFC 9293
    // 3.8.6.1; a window narrower than one FPDU with nothing in flight): at most two, and one
    // in a hundred. A sender that ignores FPDU boundaries showed 0 to 38 % aligned here.
    for c in &conns {
        for d in &c.directions {
            let unaligned = d.data_segments - d.aligned_segments;
            assert!(
                unaligned <= 2 + d.data_segments / 100,
                "{unaligned} of {} segments not aligned with FPDUs:\n{text}",
                d.data_segments
            );
        }
    }
    if !crate::tshark::present_or_skip("the tshark check of the capture") {
        return;
    }
    // Every frame tshark marks malformed or gives an expert item of severity error fails
    // the run, as in the shell judge (scripts/lib/capture-verdict.sh): before, only
    // malformed frames were looked at, so an error tshark files without the malformed mark
    // (a TCP header's non-zero padding, which iwdump does not read either) passed the judge
    // and fails the siw matrix; and a malformed retransmission passed whenever one expert
    // message of it was an overlap, whatever else was wrong with it. See [`tshark_errors`].
    let errors = tshark_errors(path);
    assert!(
        errors.is_empty(),
        "tshark: {} frame(s) malformed or with expert errors in {} (frame|malformed|severity|message|retransmission|out of order|spurious):\n{}",
        errors.len(),
        path.display(),
        errors.join("\n")
    );
    let verbose = crate::tshark::run(path, &["-V"]);
    assert!(
        !verbose.contains("Bad CRC32"),
        "tshark: bad CRC in {}",
        path.display()
    );
    let fpdus = crate::tshark::run(
        path,
        &[
            "-Y",
            "iwarp_mpa.ulpdulength",
            "-T",
            "fields",
            "-e",
            "frame.number",
        ],
    );
    assert!(
        fpdus.lines().count() > 10,
        "tshark dissected too few FPDUs in {}",
        path.display()
    );
}

/// Wireshark's expert severity "error" (`PI_ERROR`), as `-T fields` prints it.
const SEVERITY_ERROR: &str = "8388608";

/// Wireshark's TCP reassembly on a retransmitted segment over octets it already reassembled.
const OVERLAP: &str = "New fragment overlaps old data (retransmission?)";

/// The frames of the capture at `path` that tshark marks malformed or gives an expert item
/// of severity error: the shell judge's display filter and fields
/// (scripts/lib/capture-verdict.sh), one line per frame, `|` between fields, `~` between
/// a field's occurrences. Left out, as there, a frame whose only error is [`OVERLAP`], and
/// here only on a segment TCP analysis calls a retransmission (or out of order): a
/// retransmission whose segment boundaries differ from the original's (our TCP resends from
/// its send buffer, and spurious retransmissions happen when a loaded machine delays the
/// peer's ACKs past the 5 ms RTO floor) trips tshark's TCP reassembly once the MPA PDU it
/// belongs to was already reassembled; that is a capture artefact, not a malformed frame of
/// ours, and iwdump reassembled the same stream and checked every FPDU's CRC.
fn tshark_errors(path: &Path) -> Vec<String> {
    let out = crate::tshark::run(
        path,
        &[
            "-Y",
            "_ws.malformed || _ws.expert.severity == error",
            "-T",
            "fields",
            "-E",
            "separator=|",
            "-E",
            "aggregator=~",
            "-E",
            "occurrence=a",
            "-e",
            "frame.number",
            "-e",
            "_ws.malformed",
            "-e",
            "_ws.expert.severity",
            "-e",
            "_ws.expert.message",
            "-e",
            "tcp.analysis.retransmission",
            "-e",
            "tcp.analysis.out_of_order",
            "-e",
            "tcp.analysis.spurious_retransmission",
        ],
    );
    out.lines()
        .filter(|l| !l.trim().is_empty() && !only_overlap(l))
        .map(str::to_owned)
        .collect()
}

/// Whether a line of [`tshark_errors`]'s fields is a retransmitted segment whose only error
/// is [`OVERLAP`] (every expert item of severity error is that message, and every malformed
/// mark is the bare field or names it).
fn only_overlap(line: &str) -> bool {
    let f: Vec<&str> = line.split('|').collect();
    let field = |i: usize| f.get(i).copied().unwrap_or("");
    let list = |i: usize| -> Vec<&str> {
        if field(i).is_empty() {
            Vec::new()
        } else {
            field(i).split('~').collect()
        }
    };
    let (malformed, severities, messages) = (list(1), list(2), list(3));
    let mut errors = 0;
    for (k, sev) in severities.iter().enumerate() {
        if *sev == SEVERITY_ERROR {
            if messages.get(k) != Some(&OVERLAP) {
                return false;
            }
            errors += 1;
        }
    }
    if malformed
        .iter()
        .any(|m| !m.is_empty() && *m != "_ws.malformed" && !m.contains(OVERLAP))
    {
        return false;
    }
    let retransmitted = (4..=6).any(|i| !field(i).is_empty());
    retransmitted && (errors > 0 || !malformed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capture `bytes` normalised, or the judge's complaint.
    fn normalise(name: &str, bytes: &[u8]) -> Result<usize, String> {
        let dir = std::env::temp_dir().join(format!("wc-judge-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = dir.join("raw.pcapng");
        std::fs::write(&raw, bytes).unwrap();
        let r = std::panic::catch_unwind(|| normalised(&raw)).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panic".into())
        });
        let frames = r.map(|clean| {
            let cap = warpcore_analysis::capture::read_capture_file(&clean).expect("read");
            cap.frames.len()
        });
        std::fs::remove_dir_all(&dir).unwrap();
        frames
    }

    /// A capture whose writer stopped mid-block (an interrupted run, a full disk) is not
    /// judged by its first part: the normaliser used to drop the cut block and everything
    /// after it without a word, and the judge then passed whatever came before.
    #[test]
    fn a_capture_cut_short_is_refused_not_judged_by_its_head() {
        let whole = crate::pcapng::frames(5);
        assert_eq!(normalise("whole", &whole), Ok(5));
        // The last packet block cut in its middle.
        let cut = &whole[..whole.len() - 30];
        let e = normalise("cut", cut).expect_err("a cut capture must be refused");
        assert!(e.contains("cut short"), "{e}");
        // A few stray octets after the last whole block.
        let mut tail = whole.clone();
        tail.extend_from_slice(&[0; 5]);
        let e = normalise("tail", &tail).expect_err("trailing octets must be refused");
        assert!(e.contains("cut short"), "{e}");
    }
    /// The siw reference capture (Ethernet, CRCs negotiated) at `name`, frames `keep`
    /// rewritten as a DPDK-style pcapng file; judged; the judge's complaint if it failed.
    fn judge_siw(name: &str, tag: &str, keep: impl Fn(usize) -> bool) -> Result<(), String> {
        let cap = warpcore_analysis::capture::read_capture_file(
            &crate::paths::interop_pcaps().join(name),
        )
        .expect("read the siw capture");
        let frames: Vec<&[u8]> = cap
            .frames
            .iter()
            .enumerate()
            .filter(|(k, _)| keep(*k))
            .map(|(_, f)| &f.data[..])
            .collect();
        judge_bytes(tag, &crate::pcapng::ethernet(&frames))
    }

    /// The capture file `bytes` judged; the judge's complaint if it failed.
    fn judge_bytes(tag: &str, bytes: &[u8]) -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("wc-judge-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.pcapng");
        std::fs::write(&path, bytes).unwrap();
        let r = std::panic::catch_unwind(|| judge_capture(&path)).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panic".into())
        });
        std::fs::remove_dir_all(&dir).unwrap();
        r
    }

    /// A capture that misses frames (DPDK's capture ring overflowed, a frame dropped on
    /// the way to the file) leaves the rest of that direction's stream undecoded: iwdump
    /// notes the gap and checks no CRC, marker or segment after it, and the judge counted
    /// only what it had checked, so it passed a run most of which it never saw (a check
    /// that could not run, passing). It now fails, naming the gap.
    #[test]
    fn a_capture_gap_fails_the_judge() {
        const SIW: &str = "siw_mpa2crc_ib_send_lat.pcap";
        judge_siw(SIW, "siw-whole", |_| true).expect("the whole capture passes");
        // Drop one of the connection's data frames from the middle of the run.
        let cap =
            warpcore_analysis::capture::read_capture_file(&crate::paths::interop_pcaps().join(SIW))
                .unwrap();
        // Ethernet, IPv4, TCP: the frames carrying data, with their ports.
        let data: Vec<(usize, (u16, u16))> = cap
            .frames
            .iter()
            .enumerate()
            .filter_map(|(k, f)| {
                let d = &f.data;
                if d.get(12..14)? != [8, 0] {
                    return None;
                }
                let ihl = usize::from(d.get(14)? & 15) * 4;
                let total = usize::from(u16::from_be_bytes(d.get(16..18)?.try_into().ok()?));
                let t = 14 + ihl;
                let ports = (
                    u16::from_be_bytes(d.get(t..t + 2)?.try_into().ok()?),
                    u16::from_be_bytes(d.get(t + 2..t + 4)?.try_into().ok()?),
                );
                let payload = total - ihl - usize::from(d.get(t + 12)? >> 4) * 4;
                (payload > 0).then_some((k, ports))
            })
            .collect();
        // The busiest direction is the iWARP connection's (perftest's own TCP exchange
        // carries a dozen messages); drop a frame in the middle of it.
        let busiest = data
            .iter()
            .map(|(_, p)| *p)
            .max_by_key(|p| data.iter().filter(|(_, q)| q == p).count())
            .unwrap();
        let of_it: Vec<usize> = data
            .iter()
            .filter(|(_, p)| *p == busiest)
            .map(|(k, _)| *k)
            .collect();
        assert!(of_it.len() > 100, "{busiest:?}: {} frames", of_it.len());
        let dropped = of_it[of_it.len() / 2];
        let e = judge_siw(SIW, "siw-gap", |k| k != dropped).expect_err("a capture gap must fail");
        assert!(e.contains("capture gap"), "{e}");
    }

    /// tshark's expert errors fail the judge as they fail the shell judge
    /// (scripts/lib/capture-verdict.sh counts `_ws.expert.severity == error`), not only its
    /// malformed mark: one data segment of the siw capture with its TCP options' first NOP
    /// made an End of Option List, the options after it then padding that is not zero
    /// (RFC 9293 3.1: the padding is zeros), which tshark files as an expert error of
    /// severity error without marking the frame malformed, and iwdump (which reads no TCP
    /// option) does not see. The judge passed it.
    #[test]
    fn a_tshark_expert_error_fails_the_judge() {
        if !crate::tshark::present_or_skip("the tshark expert-error judge test") {
            return;
        }
        const SIW: &str = "siw_mpa2crc_ib_send_lat.pcap";
        let cap =
            warpcore_analysis::capture::read_capture_file(&crate::paths::interop_pcaps().join(SIW))
                .unwrap();
        // Ethernet, IPv4, TCP with options starting with a NOP, carrying data: the octet of
        // that NOP in the middle one of them.
        let nops: Vec<(usize, usize)> = cap
            .frames
            .iter()
            .enumerate()
            .filter_map(|(k, f)| {
                let d = &f.data;
                if d.get(12..14)? != [8, 0] {
                    return None;
                }
                let ihl = usize::from(d.get(14)? & 15) * 4;
                let total = usize::from(u16::from_be_bytes(d.get(16..18)?.try_into().ok()?));
                let t = 14 + ihl;
                let thl = usize::from(d.get(t + 12)? >> 4) * 4;
                (thl > 20 && total > ihl + thl && *d.get(t + 20)? == 1).then_some((k, t + 20))
            })
            .collect();
        assert!(nops.len() > 10, "{} data frames with options", nops.len());
        let (frame, at) = nops[nops.len() / 2];
        let frames: Vec<Vec<u8>> = cap
            .frames
            .iter()
            .enumerate()
            .map(|(k, f)| {
                let mut d = f.data.clone();
                if k == frame {
                    d[at] = 0; // End of Option List; the rest of the options become padding
                }
                d
            })
            .collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        let e = judge_bytes("siw-padding", &crate::pcapng::ethernet(&refs))
            .expect_err("a frame tshark gives an expert error must fail the judge");
        assert!(e.contains("expert errors"), "{e}");
        assert!(e.contains("Non-zero header padding"), "{e}");
    }

    /// The lines [`tshark_errors`] keeps: a retransmission whose only error is the overlap
    /// is left out; one with another error besides (the old filter left out any malformed
    /// retransmission with an overlap message among its items), an overlap on a segment
    /// that is no retransmission, and an expert error without the malformed mark are kept.
    #[test]
    fn only_a_retransmission_overlap_is_left_out() {
        let ov = OVERLAP;
        let e = SEVERITY_ERROR;
        assert!(only_overlap(&format!("12|_ws.malformed|{e}|{ov}|1||")));
        assert!(only_overlap(&format!("12||{e}|{ov}||1|")));
        assert!(!only_overlap(&format!("12|_ws.malformed|{e}|{ov}|||")));
        assert!(!only_overlap(&format!(
            "12|[Malformed Packet: IWARP_MPA]~_ws.malformed|{e}~{e}|{ov}~Malformed Packet (Exception occurred)|1||"
        )));
        assert!(!only_overlap(&format!(
            "12||4194304~{e}|This frame is a (suspected) retransmission~Non-zero header padding|1||"
        )));
        assert!(!only_overlap(&format!(
            "12||{e}|Non-zero header padding|||"
        )));
    }

    /// Two runs in one capture, each an iWARP connection with CRCs; the MPA Reply of the
    /// second dropped (a frame the capture lost). That connection never reaches FPDU mode
    /// in iwdump (a note, no alignment figures), so none of its FPDUs is checked; the
    /// judge looked for gaps only through the alignment figures of decoded directions and
    /// passed, the first connection's CRCs standing in for the second's. Every stream of
    /// the capture must be whole, or the judge fails naming the gap.
    #[test]
    fn a_gap_before_fpdu_mode_fails_the_judge() {
        let read = |name: &str| {
            warpcore_analysis::capture::read_capture_file(&crate::paths::interop_pcaps().join(name))
                .expect("read the siw capture")
        };
        let (a, b) = (
            read("siw_mpa2crc_ib_send_lat.pcap"),
            read("siw_mpa2crc_ib_write_lat.pcap"),
        );
        // The frame of `b` whose TCP payload is the MPA Reply (Ethernet, IPv4, TCP).
        let reply = b
            .frames
            .iter()
            .position(|f| {
                let d = &f.data;
                let ihl = usize::from(d.get(14).map_or(0, |v| v & 15)) * 4;
                let t = 14 + ihl;
                let off = usize::from(d.get(t + 12).map_or(0, |v| v >> 4)) * 4;
                d.get(t + off..t + off + 16) == Some(&b"MPA ID Rep Frame"[..])
            })
            .expect("the MPA Reply of the second run");
        let frames = |skip: Option<usize>| -> Vec<&[u8]> {
            a.frames
                .iter()
                .map(|f| &f.data[..])
                .chain(
                    b.frames
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| Some(*k) != skip)
                        .map(|(_, f)| &f.data[..]),
                )
                .collect()
        };
        judge_bytes("siw-two", &crate::pcapng::ethernet(&frames(None)))
            .expect("both runs whole pass");
        let e = judge_bytes(
            "siw-two-gap",
            &crate::pcapng::ethernet(&frames(Some(reply))),
        )
        .expect_err("a connection the capture lost its Reply of must fail");
        assert!(e.contains("capture gap"), "{e}");
    }

    /// A frame the reader could not place (here a packet block naming an interface the
    /// file never described) is skipped with a capture warning; the judge ignored the
    /// capture's warnings, so a run whose last frames it never read passed. Every frame is
    /// read, or the judge fails.
    #[test]
    fn a_frame_the_reader_skipped_fails_the_judge() {
        const SIW: &str = "siw_mpa2crc_ib_send_lat.pcap";
        let cap =
            warpcore_analysis::capture::read_capture_file(&crate::paths::interop_pcaps().join(SIW))
                .unwrap();
        let frames: Vec<&[u8]> = cap.frames.iter().map(|f| &f.data[..]).collect();
        let mut bytes = crate::pcapng::ethernet(&frames);
        judge_bytes("siw-all-read", &bytes).expect("the whole capture passes");
        // The last block (an enhanced packet block) names interface 7.
        let n = bytes.len();
        let total = u32::from_le_bytes(bytes[n - 4..].try_into().unwrap()) as usize;
        let start = n - total;
        assert_eq!(bytes[start..start + 4], 6u32.to_le_bytes());
        bytes[start + 8..start + 12].copy_from_slice(&7u32.to_le_bytes());
        let e = judge_bytes("siw-skipped", &bytes).expect_err("a skipped frame must fail");
        assert!(e.contains("unknown interface"), "{e}");
    }
}
