//! ZAP blocks in both byte orders, dispatched on the block-type word as a reader does: micro
//! ZAP (parse, lookups, re-encode), fat ZAP header (pointer-table lookups), and fat ZAP leaf
//! (hash buckets, chunks, entries as string and u64 keys, lookups). The block shift is the
//! input length's (clamped to 512 B..128 KiB), as the dnode's block size would give it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::zap::{
    block_kind, embedded_ptrtbl_entry, ptrtbl_block_entry, zap_hash, FatZapHeader, KeyKind, MicroZap,
    PtrTblSlot, ZapBlockKind, ZapKey, ZapLeaf,
};
use ondisk::ByteOrder;

fuzz_target!(|data: &[u8]| {
    let shift = match data.len() {
        0 => return,
        n => (usize::BITS - 1 - n.leading_zeros()).clamp(9, 17),
    };
    for order in [ByteOrder::Little, ByteOrder::Big] {
        match block_kind(data, order) {
            Ok(ZapBlockKind::Micro) => micro(data, order),
            Ok(ZapBlockKind::Header) => fat_header(data, order, shift),
            Ok(ZapBlockKind::Leaf) => leaf(data, order, shift),
            Err(_) => {}
        }
    }
});

fn micro(data: &[u8], order: ByteOrder) {
    let Ok(mz) = MicroZap::parse(data, order) else { return };
    for e in &mz.entries {
        let _ = e.name_str();
        let _ = mz.hash_of(&e.name);
        let _ = mz.lookup(&e.name);
    }
    let _ = mz.encode(data.len(), order);
}

fn fat_header(data: &[u8], order: ByteOrder, shift: u32) {
    let Ok(hdr) = FatZapHeader::parse(data, order) else { return };
    let _ = (hdr.hash_bits(), hdr.uses_embedded_ptrtbl());
    for name in [&b"ROOT"[..], b"", b"com.delphix:async_destroy"] {
        let Ok(hash) = zap_hash(hdr.salt, ZapKey::Str(name), hdr.flags) else { continue };
        match hdr.ptrtbl_slot(hash, shift) {
            Ok(PtrTblSlot::Embedded { index }) => {
                let _ = embedded_ptrtbl_entry(data, order, index);
            }
            Ok(PtrTblSlot::External { word, .. }) => {
                let _ = ptrtbl_block_entry(data, order, word);
            }
            Err(_) => {}
        }
    }
}

fn leaf(data: &[u8], order: ByteOrder, shift: u32) {
    let Ok(leaf) = ZapLeaf::parse(data, order, shift) else { return };
    let g = leaf.geometry();
    for i in 0..g.hash_entries.min(64) {
        if let Ok(head) = leaf.hash_slot(i) {
            let _ = leaf.chunk(head);
        }
    }
    let _ = leaf.header.covers(0);
    for kind in [KeyKind::String, KeyKind::Uint64] {
        let Ok(entries) = leaf.entries(kind) else { continue };
        for e in entries.iter().take(16) {
            let _ = (e.value_numints(), e.values_u64());
            let _ = leaf.lookup(e.name.as_key(), e.hash);
        }
    }
}
