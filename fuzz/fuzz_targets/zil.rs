//! Intent log blocks and records: `split_block` (slim and old layouts, both byte orders),
//! then `parse_records` of what it returns and of the raw input, re-encoding what parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::zil::{parse_records, split_block};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    for order in [ByteOrder::Little, ByteOrder::Big] {
        for slim in [true, false] {
            if let Ok((_next, recs)) = split_block(data, slim, order) {
                let _ = parse_records(recs, order);
            }
        }
        let (recs, _) = parse_records(data, order);
        for r in recs {
            let _ = r.encode(order);
        }
    }
});
