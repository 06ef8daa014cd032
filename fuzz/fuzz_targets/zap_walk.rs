//! Whole fat-ZAP listings (`ondisk::zap::fat_zap_entries`, what `zap::list` runs) over
//! arbitrary objects: header, embedded or external pointer table, leaves, holes, repeated
//! blocks. Input: byte 0 = byte order (bit 0), block shift 9 + ((byte >> 1) & 7) clamped to
//! 17, and bit 7 = a `maxblkid` of 2^40 (else byte 1); then the object's blocks in order
//! (the last one zero-padded). An all-zero block is a hole; a block's identity is its
//! contents, so two equal blocks are "the same block". Asserts the walk reads no block id
//! twice beyond the one repeat that ends it, and that names are checked as host names.
#![no_main]
use libfuzzer_sys::fuzz_target;
use ondisk::zap::{fat_zap_entries, FatZapBlocks, FatZapHeader, FatZapObject};
use ondisk::ByteOrder;
use std::sync::Arc;

struct Blocks<'a> {
    blocks: &'a [Vec<u8>],
    reads: usize,
}

impl FatZapBlocks for Blocks<'_> {
    type Error = ondisk::Error;
    fn block(&mut self, blkid: u64) -> Result<Option<(Vec<u8>, Arc<Vec<u8>>)>, ondisk::Error> {
        self.reads += 1;
        let b = usize::try_from(blkid).ok().and_then(|i| self.blocks.get(i));
        Ok(b.filter(|b| b.iter().any(|&x| x != 0)).map(|b| (b.clone(), Arc::new(b.clone()))))
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, max, rest @ ..] = data else { return };
    let order = if flags & 1 == 0 { ByteOrder::Little } else { ByteOrder::Big };
    let shift = (9 + u32::from((flags >> 1) & 7)).min(17);
    let maxblkid = if flags & 0x80 != 0 { 1 << 40 } else { u64::from(*max) };
    let bs = 1usize << shift;
    let blocks: Vec<Vec<u8>> = rest
        .chunks(bs)
        .map(|c| {
            let mut b = c.to_vec();
            b.resize(bs, 0);
            b
        })
        .collect();
    let Some(b0) = blocks.first() else { return };
    let Ok(hdr) = FatZapHeader::parse(b0, order) else { return };
    let mut src = Blocks { blocks: &blocks, reads: 0 };
    let obj = FatZapObject { block_size: bs as u64, maxblkid, order };
    if let Ok(entries) = fat_zap_entries(&hdr, b0, obj, &mut src) {
        assert!(src.reads <= blocks.len(), "{} reads of {} blocks", src.reads, blocks.len());
        for e in entries.iter().take(64) {
            let _ = e.values_u64();
            if let ondisk::zap::ZapName::Str(s) = &e.name {
                let _ = std::str::from_utf8(s);
            }
        }
    }
});
