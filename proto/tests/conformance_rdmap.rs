//! RDMAP conformance rows (draft-ietf-rddp-rdmap-06, final RFC 5040) that no other test
//! checked on its own: the Terminate codes of Figure 9, the checks of an inbound Read
//! Request, and the untagged buffers Read Requests and Terminates consume. The matrix in
//! `docs/conformance.md` lists each row with the test that checks it.

use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, Placement, TaggedBuffers, TaggedFault, TaggedRegion, UntaggedBuffers,
    MAX_SEGMENT_HEADER_LEN, QUEUE_COUNT,
};
use warpcore_proto::error::{DdpError, MpaError, ProtocolError, RdmapError, TerminateCode};
use warpcore_proto::rdmap::{check_inbound, RdmapConfig};
use warpcore_proto::wire::ddp::{DdpBuffer, DDP_VERSION};
use warpcore_proto::wire::rdmap::{Control, Opcode, ReadRequestRepr};
use warpcore_proto::wire::segment::{RdmapHeader, Segment, SegmentError, SegmentRepr};

const RDMAP_ERRORS: [RdmapError; 14] = [
    RdmapError::LocalCatastrophic,
    RdmapError::InvalidStag,
    RdmapError::BaseOrBounds,
    RdmapError::AccessRights,
    RdmapError::StagNotAssociated,
    RdmapError::ToWrap,
    RdmapError::ProtectionCannotInvalidate,
    RdmapError::ProtectionUnspecified,
    RdmapError::InvalidVersion,
    RdmapError::UnexpectedOpcode,
    RdmapError::CatastrophicStream,
    RdmapError::CatastrophicGlobal,
    RdmapError::OperationCannotInvalidate,
    RdmapError::OperationUnspecified,
];

/// RDMAP-06 Figure 9, Layer 0 (RDMA): (EType, Error Code) pairs. EType 0 (local
/// catastrophic) has no code of its own ("None").
const FIGURE_9_RDMA: [(u8, u8); 13] = [
    (0x1, 0x00),
    (0x1, 0x01),
    (0x1, 0x02),
    (0x1, 0x03),
    (0x1, 0x04),
    (0x1, 0x09),
    (0x1, 0xFF),
    (0x2, 0x05),
    (0x2, 0x06),
    (0x2, 0x07),
    (0x2, 0x08),
    (0x2, 0x09),
    (0x2, 0xFF),
];

/// RDMAP-4.8-3: Layer, EType and Error Code take only the values of Figure 9. Every RDMAP
/// error we send has a Figure 9 triple, every Figure 9 triple names exactly one error, and
/// no other RDMA-layer triple is taken for one; Layer is RDMA (0), DDP (1) or LLP (2) and
/// nothing else.
#[test]
fn terminate_codes_are_those_of_figure_9() {
    for e in RDMAP_ERRORS {
        let c = e.terminate_code();
        assert_eq!(c.layer(), 0, "{e:?}");
        assert!(
            c.etype() == 0 || FIGURE_9_RDMA.contains(&(c.etype(), c.code())),
            "{e:?} sends {c:?}, not in Figure 9"
        );
        assert_eq!(ProtocolError::from_code(c), Some(ProtocolError::Rdmap(e)));
    }
    for etype in 0..16u8 {
        for code in 0..=255u8 {
            let known = RdmapError::from_etype_code(etype, code);
            let in_figure = etype == 0 || FIGURE_9_RDMA.contains(&(etype, code));
            assert_eq!(known.is_some(), in_figure, "0/{etype:x}/{code:02x}");
        }
    }
    // The DDP and LLP layers' errors carry their own layer numbers.
    let ddp = [
        DdpError::LocalCatastrophic,
        DdpError::TaggedInvalidStag,
        DdpError::UntaggedNoBuffer,
        DdpError::UntaggedInvalidVersion,
    ];
    for e in ddp {
        assert_eq!(e.terminate_code().layer(), 1, "{e:?}");
    }
    for e in [MpaError::CrcMismatch, MpaError::NoMatchingRtr] {
        assert_eq!(e.terminate_code().layer(), 2, "{e:?}");
    }
    for layer in 3..16u8 {
        assert_eq!(
            ProtocolError::from_code(TerminateCode::new(layer, 1, 0)),
            None
        );
    }
}

fn read_request(sink_stag: u32, src_stag: u32, size: u32) -> ReadRequestRepr {
    ReadRequestRepr {
        sink_stag,
        sink_to: 0x4000,
        read_size: size,
        src_stag,
        src_to: 0x1000,
    }
}

