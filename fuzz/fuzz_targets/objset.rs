//! `ObjsetPhys::parse` in both byte orders, then re-encoding at the three objset sizes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::objset::{ObjsetPhys, OBJSET_PHYS_SIZE_V1, OBJSET_PHYS_SIZE_V2, OBJSET_PHYS_SIZE_V3};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let Ok(os) = ObjsetPhys::parse(data, order) else { continue };
        for size in [OBJSET_PHYS_SIZE_V1, OBJSET_PHYS_SIZE_V2, OBJSET_PHYS_SIZE_V3] {
            let _ = os.encode(size, order);
        }
    }
});
