//! The `bpobj_phys_t` bonus in both byte orders (its data, an array of block pointers, is
//! covered by the blkptr target).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::bpobj::BpobjPhys;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let _ = BpobjPhys::parse(data, order);
    }
});
