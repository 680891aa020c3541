//! The header lengths `set_tx_checksum_offload` and `set_tx_tso` store go into bit fields of
//! DPDK's offload word (`l2_len` 7 bits, `l3_len` 9). A length that does not fit is refused
//! naming the field and the value, and the mbuf is left as it was; before, only its low
//! bits were kept (an `l3_len` of 532 was stored as 20), and the port filled the checksums,
//! or cut the segments, at the wrong offsets: a wrong packet instead of an error. The
//! largest lengths that fit are stored exactly. (Its own test binary: the EAL is initialised
//! once per process.)

use warpcore_dpdk_sys::{
    EalBuilder, Mbuf, Mempool, TxChecksumOffload, TxOffloadError, TxOffloadField,
    TxOffloadLenError, TxTso,
};

#[test]
fn offload_header_lengths_beyond_their_bit_fields_are_refused_naming_field_and_value() {
    let eal = EalBuilder::for_test("tx_offload_lens", 0, 128)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wc_txlen_pool", 255, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let mut m = Mbuf::from_slice(&pool, &[0u8; 600]).expect("mbuf");
    let csum = |l2_len: u8, l3_len: u16| TxChecksumOffload {
        l2_len,
        l3_len,
        ipv4: true,
        tcp: true,
    };
    let tso = |l2_len: u8, l3_len: u16| TxTso {
        l2_len,
        l3_len,
        l4_len: 255,
        segsz: u16::MAX,
    };
    let l2 = |value| {
        TxOffloadError::Len(TxOffloadLenError {
            field: TxOffloadField::L2Len,
            value,
        })
    };
    let l3 = |value| {
        TxOffloadError::Len(TxOffloadLenError {
            field: TxOffloadField::L3Len,
            value,
        })
    };

    // 532 = 512 + 20: masked, it was an ordinary IPv4 header length.
    let e = m
        .set_tx_checksum_offload(csum(14, 532))
        .expect_err("l3_len 532");
    assert_eq!(e, l3(532));
    assert_eq!(
        e.to_string(),
        "transmit offload l3_len = 532 octets does not fit DPDK's offload word (at most 511)"
    );
    assert_eq!(m.set_tx_checksum_offload(csum(128, 20)), Err(l2(128)));
    assert_eq!(m.set_tx_checksum_offload(csum(255, 600)), Err(l2(255)));
    assert_eq!(m.set_tx_tso(tso(14, 512)), Err(l3(512)));
    assert_eq!(m.set_tx_tso(tso(142, 20)), Err(l2(142)));
    // Refused, the mbuf asks for nothing.
    assert_eq!(m.tx_checksum_offload(), None);
    assert_eq!(m.tx_tso_segsz(), None);
    m.check_tx_offload().expect("no offload asked for");

    // The largest lengths that fit are stored as given.
    m.set_tx_checksum_offload(csum(127, 511))
        .expect("lengths that fit");
    assert_eq!(m.tx_checksum_offload(), Some(csum(127, 511)));
    let mut t = Mbuf::from_slice(&pool, &[0u8; 600]).expect("mbuf");
    t.set_tx_tso(tso(127, 511)).expect("lengths that fit");
    assert_eq!(t.tx_tso_segsz(), Some(u16::MAX));
    assert_eq!(t.tx_checksum_offload(), Some(csum(127, 511)));
}
