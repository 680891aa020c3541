//! The guard a receive pass keeps (`rx::RxHeld`) answers only for the right it was looked
//! up for. A Read Response into our Read's sink (`LOCAL`: local write, no remote write)
//! leaves the sink's guard held, for the local write right; a Write into the same STag
//! later in the same pass needs the remote write right and must be refused as a fresh
//! lookup refuses it, with a Terminate and nothing placed, on the fast path (the plain
//! Write's own comparison) and on the general one (`rx_lookup`'s,
//! `core::set_general_paths_only`).

use warpcore_engine::core::set_general_paths_only;
use warpcore_engine::fuzzing::{run, Piece, RxInput, Seg, Setup, StagPick, ToPick, LOCAL, RW};
use warpcore_engine::proto::error::ProtocolError;
use warpcore_engine::proto::wire::rdmap::Opcode;
use warpcore_engine::QpState;

fn seg(opcode: Opcode, region: usize, to: u16, len: u16) -> Piece {
    Piece::Seg(Seg::plain(
        opcode,
        StagPick::Region(region as u8),
        ToPick::Start(to),
        len,
    ))
}

#[test]
fn a_guard_held_for_a_read_sink_does_not_place_a_write() {
    let input = |then_write: bool| {
        let mut pieces = vec![
            // An empty Write lifts the MPA fence, alone in the first segment.
            seg(Opcode::Write, RW, 0, 0),
            seg(Opcode::ReadResponse, LOCAL, 384, 64),
        ];
        if then_write {
            pieces.push(seg(Opcode::Write, LOCAL, 0, 64));
        }
        RxInput {
            setup: Setup {
                rev1: false,
                crc: true,
                markers_rx: false,
                markers_tx: false,
                p2p: false,
                rfc7306: false,
                recvs: 0,
                reads: 2,
                atomic: false,
                fin: false,
            },
            pieces,
            // The Read Response and the Write share the second segment: one pass.
            cuts: vec![2 + 14 + 4, 0],
        }
    };
    for general in [false, true] {
        set_general_paths_only(general);
        let alone = run(&input(false));
        let both = run(&input(true));
        set_general_paths_only(false);
        let alone = alone.unwrap_or_else(|v| panic!("general {general}: {v}"));
        let both = both.unwrap_or_else(|v| panic!("general {general}: {v}"));
        // The Read Response is placed either way.
        assert!(alone.terminates.is_empty(), "general {general}: {alone:?}");
        assert!(alone.changed > 0, "general {general}: {alone:?}");
        // The Write after it changes nothing more, and is refused.
        assert_eq!(both.changed, alone.changed, "general {general}: {both:?}");
        assert_eq!(both.terminates.len(), 1, "general {general}: {both:?}");
        assert!(both.local_error, "general {general}: {both:?}");
        assert!(
            matches!(both.state, Some(QpState::Error | QpState::Terminate)),
            "general {general}: {both:?}"
        );
        assert!(
            matches!(
                both.terminates[0].error,
                Some(ProtocolError::Ddp(_) | ProtocolError::Rdmap(_))
            ),
            "general {general}: {both:?}"
        );
    }
}
