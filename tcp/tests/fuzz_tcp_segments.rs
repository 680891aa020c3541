//! The `tcp_segments` fuzz body (`warpcore_tcp::fuzzing`, issue 11) as regular tests: the
//! committed corpus `fuzz/corpus/tcp_segments/` replays on every `cargo test`, and seeded
//! random inputs run through the body, so its invariants are exercised without cargo-fuzz.

use std::path::PathBuf;

use warpcore_tcp::fuzzing::tcp_segments;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/tcp_segments")
}

#[test]
fn committed_corpus_replays_clean() {
    let dir = corpus_dir();
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let data = std::fs::read(e.path()).expect("corpus file");
            tcp_segments(&data);
            n += 1;
        }
    }
    eprintln!(
        "replayed {n} corpus inputs from {}; the receive fast path took {} segments, {} of them acknowledging new data",
        dir.display(),
        warpcore_tcp::conn::predicted_segments(),
        warpcore_tcp::conn::answered_segments()
    );
}

#[test]
fn seeded_random_inputs_run_clean() {
    // SplitMix64 stream: reproducible inputs of varied length.
    let mut x: u64 = 0x5eed;
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..300 {
        let len = (next() % 4096) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        tcp_segments(&data);
    }
}
