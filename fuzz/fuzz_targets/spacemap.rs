//! Space maps: the `space_map_phys_t` bonus and the entry stream, in both byte orders.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::spacemap::{decode_entries, SpaceMapPhys};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        if let Ok(phys) = SpaceMapPhys::parse(data, order) {
            let _ = phys.encode(order);
        }
        if let Ok(entries) = decode_entries(data, order) {
            let words: usize = entries.iter().map(|e| e.words()).sum();
            assert_eq!(words * 8, data.len(), "entries must cover the stream");
            let _ = entries.iter().filter(|e| e.is_padding()).count();
        }
    }
});
