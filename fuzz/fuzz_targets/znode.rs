//! The pre-SA znode bonus: `ZnodePhys::parse` in both byte orders, the file type, and the
//! inline symlink target and scanstamp that live after the fixed part of the bonus.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::znode::ZnodePhys;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let Ok(zp) = ZnodePhys::parse(data, order) else { continue };
        let _ = zp.file_type();
        let _ = zp.inline_symlink(data);
        let _ = zp.scanstamp(data);
        let _ = zp.encode(order);
    }
});
