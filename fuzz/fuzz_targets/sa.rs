//! System-attribute records (`sa_hdr_phys_t` + attributes) as a ZPL reader meets them: byte
//! order from the magic, the layout named by the header, the registry of a real pool, then
//! `decode_attrs`, `attr_u64s` on each attribute, and a decode/encode/decode round trip of the
//! attribute values. A header naming an unknown layout gets one made from the input's tail,
//! so odd layouts are exercised too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::sa::{attr_u64s, decode_attrs, encode_attrs, sa_byte_order, SaHdrPhys, SaLayouts, SaRegistry};

/// The REGISTRY ZAP of OpenZFS's `unclean_export` test pool (`zdb -dddd`, SA attr registration).
const REGISTRY: [(&str, u64); 20] = [
    ("ZPL_ATIME", 0x1000_0000),
    ("ZPL_MTIME", 0x1000_0001),
    ("ZPL_CTIME", 0x1000_0002),
    ("ZPL_CRTIME", 0x1000_0003),
    ("ZPL_GEN", 0x0800_0004),
    ("ZPL_MODE", 0x0800_0005),
    ("ZPL_SIZE", 0x0800_0006),
    ("ZPL_PARENT", 0x0800_0007),
    ("ZPL_LINKS", 0x0800_0008),
    ("ZPL_XATTR", 0x0800_0009),
    ("ZPL_RDEV", 0x0800_000a),
    ("ZPL_FLAGS", 0x0800_000b),
    ("ZPL_UID", 0x0800_000c),
    ("ZPL_GID", 0x0800_000d),
    ("ZPL_PAD", 0x2000_000e),
    ("ZPL_ZNODE_ACL", 0x5803_000f),
    ("ZPL_DACL_COUNT", 0x0800_0010),
    ("ZPL_SYMLINK", 0x0003_0011),
    ("ZPL_SCANSTAMP", 0x2003_0012),
    ("ZPL_DACL_ACES", 0x0004_0013),
];

fuzz_target!(|data: &[u8]| {
    let Some(order) = sa_byte_order(data) else { return };
    let Ok(hdr) = SaHdrPhys::parse(data, order) else { return };
    let registry = SaRegistry::for_zpl(REGISTRY);
    let layouts = SaLayouts::from_entries([
        ("2", vec![5, 6, 4, 12, 13, 7, 11, 0, 1, 2, 3, 8, 16, 19]),
        ("3", vec![5, 6, 4, 12, 13, 7, 11, 0, 1, 2, 3, 8, 16, 17]),
    ])
    .expect("fixed layouts");
    let tail: Vec<u16> = data.iter().rev().take(6).map(|&b| u16::from(b % 24)).collect();
    let layout = layouts.get(hdr.effective_layout()).unwrap_or(&tail);
    let Ok(attrs) = decode_attrs(data, order, layout, &registry) else { return };
    for (_, bytes) in &attrs {
        let _ = attr_u64s(bytes, order);
    }
    let values: Vec<&[u8]> = attrs.iter().map(|(_, v)| *v).collect();
    if let Ok(enc) = encode_attrs(order, hdr.layout_num, layout, &registry, &values) {
        let again = decode_attrs(&enc, order, layout, &registry).expect("re-encoded SA decodes");
        assert_eq!(again, attrs, "SA round trip");
    }
});