/// Emits a Read Request the way the engine's send path does (RDMAP header as the ULP
/// header of an untagged DDP message on QN 1); returns its one segment.
fn emit_read_request(sender: &mut DdpSender, req: &ReadRequestRepr) -> Vec<u8> {
    let mut hdr = [0u8; 64];
    let n = RdmapHeader::ReadRequest(*req).emit_into(&mut hdr).unwrap();
    let mut s = sender
        .untagged(
            Control::new(Opcode::ReadRequest).0,
            0,
            1,
            &hdr[..n],
            0,
            1500,
        )
        .unwrap();
    let mut buf = [0u8; MAX_SEGMENT_HEADER_LEN];
    let seg = s.next_segment(&mut buf).unwrap().unwrap();
    assert!(seg.last() && s.next_segment(&mut buf).unwrap().is_none());
    buf[..seg.header_len].to_vec()
}

/// RDMAP-5.2.1-1: a Read Request goes out untagged (T = 0) on QN 1, whole in one segment,
/// and decodes as one.
#[test]
fn a_read_request_is_untagged_on_qn_1() {
    let req = read_request(0x11, 0x22, 4096);
    let bytes = emit_read_request(&mut DdpSender::new(), &req);
    assert_eq!(bytes[0] & 0x80, 0, "T = 0");
    let seg = Segment::parse(&bytes).unwrap();
    assert_eq!(seg.repr.opcode, Opcode::ReadRequest);
    assert_eq!(seg.repr.header, RdmapHeader::ReadRequest(req));
    assert!(matches!(
        seg.repr.buffer,
        DdpBuffer::Untagged { qn: 1, msn: 1, .. }
    ));
    // The encode side refuses a tagged Read Request rather than sending one.
    let tagged = SegmentRepr {
        last: true,
        buffer: DdpBuffer::Tagged { stag: 1, to: 0 },
        opcode: Opcode::ReadRequest,
        header: RdmapHeader::ReadRequest(req),
    };
    assert!(tagged.emit(&mut [0u8; 64]).is_err());
}

/// RDMAP-7.2-7, RDMAP-7.2-8: an inbound Read Request's opcode (valid, and for the buffer
/// model and queue it came on) and RDMA version are checked before anything of it is used.
#[test]
fn an_inbound_read_requests_version_and_opcode_are_checked() {
    let good = emit_read_request(&mut DdpSender::new(), &read_request(0x11, 0x22, 8));
    assert!(Segment::parse(&good).is_ok());
    // RV 0, 2, 3 (the control octet is D+1; RV is its top two bits).
    for rv in [0u8, 2, 3] {
        let mut b = good.clone();
        b[1] = (rv << 6) | Opcode::ReadRequest as u8;
        let e = Segment::parse(&b).unwrap_err();
        assert_eq!(e, SegmentError::RdmapVersion, "RV {rv}");
        assert_eq!(
            e.protocol_error(),
            ProtocolError::Rdmap(RdmapError::InvalidVersion)
        );
    }
    // The Read Request opcode on a tagged segment is not valid for its buffer model.
    let mut tagged = good.clone();
    tagged[0] |= 0x80;
    let e = Segment::parse(&tagged).unwrap_err();
    assert_eq!(e, SegmentError::BufferModel(Opcode::ReadRequest));
    assert_eq!(
        e.protocol_error(),
        ProtocolError::Rdmap(RdmapError::UnexpectedOpcode)
    );
    // On a queue other than QN 1 it is refused as well.
    let mut qn0 = good.clone();
    qn0[6..10].copy_from_slice(&0u32.to_be_bytes());
    assert!(matches!(
        Segment::parse(&qn0),
        Err(SegmentError::QueueNumber {
            opcode: Opcode::ReadRequest,
            qn: 0
        })
    ));
    // A reserved opcode in the same place is no Read Request.
    let mut reserved = good;
    reserved[1] = Control::new(Opcode::ReadRequest).0 | 0x0C;
    assert_eq!(
        Segment::parse(&reserved).unwrap_err(),
        SegmentError::UnknownOpcode(0xD)
    );
}

/// Receive queues: `posted[qn]` buffers on each queue, head first.
struct Queues {
    posted: [Vec<u64>; QUEUE_COUNT],
}

impl TaggedBuffers for Queues {
    fn tagged_region(&self, _stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        Err(TaggedFault::InvalidStag)
    }
}

impl UntaggedBuffers for Queues {
    fn queue_valid(&self, qn: u32) -> bool {
        (qn as usize) < QUEUE_COUNT
    }
    fn buffer_len(&self, qn: u32, _msn: u32) -> Option<u64> {
        self.posted[qn as usize].first().copied()
    }
}

