//! Replays the committed corpus of the cargo-fuzz target `capture` (iwdump's decoder on
//! hostile captures) as a regular test: the body lives in `fuzz/capture_body.rs` and is
//! compiled here unchanged, so every file of `fuzz/corpus/capture/` (seeds, inputs the
//! fuzzer kept, crash reproducers once fixed) runs on every `cargo test`, without nightly
//! or libFuzzer.

#[path = "../../fuzz/capture_body.rs"]
mod capture_body;

#[path = "../../fuzz/replay.rs"]
mod replay;

/// Every corpus file through the body; a panic fails the test naming the file.
#[test]
fn corpus_capture() {
    replay::replay("capture", capture_body::capture);
}

/// The body's checks can fail: a capture whose report the body must find consistent, and
/// the framed layout decoding a real frame (not vacuously empty).
#[test]
fn the_framed_layout_reaches_the_decoder() {
    // One Ethernet/IPv4/TCP SYN from 10.0.0.1:40000 to 10.0.0.2:5000.
    let mut f = vec![0u8; 14 + 20 + 20];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[16..18].copy_from_slice(&40u16.to_be_bytes());
    f[22] = 64;
    f[23] = 6;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5000u16.to_be_bytes());
    f[46] = 0x50;
    f[47] = 0x02;
    let mut input = vec![1u8];
    input.extend_from_slice(&(f.len() as u16).to_be_bytes());
    input.extend_from_slice(&f);
    capture_body::capture(&input);
    let c = warpcore_analysis::capture::Capture {
        format: warpcore_analysis::capture::CaptureFormat::Pcap,
        frames: vec![warpcore_analysis::capture::Frame {
            number: 1,
            timestamp: std::time::Duration::from_micros(1),
            link: warpcore_analysis::capture::LinkType::Ethernet,
            data: f.clone(),
            original_len: f.len() as u32,
        }],
        warnings: Vec::new(),
        incomplete: false,
    };
    let r = warpcore_analysis::report::analyse_capture("fuzz", &c);
    assert_eq!(r.non_tcp_frames, 0, "the frame is TCP to the decoder");
    assert_eq!(r.connections.len(), 1);
}
