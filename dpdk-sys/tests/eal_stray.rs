//! Arguments the EAL passes over (anything that is not an option, such as the `1` of
//! `-l 0 1`: DPDK's getopt moves them past the options and `rte_eal_init` ignores them) are
//! an error naming them, not an EAL silently set up otherwise than asked. (Its own test
//! binary: the EAL can be initialised once per process.)

use warpcore_dpdk_sys::{EalBuilder, Error};

#[test]
fn arguments_the_eal_passes_over_are_named() {
    let err = EalBuilder::for_test("eal_stray", 0, 64)
        .args("1 --no-telemetry stray".split_whitespace())
        .init()
        .expect_err("`1` and `stray` are no EAL options");
    let text = err.to_string();
    assert!(
        matches!(err, Error::EalInit { ref reason, .. }
            if reason.contains(r#"["1", "stray"]"#) && reason.contains("not taken")),
        "{text}"
    );
    assert!(matches!(
        EalBuilder::new("eal_stray").init(),
        Err(Error::EalAlreadyInitialised)
    ));
}
