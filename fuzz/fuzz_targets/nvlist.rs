//! `NvList::decode` (XDR or native, chosen by the stream's header), the zdb-style dump, and
//! the XDR round trip: re-encoding a decoded list and decoding it again must give the same
//! bytes (compared as bytes, since a double may be NaN).
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::nvlist::NvList;
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    let Ok(nv) = NvList::decode(data) else { return };
    let _ = nv.to_string();
    let _ = nv.encoded_size();
    let _ = nv.encode_native(ByteOrder::Big);
    let xdr = nv.encode();
    let again = NvList::decode(&xdr).expect("re-encoded nvlist must decode");
    assert_eq!(again.encode(), xdr, "XDR round trip");
});
