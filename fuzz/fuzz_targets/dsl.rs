//! DSL bonus buffers: `DslDirPhys::parse` and `DslDatasetPhys::parse` in both byte orders, each
//! with an encode/parse round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::dsl::{DslDatasetPhys, DslDirPhys};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        if let Ok(dir) = DslDirPhys::parse(data, order) {
            assert_eq!(DslDirPhys::parse(&dir.encode(order), order).ok(), Some(dir));
        }
        if let Ok(ds) = DslDatasetPhys::parse(data, order) {
            let _ = ds.is_snapshot();
            assert_eq!(DslDatasetPhys::parse(&ds.encode(order), order).ok(), Some(ds));
        }
    }
});
