//! `BlkPtr::parse` in both byte orders, then everything that reads its fields: the embedded
//! payload, the sizes, `verify`, the zdb-style `Display`, and an encode/parse round trip.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::blkptr::BlkPtr;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        let Ok(bp) = BlkPtr::parse(data, order) else { continue };
        let _ = bp.embedded_payload();
        let _ = (bp.lsize(), bp.psize(), bp.ndvas(), bp.logical_birth(), bp.physical_birth());
        let _ = (bp.fill_count(), bp.byte_order(), bp.is_hole(), bp.is_gang(), bp.is_redacted());
        for d in &bp.dva {
            let _ = (d.vdev(), d.grid(), d.asize(), d.offset(), d.is_gang());
        }
        let _ = bp.verify(1);
        let _ = bp.verify(u64::MAX);
        let _ = bp.to_string();
        assert_eq!(BlkPtr::parse(&bp.encode(order), order).ok(), Some(bp), "encode round trip");
    }
});
