//! EAL set-up failures name what failed, and the EAL refuses a second initialisation.
//! (Its own test binary: the EAL can be initialised once per process.)

use warpcore_dpdk_sys::{EalBuilder, Error};

#[test]
fn bad_vdev_is_named_and_second_init_is_refused() {
    let err = EalBuilder::for_test("eal_errors", 0, 64)
        .vdev("net_wcnet_no_such_driver0")
        .init()
        .expect_err("an unknown vdev driver must fail");
    let text = err.to_string();
    assert!(
        text.contains("net_wcnet_no_such_driver0"),
        "error names the argument: {text}"
    );
    assert!(matches!(err, Error::EalInit { .. }));
    let again = EalBuilder::new("eal_errors").no_pci().init();
    assert!(
        matches!(again, Err(Error::EalAlreadyInitialised)),
        "{again:?}"
    );
}
