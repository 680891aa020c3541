//! Dropping a `QueuePair` destroys it, also when its core's command ring is full at that
//! moment: the destroy waits for room instead of being lost (the queue pair, its slot and
//! its connection would otherwise live on until the context goes).

use warpcore_verbs::*;

/// Drops `n` idle queue pairs at once on a context whose command ring holds `depth`
/// commands (`None`: the default) and checks that none is left. The engine takes commands
/// in order, so the statistics command queued after the last destroy sees them all done.
fn drop_burst(depth: Option<usize>, n: usize) {
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev_a, [10, 0, 0, 1]);
    if let Some(d) = depth {
        cfg.engine.command_queue_depth = d;
    }
    let ctx = Context::open(cfg).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    let qps: Vec<QueuePair> = (0..n)
        .map(|_| pd.create_qp(&QpInit::new(&cq, &cq)).unwrap())
        .collect();
    assert_eq!(ctx.stats().unwrap()[0].qps_live, n as u64);
    drop(qps);
    assert_eq!(
        live_qps(&ctx),
        0,
        "queue pairs dropped while the command ring was full were never destroyed"
    );
}

/// The live queue pairs, asked with a statistics command queued behind every command
/// already in the ring (a full ring refuses it for the moment: try again).
fn live_qps(ctx: &Context) -> u64 {
    loop {
        match ctx.stats() {
            Ok(s) => return s[0].qps_live,
            Err(Error::LimitExceeded("command_queue_depth")) => std::thread::yield_now(),
            Err(e) => panic!("stats: {e}"),
        }
    }
}

#[test]
fn dropped_queue_pairs_are_destroyed_when_the_command_ring_is_full() {
    drop_burst(Some(2), 64);
}

#[test]
fn a_burst_of_drops_through_the_default_command_ring_destroys_every_queue_pair() {
    drop_burst(None, 8000);
}
