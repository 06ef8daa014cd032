//! `parse_gang_header` in both byte orders, and the display of each child pointer.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::blkptr::parse_gang_header;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        if let Ok(bps) = parse_gang_header(data, order) {
            for bp in bps {
                let _ = bp.to_string();
                let _ = bp.embedded_payload();
            }
        }
    }
});
