//! The pre-SA znode bonus: `ZnodePhys::parse` in both byte orders, the file type, the inline
//! symlink target and scanstamp that live after the fixed part of the bonus, and the ACL
//! entries of `zp_acl` converted between their version-0 and FUID forms (what the writer of
//! ZPL versions 1-4 does with them), both ways.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::znode::{fuid_to_oldaces, oldaces_to_fuid, ZnodePhys, OLDACE_SIZE};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let Ok(zp) = ZnodePhys::parse(data, order) else { continue };
        let _ = zp.file_type();
        let _ = zp.inline_symlink(data);
        let _ = zp.scanstamp(data);
        let _ = zp.encode(order);
        let aces = &zp.acl.ace_data;
        if let Ok(fuid) = oldaces_to_fuid(aces, aces.len() / OLDACE_SIZE) {
            let (back, n) = fuid_to_oldaces(&fuid).expect("converted entries convert back");
            assert_eq!(oldaces_to_fuid(&back, n).expect("round trip"), fuid);
        }
        let _ = fuid_to_oldaces(&aces[..(zp.acl.size as usize).min(aces.len())]);
    }
    // Whole inputs as entry lists of either form.
    let _ = fuid_to_oldaces(data);
    let _ = oldaces_to_fuid(data, data.len() / OLDACE_SIZE + 1);
});
