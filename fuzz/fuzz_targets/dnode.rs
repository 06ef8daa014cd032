//! `DnodePhys::parse` in both byte orders, its derived sizes, and re-encoding into a buffer of
//! the size the dnode claims.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::dnode::DnodePhys;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let Ok(dn) = DnodePhys::parse(data, order) else { continue };
        let _ = (dn.slots(), dn.data_block_size(), dn.indirect_block_size(), dn.used_bytes());
        let _ = dn.is_free();
        let size = dn.size_bytes();
        if size <= 1 << 14 {
            let mut buf = vec![0u8; size];
            let _ = dn.encode_into(&mut buf, order);
        }
    }
});