/// RDMAP-5.2.1-2: each Read Request takes the next MSN of QN 1 and so one untagged buffer
/// (an inbound request slot) at the responder, one per request: delivered once, it moves
/// the queue on; without a slot it is refused; a replay of one already taken is refused.
#[test]
fn each_read_request_consumes_one_untagged_buffer() {
    let mut sender = DdpSender::new();
    let reqs: Vec<_> = (0..3)
        .map(|i| emit_read_request(&mut sender, &read_request(0x11, 0x22, 64 + i)))
        .collect();
    let mut q = Queues {
        posted: Default::default(),
    };
    q.posted[1] = vec![64, 64, 64];
    let mut rx = DdpReceiver::new(DDP_VERSION);
    for (i, r) in reqs.iter().enumerate() {
        assert_eq!(rx.expected_msn(1), Some(i as u32 + 1));
        let Some(Placement::Untagged(p)) = rx.handle_segment(r, &q, &q).unwrap() else {
            panic!("untagged expected")
        };
        assert_eq!((p.qn, p.msn, p.message_len), (1, i as u32 + 1, Some(28)));
        q.posted[1].remove(0);
    }
    assert_eq!(rx.expected_msn(1), Some(4));
    // A replayed request finds no MSN left for it.
    assert_eq!(
        rx.handle_segment(&reqs[2], &q, &q),
        Err(DdpError::UntaggedMsnOutOfRange)
    );
    // Without a slot the first request is refused: "no buffer available".
    let mut empty = DdpReceiver::new(DDP_VERSION);
    let none = Queues {
        posted: Default::default(),
    };
    assert_eq!(
        empty.handle_segment(&reqs[0], &none, &none),
        Err(DdpError::UntaggedNoBuffer)
    );
}

/// RDMAP-5.4-3: a Terminate is an untagged message on QN 2 that takes its MSN and one
/// buffer there: with the buffer it is delivered and moves QN 2 on; without one it is
/// refused like any untagged message.
#[test]
fn a_terminate_consumes_one_untagged_buffer_on_qn_2() {
    let term = [0x20u8, 0x07, 0x00, 0x00];
    let mut s = DdpSender::new()
        .untagged(Control::new(Opcode::Terminate).0, 0, 2, &term, 0, 1500)
        .unwrap();
    let mut buf = [0u8; MAX_SEGMENT_HEADER_LEN];
    let seg = s.next_segment(&mut buf).unwrap().unwrap();
    let bytes = buf[..seg.header_len].to_vec();
    assert_eq!(
        Segment::parse(&bytes).unwrap().repr.opcode,
        Opcode::Terminate
    );
    let mut q = Queues {
        posted: Default::default(),
    };
    q.posted[2] = vec![128];
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let Some(Placement::Untagged(p)) = rx.handle_segment(&bytes, &q, &q).unwrap() else {
        panic!("untagged expected")
    };
    assert_eq!((p.qn, p.msn, p.message_len), (2, 1, Some(4)));
    assert_eq!(rx.expected_msn(2), Some(2));
    let none = Queues {
        posted: Default::default(),
    };
    assert_eq!(
        DdpReceiver::new(DDP_VERSION).handle_segment(&bytes, &none, &none),
        Err(DdpError::UntaggedNoBuffer)
    );
}

/// RDMAP-5.5-4, RDMAP-5.5-10: a Read Request is acted on only as a whole message DDP has
/// delivered: one segment with L = 1 and MO = 0 that the DDP receiver reports complete. A
/// Read Request segment that is not the whole message (L = 0, or a later MO) is refused
/// before the responder reads anything for it.
#[test]
fn a_read_request_is_acted_on_only_once_delivered_whole() {
    let config = RdmapConfig::default();
    let req = read_request(0x11, 0x22, 4096);
    let whole = SegmentRepr {
        last: true,
        buffer: DdpBuffer::Untagged {
            rsvd_ulp2: 0,
            qn: 1,
            msn: 1,
            mo: 0,
        },
        opcode: Opcode::ReadRequest,
        header: RdmapHeader::ReadRequest(req),
    };
    assert_eq!(check_inbound(&whole, &config), Ok(()));
    let unfinished = SegmentRepr {
        last: false,
        ..whole
    };
    let later = SegmentRepr {
        buffer: DdpBuffer::Untagged {
            rsvd_ulp2: 0,
            qn: 1,
            msn: 1,
            mo: 28,
        },
        ..whole
    };
    for seg in [unfinished, later] {
        assert_eq!(
            check_inbound(&seg, &config),
            Err(RdmapError::CatastrophicStream.into())
        );
    }
    // What the engine gets from DDP for the whole one: delivered (message length set).
    let bytes = emit_read_request(&mut DdpSender::new(), &req);
    let mut q = Queues {
        posted: Default::default(),
    };
    q.posted[1] = vec![64];
    let Some(Placement::Untagged(p)) = DdpReceiver::new(DDP_VERSION)
        .handle_segment(&bytes, &q, &q)
        .unwrap()
    else {
        panic!("untagged expected")
    };
    assert_eq!(p.message_len, Some(28));
}
