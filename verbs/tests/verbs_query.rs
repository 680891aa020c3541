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
