//! Helpers of the memory window, fast registration and SRQ tests: more than one connected
//! QP pair over one [`Pair`], and the Terminate each side reported.
#![allow(dead_code)]

use std::sync::Arc;

use crate::common::{ip, Pair, PORT};
use warpcore_engine::mem::Stag;
use warpcore_engine::{
    CmEvent, Completion, ConnError, MpaParams, QpId, QpShared, SendOp, SendWr, SgeList, WcOpcode,
};

/// Connects the idle QPs `qa` (on A) and `qb` (on B) through a listener on `port`.
pub fn connect_qps(p: &mut Pair, qa: QpId, qb: QpId, port: u16) {
    p.b.core.listen(port, MpaParams::default()).expect("listen");
    p.a.core
        .connect(qa, (ip(2), port), &MpaParams::default(), b"a")
        .expect("connect");
    let req = p.wait_request();
    p.b.core
        .accept(req.request, qb, b"b", None)
        .expect("accept");
    let mut est = (false, false);
    p.run_until(2000, |p| {
        est.0 |=
            p.a.take_events()
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_)));
        est.1 |=
            p.b.take_events()
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_)));
        est.0 && est.1
    });
}

/// A QP of depth 64 on B with its shared state (to attach a shared receive queue).
pub fn qp_b(p: &mut Pair) -> (QpId, Arc<QpShared>) {
    p.b.qp_shared(64)
}

/// `n` connected QP pairs: `(A's, B's)`.
pub fn pairs(p: &mut Pair, n: usize) -> Vec<(QpId, QpId)> {
    (0..n)
        .map(|i| {
            let qa = p.a.qp(64);
            let qb = p.b.qp(64);
            connect_qps(p, qa, qb, PORT + 10 + i as u16);
            (qa, qb)
        })
        .collect()
}

/// A signalled request without SGEs.
pub fn op_wr(wr_id: u64, op: SendOp) -> SendWr {
    SendWr {
        wr_id,
        op,
        sges: SgeList::new(),
        signaled: true,
        fence: false,
    }
}

/// The STag `s` with its key advanced by one (the next key of a bind or fast registration).
pub fn next(s: Stag) -> Stag {
    Stag::new(s.index(), s.key().wrapping_add(1))
}

/// (layer, type, code) of the first Terminate `qp` received, if any.
pub fn remote_term(events: &[CmEvent], qp: QpId) -> Option<(u8, u8, u8)> {
    events.iter().find_map(|e| match e {
        CmEvent::Error {
            qp: q,
            error: ConnError::RemoteTerminate(r),
        } if *q == qp => Some((r.code.layer(), r.code.etype(), r.code.code())),
        _ => None,
    })
}

/// Whether `qp` reported an error it detected itself (it sent the Terminate; a failed
/// local operation is reported with its cause).
pub fn local_term(events: &[CmEvent], qp: QpId) -> bool {
    events.iter().any(|e| {
        matches!(e, CmEvent::Error {
            qp: q,
            error: ConnError::LocalTerminate(_) | ConnError::LocalOperation { .. },
        } if *q == qp)
    })
}

/// Runs until A's `qa` received a Terminate and B's `qb` reported sending it; returns the
/// Terminate's (layer, type, code).
pub fn expect_terminate(p: &mut Pair, qa: QpId, qb: QpId) -> (u8, u8, u8) {
    terminate_between(p, true, qa, qb)
}

/// The other way round: runs until B's `qb` received a Terminate and A's `qa` reported
/// sending it; returns the Terminate's (layer, type, code).
pub fn expect_terminate_from_a(p: &mut Pair, qa: QpId, qb: QpId) -> (u8, u8, u8) {
    terminate_between(p, false, qa, qb)
}

/// Runs until one side's QP received a Terminate (A's `qa` if `a_receives`, else B's `qb`)
/// and the other's reported sending it; returns the Terminate's (layer, type, code).
fn terminate_between(p: &mut Pair, a_receives: bool, qa: QpId, qb: QpId) -> (u8, u8, u8) {
    let mut t = None;
    let mut local = false;
    p.run_until(5000, |p| {
        let (rx, tx) = if a_receives {
            ((&p.a.events, qa), (&p.b.events, qb))
        } else {
            ((&p.b.events, qb), (&p.a.events, qa))
        };
        t = t.or(remote_term(rx.0, rx.1));
        local |= local_term(tx.0, tx.1);
        t.is_some() && local
    });
    t.expect("terminate")
}

/// Runs until a completion of `opcode` with `wr_id` is on `side`'s list; returns it.
pub fn wait_completion(p: &mut Pair, on_b: bool, wr_id: u64, opcode: WcOpcode) -> Completion {
    let mut got = None;
    p.run_until(5000, |p| {
        let side = if on_b { &mut p.b } else { &mut p.a };
        if let Some(i) = side
            .completions
            .iter()
            .position(|c| c.wr_id == wr_id && c.opcode == opcode)
        {
            got = Some(side.completions.remove(i));
        }
        got.is_some()
    });
    got.expect("completion")
}
