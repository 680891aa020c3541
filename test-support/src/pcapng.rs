//! Small pcapng files built in memory, for the tests of what reads or rewrites captures.

/// One little-endian pcapng block of type `ty` around `body` (padded by the caller).
fn block(out: &mut Vec<u8>, ty: u32, body: &[u8]) {
    let total = (12 + body.len()) as u32;
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&total.to_le_bytes());
}

/// A little-endian pcapng file of `frames` 60-octet Ethernet frames: a section header, one
/// interface (LINKTYPE_ETHERNET, snap length 65535) and an Enhanced Packet Block per frame,
/// frame k filled with octet k and stamped k.
pub fn frames(frames: usize) -> Vec<u8> {
    let mut f = frames_header();
    for k in 0..frames {
        let mut epb = vec![0u8; 4]; // interface 0
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&(k as u32).to_le_bytes());
        epb.extend_from_slice(&60u32.to_le_bytes());
        epb.extend_from_slice(&60u32.to_le_bytes());
        epb.extend_from_slice(&[k as u8; 60]);
        block(&mut f, 6, &epb);
    }
    f
}

/// A little-endian pcapng file of the Ethernet frames `frames` (whole, as captured), frame
/// k stamped k microseconds: what a DPDK capture of them would hold, for the judge's tests.
pub fn ethernet(frames: &[&[u8]]) -> Vec<u8> {
    let mut f = frames_header();
    for (k, data) in frames.iter().enumerate() {
        let mut epb = vec![0u8; 4]; // interface 0
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&(k as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(data);
        epb.resize(epb.len().div_ceil(4) * 4, 0);
        block(&mut f, 6, &epb);
    }
    f
}

/// A section header and one Ethernet interface (snap length 65535, microseconds).
fn frames_header() -> Vec<u8> {
    let mut f = Vec::new();
    let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&u64::MAX.to_le_bytes());
    block(&mut f, 0x0A0D_0D0A, &shb);
    let mut idb = vec![1, 0, 0, 0];
    idb.extend_from_slice(&65535u32.to_le_bytes());
    block(&mut f, 1, &idb);
    f
}
