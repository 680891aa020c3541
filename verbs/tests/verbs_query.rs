//! What a context says about its device and port (`ibv_query_device`, `ibv_query_port`):
//! iWARP, the configured limits, one port whose one GID is the IPv4-mapped address.

use warpcore_verbs::*;

#[test]
fn the_device_is_iwarp_and_its_port_gid_is_the_ipv4_address() {
    let (a, _b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(a, [198, 18, 0, 7]);
    cfg.prefix_len = 16;
    cfg.mac = Some([0x02, 0x57, 0x43, 0, 0, 7]);
    cfg.engine.max_ird = 8;
    cfg.engine.max_ord = 4;
    let ctx = Context::open(cfg).unwrap();
    let d = ctx.query_device();
    assert_eq!(d.name, "warpcore0");
    assert_eq!(d.transport, Transport::Iwarp);
    assert_eq!((d.max_qp_rd_atom, d.max_qp_init_rd_atom), (8, 4));
    assert_eq!(d.node_guid, 0x0057_43ff_fe00_0007);
    assert_eq!(d.phys_port_cnt, 1);
    assert!(d.max_qp >= 1 && d.max_qp_wr >= 1 && d.max_sge >= 1 && d.max_cqe >= 1);
    let p = ctx.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(
        p.gid,
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 7]
    );
    assert_eq!(p.addr, ([198, 18, 0, 7].into(), 16));
    assert_eq!((p.mtu, p.active_mtu), (1500, 1024));
    assert_eq!(ctx.query_port(2).unwrap_err(), Error::NoSuchPort(2));
}

/// The port reports the in-memory link's MTU, whatever `EngineConfig::mtu` said, as it
/// reports a DPDK port's: the TCP takes its MSS from the device, so an engine MTU above the
/// link's was reported but never used, and one below it was reported while the segments
/// were larger.
#[test]
fn the_port_reports_the_link_mtu_not_the_engine_setting() {
    for (link_mtu, engine_mtu, active) in
        [(9000, 1500, 4096), (1500, 9000, 1024), (4000, 576, 2048)]
    {
        let (a, _b) = link_pair(&LinkConfig {
            mtu: link_mtu,
            ..LinkConfig::default()
        });
        let mut cfg = Config::new(a, [198, 18, 0, 7]);
        cfg.engine.mtu = engine_mtu;
        let ctx = Context::open(cfg).unwrap();
        let p = ctx.query_port(1).unwrap();
        assert_eq!(
            (p.mtu, p.active_mtu),
            (link_mtu, active),
            "a link of MTU {link_mtu} with EngineConfig::mtu {engine_mtu}"
        );
    }
    // A link below the engine's floor is refused, named, as the configuration would be.
    let (a, _b) = link_pair(&LinkConfig {
        mtu: 500,
        ..LinkConfig::default()
    });
    match Context::open(Config::new(a, [198, 18, 0, 7])) {
        Err(Error::Config(e)) => assert_eq!(e.field, "mtu", "{e}"),
        Err(e) => panic!("a 500-octet link: {e}"),
        Ok(_) => panic!("a 500-octet link was accepted"),
    }
}
