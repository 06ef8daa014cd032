//! Known-answer tests for the nvlist codec against bytes produced by OpenZFS's own libnvpair.
//!
//! * `nvl_all_types_*.nvlist`: every data type, packed by libnvpair (userland, x86-64) through
//!   `tests/data/nvl_gen_libnvpair.py`; `nvl_all_types.dump.txt` is libnvpair's
//!   `dump_nvlist(nvl, 4)` of the same list.
//! * `zpool_cache_ztest_native_le.nvlist`: a `zpool.cache` written by `ztest` (native encoding).

use rzfs_ondisk::nvlist::{NvList, NvValue, NV_UNIQUE_NAME, NV_UNIQUE_NAME_TYPE};
use rzfs_ondisk::ByteOrder;

fn data(name: &str) -> Vec<u8> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// libnvpair's XDR output records the packing host's endian; ours records this host's.
fn with_endian_of(mut ours: Vec<u8>, theirs: &[u8]) -> Vec<u8> {
    ours[1] = theirs[1];
    ours
}

#[test]
fn all_types_xdr_decodes_and_reencodes_byte_exact() {
    let bytes = data("nvl_all_types_xdr.nvlist");
    let nv = NvList::decode(&bytes).unwrap();
    assert_eq!(nv.nvflag, NV_UNIQUE_NAME);
    assert_eq!(nv.get("flag"), Some(&NvValue::Boolean));
    assert_eq!(nv.get_bool("bv"), Some(true));
    assert_eq!(nv.get("byte"), Some(&NvValue::Byte(0xab)));
    assert_eq!(nv.get("i16"), Some(&NvValue::Int16(300)));
    assert_eq!(nv.get("u16"), Some(&NvValue::Uint16(65000)));
    assert_eq!(nv.get("i32"), Some(&NvValue::Int32(-70000)));
    assert_eq!(nv.get_u32("u32"), Some(4_000_000_000));
    assert_eq!(nv.get_i64("i64"), Some(-5_000_000_000));
    assert_eq!(nv.get_u64("u64"), Some(0xfedc_ba98_7654_3210));
    assert_eq!(nv.get_str("str"), Some("hello, world"));
    assert_eq!(nv.get_str("empty"), Some(""));
    assert_eq!(nv.get("hrt"), Some(&NvValue::HrTime(123_456_789_012)));
    assert_eq!(nv.get("dbl"), Some(&NvValue::Double(3.25)));
    assert_eq!(nv.get_bytes("ba"), Some(&[1u8, 2, 3, 4, 5][..]));
    assert_eq!(nv.get("boola"), Some(&NvValue::BooleanArray(vec![true, false, true])));
    assert_eq!(nv.get_u64_array("u64a"), Some(&[1u64, 2, 3][..]));
    assert_eq!(nv.get_u64_array("u64a_empty"), Some(&[][..]));
    assert_eq!(nv.get("i32a_empty"), Some(&NvValue::Int32Array(vec![])));
    let stra = nv.get_str_array("stra").unwrap();
    assert_eq!(stra, ["a", "", "xyz12"]);
    let nested = nv.get_nvlist("nested").unwrap();
    assert_eq!(nested.get_str("path"), Some("/dev/sda1"));
    let deep = nested.get_nvlist("deep").unwrap();
    assert_eq!(deep.nvflag, NV_UNIQUE_NAME_TYPE);
    assert!(deep.contains("deepflag"));
    let kids = nv.get_nvlist_array("children").unwrap();
    assert_eq!(kids.len(), 2);
    assert_eq!(kids[1].get_nvlist_array("kids").unwrap()[0].get_u64("id"), Some(0));
    assert_eq!(nv.get_nvlist_array("no_children"), Some(&[][..]));
    assert!(nv.get_nvlist("empty_list").unwrap().is_empty());

    // Byte-exact, including the phantom words libnvpair counts for empty int arrays, except
    // for the byte/uint8 words: userland libtirpc sign-extends chars ≥ 0x80, the Linux kernel
    // (and we) zero-extend them.
    let ours = with_endian_of(nv.encode(), &bytes);
    assert_eq!(nv.encoded_size(), bytes.len());
    assert_eq!(ours.len(), bytes.len());
    let mut diffs = 0;
    for (a, b) in ours.chunks(4).zip(bytes.chunks(4)) {
        if a != b {
            let (a, b) =
                (u32::from_be_bytes(a.try_into().unwrap()), u32::from_be_bytes(b.try_into().unwrap()));
            assert!((0x80..0x100).contains(&a) && b == a | 0xffff_ff00, "{a:#x} vs {b:#x}");
            diffs += 1;
        }
    }
    assert_eq!(diffs, 3, "byte 0xab, uint8 200, uint8_array[0] 250");
}

#[test]
fn all_types_native_matches_xdr_and_reencodes() {
    let xdr = NvList::decode(&data("nvl_all_types_xdr.nvlist")).unwrap();
    let bytes = data("nvl_all_types_native_le.nvlist");
    let nv = NvList::decode(&bytes).unwrap();
    assert_eq!(nv, xdr);
    assert_eq!(nv.encode_native(ByteOrder::Little), bytes);
    // The same list in big-endian native decodes to the same values.
    let be = nv.encode_native(ByteOrder::Big);
    assert_eq!(NvList::decode(&be).unwrap(), nv);
}

#[test]
fn sign_extended_small_ints_from_userland_decode() {
    // Userland libtirpc sign-extends negative chars and shorts; the kernel zero-extends.
    let bytes = data("nvl_all_types_neg_xdr.nvlist");
    let nv = NvList::decode(&bytes).unwrap();
    assert_eq!(nv.get("i8"), Some(&NvValue::Int8(-5)));
    assert_eq!(nv.get("i16"), Some(&NvValue::Int16(-300)));
    assert_eq!(nv.get("i8a"), Some(&NvValue::Int8Array(vec![1, -2, 3])));
    assert_eq!(nv.get("i16a"), Some(&NvValue::Int16Array(vec![-1, 2])));
    // Our (kernel-style) re-encoding differs from userland only in those words.
    let ours = with_endian_of(nv.encode(), &bytes);
    assert_eq!(ours.len(), bytes.len());
    assert_eq!(NvList::decode(&ours).unwrap(), nv);
}

#[test]
fn dump_matches_libnvpair() {
    let nv = NvList::decode(&data("nvl_all_types_xdr.nvlist")).unwrap();
    let want = String::from_utf8(data("nvl_all_types.dump.txt")).unwrap();
    assert_eq!(nv.dump(4), want);
}

#[test]
fn zpool_cache_native() {
    let bytes = data("zpool_cache_ztest_native_le.nvlist");
    assert_eq!(bytes[0], 0, "native encoding");
    let nv = NvList::decode(&bytes).unwrap();
    let pool = nv.get_nvlist("ztest").unwrap();
    assert_eq!(pool.get_u64("version"), Some(5000));
    assert_eq!(pool.get_str("name"), Some("ztest"));
    let tree = pool.get_nvlist("vdev_tree").unwrap();
    assert_eq!(tree.get_str("type"), Some("root"));
    assert_eq!(tree.get_nvlist_array("children").unwrap().len(), 3);
    assert_eq!(nv.encode_native(ByteOrder::Little), bytes);
    // And the XDR form of the same list survives a round trip.
    assert_eq!(NvList::decode(&nv.encode()).unwrap(), nv);
}
