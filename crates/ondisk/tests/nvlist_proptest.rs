//! Property tests: XDR and native round trips of arbitrary nvlists, and no panics on arbitrary
//! or corrupted bytes for the nvlist, label and uberblock parsers.

use proptest::collection::vec;
use proptest::prelude::*;
use rzfs_ondisk::label::{parse_bootenv, parse_vdev_phys, LabelConfig, VdevTreeConfig};
use rzfs_ondisk::nvlist::{NvList, NvValue};
use rzfs_ondisk::uberblock::UberblockPhys;
use rzfs_ondisk::ByteOrder;

/// Strings libnvpair can hold: no NUL.
fn name() -> impl Strategy<Value = String> {
    "[a-z_:.]{0,12}|[^\u{0}]{0,6}"
}

fn scalar() -> impl Strategy<Value = NvValue> {
    use NvValue as V;
    prop_oneof![
        Just(V::Boolean),
        any::<u8>().prop_map(V::Byte),
        any::<i8>().prop_map(V::Int8),
        any::<u8>().prop_map(V::Uint8),
        any::<i16>().prop_map(V::Int16),
        any::<u16>().prop_map(V::Uint16),
        any::<i32>().prop_map(V::Int32),
        any::<u32>().prop_map(V::Uint32),
        any::<i64>().prop_map(V::Int64),
        any::<u64>().prop_map(V::Uint64),
        any::<i64>().prop_map(V::HrTime),
        any::<bool>().prop_map(V::BooleanValue),
        (-1e300f64..1e300).prop_map(V::Double),
        name().prop_map(V::String),
    ]
}

fn array() -> impl Strategy<Value = NvValue> {
    use NvValue as V;
    prop_oneof![
        vec(any::<u8>(), 0..9).prop_map(V::ByteArray),
        vec(any::<i8>(), 0..5).prop_map(V::Int8Array),
        vec(any::<u8>(), 0..5).prop_map(V::Uint8Array),
        vec(any::<i16>(), 0..5).prop_map(V::Int16Array),
        vec(any::<u16>(), 0..5).prop_map(V::Uint16Array),
        vec(any::<i32>(), 0..5).prop_map(V::Int32Array),
        vec(any::<u32>(), 0..5).prop_map(V::Uint32Array),
        vec(any::<i64>(), 0..5).prop_map(V::Int64Array),
        vec(any::<u64>(), 0..5).prop_map(V::Uint64Array),
        vec(any::<bool>(), 0..5).prop_map(V::BooleanArray),
        vec(name(), 0..4).prop_map(V::StringArray),
    ]
}

fn list_of(v: impl Strategy<Value = NvValue>) -> impl Strategy<Value = NvList> {
    (vec((name(), v), 0..6), 0u32..4).prop_map(|(pairs, nvflag)| NvList { pairs, nvflag })
}

fn nvlist() -> impl Strategy<Value = NvList> {
    let leaf = prop_oneof![scalar(), array()];
    let value = leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            list_of(inner.clone()).prop_map(NvValue::NvList),
            vec(list_of(inner), 0..3).prop_map(NvValue::NvListArray),
        ]
    });
    list_of(value)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn xdr_round_trip(nv in nvlist()) {
        let b = nv.encode();
        prop_assert_eq!(b.len(), nv.encoded_size());
        prop_assert_eq!(b.len() % 4, 0);
        let back = NvList::decode(&b).unwrap();
        prop_assert_eq!(&back, &nv);
        prop_assert_eq!(back.encode(), b);
    }

    #[test]
    fn native_round_trip(nv in nvlist(), big in any::<bool>()) {
        let order = if big { ByteOrder::Big } else { ByteOrder::Little };
        let b = nv.encode_native(order);
        let back = NvList::decode(&b).unwrap();
        prop_assert_eq!(&back, &nv);
        prop_assert_eq!(back.encode_native(order), b);
    }

    #[test]
    fn decode_arbitrary_bytes_never_panics(enc in 0u8..3, end in 0u8..3, body in vec(any::<u8>(), 0..512)) {
        let mut b = vec![enc, end, 0, 0];
        b.extend_from_slice(&body);
        let _ = NvList::decode(&b);
        let _ = parse_vdev_phys(&b);
    }

    #[test]
    fn decode_corrupted_encodings_never_panics(
        nv in nvlist(),
        native in any::<bool>(),
        flips in vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = if native { nv.encode_native(ByteOrder::Little) } else { nv.encode() };
        for (i, v) in flips {
            let i = i.index(b.len());
            b[i] = v;
        }
        if let Ok(l) = NvList::decode(&b) {
            let _ = LabelConfig::from_nvlist(&l);
            let _ = VdevTreeConfig::from_nvlist(&l);
            let _ = l.dump(4);
        }
        let n = cut.index(b.len() + 1);
        let _ = NvList::decode(&b[..n]);
    }

    #[test]
    fn uberblock_and_bootenv_never_panic(b in vec(any::<u8>(), 0..1100), magic in any::<bool>()) {
        let mut b = b;
        if magic && b.len() >= 8 {
            b[..8].copy_from_slice(&0x00ba_b10cu64.to_be_bytes());
        }
        if let Ok(ub) = UberblockPhys::parse(&b) {
            let re = ub.encode(1024);
            prop_assert_eq!(UberblockPhys::parse(&re).unwrap(), ub);
        }
        let _ = parse_bootenv(&b);
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let mut nv = NvList::new();
    for _ in 0..200 {
        let mut outer = NvList::new();
        outer.add_nvlist("n", nv);
        nv = outer;
    }
    assert!(NvList::decode(&nv.encode()).is_err());
    assert!(NvList::decode(&nv.encode_native(ByteOrder::Little)).is_err());
}

#[test]
fn huge_counts_are_refused_without_allocating() {
    // A uint64 array pair claiming 2^31-1 elements in a tiny buffer.
    let mut nv = NvList::new();
    nv.add_u64_array("a", vec![1]);
    let mut b = nv.encode();
    // nelem is the word after the type; the xdr array count follows it.
    let pos = b.windows(4).position(|w| w == [0, 0, 0, 16]).unwrap();
    b[pos + 4..pos + 8].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    b[pos + 8..pos + 12].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
    assert!(NvList::decode(&b).is_err());
}
