//! Property tests: every parser of this layer's object records returns (never panics) on
//! arbitrary bytes, and encoders round-trip.

use proptest::prelude::*;
use rzfs_ondisk::bpobj::BpobjPhys;
use rzfs_ondisk::dmu_types::DmuObjectType;
use rzfs_ondisk::dsl::{DslDatasetPhys, DslDirPhys};
use rzfs_ondisk::sa::{decode_attrs, SaHdrPhys, SaRegistry};
use rzfs_ondisk::spacemap::{decode_entries, encode_entries, SmEntry, SmType, SpaceMapPhys};
use rzfs_ondisk::zap::*;
use rzfs_ondisk::znode::ZnodePhys;
use rzfs_ondisk::ByteOrder;

fn order() -> impl Strategy<Value = ByteOrder> {
    prop_oneof![Just(ByteOrder::Little), Just(ByteOrder::Big)]
}

/// A valid 1 KiB leaf with a few entries, to be mutated.
fn sample_leaf(order: ByteOrder) -> Vec<u8> {
    let entries: Vec<ZapLeafEntry> = (0..6u64)
        .map(|i| {
            let name = format!("entry-number-{i}-with-a-long-name").into_bytes();
            let h = zap_hash(99, ZapKey::Str(&name), 0).unwrap();
            ZapLeafEntry::with_u64s(ZapName::Str(name), h, 0, &[i, i * 3])
        })
        .collect();
    build_leaf(10, order, 0, 0, 0, &entries).unwrap()
}

fn exercise_leaf(buf: &[u8], order: ByteOrder, shift: u32) {
    if let Ok(leaf) = ZapLeaf::parse(buf, order, shift) {
        let _ = leaf.entries(KeyKind::String);
        let _ = leaf.entries(KeyKind::Uint64);
        for c in 0..40u16 {
            let _ = leaf.chunk(c);
        }
        let h = zap_hash(99, ZapKey::Str(b"entry-number-1-with-a-long-name"), 0).unwrap();
        let _ = leaf.lookup(ZapKey::Str(b"entry-number-1-with-a-long-name"), h);
        let _ = leaf.lookup(ZapKey::U64(&[1, 2]), h);
    }
}

proptest! {
    #[test]
    fn zap_parsers_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..1100),
                               o in order(), shift in 5u32..20, hash in any::<u64>()) {
        let _ = block_kind(&buf, o);
        let _ = MicroZap::parse(&buf, o);
        if let Ok(h) = FatZapHeader::parse(&buf, o) {
            let _ = h.ptrtbl_slot(hash, shift);
        }
        let _ = embedded_ptrtbl_entry(&buf, o, hash);
        let _ = ptrtbl_block_entry(&buf, o, (hash % 4096) as usize);
        let _ = leaf_hash_index(hash, shift, (hash >> 48) as u16);
        exercise_leaf(&buf, o, shift);
    }

    #[test]
    fn mutated_leaves_never_panic(o in order(),
                                  edits in proptest::collection::vec((0usize..1024, any::<u8>()), 1..40)) {
        let mut buf = sample_leaf(o);
        for (at, v) in edits {
            buf[at] = v;
        }
        exercise_leaf(&buf, o, 10);
    }

    #[test]
    fn record_parsers_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..400),
                                  o in order(),
                                  layout in proptest::collection::vec(0u16..30, 0..20)) {
        let _ = SaHdrPhys::parse(&buf, o);
        let _ = decode_attrs(&buf, o, &layout, &SaRegistry::for_zpl([]));
        let _ = ZnodePhys::parse(&buf, o).map(|z| (z.inline_symlink(&buf), z.scanstamp(&buf)));
        let _ = DslDirPhys::parse(&buf, o);
        let _ = DslDatasetPhys::parse(&buf, o);
        let _ = SpaceMapPhys::parse(&buf, o);
        let _ = decode_entries(&buf, o);
        let _ = BpobjPhys::parse(&buf, o);
        for &b in buf.iter().take(8) {
            let t = DmuObjectType::from_u8(b);
            let _ = (t.name(), t.is_metadata(), t.byteswap_kind());
        }
    }

    #[test]
    fn micro_zap_round_trips(names in proptest::collection::btree_set("[a-z]{1,49}", 0..7),
                             salt in any::<u64>(), o in order()) {
        let mut z = MicroZap::new(salt);
        for (i, n) in names.iter().enumerate() {
            z.insert(n.as_bytes(), i as u64 * 1000).unwrap();
        }
        let blk = z.encode(512, o).unwrap();
        prop_assert_eq!(MicroZap::parse(&blk, o).unwrap(), z);
    }

    #[test]
    fn leaf_round_trips(names in proptest::collection::btree_set("[a-zA-Z0-9._:-]{0,80}", 0..12),
                        salt in any::<u64>(), o in order()) {
        let entries: Vec<ZapLeafEntry> = names.iter().enumerate().map(|(i, n)| {
            let h = zap_hash(salt, ZapKey::Str(n.as_bytes()), 0).unwrap();
            ZapLeafEntry::with_u64s(ZapName::Str(n.clone().into_bytes()), h, 0, &vec![i as u64; i % 4])
        }).collect();
        let blk = build_leaf(14, o, 0, 0, 0, &entries).unwrap();
        let leaf = ZapLeaf::parse(&blk, o, 14).unwrap();
        let mut got = leaf.entries(KeyKind::String).unwrap();
        got.sort_by_key(|e| e.chunk);
        prop_assert_eq!(got.len(), entries.len());
        for (g, e) in got.iter().zip(&entries) {
            prop_assert_eq!((&g.name, g.hash, &g.value), (&e.name, e.hash, &e.value));
            let hit = leaf.lookup(e.name.as_key(), e.hash).unwrap().unwrap();
            prop_assert_eq!(&hit.name, &e.name);
        }
    }

    #[test]
    fn space_map_round_trips(raw in proptest::collection::vec(
                                 (0u8..3, any::<bool>(), 0u64..(1 << 40), 1u64..(1 << 20),
                                  proptest::option::of(0u32..(1 << 24))), 0..40),
                             o in order(), bs_shift in 4usize..8) {
        let es: Vec<SmEntry> = raw.into_iter().map(|(k, free, off, run, vdev)| {
            let kind = if free { SmType::Free } else { SmType::Alloc };
            match k {
                0 => SmEntry::Debug { action: free as u8, sync_pass: (run & 0x3ff) as u16, txg: off },
                _ => SmEntry::range(kind, off, run, vdev).unwrap(),
            }
        }).collect();
        let b = encode_entries(&es, o, 1 << bs_shift).unwrap();
        let back: Vec<SmEntry> = decode_entries(&b, o).unwrap();
        let back: Vec<SmEntry> = back.into_iter().filter(|e| !e.is_padding()).collect();
        let want: Vec<SmEntry> = es.into_iter().filter(|e| !e.is_padding()).collect();
        prop_assert_eq!(back, want);
    }
}
