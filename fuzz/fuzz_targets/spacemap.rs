//! Space maps: the `space_map_phys_t` bonus and the entry stream, in both byte orders; then
//! the entries replayed onto a small metaslab (`metaslab::SpaceMapReplay`, what a read-write
//! import and `rzdb -b` do with every map), which must refuse, never panic on, entries that
//! leave the metaslab, allocate allocated space or free free space.
#![no_main]
use libfuzzer_sys::fuzz_target;
use metaslab::SpaceMapReplay;
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
            // A 16 MiB metaslab at 1 GiB of vdev 0, 512-byte units.
            let mut r = SpaceMapReplay::new(0, 64, 1 << 30, 16 << 20, 9);
            for e in &entries {
                if r.apply(e).is_err() {
                    break;
                }
            }
            assert!(r.alloc_space() <= 16 << 20);
            assert!(r.allocated.iter().all(|(s, e)| s >= 1 << 30 && e <= (1 << 30) + (16 << 20)));
        }
    }
});
