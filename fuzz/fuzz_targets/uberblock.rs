//! `UberblockPhys::parse` (byte order from the magic), its MMP accessors, the comparison used
//! to pick the active uberblock, and an encode/parse round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::uberblock::UberblockPhys;

fuzz_target!(|data: &[u8]| {
    let Ok(ub) = UberblockPhys::parse(data) else { return };
    let _ = (ub.mmp_valid(), ub.mmp_seq(), ub.mmp_interval_ms(), ub.mmp_fail_intervals());
    let _ = (ub.is_checkpoint(), ub.raidz_reflow_state(), ub.raidz_reflow_offset());
    assert!(!ub.better_than(&ub), "an uberblock is not better than itself");
    let again = UberblockPhys::parse(&ub.encode(1024)).expect("re-encoded uberblock must parse");
    assert_eq!(again, ub, "encode round trip");
});
